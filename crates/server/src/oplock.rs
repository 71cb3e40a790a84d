//! Oplocks (MS-SMB2 3.3.1.10 Open.OplockLevel/OplockState, 3.3.4.6,
//! 3.3.5.9 step "oplock", 3.3.5.22.1; MS-FSA 2.1.5.17).
//!
//! Levels are handled as the caching they grant, as Samba does: level II
//! is Read, exclusive Read and Write, batch Read, Write and Handle. An
//! incoming open breaks what it cannot coexist with: Write when it opens
//! the data too, Handle when it would otherwise fail on a sharing
//! violation (so the holder may close first), and Read when it overwrites
//! the file. Oplocks break to level II or to none. The open waits for
//! the acknowledgment of a break that takes away what it needs; a break
//! of level II to none needs no acknowledgment. Pure logic on the global
//! file table: the caller posts the breaks to the holders' connections.

use crate::files::{Breaking, FileEntry, LeaseId, OpenOwner};
use smbq_wire::oplock_break::level;
use std::time::{Duration, Instant};

/// Caching bits (MS-SMB2 2.2.13.2.8 LeaseState).
pub const READ: u8 = 0x1;
pub const HANDLE: u8 = 0x2;
pub const WRITE: u8 = 0x4;

/// The caching an oplock level grants.
pub fn caching(oplock: u8) -> u8 {
    match oplock {
        level::II => READ,
        level::EXCLUSIVE => READ | WRITE,
        level::BATCH => READ | WRITE | HANDLE,
        _ => 0,
    }
}

/// The oplock level that grants at most `caching`.
pub fn level_of(caching: u8) -> u8 {
    match caching {
        c if c == READ | WRITE | HANDLE => level::BATCH,
        c if c == READ | WRITE => level::EXCLUSIVE,
        c if c & READ != 0 => level::II,
        _ => level::NONE,
    }
}

/// Access that touches neither data nor the file's existence: such an
/// open breaks no oplock (Samba's is_oplock_stat_open). Callers count an
/// overwriting disposition as FILE_WRITE_DATA ([`effective_access`]).
pub fn is_stat_open(access: u32) -> bool {
    const STAT: u32 = 0x0010_0000 | 0x0000_0080 | 0x0000_0100; // SYNCHRONIZE, READ/WRITE_ATTRIBUTES
    access & STAT != 0 && access & !STAT == 0
}

/// Access that leaves a lease alone: a stat open plus READ_CONTROL
/// (Samba's is_lease_stat_open; smbtorture smb2.lease.statopen4).
pub fn is_lease_stat_open(access: u32) -> bool {
    is_stat_open(access & !0x0002_0000) || access == 0x0002_0000
}

/// The access an open uses on the file: what it was granted, and
/// FILE_WRITE_DATA when it overwrites (the truncation writes).
pub fn effective_access(granted: u32, overwrite: bool) -> u32 {
    if overwrite {
        granted | 0x0000_0002
    } else {
        granted
    }
}

/// A break to send: an oplock's (to the open's connection) or a
/// lease's (to a connection with an open under it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Break {
    Oplock { owner: OpenOwner, level: u8 },
    Lease { connection: u64, key: [u8; 16], epoch: u16, from: u8, to: u8, ack: bool },
}

/// What an incoming open has to do about the other opens' oplocks and
/// leases.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Contention {
    /// Breaks to send now.
    pub breaks: Vec<Break>,
    /// Wait for acknowledgments until this instant at the latest.
    pub wait: Option<Instant>,
}

impl Contention {
    fn wait_until(&mut self, deadline: Instant) {
        self.wait = Some(self.wait.map_or(deadline, |w| w.min(deadline)));
    }
}

/// What a holder of `held` keeps when an open that needs `delay_mask`
/// given up comes (Samba's delay_for_oplock_fn), or `None` when it
/// keeps everything.
fn break_to(held: u8, delay_mask: u8, overwrite: bool) -> Option<u8> {
    let overwriting = overwrite && delay_mask & HANDLE == 0;
    let mut to = held & !delay_mask;
    if overwriting {
        to &= !(HANDLE | READ);
    }
    if held & !to == 0 {
        return None;
    }
    if overwriting {
        to &= !(READ | WRITE);
    }
    Some(to)
}

