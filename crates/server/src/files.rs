//! The global open-file table (MS-SMB2 3.3.1.10 GlobalOpenTable, seen per
//! file): which opens hold a file with which access and share mode, whether
//! delete is pending, and its byte-range locks.

use std::collections::HashMap;

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
}

/// Keyed by `FileStat::file_id`.
#[derive(Debug, Default)]
pub struct FileTable {
    pub files: HashMap<u64, FileEntry>,
}

impl FileTable {
    pub fn entry(&mut self, key: u64) -> &mut FileEntry {
        self.files.entry(key).or_default()
    }

    /// Drop an open and its locks; returns true if it was the last open
    /// (the entry is then removed).
    pub fn remove_open(&mut self, key: u64, owner: OpenOwner) -> bool {
        let Some(e) = self.files.get_mut(&key) else { return true };
        e.opens.retain(|o| o.owner != owner);
        e.locks.retain(|l| l.owner != owner);
        if e.opens.is_empty() {
            self.files.remove(&key);
            true
        } else {
            false
        }
    }
}
