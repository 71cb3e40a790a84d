//! Every request decoder in `smbq-wire` on arbitrary bytes: no panic, and
//! what decodes as a header re-encodes to the same 64 bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_wire::{header::Header, negotiate, session_setup, tree_connect};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Header::decode(data) {
        let mut v = Vec::new();
        h.encode(&mut v);
        if !h.is_async() {
            // Reserved (process id) is not kept; compare the rest.
            assert_eq!(v[..32], data[..32]);
            assert_eq!(v[36..64], data[36..64]);
        }
    }
    let _ = negotiate::NegotiateRequest::decode(data);
    let _ = session_setup::SessionSetupRequest::decode(data, 65536);
    let _ = tree_connect::decode_request(data);
    let _ = smbq_wire::create::CreateRequest::decode(data);
    let _ = smbq_wire::create::decode_contexts(data);
    let _ = negotiate::decode_contexts(data, 8);
    if let Some(n) = smbq_wire::multistream::decode(data) {
        assert_eq!(smbq_wire::multistream::decode(&smbq_wire::multistream::encode(n)), Some(n));
    }
    let _ = smbq_wire::write::WriteRequest::decode(data);
    // A head of which `more` bytes follow elsewhere.
    let more = data.first().map_or(0, |&b| usize::from(b) << 8);
    let _ = smbq_wire::write::WriteRequest::decode_head(data, more);
});
