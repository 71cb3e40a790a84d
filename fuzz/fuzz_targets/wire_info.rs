//! QUERY_INFO and SET_INFO request decoders, and the SET_INFO buffer
//! decoders per information class the server parses (MS-FSCC basic,
//! rename, end of file/allocation/position, mode, disposition), on
//! arbitrary bytes: as whole messages and as bare buffers. Also the
//! QUERY_INFO response decoder and the FSCC encoders fed with arbitrary
//! names; the EA lists of FileFullEaInformation and what smbq reads back
//! from the file system (user.DOSATTRIB values, stream names). No panic;
//! what decodes re-encodes to the same value.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_wire::fscc::{self, class, BasicInfo, FileMeta, RenameInfo};
use smbq_wire::header::HEADER_LEN;
use smbq_wire::query_info::{self, QueryInfoRequest};
use smbq_wire::set_info::SetInfoRequest;

fn set_buffer(c: u8, buf: &[u8]) {
    match c {
        class::BASIC => {
            if let Ok(b) = BasicInfo::decode(buf) {
                let mut m = Vec::new();
                b.encode(&mut m);
                assert_eq!(BasicInfo::decode(&m), Ok(b));
            }
        }
        class::RENAME => {
            if let Ok(r) = RenameInfo::decode(buf) {
                let mut m = Vec::new();
                r.encode(&mut m);
                assert_eq!(RenameInfo::decode(&m), Ok(r.clone()));
                // What the server does with the target name next.
                let _ = smbq_vfs::check_name(smbq_server::share_mode::share_path(&r.name));
            }
        }
        class::END_OF_FILE | class::ALLOCATION | class::POSITION => {
            let _ = fscc::decode_u64(buf);
        }
        class::MODE => {
            let _ = fscc::decode_u32(buf);
        }
        class::DISPOSITION => {
            let _ = fscc::decode_disposition(buf);
        }
        class::FULL_EA => {
            if let Ok(eas) = smbq_wire::ea::decode_full(buf) {
                let mut m = Vec::new();
                smbq_wire::ea::encode_full(&mut m, &eas);
                assert_eq!(smbq_wire::ea::decode_full(&m), Ok(eas));
            }
            let _ = smbq_wire::ea::decode_names(buf);
        }
        _ => {}
    }
}

const CLASSES: [u8; 8] = [
    class::BASIC,
    class::RENAME,
    class::END_OF_FILE,
    class::ALLOCATION,
    class::POSITION,
    class::MODE,
    class::DISPOSITION,
    class::FULL_EA,
];

fuzz_target!(|data: &[u8]| {
    if let Ok(q) = QueryInfoRequest::decode(data) {
        let mut m = vec![0u8; HEADER_LEN];
        q.encode(&mut m);
        assert_eq!(QueryInfoRequest::decode(&m), Ok(q));
    }
    let _ = query_info::decode_response(data);
    if let Ok(s) = SetInfoRequest::decode(data) {
        set_buffer(s.class, s.buffer);
        let mut m = vec![0u8; HEADER_LEN];
        s.encode(&mut m);
        assert_eq!(SetInfoRequest::decode(&m), Ok(s));
    }
    if let Some((&sel, rest)) = data.split_first() {
        set_buffer(CLASSES[usize::from(sel) % CLASSES.len()], rest);
        // What the server reads back from the file system.
        if let Some(info) = smbq_vfs::dosattrib::decode(rest) {
            assert_eq!(smbq_vfs::dosattrib::decode(&smbq_vfs::dosattrib::encode(&info)), Some(info));
        }
        // Encoders the server feeds with names from the file system.
        let name = String::from_utf8_lossy(rest);
        let _ = smbq_vfs::parse_stream(&name);
        let meta = FileMeta::default();
        let mut out = Vec::new();
        fscc::name_info(&mut out, &name);
        fscc::all(&mut out, &meta, false, 0, 0, 0, &name);
        let _ = fscc::short_name(&name);
        fscc::fs_attribute(&mut out, 0, 255, &name);
        fscc::fs_volume(&mut out, 0, 0, &name);
    }
});
