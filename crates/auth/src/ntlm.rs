//! NTLMSSP messages and NTLMv2 cryptography (MS-NLMP).
//!
//! Decoders borrow the input and bound every field by the message; encoders
//! build the messages this crate sends.

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use md5::{Digest, Md5};
use rc4::consts::U16;
use rc4::{Rc4, StreamCipher};

use crate::AuthError;

/// MS-NLMP 2.2.1: every NTLMSSP message starts with "NTLMSSP\0".
pub(crate) const SIGNATURE: &[u8; 8] = b"NTLMSSP\0";

const MSG_NEGOTIATE: u32 = 1;
const MSG_CHALLENGE: u32 = 2;
const MSG_AUTHENTICATE: u32 = 3;

// MS-NLMP 2.2.2.5 NEGOTIATE flags.
pub(crate) const NEGOTIATE_UNICODE: u32 = 0x0000_0001;
pub(crate) const REQUEST_TARGET: u32 = 0x0000_0004;
pub(crate) const NEGOTIATE_SIGN: u32 = 0x0000_0010;
pub(crate) const NEGOTIATE_SEAL: u32 = 0x0000_0020;
pub(crate) const NEGOTIATE_NTLM: u32 = 0x0000_0200;
pub(crate) const NEGOTIATE_ANONYMOUS: u32 = 0x0000_0800;
pub(crate) const NEGOTIATE_ALWAYS_SIGN: u32 = 0x0000_8000;
pub(crate) const TARGET_TYPE_SERVER: u32 = 0x0002_0000;
pub(crate) const NEGOTIATE_EXTENDED_SESSIONSECURITY: u32 = 0x0008_0000;
pub(crate) const NEGOTIATE_TARGET_INFO: u32 = 0x0080_0000;
pub(crate) const NEGOTIATE_VERSION: u32 = 0x0200_0000;
pub(crate) const NEGOTIATE_128: u32 = 0x2000_0000;
pub(crate) const NEGOTIATE_KEY_EXCH: u32 = 0x4000_0000;
pub(crate) const NEGOTIATE_56: u32 = 0x8000_0000;

/// Flags the server echoes when the client asked for them (MS-NLMP 3.2.5.1.1).
pub(crate) const ECHOED_FLAGS: u32 = NEGOTIATE_SIGN
    | NEGOTIATE_SEAL
    | NEGOTIATE_ALWAYS_SIGN
    | NEGOTIATE_KEY_EXCH
    | NEGOTIATE_128
    | NEGOTIATE_56
    | NEGOTIATE_EXTENDED_SESSIONSECURITY;

// MS-NLMP 2.2.2.1 AV_PAIR ids.
pub(crate) const AV_EOL: u16 = 0;
pub(crate) const AV_NB_COMPUTER_NAME: u16 = 1;
pub(crate) const AV_NB_DOMAIN_NAME: u16 = 2;
pub(crate) const AV_DNS_COMPUTER_NAME: u16 = 3;
pub(crate) const AV_DNS_DOMAIN_NAME: u16 = 4;
pub(crate) const AV_FLAGS: u16 = 6;
pub(crate) const AV_TIMESTAMP: u16 = 7;
/// MS-NLMP 2.2.2.1 MsvAvFlags bit 0x2: the AUTHENTICATE message carries a MIC.
pub(crate) const AV_FLAG_MIC_PRESENT: u32 = 0x2;
/// Most AV pairs we accept in one list (real lists hold about ten).
const MAX_AV_PAIRS: usize = 64;

/// MS-NLMP 2.2.2.10 VERSION: 10.0 build 20348, NTLMSSP_REVISION_W2K3.
pub(crate) const VERSION: [u8; 8] = [10, 0, 0x7c, 0x4f, 0, 0, 0, 0x0f];

/// MS-NLMP 2.2.1.3: offset of the MIC inside AUTHENTICATE_MESSAGE, and the
/// header length when Version and MIC are present.
pub(crate) const MIC_OFFSET: usize = 72;
const AUTH_HEADER_LEN: usize = 88;

