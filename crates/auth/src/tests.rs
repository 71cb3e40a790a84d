//! ServerAuth <-> ClientAuth exchanges, failures, and a seeded fuzz loop.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::spnego::{self, NegState, Token, NTLMSSP_OID};
use crate::{ntlm, AuthError, AuthStep, ClientAuth, ServerAuth, TargetInfo, UserDb};

const NOW: u64 = 133_500_000_000_000_000;
const CHALLENGE: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
/// Kerberos (MS) 1.2.840.48018.1.2.2 and Kerberos 1.2.840.113554.1.2.2.
const MS_KRB5: &[u8] = &[0x2a, 0x86, 0x48, 0x82, 0xf7, 0x12, 0x01, 0x02, 0x02];
const KRB5: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02];

fn target() -> TargetInfo {
    TargetInfo {
        netbios_computer: "SMBQ".into(),
        netbios_domain: "WORKGROUP".into(),
        dns_computer: "smbq.example".into(),
        dns_domain: "example".into(),
    }
}

fn db() -> UserDb {
    let mut db = UserDb::new();
    db.add("Alice", "s3cret-Pässword");
    db
}

fn server() -> ServerAuth {
    ServerAuth::with_challenge(target(), NOW, CHALLENGE)
}

/// Drives a full exchange; returns the server's Done and every token sent.
fn exchange(client: &mut ClientAuth, db: &UserDb) -> (Result<AuthStep, AuthError>, Vec<Vec<u8>>) {
    let lookup = |u: &str, _d: &str| db.get(u);
    let mut server = server();
    let mut sent = Vec::new();
    let mut token = client.step(None).unwrap().unwrap();
    loop {
        sent.push(token.clone());
        match server.step(&token, &lookup) {
            Ok(AuthStep::Continue(reply)) => match client.step(Some(&reply)) {
                Ok(Some(next)) => token = next,
                other => panic!("client stopped early: {other:?}"),
            },
            done => return (done, sent),
        }
    }
}

fn done(r: Result<AuthStep, AuthError>) -> (Vec<u8>, String, String, [u8; 16], bool) {
    match r {
        Ok(AuthStep::Done { token, user, domain, session_key, anonymous, kerberos: None }) => {
            (token, user, domain, session_key.try_into().unwrap(), anonymous)
        }
        other => panic!("not done: {other:?}"),
    }
}

#[test]
fn spnego_exchange_succeeds_with_mech_list_mic() {
    for domain in ["WORKGROUP", "", "SomeOtherDomain", "workgroup"] {
        let mut client = ClientAuth::new("alice", domain, "s3cret-Pässword", NOW);
        let (r, sent) = exchange(&mut client, &db());
        assert_eq!(sent.len(), 2, "NegTokenInit, then NegTokenResp with AUTHENTICATE");
        let (token, user, dom, key, anonymous) = done(r);
        assert_eq!((user.as_str(), dom.as_str(), anonymous), ("alice", domain, false));
        assert_eq!(Some(key.to_vec()), client.session_key());
        let Token::Resp(resp) = spnego::decode(&token).unwrap() else { panic!() };
        assert_eq!(resp.neg_state, Some(NegState::AcceptCompleted));
        assert!(resp.mech_list_mic.is_some());
        // The client checks the server's mechListMIC.
        assert_eq!(client.step(Some(&token)), Ok(None));
        // The client's AUTHENTICATE carried MsvAvFlags MIC-present and a MIC.
        let Token::Resp(auth) = spnego::decode(&sent[1]).unwrap() else { panic!() };
        let auth = auth.response_token.unwrap();
        assert_ne!(&auth[ntlm::MIC_OFFSET..ntlm::MIC_OFFSET + 16], &[0; 16]);
    }
}

#[test]
fn raw_ntlmssp_exchange_succeeds() {
    let mut client = ClientAuth::new_raw("ALICE", "WORKGROUP", "s3cret-Pässword", NOW);
    let (r, sent) = exchange(&mut client, &db());
    assert!(sent.iter().all(|t| t.starts_with(b"NTLMSSP\0")));
    let (token, user, _, key, anonymous) = done(r);
    assert!(token.is_empty());
    assert_eq!((user.as_str(), anonymous), ("ALICE", false));
    assert_eq!(Some(key.to_vec()), client.session_key());
    assert_eq!(client.step(Some(&[])), Ok(None));
}

