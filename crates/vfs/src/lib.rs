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
//! (`:` streams, `\\?\` prefixes, wildcards, NUL, `.`/`..` components,
//! empty components); a trailing `::$DATA` names the file itself. A symlink
//! inside the share is followed when its target stays inside; one that
//! leads out is ACCESS_DENIED. Unlink and rename act on a link itself.
//!
//! Errors are [`FsError`], which maps to the NTSTATUS MS-SMB2/MS-FSCC name.

use smbq_wire::NtStatus;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

pub mod dosattrib;
mod error;
mod mem;
pub mod ntacl;
mod posix;

pub use mem::MemFs;

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
    /// Open for reading data. With neither `read` nor `write` the object
    /// is opened read-only if permitted, else O_PATH (metadata only).
    pub read: bool,
    /// Open for writing data / changing size (files; ignored for directories).
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
    /// Stable per file: st_ino with st_dev mixed into the top 24 bits.
    pub file_id: u64,
    pub size: u64,
    pub allocation_size: u64,
    pub creation_time: u64,
    pub last_access_time: u64,
    pub last_write_time: u64,
    /// The last write time, as Samba reports it (see `posix::to_stat`).
    pub change_time: u64,
    /// FILE_ATTRIBUTE_* (MS-FSCC 2.6): those stored in `user.DOSATTRIB`
    /// (see [`FileObject::set_attributes`]), with DIRECTORY for
    /// directories, and NORMAL when no other is set. Without the extended
    /// attribute: DIRECTORY for directories, ARCHIVE for everything else,
    /// plus READONLY when the owner has no write permission.
    pub attributes: u32,
    pub nlink: u32,
    pub is_dir: bool,
}

/// One directory entry, with its metadata. `.` and `..` are included first
/// for every directory (the share root's `..` is the root), as Windows does.
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
/// unchanged (the client sent 0 or -1). The creation time is kept in
/// `user.DOSATTRIB`; the others are the POSIX times.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetTimes {
    pub creation_time: Option<u64>,
    pub last_access_time: Option<u64>,
    pub last_write_time: Option<u64>,
}

/// What a file's NT security descriptor comes from: the one kept in
/// `security.NTACL` ([`ntacl`]), else its POSIX owner, group and mode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Security {
    /// The self-relative descriptor (MS-DTYP 2.4.6) kept for the file.
    pub descriptor: Option<Vec<u8>>,
    /// Owner, group and permission bits, where the file system has them.
    pub unix: Option<UnixOwner>,
}

/// A file's POSIX owner, group and permission bits (`st_mode & 0o7777`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnixOwner {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

/// A share root on a POSIX file system.
#[derive(Debug)]
pub struct PosixFs {
    root: Arc<OwnedFd>,
    read_only: bool,
}

/// An open file or directory: the share-relative path it was opened by
/// (kept current across renames by the server) and the file system's
/// object behind it.
#[derive(Debug)]
pub struct Handle {
    pub path: String,
    pub is_dir: bool,
    file: Arc<dyn FileObject>,
}

/// What a share's files live on: a POSIX tree ([`PosixFs`]) or memory
/// ([`MemFs`], for tests that drive the engine deterministically). The
/// engine reaches files only through it; every method takes SMB paths as
/// [`check_name`] allows them and answers what MS-FSA says, as [`PosixFs`]
/// documents method by method.
pub trait FileSystem: Send + Sync + std::fmt::Debug {
    fn read_only(&self) -> bool;
    /// The same files, refusing every change (a share's read-only users).
    fn read_only_view(&self) -> Arc<dyn FileSystem>;
    fn open(&self, path: &str, opts: &OpenOptions) -> Result<(Handle, CreateAction), FsError>;
    fn stat_path(&self, path: &str) -> Result<FileStat, FsError>;
    fn unlink(&self, path: &str, is_dir: bool) -> Result<(), FsError>;
    fn rename(&self, from: &str, to: &str, replace: bool) -> Result<(), FsError>;
    fn stat_fs(&self) -> Result<FsStat, FsError>;
    /// What the security descriptor of `path` comes from; a file system
    /// that keeps none has no descriptor and no owner.
    fn security(&self, path: &str) -> Result<Security, FsError> {
        self.stat_path(path).map(|_| Security::default())
    }
}

