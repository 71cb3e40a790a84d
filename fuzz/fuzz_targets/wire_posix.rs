//! The SMB3 POSIX extensions' decoders (smbq_wire::posix) on arbitrary
//! bytes: the create context's mode, the create context response,
//! FILE_POSIX_INFORMATION alone and as QUERY_DIRECTORY entries, and the
//! reparse buffers (a symlink's; any, as FSCTL_SET_REPARSE_POINT checks
//! it). No panic; what decodes re-encodes to the same value.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_wire::posix::{self, CcInfo, PosixInfo, Symlink};
use smbq_wire::Reader;

fuzz_target!(|data: &[u8]| {
    if let Ok(mode) = posix::decode_create_request(data) {
        assert_eq!(posix::mode_to_wire(posix::mode_from_wire(mode)) & 0o7777, mode & 0o7777);
    }
    if let Ok(cc) = CcInfo::decode(&mut Reader::new(data)) {
        let mut out = Vec::new();
        cc.encode(&mut out);
        assert_eq!(CcInfo::decode(&mut Reader::new(&out)), Ok(cc));
    }
    if let Ok(info) = PosixInfo::decode(&mut Reader::new(data)) {
        let mut out = Vec::new();
        info.encode(&mut out);
        assert_eq!(PosixInfo::decode(&mut Reader::new(&out)), Ok(info));
    }
    let _ = posix::decode_dir_entries(data);
    if let Ok(link) = Symlink::decode(data) {
        let mut out = Vec::new();
        link.encode(&mut out);
        assert_eq!(Symlink::decode(&out), Ok(link));
    }
    let _ = posix::split_reparse_buffer(data);
});