#[test]
fn wrong_password_and_unknown_user_fail() {
    for (user, password) in [("alice", "wrong"), ("bob", "s3cret-Pässword"), ("alice", "S3CRET-PÄSSWORD")] {
        for mut client in [ClientAuth::new(user, "WORKGROUP", password, NOW), ClientAuth::new_raw(user, "WORKGROUP", password, NOW)] {
            assert_eq!(exchange(&mut client, &db()).0, Err(AuthError::LogonFailure), "{user}/{password}");
        }
    }
}

#[test]
fn anonymous_is_reported() {
    let mut client = ClientAuth::new("", "", "", NOW);
    let (token, user, _, key, anonymous) = done(exchange(&mut client, &db()).0);
    assert!(anonymous);
    assert_eq!((user.as_str(), key), ("", [0; 16]));
    assert_eq!(client.step(Some(&token)), Ok(None));
}

/// Replays a raw exchange, letting `edit` change the AUTHENTICATE message.
fn raw_with_edited_auth(edit: impl Fn(&mut Vec<u8>)) -> Result<AuthStep, AuthError> {
    let db = db();
    let lookup = |u: &str, _d: &str| db.get(u);
    let mut client = ClientAuth::new_raw("alice", "WORKGROUP", "s3cret-Pässword", NOW);
    let mut server = server();
    let neg = client.step(None).unwrap().unwrap();
    let AuthStep::Continue(chal) = server.step(&neg, &lookup).unwrap() else { panic!() };
    let mut auth = client.step(Some(&chal)).unwrap().unwrap();
    edit(&mut auth);
    server.step(&auth, &lookup)
}

#[test]
fn tampered_authenticate_fails() {
    assert!(raw_with_edited_auth(|_| {}).is_ok());
    // MIC, NTProofStr, encrypted session key (changes the MIC key), flags.
    for at in [ntlm::MIC_OFFSET, ntlm::MIC_OFFSET + 15] {
        assert_eq!(raw_with_edited_auth(|a| a[at] ^= 1), Err(AuthError::LogonFailure));
    }
    assert_eq!(
        raw_with_edited_auth(|a| {
            let off = ntlm::u32_at(a, 24).unwrap() as usize;
            a[off] ^= 1;
        }),
        Err(AuthError::LogonFailure)
    );
    assert_eq!(
        raw_with_edited_auth(|a| {
            let off = ntlm::u32_at(a, 56).unwrap() as usize;
            a[off] ^= 1;
        }),
        Err(AuthError::LogonFailure)
    );
    assert_eq!(raw_with_edited_auth(|a| a[62] ^= 0x01), Err(AuthError::LogonFailure));
}

#[test]
fn ntlmv1_and_lm_only_are_refused() {
    for (lm, nt) in [(&[2u8; 24][..], &[1u8; 24][..]), (&[2u8; 24], &[]), (&[0u8], &[])] {
        let r = raw_with_edited_auth(|a| {
            *a = ntlm::encode_authenticate(&ntlm::AuthenticateOut {
                flags: ntlm::u32_at(a, 60).unwrap(),
                lm,
                nt,
                domain: "WORKGROUP",
                user: "alice",
                encrypted_session_key: &[0; 16],
            })
        });
        assert_eq!(r, Err(AuthError::LogonFailure));
    }
}

/// Builds a NegTokenInit offering `mechs` with an optimistic `token`.
fn init(mechs: &[&[u8]], token: Option<&[u8]>) -> Vec<u8> {
    spnego::encode_init(&spnego::mech_type_list(mechs), token)
}

#[test]
fn kerberos_only_is_unsupported_without_a_keytab() {
    let mut s = server();
    let r = s.step(&init(&[MS_KRB5, KRB5], Some(b"krb5 AP-REQ")), &|_, _| None);
    assert!(matches!(r, Err(AuthError::Unsupported(_))));
}

