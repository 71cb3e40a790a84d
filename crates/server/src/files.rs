//! The global open-file table (MS-SMB2 3.3.1.10 GlobalOpenTable, seen per
//! file): which opens hold a file with which access and share mode, whether
//! delete is pending, its byte-range locks and oplocks, and which
//! connections wait for a change to it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Identifies one open server-wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpenOwner {
    pub connection: u64,
    pub volatile: u64,
}

#[derive(Clone, Debug)]
pub struct OpenRef {
    pub owner: OpenOwner,
    pub access: u32,
    pub share_access: u32,
    /// The oplock level it holds (MS-SMB2 2.2.13 OplockLevel).
    pub oplock: u8,
    /// A break sent and not yet acknowledged.
    pub breaking: Option<Breaking>,
    /// The lease it opened under (then `oplock` is unused).
    pub lease: Option<LeaseId>,
}

impl OpenRef {
    pub fn new(owner: OpenOwner, access: u32, share_access: u32) -> OpenRef {
        OpenRef { owner, access, share_access, oplock: 0, breaking: None, lease: None }
    }
}

/// A lease is the client's (ClientGuid) and named by its LeaseKey
/// (MS-SMB2 3.3.1.4 LeaseTable).
pub type LeaseId = ([u8; 16], [u8; 16]);

/// One lease on a file (MS-SMB2 3.3.1.13 Lease): the caching it grants
/// all the opens made under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub id: LeaseId,
    /// Read, Handle, Write caching (`oplock::READ` etc.).
    pub state: u8,
    pub breaking: Option<Breaking>,
    /// Version 2 (epochs, parent keys) or 1.
    pub v2: bool,
    pub epoch: u16,
    pub parent: Option<[u8; 16]>,
}

/// An oplock break in progress (MS-SMB2 3.3.1.10 Open.OplockState Breaking).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Breaking {
    /// The level the holder was told to break to.
    pub to: u8,
    /// When the server stops waiting for the acknowledgment
    /// (`limits.oplock_break_secs`, 35 s by default as on Windows).
    pub deadline: Instant,
}

#[derive(Clone, Debug)]
pub struct ByteLock {
    pub owner: OpenOwner,
    pub offset: u64,
    pub length: u64,
    pub exclusive: bool,
}

#[derive(Debug, Default)]
pub struct FileEntry {
    /// Its key in the [`FileTable`].
    pub key: u64,
    /// In the table; false once removed, for whoever waited on its lock.
    pub(crate) live: bool,
    /// The file's share-relative path as of its latest open or rename,
    /// whichever connection did it (delete-on-close unlinks this name).
    pub path: String,
    pub opens: Vec<OpenRef>,
    pub delete_pending: bool,
    pub locks: Vec<ByteLock>,
    /// The leases its opens were made under.
    pub leases: Vec<Lease>,
    /// Connections with a request blocked on this file (a byte-range
    /// lock, an open waiting for an oplock break): woken when an open
    /// closes, a lock goes or a break is acknowledged.
    pub waiters: Vec<u64>,
    /// The last write time clients see while the file is open, when it is
    /// not the file system's ([`WriteTime`]).
    pub write_time: Option<WriteTime>,
    /// For a named stream: its file's key and its folded name (its key
    /// in [`FileTable::streams`]).
    pub stream: Option<(u64, String)>,
}

/// How long after a write its new last write time shows (Windows and
/// Samba: 2 s).
pub const WRITE_TIME_DELAY: std::time::Duration = std::time::Duration::from_secs(2);

/// The last write time of an open file as Windows shows it (smbtorture
/// smb2.timestamps, run against Windows Server 2016 by Samba's authors):
/// a write leaves it as it was until a FLUSH, a SET_INFO of the size or
/// of FileBasicInformation, or 2 s pass; it then shows the time of that
/// update and stays there, whatever is written since, until a writing
/// handle closes: that sets it to the time of the close if there were
/// writes after the update (or the update was still pending), else leaves
/// the update's time. A time a client sets stays until the last close,
/// writes or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteTime {
    /// Written: `before` shows until `at` (FILETIME `at_time`).
    Pending { before: u64, at: Instant, at_time: u64 },
    /// Updated at `time`; `dirty` when written since.
    Updated { time: u64, dirty: bool },
    /// Set by a client.
    Set(u64),
}

impl WriteTime {
    pub fn shown(&self, now: Instant) -> u64 {
        match *self {
            WriteTime::Pending { before, at, .. } if now < at => before,
            WriteTime::Pending { at_time, .. } => at_time,
            WriteTime::Updated { time, .. } | WriteTime::Set(time) => time,
        }
    }

