//! Kerberos KDC proxy messages (MS-KKDCP 2.2.2), sans-IO: what a KDC proxy
//! decodes from an HTTPS POST body, and what it sends back.
//!
//! ```text
//! KDC-PROXY-MESSAGE ::= SEQUENCE {
//!     kerb-message   [0] OCTET STRING,   -- RFC 4120 7.2.2: 4-byte length, then the message
//!     target-domain  [1] KERB-REALM OPTIONAL,
//!     dclocator-hint [2] INTEGER OPTIONAL }
//! ```
//!
//! A request is decoded as far as the realm of its Kerberos message, so a
//! proxy can refuse what is not for its realm before forwarding anything:
//! an AS-REQ ([APPLICATION 10]) or TGS-REQ ([APPLICATION 12]) KDC-REQ
//! (RFC 4120 5.4.1), its req-body walked up to `realm`, the rest of each
//! SEQUENCE checked to be well-formed TLVs in ascending tag order. Anything
//! else is an error: another Kerberos message (a kpasswd request, RFC
//! 3244), multi-byte tags, indefinite or over-long lengths, a length prefix
//! that is not the rest, trailing bytes, more than [`MAX_REQUEST`]. The DER
//! walking is `spnego`'s (no recursion; every length bounded by its parent).

use crate::spnego::{der, only, tlv};
use crate::AuthError;

/// Largest KDC-PROXY-MESSAGE request accepted (an HTTP body): Windows caps
/// a Kerberos token at 64 KiB (MaxTokenSize), and a request is far smaller.
pub const MAX_REQUEST: usize = 64 * 1024;
/// Largest KDC reply relayed (its RFC 4120 7.2.2 length): a ticket with a
/// large PAC (many groups) stays well under this.
pub const MAX_REPLY: usize = 128 * 1024;

const TAG_INTEGER: u8 = 0x02;
const TAG_BIT_STRING: u8 = 0x03;
const TAG_OCTET_STRING: u8 = 0x04;
const TAG_SEQUENCE: u8 = 0x30;
const TAG_GENERAL_STRING: u8 = 0x1b;
/// RFC 4120 5.4.1, 5.4.2, 5.9.1: [APPLICATION n], constructed.
const AS_REQ: u8 = 0x6a;
const AS_REP: u8 = 0x6b;
const TGS_REQ: u8 = 0x6c;
const TGS_REP: u8 = 0x6d;
const KRB_ERROR: u8 = 0x7e;
const fn ctx(n: u8) -> u8 {
    0xa0 | n
}

/// Why a KDC proxy message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KkdcpError {
    /// Not a well-formed message (a proxy answers HTTP 400).
    #[error("malformed KDC proxy message: {0}")]
    Malformed(&'static str),
    /// Longer than the bound (HTTP 413).
    #[error("KDC proxy message of {len} bytes, more than {max}")]
    TooLarge { len: usize, max: usize },
    /// Well-formed, but not a message we relay (HTTP 400).
    #[error("unsupported Kerberos message: {0}")]
    Unsupported(&'static str),
}

impl From<AuthError> for KkdcpError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Malformed(w) => KkdcpError::Malformed(w),
            AuthError::Unsupported(w) => KkdcpError::Unsupported(w),
            // The DER walkers return only the two above.
            _ => KkdcpError::Malformed("DER"),
        }
    }
}

fn malformed(what: &'static str) -> KkdcpError {
    KkdcpError::Malformed(what)
}

/// A KDC-PROXY-MESSAGE as decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyMessage<'a> {
    /// The Kerberos message, without its 4-byte length prefix.
    pub kerb_message: &'a [u8],
    /// The realm the client sends to (not case-sensitive, MS-KKDCP 2.2.2).
    pub target_domain: Option<&'a str>,
    /// MS-NRPC DC locator flags; a proxy with fixed KDCs ignores them.
    pub dclocator_hint: Option<i64>,
}

/// Which KDC request a message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KdcRequestKind {
    As,
    Tgs,
}