/// The object an open [`Handle`] holds (see the `Handle` methods).
pub trait FileObject: Send + Sync + std::fmt::Debug {
    fn stat(&self) -> Result<FileStat, FsError>;
    fn read_append(&self, out: &mut Vec<u8>, len: usize, offset: u64) -> Result<usize, FsError>;
    /// [`FileObject::read_append`] of what can be had without waiting for
    /// the disk: `Ok(None)` (and `out` as it was) when the page cache
    /// does not hold all of it, or the read ends short. An object that
    /// never waits reads.
    fn read_cached(&self, out: &mut Vec<u8>, len: usize, offset: u64) -> Result<Option<usize>, FsError> {
        self.read_append(out, len, offset).map(Some)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<(), FsError>;
    fn set_len(&self, len: u64) -> Result<(), FsError>;
    fn set_allocation(&self, len: u64) -> Result<(), FsError>;
    fn set_times(&self, t: &SetTimes) -> Result<(), FsError>;
    /// See [`Handle::set_attributes`].
    fn set_attributes(&self, attributes: u32) -> Result<(), FsError>;
    fn sync(&self) -> Result<(), FsError>;
    /// `path`: the handle's current share-relative path.
    fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>, FsError>;
    /// See [`FileSystem::security`].
    fn security(&self) -> Result<Security, FsError> {
        Ok(Security::default())
    }
    /// Keep `descriptor` (self-relative, MS-DTYP 2.4.6) as the file's
    /// security descriptor; NOT_SUPPORTED where it cannot be kept.
    fn set_security(&self, _descriptor: &[u8]) -> Result<(), FsError> {
        Err(FsError::Status(NtStatus::NOT_SUPPORTED))
    }
}

impl Handle {
    pub fn new(path: String, is_dir: bool, file: Arc<dyn FileObject>) -> Handle {
        Handle { path, is_dir, file }
    }

    /// The object itself, for work done away from the handle (a FLUSH's
    /// fsync on the transport's pool).
    pub fn object(&self) -> Arc<dyn FileObject> {
        Arc::clone(&self.file)
    }
}

impl PosixFs {
    /// Open (not create) the share root directory. Fails without openat2
    /// (Linux < 5.6).
    pub fn new(root: &Path, read_only: bool) -> Result<PosixFs, FsError> {
        posix::new(root, read_only)
    }

    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// The same root, refusing every change (for a share's read-only users).
    pub fn read_only_view(&self) -> PosixFs {
        PosixFs { root: Arc::clone(&self.root), read_only: true }
    }

    /// Open or create `path` per `opts` (MS-SMB2 3.3.5.9, MS-FSA 2.1.5.1).
    /// Overwrite/supersede truncate. Missing: OBJECT_NAME_NOT_FOUND, or
    /// OBJECT_PATH_NOT_FOUND when the parent is; existing with Create:
    /// OBJECT_NAME_COLLISION; Kind::Directory on a file: NOT_A_DIRECTORY;
    /// Kind::NonDirectory on a directory: FILE_IS_A_DIRECTORY;
    /// Kind::Directory with an overwriting disposition: INVALID_PARAMETER.
    /// Created files are mode 0644, directories 0755 (less the umask).
    /// FIFOs, sockets and devices open only without data access.
    pub fn open(&self, path: &str, opts: &OpenOptions) -> Result<(Handle, CreateAction), FsError> {
        posix::open(self, path, opts)
    }

    pub fn stat_path(&self, path: &str) -> Result<FileStat, FsError> {
        posix::stat_path(self, path)
    }

    /// Remove the file or empty directory `path` (delete-on-close); a
    /// non-empty directory is DIRECTORY_NOT_EMPTY. A symlink is removed as a
    /// link even when `is_dir` (it was opened as the directory it names).
    pub fn unlink(&self, path: &str, is_dir: bool) -> Result<(), FsError> {
        posix::unlink(self, path, is_dir)
    }

    /// Rename `from` to `to`, both share-relative. Without `replace`, an
    /// existing target is OBJECT_NAME_COLLISION; with it, a directory target
    /// is ACCESS_DENIED (MS-FSA 2.1.5.14.11). A missing target parent is
    /// OBJECT_PATH_NOT_FOUND.
    pub fn rename(&self, from: &str, to: &str, replace: bool) -> Result<(), FsError> {
        posix::rename(self, from, to, replace)
    }