    /// The write time a writing handle's close leaves (`time`: now).
    pub fn at_close(&self, now: Instant, time: u64) -> u64 {
        match *self {
            WriteTime::Pending { at, .. } if now < at => time,
            WriteTime::Pending { at_time, .. } => at_time,
            WriteTime::Updated { dirty: true, .. } => time,
            WriteTime::Updated { time, .. } | WriteTime::Set(time) => time,
        }
    }
}


impl FileEntry {
    pub fn open_mut(&mut self, owner: OpenOwner) -> Option<&mut OpenRef> {
        self.opens.iter_mut().find(|o| o.owner == owner)
    }

    pub fn lease_mut(&mut self, id: &LeaseId) -> Option<&mut Lease> {
        self.leases.iter_mut().find(|l| &l.id == id)
    }

    /// A connection holding an open under lease `id` (where its breaks go).
    pub fn lease_holder(&self, id: &LeaseId) -> Option<OpenOwner> {
        self.opens.iter().find(|o| o.lease.as_ref() == Some(id)).map(|o| o.owner)
    }

    /// Every lease on the file with the open holding it (where its breaks
    /// go), taken out so the entry can be changed while they are gone through.
    pub fn lease_holders(&self) -> Vec<(LeaseId, Option<OpenOwner>)> {
        self.leases.iter().map(|l| (l.id, self.lease_holder(&l.id))).collect()
    }

    /// The open `old` now lives on another connection (a durable open
    /// parked or reclaimed): its share mode, oplock and locks follow it.
    pub fn reown(&mut self, old: OpenOwner, new: OpenOwner) {
        for o in self.opens.iter_mut().filter(|o| o.owner == old) {
            o.owner = new;
        }
        for l in self.locks.iter_mut().filter(|l| l.owner == old) {
            l.owner = new;
        }
    }

    /// A write: the first starts the delay ([`WriteTime`]); `before` is
    /// the file's last write time before it, `time` now as a FILETIME.
    pub fn written(&mut self, before: impl FnOnce() -> u64, now: Instant, time: u64) {
        self.write_time = match self.write_time {
            None => {
                let at_time = time + WRITE_TIME_DELAY.as_nanos() as u64 / 100;
                Some(WriteTime::Pending { before: before(), at: now + WRITE_TIME_DELAY, at_time })
            }
            Some(WriteTime::Pending { at, at_time, .. }) if now >= at => {
                Some(WriteTime::Updated { time: at_time, dirty: true })
            }
            Some(WriteTime::Updated { time, .. }) => Some(WriteTime::Updated { time, dirty: true }),
            w => w,
        };
    }

    /// A FLUSH or SET_INFO of the size or times: a pending update happens now.
    pub fn flush_write_time(&mut self, now: Instant, time: u64) {
        if matches!(self.write_time, Some(WriteTime::Pending { at, .. }) if now < at) {
            self.write_time = Some(WriteTime::Updated { time, dirty: false });
        }
    }

    /// Show what clients see of `st`'s write and change times.
    pub fn show_times(&self, st: &mut smbq_vfs::FileStat, now: Instant) {
        if let Some(w) = &self.write_time {
            st.last_write_time = w.shown(now);
            st.change_time = st.last_write_time;
        }
    }

    /// The parent lease key the open `owner` made its lease with, as the
    /// lease it names: (its ClientGuid, ParentLeaseKey).
    pub fn parent_lease(&mut self, owner: OpenOwner) -> Option<LeaseId> {
        let id = self.opens.iter().find(|o| o.owner == owner)?.lease?;
        self.lease_mut(&id)?.parent.map(|p| (id.0, p))
    }

    /// Note that connection `id` waits for a change to this file.
    pub fn wait(&mut self, id: u64) {
        if !self.waiters.contains(&id) {
            self.waiters.push(id);
        }
    }
}

/// A file's state, locked alone: [`FileTable::get`] and
/// [`FileTable::entry`] hand it out. An entry left with no open, no
/// byte-range lock, no waiter and no pending delete (a CREATE that failed
/// after locking the file) leaves the table when its lock does.
pub struct FileLock<'t> {
    table: &'t FileTable,
    entry: parking_lot::ArcMutexGuard<parking_lot::RawMutex, FileEntry>,
}

impl std::ops::Deref for FileLock<'_> {
    type Target = FileEntry;
    fn deref(&self) -> &FileEntry {
        &self.entry
    }
}

