//! CREATE request decoder with its create context chain, the chain decoder
//! alone, the CREATE response decoder, and the name checks the server runs
//! next, on arbitrary bytes. No panic; a decoded request (contexts
//! included) re-encodes to the same value.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_wire::create::{self, ctx_name, CreateRequest, CreateResponse};
use smbq_wire::header::HEADER_LEN;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = CreateRequest::decode(data) {
        let mut m = vec![0u8; HEADER_LEN];
        r.encode(&mut m, 0);
        assert_eq!(CreateRequest::decode(&m).as_ref(), Ok(&r));
        let name = smbq_server::share_mode::share_path(&r.name);
        if smbq_vfs::check_name(name).is_ok() {
            let _ = name.split('\\').any(|c| c == "..");
        }
        // The server reads an ALLOCATION_SIZE context as a u64.
        if let Some(c) = r.context(ctx_name::ALLOCATION_SIZE) {
            let _ = <[u8; 8]>::try_from(c.data).map(u64::from_le_bytes);
        }
    }
    if let Ok(list) = create::decode_contexts(data) {
        let pairs: Vec<(&[u8], &[u8])> = list.iter().map(|c| (c.name, c.data)).collect();
        let mut m = Vec::new();
        create::encode_contexts(&mut m, &pairs);
        assert_eq!(create::decode_contexts(&m), Ok(list));
    }
    let _ = CreateResponse::decode(data);
});