/// NTLMv2_CLIENT_CHALLENGE (MS-NLMP 2.2.2.7) fixed part: RespType, HiRespType,
/// Reserved1/2, TimeStamp, ChallengeFromClient, Reserved3.
const CLIENT_CHALLENGE_HEADER: usize = 28;

fn malformed(what: &'static str) -> AuthError {
    AuthError::Malformed(what)
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes(s.try_into().ok()?))
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

/// MS-NLMP 2.2.1: a Len/MaxLen/BufferOffset triple at `at`, resolved against
/// the whole message. Empty fields are returned empty whatever their offset.
fn field(msg: &[u8], at: usize) -> Result<&[u8], AuthError> {
    let len = u16_at(msg, at).ok_or(malformed("NTLMSSP header truncated"))? as usize;
    let offset = u32_at(msg, at + 4).ok_or(malformed("NTLMSSP header truncated"))? as usize;
    if len == 0 {
        return Ok(&[]);
    }
    offset
        .checked_add(len)
        .and_then(|end| msg.get(offset..end))
        .ok_or(malformed("NTLMSSP field outside message"))
}

/// Checks the signature and message type (MS-NLMP 2.2.1).
fn check_header(msg: &[u8], kind: u32) -> Result<(), AuthError> {
    if msg.get(..8) != Some(SIGNATURE.as_slice()) {
        return Err(malformed("not an NTLMSSP message"));
    }
    if u32_at(msg, 8) != Some(kind) {
        return Err(malformed("unexpected NTLMSSP message type"));
    }
    Ok(())
}

