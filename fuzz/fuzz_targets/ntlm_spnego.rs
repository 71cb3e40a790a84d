//! SPNEGO/NTLMSSP on arbitrary tokens, server and client side: errors,
//! never panics. The first byte picks where the fuzzed token enters:
//!
//! 0. the server's first token (then further tokens split at 0xFF);
//! 1. the server's second token (AUTHENTICATE), after a real SPNEGO
//!    NEGOTIATE from our client;
//! 2. the same after a raw NTLMSSP NEGOTIATE;
//! 3. the client's view of the server's CHALLENGE (SPNEGO);
//! 4. the client's view of the server's final token, after a real
//!    exchange; that exchange must authenticate (the round trip check).
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_auth::{AuthStep, ClientAuth, ServerAuth, TargetInfo};

const NOW: u64 = 133_000_000_000_000_000;

fn server() -> ServerAuth {
    let target = TargetInfo {
        netbios_computer: "SMBQ".into(),
        netbios_domain: "WORKGROUP".into(),
        dns_computer: "smbq".into(),
        dns_domain: String::new(),
    };
    ServerAuth::new(target, NOW)
}

fn lookup(user: &str, _domain: &str) -> Option<[u8; 16]> {
    user.eq_ignore_ascii_case("alice").then(|| smbq_auth::nt_hash("secret"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, token)) = data.split_first() else { return };
    match mode % 5 {
        0 => {
            let mut auth = server();
            for part in token.split(|b| *b == 0xFF).take(3) {
                if auth.step(part, &lookup).is_err() {
                    break;
                }
            }
        }
        m @ (1 | 2) => {
            let mut client =
                if m == 1 { ClientAuth::new("alice", "", "secret", NOW) } else { ClientAuth::new_raw("alice", "", "secret", NOW) };
            let first = client.step(None).expect("client starts").expect("a first token");
            let mut auth = server();
            assert!(matches!(auth.step(&first, &lookup), Ok(AuthStep::Continue(_))), "our NEGOTIATE is accepted");
            let _ = auth.step(token, &lookup);
        }
        3 => {
            let mut client = ClientAuth::new("alice", "", "secret", NOW);
            let _ = client.step(None);
            if let Ok(Some(t)) = client.step(Some(token)) {
                let _ = server().step(&t, &lookup);
            }
        }
        _ => {
            let mut client = ClientAuth::new("alice", "", "secret", NOW);
            let mut auth = server();
            let first = client.step(None).expect("client starts").expect("a first token");
            let Ok(AuthStep::Continue(challenge)) = auth.step(&first, &lookup) else { panic!("NEGOTIATE refused") };
            let authenticate = client.step(Some(&challenge)).expect("client answers").expect("AUTHENTICATE");
            match auth.step(&authenticate, &lookup) {
                Ok(AuthStep::Done { user, session_key, .. }) => {
                    assert_eq!(user, "alice");
                    assert_eq!(Some(session_key), client.session_key().map(|k| k.to_vec()));
                }
                other => panic!("a real exchange must authenticate: {other:?}"),
            }
            let _ = client.step(Some(token));
        }
    }
});
