//! LOCK (MS-SMB2 2.2.26, 2.2.27; processing 3.3.5.14) with the byte-range
//! lock rules of MS-FSA 2.1.5.7 as Windows applies them (the behaviour
//! smbtorture's smb2.lock suite checks):
//!
//! - a new exclusive lock conflicts with every overlapping lock, its own
//!   open's included; a new shared lock only with exclusive locks of other
//!   opens (so a shared lock stacks on the same open's exclusive lock);
//! - ranges are half-open `[offset, offset + length)`; a zero-length lock
//!   at `s` overlaps a range only when `s` lies strictly inside it, and
//!   never another zero-length lock; it must still be unlocked exactly;
//! - unlock removes one lock of exactly that offset and length held by the
//!   open, exclusive ones first; elements are processed in order and a
//!   failure leaves earlier unlocks done;
//! - lock elements are all-or-nothing: a failure rolls back the ones
//!   granted by the same request.
//!
//! Lock sequence replay detection (3.3.5.14): on a durable open, or on a
//! connection that negotiated multichannel, a LOCK whose LockSequenceIndex
//! (1..=64) holds its LockSequenceNumber already was done before (the
//! client resends it after a lost channel): it succeeds at once. Windows
//! checks resilient and persistent opens only (<314>); Samba and smbq do
//! what the text says.

use crate::byte_range::{lock_conflict, unlock, Blocked};
use crate::conn_state::ConnState;
use crate::pending::AsyncWork;
use crate::ctx::{Ctx, HResult, Req};
use crate::files::{ByteLock, OpenOwner};
use crate::open::access;
use crate::oplock;
use smbq_wire::lock::{encode_response, flags, LockElement, LockRequest};
use smbq_wire::{FileId, NtStatus};

/// STATUS_INVALID_LOCK_RANGE (MS-ERREF 2.3.1).
pub const INVALID_LOCK_RANGE: NtStatus = NtStatus(0xC000_01A1);

/// A range whose last byte lies beyond 2^64 - 1.
fn bad_range(l: &LockElement) -> bool {
    l.length != 0 && l.offset.checked_add(l.length - 1).is_none()
}

/// What the request asks, after the flag checks of 3.3.5.14.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// Unlock the first `valid` elements in order; if `valid` is short of
    /// the count, the next element has bad flags (INVALID_PARAMETER once
    /// the earlier ones are done).
    Unlock { valid: usize },
    Lock { blocking: bool },
}

const SHARED_FI: u32 = flags::SHARED | flags::FAIL_IMMEDIATELY;
const EXCLUSIVE_FI: u32 = flags::EXCLUSIVE | flags::FAIL_IMMEDIATELY;

