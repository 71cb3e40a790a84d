//! File work that may wait for the disk, run by the transport on its
//! bounded pool while the connection goes on (MS-SMB2 3.3.4.2): a READ the
//! page cache cannot answer, a write-through or large WRITE, a FLUSH's
//! fsync. The request is answered when its job is done, out of order with
//! the requests after it; one not done within [`INTERIM_DELAY`] gets an
//! interim STATUS_PENDING first, as Samba sends one after 0.5 ms.
//! Sans-IO: [`crate::Connection::poll_job`] hands out jobs,
//! [`crate::Connection::handle_job_done`] takes their results; without a
//! transport that runs them ([`crate::Connection::set_offload`]) the work
//! is done inline.

use bytes::Bytes;
use smbq_vfs::FileObject;
use smbq_wire::NtStatus;
use std::sync::Arc;
use std::time::Duration;

/// A request whose job is not done this long after it came gets an
/// interim response (the transports' timers tick in milliseconds).
pub const INTERIM_DELAY: Duration = Duration::from_millis(1);

pub struct Job {
    pub(crate) id: u64,
    pub(crate) file: Arc<dyn FileObject>,
    pub(crate) work: Work,
}

/// What a job does, and what its request's answer is built from.
pub(crate) enum Work {
    /// FLUSH: fsync.
    Sync,
    /// READ: `len` bytes at `offset`, appended to `out` (the response up
    /// to its data, from the frame prefix on).
    Read(ReadJob),
    /// A write-through WRITE: `data` at `offset`, then fsync.
    Write { data: Vec<Bytes>, offset: u64 },
}

pub(crate) struct ReadJob {
    pub out: Vec<u8>,
    /// Where the READ response body starts in `out`.
    pub head: usize,
    pub len: usize,
    pub offset: u64,
    pub minimum: u32,
    /// The open read (its position moves on).
    pub volatile: u64,
}

pub struct JobDone {
    pub(crate) id: u64,
    pub(crate) work: Work,
    /// Bytes read or written.
    pub(crate) result: Result<usize, NtStatus>,
}

impl Job {
    /// Do the work (blocking).
    pub fn run(self) -> JobDone {
        let Job { id, file, mut work } = self;
        let result = match &mut work {
            Work::Sync => file.sync().map(|()| 0),
            Work::Read(r) => file.read_append(&mut r.out, r.len, r.offset),
            Work::Write { data, offset } => {
                let bufs: Vec<&[u8]> = data.iter().map(|b| &b[..]).collect();
                let n = bufs.iter().map(|b| b.len()).sum();
                file.write_vectored_at(&bufs, *offset).and_then(|()| file.sync()).map(|()| n)
            }
        };
        JobDone { id, work, result: result.map_err(NtStatus::from) }
    }
}