/// A KDC-PROXY-MESSAGE carrying a KDC request, as decoded by [`decode_request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRequest<'a> {
    pub message: ProxyMessage<'a>,
    pub kind: KdcRequestKind,
    /// The KDC-REQ-BODY realm: the server's realm (RFC 4120 5.4.1).
    pub realm: &'a str,
}

impl ProxyRequest<'_> {
    /// Whether both the request's realm and the target domain (when sent)
    /// are `realm`, ignoring ASCII case (MS-KKDCP 2.2.2).
    pub fn is_for(&self, realm: &str) -> bool {
        self.realm.eq_ignore_ascii_case(realm) && self.message.target_domain.is_none_or(|d| d.eq_ignore_ascii_case(realm))
    }

    /// The bytes to send to a KDC over TCP (RFC 4120 7.2.2): length, message.
    pub fn framed(&self) -> Vec<u8> {
        frame(self.message.kerb_message)
    }
}

/// `msg` with the RFC 4120 7.2.2 4-byte big-endian length before it.
fn frame(msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + 4);
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
    out
}

/// A KerberosString (RFC 4120 5.2.1: GeneralString, IA5 characters in
/// practice); we take printable ASCII only, at least one character.
fn kerberos_string(contents: &[u8]) -> Result<&str, KkdcpError> {
    if contents.is_empty() || !contents.iter().all(|b| (0x20..0x7f).contains(b)) {
        return Err(malformed("realm: not printable ASCII"));
    }
    std::str::from_utf8(contents).map_err(|_| malformed("realm: not printable ASCII"))
}

/// A DER INTEGER of at most 8 octets.
fn integer(contents: &[u8]) -> Result<i64, KkdcpError> {
    let (&first, _) = contents.split_first().ok_or(malformed("INTEGER: empty"))?;
    if contents.len() > 8 {
        return Err(malformed("INTEGER: too long"));
    }
    let init: i64 = if first & 0x80 != 0 { -1 } else { 0 };
    Ok(contents.iter().fold(init, |acc, &b| (acc << 8) | i64::from(b)))
}

/// Walks `fields` (the contents of a SEQUENCE) as TLVs whose tags must
/// rise; returns them. At most 32 (RFC 4120 SEQUENCEs have at most 12).
fn fields(mut input: &[u8]) -> Result<Vec<(u8, &[u8])>, KkdcpError> {
    let mut out: Vec<(u8, &[u8])> = Vec::new();
    while !input.is_empty() {
        let (tag, contents, rest) = tlv(input)?;
        if out.last().is_some_and(|&(last, _)| tag <= last) {
            return Err(malformed("SEQUENCE: fields out of order"));
        }
        if out.len() == 32 {
            return Err(malformed("SEQUENCE: too many fields"));
        }
        out.push((tag, contents));
        input = rest;
    }
    Ok(out)
}

/// Decodes a KDC-PROXY-MESSAGE of at most `max` bytes.
pub fn decode_message(body: &[u8], max: usize) -> Result<ProxyMessage<'_>, KkdcpError> {
    if body.len() > max {
        return Err(KkdcpError::TooLarge { len: body.len(), max });
    }
    let seq = only(body, TAG_SEQUENCE, "KDC-PROXY-MESSAGE: expected SEQUENCE")?;
    let mut msg = ProxyMessage { kerb_message: &[], target_domain: None, dclocator_hint: None };
    let mut seen_kerb = false;
    for (tag, value) in fields(seq)? {
        match tag {
            t if t == ctx(0) => {
                let framed = only(value, TAG_OCTET_STRING, "kerb-message: expected OCTET STRING")?;
                let (prefix, kerb) = framed.split_first_chunk::<4>().ok_or(malformed("kerb-message: no length prefix"))?;
                let len = u32::from_be_bytes(*prefix);
                if usize::try_from(len).ok() != Some(kerb.len()) {
                    return Err(malformed("kerb-message: length prefix is not the message's"));
                }
                msg.kerb_message = kerb;
                seen_kerb = true;
            }
            t if t == ctx(1) => {
                msg.target_domain = Some(kerberos_string(only(value, TAG_GENERAL_STRING, "target-domain: expected GeneralString")?)?)
            }
            t if t == ctx(2) => msg.dclocator_hint = Some(integer(only(value, TAG_INTEGER, "dclocator-hint: expected INTEGER")?)?),
            _ => return Err(malformed("KDC-PROXY-MESSAGE: unknown field")),
        }
    }
    if !seen_kerb {
        return Err(malformed("KDC-PROXY-MESSAGE: no kerb-message"));
    }
    Ok(msg)
}