impl std::ops::DerefMut for FileLock<'_> {
    fn deref_mut(&mut self) -> &mut FileEntry {
        &mut self.entry
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        let e = &mut *self.entry;
        if e.live && e.opens.is_empty() && e.locks.is_empty() && e.waiters.is_empty() && !e.delete_pending {
            self.table.remove(e);
        }
    }
}

/// The open-file table: one [`FileEntry`] per open file, each behind its
/// own lock, and an index that finds them.
///
/// Keyed by `FileStat::file_id` (dev:inode) for files and directories. A
/// named stream has an entry of its own ([`FileTable::stream_key`]): its
/// share modes, oplocks, leases and locks are its own, as on NTFS, while
/// `FileStat::file_id` (what clients see) is its file's.
///
/// # Lock order
/// This is the one place that names it:
/// 1. a file's lock ([`FileLock`]), at most one at a time, but for a file
///    and then its named streams (a file's DELETE open checks them);
/// 2. the index, innermost: held only to find, add or remove an entry,
///    never while a file's lock is taken, never across a system call.
///
/// A file's lock may be held across system calls on that file (CREATE's
/// access checks, open and truncation), never across one that waits for
/// another file or another connection: requests on different files never
/// wait for each other.
#[derive(Default)]
pub struct FileTable {
    index: parking_lot::Mutex<Index>,
}

#[derive(Default)]
struct Index {
    files: HashMap<u64, Arc<parking_lot::Mutex<FileEntry>>>,
    /// Which file each lease is on (a lease key names one file).
    leases: HashMap<LeaseId, u64>,
    /// The entry key of each open named stream, by its file's key and
    /// folded name.
    streams: HashMap<(u64, String), u64>,
}

