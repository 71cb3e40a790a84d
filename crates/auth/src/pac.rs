//! The PAC's logon information (MS-PAC 2.3-2.5): who an Active Directory
//! KDC says the user is, and the groups it put in the ticket, as SIDs for
//! NT ACL access checks.
//!
//! [`logon_info`] takes the whole PAC as MIT's GSSAPI returns it for the
//! name attribute `urn:mspac:` (`gss_get_name_attribute` on the acceptor's
//! source name): a PACTYPE (2.3), its PAC_INFO_BUFFERs (2.4), and the
//! buffers. It decodes the KERB_VALIDATION_INFO buffer (type 1, 2.5), an
//! NDR type serialization (MS-RPCE 2.2.6, version 1), walked linearly: the
//! headers, the top-level pointer, the structure's fixed part, then the
//! pointees in the order of their pointers (a pointee's own pointees right
//! after it). Every count is bounded by the bytes left and by a maximum;
//! every pointee must end where the next begins.
//!
//! # Signatures
//!
//! The PAC's signatures are not checked here, because MIT krb5 already did
//! before the PAC can reach us. When the GSSAPI acceptor decrypts the
//! ticket with the keytab key, MIT's mspac authdata plugin (`mspac_verify`
//! in src/lib/krb5/krb/pac.c, MIT krb5 1.20 as in Debian 12) calls
//! `krb5_pac_verify` with that service key: it checks the server checksum
//! (MS-PAC 2.8.1) and that PAC_CLIENT_INFO names the ticket's client and
//! authtime. A PAC that fails is not refused but marked unverified, and
//! `mspac_get_attribute` then answers ENOENT as if there were no PAC
//! ("If it didn't verify, pretend it didn't exist"); for a verified one it
//! returns `authenticated = 1`, as the Samba AD DC test sees
//! (tests/e2e/test_samba_dc.py). The KDC checksum (2.8.2) needs the
//! krbtgt key and is not checked, as by any service holding only its own
//! key: whoever holds the service key could forge the PAC, as they could
//! forge the whole ticket. A caller that sets `urn:mspac:` itself
//! (`gss_set_name_attribute`) gets no check at all, so only the acceptor's
//! source name is a trustworthy source.
//!
//! Group attributes (SE_GROUP_ENABLED, SE_GROUP_USE_FOR_DENY_ONLY, ...)
//! are not consulted: a KDC issues its groups mandatory and enabled.

use crate::AuthError;
use smbq_wire::reader::utf16le;
use smbq_wire::security::Sid;
use smbq_wire::Reader;
use std::collections::HashSet;

/// At most this many PAC_INFO_BUFFERs (a real PAC has about ten).
const MAX_BUFFERS: u32 = 256;
/// At most this many entries in each of GroupIds, ExtraSids and
/// ResourceGroupIds (Active Directory caps a token near 1024 SIDs).
pub const MAX_GROUPS: u32 = 1024;
/// At most 15 SubAuthority values in a SID (MS-DTYP 2.4.2.2).
const MAX_SUB_AUTHORITIES: usize = 15;

/// ulType of the KERB_VALIDATION_INFO buffer (MS-PAC 2.4).
const LOGON_INFO: u32 = 1;
/// UserFlags D: ExtraSids is populated (MS-PAC 2.5).
const EXTRA_SIDS: u32 = 0x20;
/// UserFlags H: ResourceGroupDomainSid and ResourceGroupIds are populated.
const RESOURCE_GROUPS: u32 = 0x200;

/// Who the PAC says the user is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogonInfo {
    /// EffectiveName: the account name (sAMAccountName), `alice`.
    pub account: String,
    /// LogonDomainId + UserId.
    pub user: Sid,
    /// LogonDomainId + each GroupIds RelativeId, LogonDomainId +
    /// PrimaryGroupId, the ExtraSids (when UserFlags has D), and
    /// ResourceGroupDomainSid + each ResourceGroupIds RelativeId (when
    /// UserFlags has H); in that order, each SID once.
    pub groups: Vec<Sid>,
}

fn bad(what: &'static str) -> AuthError {
    AuthError::Malformed(what)
}

/// Decodes the logon information of a PAC (module doc); a PAC with any
/// buffer outside the PAC is an error. A PAC without a KERB_VALIDATION_INFO
/// buffer is `None`: MIT's KDC (1.20 and later) puts in a PAC of client
/// information and signatures only, which names no groups.
pub fn logon_info(pac: &[u8]) -> Result<Option<LogonInfo>, AuthError> {
    logon_info_buffer(pac)?.map(decode_validation_info).transpose()
}