pub(crate) fn utf16le(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

fn decode_string(b: &[u8], unicode: bool) -> Result<String, AuthError> {
    if !unicode {
        // OEM strings: we only accept ASCII, the one code page every peer shares.
        if !b.is_ascii() {
            return Err(malformed("non-ASCII OEM string"));
        }
        return Ok(b.iter().map(|&c| char::from(c)).collect());
    }
    let chunks = b.chunks_exact(2);
    if !chunks.remainder().is_empty() {
        return Err(malformed("odd-length UTF-16 string"));
    }
    let units: Vec<u16> = chunks.filter_map(|c| c.try_into().ok().map(u16::from_le_bytes)).collect();
    String::from_utf16(&units).map_err(|_| malformed("invalid UTF-16 string"))
}

/// Constant-time equality for MACs and proofs.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) fn md5(parts: &[&[u8]]) -> [u8; 16] {
    let mut h = Md5::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// HMAC-MD5 (RFC 2104) with a 16-byte key. HMAC zero-pads keys shorter than
/// the 64-byte MD5 block, so the padded key is the same key and keying is
/// infallible.
pub(crate) fn hmac_md5(key: &[u8; 16], parts: &[&[u8]]) -> [u8; 16] {
    let mut block = [0u8; 64];
    for (d, s) in block.iter_mut().zip(key) {
        *d = *s;
    }
    let mut mac = <Hmac<Md5> as KeyInit>::new(&block.into());
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// RC4 with a 16-byte key over `data` (MS-NLMP 3.4.5.3 / 3.1.5.1.2 RC4K).
pub(crate) fn rc4(key: &[u8; 16], data: &mut [u8]) {
    let mut c = Rc4::<U16>::new(key.into());
    c.apply_keystream(data);
}

/// MS-NLMP 3.3.1 NTOWFv1: MD4(UNICODE(Passwd)).
pub fn nt_hash(password: &str) -> [u8; 16] {
    use md4::Md4;
    let mut h = Md4::new();
    h.update(utf16le(password));
    h.finalize().into()
}

/// MS-NLMP 3.3.2 NTOWFv2: HMAC_MD5(NTOWFv1, UNICODE(Uppercase(User) || UserDom)).
pub(crate) fn ntowf_v2(nt_hash: &[u8; 16], user: &str, domain: &str) -> [u8; 16] {
    let mut s = user.to_uppercase();
    s.push_str(domain);
    hmac_md5(nt_hash, &[&utf16le(&s)])
}

/// MS-NLMP 3.3.2: the client's NTLMv2 responses and SessionBaseKey.
pub(crate) struct V2Response {
    pub nt: Vec<u8>,
    pub lm: [u8; 24],
    pub session_base_key: [u8; 16],
}

/// MS-NLMP 3.3.2 ComputeResponse (NTLMv2): `av_pairs` is the ServerName
/// field (the AV pair list, with its MsvAvEOL).
pub(crate) fn v2_response(
    ntowf: &[u8; 16],
    server_challenge: &[u8; 8],
    client_challenge: &[u8; 8],
    time: u64,
    av_pairs: &[u8],
) -> V2Response {
    let mut temp = vec![1, 1, 0, 0, 0, 0, 0, 0];
    temp.extend_from_slice(&time.to_le_bytes());
    temp.extend_from_slice(client_challenge);
    temp.extend_from_slice(&[0; 4]);
    temp.extend_from_slice(av_pairs);
    temp.extend_from_slice(&[0; 4]);
    let proof = hmac_md5(ntowf, &[server_challenge, &temp]);
    let mut nt = proof.to_vec();
    nt.extend_from_slice(&temp);
    let lm_proof = hmac_md5(ntowf, &[server_challenge, client_challenge]);
    let mut lm = [0u8; 24];
    for (d, s) in lm.iter_mut().zip(lm_proof.iter().chain(client_challenge)) {
        *d = *s;
    }
    V2Response { nt, lm, session_base_key: hmac_md5(ntowf, &[&proof]) }
}

/// MS-NLMP 3.4.5.2 SIGNKEY (extended session security).
pub(crate) fn sign_key(exported: &[u8; 16], client_to_server: bool) -> [u8; 16] {
    let magic: &[u8] = if client_to_server {
        b"session key to client-to-server signing key magic constant\0"
    } else {
        b"session key to server-to-client signing key magic constant\0"
    };
    md5(&[exported, magic])
}

/// MS-NLMP 3.4.5.3 SEALKEY (extended session security).
pub(crate) fn seal_key(flags: u32, exported: &[u8; 16], client_to_server: bool) -> [u8; 16] {
    let key: &[u8] = if flags & NEGOTIATE_128 != 0 {
        exported
    } else if flags & NEGOTIATE_56 != 0 {
        exported.get(..7).unwrap_or(exported)
    } else {
        exported.get(..5).unwrap_or(exported)
    };
    let magic: &[u8] = if client_to_server {
        b"session key to client-to-server sealing key magic constant\0"
    } else {
        b"session key to server-to-client sealing key magic constant\0"
    };
    md5(&[key, magic])
}

/// MS-NLMP 3.4.4.2 MAC with extended session security: HMAC_MD5(SigningKey,
/// SeqNum || Message)[0..8], RC4-encrypted with the sealing handle when key
/// exchange was negotiated, framed as NTLMSSP_MESSAGE_SIGNATURE (2.2.2.9.2).
pub(crate) fn mac(
    sign_key: &[u8; 16],
    seal: &mut Rc4<U16>,
    key_exch: bool,
    seq: u32,
    message: &[u8],
) -> [u8; 16] {
    let digest = hmac_md5(sign_key, &[&seq.to_le_bytes(), message]);
    let mut checksum = [0u8; 8];
    for (d, s) in checksum.iter_mut().zip(digest) {
        *d = s;
    }
    if key_exch {
        seal.apply_keystream(&mut checksum);
    }
    let mut out = [0u8; 16];
    let sig = 1u32.to_le_bytes().into_iter().chain(checksum).chain(seq.to_le_bytes());
    for (d, s) in out.iter_mut().zip(sig) {
        *d = s;
    }
    out
}

/// GSS_GetMIC (MS-NLMP 3.4.4.2) as the first message of a direction:
/// sequence number 0 and fresh sealing state. This is what SPNEGO's
/// mechListMIC uses. Needs extended session security.
pub(crate) fn first_mic(flags: u32, exported: &[u8; 16], client_to_server: bool, message: &[u8]) -> Result<[u8; 16], AuthError> {
    if flags & NEGOTIATE_EXTENDED_SESSIONSECURITY == 0 {
        return Err(AuthError::Unsupported("mechListMIC without NTLM extended session security"));
    }
    let sealing = seal_key(flags, exported, client_to_server);
    let mut handle = Rc4::<U16>::new((&sealing).into());
    Ok(mac(
        &sign_key(exported, client_to_server),
        &mut handle,
        flags & NEGOTIATE_KEY_EXCH != 0,
        0,
        message,
    ))
}

/// MS-NLMP 2.2.1.1 NEGOTIATE_MESSAGE: only the flags matter to us. The
/// fixed part is 32 bytes, 40 with the Version that NEGOTIATE_VERSION announces.
pub(crate) fn decode_negotiate(msg: &[u8]) -> Result<u32, AuthError> {
    check_header(msg, MSG_NEGOTIATE)?;
    let flags = u32_at(msg, 12).ok_or(malformed("NEGOTIATE truncated"))?;
    let fixed = if flags & NEGOTIATE_VERSION != 0 { 40 } else { 32 };
    if msg.len() < fixed {
        return Err(malformed("NEGOTIATE truncated"));
    }
    Ok(flags)
}

/// MS-NLMP 2.2.1.1: NEGOTIATE_MESSAGE with no domain or workstation.
pub(crate) fn encode_negotiate(flags: u32) -> Vec<u8> {
    let mut m = SIGNATURE.to_vec();
    m.extend_from_slice(&MSG_NEGOTIATE.to_le_bytes());
    m.extend_from_slice(&flags.to_le_bytes());
    // DomainNameFields and WorkstationFields: empty, pointing at the payload.
    for _ in 0..2 {
        m.extend_from_slice(&[0, 0, 0, 0]);
        m.extend_from_slice(&40u32.to_le_bytes());
    }
    m.extend_from_slice(&VERSION);
    m
}

/// Appends one AV_PAIR (MS-NLMP 2.2.2.1).
pub(crate) fn push_av(out: &mut Vec<u8>, id: u16, value: &[u8]) {
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&(value.len().min(u16::MAX as usize) as u16).to_le_bytes());
    out.extend_from_slice(value);
}

/// Parses an AV_PAIR list up to MsvAvEOL (MS-NLMP 2.2.2.1); the pairs are
/// returned without the EOL. A list that ends without EOL is accepted.
pub(crate) fn parse_av_pairs(mut b: &[u8]) -> Result<Vec<(u16, &[u8])>, AuthError> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let id = u16_at(b, 0).ok_or(malformed("AV_PAIR truncated"))?;
        let len = u16_at(b, 2).ok_or(malformed("AV_PAIR truncated"))? as usize;
        let value = b.get(4..4 + len).ok_or(malformed("AV_PAIR value truncated"))?;
        if id == AV_EOL {
            break;
        }
        if out.len() == MAX_AV_PAIRS {
            return Err(malformed("too many AV_PAIRs"));
        }
        out.push((id, value));
        b = b.get(4 + len..).unwrap_or(&[]);
    }
    Ok(out)
}