/// Decide the breaks a new open causes (Samba's delay_for_oplock), and
/// record them in `entry`. A break that timed out is settled here: the
/// holder is left with no oplock (MS-SMB2 3.3.2.1, Oplock Break
/// Acknowledgment Timer). `violation`: the share modes conflict;
/// `overwrite`: the open supersedes or overwrites the file.
pub fn contend(
    entry: &mut FileEntry,
    access: u32,
    own_lease: Option<&LeaseId>,
    violation: bool,
    overwrite: bool,
    now: Instant,
    timeout: Duration,
) -> Contention {
    let mut c = Contention::default();
    if is_stat_open(access) {
        return c;
    }
    let delay_mask = if violation { HANDLE } else { WRITE };
    for o in entry.opens.iter_mut().filter(|o| o.lease.is_none()) {
        if let Some(b) = o.breaking {
            if now >= b.deadline {
                o.oplock = level::NONE;
                o.breaking = None;
                continue;
            }
        }
        let held = caching(o.oplock);
        if let Some(b) = o.breaking {
            if held & delay_mask != 0 {
                c.wait_until(b.deadline);
            }
            continue;
        }
        let Some(to) = break_to(held, delay_mask, overwrite) else { continue };
        // Oplocks break to Read (level II) or nothing.
        let to_level = level_of(to & READ);
        c.breaks.push(Break::Oplock { owner: o.owner, level: to_level });
        if o.oplock == level::II {
            // Level II to none is not acknowledged (MS-SMB2 3.3.4.6).
            o.oplock = level::NONE;
            continue;
        }
        let deadline = now + timeout;
        o.breaking = Some(Breaking { to: to_level, deadline });
        if held & delay_mask != 0 {
            c.wait_until(deadline);
        }
    }
    if is_lease_stat_open(access) {
        return c;
    }
    let holders = entry.lease_holders();
    for (id, holder) in holders {
        if Some(&id) == own_lease {
            continue;
        }
        let Some(l) = entry.lease_mut(&id) else { continue };
        if let Some(b) = l.breaking {
            if now >= b.deadline {
                // Unacknowledged in time: the lease keeps nothing
                // (smbtorture smb2.lease.timeout).
                l.state = 0;
                l.breaking = None;
            } else {
                if l.state & delay_mask != 0 {
                    c.wait_until(b.deadline);
                }
                continue;
            }
        }
        let held = l.state;
        let Some(to) = break_to(held, delay_mask, overwrite) else { continue };
        c.breaks.extend(break_lease(l, holder, to, now + timeout));
        if held & delay_mask != 0 && l.breaking.is_some() {
            c.wait_until(now + timeout);
        }
    }
    c
}

/// Break lease `l` to `to` (MS-SMB2 3.3.4.7): a break that takes Write or
/// Handle caching away is acknowledged before it takes effect; one that
/// only takes Read away takes effect at once. Version 2 leases count
/// each change in their epoch.
fn break_lease(l: &mut crate::files::Lease, holder: Option<OpenOwner>, to: u8, deadline: Instant) -> Option<Break> {
    let from = l.state;
    let ack = from & (WRITE | HANDLE) != 0;
    if l.v2 {
        l.epoch = l.epoch.wrapping_add(1);
    }
    if ack {
        l.breaking = Some(Breaking { to, deadline });
    } else {
        l.state = to;
    }
    let h = holder?;
    Some(Break::Lease { connection: h.connection, key: l.id.1, epoch: l.epoch, from, to, ack })
}

/// Take the caching `take` from every lease on the file but `spared`,
/// with the acknowledgment such a break needs; nothing waits for it.
/// - A rename of the file by an open under lease `spared` takes Handle
///   (MS-FSA 2.1.5.14.11; smbtorture smb2.lease.v2_rename).
/// - A change in a directory (an entry created, overwritten, deleted or
///   renamed, a file in it closed after writing) takes everything from
///   the directory's leases, but the one the change was made under as
///   its parent lease key by the same client (MS-SMB2 3.3.5.9.11,
///   2.2.13.2.10 ParentLeaseKey; smbtorture smb2.lease.v2_request).
pub fn break_leases(entry: &mut FileEntry, spared: Option<&LeaseId>, take: u8, now: Instant, timeout: Duration) -> Vec<Break> {
    let holders = entry.lease_holders();
    let mut breaks = Vec::new();
    for (id, holder) in holders {
        if Some(&id) == spared {
            continue;
        }
        let Some(l) = entry.lease_mut(&id).filter(|l| l.state & take != 0 && l.breaking.is_none()) else { continue };
        let to = l.state & !take;
        breaks.extend(break_lease(l, holder, to, now + timeout));
    }
    breaks
}

