//! Security descriptors in self-relative form (MS-DTYP 2.4.6), with their
//! SIDs (2.4.2.2), ACLs (2.4.5) and ACEs (2.4.4): what QUERY_INFO and
//! SET_INFO of SMB2_0_INFO_SECURITY carry (MS-SMB2 2.2.37, 2.2.39), the SD
//! create context (2.2.13.2.2), and what `security.NTACL` keeps.
//!
//! ACEs with a SID right after the mask (allow, deny, audit, alarm and
//! their callback forms) are decoded; the others (object ACEs, compound)
//! are kept as the bytes after the mask and written back unchanged.

use crate::reader::{Put, Reader};
use crate::DecodeError;
use std::fmt;

/// SecurityInformation bits (MS-SMB2 2.2.37 AdditionalInformation).
pub mod secinfo {
    pub const OWNER: u32 = 0x1;
    pub const GROUP: u32 = 0x2;
    pub const DACL: u32 = 0x4;
    pub const SACL: u32 = 0x8;
}

/// SECURITY_DESCRIPTOR Control bits (MS-DTYP 2.4.6).
pub mod control {
    pub const DACL_PRESENT: u16 = 0x0004;
    pub const SACL_PRESENT: u16 = 0x0010;
    pub const DACL_AUTO_INHERIT_REQ: u16 = 0x0100;
    pub const SACL_AUTO_INHERIT_REQ: u16 = 0x0200;
    pub const DACL_AUTO_INHERITED: u16 = 0x0400;
    pub const SACL_AUTO_INHERITED: u16 = 0x0800;
    pub const DACL_PROTECTED: u16 = 0x1000;
    pub const SACL_PROTECTED: u16 = 0x2000;
    pub const SELF_RELATIVE: u16 = 0x8000;
    /// The bits that describe the DACL, taken with it.
    pub const DACL_BITS: u16 = DACL_PRESENT | 0x0008 | DACL_AUTO_INHERIT_REQ | DACL_AUTO_INHERITED | DACL_PROTECTED;
    /// The bits that describe the SACL, taken with it.
    pub const SACL_BITS: u16 = SACL_PRESENT | 0x0020 | SACL_AUTO_INHERIT_REQ | SACL_AUTO_INHERITED | SACL_PROTECTED;
}

/// AceType values (MS-DTYP 2.4.4.1).
pub mod ace_type {
    pub const ACCESS_ALLOWED: u8 = 0x0;
    pub const ACCESS_DENIED: u8 = 0x1;
    pub const SYSTEM_AUDIT: u8 = 0x2;
    pub const SYSTEM_ALARM: u8 = 0x3;
    pub const ACCESS_ALLOWED_CALLBACK: u8 = 0x9;
    pub const ACCESS_DENIED_CALLBACK: u8 = 0xA;
    pub const SYSTEM_AUDIT_CALLBACK: u8 = 0xD;
    pub const SYSTEM_ALARM_CALLBACK: u8 = 0xE;
    pub const SYSTEM_MANDATORY_LABEL: u8 = 0x11;
    pub const SYSTEM_RESOURCE_ATTRIBUTE: u8 = 0x12;
    pub const SYSTEM_SCOPED_POLICY_ID: u8 = 0x13;
}

/// AceFlags (MS-DTYP 2.4.4.1).
pub mod ace_flags {
    pub const OBJECT_INHERIT: u8 = 0x01;
    pub const CONTAINER_INHERIT: u8 = 0x02;
    pub const NO_PROPAGATE_INHERIT: u8 = 0x04;
    pub const INHERIT_ONLY: u8 = 0x08;
    pub const INHERITED: u8 = 0x10;
}

/// At most 15 SubAuthority values (MS-DTYP 2.4.2.2).
const MAX_SUB_AUTHORITIES: usize = 15;

/// A SID (MS-DTYP 2.4.2.2): revision 1, a 48-bit authority, and up to 15
/// sub-authorities.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sid {
    pub authority: u64,
    pub sub: Vec<u32>,
}

