//! SPNEGO tokens (RFC 4178, MS-SPNG) in DER, decoded without recursion:
//! each structure is walked by its own code, every length is bounded by its
//! parent, and the whole token by [`MAX_TOKEN`].

use crate::AuthError;

/// Largest security token we decode (the SMB2 SESSION_SETUP buffer is
/// bounded by the message size; real SPNEGO/NTLMSSP tokens are < 4 KiB).
pub const MAX_TOKEN: usize = 64 * 1024;
/// Most mechanism OIDs we accept in a client's mechTypes list.
const MAX_MECH_TYPES: usize = 16;

/// Kerberos OIDs (MS-KILE 1.9, RFC 1964), DER contents.
pub(crate) use smbq_gssapi::{KRB5_OID, MS_KRB5_OID};
/// SPNEGO OID 1.3.6.1.5.5.2 (RFC 4178 3), DER contents.
const SPNEGO_OID: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x02];
/// NTLMSSP OID 1.3.6.1.4.1.311.2.2.10 (MS-NLMP 1.9), DER contents.
pub(crate) const NTLMSSP_OID: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0x82, 0x37, 0x02, 0x02, 0x0a];
/// MS-SPNG 3.2.5.2: the negHints hintName Windows and Samba send.
const HINT_NAME: &[u8] = b"not_defined_in_RFC4178@please_ignore";

const TAG_APPLICATION_0: u8 = 0x60;
const TAG_OID: u8 = 0x06;
const TAG_OCTET_STRING: u8 = 0x04;
const TAG_ENUMERATED: u8 = 0x0a;
const TAG_SEQUENCE: u8 = 0x30;
const TAG_GENERAL_STRING: u8 = 0x1b;
const fn ctx(n: u8) -> u8 {
    0xa0 | n
}

/// RFC 4178 4.2.2 negState.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NegState {
    AcceptCompleted = 0,
    AcceptIncomplete = 1,
    Reject = 2,
    RequestMic = 3,
}

fn malformed(what: &'static str) -> AuthError {
    AuthError::Malformed(what)
}

/// One DER TLV: (tag, contents, rest). Single-byte tags only, definite
/// lengths of at most 3 length octets, bounded by the input.
pub(crate) fn tlv(input: &[u8]) -> Result<(u8, &[u8], &[u8]), AuthError> {
    let (&tag, rest) = input.split_first().ok_or(malformed("DER: empty"))?;
    if tag & 0x1f == 0x1f {
        return Err(malformed("DER: multi-byte tag"));
    }
    let (&first, rest) = rest.split_first().ok_or(malformed("DER: no length"))?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 3 {
            return Err(malformed("DER: unsupported length form"));
        }
        let bytes = rest.get(..n).ok_or(malformed("DER: length truncated"))?;
        let len = bytes.iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, rest.get(n..).unwrap_or(&[]))
    };
    let contents = rest.get(..len).ok_or(malformed("DER: length past end"))?;
    Ok((tag, contents, rest.get(len..).unwrap_or(&[])))
}

/// A TLV with the expected tag.
fn expect<'a>(input: &'a [u8], want: u8, what: &'static str) -> Result<(&'a [u8], &'a [u8]), AuthError> {
    let (tag, contents, rest) = tlv(input)?;
    if tag != want {
        return Err(malformed(what));
    }
    Ok((contents, rest))
}

/// A TLV that must fill `input` exactly.
pub(crate) fn only<'a>(input: &'a [u8], want: u8, what: &'static str) -> Result<&'a [u8], AuthError> {
    let (contents, rest) = expect(input, want, what)?;
    if !rest.is_empty() {
        return Err(malformed("DER: trailing bytes"));
    }
    Ok(contents)
}

fn push_len(out: &mut Vec<u8>, len: usize) {
    match len {
        0..=0x7f => out.push(len as u8),
        0x80..=0xff => out.extend_from_slice(&[0x81, len as u8]),
        0x100..=0xffff => out.extend_from_slice(&[0x82, (len >> 8) as u8, len as u8]),
        _ => out.extend_from_slice(&[0x83, (len >> 16) as u8, (len >> 8) as u8, len as u8]),
    }
}

pub(crate) fn der(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    push_len(&mut out, contents.len());
    out.extend_from_slice(contents);
    out
}

/// RFC 2743 3.1 InitialContextToken: [APPLICATION 0] { SPNEGO OID, token }.
fn gss_wrap(inner: &[u8]) -> Vec<u8> {
    let mut body = der(TAG_OID, SPNEGO_OID);
    body.extend_from_slice(inner);
    der(TAG_APPLICATION_0, &body)
}

