//! READ, WRITE, FLUSH and CLOSE request decoders (and the response
//! decoders our client uses) on arbitrary bytes: no panic, and a decoded
//! request re-encodes to one that decodes to the same value.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_wire::close::CloseRequest;
use smbq_wire::header::HEADER_LEN;
use smbq_wire::read::{self, ReadRequest};
use smbq_wire::write::{self, WriteRequest};
use smbq_wire::flush;

fn with_header(encode: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut m = vec![0u8; HEADER_LEN];
    encode(&mut m);
    m
}

fuzz_target!(|data: &[u8]| {
    // `more` bytes of the message follow elsewhere (a chunked transport).
    let more = data.get(HEADER_LEN + 48).map_or(0, |&b| usize::from(b) << 4);

    if let Ok(r) = ReadRequest::decode(data) {
        let m = with_header(|m| r.encode(m));
        assert_eq!(ReadRequest::decode(&m), Ok(r));
    }
    let _ = read::decode_response(data);
    if let Ok((d, rest)) = read::decode_response_head(data, more) {
        assert!(d.len() <= data.len());
        let _ = rest;
    }

    if let Ok(w) = WriteRequest::decode(data) {
        let m = with_header(|m| w.encode(m));
        assert_eq!(WriteRequest::decode(&m), Ok(w));
    }
    if let Ok((w, len)) = WriteRequest::decode_head(data, more) {
        // The part inside `msg` plus what follows covers Length.
        assert!(w.data.len() <= len && len <= w.data.len() + more);
    }
    let _ = write::decode_response(data);

    if let Ok(fid) = flush::decode_request(data) {
        let m = with_header(|m| flush::encode_request(m, fid));
        assert_eq!(flush::decode_request(&m), Ok(fid));
    }
    if let Ok(c) = CloseRequest::decode(data) {
        let m = with_header(|m| c.encode(m));
        assert_eq!(CloseRequest::decode(&m), Ok(c));
    }
    let _ = smbq_wire::close::CloseResponse::decode(data);
});
