//! Requests that finish later (MS-SMB2 3.3.4.2): what each waits for, and
//! what its final answer needs.

use crate::byte_range::Blocked;
use crate::transport_info::CONTROL_STREAM;
use crate::notify::Watch;
use std::time::Instant;

pub(crate) struct Pending {
    pub async_id: u64,
    pub message_id: u64,
    pub session_id: u64,
    pub tree_id: u32,
    pub command: u16,
    pub encrypted: bool,
    pub signed: bool,
    pub work: AsyncWork,
    /// Taken over from a channel that is gone: carried out, not answered.
    pub adopted: bool,
    /// A job's request, answered by nothing yet: when it gets its interim
    /// response ([`crate::job::INTERIM_DELAY`]). Until then its final
    /// answer is an ordinary one, granting the credits asked for.
    pub interim_at: Option<Instant>,
    pub credit_charge: u16,
    pub credits_asked: u16,
    /// The request's priority bits, echoed (MS-SMB2 2.2.1.2).
    pub priority: u32,
    /// When the request reached the engine (its latency ends with the final answer).
    pub arrived: Instant,
    /// The stream the request came on, where its final answer goes.
    pub stream: u16,
}

impl Pending {
    /// Request `hdr`, arrived at `now`, answered later under `async_id`,
    /// in session and tree `ids`; sealed when `encrypted`. Its interim
    /// response is sent with it unless `interim_at` is set afterwards.
    pub(crate) fn new(hdr: &smbq_wire::Header, now: Instant, async_id: u64, ids: (u64, u32), encrypted: bool, work: AsyncWork) -> Pending {
        use smbq_wire::header::flags;
        Pending {
            async_id,
            message_id: hdr.message_id,
            session_id: ids.0,
            tree_id: ids.1,
            command: hdr.command,
            encrypted,
            signed: hdr.flags & flags::SIGNED != 0,
            work,
            adopted: false,
            interim_at: None,
            credit_charge: hdr.credit_charge,
            credits_asked: hdr.credits,
            priority: hdr.flags & flags::PRIORITY_MASK,
            arrived: now,
            stream: CONTROL_STREAM,
        }
    }

    /// Room before the header of an answer: the Direct TCP prefix, and
    /// the transform header when it is sealed.
    pub(crate) fn prefix(&self) -> usize {
        4 + if self.encrypted { smbq_crypto::TRANSFORM_HEADER_LEN } else { 0 }
    }
}

/// Work that finishes later (MS-SMB2 3.3.4.2): the handler stores it in
/// `ctx.go_async` and returns `Ok(NtStatus::PENDING)`.
pub enum AsyncWork {
    Lock(Blocked),
    Notify(Watch),
    /// A CREATE or a rename waiting for breaks to be acknowledged.
    Deferred(Deferred),
    /// File work on the transport's pool (its job id, [`crate::job`]).
    Job(u64),
}

impl AsyncWork {
    /// When the work must be retried even if nothing wakes it.
    pub fn deadline(&self) -> Option<Instant> {
        match self {
            AsyncWork::Deferred(d) => Some(d.deadline),
            AsyncWork::Lock(_) | AsyncWork::Notify(_) | AsyncWork::Job(_) => None,
        }
    }
}

/// A request waiting for oplock or lease break acknowledgments (MS-SMB2
/// 3.3.4.2): run again when they come (or whatever else wakes its
/// connection) or at `deadline`.
pub struct Deferred {
    pub(crate) msg: Vec<u8>,
    pub deadline: Instant,
    pub(crate) since: Instant,
}

impl Deferred {
    /// Request `msg`, first deferred `since`, waits until `deadline`.
    pub fn new(msg: &[u8], deadline: Instant, since: Instant) -> Deferred {
        Deferred { msg: msg.to_vec(), deadline, since }
    }
}
