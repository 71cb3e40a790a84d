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
    /// For a named stream: its file's key and its folded name (its key
    /// in [`FileTable::streams`]).
    pub stream: Option<(u64, String)>,
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