/// Encodes `msg` (the inverse of [`decode_message`], in DER).
pub fn encode_message(msg: &ProxyMessage<'_>) -> Vec<u8> {
    let mut seq = der(ctx(0), &der(TAG_OCTET_STRING, &frame(msg.kerb_message)));
    if let Some(d) = msg.target_domain {
        seq.extend_from_slice(&der(ctx(1), &der(TAG_GENERAL_STRING, d.as_bytes())));
    }
    if let Some(h) = msg.dclocator_hint {
        // Minimal two's complement: drop leading octets that only repeat the sign.
        let bytes = h.to_be_bytes();
        let start = bytes
            .windows(2)
            .take_while(|w| matches!(w, [0, b] if b & 0x80 == 0) || matches!(w, [0xff, b] if b & 0x80 != 0))
            .count();
        seq.extend_from_slice(&der(ctx(2), &der(TAG_INTEGER, bytes.get(start..).unwrap_or_default())));
    }
    der(TAG_SEQUENCE, &seq)
}

/// Decodes a proxy request: a KDC-PROXY-MESSAGE of at most [`MAX_REQUEST`]
/// bytes whose kerb-message is an AS-REQ or TGS-REQ, to its realm.
pub fn decode_request(body: &[u8]) -> Result<ProxyRequest<'_>, KkdcpError> {
    let message = decode_message(body, MAX_REQUEST)?;
    let (kind, realm) = kdc_req_realm(message.kerb_message)?;
    Ok(ProxyRequest { message, kind, realm })
}

/// RFC 4120 5.4.1: KDC-REQ ::= SEQUENCE { pvno [1] INTEGER (5), msg-type
/// [2] INTEGER (10 -- AS -- | 12 -- TGS --), padata [3] SEQUENCE OF
/// PA-DATA OPTIONAL, req-body [4] KDC-REQ-BODY }, and of KDC-REQ-BODY
/// the fields up to realm: kdc-options [0] KDCOptions (a BIT STRING),
/// cname [1] PrincipalName OPTIONAL, realm [2] Realm.
fn kdc_req_realm(msg: &[u8]) -> Result<(KdcRequestKind, &str), KkdcpError> {
    let (kind, msg_type) = match msg.first() {
        Some(&AS_REQ) => (KdcRequestKind::As, 10),
        Some(&TGS_REQ) => (KdcRequestKind::Tgs, 12),
        Some(_) => return Err(KkdcpError::Unsupported("not an AS-REQ or TGS-REQ")),
        None => return Err(malformed("empty Kerberos message")),
    };
    let app = msg.first().copied().unwrap_or_default();
    let seq = only(only(msg, app, "KDC-REQ")?, TAG_SEQUENCE, "KDC-REQ: expected SEQUENCE")?;
    let kdc_req = fields(seq)?;
    let mut f = kdc_req.iter().copied().peekable();
    let pvno = take(&mut f, ctx(1), "KDC-REQ: no pvno")?;
    if integer(only(pvno, TAG_INTEGER, "pvno: expected INTEGER")?)? != 5 {
        return Err(KkdcpError::Unsupported("Kerberos pvno is not 5"));
    }
    let got = take(&mut f, ctx(2), "KDC-REQ: no msg-type")?;
    if integer(only(got, TAG_INTEGER, "msg-type: expected INTEGER")?)? != msg_type {
        return Err(malformed("KDC-REQ: msg-type is not its tag's"));
    }
    if f.peek().is_some_and(|&(t, _)| t == ctx(3)) {
        let padata = take(&mut f, ctx(3), "KDC-REQ: padata")?;
        only(padata, TAG_SEQUENCE, "padata: expected SEQUENCE OF")?;
    }
    let req_body = take(&mut f, ctx(4), "KDC-REQ: no req-body")?;
    if f.next().is_some() {
        return Err(malformed("KDC-REQ: unknown field"));
    }

    let body = fields(only(req_body, TAG_SEQUENCE, "req-body: expected SEQUENCE")?)?;
    let mut f = body.iter().copied().peekable();
    only(take(&mut f, ctx(0), "req-body: no kdc-options")?, TAG_BIT_STRING, "kdc-options: expected BIT STRING")?;
    if f.peek().is_some_and(|&(t, _)| t == ctx(1)) {
        let cname = take(&mut f, ctx(1), "req-body: cname")?;
        only(cname, TAG_SEQUENCE, "cname: expected PrincipalName")?;
    }
    let realm = take(&mut f, ctx(2), "req-body: no realm")?;
    let realm = kerberos_string(only(realm, TAG_GENERAL_STRING, "realm: expected GeneralString")?)?;
    // sname, from, till, rtime, nonce, etype, ...: context-specific
    // fields, already walked as well-formed TLVs in ascending order.
    if f.any(|(t, _)| t & 0xe0 != 0xa0) {
        return Err(malformed("req-body: not a context-specific field"));
    }
    Ok((kind, realm))
}

