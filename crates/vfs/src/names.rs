//! Case-insensitive names on a POSIX tree.
//!
//! Windows file systems match names ignoring case and keep the case a name
//! was created with: an SMB open is case-insensitive (MS-FSA 2.1.5.1,
//! IsCaseInsensitive), and the volume reports FILE_CASE_PRESERVED_NAMES
//! (MS-FSCC 2.5.1). A Linux directory holds exact names, so a component
//! the exact lookup misses is looked up again by its folded form (see
//! [`fold`]) in a per-directory [`NameCache`]: the hash of the folded name
//! to the name on disk.
//!
//! The cache of a directory is built on first need by one readdir and kept
//! per directory, keyed by (device, inode):
//! - changes made through smbq (create, mkdir, unlink, rmdir, rename) are
//!   applied to it as they are made ([`Edit`]);
//! - changes made outside smbq are noticed by the directory's ctime and
//!   mtime (statx): a cache whose directory no longer has the times it saw
//!   is read again. Since Linux 6.13 (multigrain timestamps on ext4, xfs,
//!   btrfs, tmpfs) a change made after a statx gets a new ctime even within
//!   one clock tick; on older kernels a change within a tick of the last
//!   one can keep the times, so names seen while the directory's times
//!   were younger than [`TICK_SLACK`] are read once more when they are
//!   older (such a change is seen that much later). One window stays: a
//!   change made outside smbq between smbq's own change to a directory and
//!   its statx right after (microseconds) is seen only when the directory
//!   changes again. Exact names are never affected: they are looked up on
//!   disk first, the cache only answers names that are not there as given.
//!
//! Memory: each share's cache holds at most [`BUDGET`] bytes (estimated:
//! the names' lengths plus [`ENTRY_BYTES`] each); when full, the least
//! recently used directories are dropped. A directory whose names alone
//! exceed the budget is not kept: each lookup that misses there reads it
//! through (the one case with a scan per lookup).
//!
//! Not covered: two clients creating `a` and `A` in one directory at the
//! same moment can both succeed (the check and the create are two steps).

use crate::posix::{beneath, dev, fstatx, rel, statx_at};
use rustix::fs::{AtFlags, Dir, OFlags, Statx};
use rustix::io::Errno;
use std::collections::hash_map::{Entry, RandomState};
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash, Hasher};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Bytes of names one share's cache may hold (64 MiB: about 800,000 names
/// of 20 bytes).
const BUDGET: usize = 64 << 20;
/// What one cached name costs beyond its bytes: its hash-table slot and
/// the heap block of the name (an estimate).
const ENTRY_BYTES: usize = 64;
/// Directory times tick coarsely on kernels without multigrain timestamps
/// (a kernel clock tick, a few ms): names seen while the directory's ctime
/// or mtime was younger than this (20 ms) are read again once it is older.
const TICK_SLACK: Duration = Duration::from_millis(20);

/// The case-insensitive form of one character: its simple uppercase
/// mapping, as NTFS's upcase table maps one UTF-16 unit to one: characters
/// whose uppercase is several characters, such as `ß`, stay as they are.
pub fn fold(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_uppercase();
    }
    let mut up = c.to_uppercase();
    match (up.next(), up.next()) {
        (Some(u), None) => u,
        _ => c,
    }
}

/// Whether two names are equal ignoring case.
fn same_folded(a: &str, b: &str) -> bool {
    a.chars().map(fold).eq(b.chars().map(fold))
}

/// A directory's (device, inode).
type Key = (u64, u64);

/// What tells whether a directory changed: its ctime and mtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    ctime: (i64, u32),
    mtime: (i64, u32),
}

impl Stamp {
    fn of(x: &Statx) -> Stamp {
        Stamp {
            ctime: (x.stx_ctime.tv_sec, x.stx_ctime.tv_nsec),
            mtime: (x.stx_mtime.tv_sec, x.stx_mtime.tv_nsec),
        }
    }