/// The bytes of the first buffer of type 1 (MS-PAC 2.4: "Additional
/// logon information buffers MUST be ignored").
fn logon_info_buffer(pac: &[u8]) -> Result<Option<&[u8]>, AuthError> {
    let mut r = Reader::new(pac);
    let count = r.u32().map_err(|_| bad("PAC: truncated PACTYPE"))?;
    let version = r.u32().map_err(|_| bad("PAC: truncated PACTYPE"))?;
    if version != 0 {
        return Err(bad("PAC: Version is not 0"));
    }
    if count > MAX_BUFFERS {
        return Err(bad("PAC: too many buffers"));
    }
    // 16 bytes per PAC_INFO_BUFFER; count <= 256 keeps this small.
    let header_end = 8 + 16 * count as usize;
    let mut found = None;
    for _ in 0..count {
        let ty = r.u32().map_err(|_| bad("PAC: truncated PAC_INFO_BUFFER"))?;
        let size = r.u32().map_err(|_| bad("PAC: truncated PAC_INFO_BUFFER"))?;
        let offset = r.u64().map_err(|_| bad("PAC: truncated PAC_INFO_BUFFER"))?;
        let start = usize::try_from(offset).map_err(|_| bad("PAC: buffer outside the PAC"))?;
        if start < header_end || !start.is_multiple_of(8) {
            return Err(bad("PAC: buffer offset inside the header or unaligned"));
        }
        let body = start
            .checked_add(size as usize)
            .and_then(|end| pac.get(start..end))
            .ok_or(bad("PAC: buffer outside the PAC"))?;
        if ty == LOGON_INFO && found.is_none() {
            found = Some(body);
        }
    }
    Ok(found)
}

/// Pads `r` to a multiple of `n` from the start of the NDR stream.
fn align(r: &mut Reader<'_>, n: usize) -> Result<(), AuthError> {
    let pad = (n - r.pos() % n) % n;
    r.skip(pad).map_err(|_| bad("PAC: truncated logon information"))
}

fn u32(r: &mut Reader<'_>) -> Result<u32, AuthError> {
    align(r, 4)?;
    r.u32().map_err(|_| bad("PAC: truncated logon information"))
}

fn u16(r: &mut Reader<'_>) -> Result<u16, AuthError> {
    align(r, 2)?;
    r.u16().map_err(|_| bad("PAC: truncated logon information"))
}

/// A unique pointer's referent id: whether a pointee follows later.
fn pointer(r: &mut Reader<'_>) -> Result<bool, AuthError> {
    Ok(u32(r)? != 0)
}

/// An RPC_UNICODE_STRING's fixed part (MS-DTYP 2.3.10): Length in bytes,
/// MaximumLength, and the Buffer pointer.
struct StringHead {
    len: u16,
    present: bool,
}

fn string_head(r: &mut Reader<'_>) -> Result<StringHead, AuthError> {
    let len = u16(r)?;
    let _max_len = u16(r)?;
    let present = pointer(r)?;
    if !present && len != 0 {
        return Err(bad("PAC: string with a length and no buffer"));
    }
    Ok(StringHead { len, present })
}

/// The string's pointee, a conformant varying array of UTF-16 units:
/// MaximumCount, Offset (0), ActualCount (Length / 2), the units.
fn string_body<'a>(r: &mut Reader<'a>, head: &StringHead) -> Result<&'a [u8], AuthError> {
    if !head.present {
        return Ok(&[]);
    }
    let max = u32(r)?;
    let offset = u32(r)?;
    let actual = u32(r)?;
    if offset != 0 || actual > max || u64::from(actual) * 2 != u64::from(head.len) {
        return Err(bad("PAC: string counts disagree with its length"));
    }
    r.take(usize::from(head.len)).map_err(|_| bad("PAC: truncated string"))
}

/// A conformant array's MaximumCount, which must be the count its
/// size_is field gave, with `count * elem` bytes left for it.
fn array_count(r: &mut Reader<'_>, count: u32, elem: usize) -> Result<(), AuthError> {
    if count > MAX_GROUPS {
        return Err(bad("PAC: too many groups"));
    }
    let max = u32(r)?;
    if max != count {
        return Err(bad("PAC: array count disagrees with its size field"));
    }
    if (count as usize).saturating_mul(elem) > r.remaining() {
        return Err(bad("PAC: array longer than the logon information"));
    }
    Ok(())
}

