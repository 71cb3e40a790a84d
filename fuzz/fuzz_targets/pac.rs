//! The PAC decoder (`smbq_auth::pac::logon_info`) on arbitrary bytes:
//! errors, never panics. The first byte picks where the input enters:
//!
//! 0. as a whole PAC (PACTYPE, buffers);
//! 1. as the KERB_VALIDATION_INFO buffer alone, put in a one-buffer
//!    PACTYPE here, so the fuzzer spends its time on the NDR.
//!
//! A decoded PAC keeps its promises: each group SID once, no SID longer
//! than 15 sub-authorities.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_auth::pac::logon_info;
use std::collections::HashSet;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let pac = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        let mut pac = Vec::with_capacity(24 + rest.len());
        pac.extend_from_slice(&1u32.to_le_bytes());
        pac.extend_from_slice(&0u32.to_le_bytes());
        pac.extend_from_slice(&1u32.to_le_bytes());
        pac.extend_from_slice(&(rest.len() as u32).to_le_bytes());
        pac.extend_from_slice(&24u64.to_le_bytes());
        pac.extend_from_slice(rest);
        pac
    };
    if let Ok(Some(info)) = logon_info(&pac) {
        let mut seen = HashSet::new();
        for sid in &info.groups {
            assert!(sid.sub.len() <= 15, "a SID of at most 15 sub-authorities");
            assert!(seen.insert(sid), "each group once");
        }
        assert!(info.user.sub.len() <= 15);
    }
});