/// The level a new open gets (the grant half of Samba's delay_for_oplock),
/// given the other opens of the file (the new one not among them). A
/// stat open of an existing file gets none.
pub fn grant(entry: &FileEntry, requested: u8, access: u32, directory: bool, existed: bool, overwritten: bool) -> u8 {
    if directory || !matches!(requested, level::II | level::EXCLUSIVE | level::BATCH) || (existed && is_stat_open(access)) {
        return level::NONE;
    }
    let mut granted = caching(requested);
    // No caching of reads on a file with byte-range locks (their holders
    // must see every read and write).
    if !overwritten && !entry.locks.is_empty() {
        granted &= !(READ | HANDLE);
    }
    if !is_stat_open(access) && write_denied(entry, None) {
        granted &= !WRITE;
    }
    // Handle caching under a lease rules out oplocks.
    if entry.leases.iter().any(|l| l.state & HANDLE != 0) {
        return level::NONE;
    }
    level_of(granted)
}

/// Write caching is only for the sole opener: no other open (outside
/// lease `own`) that holds an oplock or a lease, or reads or writes.
fn write_denied(entry: &FileEntry, own: Option<&LeaseId>) -> bool {
    entry
        .opens
        .iter()
        .filter(|o| own.is_none() || o.lease.as_ref() != own)
        .any(|o| o.lease.is_some() || o.oplock != level::NONE || o.breaking.is_some() || !is_stat_open(o.access))
}

/// The caching a new open under lease `own` gets (MS-SMB2 3.3.5.9.8 and
/// 3.3.5.9.11, as Samba grants it), given the file's other opens: on a
/// directory Read and Handle at most (a directory lease, with Read);
/// Write only for the sole opener; no Read or Handle on a file with
/// byte-range locks; no Handle beside an oplock; Write without Read,
/// and Write and Handle alone, are not granted.
pub fn grant_lease(entry: &FileEntry, own: &LeaseId, requested: u8, directory: bool, overwritten: bool) -> u8 {
    let mut granted = requested & (READ | WRITE | HANDLE);
    if directory {
        granted &= READ | HANDLE;
        return if granted & READ == 0 { 0 } else { granted };
    }
    if granted & (READ | WRITE) == 0 || granted == WRITE || granted == WRITE | HANDLE {
        return 0;
    }
    if !overwritten && !entry.locks.is_empty() {
        granted &= !(READ | HANDLE);
    }
    if write_denied(entry, Some(own)) {
        granted &= !WRITE;
    }
    if entry.opens.iter().any(|o| o.lease.is_none() && o.oplock != level::NONE) {
        granted &= !HANDLE;
    }
    granted
}

/// A lease break acknowledgment (MS-SMB2 3.3.5.22.2): the state kept.
pub fn acknowledge_lease(entry: &mut FileEntry, id: &LeaseId, acked: u8) -> Result<u8, smbq_wire::NtStatus> {
    use smbq_wire::NtStatus;
    let l = entry.lease_mut(id).ok_or(NtStatus::OBJECT_NAME_NOT_FOUND)?;
    // Samba answers an acknowledgment of no break UNSUCCESSFUL, and one
    // that keeps more than the break left REQUEST_NOT_ACCEPTED.
    let b = l.breaking.ok_or(NtStatus::UNSUCCESSFUL)?;
    if acked & !b.to != 0 {
        return Err(NtStatus::REQUEST_NOT_ACCEPTED);
    }
    l.breaking = None;
    l.state = acked;
    Ok(acked)
}

/// A write, a truncation or a byte-range lock breaks every level II
/// oplock of the file to none, the writer's own too, and every other
/// lease's Read caching, without waiting (MS-FSA 2.1.5.3, Samba's
/// contend_level2_oplocks; smbtorture smb2.oplock.batch1 expects the
/// self break). `writer` is the open writing.
pub fn contend_level2(entry: &mut FileEntry, writer: OpenOwner, now: Instant, timeout: Duration) -> Vec<Break> {
    let mut breaks = Vec::new();
    for o in entry.opens.iter_mut().filter(|o| o.lease.is_none() && o.oplock == level::II && o.breaking.is_none()) {
        o.oplock = level::NONE;
        breaks.push(Break::Oplock { owner: o.owner, level: level::NONE });
    }
    let own = entry.opens.iter().find(|o| o.owner == writer).and_then(|o| o.lease);
    let holders = entry.lease_holders();
    for (id, holder) in holders {
        let Some(l) = entry.lease_mut(&id).filter(|l| Some(l.id) != own && l.breaking.is_none()) else { continue };
        if l.state & READ != 0 && l.state & WRITE == 0 {
            breaks.extend(break_lease(l, holder, 0, now + timeout));
        }
    }
    breaks
}