    /// When names seen with these times must be read once more: `None`
    /// when the times are older than `now` by more than [`TICK_SLACK`]
    /// (a later change moves them even on a coarse clock), else the moment
    /// they will be.
    fn recheck(&self, now: SystemTime) -> Option<SystemTime> {
        let newest = self.ctime.max(self.mtime);
        let secs = u64::try_from(newest.0).ok()?;
        let t = UNIX_EPOCH + Duration::new(secs, newest.1.min(999_999_999)) + TICK_SLACK;
        (now < t).then_some(t)
    }
}

fn key(x: &Statx) -> Key {
    (dev(x), x.stx_ino)
}

fn cost(name: &str) -> usize {
    name.len() + ENTRY_BYTES
}

/// The names of one directory, by the hash of their folded form.
#[derive(Debug)]
struct DirNames {
    stamp: Stamp,
    /// From then on the names are read again on next use: `stamp` was too
    /// fresh to rule out a change within the same clock tick.
    recheck: Option<SystemTime>,
    names: HashMap<u64, Box<str>>,
    /// Names (with their folded hash) whose hash another name holds
    /// already: case variants made outside smbq (`a` and `A`), or a hash
    /// collision. Almost always empty.
    clashes: Vec<(u64, Box<str>)>,
    bytes: usize,
    /// When last used (a tick of [`Inner::tick`]).
    used: u64,
}

impl DirNames {
    fn new(stamp: Stamp, recheck: Option<SystemTime>) -> DirNames {
        DirNames { stamp, recheck, names: HashMap::new(), clashes: Vec::new(), bytes: 0, used: 0 }
    }

    /// A name equal to `name` ignoring case (`h`: its folded hash).
    fn get(&self, h: u64, name: &str) -> Option<&str> {
        self.names
            .get(&h)
            .into_iter()
            .chain(self.clashes.iter().filter(|(ch, _)| *ch == h).map(|(_, c)| c))
            .find(|n| same_folded(n, name))
            .map(|n| &**n)
    }

    fn insert(&mut self, h: u64, name: &str) {
        match self.names.entry(h) {
            Entry::Vacant(v) => {
                v.insert(name.into());
            }
            Entry::Occupied(o) if &**o.get() == name => return,
            Entry::Occupied(_) => {
                if self.clashes.iter().any(|(_, c)| &**c == name) {
                    return;
                }
                self.clashes.push((h, name.into()));
            }
        }
        self.bytes += cost(name);
    }

    fn remove(&mut self, h: u64, name: &str) {
        if self.names.get(&h).is_some_and(|n| &**n == name) {
            self.names.remove(&h);
            // A clash with the same hash takes the free slot.
            if let Some(i) = self.clashes.iter().position(|(ch, _)| *ch == h) {
                let (_, c) = self.clashes.swap_remove(i);
                self.names.insert(h, c);
            }
        } else if let Some(i) = self.clashes.iter().position(|(_, c)| &**c == name) {
            self.clashes.swap_remove(i);
        } else {
            return;
        }
        self.bytes -= cost(name);
    }
}

#[derive(Debug, Default)]
struct Inner {
    dirs: HashMap<Key, DirNames>,
    /// Directories by last use, oldest first.
    lru: BTreeMap<u64, Key>,
    tick: u64,
    bytes: usize,
}

impl Inner {
    fn touch(&mut self, k: Key) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(d) = self.dirs.get_mut(&k) {
            self.lru.remove(&d.used);
            d.used = tick;
            self.lru.insert(tick, k);
        }
    }

    fn drop_dir(&mut self, k: Key) {
        if let Some(d) = self.dirs.remove(&k) {
            self.lru.remove(&d.used);
            self.bytes -= d.bytes;
        }
    }

    /// Drop least recently used directories until the cache fits `budget`.
    fn fit(&mut self, budget: usize) {
        while self.bytes > budget {
            let Some((_, k)) = self.lru.pop_first() else { break };
            if let Some(d) = self.dirs.remove(&k) {
                self.bytes -= d.bytes;
            }
        }
    }
}