    pub fn stat_fs(&self) -> Result<FsStat, FsError> {
        posix::stat_fs(self)
    }
}

impl Handle {
    pub fn stat(&self) -> Result<FileStat, FsError> {
        self.file.stat()
    }
    /// Append up to `len` bytes read at `offset` to `out`; returns bytes
    /// read (fewer only at EOF, 0 at or past it).
    pub fn read_append(&self, out: &mut Vec<u8>, len: usize, offset: u64) -> Result<usize, FsError> {
        self.file.read_append(out, len, offset)
    }
    /// See [`FileObject::read_cached`].
    pub fn read_cached(&self, out: &mut Vec<u8>, len: usize, offset: u64) -> Result<Option<usize>, FsError> {
        self.file.read_cached(out, len, offset)
    }
    /// Write all of `buf` at `offset`. A handle not opened for writing is
    /// ACCESS_DENIED.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), FsError> {
        self.file.write_vectored_at(&[buf], offset)
    }
    /// Write `bufs` one after the other from `offset` (pwritev), as
    /// [`write_at`](Self::write_at) does one buffer.
    pub fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<(), FsError> {
        self.file.write_vectored_at(bufs, offset)
    }
    pub fn set_len(&self, len: u64) -> Result<(), FsError> {
        self.file.set_len(len)
    }
    /// Preallocate (FileAllocationInformation) without changing the size;
    /// below the size it truncates. A no-op where the file system cannot.
    pub fn set_allocation(&self, len: u64) -> Result<(), FsError> {
        self.file.set_allocation(len)
    }
    pub fn set_times(&self, t: &SetTimes) -> Result<(), FsError> {
        self.file.set_times(t)
    }
    /// Store the FILE_ATTRIBUTE_* bits in [`STORED_ATTRIBUTES`] of
    /// `attributes` (MS-FSA 2.1.5.14.2), replacing those stored before; the
    /// others (DIRECTORY, NORMAL) are implied, not stored. Kept in
    /// `user.DOSATTRIB` as Samba keeps them; where the file system has no
    /// user extended attributes, READONLY alone maps to the write bits
    /// and the other attributes are NOT_SUPPORTED.
    pub fn set_attributes(&self, attributes: u32) -> Result<(), FsError> {
        self.file.set_attributes(attributes)
    }
    pub fn sync(&self) -> Result<(), FsError> {
        self.file.sync()
    }
    /// All entries of this directory, `.` and `..` first, then sorted by
    /// name (bytewise). Names a client could not open again (non-UTF-8,
    /// failing [`check_name`]) are left out, as are entries that vanish
    /// meanwhile. A symlink shows its target when that is inside the share,
    /// else the link itself. INVALID_PARAMETER on a file handle.
    pub fn read_dir(&self) -> Result<Vec<DirEntry>, FsError> {
        self.file.read_dir(&self.path)
    }
    /// The file's kept security descriptor and POSIX owner ([`Security`]).
    pub fn security(&self) -> Result<Security, FsError> {
        self.file.security()
    }
    /// Keep `descriptor` in `security.NTACL` (Samba's layout, version 1).
    /// That extended attribute needs CAP_SYS_ADMIN: without it the
    /// answer is ACCESS_DENIED; where the file system has no extended
    /// attributes, NOT_SUPPORTED.
    pub fn set_security(&self, descriptor: &[u8]) -> Result<(), FsError> {
        self.file.set_security(descriptor)
    }
}

impl FileSystem for PosixFs {
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn read_only_view(&self) -> Arc<dyn FileSystem> {
        Arc::new(PosixFs::read_only_view(self))
    }
    fn open(&self, path: &str, opts: &OpenOptions) -> Result<(Handle, CreateAction), FsError> {
        posix::open(self, path, opts)
    }
    fn stat_path(&self, path: &str) -> Result<FileStat, FsError> {
        posix::stat_path(self, path)
    }
    fn unlink(&self, path: &str, is_dir: bool) -> Result<(), FsError> {
        posix::unlink(self, path, is_dir)
    }
    fn rename(&self, from: &str, to: &str, replace: bool) -> Result<(), FsError> {
        posix::rename(self, from, to, replace)
    }
    fn stat_fs(&self) -> Result<FsStat, FsError> {
        posix::stat_fs(self)
    }
    fn security(&self, path: &str) -> Result<Security, FsError> {
        posix::security_path(self, path)
    }
}

/// Reject names that can never be a file in a share (MS-FSCC 2.1.5 rules
/// as Windows applies them, plus what would escape a POSIX tree):
/// OBJECT_NAME_INVALID for `.`/`..`/empty components, `/ : * ? < > " |`,
/// control characters, components over 255 bytes, paths over 4096 bytes.
/// Every [`PosixFs`] method applies it to the paths it is given.
pub fn check_name(path: &str) -> Result<(), FsError> {
    posix::check_name(path)
}

/// The FILE_ATTRIBUTE_* bits (MS-FSCC 2.6) a file keeps: READONLY,
/// HIDDEN, SYSTEM, ARCHIVE, TEMPORARY, SPARSE_FILE, OFFLINE and
/// NOT_CONTENT_INDEXED.
pub const STORED_ATTRIBUTES: u32 = 0x0001 | 0x0002 | 0x0004 | 0x0020 | 0x0100 | 0x0200 | 0x1000 | 0x2000;

/// Unix seconds+nanos to FILETIME (MS-DTYP 2.3.3: 100 ns units since
/// 1601-01-01). Times before 1601 become 0; `nanos` is below 10^9.
pub fn filetime(secs: i64, nanos: i64) -> u64 {
    match u64::try_from(secs.saturating_add(11_644_473_600)) {
        Ok(s) => s
            .saturating_mul(10_000_000)
            .saturating_add((nanos / 100).max(0) as u64),
        Err(_) => 0,
    }
}

impl From<FsError> for NtStatus {
    fn from(e: FsError) -> NtStatus {
        e.status()
    }
}

#[cfg(test)]
mod tests {
    use super::filetime;

    #[test]
    fn filetime_epochs() {
        // MS-DTYP 2.3.3: the Unix epoch is 116444736000000000.
        assert_eq!(filetime(0, 0), 116_444_736_000_000_000);
        assert_eq!(filetime(1, 500), 116_444_736_010_000_005);
        assert_eq!(filetime(-11_644_473_600, 0), 0);
        assert_eq!(filetime(-11_644_473_601, 999_999_999), 0);
        assert_eq!(filetime(i64::MIN, 0), 0);
        assert_eq!(filetime(i64::MAX, 0), u64::MAX);
    }
}
