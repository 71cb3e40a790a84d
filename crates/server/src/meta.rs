//! What clients see of a file: its metadata as SMB2 answers carry it
//! (MS-FSCC 2.4), and the statuses extended attributes map to.

use smbq_vfs::FileStat;
use smbq_wire::fscc::{attr, FileMeta};
use smbq_wire::NtStatus;

/// The mode bits of CreateOptions FileModeInformation reports (MS-FSCC 2.4.26).
pub const MODE_OPTIONS: u32 = 0x0000_103E;

/// vfs metadata in the form the FSCC encoders take.
pub fn meta(st: &FileStat) -> FileMeta {
    FileMeta {
        file_id: st.file_id,
        end_of_file: if st.is_dir { 0 } else { st.size },
        allocation_size: if st.is_dir { 0 } else { st.allocation_size },
        creation_time: st.creation_time,
        last_access_time: st.last_access_time,
        last_write_time: st.last_write_time,
        change_time: st.change_time,
        attributes: st.attributes,
        nlink: st.nlink,
        directory: st.is_dir,
    }
}

/// What a named pipe reports about itself.
pub fn pipe_meta() -> FileMeta {
    FileMeta { attributes: attr::NORMAL, nlink: 1, allocation_size: 4096, ..FileMeta::default() }
}

/// The status for an EA list that does not decode (MS-FSA 2.1.5.14.4):
/// a bad name is INVALID_EA_NAME, anything else EA_LIST_INCONSISTENT.
pub(crate) fn ea_status(e: smbq_wire::ea::EaError) -> NtStatus {
    match e {
        smbq_wire::ea::EaError::InvalidName => NtStatus::INVALID_EA_NAME,
        smbq_wire::ea::EaError::Decode(_) => NtStatus::EA_LIST_INCONSISTENT,
    }
}