/// One share's name cache (see the module doc).
#[derive(Debug)]
pub(crate) struct NameCache {
    hasher: RandomState,
    budget: usize,
    inner: Mutex<Inner>,
}

impl Default for NameCache {
    fn default() -> NameCache {
        NameCache::with_budget(BUDGET)
    }
}

impl NameCache {
    /// A cache of at most `budget` bytes (see the module doc).
    pub(crate) fn with_budget(budget: usize) -> NameCache {
        NameCache { hasher: RandomState::new(), budget, inner: Mutex::default() }
    }

    /// The hash of `name`'s folded form (keyed per cache, so nobody can
    /// choose names that pile into one slot).
    fn hash(&self, name: &str) -> u64 {
        let mut h = self.hasher.build_hasher();
        for c in name.chars() {
            fold(c).hash(&mut h);
        }
        h.finish()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `comps` as the share holds them: each component that is not there
    /// as given but in another case replaced by its name on disk, up to the
    /// first component that is there in no case (it and the rest are kept
    /// as given, for the caller to create or to report missing). `None`
    /// when nothing changes. `root`: the share root; directories are
    /// opened beneath it as every lookup is (posix.rs).
    pub(crate) fn resolve(&self, root: BorrowedFd<'_>, comps: &[&str]) -> Option<Vec<String>> {
        let mut real: Vec<String> = Vec::with_capacity(comps.len());
        let mut changed = false;
        let mut dir: Option<OwnedFd> = None;
        for (i, &c) in comps.iter().enumerate() {
            let at = dir.as_ref().map_or(root, |d| d.as_fd());
            let name = match statx_at(at, c, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(_) => c.to_owned(),
                Err(Errno::NOENT) => match self.find(at, c) {
                    Ok(Some(n)) => n,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(name = c, error = %e, "case-insensitive lookup failed");
                        break;
                    }
                },
                Err(_) => break,
            };
            changed |= name != c;
            real.push(name);
            if i + 1 < comps.len() {
                match beneath(root, &rel(&real), OFlags::PATH | OFlags::DIRECTORY, 0) {
                    Ok(fd) => dir = Some(fd),
                    Err(_) => break,
                }
            }
        }
        if !changed {
            return None;
        }
        let rest = comps.get(real.len()..).unwrap_or_default();
        real.extend(rest.iter().map(|c| (*c).to_owned()));
        Some(real)
    }

    /// The name in `dir` equal to `name` ignoring case: from the cache
    /// while the directory has the times the cache saw, else from one
    /// readdir, which (re)builds the cache.
    fn find(&self, dir: BorrowedFd<'_>, name: &str) -> Result<Option<String>, Errno> {
        let x = fstatx(dir)?;
        let (k, stamp, h) = (key(&x), Stamp::of(&x), self.hash(name));
        let now = SystemTime::now();
        {
            let mut inner = self.lock();
            let fresh = |d: &&DirNames| d.stamp == stamp && d.recheck.is_none_or(|t| now < t);
            if let Some(d) = inner.dirs.get(&k).filter(fresh) {
                let found = d.get(h, name).map(str::to_owned);
                inner.touch(k);
                return Ok(found);
            }
        }
        let mut names = Some(DirNames::new(stamp, stamp.recheck(now)));
        let mut found = None;
        let mut entries = Dir::new(beneath(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY, 0)?)?;
        while let Some(e) = entries.read() {
            let e = e?;
            let Ok(n) = e.file_name().to_str() else { continue };
            if n == "." || n == ".." {
                continue;
            }
            let hn = self.hash(n);
            if found.is_none() && hn == h && same_folded(n, name) {
                found = Some(n.to_owned());
            }
            if let Some(d) = &mut names {
                d.insert(hn, n);
                if d.bytes > self.budget {
                    names = None;
                }
            }
        }
        let mut inner = self.lock();
        inner.drop_dir(k);
        if let Some(d) = names {
            inner.bytes += d.bytes;
            inner.dirs.insert(k, d);
            inner.touch(k);
            inner.fit(self.budget);
        }
        Ok(found)
    }
}

