//! QUERY_DIRECTORY request decoder and the directory entry encoders on
//! arbitrary bytes: no panic; a decoded request re-encodes to the same
//! value; an entry the encoder accepts has its declared fixed length.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_wire::fscc::{self, FileMeta};
use smbq_wire::header::HEADER_LEN;
use smbq_wire::query_directory::{self, QueryDirectoryRequest};

fuzz_target!(|data: &[u8]| {
    if let Ok(q) = QueryDirectoryRequest::decode(data) {
        let mut m = vec![0u8; HEADER_LEN];
        q.encode(&mut m);
        assert_eq!(QueryDirectoryRequest::decode(&m), Ok(q.clone()));
        // Each class the server may be asked for, with the pattern as a name.
        let mut out = Vec::new();
        if fscc::dir_entry(&mut out, q.class, &FileMeta::default(), &q.pattern) {
            let fixed = fscc::dir_entry_fixed_len(q.class).expect("an encoded class has a fixed length");
            assert!(out.len() >= fixed);
        }
    }
    let _ = query_directory::decode_response(data);
});