impl Sid {
    pub fn new(authority: u64, sub: &[u32]) -> Sid {
        Sid { authority, sub: sub.to_vec() }
    }
    /// S-1-1-0, Everyone.
    pub fn everyone() -> Sid {
        Sid::new(1, &[0])
    }
    /// S-1-3-0, CREATOR OWNER (MS-DTYP 2.4.2.4).
    pub fn creator_owner() -> Sid {
        Sid::new(3, &[0])
    }
    /// S-1-3-1, CREATOR GROUP.
    pub fn creator_group() -> Sid {
        Sid::new(3, &[1])
    }
    /// S-1-5-7, ANONYMOUS LOGON.
    pub fn anonymous() -> Sid {
        Sid::new(5, &[7])
    }
    /// S-1-5-11, Authenticated Users.
    pub fn authenticated_users() -> Sid {
        Sid::new(5, &[11])
    }

    /// Decode one SID, checking Revision and SubAuthorityCount.
    pub fn decode(r: &mut Reader<'_>) -> Result<Sid, DecodeError> {
        let revision = r.u8()?;
        let count = usize::from(r.u8()?);
        if revision != 1 || count > MAX_SUB_AUTHORITIES {
            return Err(DecodeError::Invalid);
        }
        let a = r.array::<6>()?;
        let authority = a.iter().fold(0u64, |acc, b| acc << 8 | u64::from(*b));
        let sub = (0..count).map(|_| r.u32()).collect::<Result<Vec<_>, _>>()?;
        Ok(Sid { authority, sub })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u8(1);
        out.u8(self.sub.len() as u8);
        out.bytes(&self.authority.to_be_bytes()[2..]);
        for s in &self.sub {
            out.u32(*s);
        }
    }

    pub fn len(&self) -> usize {
        8 + 4 * self.sub.len()
    }

    /// Never true: a SID has at least its 8-byte header.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// The string form S-1-<authority>-<sub>... (MS-DTYP 2.4.2.1).
impl fmt::Display for Sid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S-1-{}", self.authority)?;
        for s in &self.sub {
            write!(f, "-{s}")?;
        }
        Ok(())
    }
}

/// What follows an ACE's mask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AceBody {
    /// A SID, then any application data (callback ACEs) kept as bytes.
    Sid(Sid, Vec<u8>),
    /// An ACE type whose layout is not decoded here (object ACEs).
    Opaque(Vec<u8>),
}

/// An ACE (MS-DTYP 2.4.4): header, access mask, and the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ace {
    pub ace_type: u8,
    pub flags: u8,
    pub mask: u32,
    pub body: AceBody,
}

impl Ace {
    /// An ACE of a type with a SID after the mask.
    pub fn new(ace_type: u8, flags: u8, mask: u32, sid: Sid) -> Ace {
        Ace { ace_type, flags, mask, body: AceBody::Sid(sid, Vec::new()) }
    }

    pub fn sid(&self) -> Option<&Sid> {
        match &self.body {
            AceBody::Sid(s, _) => Some(s),
            AceBody::Opaque(_) => None,
        }
    }

    fn has_sid(ace_type: u8) -> bool {
        use ace_type::*;
        matches!(
            ace_type,
            ACCESS_ALLOWED
                | ACCESS_DENIED
                | SYSTEM_AUDIT
                | SYSTEM_ALARM
                | ACCESS_ALLOWED_CALLBACK
                | ACCESS_DENIED_CALLBACK
                | SYSTEM_AUDIT_CALLBACK
                | SYSTEM_ALARM_CALLBACK
                | SYSTEM_MANDATORY_LABEL
                | SYSTEM_RESOURCE_ATTRIBUTE
                | SYSTEM_SCOPED_POLICY_ID
        )
    }

