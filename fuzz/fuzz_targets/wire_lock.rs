//! LOCK request decoder on arbitrary bytes: no panic; a decoded request
//! re-encodes to one that decodes to the same value.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_wire::header::HEADER_LEN;
use smbq_wire::lock::LockRequest;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = LockRequest::decode(data) {
        let mut m = vec![0u8; HEADER_LEN];
        r.encode(&mut m);
        assert_eq!(LockRequest::decode(&m), Ok(r));
    }
});
