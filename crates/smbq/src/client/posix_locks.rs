//! POSIX record locks (fcntl F_SETLK, F_GETLK) held as SMB2 byte-range
//! locks (MS-SMB2 2.2.26) on one handle, without I/O: the mount drives a
//! [`Table`] with a [`Server`] that sends the LOCKs.
//!
//! The two kinds of lock disagree, and the table bridges them:
//!
//! - a POSIX lock owner (a process) replaces what it holds on a range:
//!   locking over its own lock changes its type, unlocking part of a lock
//!   keeps the rest. SMB unlocks only a range exactly as it was locked,
//!   and an exclusive lock conflicts with every overlapping lock, the same
//!   handle's included (MS-FSA 2.1.5.7; a shared lock may stack on the
//!   handle's own exclusive one). So each lock we hold on the server is
//!   one [`Held`] entry; a change unlocks the entries it touches and locks
//!   what is left of them again. Where SMB allows it the new lock is taken
//!   before the old one goes (a shared lock, a downgrade, a shared lock
//!   cut in two), which is atomic; an upgrade or a cut through an
//!   exclusive lock unlocks first, and the server may give the gap to
//!   someone else before we lock again (then the part that could not be
//!   taken back is logged and forgotten);
//! - POSIX locks of different owners on one handle must conflict, the
//!   server does not see them: the table checks them itself;
//! - SMB has no test for a lock: [`Table::test`] takes a
//!   FAIL_IMMEDIATELY lock and unlocks it, and where the owner holds locks
//!   of its own it does not look (it would conflict with itself).

use fuser::Errno;

/// FUSE's end of a lock "to the end of file": OFFSET_MAX.
pub const OFFSET_MAX: u64 = i64::MAX as u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// F_RDLCK, SMB2_LOCKFLAG_SHARED_LOCK.
    Shared,
    /// F_WRLCK, SMB2_LOCKFLAG_EXCLUSIVE_LOCK.
    Exclusive,
}

/// Bytes `[start, stop)`; `stop` is `u64::MAX` for "to the end of file",
/// whose SMB length is then `u64::MAX - start` (the last byte lockable is
/// 2^64 - 2: MS-SMB2 3.3.5.14 refuses a range past 2^64 - 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub start: u64,
    pub stop: u64,
}

impl Range {
    /// FUSE's inclusive `start..=end` (end OFFSET_MAX: to the end of file).
    pub fn from_fuse(start: u64, end: u64) -> Option<Range> {
        let stop = if end >= OFFSET_MAX { u64::MAX } else { end + 1 };
        (start < stop).then_some(Range { start, stop })
    }

    /// Back to FUSE's inclusive end.
    pub fn fuse_end(&self) -> u64 {
        if self.stop == u64::MAX {
            OFFSET_MAX
        } else {
            self.stop - 1
        }
    }

    pub fn len(&self) -> u64 {
        self.stop - self.start
    }

    fn overlaps(&self, o: &Range) -> bool {
        self.start < o.stop && o.start < self.stop
    }

    fn contains(&self, o: &Range) -> bool {
        self.start <= o.start && o.stop <= self.stop
    }

    /// What is left of `self` outside `cut`: up to two pieces.
    fn minus(&self, cut: &Range) -> Vec<Range> {
        let mut v = Vec::new();
        if self.start < cut.start {
            v.push(Range { start: self.start, stop: cut.start.min(self.stop) });
        }
        if cut.stop < self.stop {
            v.push(Range { start: cut.stop.max(self.start), stop: self.stop });
        }
        v
    }
}

/// One lock we hold on the server through this handle, for `owner`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub owner: u64,
    pub pid: u32,
    pub range: Range,
    pub kind: Kind,
}

/// Why a LOCK did not go through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Someone holds a conflicting lock (STATUS_LOCK_NOT_GRANTED,
    /// STATUS_FILE_LOCK_CONFLICT): EAGAIN.
    Conflict,
    /// Anything else, as the errno to give.
    Failed(Errno),
}