/// MS-NLMP 2.2.1.2 CHALLENGE_MESSAGE, as sent by a server.
pub(crate) fn encode_challenge(flags: u32, target_name: &str, server_challenge: &[u8; 8], target_info: &[u8]) -> Vec<u8> {
    const HEADER: u32 = 56;
    let name = utf16le(target_name);
    let name_len = name.len().min(u16::MAX as usize) as u16;
    let info_len = target_info.len().min(u16::MAX as usize) as u16;
    let mut m = SIGNATURE.to_vec();
    m.extend_from_slice(&MSG_CHALLENGE.to_le_bytes());
    m.extend_from_slice(&name_len.to_le_bytes());
    m.extend_from_slice(&name_len.to_le_bytes());
    m.extend_from_slice(&HEADER.to_le_bytes());
    m.extend_from_slice(&flags.to_le_bytes());
    m.extend_from_slice(server_challenge);
    m.extend_from_slice(&[0; 8]);
    m.extend_from_slice(&info_len.to_le_bytes());
    m.extend_from_slice(&info_len.to_le_bytes());
    m.extend_from_slice(&(HEADER + u32::from(name_len)).to_le_bytes());
    m.extend_from_slice(&VERSION);
    m.extend_from_slice(&name);
    m.extend_from_slice(target_info);
    m
}