/// An acknowledgment from `owner` that it now holds `acked` (MS-SMB2
/// 3.3.5.22.1): the level it is left with, or the status to fail with.
/// The waiters of the file are then to be woken.
pub fn acknowledge(entry: &mut FileEntry, owner: OpenOwner, acked: u8) -> Result<u8, smbq_wire::NtStatus> {
    use smbq_wire::NtStatus;
    let o = entry.open_mut(owner).ok_or(NtStatus::FILE_CLOSED)?;
    //= MS-SMB2 3.3.5.22.1
    //# If Open.OplockState is not Breaking, stop processing the
    //# acknowledgment, and send an error response with
    //# STATUS_INVALID_OPLOCK_PROTOCOL.
    let Some(b) = o.breaking else { return Err(NtStatus::INVALID_OPLOCK_PROTOCOL) };
    o.breaking = None;
    //# If the OplockLevel in the acknowledgment is greater than
    //# Open.OplockLevel [the level broken to], the server MUST set
    //# Open.OplockLevel to SMB2_OPLOCK_LEVEL_NONE [...] and fail with
    //# STATUS_INVALID_OPLOCK_PROTOCOL.
    let rank = |l: u8| caching(l).count_ones();
    if rank(acked) > rank(b.to) || !matches!(acked, level::NONE | level::II) {
        o.oplock = level::NONE;
        return Err(NtStatus::INVALID_OPLOCK_PROTOCOL);
    }
    o.oplock = acked;
    Ok(acked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::OpenRef;

    const RW: u32 = 0x3; // FILE_READ_DATA | FILE_WRITE_DATA
    const ALL_SHARE: u32 = 7;

    fn holder(volatile: u64, oplock: u8) -> OpenRef {
        OpenRef { oplock, ..OpenRef::new(OpenOwner { connection: 1, volatile }, RW, ALL_SHARE) }
    }

    fn entry(opens: Vec<OpenRef>) -> FileEntry {
        FileEntry { opens, ..FileEntry::default() }
    }

    const T: Duration = Duration::from_secs(35);

    fn brk_level(b: &Break) -> u8 {
        match b {
            Break::Oplock { level, .. } => *level,
            Break::Lease { to, .. } => *to,
        }
    }

    #[test]
    fn levels_and_caching() {
        for l in [level::NONE, level::II, level::EXCLUSIVE, level::BATCH] {
            assert_eq!(level_of(caching(l)), l);
        }
        assert_eq!(level_of(READ | HANDLE), level::II);
        assert_eq!(level_of(WRITE), level::NONE);
        assert!(is_stat_open(0x0010_0080));
        assert!(!is_stat_open(0x0010_0081));
        assert!(!is_stat_open(0));
    }

    #[test]
    fn batch_breaks_to_level_ii_and_the_open_waits() {
        let now = Instant::now();
        let mut e = entry(vec![holder(1, level::BATCH)]);
        let c = contend(&mut e, RW, None, false, false, now, T);
        assert_eq!(c.breaks, vec![Break::Oplock { owner: e.opens[0].owner, level: level::II }]);
        assert_eq!(c.wait, Some(now + T));
        assert_eq!(e.opens[0].breaking, Some(Breaking { to: level::II, deadline: now + T }));
        // Asked again while breaking: no second break, still waiting.
        let again = contend(&mut e, RW, None, false, false, now, T);
        assert_eq!(again, Contention { breaks: vec![], wait: Some(now + T) });
        // Acknowledged: the open goes on and gets level II at most.
        let owner = e.opens[0].owner;
        assert_eq!(acknowledge(&mut e, owner, level::II), Ok(level::II));
        assert_eq!(contend(&mut e, RW, None, false, false, now, T), Contention::default());
        assert_eq!(grant(&e, level::BATCH, RW, false, true, false), level::II);
    }

    #[test]
    fn overwrite_breaks_to_none_and_a_sharing_violation_breaks_handle_caching() {
        let now = Instant::now();
        let mut e = entry(vec![holder(1, level::BATCH)]);
        let c = contend(&mut e, RW, None, false, true, now, T);
        assert_eq!(brk_level(&c.breaks[0]), level::NONE);
        // An exclusive holder and a violating open: no break, no wait
        // (there is no handle caching to give up; smb2.oplock.exclusive1).
        let mut e = entry(vec![holder(1, level::EXCLUSIVE)]);
        assert_eq!(contend(&mut e, RW, None, true, false, now, T), Contention::default());
        // An overwrite breaks it to none.
        let c = contend(&mut e, RW, None, false, true, now, T);
        assert_eq!(brk_level(&c.breaks[0]), level::NONE);
        // A batch holder and a violating open: wait, it may close.
        let mut e = entry(vec![holder(1, level::BATCH)]);
        assert!(contend(&mut e, RW, None, true, false, now, T).wait.is_some());
    }

    #[test]
    fn level_ii_breaks_to_none_only_on_overwrite_and_without_ack() {
        let now = Instant::now();
        let mut e = entry(vec![holder(1, level::II)]);
        assert_eq!(contend(&mut e, RW, None, false, false, now, T), Contention::default());
        let c = contend(&mut e, RW, None, false, true, now, T);
        assert_eq!(c, Contention { breaks: vec![Break::Oplock { owner: e.opens[0].owner, level: level::NONE }], wait: None });
        assert_eq!(e.opens[0].oplock, level::NONE);
        let owner = e.opens[0].owner;
        assert_eq!(acknowledge(&mut e, owner, level::NONE), Err(smbq_wire::NtStatus::INVALID_OPLOCK_PROTOCOL));
    }

    #[test]
    fn stat_opens_break_nothing_and_timeouts_leave_no_oplock() {
        let now = Instant::now();
        let mut e = entry(vec![holder(1, level::BATCH)]);
        assert_eq!(contend(&mut e, 0x0010_0080, None, false, false, now, T), Contention::default());
        contend(&mut e, RW, None, false, false, now, T);
        let later = contend(&mut e, RW, None, false, false, now + T, T);
        assert_eq!(later, Contention::default());
        assert_eq!((e.opens[0].oplock, e.opens[0].breaking), (level::NONE, None));
    }

    #[test]
    fn grants() {
        let e = entry(vec![]);
        assert_eq!(grant(&e, level::BATCH, RW, false, false, false), level::BATCH);
        assert_eq!(grant(&e, level::EXCLUSIVE, RW, false, true, false), level::EXCLUSIVE);
        assert_eq!(grant(&e, level::BATCH, RW, true, false, false), level::NONE);
        assert_eq!(grant(&e, level::LEASE, RW, false, false, false), level::NONE);
        // A stat open of an existing file gets none (smb2.oplock.exclusive4).
        assert_eq!(grant(&e, level::BATCH, 0x0010_0180, false, true, false), level::NONE);
        let e = entry(vec![holder(1, level::NONE)]);
        assert_eq!(grant(&e, level::EXCLUSIVE, RW, false, true, false), level::II);
        let stat = OpenRef::new(OpenOwner { connection: 1, volatile: 2 }, 0x80, ALL_SHARE);
        assert_eq!(grant(&entry(vec![stat]), level::BATCH, RW, false, true, false), level::BATCH);
        let mut locked = entry(vec![]);
        locked.locks.push(crate::files::ByteLock { owner: OpenOwner { connection: 1, volatile: 3 }, offset: 0, length: 1, exclusive: true });
        assert_eq!(grant(&locked, level::BATCH, RW, false, true, false), level::NONE);
        assert_eq!(grant(&locked, level::BATCH, RW, false, true, true), level::BATCH, "an overwrite drops the locks' data");
    }

    #[test]
    fn an_overwriting_stat_open_counts_as_a_writer() {
        let now = Instant::now();
        let stat = 0x0010_0180;
        let mut e = entry(vec![holder(1, level::BATCH)]);
        assert_eq!(contend(&mut e, effective_access(stat, false), None, false, false, now, T), Contention::default());
        let c = contend(&mut e, effective_access(stat, true), None, false, true, now, T);
        assert_eq!(brk_level(&c.breaks[0]), level::NONE);
    }

    fn leased(volatile: u64, key: u8, state: u8) -> (OpenRef, crate::files::Lease) {
        let id = ([1; 16], [key; 16]);
        let open = OpenRef { lease: Some(id), ..OpenRef::new(OpenOwner { connection: volatile, volatile }, RW, ALL_SHARE) };
        let lease = crate::files::Lease { id, state, breaking: None, v2: true, epoch: 1, parent: None };
        (open, lease)
    }

    #[test]
    fn leases_break_with_acknowledgment_only_when_they_lose_write_or_handle() {
        let now = Instant::now();
        let (o1, l1) = leased(1, 1, READ | WRITE | HANDLE);
        let mut e = FileEntry { opens: vec![o1], leases: vec![l1], ..FileEntry::default() };
        // A plain open takes Write away: acknowledged, waited for.
        let c = contend(&mut e, RW, None, false, false, now, T);
        let expect = Break::Lease { connection: 1, key: [1; 16], epoch: 2, from: READ | WRITE | HANDLE, to: READ | HANDLE, ack: true };
        assert_eq!(c, Contention { breaks: vec![expect], wait: Some(now + T) });
        // Its own lease key does not contend with itself.
        let own = ([1; 16], [1; 16]);
        let (o2, _) = leased(2, 1, 0);
        let mut same = FileEntry { opens: vec![o2], leases: vec![leased(1, 1, READ | WRITE | HANDLE).1], ..FileEntry::default() };
        assert_eq!(contend(&mut same, RW, Some(&own), false, false, now, T), Contention::default());
        // Acknowledged below what the break left: refused; at it: taken.
        assert_eq!(acknowledge_lease(&mut e, &own, READ | WRITE), Err(smbq_wire::NtStatus::REQUEST_NOT_ACCEPTED));
        assert_eq!(acknowledge_lease(&mut e, &own, READ | HANDLE), Ok(READ | HANDLE));
        assert_eq!(acknowledge_lease(&mut e, &own, READ), Err(smbq_wire::NtStatus::UNSUCCESSFUL));
        // A rename by another open takes Handle away.
        let b = break_leases(&mut e, None, HANDLE, now, T);
        assert_eq!(b.len(), 1);
        assert!(matches!(b[0], Break::Lease { to: READ, ack: true, .. }));
        // A change in a directory breaks its leases to none, but the
        // one named as the parent lease key of the change.
        let (_, dir_lease) = leased(1, 1, READ | HANDLE);
        let (_, spared) = leased(1, 2, READ | HANDLE);
        let mut dir = FileEntry { opens: vec![leased(1, 1, 0).0, leased(2, 2, 0).0], leases: vec![dir_lease, spared.clone()], ..FileEntry::default() };
        let b = break_leases(&mut dir, Some(&spared.id), READ | HANDLE | WRITE, now, T);
        assert_eq!(b, vec![Break::Lease { connection: 1, key: [1; 16], epoch: 2, from: READ | HANDLE, to: 0, ack: true }]);
    }

    #[test]
    fn lease_grants_follow_samba() {
        let own = ([1; 16], [1; 16]);
        let e = FileEntry::default();
        assert_eq!(grant_lease(&e, &own, READ | WRITE | HANDLE, false, false), READ | WRITE | HANDLE);
        assert_eq!(grant_lease(&e, &own, WRITE, false, false), 0, "write alone is not granted");
        assert_eq!(grant_lease(&e, &own, WRITE | HANDLE, false, false), 0);
        // Directory leases: Read and Handle at most, and never without Read.
        assert_eq!(grant_lease(&e, &own, READ | WRITE | HANDLE, true, false), READ | HANDLE);
        assert_eq!(grant_lease(&e, &own, READ, true, false), READ);
        assert_eq!(grant_lease(&e, &own, HANDLE, true, false), 0);
        // Another open: no write caching; an oplock holder: no handle caching.
        let mut other = FileEntry { opens: vec![holder(9, level::II)], ..FileEntry::default() };
        assert_eq!(grant_lease(&other, &own, READ | WRITE | HANDLE, false, false), READ);
        other.opens[0].oplock = level::NONE;
        assert_eq!(grant_lease(&other, &own, READ | WRITE | HANDLE, false, false), READ | HANDLE);
        assert!(is_lease_stat_open(0x0002_0000) && is_lease_stat_open(0x0012_0080) && !is_lease_stat_open(0x0002_0001));
    }

    #[test]
    fn writes_break_every_level_ii_holder_the_writers_own_too() {
        let mut e = entry(vec![holder(1, level::II), holder(2, level::II), holder(3, level::NONE)]);
        let (a, b) = (e.opens[0].owner, e.opens[1].owner);
        let now = Instant::now();
        let expect = vec![Break::Oplock { owner: a, level: level::NONE }, Break::Oplock { owner: b, level: level::NONE }];
        assert_eq!(contend_level2(&mut e, a, now, T), expect);
        assert!(e.opens.iter().all(|o| o.oplock == level::NONE));
    }
}
