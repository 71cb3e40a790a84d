//! SPNEGO with Kerberos on arbitrary tokens: the server takes Kerberos
//! (a keytab with one AES-256 key for cifs/fuzz@FUZZ.TEST, written once)
//! and NTLM, or Kerberos alone; the first byte picks which, and further
//! tokens split at 0xFF. Tokens naming MS-KRB5 or KRB5, raw RFC 4121
//! tokens and NegTokenResp legs reach MIT's acceptor through smbq-gssapi:
//! errors, never panics, and no logon (no ticket can be valid).
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_auth::{AuthStep, ServerAuth, TargetInfo};
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// An MIT keytab (format 0x0502): one entry, cifs/fuzz@FUZZ.TEST, kvno 1,
/// aes256-cts-hmac-sha1-96 (18), a fixed key.
fn keytab() -> Arc<Path> {
    static PATH: OnceLock<Arc<Path>> = OnceLock::new();
    PATH.get_or_init(|| {
        let file = smbq_gssapi::keytab_file("FUZZ.TEST", "cifs", "fuzz", 1, 18, &[0x5a; 32]);
        let path = std::env::temp_dir().join(format!("smbq-fuzz-{}.keytab", std::process::id()));
        std::fs::write(&path, file).expect("write the fuzz keytab");
        // Replays are not what this target looks for: no replay cache file.
        std::env::set_var("KRB5RCACHETYPE", "none");
        Arc::from(path.as_path())
    })
    .clone()
}

fn lookup(_user: &str, _domain: &str) -> Option<[u8; 16]> {
    None
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, token)) = data.split_first() else { return };
    let target = TargetInfo {
        netbios_computer: "SMBQ".into(),
        netbios_domain: "WORKGROUP".into(),
        dns_computer: "fuzz".into(),
        dns_domain: String::new(),
    };
    let mut auth = ServerAuth::new(target, 0).mechanisms(mode & 1 == 0, Some(keytab()));
    for part in token.split(|b| *b == 0xFF).take(3) {
        match auth.step(part, &lookup) {
            Ok(AuthStep::Continue(_)) => {}
            Ok(AuthStep::Done { kerberos, anonymous, .. }) => {
                // Only NTLM's anonymous logon can complete without a secret.
                assert!(kerberos.is_none() && anonymous, "a logon from fuzzed bytes");
                break;
            }
            Err(_) => break,
        }
    }
});