#[test]
fn ntlm_off_blocks_ntlmssp_in_spnego_and_raw() {
    let off = || server().mechanisms(false, None);
    let r = off().step(&init(&[NTLMSSP_OID], Some(&ntlm::encode_negotiate(ntlm::NEGOTIATE_UNICODE))), &|_, _| None);
    assert_eq!(r, Err(AuthError::NtlmBlocked));
    let r = off().step(&ntlm::encode_negotiate(ntlm::NEGOTIATE_UNICODE), &|_, _| None);
    assert_eq!(r, Err(AuthError::NtlmBlocked));
    assert!(!contains(&spnego::spnego_negotiate_token(true, false), NTLMSSP_OID));
    assert!(contains(&spnego::spnego_negotiate_token(true, false), MS_KRB5));
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A server with Kerberos (a keytab written for cifs/unit@UNIT.TEST) and
/// NTLM as `ntlm` says.
fn kerberos_server(ntlm: bool) -> (ServerAuth, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("smbq-auth-{}-{}.keytab", std::process::id(), rand::random::<u32>()));
    std::fs::write(&path, smbq_gssapi::keytab_file("UNIT.TEST", "cifs", "unit", 1, 18, &[9; 32])).unwrap();
    (server().mechanisms(ntlm, Some(std::sync::Arc::from(path.as_path()))), path)
}

#[test]
fn kerberos_as_second_choice_is_named_with_request_mic() {
    // NTLMSSP first, NTLM off: the server picks KRB5, names it, asks for the
    // MIC exchange (RFC 4178 5) and waits for the AP-REQ.
    let (mut s, path) = kerberos_server(false);
    let Ok(AuthStep::Continue(reply)) = s.step(&init(&[NTLMSSP_OID, KRB5], None), &|_, _| None) else { panic!("no reply") };
    let Token::Resp(r) = spnego::decode(&reply).unwrap() else { panic!("not a NegTokenResp") };
    assert_eq!(r.neg_state, Some(NegState::RequestMic));
    assert_eq!(r.supported_mech, Some(KRB5));
    // The next leg's token is no AP-REQ: refused, no panic.
    let next = spnego::encode_resp(None, None, Some(b"\x60\x03\x06\x01\x00"), None);
    assert!(s.step(&next, &|_, _| None).is_err());
    std::fs::remove_file(path).unwrap();
}

#[test]
fn ms_krb5_first_with_a_bad_ap_req_is_refused() {
    let (mut s, path) = kerberos_server(true);
    let krb5_token = [&[0x60, 0x0f, 0x06, 0x09][..], KRB5, &[0x01, 0x00, 0x6e, 0x00]].concat();
    let r = s.step(&init(&[MS_KRB5, NTLMSSP_OID], Some(&krb5_token)), &|_, _| None);
    assert!(matches!(r, Err(AuthError::LogonFailure | AuthError::Malformed(_))), "{r:?}");
    // The same token raw (RFC 4121, no SPNEGO) reaches the acceptor too.
    let (mut s2, path2) = kerberos_server(true);
    assert!(s2.step(&krb5_token, &|_, _| None).is_err());
    std::fs::remove_file(path).unwrap();
    std::fs::remove_file(path2).unwrap();
}

