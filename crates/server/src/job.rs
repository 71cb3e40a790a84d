//! Blocking file work a transport runs on its pool while the connection
//! goes on (MS-SMB2 3.3.4.2): a FLUSH's fsync, answered STATUS_PENDING at
//! once and finally when the data is on disk, so the requests after it
//! are not held up. Sans-IO: [`crate::Connection::poll_job`] hands out
//! jobs, [`crate::Connection::handle_job_done`] takes their results;
//! without a transport that runs them
//! ([`crate::Connection::set_offload`]) the work is done inline.

use smbq_vfs::FileObject;
use smbq_wire::NtStatus;
use std::sync::Arc;

pub struct Job {
    pub(crate) id: u64,
    pub(crate) file: Arc<dyn FileObject>,
}

pub struct JobDone {
    pub(crate) id: u64,
    pub(crate) result: Result<(), NtStatus>,
}

impl Job {
    /// Do the work (blocking).
    pub fn run(self) -> JobDone {
        JobDone { id: self.id, result: self.file.sync().map_err(NtStatus::from) }
    }
}
