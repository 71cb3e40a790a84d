//! Share-confined file system access for the SMB server.
//!
//! [`PosixFs`] holds a directory fd for the share root; every path an SMB
//! client names is resolved beneath it with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS)`, and every operation on a name (create, mkdir,
//! unlink, rename) works on an fd of the parent directory opened that way,
//! so `..`, absolute paths and symlinks cannot leave the share.
//!
//! Paths come in SMB form: relative to the share, components separated by
//! `\`, no leading separator (the server strips one). An empty path is the
//! share root. [`check_name`] rejects what can never name a file here
//! (`:` streams, `\\?\` prefixes, wildcards, NUL, `..` components).
//!
//! Errors are [`FsError`], which maps to the NTSTATUS MS-SMB2/MS-FSCC name.

use smbq_wire::NtStatus;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

mod error;
mod posix;

pub use error::FsError;

/// CreateDisposition (MS-SMB2 2.2.13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    Supersede,
    Open,
    Create,
    OpenIf,
    Overwrite,
    OverwriteIf,
}

/// What the caller requires the object to be (FILE_DIRECTORY_FILE /
/// FILE_NON_DIRECTORY_FILE create options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Any,
    Directory,
    NonDirectory,
}

#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    pub disposition: Disposition,
    pub kind: Kind,
    /// Open for reading data (otherwise an O_PATH-like metadata open is fine).
    pub read: bool,
    /// Open for writing data / changing size.
    pub write: bool,
}

/// CreateAction reported back to the client (MS-SMB2 2.2.14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateAction {
    Superseded = 0,
    Opened = 1,
    Created = 2,
    Overwritten = 3,
}

/// File metadata in SMB terms. Times are FILETIME (100 ns since 1601).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileStat {
    /// Stable per file: derived from (st_dev, st_ino).
    pub file_id: u64,
    pub size: u64,
    pub allocation_size: u64,
    pub creation_time: u64,
    pub last_access_time: u64,
    pub last_write_time: u64,
    pub change_time: u64,
    /// FILE_ATTRIBUTE_* (MS-FSCC 2.6): DIRECTORY, ARCHIVE or NORMAL,
    /// READONLY when the owner has no write permission.
    pub attributes: u32,
    pub nlink: u32,
    pub is_dir: bool,
}

/// One directory entry, with its metadata. `.` and `..` are included first
/// for every directory (including the share root), as Windows does.
#[derive(Clone, Debug)]
pub struct DirEntry {
    pub name: String,
    pub stat: FileStat,
}

/// Volume information for FileFsSize/FullSize/Volume queries.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsStat {
    pub total_blocks: u64,
    pub free_blocks: u64,
    pub avail_blocks: u64,
    pub block_size: u64,
    pub max_name_len: u32,
    /// Stable volume serial number derived from st_dev of the share root.
    pub serial: u32,
}

/// Time changes for SET_INFO FileBasicInformation: `None` leaves a time
/// unchanged (the client sent 0 or -1).
#[derive(Clone, Copy, Debug, Default)]
pub struct SetTimes {
    pub last_access_time: Option<u64>,
    pub last_write_time: Option<u64>,
}

/// A share root on a POSIX file system.
#[derive(Debug)]
pub struct PosixFs {
    root: Arc<OwnedFd>,
    read_only: bool,
}

/// An open file or directory. Holds the fd and the share-relative path it
/// was opened by (kept current across renames by the server).
#[derive(Debug)]
pub struct Handle {
    fd: OwnedFd,
    pub path: String,
    pub is_dir: bool,
    /// The share root, to resolve symlinks and `..` in [`Handle::read_dir`].
    root: Arc<OwnedFd>,
    read_only: bool,
}

impl PosixFs {
    /// Open (not create) the share root directory.
    pub fn new(root: &Path, read_only: bool) -> Result<PosixFs, FsError> {
        posix::new(root, read_only)
    }

    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Open or create `path` per `opts`. Overwrite/supersede truncate.
    pub fn open(&self, path: &str, opts: &OpenOptions) -> Result<(Handle, CreateAction), FsError> {
        posix::open(self, path, opts)
    }

    pub fn stat_path(&self, path: &str) -> Result<FileStat, FsError> {
        posix::stat_path(self, path)
    }

    /// Remove the file or empty directory `path` (delete-on-close).
    pub fn unlink(&self, path: &str, is_dir: bool) -> Result<(), FsError> {
        posix::unlink(self, path, is_dir)
    }

    /// Rename `from` to `to`, both share-relative. Without `replace`, an
    /// existing target is OBJECT_NAME_COLLISION.
    pub fn rename(&self, from: &str, to: &str, replace: bool) -> Result<(), FsError> {
        posix::rename(self, from, to, replace)
    }

    pub fn stat_fs(&self) -> Result<FsStat, FsError> {
        posix::stat_fs(self)
    }
}

impl Handle {
    pub fn stat(&self) -> Result<FileStat, FsError> {
        posix::fstat(self)
    }
    /// Read up to `buf.len()` bytes at `offset`; returns bytes read (0 at EOF).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, FsError> {
        posix::read_at(self, buf, offset)
    }
    /// Write all of `buf` at `offset`.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), FsError> {
        posix::write_at(self, buf, offset)
    }
    pub fn set_len(&self, len: u64) -> Result<(), FsError> {
        posix::set_len(self, len)
    }
    /// Preallocate (FileAllocationInformation); shrinking below the size truncates.
    pub fn set_allocation(&self, len: u64) -> Result<(), FsError> {
        posix::set_allocation(self, len)
    }
    pub fn set_times(&self, t: &SetTimes) -> Result<(), FsError> {
        posix::set_times(self, t)
    }
    /// Set or clear FILE_ATTRIBUTE_READONLY (owner write bit).
    pub fn set_readonly(&self, ro: bool) -> Result<(), FsError> {
        posix::set_readonly(self, ro)
    }
    pub fn sync(&self) -> Result<(), FsError> {
        posix::sync(self)
    }
    /// All entries of this directory, `.` and `..` first, then sorted by name.
    pub fn read_dir(&self) -> Result<Vec<DirEntry>, FsError> {
        posix::read_dir(self)
    }
}

/// Reject names that can never be a file in a share (MS-FSCC 2.1.5 rules
/// as Windows applies them, plus what would escape a POSIX tree).
pub fn check_name(path: &str) -> Result<(), FsError> {
    posix::check_name(path)
}

/// Unix seconds+nanos to FILETIME.
pub fn filetime(secs: i64, nanos: i64) -> u64 {
    ((secs + 11_644_473_600) as u64).wrapping_mul(10_000_000).wrapping_add((nanos / 100) as u64)
}

impl From<FsError> for NtStatus {
    fn from(e: FsError) -> NtStatus {
        e.status()
    }
}