/// The next field if it has tag `tag`.
fn take<'a>(
    f: &mut impl Iterator<Item = (u8, &'a [u8])>,
    tag: u8,
    what: &'static str,
) -> Result<&'a [u8], KkdcpError> {
    match f.next() {
        Some((t, v)) if t == tag => Ok(v),
        _ => Err(malformed(what)),
    }
}

/// The length of a KDC reply from its RFC 4120 7.2.2 prefix, at most
/// [`MAX_REPLY`]; the high bit is reserved (an extension we do not speak).
pub fn reply_len(prefix: [u8; 4]) -> Result<usize, KkdcpError> {
    let len = u32::from_be_bytes(prefix);
    if len & 0x8000_0000 != 0 {
        return Err(KkdcpError::Unsupported("KDC reply length with the reserved high bit"));
    }
    let len = usize::try_from(len).map_err(|_| malformed("KDC reply length"))?;
    if len > MAX_REPLY {
        return Err(KkdcpError::TooLarge { len, max: MAX_REPLY });
    }
    Ok(len)
}

/// Checks a KDC reply before relaying it: one AS-REP, TGS-REP or KRB-ERROR
/// TLV, nothing after it.
pub fn check_reply(reply: &[u8]) -> Result<(), KkdcpError> {
    match reply.first() {
        Some(&t @ (AS_REP | TGS_REP | KRB_ERROR)) => {
            only(reply, t, "KDC reply")?;
            Ok(())
        }
        _ => Err(malformed("KDC reply is not an AS-REP, TGS-REP or KRB-ERROR")),
    }
}

