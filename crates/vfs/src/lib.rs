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
//! (`:`, `\\?\` prefixes, wildcards, NUL, `.`/`..` components, empty
//! components). The last component may name a stream of the file
//! ([`parse_stream`], MS-FSCC 2.1.5): `::$DATA` is the file itself, and on
//! a [`PosixFs`] named streams live in extended attributes as Samba's
//! `vfs_streams_xattr` keeps them (see the `streams` module). A symlink
//! inside the share is followed when its target stays inside; one that
//! leads out is ACCESS_DENIED. Unlink and rename act on a link itself.
//!
//! Errors are [`FsError`], which maps to the NTSTATUS MS-SMB2/MS-FSCC name.

// Every unsafe block says why it is sound (`// SAFETY:`).
#![deny(clippy::undocumented_unsafe_blocks)]

use smbq_wire::ea::Ea;
use smbq_wire::NtStatus;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

pub mod dosattrib;
mod error;
mod mem;
mod names;
pub mod ntacl;
mod posix;
mod streams;
mod xattr;

pub use mem::MemFs;
pub use streams::{fold as fold_stream_name, named_stream, parse as parse_stream, Stream, StreamInfo, MAX_STREAM_SIZE};

pub use error::FsError;
pub use names::fold;
use names::NameCache;

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
    /// What a POSIX file system says beyond that (the SMB3 POSIX
    /// extensions show it); `None` on others.
    pub unix: Option<UnixStat>,
}