//= MS-SMB2 3.3.5.14
//# The first element decides: UNLOCK makes this an unlock request whose
//# elements must all be UNLOCK; SHARED or EXCLUSIVE without
//# FAIL_IMMEDIATELY is a blocking request, valid only with one element;
//# with more than one element every lock must carry FAIL_IMMEDIATELY;
//# any other combination fails with STATUS_INVALID_PARAMETER.
fn classify(locks: &[LockElement]) -> Result<Plan, NtStatus> {
    let first = locks.first().ok_or(NtStatus::INVALID_PARAMETER)?;
    if first.flags == flags::UNLOCK {
        let valid = locks.iter().position(|l| l.flags != flags::UNLOCK).unwrap_or(locks.len());
        return Ok(Plan::Unlock { valid });
    }
    let blocking = match first.flags {
        flags::SHARED | flags::EXCLUSIVE => true,
        SHARED_FI | EXCLUSIVE_FI => false,
        _ => return Err(NtStatus::INVALID_PARAMETER),
    };
    if blocking && locks.len() > 1 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    if locks.iter().skip(1).any(|l| l.flags != SHARED_FI && l.flags != EXCLUSIVE_FI) {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    if locks.iter().any(bad_range) {
        return Err(INVALID_LOCK_RANGE);
    }
    Ok(Plan::Lock { blocking })
}

/// Grant all `locks` to `owner` or none: LOCK_NOT_GRANTED (with the
/// table unchanged) on the first conflict.
fn lock_all(table: &mut Vec<ByteLock>, owner: OpenOwner, locks: &[LockElement]) -> Result<(), NtStatus> {
    let base = table.len();
    for l in locks {
        let exclusive = l.flags & flags::EXCLUSIVE != 0;
        if lock_conflict(table, owner, l.offset, l.length, exclusive) {
            table.truncate(base);
            return Err(NtStatus::LOCK_NOT_GRANTED);
        }
        table.push(ByteLock { owner, offset: l.offset, length: l.length, exclusive });
    }
    Ok(())
}

/// Unlock the first `valid` elements in order (3.3.5.14.1).
fn unlock_all(table: &mut Vec<ByteLock>, owner: OpenOwner, locks: &[LockElement], valid: usize) -> Result<(), NtStatus> {
    for l in locks.iter().take(valid) {
        if bad_range(l) {
            return Err(INVALID_LOCK_RANGE);
        }
        if !unlock(table, owner, l.offset, l.length) {
            return Err(NtStatus::RANGE_NOT_LOCKED);
        }
    }
    if valid < locks.len() {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    Ok(())
}

/// MS-SMB2 3.3.5.14.
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let r = LockRequest::decode(req.msg).map_err(NtStatus::from)?;
    let connection = ctx.conn.id;
    let multichannel = ctx.conn.neg.as_ref().is_some_and(|n| n.server_capabilities & smbq_wire::negotiate::caps::MULTI_CHANNEL != 0);
    let o = ctx.open(r.file_id)?;
    let bucket = r.lock_sequence >> 4;
    let sequence = (multichannel || o.durable.is_some())
        .then_some(bucket)
        .filter(|b| (1..=64).contains(b))
        .map(|b| (b as usize - 1, (r.lock_sequence & 0xF) as u8));
    if let Some((i, value)) = sequence {
        if o.lock_sequences[i] == value {
            encode_response(ctx.out);
            return Ok(NtStatus::SUCCESS);
        }
        o.lock_sequences[i] = crate::open::NO_LOCK_SEQUENCE;
    }
    let Some(h) = o.handle() else { return Err(NtStatus::INVALID_DEVICE_REQUEST) };
    //= MS-FSA 2.1.5.7
    //# If Open.Stream.StreamType is DirectoryStream, return
    //# STATUS_INVALID_PARAMETER.
    if h.is_dir {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let (file_id, owner, file_key, granted) = (o.file_id, o.owner(), o.file_key, o.access);
    let plan = classify(&r.locks)?;
    let server = ctx.conn.server.clone();
    let mut guard = server.files.entry(file_key);
    let entry = &mut *guard;
    let table = &mut entry.locks;
    match plan {
        Plan::Unlock { valid } => {
            unlock_all(table, owner, &r.locks, valid)?;
            // Blocked locks of any connection may now go through.
            server.wake(&std::mem::take(&mut entry.waiters));
        }
        Plan::Lock { blocking } => {
            //= MS-FSA 2.1.5.7
            //# If Open.GrantedAccess contains neither FILE_READ_DATA nor
            //# FILE_WRITE_DATA, the operation MUST be failed with
            //# STATUS_ACCESS_DENIED.
            if granted & (access::FILE_READ_DATA | access::FILE_WRITE_DATA) == 0 {
                return Err(NtStatus::ACCESS_DENIED);
            }
            match (lock_all(table, owner, &r.locks), blocking, r.locks.first()) {
                (Ok(()), _, _) => server.send_breaks(&oplock::contend_level2(entry, owner, ctx.now, server.break_timeout())),
                //= MS-SMB2 3.3.5.14.2
                //# Without SMB2_LOCKFLAG_FAIL_IMMEDIATELY the server waits
                //# for the conflicting lock to go away, answering
                //# STATUS_PENDING in an interim response.
                (Err(_), true, Some(l)) => {
                    entry.wait(connection);
                    ctx.go_async = Some(AsyncWork::Lock(Blocked {
                        file_id,
                        owner,
                        file_key,
                        offset: l.offset,
                        length: l.length,
                        exclusive: l.flags & flags::EXCLUSIVE != 0,
                        sequence,
                    }));
                    return Ok(NtStatus::PENDING);
                }
                (Err(e), _, _) => return Err(e),
            }
        }
    }
    drop(guard);
    record_sequence(ctx, file_id, sequence);
    encode_response(ctx.out);
    Ok(NtStatus::SUCCESS)
}

/// A LOCK succeeded: its LockSequenceNumber marks it done.
fn record_sequence(ctx: &mut Ctx<'_>, fid: FileId, sequence: Option<(usize, u8)>) {
    if let (Some((i, value)), Some(o)) = (sequence, ctx.conn.opens.get_mut(&fid.volatile)) {
        o.lock_sequences[i] = value;
    }
}

/// Try a blocked lock again; `Some` when it finished. When its open was
/// closed meanwhile the answer is RANGE_NOT_LOCKED while the conflict
/// remains (smbtorture smb2.lock.cancel "cancel by close"), and SUCCESS
/// when the conflicting lock went away too (the lock would have been
/// granted before the close: tree disconnect and logoff close both).
pub fn retry(ctx: &mut Ctx<'_>, b: &mut Blocked) -> Option<HResult> {
    let alive = ctx.conn.opens.get(&b.file_id.volatile).is_some_and(|o| o.file_id == b.file_id);
    let server = ctx.conn.server.clone();
    let mut entry = server.files.entry(b.file_key);
    let conflict = lock_conflict(&entry.locks, b.owner, b.offset, b.length, b.exclusive);
    match (conflict, alive) {
        (true, true) => {
            entry.wait(ctx.conn.id);
            return None;
        }
        (true, false) => return Some(Err(NtStatus::RANGE_NOT_LOCKED)),
        (false, true) => entry.locks.push(ByteLock {
            owner: b.owner,
            offset: b.offset,
            length: b.length,
            exclusive: b.exclusive,
        }),
        (false, false) => {}
    }
    drop(entry);
    record_sequence(ctx, b.file_id, b.sequence);
    encode_response(ctx.out);
    Some(Ok(NtStatus::SUCCESS))
}

/// The request was cancelled (MS-SMB2 3.3.5.16). A blocked lock holds
/// nothing, so there is nothing to release.
pub fn cancel(_st: &mut ConnState, _b: &Blocked) {}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::byte_range::{io_conflict, overlaps};

    const A: OpenOwner = OpenOwner { connection: 1, volatile: 1 };
    const B: OpenOwner = OpenOwner { connection: 1, volatile: 2 };
    const EX: u32 = EXCLUSIVE_FI;
    const SH: u32 = SHARED_FI;

    fn el(offset: u64, length: u64, flags: u32) -> LockElement {
        LockElement { offset, length, flags }
    }

    fn lock(t: &mut Vec<ByteLock>, o: OpenOwner, offset: u64, length: u64, flags: u32) -> Result<(), NtStatus> {
        lock_all(t, o, &[el(offset, length, flags)])
    }

    #[test]
    fn overlap_rules() {
        assert!(overlaps(0, 4, 2, 4));
        assert!(!overlaps(0, 4, 4, 4));
        assert!(overlaps(u64::MAX, 1, u64::MAX, 1));
        assert!(overlaps(0, u64::MAX, u64::MAX - 1, 1));
        // Zero length: strictly inside only.
        assert!(!overlaps(10, 0, 10, 0));
        assert!(!overlaps(10, 0, 10, 2));
        assert!(overlaps(10, 0, 9, 2));
        assert!(overlaps(10, 0, 9, 3));
        assert!(!overlaps(10, 0, 9, 1));
        assert!(!overlaps(10, 0, 11, 1));
    }

    /// smbtorture smb2.lock.zerobytelength, same handle and two handles.
    #[test]
    fn zero_byte_table() {
        let cases = [
            ((10, 0), (10, 0), true),
            ((10, 0), (9, 1), true),
            ((10, 0), (10, 1), true),
            ((10, 0), (11, 1), true),
            ((10, 0), (9, 2), false),
            ((10, 0), (10, 2), true),
            ((10, 0), (9, 3), false),
            ((9, 1), (10, 0), true),
            ((10, 1), (10, 0), true),
            ((11, 1), (10, 0), true),
            ((9, 2), (10, 0), false),
            ((10, 2), (10, 0), true),
            ((9, 3), (10, 0), false),
            ((0, 0), (0, 0), true),
        ];
        for second in [A, B] {
            for ((o1, l1), (o2, l2), ok) in cases {
                let mut t = Vec::new();
                lock(&mut t, A, o1, l1, EX).unwrap();
                let r = lock(&mut t, second, o2, l2, EX);
                assert_eq!(r.is_ok(), ok, "{o1}/{l1} then {o2}/{l2}");
                if ok {
                    assert!(unlock(&mut t, second, o2, l2));
                }
                assert!(unlock(&mut t, A, o1, l1));
                assert!(t.is_empty());
            }
        }
    }

    /// smb2.lock.stacking and smb2.lock.contend.
    #[test]
    fn stacking() {
        let mut t = Vec::new();
        lock(&mut t, A, 0, 10, EX).unwrap();
        lock(&mut t, A, 0, 10, SH).unwrap();
        lock(&mut t, A, 0, 10, SH).unwrap();
        assert_eq!(lock(&mut t, B, 0, 10, SH), Err(NtStatus::LOCK_NOT_GRANTED));
        assert_eq!(lock(&mut t, A, 0, 10, EX), Err(NtStatus::LOCK_NOT_GRANTED));
        // The exclusive lock goes first: B can then share.
        assert!(unlock(&mut t, A, 0, 10));
        lock(&mut t, B, 0, 10, SH).unwrap();
        assert!(unlock(&mut t, B, 0, 10));
        assert!(unlock(&mut t, A, 0, 10));
        assert!(unlock(&mut t, A, 0, 10));
        assert!(!unlock(&mut t, A, 0, 10));
        // Exclusive on top of one's own shared fails.
        lock(&mut t, A, 0, 10, SH).unwrap();
        assert_eq!(lock(&mut t, A, 0, 10, EX), Err(NtStatus::LOCK_NOT_GRANTED));
        // Unlock needs the exact range and the same open.
        assert!(!unlock(&mut t, A, 0, 5));
        assert!(!unlock(&mut t, B, 0, 10));
        assert!(unlock(&mut t, A, 0, 10));
    }

    #[test]
    fn multiple_elements_are_all_or_nothing() {
        let mut t = Vec::new();
        lock(&mut t, B, 20, 5, EX).unwrap();
        let r = lock_all(&mut t, A, &[el(0, 10, EX), el(10, 10, SH), el(22, 1, EX)]);
        assert_eq!(r, Err(NtStatus::LOCK_NOT_GRANTED));
        assert_eq!(t.len(), 1);
        lock_all(&mut t, A, &[el(0, 10, EX), el(10, 10, SH)]).unwrap();
        assert_eq!(t.len(), 3);
    }

    /// smb2.lock.multiple-unlock: in order, no rollback.
    #[test]
    fn unlock_in_order() {
        let mut t = Vec::new();
        lock(&mut t, A, 10, 10, EX).unwrap();
        let both = [el(0, 10, flags::UNLOCK), el(10, 10, flags::UNLOCK)];
        assert_eq!(unlock_all(&mut t, A, &both, 2), Err(NtStatus::RANGE_NOT_LOCKED));
        assert_eq!(t.len(), 1);
        assert!(unlock(&mut t, A, 10, 10));
        lock(&mut t, A, 0, 10, EX).unwrap();
        assert_eq!(unlock_all(&mut t, A, &both, 2), Err(NtStatus::RANGE_NOT_LOCKED));
        assert!(t.is_empty());
        // A deferred bad element: earlier unlocks done, then INVALID_PARAMETER.
        lock(&mut t, A, 0, 10, EX).unwrap();
        let bad = [el(0, 10, flags::UNLOCK), el(10, 10, 0)];
        let Plan::Unlock { valid } = classify(&bad).unwrap() else { panic!() };
        assert_eq!(unlock_all(&mut t, A, &bad, valid), Err(NtStatus::INVALID_PARAMETER));
        assert!(t.is_empty());
    }

    /// smb2.lock.valid-request flag permutations.
    #[test]
    fn flag_validation() {
        let inv = Err(NtStatus::INVALID_PARAMETER);
        assert_eq!(classify(&[el(0, 0, 0)]), inv);
        assert_eq!(classify(&[el(1, 1, !0x17)]), inv);
        assert_eq!(classify(&[el(1, 1, flags::UNLOCK | flags::EXCLUSIVE)]), inv);
        assert_eq!(classify(&[el(1, 1, flags::UNLOCK | flags::SHARED)]), inv);
        assert_eq!(classify(&[el(1, 1, flags::UNLOCK | flags::FAIL_IMMEDIATELY)]), inv);
        assert_eq!(classify(&[el(1, 1, flags::SHARED | flags::EXCLUSIVE)]), inv);
        assert_eq!(classify(&[el(9999, 1, 0), el(9999, 1, flags::UNLOCK)]), inv);
        assert_eq!(classify(&[el(9999, 1, 0), el(9999, 1, 0)]), inv);
        assert_eq!(classify(&[el(9999, 1, flags::UNLOCK), el(9999, 1, 0)]), Ok(Plan::Unlock { valid: 1 }));
        assert_eq!(classify(&[el(0, 1, flags::SHARED), el(5, 1, SH)]), inv);
        assert_eq!(classify(&[el(0, 1, SH), el(5, 1, flags::EXCLUSIVE)]), inv);
        assert_eq!(classify(&[el(0, 1, SH), el(5, 1, EX)]), Ok(Plan::Lock { blocking: false }));
        assert_eq!(classify(&[el(0, 1, flags::EXCLUSIVE)]), Ok(Plan::Lock { blocking: true }));
        assert_eq!(classify(&[el(0, 1, SH), el(5, 1, flags::UNLOCK)]), inv);
    }

    /// smb2.lock.lock and valid-request range checks.
    #[test]
    fn ranges() {
        let bad = Err(INVALID_LOCK_RANGE);
        assert_eq!(classify(&[el(u64::MAX, u64::MAX, EX)]), bad);
        assert_eq!(classify(&[el(u64::MAX, 2, EX)]), bad);
        assert!(classify(&[el(u64::MAX, 1, EX)]).is_ok());
        assert!(classify(&[el(u64::MAX, 0, EX)]).is_ok());
        assert!(classify(&[el(u64::from(u32::MAX), u64::from(u32::MAX), EX)]).is_ok());
        let mut t = Vec::new();
        lock(&mut t, A, u64::MAX, 1, EX).unwrap();
        assert_eq!(lock(&mut t, B, u64::MAX, 1, EX), Err(NtStatus::LOCK_NOT_GRANTED));
        lock(&mut t, A, 1 << 63, 1, EX).unwrap();
        lock(&mut t, B, (1 << 63) - 1, 1, EX).unwrap();
        // max/0 from both handles.
        lock(&mut t, A, u64::MAX, 0, EX).unwrap();
        lock(&mut t, B, u64::MAX, 0, EX).unwrap();
    }

    /// smb2.lock.rw-shared / rw-exclusive.
    #[test]
    fn read_write_conflicts() {
        let shared = vec![ByteLock { owner: A, offset: 100, length: 100, exclusive: false }];
        assert!(io_conflict(&shared, A, 100, 100, true));
        assert!(!io_conflict(&shared, A, 100, 100, false));
        assert!(io_conflict(&shared, B, 100, 100, true));
        assert!(!io_conflict(&shared, B, 100, 100, false));
        let excl = vec![ByteLock { owner: A, offset: 100, length: 100, exclusive: true }];
        assert!(!io_conflict(&excl, A, 100, 100, true));
        assert!(!io_conflict(&excl, A, 100, 100, false));
        assert!(io_conflict(&excl, B, 100, 100, true));
        assert!(io_conflict(&excl, B, 150, 1, false));
        assert!(!io_conflict(&excl, B, 0, 100, false));
        assert!(!io_conflict(&excl, B, 150, 0, true));
    }

    /// The handler end to end: FAIL_IMMEDIATELY conflicts, a blocking lock
    /// going async and being granted by a retry after the unlock, and a
    /// blocked lock whose open was closed.
    #[test]
    fn handler_blocking_flow() {
        use crate::harness::{self, DISK};
        use crate::pending::AsyncWork;
        let mut h = harness::new();
        let h1 = h.open("l.txt", access::FILE_ALL);
        let h2 = h.open("l.txt", access::FILE_ALL);
        let req = |fid: FileId, locks: Vec<LockElement>| {
            let mut b = Vec::new();
            LockRequest { lock_sequence: 0, file_id: fid, locks }.encode(&mut b);
            b
        };
        let (r, body, _) = h.call(DISK, handle, &req(h1, vec![el(100, 50, flags::EXCLUSIVE)]));
        assert_eq!((r, body), (Ok(NtStatus::SUCCESS), vec![4, 0, 0, 0]));
        let (r, _, _) = h.call(DISK, handle, &req(h2, vec![el(120, 1, SH)]));
        assert_eq!(r, Err(NtStatus::LOCK_NOT_GRANTED));
        let (r, _, work) = h.call(DISK, handle, &req(h2, vec![el(100, 50, flags::EXCLUSIVE)]));
        assert_eq!(r, Ok(NtStatus::PENDING));
        let Some(AsyncWork::Lock(mut b)) = work else { panic!("no async work") };
        assert!(h.with_ctx(|ctx| retry(ctx, &mut b)).0.is_none());
        // Unlocking the pending (not granted) range fails.
        assert_eq!(h.call(DISK, handle, &req(h2, vec![el(100, 50, flags::UNLOCK)])).0, Err(NtStatus::RANGE_NOT_LOCKED));
        assert_eq!(h.call(DISK, handle, &req(h1, vec![el(100, 50, flags::UNLOCK)])).0, Ok(NtStatus::SUCCESS));
        let (done, body) = h.with_ctx(|ctx| retry(ctx, &mut b));
        assert_eq!(done, Some(Ok(NtStatus::SUCCESS)));
        assert_eq!(body, vec![4, 0, 0, 0]);
        assert_eq!(h.call(DISK, handle, &req(h1, vec![el(100, 1, SH)])).0, Err(NtStatus::LOCK_NOT_GRANTED));

        // h1 waits on h2's lock, then h1 is closed: RANGE_NOT_LOCKED.
        let (_, _, work) = h.call(DISK, handle, &req(h1, vec![el(100, 50, flags::SHARED)]));
        let Some(AsyncWork::Lock(mut b)) = work else { panic!("no async work") };
        h.conn.st.opens.remove(&h1.volatile);
        assert_eq!(h.with_ctx(|ctx| retry(ctx, &mut b)).0, Some(Err(NtStatus::RANGE_NOT_LOCKED)));

        // Bad requests.
        assert_eq!(h.call(DISK, handle, &req(h2, vec![el(0, 1, 0)])).0, Err(NtStatus::INVALID_PARAMETER));
        assert_eq!(h.call(DISK, handle, &req(h2, vec![el(u64::MAX, 2, EX)])).0, Err(INVALID_LOCK_RANGE));
        assert_eq!(h.call(DISK, handle, &req(h1, vec![el(0, 1, EX)])).0, Err(NtStatus::FILE_CLOSED));
        let ro = h.open("l.txt", access::FILE_READ_ATTRIBUTES);
        assert_eq!(h.call(DISK, handle, &req(ro, vec![el(0, 1, EX)])).0, Err(NtStatus::ACCESS_DENIED));
    }
}