/// The parts of a CHALLENGE_MESSAGE (MS-NLMP 2.2.1.2) a client uses.
pub(crate) struct Challenge<'a> {
    pub flags: u32,
    pub server_challenge: [u8; 8],
    pub target_info: &'a [u8],
}

pub(crate) fn decode_challenge(msg: &[u8]) -> Result<Challenge<'_>, AuthError> {
    check_header(msg, MSG_CHALLENGE)?;
    let flags = u32_at(msg, 20).ok_or(malformed("CHALLENGE truncated"))?;
    let server_challenge = msg
        .get(24..32)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .ok_or(malformed("CHALLENGE truncated"))?;
    let target_info = field(msg, 40)?;
    Ok(Challenge { flags, server_challenge, target_info })
}

/// The fields of an AUTHENTICATE_MESSAGE (MS-NLMP 2.2.1.3).
pub(crate) struct Authenticate<'a> {
    pub lm: &'a [u8],
    pub nt: &'a [u8],
    pub domain: String,
    pub user: String,
    pub encrypted_session_key: &'a [u8],
    pub flags: u32,
}

pub(crate) fn decode_authenticate(msg: &[u8]) -> Result<Authenticate<'_>, AuthError> {
    check_header(msg, MSG_AUTHENTICATE)?;
    let flags = u32_at(msg, 60).ok_or(malformed("AUTHENTICATE truncated"))?;
    let unicode = flags & NEGOTIATE_UNICODE != 0;
    Ok(Authenticate {
        lm: field(msg, 12)?,
        nt: field(msg, 20)?,
        domain: decode_string(field(msg, 28)?, unicode)?,
        user: decode_string(field(msg, 36)?, unicode)?,
        encrypted_session_key: field(msg, 52)?,
        flags,
    })
}

/// MS-NLMP 2.2.1.3 AUTHENTICATE_MESSAGE with Version and a zero MIC field
/// (the caller fills the MIC in at [`MIC_OFFSET`]).
pub(crate) struct AuthenticateOut<'a> {
    pub flags: u32,
    pub lm: &'a [u8],
    pub nt: &'a [u8],
    pub domain: &'a str,
    pub user: &'a str,
    pub encrypted_session_key: &'a [u8],
}

pub(crate) fn encode_authenticate(a: &AuthenticateOut<'_>) -> Vec<u8> {
    let domain = utf16le(a.domain);
    let user = utf16le(a.user);
    // Payload order: LM, NT, Domain, User, Workstation (empty), session key.
    let parts: [&[u8]; 6] = [a.lm, a.nt, &domain, &user, &[], a.encrypted_session_key];
    let mut m = SIGNATURE.to_vec();
    m.extend_from_slice(&MSG_AUTHENTICATE.to_le_bytes());
    let mut offset = AUTH_HEADER_LEN;
    let mut payload = Vec::new();
    for p in parts {
        let len = p.len().min(u16::MAX as usize) as u16;
        m.extend_from_slice(&len.to_le_bytes());
        m.extend_from_slice(&len.to_le_bytes());
        m.extend_from_slice(&(offset as u32).to_le_bytes());
        offset += p.len();
        payload.extend_from_slice(p);
    }
    m.extend_from_slice(&a.flags.to_le_bytes());
    m.extend_from_slice(&VERSION);
    m.extend_from_slice(&[0; 16]);
    m.extend_from_slice(&payload);
    m
}

/// MS-NLMP 3.1.5.1.2 / 3.2.5.1.2: MIC = HMAC_MD5(ExportedSessionKey,
/// NEGOTIATE || CHALLENGE || AUTHENTICATE-with-zero-MIC).
pub(crate) fn message_mic(exported: &[u8; 16], negotiate: &[u8], challenge: &[u8], authenticate: &[u8]) -> Option<[u8; 16]> {
    let mut auth = authenticate.to_vec();
    auth.get_mut(MIC_OFFSET..MIC_OFFSET + 16)?.fill(0);
    Some(hmac_md5(exported, &[negotiate, challenge, &auth]))
}

