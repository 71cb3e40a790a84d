//! IOCTL request decoder and the decoders of every FSCTL input the server
//! parses (VALIDATE_NEGOTIATE_INFO, SRV_COPYCHUNK[_WRITE],
//! QUERY_ALLOCATED_RANGES, SET_ZERO_DATA, DUPLICATE_EXTENTS_TO_FILE), on arbitrary bytes:
//! both as a whole IOCTL message and as a bare FSCTL input. No panic; what
//! decodes re-encodes to the same value.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_wire::header::HEADER_LEN;
use smbq_wire::ioctl::{
    fsctl, AllocatedRange, CopyChunkRequest, CopyChunkResponse, DuplicateExtents, IoctlRequest, ValidateNegotiateRequest,
    ZeroData,
};

/// The server's cap on chunks (smbq_server::cmd::ioctl::MAX_CHUNKS).
const MAX_CHUNKS: usize = smbq_server::cmd::ioctl::MAX_CHUNKS as usize;

fn fsctl_input(code: u32, input: &[u8]) {
    match code {
        fsctl::VALIDATE_NEGOTIATE_INFO => {
            if let Ok(v) = ValidateNegotiateRequest::decode(input) {
                let mut m = Vec::new();
                v.encode(&mut m);
                assert_eq!(ValidateNegotiateRequest::decode(&m), Ok(v));
            }
        }
        fsctl::SRV_COPYCHUNK | fsctl::SRV_COPYCHUNK_WRITE => {
            if let Ok(c) = CopyChunkRequest::decode(input, MAX_CHUNKS) {
                assert!(c.chunks.len() <= MAX_CHUNKS);
                let mut m = Vec::new();
                c.encode(&mut m);
                assert_eq!(CopyChunkRequest::decode(&m, MAX_CHUNKS), Ok(c));
            }
            if let Ok(r) = CopyChunkResponse::decode(input) {
                let mut m = Vec::new();
                r.encode(&mut m);
                assert_eq!(CopyChunkResponse::decode(&m), Ok(r));
            }
        }
        fsctl::QUERY_ALLOCATED_RANGES => {
            if let Ok(q) = AllocatedRange::decode(input) {
                let mut m = Vec::new();
                q.encode(&mut m);
                assert_eq!(m.as_slice(), &input[..16]);
            }
        }
        fsctl::SET_ZERO_DATA => {
            if let Ok(z) = ZeroData::decode(input) {
                let mut m = Vec::new();
                z.encode(&mut m);
                assert_eq!(m.as_slice(), &input[..16]);
            }
        }
        fsctl::DUPLICATE_EXTENTS_TO_FILE => {
            if let Ok(d) = DuplicateExtents::decode(input) {
                let mut m = Vec::new();
                d.encode(&mut m);
                assert_eq!(m.as_slice(), &input[..40]);
            }
        }
        _ => {}
    }
}

const CODES: [u32; 6] = [
    fsctl::VALIDATE_NEGOTIATE_INFO,
    fsctl::SRV_COPYCHUNK,
    fsctl::SRV_COPYCHUNK_WRITE,
    fsctl::QUERY_ALLOCATED_RANGES,
    fsctl::SET_ZERO_DATA,
    fsctl::DUPLICATE_EXTENTS_TO_FILE,
];

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = IoctlRequest::decode(data) {
        fsctl_input(r.ctl_code, r.input);
        // OutputOffset/Count are not re-encoded (requests carry no output).
        let mut m = vec![0u8; HEADER_LEN];
        r.encode(&mut m);
        let again = IoctlRequest::decode(&m).expect("re-encoded IOCTL decodes");
        assert_eq!(again, IoctlRequest { output_count: 0, ..r });
    }
    // A bare FSCTL input, its code chosen by the first byte.
    if let Some((&sel, input)) = data.split_first() {
        fsctl_input(CODES[usize::from(sel) % CODES.len()], input);
    }
});