/// An RPC_SID pointee (MS-DTYP 2.4.2.3): MaximumCount (the
/// SubAuthorityCount), Revision, SubAuthorityCount, IdentifierAuthority,
/// SubAuthority[].
fn sid(r: &mut Reader<'_>) -> Result<Sid, AuthError> {
    let max = u32(r)?;
    let sid = Sid::decode(r).map_err(|_| bad("PAC: bad SID"))?;
    if max as usize != sid.sub.len() {
        return Err(bad("PAC: SID count disagrees with SubAuthorityCount"));
    }
    Ok(sid)
}

/// A GROUP_MEMBERSHIP array pointee: `count` (RelativeId, Attributes).
fn group_ids(r: &mut Reader<'_>, present: bool, count: u32) -> Result<Vec<u32>, AuthError> {
    if !present {
        return if count == 0 { Ok(Vec::new()) } else { Err(bad("PAC: group count without groups")) };
    }
    array_count(r, count, 8)?;
    let mut rids = Vec::with_capacity(count as usize);
    for _ in 0..count {
        rids.push(u32(r)?);
        let _attributes = u32(r)?;
    }
    Ok(rids)
}

/// `domain` followed by `rid`, when the result is still a valid SID.
fn with_rid(domain: &Sid, rid: u32) -> Result<Sid, AuthError> {
    if domain.sub.len() >= MAX_SUB_AUTHORITIES {
        return Err(bad("PAC: domain SID too long for a RID"));
    }
    let mut sub = Vec::with_capacity(domain.sub.len() + 1);
    sub.extend_from_slice(&domain.sub);
    sub.push(rid);
    Ok(Sid { authority: domain.authority, sub })
}