/// The proxy's answer: a KDC-PROXY-MESSAGE whose kerb-message is `reply`
/// (the KDC's reply, without its length prefix) with its length prefix.
pub fn encode_reply(reply: &[u8]) -> Vec<u8> {
    encode_message(&ProxyMessage { kerb_message: reply, target_domain: None, dclocator_hint: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gs(s: &str) -> Vec<u8> {
        der(TAG_GENERAL_STRING, s.as_bytes())
    }

    fn int(v: u8) -> Vec<u8> {
        der(TAG_INTEGER, &[v])
    }

    fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
        der(TAG_SEQUENCE, &parts.concat())
    }

    /// An RFC 4120 KDC-REQ with tag `app` and msg-type `msg_type` for
    /// alice@`realm`, with padata when `padata`.
    fn kdc_req(app: u8, msg_type: u8, realm: &str, padata: bool) -> Vec<u8> {
        let body = seq(&[
            der(ctx(0), &der(TAG_BIT_STRING, &[0, 0x40, 0, 0, 0x10])),
            der(ctx(1), &seq(&[der(ctx(0), &int(1)), der(ctx(1), &seq(&[gs("alice")]))])),
            der(ctx(2), &gs(realm)),
            der(ctx(3), &seq(&[der(ctx(0), &int(2)), der(ctx(1), &seq(&[gs("krbtgt"), gs(realm)]))])),
            der(ctx(5), &der(0x18, b"20370913024805Z")),
            der(ctx(7), &der(TAG_INTEGER, &[0x12, 0x34, 0x56, 0x78])),
            der(ctx(8), &seq(&[int(18), int(17)])),
        ]);
        let mut fields = vec![der(ctx(1), &int(5)), der(ctx(2), &int(msg_type))];
        if padata {
            fields.push(der(ctx(3), &seq(&[seq(&[der(ctx(1), &int(128)), der(ctx(2), &der(TAG_OCTET_STRING, &[0x30, 0]))])])));
        }
        fields.push(der(ctx(4), &body));
        der(app, &seq(&fields))
    }

    fn proxy(kerb: &[u8], domain: Option<&str>) -> Vec<u8> {
        encode_message(&ProxyMessage { kerb_message: kerb, target_domain: domain, dclocator_hint: None })
    }

    #[test]
    fn as_req_and_tgs_req_give_their_realm() {
        let as_req = kdc_req(AS_REQ, 10, "EXAMPLE.TEST", false);
        let body = proxy(&as_req, Some("EXAMPLE.TEST"));
        let r = decode_request(&body).unwrap();
        assert_eq!(r.kind, KdcRequestKind::As);
        assert_eq!(r.realm, "EXAMPLE.TEST");
        assert_eq!(r.message.kerb_message, as_req.as_slice());
        assert_eq!(r.message.target_domain, Some("EXAMPLE.TEST"));
        assert_eq!(r.framed(), [&(as_req.len() as u32).to_be_bytes()[..], &as_req].concat());
        assert!(r.is_for("EXAMPLE.TEST") && r.is_for("example.test"));
        assert!(!r.is_for("OTHER.TEST"));

        let tgs_req = kdc_req(TGS_REQ, 12, "EXAMPLE.TEST", true);
        let body = proxy(&tgs_req, None);
        let r = decode_request(&body).unwrap();
        assert_eq!((r.kind, r.realm, r.message.target_domain), (KdcRequestKind::Tgs, "EXAMPLE.TEST", None));
        assert!(r.is_for("EXAMPLE.TEST"));

        // Either realm not ours: refused by is_for.
        let body = proxy(&kdc_req(AS_REQ, 10, "OTHER.TEST", false), Some("EXAMPLE.TEST"));
        let r = decode_request(&body).unwrap();
        assert!(!r.is_for("EXAMPLE.TEST"));
        let body = proxy(&as_req, Some("OTHER.TEST"));
        let r = decode_request(&body).unwrap();
        assert!(!r.is_for("EXAMPLE.TEST"));
    }

    /// What MIT kinit 1.20 (Debian 12) POSTs for `kinit alice` in realm
    /// SMBQ.TEST (a throwaway test realm; the AS-REQ carries no key
    /// material: pa-data 149 and 150, both empty), captured from the
    /// e2e fixture (tests/e2e/krb5_kdc.py) with its `kdc` an HTTPS URL.
    const MIT_KINIT_AS_REQ: &str = concat!(
        "3081caa081ba0481b7000000b36a81b03081ada103020105a20302010aa31a3018300aa10402020096a2020400300aa1040202",
        "0095a2020400a48184308181a00703050040000010a1123010a003020101a10930071b05616c696365a20b1b09534d42512e54",
        "455354a31e301ca003020102a11530131b066b72627467741b09534d42512e54455354a511180f32303236313132393130303231",
        "375aa70602040a1bcceaa81a301802011202011102011402011302011002011702011902011aa10b1b09534d42512e54455354",
    );

    #[test]
    fn mit_kinit_request() {
        let body = hex::decode(MIT_KINIT_AS_REQ).unwrap();
        let r = decode_request(&body).unwrap();
        assert_eq!((r.kind, r.realm, r.message.target_domain), (KdcRequestKind::As, "SMBQ.TEST", Some("SMBQ.TEST")));
        assert_eq!(r.message.dclocator_hint, None);
        assert_eq!(r.message.kerb_message.len(), 0xb3);
        assert!(r.is_for("SMBQ.TEST") && !r.is_for("OTHER.TEST"));
        // What goes to the KDC is the kerb-message as sent, prefix and all.
        assert_eq!(r.framed(), body[9..9 + 4 + 0xb3]);
        // MIT encodes DER: re-encoding gives the same bytes.
        assert_eq!(encode_message(&r.message), body);
        for n in 0..body.len() {
            assert!(decode_request(&body[..n]).is_err(), "prefix {n}");
        }
    }

    #[test]
    fn every_prefix_and_every_extension_fails() {
        let good = proxy(&kdc_req(TGS_REQ, 12, "EXAMPLE.TEST", true), Some("EXAMPLE.TEST"));
        assert!(decode_request(&good).is_ok());
        for n in 0..good.len() {
            assert!(decode_request(&good[..n]).is_err(), "prefix {n}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode_request(&trailing).is_err());
    }

    #[test]
    fn bad_messages_are_errors() {
        let as_req = kdc_req(AS_REQ, 10, "EXAMPLE.TEST", false);
        let m = |e: Result<ProxyRequest<'_>, KkdcpError>| e.map(|_| ());
        let malformed = |body: &[u8]| matches!(decode_request(body), Err(KkdcpError::Malformed(_)));
        // The length prefix must be the rest.
        let mut framed = frame(&as_req);
        framed[3] ^= 1;
        assert!(malformed(&seq(&[der(ctx(0), &der(TAG_OCTET_STRING, &framed))])));
        assert!(malformed(&seq(&[der(ctx(0), &der(TAG_OCTET_STRING, &[0, 0, 0]))])));
        // msg-type not the tag's; pvno not 5; not a KDC-REQ (an AP-REQ, [APPLICATION 14]).
        assert!(malformed(&proxy(&kdc_req(TGS_REQ, 10, "EXAMPLE.TEST", false), None)));
        let mut pvno4 = as_req.clone();
        let at = pvno4.windows(5).position(|w| w == [0xa1, 3, 2, 1, 5]).unwrap();
        pvno4[at + 4] = 4;
        assert_eq!(m(decode_request(&proxy(&pvno4, None))), Err(KkdcpError::Unsupported("Kerberos pvno is not 5")));
        let mut ap_req = as_req.clone();
        ap_req[0] = 0x6e;
        assert!(matches!(decode_request(&proxy(&ap_req, None)), Err(KkdcpError::Unsupported(_))));
        // No kerb-message; an unknown field; fields out of order; a repeated field.
        assert!(malformed(&seq(&[der(ctx(1), &gs("EXAMPLE.TEST"))])));
        let kerb = der(ctx(0), &der(TAG_OCTET_STRING, &frame(&as_req)));
        assert!(malformed(&seq(&[kerb.clone(), der(ctx(3), &int(0))])));
        assert!(malformed(&seq(&[der(ctx(1), &gs("EXAMPLE.TEST")), kerb.clone()])));
        assert!(malformed(&seq(&[kerb.clone(), kerb.clone()])));
        // A realm that is not printable ASCII, or empty.
        assert!(malformed(&seq(&[kerb.clone(), der(ctx(1), &der(TAG_GENERAL_STRING, b"EX\nAMPLE"))])));
        assert!(malformed(&seq(&[kerb.clone(), der(ctx(1), &der(TAG_GENERAL_STRING, b""))])));
        // DER forms we do not take: multi-byte tag, indefinite length, 4 length octets.
        for bad in [&[0x3f, 0x01, 0x02, 0x00][..], &[0x30, 0x80, 0x00, 0x00], &[0x30, 0x84, 0, 0, 0, 2, 0xa0, 0]] {
            assert!(malformed(bad), "{bad:02x?}");
        }
        // The same in the Kerberos message: its realm as an indefinite-length GeneralString.
        let mut indefinite = as_req.clone();
        let at = indefinite.windows(2).position(|w| w == [TAG_GENERAL_STRING, 12]).unwrap();
        indefinite[at + 1] = 0x80;
        assert!(decode_request(&proxy(&indefinite, None)).is_err());
    }

    #[test]
    fn oversize_fails() {
        let realm = "R".repeat(MAX_REQUEST);
        let body = proxy(&kdc_req(AS_REQ, 10, &realm, false), None);
        assert!(body.len() > MAX_REQUEST);
        assert_eq!(m_len(decode_request(&body)), Some(body.len()));
        // Just under the bound is fine (the realm is in the message twice).
        let realm = "R".repeat(MAX_REQUEST / 2 - 100);
        let body = proxy(&kdc_req(AS_REQ, 10, &realm, false), None);
        assert!(body.len() <= MAX_REQUEST, "{}", body.len());
        assert!(decode_request(&body).is_ok());
    }

    fn m_len(r: Result<ProxyRequest<'_>, KkdcpError>) -> Option<usize> {
        match r {
            Err(KkdcpError::TooLarge { len, max }) if max == MAX_REQUEST => Some(len),
            _ => None,
        }
    }

    #[test]
    fn replies() {
        let as_rep = der(AS_REP, &seq(&[der(ctx(0), &int(5))]));
        let body = encode_reply(&as_rep);
        let m = decode_message(&body, MAX_REPLY + 16).unwrap();
        assert_eq!(m, ProxyMessage { kerb_message: &as_rep, target_domain: None, dclocator_hint: None });
        assert_eq!(&body[..2], [TAG_SEQUENCE, body.len() as u8 - 2]);
        assert!(check_reply(&as_rep).is_ok());
        assert!(check_reply(&der(KRB_ERROR, &[])).is_ok());
        assert!(check_reply(&[as_rep.clone(), vec![0]].concat()).is_err());
        assert!(check_reply(&der(AS_REQ, &[])).is_err());
        assert!(check_reply(&[]).is_err());
        assert_eq!(reply_len([0, 0, 1, 0]), Ok(256));
        assert!(matches!(reply_len([0x80, 0, 0, 1]), Err(KkdcpError::Unsupported(_))));
        assert!(matches!(reply_len((MAX_REPLY as u32 + 1).to_be_bytes()), Err(KkdcpError::TooLarge { .. })));
        assert!(reply_len((MAX_REPLY as u32).to_be_bytes()).is_ok());
    }

    #[test]
    fn dclocator_hint_round_trips_in_minimal_der() {
        for (v, enc) in [
            (0i64, &[0u8][..]),
            (127, &[0x7f]),
            (128, &[0, 0x80]),
            (-1, &[0xff]),
            (-129, &[0xff, 0x7f]),
            (0xc000_0000, &[0, 0xc0, 0, 0, 0]),
            (i64::MAX, &[0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            (i64::MIN, &[0x80, 0, 0, 0, 0, 0, 0, 0]),
        ] {
            let msg = ProxyMessage { kerb_message: b"x", target_domain: Some("A.TEST"), dclocator_hint: Some(v) };
            let body = encode_message(&msg);
            assert!(body.windows(enc.len() + 2).any(|w| w == [&[TAG_INTEGER, enc.len() as u8][..], enc].concat()), "{v}");
            assert_eq!(decode_message(&body, MAX_REQUEST), Ok(msg));
        }
    }
}