/// Runs a SPNEGO exchange whose NegTokenInit offers `mechs` with an
/// optimistic token that is not NTLMSSP's (or none), so the server first
/// names NTLMSSP and the NTLMSSP legs follow in NegTokenResps. The client's
/// mechListMIC is sent if `with_mic` (flipped if `corrupt_mic`).
fn spnego_without_ntlm_first_token(
    mechs: &[&[u8]],
    optimistic: Option<&[u8]>,
    with_mic: bool,
    corrupt_mic: bool,
) -> Result<AuthStep, AuthError> {
    let db = db();
    let lookup = |u: &str, _d: &str| db.get(u);
    let mic_required = mechs.first() != Some(&NTLMSSP_OID);
    let mut server = server();
    let AuthStep::Continue(first) = server.step(&init(mechs, optimistic), &lookup)? else { panic!() };
    let Token::Resp(r) = spnego::decode(&first).unwrap() else { panic!() };
    // RFC 4178 5: request-mic in the first reply when NTLMSSP was not the first choice.
    let expected_state = if mic_required { NegState::RequestMic } else { NegState::AcceptIncomplete };
    assert_eq!(r.neg_state, Some(expected_state));
    assert_eq!(r.supported_mech, Some(NTLMSSP_OID));
    assert!(r.response_token.is_none());
    // The NTLMSSP legs come from a raw client, wrapped by hand.
    let mut client = ClientAuth::new_raw("alice", "WORKGROUP", "s3cret-Pässword", NOW);
    let neg = client.step(None).unwrap().unwrap();
    let AuthStep::Continue(second) = server.step(&spnego::encode_resp(None, None, Some(&neg), None), &lookup)? else {
        panic!()
    };
    let Token::Resp(r) = spnego::decode(&second).unwrap() else { panic!() };
    assert_eq!(r.neg_state, Some(NegState::AcceptIncomplete));
    let chal = r.response_token.unwrap();
    let flags = ntlm::decode_challenge(chal).unwrap().flags;
    let auth = client.step(Some(chal)).unwrap().unwrap();
    let key: [u8; 16] = client.session_key().unwrap().try_into().unwrap();
    let list = spnego::mech_type_list(mechs);
    let mut mic = ntlm::first_mic(flags, &key, true, &list).unwrap();
    if corrupt_mic {
        mic[5] ^= 1;
    }
    let result = server.step(&spnego::encode_resp(None, None, Some(&auth), with_mic.then_some(&mic[..])), &lookup)?;
    let AuthStep::Done { token, .. } = &result else { panic!() };
    let Token::Resp(r) = spnego::decode(token).unwrap() else { panic!() };
    assert_eq!(r.neg_state, Some(NegState::AcceptCompleted));
    let server_mic = ntlm::first_mic(flags, &key, false, &list).unwrap();
    assert_eq!(r.mech_list_mic, with_mic.then_some(&server_mic[..]));
    Ok(result)
}

#[test]
fn ntlmssp_as_second_choice_requires_mech_list_mic() {
    let mechs: [&[u8]; 3] = [MS_KRB5, KRB5, NTLMSSP_OID];
    let krb = Some(&b"krb5 AP-REQ"[..]);
    assert!(spnego_without_ntlm_first_token(&mechs, krb, true, false).is_ok());
    assert_eq!(spnego_without_ntlm_first_token(&mechs, krb, false, false), Err(AuthError::LogonFailure));
    assert_eq!(spnego_without_ntlm_first_token(&mechs, krb, true, true), Err(AuthError::LogonFailure));
    assert!(spnego_without_ntlm_first_token(&mechs, None, true, false).is_ok());
}

#[test]
fn ntlmssp_first_without_optimistic_token() {
    let mechs: [&[u8]; 2] = [NTLMSSP_OID, MS_KRB5];
    // The MIC exchange is optional here; if sent it is checked and answered.
    assert!(spnego_without_ntlm_first_token(&mechs, None, false, false).is_ok());
    assert!(spnego_without_ntlm_first_token(&mechs, None, true, false).is_ok());
    assert_eq!(spnego_without_ntlm_first_token(&mechs, None, true, true), Err(AuthError::LogonFailure));
}

#[test]
fn client_rejects_bad_server_mech_list_mic() {
    let db = db();
    let lookup = |u: &str, _d: &str| db.get(u);
    let mut client = ClientAuth::new("alice", "WORKGROUP", "s3cret-Pässword", NOW);
    let mut srv = server();
    let t1 = client.step(None).unwrap().unwrap();
    let AuthStep::Continue(c) = srv.step(&t1, &lookup).unwrap() else { panic!() };
    let t2 = client.step(Some(&c)).unwrap().unwrap();
    let AuthStep::Done { token, .. } = srv.step(&t2, &lookup).unwrap() else { panic!() };
    let Token::Resp(r) = spnego::decode(&token).unwrap() else { panic!() };
    let mut mic = r.mech_list_mic.unwrap().to_vec();
    mic[4] ^= 1;
    let forged = spnego::encode_resp(Some(NegState::AcceptCompleted), None, None, Some(&mic));
    assert_eq!(client.step(Some(&forged)), Err(AuthError::LogonFailure));
    let no_mic = spnego::encode_resp(Some(NegState::AcceptCompleted), None, None, None);
    let mut client = ClientAuth::new("alice", "WORKGROUP", "s3cret-Pässword", NOW);
    let mut srv2 = server();
    let t1 = client.step(None).unwrap().unwrap();
    let AuthStep::Continue(c) = srv2.step(&t1, &lookup).unwrap() else { panic!() };
    client.step(Some(&c)).unwrap().unwrap();
    assert_eq!(client.step(Some(&no_mic)), Err(AuthError::LogonFailure));
}