/// RFC 4178 4.2.1 NegTokenInit (and MS-SPNG NegTokenInit2) as received.
#[derive(Debug)]
pub(crate) struct NegTokenInit<'a> {
    /// OID contents, in the initiator's order of preference.
    pub mech_types: Vec<&'a [u8]>,
    /// The DER of the MechTypeList SEQUENCE exactly as sent: what
    /// mechListMIC covers (RFC 4178 5).
    pub mech_types_der: &'a [u8],
    pub mech_token: Option<&'a [u8]>,
}

/// RFC 4178 4.2.2 NegTokenResp as received.
#[derive(Debug, Default)]
pub(crate) struct NegTokenResp<'a> {
    pub neg_state: Option<NegState>,
    pub supported_mech: Option<&'a [u8]>,
    pub response_token: Option<&'a [u8]>,
    pub mech_list_mic: Option<&'a [u8]>,
}

#[derive(Debug)]
pub(crate) enum Token<'a> {
    Init(NegTokenInit<'a>),
    Resp(NegTokenResp<'a>),
}

/// The mechanism OID of an RFC 2743 3.1 InitialContextToken
/// ([APPLICATION 0] { OID, ... }), if `token` is one.
pub(crate) fn initial_token_mech(token: &[u8]) -> Option<&[u8]> {
    if token.len() > MAX_TOKEN || token.first() != Some(&TAG_APPLICATION_0) {
        return None;
    }
    let body = only(token, TAG_APPLICATION_0, "expected InitialContextToken").ok()?;
    expect(body, TAG_OID, "expected mechanism OID").ok().map(|(oid, _)| oid)
}

/// Decodes a SPNEGO token: an InitialContextToken carrying a NegTokenInit,
/// or a bare NegotiationToken choice ([0] NegTokenInit, [1] NegTokenResp).
pub(crate) fn decode(token: &[u8]) -> Result<Token<'_>, AuthError> {
    if token.len() > MAX_TOKEN {
        return Err(malformed("security token too large"));
    }
    let inner = match token.first() {
        Some(&TAG_APPLICATION_0) => {
            let body = only(token, TAG_APPLICATION_0, "expected InitialContextToken")?;
            let (oid, rest) = expect(body, TAG_OID, "expected mechanism OID")?;
            if oid != SPNEGO_OID {
                return Err(AuthError::Unsupported("GSS-API token is not SPNEGO"));
            }
            rest
        }
        _ => token,
    };
    let (tag, contents, rest) = tlv(inner)?;
    if !rest.is_empty() {
        return Err(malformed("DER: trailing bytes"));
    }
    match tag {
        t if t == ctx(0) => decode_init(contents).map(Token::Init),
        t if t == ctx(1) => decode_resp(contents).map(Token::Resp),
        _ => Err(malformed("not a SPNEGO NegotiationToken")),
    }
}

fn decode_init(contents: &[u8]) -> Result<NegTokenInit<'_>, AuthError> {
    let mut fields = only(contents, TAG_SEQUENCE, "NegTokenInit: expected SEQUENCE")?;
    let mut init = NegTokenInit { mech_types: Vec::new(), mech_types_der: &[], mech_token: None };
    let mut last = None;
    while !fields.is_empty() {
        let (tag, value, rest) = tlv(fields)?;
        if last.is_some_and(|l| tag <= l) {
            return Err(malformed("NegTokenInit: fields out of order"));
        }
        last = Some(tag);
        match tag {
            // mechTypes [0] MechTypeList
            0xa0 => {
                let (mut oids, after) = expect(value, TAG_SEQUENCE, "mechTypes: expected SEQUENCE")?;
                if !after.is_empty() {
                    return Err(malformed("DER: trailing bytes"));
                }
                init.mech_types_der = value;
                while !oids.is_empty() {
                    let (oid, r) = expect(oids, TAG_OID, "mechTypes: expected OID")?;
                    if init.mech_types.len() == MAX_MECH_TYPES {
                        return Err(malformed("mechTypes: too many"));
                    }
                    init.mech_types.push(oid);
                    oids = r;
                }
            }
            // reqFlags [1] ContextFlags: ignored (RFC 4178 4.2.1 says SHOULD ignore).
            0xa1 => {}
            // mechToken [2] OCTET STRING
            0xa2 => init.mech_token = Some(only(value, TAG_OCTET_STRING, "mechToken: expected OCTET STRING")?),
            // [3] is mechListMIC in RFC 4178 and negHints in MS-SPNG NegTokenInit2;
            // [4] is NegTokenInit2's mechListMIC. The initiator's MIC cannot be
            // checked before the mechanism completes, and is resent in the last
            // NegTokenResp, so both are skipped.
            0xa3 | 0xa4 => {}
            _ => return Err(malformed("NegTokenInit: unknown field")),
        }
        fields = rest;
    }
    if init.mech_types.is_empty() {
        return Err(malformed("NegTokenInit: no mechTypes"));
    }
    Ok(init)
}

