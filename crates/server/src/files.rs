//! The global open-file table (MS-SMB2 3.3.1.10 GlobalOpenTable, seen per
//! file): which opens hold a file with which access and share mode, whether
//! delete is pending, its byte-range locks and oplocks, and which
//! connections wait for a change to it.

use std::collections::HashMap;
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

    /// Note that connection `id` waits for a change to this file.
    pub fn wait(&mut self, id: u64) {
        if !self.waiters.contains(&id) {
            self.waiters.push(id);
        }
    }
}

/// Keyed by `FileStat::file_id` for files and directories. A named
/// stream has an entry of its own ([`FileTable::stream_key`]): its share
/// modes, oplocks, leases and locks are its own, as on NTFS, while
/// `FileStat::file_id` (what clients see) is its file's.
#[derive(Debug, Default)]
pub struct FileTable {
    pub files: HashMap<u64, FileEntry>,
    /// Which file each lease is on (a lease key names one file).
    pub leases: HashMap<LeaseId, u64>,
    /// The entry key of each open named stream, by its file's key and
    /// folded name.
    pub streams: HashMap<(u64, String), u64>,
}

impl FileTable {
    /// [`FileEntry::show_times`] of the file `st` is, if it is open.
    pub fn show_times(&self, st: &mut smbq_vfs::FileStat, now: Instant) {
        if let Some(e) = self.files.get(&st.file_id) {
            e.show_times(st, now);
        }
    }

    pub fn entry(&mut self, key: u64) -> &mut FileEntry {
        self.files.entry(key).or_default()
    }

    /// The entry key of named stream `name` of the file keyed `base`: the
    /// key of its open entry, else a new one taken by no open entry.
    /// A renamed stream keeps its key ([`FileTable::rename_stream`]).
    pub fn stream_key(&self, base: u64, name: &str) -> u64 {
        let folded = smbq_vfs::fold_stream_name(name);
        if let Some(&k) = self.streams.get(&(base, folded.clone())) {
            return k;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(&(base, &folded), &mut h);
        let mut k = std::hash::Hasher::finish(&h);
        while k == 0 || self.files.contains_key(&k) {
            k = k.wrapping_add(1);
        }
        k
    }

    /// The entry of a stream's new open, registered under its name.
    pub fn stream_entry(&mut self, key: u64, base: u64, name: &str) -> &mut FileEntry {
        let id = (base, smbq_vfs::fold_stream_name(name));
        self.streams.insert(id.clone(), key);
        let e = self.files.entry(key).or_default();
        e.stream = Some(id);
        e
    }

    /// A stream of file `base` was renamed to `name`: its entry is found
    /// by the new name.
    pub fn rename_stream(&mut self, key: u64, name: &str) {
        let Some(e) = self.files.get_mut(&key) else { return };
        let Some((base, old)) = e.stream.take() else { return };
        let id = (base, smbq_vfs::fold_stream_name(name));
        self.streams.remove(&(base, old));
        self.streams.insert(id.clone(), key);
        e.stream = Some(id);
    }

    /// The keys of the open streams of the file keyed `base`.
    pub fn open_streams(&self, base: u64) -> Vec<u64> {
        self.streams.iter().filter(|((b, _), _)| *b == base).map(|(_, &k)| k).collect()
    }

    /// The parent lease key the open `owner` of file `key` made its lease
    /// with, as the lease it names: (its ClientGuid, ParentLeaseKey).
    pub fn parent_lease(&mut self, key: u64, owner: OpenOwner) -> Option<LeaseId> {
        let e = self.files.get_mut(&key)?;
        let id = e.opens.iter().find(|o| o.owner == owner)?.lease?;
        e.lease_mut(&id)?.parent.map(|p| (id.0, p))
    }

    /// Drop an open and its locks; returns whether it was the last open
    /// (the entry is then removed) and the connections to wake.
    pub fn remove_open(&mut self, key: u64, owner: OpenOwner) -> (bool, Vec<u64>) {
        let Some(e) = self.files.get_mut(&key) else { return (true, Vec::new()) };
        let lease = e.opens.iter().find(|o| o.owner == owner).and_then(|o| o.lease);
        e.opens.retain(|o| o.owner != owner);
        e.locks.retain(|l| l.owner != owner);
        // A lease lives as long as an open made under it.
        if let Some(id) = lease.filter(|id| !e.opens.iter().any(|o| o.lease.as_ref() == Some(id))) {
            e.leases.retain(|l| l.id != id);
            self.leases.remove(&id);
        }
        let Some(e) = self.files.get_mut(&key) else { return (true, Vec::new()) };
        let waiters = std::mem::take(&mut e.waiters);
        if !e.opens.is_empty() {
            return (false, waiters);
        }
        // A file deleted while its streams are open stays, delete
        // pending, until they close (MS-FSA 2.1.5.4).
        if e.delete_pending && e.stream.is_none() && !self.open_streams(key).is_empty() {
            return (false, waiters);
        }
        if let Some(id) = self.files.remove(&key).and_then(|e| e.stream) {
            self.streams.remove(&id);
        }
        (true, waiters)
    }

    /// After the last open of a stream of file `base` closed: the file's
    /// path if its deletion waited for that (its entry is then gone).
    pub fn deferred_delete(&mut self, base: u64) -> Option<String> {
        let e = self.files.get(&base)?;
        if !(e.opens.is_empty() && e.delete_pending && self.open_streams(base).is_empty()) {
            return None;
        }
        self.files.remove(&base).map(|e| e.path)
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