    fn decode(r: &mut Reader<'_>) -> Result<Ace, DecodeError> {
        let ace_type = r.u8()?;
        let flags = r.u8()?;
        let size = usize::from(r.u16()?);
        let mut body = r.sub(size.checked_sub(4).ok_or(DecodeError::Invalid)?)?;
        let mask = body.u32()?;
        let body = if Ace::has_sid(ace_type) {
            let sid = Sid::decode(&mut body)?;
            AceBody::Sid(sid, body.rest().to_vec())
        } else {
            AceBody::Opaque(body.rest().to_vec())
        };
        Ok(Ace { ace_type, flags, mask, body })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.u8(self.ace_type);
        out.u8(self.flags);
        out.u16(0);
        out.u32(self.mask);
        match &self.body {
            AceBody::Sid(sid, extra) => {
                sid.encode(out);
                out.bytes(extra);
            }
            AceBody::Opaque(b) => out.bytes(b),
        }
        let size = out.len() - start;
        out.set_u16(start + 2, size as u16);
    }
}

/// An ACL (MS-DTYP 2.4.5): AclRevision 2, or 4 with object ACEs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    pub revision: u8,
    pub aces: Vec<Ace>,
}

impl Acl {
    pub fn new(aces: Vec<Ace>) -> Acl {
        Acl { revision: 2, aces }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Acl, DecodeError> {
        let revision = r.u8()?;
        r.skip(1)?;
        let size = usize::from(r.u16()?);
        let count = r.u16()?;
        r.skip(2)?;
        if !matches!(revision, 2 | 4) {
            return Err(DecodeError::Invalid);
        }
        // The ACEs lie inside AclSize; each is at least 8 bytes, which
        // bounds the count by the bytes there are.
        let mut body = r.sub(size.checked_sub(8).ok_or(DecodeError::Invalid)?)?;
        if usize::from(count) > body.remaining() / 8 {
            return Err(DecodeError::Invalid);
        }
        let aces = (0..count).map(|_| Ace::decode(&mut body)).collect::<Result<Vec<_>, _>>()?;
        Ok(Acl { revision, aces })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.u8(self.revision);
        out.u8(0);
        out.u16(0);
        out.u16(self.aces.len() as u16);
        out.u16(0);
        for a in &self.aces {
            a.encode(out);
        }
        let size = out.len() - start;
        out.set_u16(start + 2, size as u16);
    }
}

/// A security descriptor (MS-DTYP 2.4.6). `dacl` is `None` both for a
/// descriptor without a DACL and for a NULL DACL (SE_DACL_PRESENT with
/// OffsetDacl 0, which grants everything); [`SecurityDescriptor::null_dacl`]
/// tells them apart. The same holds for the SACL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecurityDescriptor {
    pub control: u16,
    pub owner: Option<Sid>,
    pub group: Option<Sid>,
    pub sacl: Option<Acl>,
    pub dacl: Option<Acl>,
}

impl SecurityDescriptor {
    /// Decode a self-relative descriptor: every offset must lie inside
    /// `buf`, and 0 means the part is absent (MS-DTYP 2.4.6).
    pub fn decode(buf: &[u8]) -> Result<SecurityDescriptor, DecodeError> {
        SecurityDescriptor::decode_in(buf, 0)
    }