/// The valid client tokens of one SPNEGO and one raw exchange against
/// [`server()`], in order.
fn valid_tokens() -> [Vec<Vec<u8>>; 2] {
    let mut spnego = ClientAuth::new("alice", "WORKGROUP", "s3cret-Pässword", NOW);
    let mut raw = ClientAuth::new_raw("alice", "WORKGROUP", "s3cret-Pässword", NOW);
    let (a, s) = exchange(&mut spnego, &db());
    let (b, r) = exchange(&mut raw, &db());
    assert!(a.is_ok() && b.is_ok());
    [s, r]
}

/// Feeds `prefix` then `last` to a fresh server.
fn feed(prefix: &[Vec<u8>], last: &[u8]) -> Result<AuthStep, AuthError> {
    let db = db();
    let lookup = |u: &str, _d: &str| db.get(u);
    let mut s = server();
    for t in prefix {
        s.step(t, &lookup)?;
    }
    s.step(last, &lookup)
}

#[test]
fn truncated_tokens_at_each_step_fail_cleanly() {
    for tokens in valid_tokens() {
        for i in 0..tokens.len() {
            assert!(feed(&tokens[..i], &tokens[i]).is_ok(), "valid replay");
            for n in 0..tokens[i].len() {
                assert!(feed(&tokens[..i], &tokens[i][..n]).is_err(), "token {i} cut at {n}");
            }
        }
    }
}

#[test]
fn errors_stick_and_oversized_tokens_fail() {
    let mut s = server();
    let huge = vec![0x60u8; crate::MAX_TOKEN + 1];
    assert!(matches!(s.step(&huge, &|_, _| None), Err(AuthError::Malformed(_))));
    let [spnego_tokens, _] = valid_tokens();
    assert!(s.step(&spnego_tokens[0], &|_, _| None).is_err(), "a failed exchange stays failed");
    // An AUTHENTICATE whose NT response length points far outside the message.
    let mut auth_resp = spnego_tokens[1].clone();
    let Token::Resp(r) = spnego::decode(&auth_resp).unwrap() else { panic!() };
    let mut auth = r.response_token.unwrap().to_vec();
    auth[20..22].copy_from_slice(&0xfff0u16.to_le_bytes());
    auth_resp = spnego::encode_resp(None, None, Some(&auth), r.mech_list_mic);
    assert!(matches!(feed(&spnego_tokens[..1], &auth_resp), Err(AuthError::Malformed(_))));
}

/// Random and mutated tokens at every step must give errors, never panics.
#[test]
fn fuzz_server_step_never_panics() {
    let mut rng = StdRng::seed_from_u64(0x5eed_5b9a);
    let sets = valid_tokens();
    let mut ok = 0;
    for _ in 0..20_000 {
        let tokens = &sets[rng.gen_range(0..sets.len())];
        let i = rng.gen_range(0..tokens.len());
        let mut t = tokens[i].clone();
        match rng.gen_range(0..5) {
            0 => t = (0..rng.gen_range(0..300)).map(|_| rng.gen()).collect(),
            1 => t.truncate(rng.gen_range(0..=t.len())),
            2 => {
                let pos = rng.gen_range(0..=t.len());
                let junk: Vec<u8> = (0..rng.gen_range(1..20)).map(|_| rng.gen()).collect();
                t.splice(pos..pos, junk);
            }
            _ => {
                for _ in 0..rng.gen_range(1..6) {
                    let pos = rng.gen_range(0..t.len());
                    t[pos] = if rng.gen_bool(0.5) { rng.gen() } else { [0, 0x7f, 0x80, 0x81, 0x82, 0xff][rng.gen_range(0..6)] };
                }
            }
        }
        if feed(&tokens[..i], &t).is_ok() {
            ok += 1;
        }
    }
    // Some mutations land in don't-care bytes; most must fail.
    assert!(ok < 10_000, "{ok}");
}
