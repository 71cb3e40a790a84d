//! Security descriptors (MS-DTYP 2.4.6) as QUERY_INFO/SET_INFO and the SD
//! create context carry them, and `security.NTACL` values (Samba's
//! xattr_NTACL, versions 1-4) around them, on arbitrary bytes. No panic;
//! what decodes re-encodes to bytes that decode to the same descriptor,
//! and the selections and merges of it encode and decode too.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_wire::security::SecurityDescriptor;

fn descriptor(data: &[u8]) {
    let Ok(sd) = SecurityDescriptor::decode(data) else { return };
    let bytes = sd.to_bytes();
    assert_eq!(SecurityDescriptor::decode(&bytes).as_ref(), Ok(&sd));
    for info in 0..16 {
        let part = sd.select(info);
        assert_eq!(SecurityDescriptor::decode(&part.to_bytes()).as_ref(), Ok(&part));
        let merged = SecurityDescriptor::default().merge(&sd, info);
        assert_eq!(SecurityDescriptor::decode(&merged.to_bytes()).as_ref(), Ok(&merged));
    }
    let stored = smbq_vfs::ntacl::encode(&bytes).expect("a descriptor that decoded encodes");
    assert_eq!(smbq_vfs::ntacl::decode(&stored), Ok(bytes));
}

fuzz_target!(|data: &[u8]| {
    descriptor(data);
    if let Ok(sd) = smbq_vfs::ntacl::decode(data) {
        descriptor(&sd);
    }
});