    /// Decode the descriptor whose header starts at `at` in `buf`, its
    /// offsets counting from the start of `buf` (as Samba's NDR writes
    /// them inside `security.NTACL`).
    pub fn decode_in(buf: &[u8], at: usize) -> Result<SecurityDescriptor, DecodeError> {
        let mut r = Reader::new(buf.get(at..).ok_or(DecodeError::Truncated)?);
        let revision = r.u8()?;
        r.skip(1)?; // Sbz1 (the resource manager bits)
        let control = r.u16()?;
        let (owner, group, sacl, dacl) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
        if revision != 1 {
            return Err(DecodeError::Invalid);
        }
        let part = |off: u32| -> Result<Option<Reader<'_>>, DecodeError> {
            if off == 0 {
                return Ok(None);
            }
            let start = at.checked_add(20).filter(|h| off as usize >= *h).ok_or(DecodeError::OutOfBounds)?;
            let rest = buf.get(off as usize..).filter(|r| start <= off as usize && !r.is_empty()).ok_or(DecodeError::OutOfBounds)?;
            Ok(Some(Reader::new(rest)))
        };
        let sid = |off| part(off)?.map(|mut r| Sid::decode(&mut r)).transpose();
        let acl = |off, present: u16| match part(off)? {
            Some(mut r) if control & present != 0 => Acl::decode(&mut r).map(Some),
            _ => Ok(None),
        };
        Ok(SecurityDescriptor {
            control: control | control::SELF_RELATIVE,
            owner: sid(owner)?,
            group: sid(group)?,
            sacl: acl(sacl, control::SACL_PRESENT)?,
            dacl: acl(dacl, control::DACL_PRESENT)?,
        })
    }

    /// Append the self-relative form: header, owner, group, SACL, DACL
    /// (the order Samba writes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_based(out, out.len())
    }

    /// Append the descriptor with its offsets counting from the start of
    /// `out` (the inverse of [`SecurityDescriptor::decode_in`]).
    pub fn encode_in(&self, out: &mut Vec<u8>) {
        self.encode_based(out, 0)
    }

    fn encode_based(&self, out: &mut Vec<u8>, base: usize) {
        let start = out.len();
        out.u8(1);
        out.u8(0);
        let mut c = self.control | control::SELF_RELATIVE;
        if self.dacl.is_some() {
            c |= control::DACL_PRESENT;
        }
        if self.sacl.is_some() {
            c |= control::SACL_PRESENT;
        }
        out.u16(c);
        let offsets = start + 4;
        out.zeros(16);
        let here = |out: &Vec<u8>| (out.len() - base) as u32;
        if let Some(s) = &self.owner {
            out.set_u32(offsets, here(out));
            s.encode(out);
        }
        if let Some(s) = &self.group {
            out.set_u32(offsets + 4, here(out));
            s.encode(out);
        }
        if let Some(a) = &self.sacl {
            out.set_u32(offsets + 8, here(out));
            a.encode(out);
        }
        if let Some(a) = &self.dacl {
            out.set_u32(offsets + 12, here(out));
            a.encode(out);
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }

    /// SE_DACL_PRESENT without a DACL: everyone may do everything.
    pub fn null_dacl(&self) -> bool {
        self.control & control::DACL_PRESENT != 0 && self.dacl.is_none()
    }

    /// The parts `info` (SecurityInformation) selects, as QUERY_INFO
    /// returns them (MS-SMB2 3.3.5.20.3).
    pub fn select(&self, info: u32) -> SecurityDescriptor {
        let mut c = self.control & !(control::DACL_BITS | control::SACL_BITS) | control::SELF_RELATIVE;
        if info & secinfo::DACL != 0 {
            c |= self.control & control::DACL_BITS;
        }
        if info & secinfo::SACL != 0 {
            c |= self.control & control::SACL_BITS;
        }
        SecurityDescriptor {
            control: c,
            owner: self.owner.clone().filter(|_| info & secinfo::OWNER != 0),
            group: self.group.clone().filter(|_| info & secinfo::GROUP != 0),
            sacl: self.sacl.clone().filter(|_| info & secinfo::SACL != 0),
            dacl: self.dacl.clone().filter(|_| info & secinfo::DACL != 0),
        }
    }

    /// This descriptor with the parts `info` selects taken from `new`, as
    /// SET_INFO applies them (MS-SMB2 3.3.5.21.3). A selected owner or
    /// group that `new` lacks is kept as it was; a selected DACL that
    /// `new` lacks is a NULL DACL.
    pub fn merge(&self, new: &SecurityDescriptor, info: u32) -> SecurityDescriptor {
        let mut sd = self.clone();
        // What it encodes to is self-relative, as what decodes is.
        sd.control |= control::SELF_RELATIVE;
        if info & secinfo::OWNER != 0 && new.owner.is_some() {
            sd.owner = new.owner.clone();
        }
        if info & secinfo::GROUP != 0 && new.group.is_some() {
            sd.group = new.group.clone();
        }
        // A DACL selected but not present is a NULL DACL, as Windows sets it
        // (smbtorture smb2.create.nulldacl).
        if info & secinfo::DACL != 0 {
            sd.dacl = new.dacl.clone();
            sd.control = sd.control & !control::DACL_BITS | new.control & control::DACL_BITS | control::DACL_PRESENT;
        }
        if info & secinfo::SACL != 0 {
            sd.sacl = new.sacl.clone();
            sd.control = sd.control & !control::SACL_BITS | new.control & control::SACL_BITS;
        }
        sd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// A descriptor as Windows returns it for a file: owner
    /// BUILTIN\Administrators, group SYSTEM, a DACL of two inherited ACEs
    /// (SYSTEM and Administrators full control), auto-inherited.
    const WINDOWS_FILE_SD: &str = "01 00 04 84 14 00 00 00 24 00 00 00 00 00 00 00 30 00 00 00
        01 02 00 00 00 00 00 05 20 00 00 00 20 02 00 00
        01 01 00 00 00 00 00 05 12 00 00 00
        02 00 34 00 02 00 00 00
        00 10 14 00 ff 01 1f 00 01 01 00 00 00 00 00 05 12 00 00 00
        00 10 18 00 ff 01 1f 00 01 02 00 00 00 00 00 05 20 00 00 00 20 02 00 00";

    /// What select and merge build encodes to what decodes back to it
    /// (found by the wire_security fuzz target: a merge into an empty
    /// descriptor lacked SELF_RELATIVE, which decoding always sets).
    #[test]
    fn selections_and_merges_round_trip() {
        let mut input = vec![1, 0, 0x00, 0xb3];
        input.extend_from_slice(&[0; 16]);
        let sd = SecurityDescriptor::decode(&input).unwrap();
        for info in 0..16 {
            let part = sd.select(info);
            assert_eq!(SecurityDescriptor::decode(&part.to_bytes()), Ok(part));
            let merged = SecurityDescriptor::default().merge(&sd, info);
            assert_eq!(SecurityDescriptor::decode(&merged.to_bytes()), Ok(merged));
        }
    }

    #[test]
    fn windows_descriptor() {
        let b = hex(WINDOWS_FILE_SD);
        let sd = SecurityDescriptor::decode(&b).unwrap();
        assert_eq!(sd.owner.as_ref().unwrap().to_string(), "S-1-5-32-544");
        assert_eq!(sd.group.as_ref().unwrap().to_string(), "S-1-5-18");
        let dacl = sd.dacl.as_ref().unwrap();
        assert_eq!(dacl.aces.len(), 2);
        assert_eq!(dacl.aces[0].mask, 0x001F_01FF);
        assert_eq!(dacl.aces[0].flags, ace_flags::INHERITED);
        assert_eq!(dacl.aces[1].sid().unwrap().to_string(), "S-1-5-32-544");
        assert_eq!(sd.control, 0x8404);
        assert!(!sd.null_dacl());
        // Samba's order: owner and group before the DACL, as here.
        assert_eq!(sd.to_bytes(), b);
    }

    #[test]
    fn selection() {
        let sd = SecurityDescriptor::decode(&hex(WINDOWS_FILE_SD)).unwrap();
        let owner = sd.select(secinfo::OWNER);
        assert!(owner.dacl.is_none() && owner.group.is_none());
        assert_eq!(owner.to_bytes(), hex("01 00 00 80 14 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 02 00 00 00 00 00 05 20 00 00 00 20 02 00 00"));
        let dacl = sd.select(secinfo::DACL);
        assert_eq!(dacl.control, 0x8404);
        assert!(dacl.owner.is_none());
        // Setting only the owner keeps the DACL.
        let new = SecurityDescriptor { owner: Some(Sid::everyone()), ..Default::default() };
        let merged = sd.merge(&new, secinfo::OWNER);
        assert_eq!(merged.owner, Some(Sid::everyone()));
        assert_eq!(merged.dacl, sd.dacl);
        // Setting the DACL to a NULL DACL, with or without SE_DACL_PRESENT.
        let null = SecurityDescriptor { control: control::DACL_PRESENT, ..Default::default() };
        let merged = sd.merge(&null, secinfo::DACL);
        assert!(merged.null_dacl());
        assert_eq!(merged.owner, sd.owner);
        assert!(sd.merge(&SecurityDescriptor::default(), secinfo::DACL).null_dacl());
    }

    #[test]
    fn offsets_from_an_outer_start() {
        let sd = SecurityDescriptor::decode(&hex(WINDOWS_FILE_SD)).unwrap();
        let mut v = vec![0xEE; 8];
        sd.encode_in(&mut v);
        assert_eq!(&v[12..16], &28u32.to_le_bytes()); // owner at 8 + 20
        assert_eq!(SecurityDescriptor::decode_in(&v, 8), Ok(sd.clone()));
        // An offset into what precedes the descriptor is refused.
        v[12] = 4;
        assert!(SecurityDescriptor::decode_in(&v, 8).is_err());
    }

    #[test]
    fn null_and_absent_dacl() {
        // SE_DACL_PRESENT with OffsetDacl 0: a NULL DACL.
        let null = SecurityDescriptor::decode(&hex("01 00 04 80 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00")).unwrap();
        assert!(null.null_dacl());
        assert_eq!(null.to_bytes(), hex("01 00 04 80 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"));
        let absent = SecurityDescriptor::decode(&hex("01 00 00 80 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00")).unwrap();
        assert!(!absent.null_dacl() && absent.dacl.is_none());
        // An empty DACL (no ACEs) is neither.
        let empty = SecurityDescriptor { dacl: Some(Acl::new(vec![])), ..Default::default() };
        let b = empty.to_bytes();
        assert_eq!(b, hex("01 00 04 80 00 00 00 00 00 00 00 00 00 00 00 00 14 00 00 00 02 00 08 00 00 00 00 00"));
        assert_eq!(SecurityDescriptor::decode(&b).unwrap().dacl, Some(Acl::new(vec![])));
    }

    #[test]
    fn object_aces_kept() {
        // ACCESS_ALLOWED_OBJECT_ACE (type 5) with no GUIDs, then a SID.
        let ace = hex("05 00 18 00 ff 01 1f 00 00 00 00 00 01 01 00 00 00 00 00 01 00 00 00 00");
        let mut b = hex("01 00 04 80 00 00 00 00 00 00 00 00 00 00 00 00 14 00 00 00 04 00 20 00 01 00 00 00");
        b.extend_from_slice(&ace);
        let sd = SecurityDescriptor::decode(&b).unwrap();
        let a = &sd.dacl.as_ref().unwrap().aces[0];
        assert_eq!((a.ace_type, a.mask), (5, 0x001F_01FF));
        assert!(matches!(a.body, AceBody::Opaque(ref o) if o.len() == 16));
        assert_eq!(sd.to_bytes(), b);
    }

    #[test]
    fn bounds() {
        // Offsets past the end, inside the header, bad revisions, too many
        // sub-authorities, an ACE count the ACL cannot hold.
        assert!(SecurityDescriptor::decode(&hex("01 00 00 80 ff 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00")).is_err());
        assert!(SecurityDescriptor::decode(&hex("01 00 00 80 04 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00")).is_err());
        assert!(SecurityDescriptor::decode(&hex("02 00 00 80 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00")).is_err());
        assert!(SecurityDescriptor::decode(&hex("01 00")).is_err());
        let mut too_many = hex("01 00 00 80 14 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 10 00 00 00 00 00 05");
        too_many.extend_from_slice(&[0; 64]);
        assert!(SecurityDescriptor::decode(&too_many).is_err());
        let huge_count = hex("01 00 04 80 00 00 00 00 00 00 00 00 00 00 00 00 14 00 00 00 02 00 08 00 ff ff 00 00");
        assert!(SecurityDescriptor::decode(&huge_count).is_err());
        let ace_too_short = hex("01 00 04 80 00 00 00 00 00 00 00 00 00 00 00 00 14 00 00 00 02 00 0c 00 01 00 00 00 00 00 02 00");
        assert!(SecurityDescriptor::decode(&ace_too_short).is_err());
        let ace_size_2 = hex("01 00 04 80 00 00 00 00 00 00 00 00 00 00 00 00 14 00 00 00 02 00 10 00 01 00 00 00 00 00 02 00 00 00 00 00");
        assert!(SecurityDescriptor::decode(&ace_size_2).is_err());
    }
}