fn decode_resp(contents: &[u8]) -> Result<NegTokenResp<'_>, AuthError> {
    let mut fields = only(contents, TAG_SEQUENCE, "NegTokenResp: expected SEQUENCE")?;
    let mut resp = NegTokenResp::default();
    let mut last = None;
    while !fields.is_empty() {
        let (tag, value, rest) = tlv(fields)?;
        if last.is_some_and(|l| tag <= l) {
            return Err(malformed("NegTokenResp: fields out of order"));
        }
        last = Some(tag);
        match tag {
            0xa0 => {
                let state = only(value, TAG_ENUMERATED, "negState: expected ENUMERATED")?;
                resp.neg_state = Some(match state {
                    [0] => NegState::AcceptCompleted,
                    [1] => NegState::AcceptIncomplete,
                    [2] => NegState::Reject,
                    [3] => NegState::RequestMic,
                    _ => return Err(malformed("negState: unknown value")),
                });
            }
            0xa1 => resp.supported_mech = Some(only(value, TAG_OID, "supportedMech: expected OID")?),
            0xa2 => resp.response_token = Some(only(value, TAG_OCTET_STRING, "responseToken: expected OCTET STRING")?),
            0xa3 => resp.mech_list_mic = Some(only(value, TAG_OCTET_STRING, "mechListMIC: expected OCTET STRING")?),
            _ => return Err(malformed("NegTokenResp: unknown field")),
        }
        fields = rest;
    }
    Ok(resp)
}

/// The DER MechTypeList SEQUENCE for `oids`.
pub(crate) fn mech_type_list(oids: &[&[u8]]) -> Vec<u8> {
    let body: Vec<u8> = oids.iter().flat_map(|o| der(TAG_OID, o)).collect();
    der(TAG_SEQUENCE, &body)
}

/// MS-SPNG 2.2.1 NegTokenInit2 for the SMB2 NEGOTIATE response: mechTypes
/// {MS-KRB5, KRB5} when `kerberos`, then {NTLMSSP} when `ntlm`, as
/// Windows orders them, and negHints { hintName
/// "not_defined_in_RFC4178@please_ignore" }.
pub fn spnego_negotiate_token(kerberos: bool, ntlm: bool) -> Vec<u8> {
    let mut mechs: Vec<&[u8]> = Vec::new();
    if kerberos {
        mechs.extend([MS_KRB5_OID, KRB5_OID]);
    }
    if ntlm {
        mechs.push(NTLMSSP_OID);
    }
    let mut seq = der(ctx(0), &mech_type_list(&mechs));
    let hints = der(TAG_SEQUENCE, &der(ctx(0), &der(TAG_GENERAL_STRING, HINT_NAME)));
    seq.extend_from_slice(&der(ctx(3), &hints));
    gss_wrap(&der(ctx(0), &der(TAG_SEQUENCE, &seq)))
}

/// RFC 4178 4.2.1 NegTokenInit from an initiator, in an InitialContextToken.
/// `mech_types_der` is a [`mech_type_list`].
pub(crate) fn encode_init(mech_types_der: &[u8], mech_token: Option<&[u8]>) -> Vec<u8> {
    let mut seq = der(ctx(0), mech_types_der);
    if let Some(t) = mech_token {
        seq.extend_from_slice(&der(ctx(2), &der(TAG_OCTET_STRING, t)));
    }
    gss_wrap(&der(ctx(0), &der(TAG_SEQUENCE, &seq)))
}