/// SMB2 LOCKs on the handle, one element each, with FAIL_IMMEDIATELY.
pub trait Server {
    fn lock(&mut self, r: Range, kind: Kind) -> Result<(), Refused>;
    fn unlock(&mut self, r: Range) -> Result<(), Refused>;
}

/// A conflicting lock as F_GETLK reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conflicting {
    pub range: Range,
    pub kind: Kind,
    pub pid: u32,
}

/// The locks held through one handle.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub held: Vec<Held>,
}

impl Table {
    /// Another owner's lock on this handle that `kind` on `r` conflicts with.
    fn local_conflict(&self, owner: u64, r: &Range, kind: Kind) -> Option<&Held> {
        self.held.iter().find(|h| h.owner != owner && h.range.overlaps(r) && (kind == Kind::Exclusive || h.kind == Kind::Exclusive))
    }

    /// F_SETLK for `owner`: `kind` on `r`, or unlock it (None). On a
    /// conflict nothing changed, or what could not be locked again is gone.
    pub fn set(&mut self, s: &mut impl Server, owner: u64, pid: u32, r: Range, kind: Option<Kind>) -> Result<(), Refused> {
        if let Some(k) = kind {
            if self.local_conflict(owner, &r, k).is_some() {
                return Err(Refused::Conflict);
            }
            if self.held.iter().any(|h| h.owner == owner && h.kind == k && h.range.contains(&r)) {
                return Ok(());
            }
        }
        let (old, keep): (Vec<Held>, Vec<Held>) = self.held.drain(..).partition(|h| h.owner == owner && h.range.overlaps(&r));
        self.held = keep;
        let new = kind.map(|kind| Held { owner, pid, range: r, kind });
        match new {
            Some(n) if n.kind == Kind::Exclusive => {
                // The server would see our own overlapping locks as conflicts.
                for h in &old {
                    s.unlock(h.range)?;
                }
                if let Err(e) = s.lock(r, Kind::Exclusive) {
                    for h in old {
                        self.relock(s, h);
                    }
                    return Err(e);
                }
                self.held.push(n);
                for h in old {
                    for piece in h.range.minus(&r) {
                        self.relock(s, Held { range: piece, ..h });
                    }
                }
            }
            _ => {
                if let Some(n) = new {
                    if let Err(e) = s.lock(r, Kind::Shared) {
                        self.held.extend(old);
                        return Err(e);
                    }
                    self.held.push(n);
                }
                for h in old {
                    let rest = h.range.minus(&r);
                    if h.kind == Kind::Shared {
                        // Stacks on the lock it replaces: no gap.
                        for piece in rest {
                            self.relock(s, Held { range: piece, ..h });
                        }
                        s.unlock(h.range)?;
                    } else {
                        s.unlock(h.range)?;
                        for piece in rest {
                            self.relock(s, Held { range: piece, ..h });
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Lock `h` (a piece of what we held) again, or log that it is lost.
    fn relock(&mut self, s: &mut impl Server, h: Held) {
        match s.lock(h.range, h.kind) {
            Ok(()) => self.held.push(h),
            Err(e) => tracing::warn!(start = h.range.start, stop = h.range.stop, "a lock given up to change it could not be taken again ({e:?}): it is lost"),
        }
    }

    /// F_GETLK for `owner`: a lock that would stop `kind` on `r`. The
    /// server's locks show as exclusive (SMB does not say), pid 0.
    pub fn test(&self, s: &mut impl Server, owner: u64, r: Range, kind: Kind) -> Result<Option<Conflicting>, Refused> {
        if let Some(h) = self.local_conflict(owner, &r, kind) {
            return Ok(Some(Conflicting { range: h.range, kind: h.kind, pid: h.pid }));
        }
        let mut gaps = vec![r];
        for h in self.held.iter().filter(|h| h.owner == owner) {
            gaps = gaps.iter().flat_map(|g| if g.overlaps(&h.range) { g.minus(&h.range) } else { vec![*g] }).collect();
        }
        for g in gaps {
            match s.lock(g, kind) {
                Ok(()) => s.unlock(g)?,
                Err(Refused::Conflict) => return Ok(Some(Conflicting { range: g, kind: Kind::Exclusive, pid: 0 })),
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Everything `owner` holds, unlocked (its last descriptor of the file closed).
    pub fn release_owner(&mut self, s: &mut impl Server, owner: u64) -> Result<(), Refused> {
        let (mine, keep): (Vec<Held>, Vec<Held>) = self.held.drain(..).partition(|h| h.owner == owner);
        self.held = keep;
        let mut r = Ok(());
        for h in mine {
            r = r.and(s.unlock(h.range));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server with the rules of MS-FSA 2.1.5.7 as Windows applies them,
    /// for two handles: 0 (ours) and 1 (someone else's).
    #[derive(Default)]
    struct Fake {
        locks: Vec<(u8, Range, Kind)>,
        handle: u8,
        sent: usize,
    }

    impl Server for Fake {
        fn lock(&mut self, r: Range, kind: Kind) -> Result<(), Refused> {
            self.sent += 1;
            let h = self.handle;
            if self.locks.iter().any(|(o, l, k)| l.overlaps(&r) && (kind == Kind::Exclusive || (*k == Kind::Exclusive && *o != h))) {
                return Err(Refused::Conflict);
            }
            self.locks.push((h, r, kind));
            Ok(())
        }

        fn unlock(&mut self, r: Range) -> Result<(), Refused> {
            self.sent += 1;
            let h = self.handle;
            let i = self.locks.iter().position(|(o, l, k)| *o == h && *l == r && *k == Kind::Exclusive).or_else(|| self.locks.iter().position(|(o, l, _)| *o == h && *l == r));
            let i = i.ok_or(Refused::Failed(Errno::EINVAL))?;
            self.locks.remove(i);
            Ok(())
        }
    }

    fn r(start: u64, stop: u64) -> Range {
        Range { start, stop }
    }

    /// Ours on the server, sorted, as (start, stop, exclusive).
    fn ours(f: &Fake) -> Vec<(u64, u64, bool)> {
        let mut v: Vec<_> = f.locks.iter().filter(|l| l.0 == 0).map(|(_, l, k)| (l.start, l.stop, *k == Kind::Exclusive)).collect();
        v.sort();
        v
    }

    fn table(t: &Table) -> Vec<(u64, u64, bool)> {
        let mut v: Vec<_> = t.held.iter().map(|h| (h.range.start, h.range.stop, h.kind == Kind::Exclusive)).collect();
        v.sort();
        v
    }

    #[test]
    fn fuse_ranges() {
        assert_eq!(Range::from_fuse(0, OFFSET_MAX), Some(r(0, u64::MAX)));
        assert_eq!(Range::from_fuse(10, OFFSET_MAX).map(|x| x.len()), Some(u64::MAX - 10));
        assert_eq!(Range::from_fuse(0, 99), Some(r(0, 100)));
        assert_eq!(Range::from_fuse(5, 4), None);
        assert_eq!(r(0, u64::MAX).fuse_end(), OFFSET_MAX);
        assert_eq!(r(0, 100).fuse_end(), 99);
    }

    #[test]
    fn unlocking_a_middle_keeps_both_ends() {
        let (mut f, mut t) = (Fake::default(), Table::default());
        t.set(&mut f, 1, 0, r(0, 100), Some(Kind::Exclusive)).unwrap();
        t.set(&mut f, 1, 0, r(40, 60), None).unwrap();
        assert_eq!(ours(&f), [(0, 40, true), (60, 100, true)]);
        assert_eq!(table(&t), ours(&f));
        t.set(&mut f, 1, 0, r(0, 1000), None).unwrap();
        assert!(f.locks.is_empty() && t.held.is_empty());
    }

    #[test]
    fn sqlite_pattern_upgrade_and_downgrade() {
        let (mut f, mut t) = (Fake::default(), Table::default());
        // SHARED: pending byte read-locked, shared range, pending unlocked.
        t.set(&mut f, 1, 0, r(1000, 1001), Some(Kind::Shared)).unwrap();
        t.set(&mut f, 1, 0, r(1002, 1512), Some(Kind::Shared)).unwrap();
        t.set(&mut f, 1, 0, r(1000, 1001), None).unwrap();
        // RESERVED, PENDING, EXCLUSIVE (an upgrade of the shared range).
        t.set(&mut f, 1, 0, r(1001, 1002), Some(Kind::Exclusive)).unwrap();
        t.set(&mut f, 1, 0, r(1000, 1001), Some(Kind::Exclusive)).unwrap();
        t.set(&mut f, 1, 0, r(1002, 1512), Some(Kind::Exclusive)).unwrap();
        assert_eq!(ours(&f), [(1000, 1001, true), (1001, 1002, true), (1002, 1512, true)]);
        // Back to SHARED: a downgrade, then one unlock over two locks.
        let before = f.sent;
        t.set(&mut f, 1, 0, r(1002, 1512), Some(Kind::Shared)).unwrap();
        assert_eq!(f.sent - before, 2, "shared taken, then exclusive dropped");
        t.set(&mut f, 1, 0, r(1000, 1002), None).unwrap();
        assert_eq!(ours(&f), [(1002, 1512, false)]);
        // Taking it again changes nothing on the server.
        let before = f.sent;
        t.set(&mut f, 1, 0, r(1100, 1200), Some(Kind::Shared)).unwrap();
        assert_eq!(f.sent, before);
        assert_eq!(table(&t), ours(&f));
    }

    #[test]
    fn a_failed_upgrade_keeps_the_shared_lock() {
        let (mut f, mut t) = (Fake::default(), Table::default());
        t.set(&mut f, 1, 0, r(0, 10), Some(Kind::Shared)).unwrap();
        f.handle = 1;
        f.lock(r(5, 6), Kind::Shared).unwrap();
        f.handle = 0;
        assert_eq!(t.set(&mut f, 1, 0, r(0, 10), Some(Kind::Exclusive)), Err(Refused::Conflict));
        assert_eq!(ours(&f), [(0, 10, false)]);
        assert_eq!(table(&t), ours(&f));
    }

    #[test]
    fn owners_on_one_handle_conflict_here() {
        let (mut f, mut t) = (Fake::default(), Table::default());
        t.set(&mut f, 1, 7, r(0, 10), Some(Kind::Exclusive)).unwrap();
        // The server would grant a shared lock on top (same handle).
        assert_eq!(t.set(&mut f, 2, 8, r(5, 6), Some(Kind::Shared)), Err(Refused::Conflict));
        let c = t.test(&mut f, 2, r(5, 6), Kind::Shared).unwrap();
        assert_eq!(c, Some(Conflicting { range: r(0, 10), kind: Kind::Exclusive, pid: 7 }));
        // The owner itself sees no conflict, and nothing is sent for it.
        let before = f.sent;
        assert_eq!(t.test(&mut f, 1, r(0, 10), Kind::Exclusive), Ok(None));
        assert_eq!(f.sent, before);
        t.release_owner(&mut f, 1).unwrap();
        t.set(&mut f, 2, 8, r(5, 6), Some(Kind::Shared)).unwrap();
        t.set(&mut f, 3, 9, r(0, 10), Some(Kind::Shared)).unwrap();
        assert_eq!(ours(&f), [(0, 10, false), (5, 6, false)]);
    }

    #[test]
    fn test_finds_other_handles_locks() {
        let (mut f, t) = (Fake::default(), Table::default());
        f.handle = 1;
        f.lock(r(0, 100), Kind::Exclusive).unwrap();
        f.handle = 0;
        assert_eq!(t.test(&mut f, 1, r(50, 61), Kind::Exclusive).unwrap().map(|c| c.range), Some(r(50, 61)));
        assert_eq!(t.test(&mut f, 1, r(100, 200), Kind::Exclusive), Ok(None));
        assert!(ours(&f).is_empty(), "the test lock went again");
    }
}