fn decode_validation_info(buf: &[u8]) -> Result<LogonInfo, AuthError> {
    let mut outer = Reader::new(buf);
    let truncated = |_| bad("PAC: truncated logon information");
    // Common type header (MS-RPCE 2.2.6.1): version 1, little-endian
    // (0x10), 8 bytes long, filler.
    let version = outer.u8().map_err(truncated)?;
    let endianness = outer.u8().map_err(truncated)?;
    let header_len = outer.u16().map_err(truncated)?;
    outer.skip(4).map_err(truncated)?;
    if version != 1 || endianness != 0x10 || header_len != 8 {
        return Err(bad("PAC: not a little-endian NDR type serialization v1"));
    }
    // Private header (2.2.6.2): the object buffer's length, a multiple of 8.
    let object_len = outer.u32().map_err(truncated)?;
    outer.skip(4).map_err(truncated)?;
    if !object_len.is_multiple_of(8) {
        return Err(bad("PAC: object buffer length not a multiple of 8"));
    }
    // Alignment counts from the stream's start: 16 header bytes keep it.
    let mut r = outer.sub(object_len as usize).map_err(|_| bad("PAC: object buffer longer than its PAC buffer"))?;

    // The top-level pointer to KERB_VALIDATION_INFO, then its fixed part.
    if !pointer(&mut r)? {
        return Err(bad("PAC: null logon information"));
    }
    // LogonTime .. PasswordMustChange: six FILETIMEs.
    for _ in 0..12 {
        u32(&mut r)?;
    }
    let effective_name = string_head(&mut r)?;
    // FullName, LogonScript, ProfilePath, HomeDirectory, HomeDirectoryDrive.
    let mut other_strings = Vec::with_capacity(5);
    for _ in 0..5 {
        other_strings.push(string_head(&mut r)?);
    }
    let _logon_count = u16(&mut r)?;
    let _bad_password_count = u16(&mut r)?;
    let user_id = u32(&mut r)?;
    let primary_group_id = u32(&mut r)?;
    let group_count = u32(&mut r)?;
    let group_ids_ptr = pointer(&mut r)?;
    let user_flags = u32(&mut r)?;
    // UserSessionKey: 16 bytes.
    for _ in 0..4 {
        u32(&mut r)?;
    }
    let logon_server = string_head(&mut r)?;
    let logon_domain_name = string_head(&mut r)?;
    let logon_domain_id_ptr = pointer(&mut r)?;
    // Reserved1[2], UserAccountControl, SubAuthStatus,
    // LastSuccessfulILogon, LastFailedILogon, FailedILogonCount, Reserved3.
    for _ in 0..10 {
        u32(&mut r)?;
    }
    let sid_count = u32(&mut r)?;
    let extra_sids_ptr = pointer(&mut r)?;
    let resource_domain_ptr = pointer(&mut r)?;
    let resource_group_count = u32(&mut r)?;
    let resource_groups_ptr = pointer(&mut r)?;

    // The pointees, in the order of their pointers.
    let account = utf16le(string_body(&mut r, &effective_name)?).map_err(|_| bad("PAC: bad UTF-16 in EffectiveName"))?;
    for head in &other_strings {
        string_body(&mut r, head)?;
    }
    let rids = group_ids(&mut r, group_ids_ptr, group_count)?;
    string_body(&mut r, &logon_server)?;
    string_body(&mut r, &logon_domain_name)?;
    if !logon_domain_id_ptr {
        return Err(bad("PAC: no LogonDomainId"));
    }
    let domain = sid(&mut r)?;
    let mut extra = Vec::new();
    if extra_sids_ptr {
        array_count(&mut r, sid_count, 8)?;
        // KERB_SID_AND_ATTRIBUTES: Sid pointer, Attributes; the SIDs
        // follow the array.
        let mut heads = Vec::with_capacity(sid_count as usize);
        for _ in 0..sid_count {
            heads.push(pointer(&mut r)?);
            let _attributes = u32(&mut r)?;
        }
        for present in heads {
            if !present {
                return Err(bad("PAC: extra SID entry without a SID"));
            }
            extra.push(sid(&mut r)?);
        }
    } else if sid_count != 0 {
        return Err(bad("PAC: SidCount without ExtraSids"));
    }
    let resource_domain = if resource_domain_ptr { Some(sid(&mut r)?) } else { None };
    let resource_rids = group_ids(&mut r, resource_groups_ptr, resource_group_count)?;
    // What is left is the padding to the object buffer's 8-byte multiple.
    if r.remaining() >= 8 {
        return Err(bad("PAC: trailing bytes after the logon information"));
    }

    let user = with_rid(&domain, user_id)?;
    let mut groups = Vec::new();
    for rid in rids.iter().chain(std::iter::once(&primary_group_id)) {
        groups.push(with_rid(&domain, *rid)?);
    }
    if user_flags & EXTRA_SIDS != 0 {
        groups.extend(extra);
    }
    if user_flags & RESOURCE_GROUPS != 0 && !resource_rids.is_empty() {
        let resource_domain = resource_domain.ok_or(bad("PAC: resource groups without ResourceGroupDomainSid"))?;
        for rid in &resource_rids {
            groups.push(with_rid(&resource_domain, *rid)?);
        }
    }
    let mut seen = HashSet::with_capacity(groups.len());
    groups.retain(|s| seen.insert(s.clone()));
    Ok(LogonInfo { account, user, groups })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The KERB_VALIDATION_INFO of MS-PAC section 3 ("Structure
    /// Examples"), user lzhu of NTDEV: 26 groups, 13 extra SIDs.
    const SPEC_LOGON_INFO: &[&str] = &[
        "01100800cccccccca00400000000000000000200d186660f656ac601ffffffffffffff7fffffffffffffff7f17d439fe",
        "784ac6011794a328424bc601175424977a81c60108000800040002002400240008000200120012000c00020000000000",
        "10000200000000001400020000000000180002005410000097792c00010200001a0000001c0002002000000000000000",
        "00000000000000000000000016001800200002000a000c00240002002800020000000000000000001000000000000000",
        "0000000000000000000000000000000000000000000000000d0000002c00020000000000000000000000000004000000",
        "00000000040000006c007a00680075001200000000000000120000004c0069007100690061006e00670028004c006100",
        "720072007900290020005a00680075000900000000000000090000006e0074006400730032002e006200610074000000",
        "0000000000000000000000000000000000000000000000000000000000000000000000001a00000061c4330007000000",
        "09c32d00070000005eb4320007000000010200000700000097b92c00070000002bf1320007000000ce30330007000000",
        "a72e2e00070000002af132000700000098b92c000700000062c4330007000000940133000700000076c4330007000000",
        "aefe2d000700000032d22c00070000001608320007000000425b2e00070000005fb4320007000000ca9c350007000000",
        "85442d0007000000c2f0320007000000e9ea310007000000ed8e2e0007000000b6eb310007000000ab2e2e0007000000",
        "720e2e00070000000c000000000000000b0000004e0054004400450056002d00440043002d0030003500000006000000",
        "00000000050000004e0054004400450056000000040000000104000000000005150000005951b81766725d2564633b0b",
        "0d0000003000020007000000340002000700002038000200070000203c00020007000020400002000700002044000200",
        "0700002048000200070000204c000200070000205000020007000020540002000700002058000200070000205c000200",
        "07000020600002000700002005000000010500000000000515000000b9301b2eb7414c6c8c3b35150102000005000000",
        "0105000000000005150000005951b81766725d2564633b0b74542f00050000000105000000000005150000005951b817",
        "66725d2564633b0be8383200050000000105000000000005150000005951b81766725d2564633b0bcd38320005000000",
        "0105000000000005150000005951b81766725d2564633b0b5db43200050000000105000000000005150000005951b817",
        "66725d2564633b0b41163500050000000105000000000005150000005951b81766725d2564633b0be8ea310005000000",
        "0105000000000005150000005951b81766725d2564633b0bc1193200050000000105000000000005150000005951b817",
        "66725d2564633b0b29f13200050000000105000000000005150000005951b81766725d2564633b0b0f5f2e0005000000",
        "0105000000000005150000005951b81766725d2564633b0b2f5b2e00050000000105000000000005150000005951b817",
        "66725d2564633b0bef8f3100050000000105000000000005150000005951b81766725d2564633b0b075f2e0000000000",
    ];

    /// A whole PAC from the Samba 4.17 AD DC of tests/e2e/samba_dc.py
    /// (throwaway domain SMBQAD.TEST), as MIT 1.20's GSSAPI returned it for
    /// `urn:mspac:` on accepting alice's ticket for cifs/localhost: alice
    /// (RID 1102) in Domain Users and `readers` (RID 1103), with the extra
    /// SID S-1-18-1 (authentication authority asserted identity).
    const SAMBA_PAC: &[&str] = &[
        "070000000000000001000000b801000078000000000000000a0000001400000030020000000000000c00000080000000",
        "48020000000000000600000010000000c8020000000000000700000010000000d8020000000000001000000010000000",
        "e8020000000000001300000010000000f80200000000000001100800cccccccca8010000000000000000020046a61d32",
        "1f7fdd01ffffffffffffff7fffffffffffffff7f646984301f7fdd01646984301f7fdd01ffffffffffffff7f0a000a00",
        "040002000000000008000200000000000c00020000000000100002000000000014000200000000001800020001000000",
        "4e04000001020000020000001c000200200000000000000000000000000000000000000006000800200002000c000e00",
        "240002002800020000000000000000001000000000000000000000000000000000000000000000000000000000000000",
        "010000002c00020000000000000000000000000005000000000000000500000061006c00690063006500000000000000",
        "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
        "00000000000000000200000001020000070000004f040000070000000400000000000000030000004400430031000000",
        "07000000000000000600000053004d004200510041004400040000000104000000000005150000002c4ef5c016bc24f8",
        "b6dc4e0901000000300002000700000001000000010100000000001201000000807ef7311f7fdd010a0061006c006900",
        "63006500000000002200180016004000020000000a0058001c0062000000000061006c00690063006500400073006d00",
        "62007100610064002e00740065007300740000000000000053004d0042005100410044002e0054004500530054000000",
        "61006c006900630065000105000000000005150000002c4ef5c016bc24f8b6dc4e094e0400000000100000001c86fb4c",
        "eb54bc34eec1575110000000bdbcf0cc668c80354ef7f649100000004c5ffd4c64f89e866290cf611000000045e73d4b",
        "adb0575ff5081d71",
    ];

    fn unhex(parts: &[&str]) -> Vec<u8> {
        hex::decode(parts.concat()).unwrap()
    }

    fn sid(s: &str) -> Sid {
        let mut it = s.strip_prefix("S-1-").unwrap().split('-');
        let authority = it.next().unwrap().parse().unwrap();
        Sid { authority, sub: it.map(|x| x.parse().unwrap()).collect() }
    }

    /// A PACTYPE around `logon` laid out as in MS-PAC section 3: logon
    /// information at 0x48, then client info (0x12 bytes), server and KDC
    /// signatures (0x14 each), each at an 8-byte boundary. Only the logon
    /// information is the spec's; the other three are zero-filled
    /// stand-ins of the spec's sizes (this decoder does not read them).
    fn spec_pac(logon: &[u8]) -> Vec<u8> {
        let sizes = [(1u32, logon.len()), (0xA, 0x12), (6, 0x14), (7, 0x14)];
        let mut out = Vec::new();
        out.extend_from_slice(&4u32.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        let mut offset = 8 + 16 * sizes.len();
        for (ty, len) in sizes {
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&(len as u32).to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset = (offset + len).next_multiple_of(8);
        }
        out.extend_from_slice(logon);
        for (_, len) in &sizes[1..] {
            out.resize(out.len().next_multiple_of(8), 0);
            out.resize(out.len() + len, 0);
        }
        out
    }

    #[test]
    fn spec_example() {
        let pac = spec_pac(&unhex(SPEC_LOGON_INFO));
        assert_eq!(pac.len(), 0x53c, "the spec's PAC is 0x540 bytes with its final padding");
        let info = logon_info(&pac).unwrap().unwrap();
        assert_eq!(info.account, "lzhu");
        let domain = "S-1-5-21-397955417-626881126-188441444";
        assert_eq!(info.user, sid(&format!("{domain}-2914711")));
        // 26 GroupIds (513, the primary group, among them), then 13
        // ExtraSids (UserFlags 0x20), the first from another domain.
        assert_eq!(info.groups.len(), 26 + 13);
        assert_eq!(info.groups[0], sid(&format!("{domain}-3392609")));
        assert_eq!(info.groups[3], sid(&format!("{domain}-513")));
        assert_eq!(info.groups[25], sid(&format!("{domain}-3018354")));
        assert_eq!(info.groups[26], sid("S-1-5-21-773533881-1816936887-355810188-513"));
        assert_eq!(info.groups[27], sid(&format!("{domain}-3101812")));
        assert_eq!(info.groups[38], sid(&format!("{domain}-3038983")));
    }

    #[test]
    fn samba_ad_dc() {
        let info = logon_info(&unhex(SAMBA_PAC)).unwrap().unwrap();
        assert_eq!(info.account, "alice");
        let domain = "S-1-5-21-3237301804-4163157014-156163254";
        assert_eq!(info.user, sid(&format!("{domain}-1102")));
        assert_eq!(
            info.groups,
            vec![sid(&format!("{domain}-513")), sid(&format!("{domain}-1103")), sid("S-1-18-1")],
            "Domain Users (also the primary group, once), readers, and the asserted identity"
        );
    }
    /// Writes a KERB_VALIDATION_INFO as a KDC would (NDR type
    /// serialization v1, referent ids from 0x00020000), for the cases no
    /// captured PAC has: resource groups, flags off, duplicates.
    #[derive(Default)]
    struct Nd {
        b: Vec<u8>,
        next: u32,
    }

    impl Nd {
        fn u32(&mut self, v: u32) {
            self.b.resize(self.b.len().next_multiple_of(4), 0);
            self.b.extend_from_slice(&v.to_le_bytes());
        }
        fn u16(&mut self, v: u16) {
            self.b.resize(self.b.len().next_multiple_of(2), 0);
            self.b.extend_from_slice(&v.to_le_bytes());
        }
        fn ptr(&mut self, present: bool) {
            self.next += 4;
            self.u32(if present { 0x0002_0000 + self.next } else { 0 });
        }
        fn string_head(&mut self, s: &str) {
            let n = s.encode_utf16().count() as u16 * 2;
            self.u16(n);
            self.u16(n);
            self.ptr(true);
        }
        fn string_body(&mut self, s: &str) {
            let n = s.encode_utf16().count() as u32;
            self.u32(n);
            self.u32(0);
            self.u32(n);
            for u in s.encode_utf16() {
                self.b.extend_from_slice(&u.to_le_bytes());
            }
        }
        fn sid(&mut self, s: &Sid) {
            self.u32(s.sub.len() as u32);
            s.encode(&mut self.b);
        }
        fn groups(&mut self, rids: &[u32]) {
            self.u32(rids.len() as u32);
            for r in rids {
                self.u32(*r);
                self.u32(7);
            }
        }
    }

    struct Spec {
        name: &'static str,
        domain: Sid,
        user: u32,
        primary: u32,
        rids: Vec<u32>,
        flags: u32,
        extra: Vec<Sid>,
        resource: Option<(Sid, Vec<u32>)>,
    }

    fn encode(spec: &Spec) -> Vec<u8> {
        let mut n = Nd::default();
        n.ptr(true);
        for _ in 0..12 {
            n.u32(0);
        }
        n.string_head(spec.name);
        for _ in 0..5 {
            n.string_head("");
        }
        n.u16(1);
        n.u16(0);
        n.u32(spec.user);
        n.u32(spec.primary);
        n.u32(spec.rids.len() as u32);
        n.ptr(true);
        n.u32(spec.flags);
        for _ in 0..4 {
            n.u32(0);
        }
        n.string_head("DC");
        n.string_head("DOM");
        n.ptr(true);
        for _ in 0..10 {
            n.u32(0);
        }
        n.u32(spec.extra.len() as u32);
        n.ptr(!spec.extra.is_empty());
        n.ptr(spec.resource.is_some());
        n.u32(spec.resource.as_ref().map_or(0, |r| r.1.len() as u32));
        n.ptr(spec.resource.is_some());
        n.string_body(spec.name);
        for _ in 0..5 {
            n.string_body("");
        }
        n.groups(&spec.rids);
        n.string_body("DC");
        n.string_body("DOM");
        n.sid(&spec.domain);
        if !spec.extra.is_empty() {
            n.u32(spec.extra.len() as u32);
            for _ in &spec.extra {
                n.ptr(true);
                n.u32(7);
            }
            for s in &spec.extra {
                n.sid(s);
            }
        }
        if let Some((domain, rids)) = &spec.resource {
            n.sid(domain);
            n.groups(rids);
        }
        n.b.resize(n.b.len().next_multiple_of(8), 0);
        let mut out = vec![1, 0x10, 8, 0, 0xcc, 0xcc, 0xcc, 0xcc];
        out.extend_from_slice(&(n.b.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&n.b);
        spec_pac(&out)
    }

    fn spec() -> Spec {
        Spec {
            name: "bob",
            domain: sid("S-1-5-21-1-2-3"),
            user: 1000,
            primary: 513,
            rids: vec![513, 1001, 1001],
            flags: EXTRA_SIDS | RESOURCE_GROUPS,
            extra: vec![sid("S-1-5-21-9-9-9-500"), sid("S-1-18-1"), sid("S-1-5-21-1-2-3-1001")],
            resource: Some((sid("S-1-5-21-7-7-7"), vec![2000, 2001])),
        }
    }

    #[test]
    fn resource_groups_extra_sids_and_their_flags() {
        let info = logon_info(&encode(&spec())).unwrap().unwrap();
        assert_eq!(info.account, "bob");
        assert_eq!(info.user, sid("S-1-5-21-1-2-3-1000"));
        let all = ["S-1-5-21-1-2-3-513", "S-1-5-21-1-2-3-1001", "S-1-5-21-9-9-9-500", "S-1-18-1"];
        let res = ["S-1-5-21-7-7-7-2000", "S-1-5-21-7-7-7-2001"];
        let want = |v: &[&str]| v.iter().map(|s| sid(s)).collect::<Vec<_>>();
        assert_eq!(info.groups, want(&[&all[..], &res[..]].concat()), "each SID once, in order");

        // Without D and H the arrays are walked but not taken.
        let info = logon_info(&encode(&Spec { flags: 0, ..spec() })).unwrap().unwrap();
        assert_eq!(info.groups, want(&all[..2]));
        let info = logon_info(&encode(&Spec { flags: RESOURCE_GROUPS, ..spec() })).unwrap().unwrap();
        assert_eq!(info.groups, want(&[&all[..2], &res[..]].concat()));
        // No ExtraSids, no resource groups: null pointers.
        let info = logon_info(&encode(&Spec { extra: vec![], resource: None, ..spec() })).unwrap().unwrap();
        assert_eq!(info.groups, want(&all[..2]));
    }

    #[test]
    fn structural_errors() {
        // A domain SID with 15 sub-authorities has no room for a RID.
        let long = Sid { authority: 5, sub: vec![1; 15] };
        assert!(logon_info(&encode(&Spec { domain: long, ..spec() })).is_err());
        let samba = unhex(SAMBA_PAC);
        // No logon information buffer (its type changed to 2): no groups.
        let mut p = samba.clone();
        p[8] = 2;
        assert_eq!(logon_info(&p).unwrap(), None);
        // Version 1; a logon information offset unaligned, or inside the
        // buffer table.
        let mut p = samba.clone();
        p[4] = 1;
        assert!(logon_info(&p).is_err());
        let mut p = samba.clone();
        p[16] = 0x79;
        assert!(logon_info(&p).is_err());
        let mut p = samba.clone();
        p[16] = 0x70;
        assert!(logon_info(&p).is_err());
        // Big-endian NDR, a wrong header length, a null top-level pointer.
        for (at, v) in [(0x79, 0x00), (0x7a, 0x10), (0x88, 0x00)] {
            let mut p = samba.clone();
            p[at] = v;
            p[at + 1] = 0;
            p[at + 2] = 0;
            assert!(logon_info(&p).is_err(), "byte {at:#x}");
        }
        // More than padding after the last pointee: `extra` bytes added
        // at the object buffer's end, every length and offset grown.
        let with_trailing = |extra: usize| {
            let mut p = encode(&spec());
            let logon_len = u32::from_le_bytes(p[12..16].try_into().unwrap()) as usize;
            p.splice(0x48 + logon_len..0x48 + logon_len, vec![0u8; extra]);
            // cbBufferSize, ObjectBufferLength, the three later offsets.
            for at in [12, 0x48 + 8, 40, 56, 72] {
                let v = u32::from_le_bytes(p[at..at + 4].try_into().unwrap()) + extra as u32;
                p[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
            logon_info(&p)
        };
        assert!(with_trailing(0).is_ok());
        assert!(with_trailing(8).is_err());
    }

    #[test]
    fn a_pac_without_logon_information_names_no_groups() {
        // MIT's KDC: client information (type 10) and the two signatures
        // (6, 7), no KERB_VALIDATION_INFO.
        let mut p = Vec::new();
        p.extend_from_slice(&3u32.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        for (i, ty) in [10u32, 6, 7].into_iter().enumerate() {
            p.extend_from_slice(&ty.to_le_bytes());
            p.extend_from_slice(&8u32.to_le_bytes());
            p.extend_from_slice(&(56 + 8 * i as u64).to_le_bytes());
        }
        p.extend_from_slice(&[0u8; 24]);
        assert_eq!(logon_info(&p).unwrap(), None);
        assert!(logon_info(&p[..p.len() - 1]).is_err());
    }

    /// Sets the u32 at `at` (an offset into the Samba PAC) to `v`.
    fn patched(at: usize, v: u32) -> Vec<u8> {
        let mut p = unhex(SAMBA_PAC);
        p[at..at + 4].copy_from_slice(&v.to_le_bytes());
        p
    }

    #[test]
    fn counts_beyond_the_input_are_errors() {
        // The Samba PAC: PACTYPE at 0, logon information at 0x78: its
        // GroupCount at 0xf8, GroupIds' MaximumCount at 0x1b8; SidCount
        // at 0x150, ExtraSids' MaximumCount at 0x218; EffectiveName's
        // Length at 0xbc, its ActualCount at 0x168; cbBufferSize at 12,
        // ObjectBufferLength at 0x80.
        let logon = 0x78;
        assert_eq!(&unhex(SAMBA_PAC)[logon + 128..logon + 132], &2u32.to_le_bytes());
        for big in [3, 1024, 1025, 0x1000_0000, u32::MAX] {
            assert!(logon_info(&patched(logon + 128, big)).is_err(), "GroupCount {big}");
            let mut p = patched(logon + 128, big);
            p[0x1b8..0x1bc].copy_from_slice(&big.to_le_bytes());
            assert!(logon_info(&p).is_err(), "GroupCount and MaximumCount {big}");
            let mut p = patched(0x150, big);
            p[0x218..0x21c].copy_from_slice(&big.to_le_bytes());
            assert!(logon_info(&p).is_err(), "SidCount and MaximumCount {big}");
            assert!(logon_info(&patched(0x168, big)).is_err(), "string ActualCount {big}");
            assert!(logon_info(&patched(12, big)).is_err(), "cbBufferSize {big}");
            assert!(logon_info(&patched(0x80, big & !7)).is_err(), "ObjectBufferLength {big}");
            // (Fewer than the 7 buffers is fine: the rest is unreferenced.)
            assert!(logon_info(&patched(0, big.max(8))).is_err(), "cBuffers {big}");
        }
        let mut p = unhex(SAMBA_PAC);
        p[0xbc] = 0xff;
        assert!(logon_info(&p).is_err(), "EffectiveName Length");
        // A buffer offset far outside the PAC.
        assert!(logon_info(&patched(16 + 4, 0xffff_fff8)).is_err());
    }

    #[test]
    fn every_truncation_is_an_error() {
        for pac in [unhex(SAMBA_PAC), spec_pac(&unhex(SPEC_LOGON_INFO)), encode(&spec())] {
            assert!(logon_info(&pac).is_ok());
            for n in 0..pac.len() {
                assert!(logon_info(&pac[..n]).is_err(), "truncated to {n} of {}", pac.len());
            }
        }
    }

    #[test]
    fn changed_bytes_never_panic() {
        for pac in [unhex(SAMBA_PAC), encode(&spec())] {
            for i in 0..pac.len() {
                for v in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                    let mut p = pac.clone();
                    p[i] = v;
                    let _ = logon_info(&p);
                }
            }
        }
    }
}