/// RFC 4178 4.2.2 NegTokenResp; `supported_mech` is the chosen
/// mechanism's OID (DER contents), sent in the target's first reply.
pub(crate) fn encode_resp(
    neg_state: Option<NegState>,
    supported_mech: Option<&[u8]>,
    response_token: Option<&[u8]>,
    mech_list_mic: Option<&[u8]>,
) -> Vec<u8> {
    let mut seq = Vec::new();
    if let Some(s) = neg_state {
        seq.extend_from_slice(&der(ctx(0), &der(TAG_ENUMERATED, &[s as u8])));
    }
    if let Some(oid) = supported_mech {
        seq.extend_from_slice(&der(ctx(1), &der(TAG_OID, oid)));
    }
    if let Some(t) = response_token {
        seq.extend_from_slice(&der(ctx(2), &der(TAG_OCTET_STRING, t)));
    }
    if let Some(m) = mech_list_mic {
        seq.extend_from_slice(&der(ctx(3), &der(TAG_OCTET_STRING, m)));
    }
    der(ctx(1), &der(TAG_SEQUENCE, &seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kerberos (MS) 1.2.840.48018.1.2.2.
    const MS_KRB5: &[u8] = &[0x2a, 0x86, 0x48, 0x82, 0xf7, 0x12, 0x01, 0x02, 0x02];

    #[test]
    fn negotiate_token_bytes() {
        // The shape Windows and Samba put in SMB2 NEGOTIATE responses.
        let expected = hex::decode(concat!(
            "604806062b0601050502a03e303ca00e300c060a2b06010401823702020a",
            "a32a3028a0261b246e6f745f646566696e65645f696e5f5246433431373840706c656173655f69676e6f7265"
        ))
        .unwrap();
        assert_eq!(spnego_negotiate_token(false, true), expected);
        let Token::Init(init) = decode(&expected).unwrap() else { panic!("not init") };
        assert_eq!(init.mech_types, vec![NTLMSSP_OID]);
        assert!(init.mech_token.is_none());
    }

    #[test]
    fn init_round_trip_keeps_mech_types_der() {
        let list = mech_type_list(&[MS_KRB5, NTLMSSP_OID]);
        let tok = encode_init(&list, Some(b"abc"));
        let Token::Init(init) = decode(&tok).unwrap() else { panic!("not init") };
        assert_eq!(init.mech_types, vec![MS_KRB5, NTLMSSP_OID]);
        assert_eq!(init.mech_types_der, list.as_slice());
        assert_eq!(init.mech_token, Some(&b"abc"[..]));
    }

    #[test]
    fn resp_round_trip_long_lengths() {
        // Short, one-octet and two-octet DER length forms.
        let big = vec![7u8; 60_000];
        for token in [&b"x"[..], &[1u8; 200], &big] {
            let enc = encode_resp(Some(NegState::RequestMic), Some(NTLMSSP_OID), Some(token), Some(b"mic"));
            let Token::Resp(r) = decode(&enc).unwrap() else { panic!("not resp") };
            assert_eq!(r.neg_state, Some(NegState::RequestMic));
            assert_eq!(r.supported_mech, Some(NTLMSSP_OID));
            assert_eq!(r.response_token, Some(token));
            assert_eq!(r.mech_list_mic, Some(&b"mic"[..]));
        }
    }

    #[test]
    fn bad_der_is_an_error() {
        let good = encode_resp(Some(NegState::AcceptIncomplete), Some(NTLMSSP_OID), Some(b"tok"), None);
        for n in 0..good.len() {
            assert!(decode(&good[..n]).is_err(), "prefix {n}");
        }
        // Length claiming more than present, indefinite length, 4-byte length,
        // multi-byte tag, unknown choice, trailing garbage.
        for bad in [
            &[0xa1, 0x05, 0x30, 0x00][..],
            &[0xa1, 0x80, 0x30, 0x00, 0x00, 0x00],
            &[0xa1, 0x84, 0xff, 0xff, 0xff, 0xff, 0x30, 0x00],
            &[0xbf, 0x01, 0x00],
            &[0xa2, 0x02, 0x30, 0x00],
            &[0xa1, 0x02, 0x30, 0x00, 0x00],
        ] {
            assert!(matches!(decode(bad), Err(AuthError::Malformed(_))), "{bad:02x?}");
        }
        assert!(decode(&vec![0u8; MAX_TOKEN + 1]).is_err());
        // A deep nest of SEQUENCEs is just an unknown structure, not recursion.
        let mut deep = vec![];
        for _ in 0..10_000 {
            deep = der(TAG_SEQUENCE, &deep);
        }
        assert!(decode(&der(ctx(1), &deep)).is_err());
    }

    #[test]
    fn too_many_mech_types() {
        let oids: Vec<&[u8]> = (0..MAX_MECH_TYPES + 1).map(|_| NTLMSSP_OID).collect();
        assert!(decode(&encode_init(&mech_type_list(&oids), None)).is_err());
    }
}