/// A change smbq makes to one directory: begun with [`edit`] before it is
/// made, recorded with [`Edit::added`] or [`Edit::removed`] after. The
/// cache takes it only if the directory had not changed otherwise since
/// the cache last saw it (else the cache of that directory is dropped).
pub(crate) struct Edit<'a> {
    cache: Option<&'a NameCache>,
    dir: BorrowedFd<'a>,
    before: Option<(Key, Stamp)>,
}

/// Begin a change to `dir` (nothing at all without a cache: a
/// case-sensitive share).
pub(crate) fn edit<'a>(cache: Option<&'a NameCache>, dir: BorrowedFd<'a>) -> Edit<'a> {
    let before = cache.and_then(|_| fstatx(dir).ok()).map(|x| (key(&x), Stamp::of(&x)));
    Edit { cache, dir, before }
}

impl Edit<'_> {
    /// `name` was created in the directory (or renamed into it).
    pub(crate) fn added(&self, name: &str) {
        self.apply(name, DirNames::insert);
    }

    /// `name` was removed from the directory (or renamed away).
    pub(crate) fn removed(&self, name: &str) {
        self.apply(name, DirNames::remove);
    }

    fn apply(&self, name: &str, change: fn(&mut DirNames, u64, &str)) {
        let Some(cache) = self.cache else { return };
        let after = fstatx(self.dir).ok();
        let Some(k) = self.before.map(|(k, _)| k).or(after.as_ref().map(key)) else { return };
        let h = cache.hash(name);
        let mut inner = cache.lock();
        let Some(d) = inner.dirs.get_mut(&k) else { return };
        let after = after.map(|x| Stamp::of(&x));
        // Current before the change, or already updated to after it by
        // the other half of a rename within one directory.
        let current = self.before.is_some_and(|(_, s)| s == d.stamp) || after == Some(d.stamp);
        match after.filter(|_| current) {
            Some(stamp) => {
                let was = d.bytes;
                change(d, h, name);
                d.stamp = stamp;
                d.recheck = stamp.recheck(SystemTime::now());
                let now = d.bytes;
                inner.bytes = inner.bytes - was + now;
                inner.fit(cache.budget);
            }
            None => inner.drop_dir(k),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::fs;

    #[test]
    fn fold_is_the_simple_uppercase_mapping() {
        assert_eq!(fold('a'), 'A');
        assert_eq!(fold('Z'), 'Z');
        assert_eq!(fold('.'), '.');
        assert_eq!(fold('ä'), 'Ä');
        assert_eq!(fold('\u{ff41}'), '\u{ff21}', "fullwidth a");
        assert_eq!(fold('ς'), 'Σ', "final sigma");
        assert_eq!(fold('ß'), 'ß', "no single-character uppercase");
        assert!(same_folded("Mixed.TXT", "mIXED.txt"));
        assert!(!same_folded("Straße", "STRASSE"));
        assert!(!same_folded("ab", "abc"));
    }

    fn stamp() -> Stamp {
        Stamp { ctime: (1, 0), mtime: (1, 0) }
    }

    #[test]
    fn case_variants_on_disk_share_a_slot() {
        let c = NameCache::default();
        let mut d = DirNames::new(stamp(), None);
        for n in ["readme", "README", "Other"] {
            d.insert(c.hash(n), n);
        }
        d.insert(c.hash("readme"), "readme");
        assert_eq!((d.names.len(), d.clashes.len()), (2, 1));
        assert_eq!(d.bytes, cost("readme") * 2 + cost("Other"));
        assert!(d.get(c.hash("ReadMe"), "ReadMe").is_some_and(|n| n.eq_ignore_ascii_case("readme")));
        // Removing the name in the slot promotes its variant.
        d.remove(c.hash("readme"), "readme");
        assert_eq!(d.get(c.hash("readme"), "readme"), Some("README"));
        assert!(d.clashes.is_empty());
        d.remove(c.hash("README"), "README");
        d.remove(c.hash("gone"), "gone");
        assert_eq!(d.get(c.hash("readme"), "readme"), None);
        assert_eq!(d.bytes, cost("Other"));
    }

    /// A tempdir with `files` in it and an O_PATH fd on it.
    fn dir_with(files: &[&str]) -> (tempfile::TempDir, OwnedFd) {
        let t = tempfile::tempdir().unwrap();
        for f in files {
            fs::write(t.path().join(f), b"").unwrap();
        }
        let fd = rustix::fs::open(t.path(), OFlags::PATH | OFlags::DIRECTORY, rustix::fs::Mode::empty()).unwrap();
        (t, fd)
    }

    #[test]
    fn lookups_are_answered_from_the_cache() {
        let c = NameCache::default();
        let (t, dir) = dir_with(&["Alpha", "Beta"]);
        // Times older than a tick: the names read are trusted.
        std::thread::sleep(TICK_SLACK + Duration::from_millis(5));
        assert_eq!(c.find(dir.as_fd(), "ALPHA").unwrap().as_deref(), Some("Alpha"));
        assert_eq!(c.find(dir.as_fd(), "gamma").unwrap(), None);
        // A name only the cache knows (the directory unchanged) is found:
        // the answer came from the cache, not from another readdir.
        let k = key(&fstatx(dir.as_fd()).unwrap());
        let h = c.hash("Planted");
        let mut inner = c.lock();
        inner.dirs.get_mut(&k).unwrap().insert(h, "Planted");
        inner.bytes += cost("Planted");
        drop(inner);
        assert_eq!(c.find(dir.as_fd(), "PLANTED").unwrap().as_deref(), Some("Planted"));
        // A change to the directory: read again.
        fs::write(t.path().join("Gamma"), b"").unwrap();
        assert_eq!(c.find(dir.as_fd(), "PLANTED").unwrap(), None);
        assert_eq!(c.find(dir.as_fd(), "gamma").unwrap().as_deref(), Some("Gamma"));
    }

    #[test]
    fn the_budget_drops_least_recently_used_directories() {
        let (_a, a) = dir_with(&["a1", "a2"]);
        let (_b, b) = dir_with(&["b1", "b2"]);
        let (_big, big) = dir_with(&["c1", "c2", "c3", "c4", "c5"]);
        let c = NameCache::with_budget(4 * cost("a1"));
        c.find(a.as_fd(), "A1").unwrap();
        c.find(b.as_fd(), "B1").unwrap();
        assert_eq!(c.lock().bytes, 4 * cost("a1"));
        // Using a again makes b the oldest: a third directory drops b.
        c.find(a.as_fd(), "A2").unwrap();
        let (_d, d) = dir_with(&["d1"]);
        c.find(d.as_fd(), "D1").unwrap();
        let cached = |fd: &OwnedFd| c.lock().dirs.contains_key(&key(&fstatx(fd.as_fd()).unwrap()));
        assert!(cached(&a) && cached(&d) && !cached(&b));
        assert!(c.lock().bytes <= 4 * cost("a1"));
        // A directory over the budget on its own is read through, not kept.
        assert_eq!(c.find(big.as_fd(), "C5").unwrap().as_deref(), Some("c5"));
        assert!(!cached(&big));
        assert!(cached(&a) && cached(&d));
    }

    #[test]
    fn times_within_a_tick_of_now_are_checked_again() {
        let now = SystemTime::now();
        let secs = now.duration_since(UNIX_EPOCH).unwrap().as_secs();
        let fresh = Stamp { ctime: (secs as i64, 0), mtime: (secs as i64 - 5, 0) };
        assert!(fresh.recheck(UNIX_EPOCH + Duration::from_secs(secs)).is_some());
        assert_eq!(fresh.recheck(UNIX_EPOCH + Duration::from_secs(secs + 1)), None);
        assert_eq!(stamp().recheck(now), None);
    }
}