/// A file's POSIX metadata, as FILE_POSIX_INFORMATION carries it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnixStat {
    /// `st_mode`: the file type and permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub dev: u32,
    /// The tag of the file's reparse point (a symlink's is
    /// IO_REPARSE_TAG_SYMLINK, a FIFO's or device's IO_REPARSE_TAG_NFS);
    /// 0 for none.
    pub reparse_tag: u32,
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
    /// Files can share blocks ([`Handle::clone_range`] works): the share
    /// reports FILE_SUPPORTS_BLOCK_REFCOUNTING (MS-FSCC 2.5.1).
    pub block_refcounting: bool,
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
    /// Case-insensitive names (names.rs); `None` on a case-sensitive share.
    names: Option<Arc<NameCache>>,
    /// FICLONE worked on two scratch files when the share was opened.
    clones: bool,
    /// Opens see POSIX semantics ([`PosixFs::posix_view`]).
    posix: bool,
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
    /// Whether paths may name alternate data streams (FILE_NAMED_STREAMS,
    /// MS-FSCC 2.5.1).
    fn named_streams(&self) -> bool {
        false
    }
    /// What the security descriptor of `path` comes from; a file system
    /// that keeps none has no descriptor and no owner.
    fn security(&self, path: &str) -> Result<Security, FsError> {
        self.stat_path(path).map(|_| Security::default())
    }
    /// The same files as the SMB3 POSIX extensions' opens see them
    /// ([`PosixFs::posix_view`]); `None` where the file system has no
    /// POSIX semantics.
    fn posix_view(&self) -> Option<Arc<dyn FileSystem>> {
        None
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
    /// See [`Handle::eas`].
    fn eas(&self) -> Result<Vec<Ea>, FsError>;
    /// See [`Handle::set_eas`].
    fn set_eas(&self, eas: &[Ea]) -> Result<(), FsError>;
    fn sync(&self) -> Result<(), FsError>;
    /// `path`: the handle's current share-relative path.
    fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>, FsError>;
    /// See [`Handle::allocated_ranges`]. An object that keeps no holes
    /// has data everywhere below its size.
    fn allocated_ranges(&self, offset: u64, end: u64, max: usize) -> Result<(Vec<(u64, u64)>, bool), FsError> {
        let end = end.min(self.stat()?.size);
        Ok(match (offset < end, max) {
            (false, _) => (Vec::new(), false),
            (true, 0) => (Vec::new(), true),
            (true, _) => (vec![(offset, end - offset)], false),
        })
    }
    /// See [`Handle::zero_range`]. An object that keeps no holes writes
    /// zeros.
    fn zero_range(&self, offset: u64, len: u64, _deallocate: bool) -> Result<(), FsError> {
        let end = offset.saturating_add(len).min(self.stat()?.size);
        let zeros = [0u8; 64 * 1024];
        let mut at = offset;
        while at < end {
            let n = (end - at).min(zeros.len() as u64) as usize;
            self.write_vectored_at(&[zeros.get(..n).unwrap_or(&zeros)], at)?;
            at += n as u64;
        }
        Ok(())
    }
    /// The descriptor behind the object, for calls that take two files
    /// ([`Handle::clone_range`]); `None` where there is none.
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    /// See [`Handle::clone_range`].
    fn clone_range(&self, _src: &dyn FileObject, _src_offset: u64, _dst_offset: u64, _len: u64) -> Result<(), FsError> {
        Err(FsError::Status(NtStatus::INVALID_DEVICE_REQUEST))
    }
    /// The data streams of the file (MS-FSCC 2.4.43), the unnamed one
    /// (`::$DATA`, which a directory lacks) first. Without named streams:
    /// that one alone.
    fn streams(&self) -> Result<Vec<StreamInfo>, FsError> {
        let st = self.stat()?;
        Ok(if st.is_dir {
            Vec::new()
        } else {
            vec![StreamInfo { name: "::$DATA".to_owned(), size: st.size, allocation_size: st.allocation_size }]
        })
    }
    /// Rename the named stream this object is to `target` (`:name[:$DATA]`
    /// or `::$DATA`), MS-FSA 2.1.5.15.11.1; its new name, `None` for the
    /// unnamed stream. Objects that are no named stream: INVALID_PARAMETER.
    fn rename_stream(&self, _target: &str, _replace: bool) -> Result<Option<String>, FsError> {
        Err(FsError::Status(NtStatus::INVALID_PARAMETER))
    }
    /// See [`FileSystem::security`].
    fn security(&self) -> Result<Security, FsError> {
        Ok(Security::default())
    }
    /// Keep `descriptor` (self-relative, MS-DTYP 2.4.6) as the file's
    /// security descriptor; NOT_SUPPORTED where it cannot be kept.
    fn set_security(&self, _descriptor: &[u8]) -> Result<(), FsError> {
        Err(FsError::Status(NtStatus::NOT_SUPPORTED))
    }
    /// See [`Handle::chmod`].
    fn chmod(&self, _mode: u32) -> Result<(), FsError> {
        Err(FsError::Status(NtStatus::NOT_SUPPORTED))
    }
    /// See [`Handle::chown`].
    fn chown(&self, _uid: Option<u32>, _gid: Option<u32>) -> Result<(), FsError> {
        Err(FsError::Status(NtStatus::NOT_SUPPORTED))
    }
    /// See [`Handle::reparse_point`].
    fn reparse_point(&self) -> Result<Vec<u8>, FsError> {
        Err(FsError::Status(NtStatus::NOT_A_REPARSE_POINT))
    }
    /// See [`Handle::set_reparse_point`].
    fn set_reparse_point(&self, _buffer: &[u8]) -> Result<(), FsError> {
        Err(FsError::Status(NtStatus::INVALID_DEVICE_REQUEST))
    }
    /// See [`Handle::delete_reparse_point`].
    fn delete_reparse_point(&self, _tag: u32) -> Result<(), FsError> {
        Err(FsError::Status(NtStatus::INVALID_DEVICE_REQUEST))
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
    ///
    /// Unless `case_sensitive`, names are matched ignoring case as on
    /// Windows (MS-FSA 2.1.5.1 with IsCaseInsensitive): a path component that does not exist
    /// as given names the entry equal to it ignoring case ([`fold`]), a
    /// create meets that entry rather than making a second one, and names
    /// keep the case they were created with. A per-directory cache answers
    /// those lookups without a directory scan each: filled by one readdir
    /// per directory, updated by smbq's own changes, read again when the
    /// directory's ctime or mtime show a change made outside smbq, and
    /// holding at most 64 MiB of names per share (least recently used
    /// directories are dropped; names.rs says more). With `case_sensitive`
    /// every name is taken exactly as the file system holds it.
    pub fn new(root: &Path, read_only: bool, case_sensitive: bool) -> Result<PosixFs, FsError> {
        posix::new(root, read_only, case_sensitive)
    }

    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// The same root, refusing every change (for a share's read-only users).
    pub fn read_only_view(&self) -> PosixFs {
        PosixFs { root: Arc::clone(&self.root), read_only: true, names: self.names.clone(), clones: self.clones, posix: self.posix }
    }

    /// The same root as SMB3 POSIX opens see it (Samba's "POSIX
    /// pathnames"): names match only in their exact case and may hold
    /// any character but `\\`, `/` and NUL (`:` names no stream); a
    /// symlink at the end of a path is opened, stat'ed and listed as
    /// itself, a reparse point with IO_REPARSE_TAG_SYMLINK.
    pub fn posix_view(&self) -> PosixFs {
        PosixFs { root: Arc::clone(&self.root), read_only: self.read_only, names: None, clones: self.clones, posix: true }
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
        streams::open(self, path, opts)
    }

    pub fn stat_path(&self, path: &str) -> Result<FileStat, FsError> {
        streams::stat_path(self, path)
    }

    /// Remove the file or empty directory `path` (delete-on-close); a
    /// non-empty directory is DIRECTORY_NOT_EMPTY. A symlink is removed as a
    /// link even when `is_dir` (it was opened as the directory it names).
    pub fn unlink(&self, path: &str, is_dir: bool) -> Result<(), FsError> {
        streams::unlink(self, path, is_dir)
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
    /// The extended attributes (MS-FSCC 2.4.15), by name. On a POSIX
    /// share they are the `user.` extended attributes, named without the
    /// prefix, as Samba's `ea support` keeps them, but for the records
    /// Samba and smbq keep there themselves (DOS attributes, streams).
    pub fn eas(&self) -> Result<Vec<Ea>, FsError> {
        self.file.eas()
    }
    /// Set each of `eas`, removing those with an empty value (MS-FSA
    /// 2.1.5.14.4). Names are case-insensitive: an EA of another case is
    /// replaced. EAS_NOT_SUPPORTED where the file system keeps none,
    /// EA_TOO_LARGE past what it keeps per file.
    pub fn set_eas(&self, eas: &[Ea]) -> Result<(), FsError> {
        self.file.set_eas(eas)
    }
    /// All entries of this directory, `.` and `..` first, then sorted by
    /// name (bytewise). Names a client could not open again (non-UTF-8,
    /// failing [`check_name`]) are left out, as are entries that vanish
    /// meanwhile. A symlink shows its target when that is inside the share,
    /// else the link itself. INVALID_PARAMETER on a file handle.
    pub fn read_dir(&self) -> Result<Vec<DirEntry>, FsError> {
        self.file.read_dir(&self.path)
    }
    /// The ranges holding data within `offset..end` (clipped at the end
    /// of file), as (offset, length) in file order, from SEEK_DATA and
    /// SEEK_HOLE: at most `max` of them, and whether more follow
    /// (MS-FSA 2.1.5.10.22, FSCTL_QUERY_ALLOCATED_RANGES).
    pub fn allocated_ranges(&self, offset: u64, end: u64, max: usize) -> Result<(Vec<(u64, u64)>, bool), FsError> {
        self.file.allocated_ranges(offset, end, max)
    }
    /// Make `len` bytes from `offset` read as zeros without changing the
    /// size (the part past the end of file is left alone): with
    /// `deallocate` by punching a hole (a sparse file), else by zeroing
    /// the range in place, so that it stays allocated (MS-FSA 2.1.5.10,
    /// FSCTL_SET_ZERO_DATA). Needs a handle opened for writing.
    pub fn zero_range(&self, offset: u64, len: u64, deallocate: bool) -> Result<(), FsError> {
        self.file.zero_range(offset, len, deallocate)
    }
    /// Make `len` bytes at `dst_offset` of this file share the blocks of
    /// `src` at `src_offset` (FICLONERANGE; FSCTL_DUPLICATE_EXTENTS_TO_FILE,
    /// MS-FSA 2.1.5.10). INVALID_DEVICE_REQUEST where the file system
    /// cannot; INVALID_PARAMETER for ranges it cannot clone (not aligned
    /// to its blocks).
    pub fn clone_range(&self, src: &Handle, src_offset: u64, dst_offset: u64, len: u64) -> Result<(), FsError> {
        self.file.clone_range(src.file.as_ref(), src_offset, dst_offset, len)
    }
    /// See [`FileObject::streams`].
    pub fn streams(&self) -> Result<Vec<StreamInfo>, FsError> {
        self.file.streams()
    }
    /// See [`FileObject::rename_stream`]; the handle's path follows.
    pub fn rename_stream(&mut self, target: &str, replace: bool) -> Result<(), FsError> {
        let new = self.file.rename_stream(target, replace)?;
        let base = self.path.split_once(':').map_or(self.path.as_str(), |(b, _)| b).to_owned();
        self.path = match new {
            Some(name) => format!("{base}:{name}"),
            None => base,
        };
        Ok(())
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
    /// Set the permission bits, setuid, setgid and sticky (`mode & 0o7777`).
    pub fn chmod(&self, mode: u32) -> Result<(), FsError> {
        self.file.chmod(mode)
    }
    /// Change the owner and/or group (`None` leaves one as it is); a
    /// symlink changes itself, not its target.
    pub fn chown(&self, uid: Option<u32>, gid: Option<u32>) -> Result<(), FsError> {
        self.file.chown(uid, gid)
    }
    /// The file's reparse point, a whole REPARSE_DATA_BUFFER (MS-FSCC
    /// 2.1.2.2): a symlink's built from its target, a file's as kept in
    /// `user.SmbReparse` as Samba keeps it (FSCTL_GET_REPARSE_POINT,
    /// MS-FSA 2.1.5.10.14). NOT_A_REPARSE_POINT for files without one.
    pub fn reparse_point(&self) -> Result<Vec<u8>, FsError> {
        self.file.reparse_point()
    }
    /// Give a regular file the reparse point `buffer` (checked), kept in
    /// `user.SmbReparse` with FILE_ATTRIBUTE_REPARSE_POINT as Samba keeps
    /// them (FSCTL_SET_REPARSE_POINT, MS-FSA 2.1.5.10.37): another tag
    /// than the file's is IO_REPARSE_TAG_MISMATCH; anything but a regular
    /// file ACCESS_DENIED, as on Samba.
    pub fn set_reparse_point(&self, buffer: &[u8]) -> Result<(), FsError> {
        self.file.set_reparse_point(buffer)
    }
    /// Remove the reparse point with `tag` (FSCTL_DELETE_REPARSE_POINT,
    /// MS-FSA 2.1.5.10.8).
    pub fn delete_reparse_point(&self, tag: u32) -> Result<(), FsError> {
        self.file.delete_reparse_point(tag)
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
        streams::open(self, path, opts)
    }
    fn stat_path(&self, path: &str) -> Result<FileStat, FsError> {
        streams::stat_path(self, path)
    }
    fn unlink(&self, path: &str, is_dir: bool) -> Result<(), FsError> {
        streams::unlink(self, path, is_dir)
    }
    fn rename(&self, from: &str, to: &str, replace: bool) -> Result<(), FsError> {
        posix::rename(self, from, to, replace)
    }
    fn stat_fs(&self) -> Result<FsStat, FsError> {
        posix::stat_fs(self)
    }
    fn named_streams(&self) -> bool {
        !self.posix
    }
    fn security(&self, path: &str) -> Result<Security, FsError> {
        posix::security_path(self, path)
    }
    fn posix_view(&self) -> Option<Arc<dyn FileSystem>> {
        Some(Arc::new(PosixFs::posix_view(self)))
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