/// The outcome of checking an NTLMv2 response (MS-NLMP 3.3.2, 3.2.5.1.2).
pub(crate) struct Verified {
    pub exported_session_key: [u8; 16],
}

/// MS-NLMP 3.2.5.1.2 server side: checks NTProofStr against the NT hash for
/// each candidate domain, derives the exported session key and checks the
/// message MIC when the client declared one.
pub(crate) fn verify_v2(
    auth_msg: &[u8],
    auth: &Authenticate<'_>,
    nt_hash: &[u8; 16],
    domains: &[&str],
    server_challenge: &[u8; 8],
    negotiate: &[u8],
    challenge: &[u8],
) -> Result<Verified, AuthError> {
    let proof = auth.nt.get(..16).ok_or(AuthError::LogonFailure)?;
    let temp = auth.nt.get(16..).ok_or(AuthError::LogonFailure)?;
    if temp.len() < CLIENT_CHALLENGE_HEADER {
        return Err(AuthError::LogonFailure);
    }
    // MS-NLMP 2.2.2.7: the client challenge ends in AV_PAIRs. Ones that
    // do not parse make the message malformed, whatever the proof says
    // (INVALID_PARAMETER, as Samba answers: smbtorture
    // smb2.session.ntlmssp_bug14932).
    let pairs = parse_av_pairs(temp.get(CLIENT_CHALLENGE_HEADER..).unwrap_or(&[]))?;
    let ntowf = domains
        .iter()
        .map(|d| ntowf_v2(nt_hash, &auth.user, d))
        .find(|k| ct_eq(&hmac_md5(k, &[server_challenge, temp]), proof))
        .ok_or(AuthError::LogonFailure)?;
    // MS-NLMP 3.4.5.1 KXKEY: for NTLMv2 the key exchange key is the session base key.
    let key_exchange_key = hmac_md5(&ntowf, &[proof]);
    let exported_session_key = if auth.flags & NEGOTIATE_KEY_EXCH != 0 {
        let mut k: [u8; 16] = auth
            .encrypted_session_key
            .try_into()
            .map_err(|_| malformed("EncryptedRandomSessionKey is not 16 bytes"))?;
        rc4(&key_exchange_key, &mut k);
        k
    } else {
        key_exchange_key
    };
    let av_flags = pairs
        .iter()
        .find(|(id, _)| *id == AV_FLAGS)
        .and_then(|(_, v)| u32_at(v, 0))
        .unwrap_or(0);
    if av_flags & AV_FLAG_MIC_PRESENT != 0 {
        let sent = auth_msg.get(MIC_OFFSET..MIC_OFFSET + 16).ok_or(AuthError::LogonFailure)?;
        let expected = message_mic(&exported_session_key, negotiate, challenge, auth_msg).ok_or(AuthError::LogonFailure)?;
        if !ct_eq(sent, &expected) {
            return Err(AuthError::LogonFailure);
        }
    }
    Ok(Verified { exported_session_key })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> Vec<u8> {
        hex::decode(s.replace([' ', '\n'], "")).unwrap()
    }

    // MS-NLMP 4.2.1 common values.
    const USER: &str = "User";
    const DOMAIN: &str = "Domain";
    const PASSWORD: &str = "Password";
    const SERVER_CHALLENGE: [u8; 8] = [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef];
    const CLIENT_CHALLENGE: [u8; 8] = [0xaa; 8];
    const RANDOM_SESSION_KEY: [u8; 16] = [0x55; 16];

    /// MS-NLMP 4.2.4.1.3: the AV pairs of the 4.2.4 CHALLENGE_MESSAGE
    /// (NbDomainName "Domain", NbComputerName "Server", EOL).
    fn av_pairs() -> Vec<u8> {
        h("02000c0044006f006d00610069006e0001000c005300650072007600650072000000 0000")
    }

    /// MS-NLMP 4.2.4.3 CHALLENGE_MESSAGE.
    const CHALLENGE_4_2_4_3: &str = "4e544c4d53535000020000000c000c003800000033828ae20123456789abcdef00000000000000002400240044000000060070170000000f53006500720076006500720002000c0044006f006d00610069006e0001000c0053006500720076006500720000000000";

    /// MS-NLMP 4.2.4.3 AUTHENTICATE_MESSAGE.
    const AUTHENTICATE_4_2_4_3: &str = "
        4e544c4d535350000300000018001800 6c00000054005400840000000c000c00
        48000000080008005400000010001000 5c00000010001000d8000000358288e2
        0501280a0000000f44006f006d006100 69006e00550073006500720043004f00
        4d005000550054004500520086c35097 ac9cec102554764a57cccc19aaaaaaaa
        aaaaaaaa68cd0ab851e51c96aabc927b ebef6a1c010100000000000000000000
        00000000aaaaaaaaaaaaaaaa00000000 02000c0044006f006d00610069006e00
        01000c00530065007200760065007200 0000000000000000c5dad2544fc97990
        94ce1ce90bc9d03e";

    #[test]
    fn ntowfv1_4_2_2_1_2() {
        // MS-NLMP 4.2.2.1.2 NTOWFv1("Password").
        assert_eq!(nt_hash(PASSWORD).to_vec(), h("a4f49c406510bdcab6824ee7c30fd852"));
    }

    #[test]
    fn ntowfv2_4_2_4_1_1() {
        let k = ntowf_v2(&nt_hash(PASSWORD), USER, DOMAIN);
        assert_eq!(k.to_vec(), h("0c868a403bfd7a93a3001ef22ef02e3f"));
    }

    #[test]
    fn ntlmv2_response_4_2_4_2() {
        let k = ntowf_v2(&nt_hash(PASSWORD), USER, DOMAIN);
        let r = v2_response(&k, &SERVER_CHALLENGE, &CLIENT_CHALLENGE, 0, &av_pairs());
        // 4.2.4.2.1 LMv2 response.
        assert_eq!(r.lm.to_vec(), h("86c35097ac9cec102554764a57cccc19aaaaaaaaaaaaaaaa"));
        // 4.2.4.2.2 NTLMv2 response: NTProofStr then temp.
        assert_eq!(
            r.nt,
            h("68cd0ab851e51c96aabc927bebef6a1c 0101000000000000 0000000000000000 aaaaaaaaaaaaaaaa 00000000
               02000c0044006f006d00610069006e0001000c0053006500720076006500720000000000 00000000")
        );
        // 4.2.4.1.2 session base key.
        assert_eq!(r.session_base_key.to_vec(), h("8de40ccadbc14a82f15cb0ad0de95ca3"));
        // 4.2.4.2.3 encrypted session key: RC4(KeyExchangeKey, RandomSessionKey).
        let mut enc = RANDOM_SESSION_KEY;
        rc4(&r.session_base_key, &mut enc);
        assert_eq!(enc.to_vec(), h("c5dad2544fc9799094ce1ce90bc9d03e"));
    }

    #[test]
    fn challenge_4_2_4_3_decodes() {
        let msg = h(CHALLENGE_4_2_4_3);
        let c = decode_challenge(&msg).unwrap();
        assert_eq!(c.flags, 0xe28a_8233);
        assert_eq!(c.server_challenge, SERVER_CHALLENGE);
        assert_eq!(c.target_info, av_pairs().as_slice());
        let pairs = parse_av_pairs(c.target_info).unwrap();
        assert_eq!(pairs, vec![(AV_NB_DOMAIN_NAME, &utf16le("Domain")[..]), (AV_NB_COMPUTER_NAME, &utf16le("Server")[..])]);
    }

    #[test]
    fn authenticate_4_2_4_3_verifies() {
        let msg = h(AUTHENTICATE_4_2_4_3);
        let a = decode_authenticate(&msg).unwrap();
        assert_eq!(a.user, "User");
        assert_eq!(a.domain, "Domain");
        assert_eq!(a.flags, 0xe288_8235);
        let v = verify_v2(&msg, &a, &nt_hash(PASSWORD), &["Domain"], &SERVER_CHALLENGE, &[], &h(CHALLENGE_4_2_4_3)).unwrap();
        // 4.2.4.2.3: the exported session key is the RandomSessionKey.
        assert_eq!(v.exported_session_key, RANDOM_SESSION_KEY);
        // Wrong password, wrong domain, wrong challenge.
        let fail = |hash: &[u8; 16], dom: &str, ch: &[u8; 8]| verify_v2(&msg, &a, hash, &[dom], ch, &[], &[]).is_err();
        assert!(fail(&nt_hash("password"), "Domain", &SERVER_CHALLENGE));
        assert!(fail(&nt_hash(PASSWORD), "DOMAIN", &SERVER_CHALLENGE));
        assert!(fail(&nt_hash(PASSWORD), "Domain", &[0; 8]));
        // A client challenge whose AV_PAIRs run past its end is malformed
        // before any proof is checked (smbtorture smb2.session.ntlmssp_bug14932).
        let mut nt = a.nt[..16 + CLIENT_CHALLENGE_HEADER].to_vec();
        nt.extend_from_slice(&[0x11, 0xa2, 0x08, 0x81, 0x50]);
        let bad = Authenticate { nt: &nt, ..a };
        let r = verify_v2(&msg, &bad, &nt_hash(PASSWORD), &["Domain"], &SERVER_CHALLENGE, &[], &[]);
        assert!(matches!(r, Err(AuthError::Malformed(_))), "{:?}", r.err());
    }

    #[test]
    fn keys_and_mac_4_2_4_4() {
        let flags = 0xe288_8235; // the 4.2.4.3 AUTHENTICATE flags: ESS, 128, key exchange
        // 4.2.4.4: client signing and sealing keys from ExportedSessionKey 0x55 * 16.
        assert_eq!(sign_key(&RANDOM_SESSION_KEY, true).to_vec(), h("4788dc861b4782f35d43fd98fe1a2d39"));
        let sealing = seal_key(flags, &RANDOM_SESSION_KEY, true);
        assert_eq!(sealing.to_vec(), h("59f600973cc4960a25480a7c196e4c58"));
        // GSS_WrapEx of "Plaintext": seal, then MAC with the same RC4 handle.
        let plaintext = utf16le("Plaintext");
        let mut handle = Rc4::<U16>::new((&sealing).into());
        let mut sealed = plaintext.clone();
        handle.apply_keystream(&mut sealed);
        assert_eq!(sealed, h("54e50165bf1936dc996020c1811b0f06fb5f"));
        let sig = mac(&sign_key(&RANDOM_SESSION_KEY, true), &mut handle, true, 0, &plaintext);
        assert_eq!(sig.to_vec(), h("010000007fb38ec5c55d497600000000"));
    }

    #[test]
    fn truncated_messages_are_errors() {
        for full in [h(CHALLENGE_4_2_4_3), h(AUTHENTICATE_4_2_4_3)] {
            for n in 0..full.len() {
                let cut = &full[..n];
                let _ = decode_challenge(cut);
                if let Ok(a) = decode_authenticate(cut) {
                    let _ = verify_v2(cut, &a, &nt_hash(PASSWORD), &["Domain"], &SERVER_CHALLENGE, &[], &[]);
                }
            }
        }
        assert!(decode_authenticate(&h(AUTHENTICATE_4_2_4_3)[..100]).is_err());
        assert!(decode_negotiate(b"NTLMSSP\0\x01\0\0\0").is_err());
    }

    #[test]
    fn oversized_field_lengths_are_errors() {
        let mut msg = h(AUTHENTICATE_4_2_4_3);
        msg[20..22].copy_from_slice(&0xffffu16.to_le_bytes()); // NT length
        assert!(matches!(decode_authenticate(&msg), Err(AuthError::Malformed(_))));
        let mut msg = h(AUTHENTICATE_4_2_4_3);
        msg[24..28].copy_from_slice(&u32::MAX.to_le_bytes()); // NT offset
        assert!(matches!(decode_authenticate(&msg), Err(AuthError::Malformed(_))));
        assert!(parse_av_pairs(&[1, 0, 0xff, 0xff, 0, 0]).is_err());
        let many: Vec<u8> = (0..MAX_AV_PAIRS + 1).flat_map(|_| [9u8, 0, 0, 0]).collect();
        assert!(parse_av_pairs(&many).is_err());
    }
}