impl FileTable {
    /// File `key`'s entry, locked, if it has one.
    pub fn get(&self, key: u64) -> Option<FileLock<'_>> {
        loop {
            let slot = Arc::clone(self.index.lock().files.get(&key)?);
            let entry = slot.lock_arc();
            // Removed between the lookup and the lock: look again.
            if entry.live {
                return Some(FileLock { table: self, entry });
            }
        }
    }

    /// File `key`'s entry, locked, made if it has none.
    pub fn entry(&self, key: u64) -> FileLock<'_> {
        loop {
            let slot = Arc::clone(self.index.lock().files.entry(key).or_insert_with(|| {
                Arc::new(parking_lot::Mutex::new(FileEntry { key, live: true, ..FileEntry::default() }))
            }));
            let entry = slot.lock_arc();
            if entry.live {
                return FileLock { table: self, entry };
            }
        }
    }

    /// [`FileEntry::show_times`] of the file `st` is, if it is open.
    pub fn show_times(&self, st: &mut smbq_vfs::FileStat, now: Instant) {
        if let Some(e) = self.get(st.file_id) {
            e.show_times(st, now);
        }
    }

    /// Whether any open of any file is `pred`'s (each file locked in turn).
    pub fn any_open(&self, pred: impl Fn(&OpenRef) -> bool) -> bool {
        let slots: Vec<_> = self.index.lock().files.values().cloned().collect();
        slots.iter().any(|s| s.lock().opens.iter().any(&pred))
    }

    /// Whether any file has a lease.
    pub fn any_lease(&self) -> bool {
        !self.index.lock().leases.is_empty()
    }

    /// The file lease `id` is on.
    pub fn lease_file(&self, id: &LeaseId) -> Option<u64> {
        self.index.lock().leases.get(id).copied()
    }

    /// Lease `id` is on the file `e` holds.
    pub fn add_lease(&self, e: &FileEntry, id: LeaseId) {
        self.index.lock().leases.insert(id, e.key);
    }

    /// The entry key of named stream `name` of the file keyed `base`: the
    /// key of its open entry, else a new one taken by no open entry.
    /// A renamed stream keeps its key ([`FileTable::rename_stream`]).
    pub fn stream_key(&self, base: u64, name: &str) -> u64 {
        let folded = smbq_vfs::fold_stream_name(name);
        let index = self.index.lock();
        if let Some(&k) = index.streams.get(&(base, folded.clone())) {
            return k;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(&(base, &folded), &mut h);
        let mut k = std::hash::Hasher::finish(&h);
        while k == 0 || index.files.contains_key(&k) {
            k = k.wrapping_add(1);
        }
        k
    }

    /// The entry `e` is named stream `name` of the file keyed `base`.
    pub fn set_stream(&self, e: &mut FileEntry, base: u64, name: &str) {
        let id = (base, smbq_vfs::fold_stream_name(name));
        self.index.lock().streams.insert(id.clone(), e.key);
        e.stream = Some(id);
    }

    /// The stream `e` holds was renamed to `name`: its entry is found by
    /// the new name.
    pub fn rename_stream(&self, e: &mut FileEntry, name: &str) {
        let Some((base, old)) = e.stream.take() else { return };
        let id = (base, smbq_vfs::fold_stream_name(name));
        let mut index = self.index.lock();
        index.streams.remove(&(base, old));
        index.streams.insert(id.clone(), e.key);
        e.stream = Some(id);
    }

    /// The keys of the open streams of the file keyed `base`.
    pub fn open_streams(&self, base: u64) -> Vec<u64> {
        self.index.lock().streams.iter().filter(|((b, _), _)| *b == base).map(|(_, &k)| k).collect()
    }

    /// Drop open `owner` of the file `e` holds, and its locks; returns
    /// whether it was the last open (the entry is then removed) and the
    /// connections to wake.
    pub fn remove_open(&self, e: &mut FileEntry, owner: OpenOwner) -> (bool, Vec<u64>) {
        let lease = e.opens.iter().find(|o| o.owner == owner).and_then(|o| o.lease);
        e.opens.retain(|o| o.owner != owner);
        e.locks.retain(|l| l.owner != owner);
        // A lease lives as long as an open made under it.
        if let Some(id) = lease.filter(|id| !e.opens.iter().any(|o| o.lease.as_ref() == Some(id))) {
            e.leases.retain(|l| l.id != id);
            self.index.lock().leases.remove(&id);
        }
        let waiters = std::mem::take(&mut e.waiters);
        if !e.opens.is_empty() {
            return (false, waiters);
        }
        // A file deleted while its streams are open stays, delete
        // pending, until they close (MS-FSA 2.1.5.4).
        if e.delete_pending && e.stream.is_none() && !self.open_streams(e.key).is_empty() {
            return (false, waiters);
        }
        self.remove(e);
        (true, waiters)
    }

    /// Take the entry `e` holds out of the table.
    fn remove(&self, e: &mut FileEntry) {
        e.live = false;
        let mut index = self.index.lock();
        index.files.remove(&e.key);
        if let Some(id) = e.stream.take() {
            index.streams.remove(&id);
        }
    }

    /// After the last open of a stream of file `base` closed: the file's
    /// path if its deletion waited for that (its entry is then gone).
    pub fn deferred_delete(&self, base: u64) -> Option<String> {
        let mut e = self.get(base)?;
        if !(e.opens.is_empty() && e.delete_pending && self.open_streams(base).is_empty()) {
            return None;
        }
        self.remove(&mut e);
        Some(std::mem::take(&mut e.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// smbtorture smb2.timestamps' delayed-write cases, as a timeline.
    #[test]
    fn write_time_shows_late_and_stays() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let ft = |secs: u64| 1_000_000_000 + secs * 10_000_000;
        let mut e = FileEntry::default();
        // delayed-2write: the first write shows 2 s later; a second does not.
        e.written(|| 7, s(1), ft(1));
        assert_eq!(e.write_time.map(|w| w.shown(s(2))), Some(7), "not yet");
        assert_eq!(e.write_time.map(|w| w.shown(s(4))), Some(ft(3)), "2 s after the write");
        e.written(|| unreachable!(), s(4), ft(4));
        assert_eq!(e.write_time.map(|w| w.shown(s(7))), Some(ft(3)));
        // ... and the close sets the time of the close.
        assert_eq!(e.write_time.map(|w| w.at_close(s(9), ft(9))), Some(ft(9)));
        // delayed-1write: no write after the update: the close keeps it.
        let mut e = FileEntry::default();
        e.written(|| 7, s(1), ft(1));
        assert_eq!(e.write_time.map(|w| w.at_close(s(5), ft(5))), Some(ft(3)));
        // delayed-write-vs-flush: a flush updates at once, the close keeps it.
        let mut e = FileEntry::default();
        e.written(|| 7, s(1), ft(1));
        e.flush_write_time(s(1), ft(1));
        assert_eq!(e.write_time.map(|w| (w.shown(s(1)), w.at_close(s(3), ft(3)))), Some((ft(1), ft(1))));
        // A close within the delay updates to the close; a time set stays.
        let mut e = FileEntry::default();
        e.written(|| 7, s(1), ft(1));
        assert_eq!(e.write_time.map(|w| w.at_close(s(2), ft(2))), Some(ft(2)));
        e.write_time = Some(WriteTime::Set(5));
        e.written(|| unreachable!(), s(3), ft(3));
        assert_eq!(e.write_time.map(|w| (w.shown(s(9)), w.at_close(s(9), ft(9)))), Some((5, 5)));
    }
}
