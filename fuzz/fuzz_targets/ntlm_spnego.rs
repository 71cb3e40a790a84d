//! SPNEGO/NTLMSSP server steps on arbitrary tokens: errors, never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_auth::{ServerAuth, TargetInfo};

fuzz_target!(|data: &[u8]| {
    let target = TargetInfo {
        netbios_computer: "SMBQ".into(),
        netbios_domain: "WORKGROUP".into(),
        dns_computer: "smbq".into(),
        dns_domain: String::new(),
    };
    let mut auth = ServerAuth::new(target, 133_000_000_000_000_000);
    let lookup = |_: &str, _: &str| Some([7u8; 16]);
    // First token as given, then the rest split at a 0xFF marker if any.
    for part in data.split(|b| *b == 0xFF).take(3) {
        if auth.step(part, &lookup).is_err() {
            break;
        }
    }
});
