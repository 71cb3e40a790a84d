//! [`PosixFs`] on Linux. Every lookup is `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS)` relative to the share root fd (or to a parent
//! directory fd obtained that way), so neither `..` nor an absolute or
//! relative symlink can reach outside the share: the kernel answers EXDEV.

use crate::dosattrib::{self, DosInfo};
use crate::ntacl;
use crate::xattr;
use crate::names::{self, NameCache};
use crate::{
    filetime, CreateAction, DirEntry, Disposition, FileStat, FsError, FsStat, FileObject, Kind,
    OpenOptions, PosixFs, Security, SetTimes, StreamInfo, UnixOwner, UnixStat, STORED_ATTRIBUTES,
};
use smbq_wire::posix::{self as wire_posix, Symlink, REPARSE_TAG_NFS, REPARSE_TAG_SYMLINK};
use rustix::fs::{
    self as rfs, AtFlags, FallocateFlags, FileType, Mode, OFlags, RenameFlags, ResolveFlags, Statx,
    StatxFlags, StatxTimestamp, Timespec, Timestamps, XattrFlags,
};
use rustix::io::Errno;
use smbq_wire::ea::Ea;
use smbq_wire::NtStatus;
use std::borrow::Cow;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

/// MS-FSCC 2.6 file attributes.
const FILE_ATTRIBUTE_READONLY: u32 = 0x0000_0001;
const FILE_ATTRIBUTE_DIRECTORY: u32 = 0x0000_0010;
const FILE_ATTRIBUTE_ARCHIVE: u32 = 0x0000_0020;
const FILE_ATTRIBUTE_NORMAL: u32 = 0x0000_0080;
const FILE_ATTRIBUTE_REPARSE_POINT: u32 = 0x0000_0400;
/// Where Samba keeps a file's reparse point (`SAMBA_XATTR_REPARSE_ATTRIB`).
pub(crate) const REPARSE_XATTR: &str = "user.SmbReparse";

/// Longest component (bytes), as NAME_MAX on Linux and 255 UTF-16 units on NTFS.
const MAX_COMPONENT: usize = 255;
/// Longest share-relative path (bytes), as PATH_MAX.
const MAX_PATH: usize = 4096;
/// How often a lookup is retried when it races with a rename or create.
const RETRIES: usize = 4;

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// Errors of an `openat2` lookup: leaving the share is [`FsError::Escape`].
fn err(e: Errno) -> FsError {
    if e == Errno::XDEV {
        FsError::Escape
    } else {
        FsError::Io(e.into())
    }
}

fn status(s: NtStatus) -> FsError {
    FsError::Status(s)
}

/// `openat2(dir, rel, flags | O_CLOEXEC, mode, BENEATH | NO_MAGICLINKS)`.
/// EAGAIN (the kernel saw a concurrent rename while checking `..` in a
/// symlink target) and EINTR are retried.
pub(crate) fn beneath(dir: BorrowedFd<'_>, rel: &str, flags: OFlags, mode: u32) -> Result<OwnedFd, Errno> {
    let mut tries = 0;
    loop {
        match rfs::openat2(
            dir,
            rel,
            flags | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
            RESOLVE,
        ) {
            Err(Errno::AGAIN | Errno::INTR) if tries < RETRIES => tries += 1,
            r => return r,
        }
    }
}

/// One path component: MS-FSCC 2.1.5.2 forbids `" * / : < > ? \ |` and
/// control characters; `.` and `..` never name a file here; `:` would name
/// an alternate data stream, which `streams::parse` splits off first.
fn check_component(c: &str) -> Result<(), FsError> {
    let bad = c.is_empty()
        || c == "."
        || c == ".."
        || c.len() > MAX_COMPONENT
        || c.chars().any(|ch| {
            ch < ' ' || matches!(ch, '"' | '*' | '/' | ':' | '<' | '>' | '?' | '\\' | '|')
        });
    if bad {
        Err(FsError::InvalidName)
    } else {
        Ok(())
    }
}

/// Split a share-relative SMB path into checked components. A trailing
/// `::$DATA` (the default data stream, MS-FSCC 2.1.5.1) is dropped. An empty
/// path is the root; an empty component (leading, trailing or doubled `\`)
/// is invalid, which also rejects `\\?\` and `\??\` prefixes.
pub(crate) fn split(path: &str) -> Result<Vec<&str>, FsError> {
    if path.len() > MAX_PATH {
        return Err(FsError::InvalidName);
    }
    let path = match path
        .len()
        .checked_sub(7)
        .and_then(|i| Some((path.get(..i)?, path.get(i..)?)))
    {
        Some((stem, s)) if !stem.is_empty() && s.eq_ignore_ascii_case("::$DATA") => stem,
        _ => path,
    };
    if path.is_empty() {
        return Ok(Vec::new());
    }
    path.split('\\')
        .map(|c| check_component(c).map(|()| c))
        .collect()
}

pub(crate) fn check_name(path: &str) -> Result<(), FsError> {
    split(path).map(drop)
}

/// [`split`], or for a POSIX view ([`PosixFs::posix_view`]): every
/// character in a name but `/` and NUL, and no stream suffix.
pub(crate) fn split_in(posix: bool, path: &str) -> Result<Vec<&str>, FsError> {
    if !posix {
        return split(path);
    }
    if path.len() > MAX_PATH {
        return Err(FsError::InvalidName);
    }
    if path.is_empty() {
        return Ok(Vec::new());
    }
    path.split('\\').map(|c| check_posix_component(c).map(|()| c)).collect()
}

/// A name as a POSIX view takes it: any but empty, `.`, `..`, too long,
/// or holding `/` or NUL.
fn check_posix_component(c: &str) -> Result<(), FsError> {
    let bad = c.is_empty() || c == "." || c == ".." || c.len() > MAX_COMPONENT || c.contains(['/', '\0']);
    if bad {
        Err(FsError::InvalidName)
    } else {
        Ok(())
    }
}

/// How a POSIX view looks up the last component: as itself, a symlink
/// included (O_NOFOLLOW); other views follow it.
fn last(fs: &PosixFs) -> OFlags {
    if fs.posix { OFlags::NOFOLLOW } else { OFlags::empty() }
}

/// Components as a path relative to the root fd (`.` for the root).
pub(crate) fn rel<S: std::borrow::Borrow<str>>(comps: &[S]) -> String {
    if comps.is_empty() {
        ".".to_owned()
    } else {
        comps.join("/")
    }
}

/// Open the directory holding the last component, beneath the root.
/// A missing or non-directory parent is OBJECT_PATH_NOT_FOUND.
fn open_parent(root: BorrowedFd<'_>, parent: &[&str]) -> Result<OwnedFd, FsError> {
    beneath(root, &rel(parent), OFlags::PATH | OFlags::DIRECTORY, 0).map_err(|e| match e {
        Errno::NOENT | Errno::NOTDIR => status(NtStatus::OBJECT_PATH_NOT_FOUND),
        e => err(e),
    })
}

/// Look up an existing object (following symlinks that stay inside) with
/// O_PATH: missing is OBJECT_NAME_NOT_FOUND, or OBJECT_PATH_NOT_FOUND when
/// its parent is missing.
fn lookup(root: BorrowedFd<'_>, comps: &[&str], last: OFlags) -> Result<OwnedFd, FsError> {
    match beneath(root, &rel(comps), OFlags::PATH | last, 0) {
        Ok(fd) => Ok(fd),
        Err(Errno::NOENT) => {
            let parent = comps.split_last().map_or(&[][..], |(_, p)| p);
            open_parent(root, parent)?;
            Err(status(NtStatus::OBJECT_NAME_NOT_FOUND))
        }
        Err(Errno::NOTDIR) => Err(status(NtStatus::OBJECT_PATH_NOT_FOUND)),
        Err(e) => Err(err(e)),
    }
}

/// On a case-insensitive share, `comps` as the share holds them when some
/// component exists only in another case (names.rs); else `None`.
fn other_case(fs: &PosixFs, comps: &[&str]) -> Option<Vec<String>> {
    fs.names.as_ref()?.resolve(fs.root.as_fd(), comps)
}

/// `f` on the components as given; when that finds a name missing, `f`
/// once more on the components as a case-insensitive share holds them, if
/// some exists in another case (MS-FSA 2.1.5.1, IsCaseInsensitive).
fn with_case<T>(
    fs: &PosixFs,
    comps: &[&str],
    f: impl Fn(&[&str]) -> Result<T, FsError>,
) -> Result<T, FsError> {
    match f(comps) {
        Err(e) if matches!(e.status(), NtStatus::OBJECT_NAME_NOT_FOUND | NtStatus::OBJECT_PATH_NOT_FOUND) => {
            match other_case(fs, comps) {
                Some(real) => f(&real.iter().map(String::as_str).collect::<Vec<_>>()),
                None => Err(e),
            }
        }
        r => r,
    }
}

pub(crate) fn statx_at(dir: BorrowedFd<'_>, name: &str, flags: AtFlags) -> Result<Statx, Errno> {
    rfs::statx(
        dir,
        name,
        flags,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME,
    )
}

pub(crate) fn fstatx(fd: BorrowedFd<'_>) -> Result<Statx, Errno> {
    statx_at(fd, "", AtFlags::EMPTY_PATH)
}

fn file_type(x: &Statx) -> FileType {
    FileType::from_raw_mode(x.stx_mode.into())
}

pub(crate) fn dev(x: &Statx) -> u64 {
    (u64::from(x.stx_dev_major) << 32) | u64::from(x.stx_dev_minor)
}

fn same_file(a: &Statx, b: &Statx) -> bool {
    dev(a) == dev(b) && a.stx_ino == b.stx_ino
}

/// A file id stable across opens: the inode number with the device mixed
/// into the top 24 bits, so files on different mounts inside the share
/// (or btrfs subvolumes, which reuse inode numbers) get distinct ids while
/// ids within one file system stay distinct (XOR with a per-device constant
/// is a bijection).
fn file_id(x: &Statx) -> u64 {
    let mix = dev(x).wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) & 0xFFFF_FF00_0000_0000;
    x.stx_ino ^ mix
}

fn ft(t: &StatxTimestamp) -> u64 {
    filetime(t.tv_sec, i64::from(t.tv_nsec))
}

/// The `user.DOSATTRIB` of the object `fd` is open on; `None` when it has
/// none (or one we cannot parse, or the file system keeps none).
fn dos_info(fd: BorrowedFd<'_>) -> Option<DosInfo> {
    let mut buf = [0u8; 128];
    let n = xattr::get_into(fd, dosattrib::NAME, &mut buf).ok()??;
    dosattrib::decode(buf.get(..n)?)
}

/// Store `info` as the `user.DOSATTRIB` of the object `fd` is open on.
fn set_dos_info(fd: BorrowedFd<'_>, info: &DosInfo) -> Result<(), Errno> {
    xattr::set(fd, dosattrib::NAME, &dosattrib::encode(info), XattrFlags::empty())
}

/// The `security.NTACL` value of the object `fd` is open on, if any.
fn ntacl_value(fd: BorrowedFd<'_>) -> Result<Option<Vec<u8>>, Errno> {
    match xattr::get(fd, ntacl::NAME) {
        Err(Errno::OPNOTSUPP) => Ok(None),
        r => r,
    }
}

/// The security descriptor kept for the object `fd` is open on (one
/// that does not parse counts as none), with its owner and mode.
fn security_fd(fd: BorrowedFd<'_>) -> Result<Security, FsError> {
    let x = fstatx(fd).map_err(err)?;
    let value = ntacl_value(fd).map_err(err)?;
    Ok(Security {
        descriptor: value.as_deref().and_then(|v| ntacl::decode(v).ok()),
        unix: Some(UnixOwner { uid: x.stx_uid, gid: x.stx_gid, mode: u32::from(x.stx_mode) & 0o7777 }),
    })
}

/// The security of the file `path` names (a stream's is its file's),
/// looked up as every open is: in another case where the share ignores it.
pub(crate) fn security_path(fs: &PosixFs, path: &str) -> Result<Security, FsError> {
    let base = if fs.posix { path } else { crate::streams::parse(path)?.0 };
    let comps = split_in(fs.posix, base)?;
    let fd = with_case(fs, &comps, |c| lookup(fs.root.as_fd(), c, last(fs)))?;
    security_fd(fd.as_fd())
}

/// `security.*` extended attributes need CAP_SYS_ADMIN (EPERM without).
fn set_security(h: &PosixFile, descriptor: &[u8]) -> Result<(), FsError> {
    if h.read_only {
        return Err(FsError::ReadOnly);
    }
    let fd = h.fd.as_fd();
    let value = ntacl::encode(descriptor).map_err(|_| status(NtStatus::INVALID_PARAMETER))?;
    match xattr::set(fd, ntacl::NAME, &value, XattrFlags::empty()) {
        Err(Errno::PERM | Errno::ACCESS) => Err(status(NtStatus::ACCESS_DENIED)),
        Err(Errno::OPNOTSUPP) => Err(status(NtStatus::NOT_SUPPORTED)),
        r => r.map_err(err),
    }
}

/// The birth time when the file system records one, else the oldest of
/// the other times.
fn birth_time(x: &Statx) -> u64 {
    if x.stx_mask & StatxFlags::BTIME.bits() != 0 {
        ft(&x.stx_btime)
    } else {
        ft(&x.stx_atime).min(ft(&x.stx_mtime)).min(ft(&x.stx_ctime))
    }
}

/// The reparse tag an object shows, as Samba shows it: a symlink's
/// IO_REPARSE_TAG_SYMLINK, a FIFO's, socket's or device's
/// IO_REPARSE_TAG_NFS, else the tag of the reparse point kept in
/// `user.SmbReparse` (`stored` reads it) when `user.DOSATTRIB` has
/// FILE_ATTRIBUTE_REPARSE_POINT; 0 for none.
///
/// With the tag, the file type the reparse point stands for, as Samba
/// shows it to POSIX clients (`reparse_buffer_parse_posix_type`): a file
/// holding a symlink's reparse point is a symlink, one holding an NFS
/// reparse point the special file it describes.
fn reparse_tag(x: &Statx, dos: Option<DosInfo>, stored: impl FnOnce() -> Option<Vec<u8>>) -> (u32, FileType) {
    let kind = file_type(x);
    match kind {
        FileType::Symlink => (REPARSE_TAG_SYMLINK, kind),
        FileType::Fifo | FileType::Socket | FileType::CharacterDevice | FileType::BlockDevice => (REPARSE_TAG_NFS, kind),
        FileType::RegularFile if dos.and_then(|d| d.attributes).is_some_and(|a| a & FILE_ATTRIBUTE_REPARSE_POINT != 0) => {
            let Some(v) = stored() else { return (0, kind) };
            let Ok((tag, data)) = wire_posix::split_reparse_buffer(&v) else { return (0, kind) };
            let shown = match (tag, data.get(..8).and_then(|t| t.try_into().ok()).map(u64::from_le_bytes)) {
                (REPARSE_TAG_SYMLINK, _) => FileType::Symlink,
                (REPARSE_TAG_NFS, Some(NFS_SPECFILE_FIFO)) => FileType::Fifo,
                (REPARSE_TAG_NFS, Some(NFS_SPECFILE_SOCK)) => FileType::Socket,
                (REPARSE_TAG_NFS, Some(NFS_SPECFILE_CHR)) => FileType::CharacterDevice,
                (REPARSE_TAG_NFS, Some(NFS_SPECFILE_BLK)) => FileType::BlockDevice,
                _ => kind,
            };
            (tag, shown)
        }
        _ => (0, kind),
    }
}

/// Statx, `user.DOSATTRIB` and the reparse tag ([`reparse_tag`]) to SMB
/// metadata (see [`FileStat`]); a reparse point has
/// FILE_ATTRIBUTE_REPARSE_POINT.
fn to_stat(x: &Statx, dos: Option<DosInfo>, (tag, kind): (u32, FileType)) -> FileStat {
    let is_dir = file_type(x) == FileType::Directory;
    let dir_bit = if is_dir { FILE_ATTRIBUTE_DIRECTORY } else { 0 };
    let reparse_bit = if tag != 0 { FILE_ATTRIBUTE_REPARSE_POINT } else { 0 };
    let attributes = match dos.and_then(|d| d.attributes) {
        Some(a) => match a & STORED_ATTRIBUTES | dir_bit | reparse_bit {
            0 => FILE_ATTRIBUTE_NORMAL,
            a => a,
        },
        None if is_dir => FILE_ATTRIBUTE_DIRECTORY,
        None if x.stx_mode & 0o200 == 0 => FILE_ATTRIBUTE_ARCHIVE | FILE_ATTRIBUTE_READONLY | reparse_bit,
        None => FILE_ATTRIBUTE_ARCHIVE | reparse_bit,
    };
    FileStat {
        file_id: file_id(x),
        size: x.stx_size,
        allocation_size: x.stx_blocks.saturating_mul(512),
        creation_time: dos.and_then(|d| d.creation_time).unwrap_or_else(|| birth_time(x)),
        last_access_time: ft(&x.stx_atime),
        last_write_time: ft(&x.stx_mtime),
        // As Samba reports it: Linux cannot set ctime, and it moves on
        // every chmod or xattr change, so a ChangeTime set with SET_INFO
        // would never read back (smbtorture smb2.timestamps).
        change_time: ft(&x.stx_mtime),
        attributes,
        nlink: x.stx_nlink,
        is_dir,
        unix: Some(UnixStat {
            mode: u32::from(x.stx_mode) & 0o7777 | kind.as_raw_mode(),
            uid: x.stx_uid,
            gid: x.stx_gid,
            // As the kernel encodes a device number in 32 bits (new_encode_dev).
            dev: x.stx_dev_minor & 0xff | x.stx_dev_major << 8 | (x.stx_dev_minor & !0xff) << 12,
            reparse_tag: tag,
        }),
    }
}

/// The metadata of the object `fd` is open on (an O_PATH fd will do).
fn stat_fd(fd: BorrowedFd<'_>) -> Result<FileStat, FsError> {
    let x = fstatx(fd).map_err(err)?;
    let dos = dos_info(fd);
    let tag = reparse_tag(&x, dos, || xattr::get(fd, REPARSE_XATTR).ok().flatten());
    Ok(to_stat(&x, dos, tag))
}

pub(crate) fn new(root: &Path, read_only: bool, case_sensitive: bool) -> Result<PosixFs, FsError> {
    let fd = rfs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(err)?;
    // openat2 needs Linux 5.6: fail here, not on the first request.
    beneath(fd.as_fd(), ".", OFlags::PATH, 0).map_err(err)?;
    let clones = !read_only && probe_clone(fd.as_fd());
    Ok(PosixFs {
        root: Arc::new(fd),
        read_only,
        names: (!case_sensitive).then(|| Arc::new(NameCache::default())),
        clones,
        posix: false,
    })
}

/// Whether the file system under `root` clones blocks: FICLONE between
/// two unnamed scratch files (O_TMPFILE, gone when closed). False where
/// O_TMPFILE or FICLONE is refused (ext4, tmpfs, no write permission).
fn probe_clone(root: BorrowedFd<'_>) -> bool {
    let scratch = || rfs::openat(root, ".", OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC, Mode::from_raw_mode(0o600));
    match (scratch(), scratch()) {
        (Ok(a), Ok(b)) => rfs::ioctl_ficlone(&b, &a).is_ok(),
        _ => false,
    }
}

/// MS-SMB2 3.3.5.9 / MS-FSA 2.1.5.1: open or create per CreateDisposition
/// (the file itself; [`crate::streams::open`] makes the [`crate::Handle`]):
/// the object, whether it is a directory, and what the open did.
pub(crate) fn open(
    fs: &PosixFs,
    path: &str,
    opts: &OpenOptions,
) -> Result<(PosixFile, bool, CreateAction, String), FsError> {
    let comps = split_in(fs.posix, path)?;
    let truncate = matches!(
        opts.disposition,
        Disposition::Supersede | Disposition::Overwrite | Disposition::OverwriteIf
    );
    // MS-FSA 2.1.5.1: FILE_DIRECTORY_FILE allows only FILE_CREATE,
    // FILE_OPEN and FILE_OPEN_IF.
    if opts.kind == Kind::Directory && truncate {
        return Err(status(NtStatus::INVALID_PARAMETER));
    }
    if fs.read_only && (opts.write || truncate || opts.disposition == Disposition::Create) {
        return Err(FsError::ReadOnly);
    }
    open_at(fs, &comps, opts, truncate, true)
}

/// [`open`] of checked components. `resolve`: a name missing as given may
/// still exist in another case (MS-FSA 2.1.5.1, IsCaseInsensitive): that
/// entry is opened, not a second one created beside it.
fn open_at(
    fs: &PosixFs,
    comps: &[&str],
    opts: &OpenOptions,
    truncate: bool,
    resolve: bool,
) -> Result<(PosixFile, bool, CreateAction, String), FsError> {
    let root = fs.root.as_fd();
    let handle = |fd: OwnedFd| PosixFile { fd, root: Arc::clone(&fs.root), read_only: fs.read_only, posix: fs.posix };
    for _ in 0..RETRIES {
        let found = beneath(root, &rel(comps), OFlags::PATH | last(fs), 0);
        if resolve && matches!(found, Err(Errno::NOENT | Errno::NOTDIR)) {
            if let Some(real) = other_case(fs, comps) {
                let real: Vec<&str> = real.iter().map(String::as_str).collect();
                return open_at(fs, &real, opts, truncate, false);
            }
        }
        match found {
            Ok(fd) => {
                let (fd, is_dir, action) = open_existing(root, comps, fd, opts, truncate, last(fs))?;
                return Ok((handle(fd), is_dir, action, comps.join("\\")));
            }
            Err(Errno::NOENT) => {}
            Err(Errno::NOTDIR) => return Err(status(NtStatus::OBJECT_PATH_NOT_FOUND)),
            Err(e) => return Err(err(e)),
        }
        let Some((leaf, parent)) = comps.split_last() else {
            return Err(status(NtStatus::OBJECT_NAME_NOT_FOUND));
        };
        let dir = open_parent(root, parent)?;
        if matches!(opts.disposition, Disposition::Open | Disposition::Overwrite) {
            return Err(status(NtStatus::OBJECT_NAME_NOT_FOUND));
        }
        if fs.read_only {
            return Err(FsError::ReadOnly);
        }
        let edit = names::edit(fs.names.as_deref(), dir.as_fd());
        let created = if opts.kind == Kind::Directory {
            rfs::mkdirat(&dir, *leaf, Mode::from_raw_mode(0o755)).and_then(|()| {
                beneath(
                    dir.as_fd(),
                    leaf,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
                    0,
                )
            })
        } else {
            let access = if opts.write {
                OFlags::RDWR
            } else {
                OFlags::RDONLY
            };
            let flags = access | OFlags::CREATE | OFlags::EXCL | OFlags::NOCTTY;
            beneath(dir.as_fd(), leaf, flags, 0o644)
        };
        match created {
            Ok(fd) => {
                edit.added(leaf);
                let is_dir = opts.kind == Kind::Directory;
                return Ok((handle(fd), is_dir, CreateAction::Created, comps.join("\\")));
            }
            // Someone created it since our lookup: open what is there now.
            // (A dangling symlink also lands here: O_EXCL does not follow it.)
            Err(Errno::EXIST) if opts.disposition != Disposition::Create => {}
            Err(e) => return Err(err(e)),
        }
    }
    Err(status(NtStatus::OBJECT_NAME_COLLISION))
}

/// The object exists (`pfd` is its O_PATH fd): check kind and disposition,
/// then reopen it for data access.
fn open_existing(
    root: BorrowedFd<'_>,
    comps: &[&str],
    pfd: OwnedFd,
    opts: &OpenOptions,
    truncate: bool,
    last: OFlags,
) -> Result<(OwnedFd, bool, CreateAction), FsError> {
    if opts.disposition == Disposition::Create {
        return Err(status(NtStatus::OBJECT_NAME_COLLISION));
    }
    let x = fstatx(pfd.as_fd()).map_err(err)?;
    let kind = file_type(&x);
    let is_dir = kind == FileType::Directory;
    match (opts.kind, is_dir) {
        (Kind::Directory, false) => return Err(status(NtStatus::NOT_A_DIRECTORY)),
        (Kind::NonDirectory, true) => return Err(status(NtStatus::FILE_IS_A_DIRECTORY)),
        _ => {}
    }
    if is_dir && truncate {
        return Err(status(NtStatus::FILE_IS_A_DIRECTORY));
    }
    let action = match opts.disposition {
        Disposition::Supersede => CreateAction::Superseded,
        Disposition::Overwrite | Disposition::OverwriteIf => CreateAction::Overwritten,
        _ => CreateAction::Opened,
    };
    let metadata_only = !opts.read && !opts.write && !truncate;
    let fd = if is_dir {
        match beneath(pfd.as_fd(), ".", OFlags::RDONLY | OFlags::DIRECTORY, 0) {
            Ok(fd) => fd,
            Err(Errno::ACCESS) if metadata_only => pfd,
            Err(e) => return Err(err(e)),
        }
    } else if kind == FileType::RegularFile {
        let access = if opts.write || truncate {
            OFlags::RDWR
        } else {
            OFlags::RDONLY
        };
        // O_NONBLOCK: if the name was swapped for a FIFO since the lookup,
        // do not hang in open (the check below then refuses it). It has no
        // effect on regular files.
        let flags = access | OFlags::NOCTTY | OFlags::NONBLOCK | last;
        match beneath(root, &rel(comps), flags, 0) {
            Ok(fd) => {
                let now = fstatx(fd.as_fd()).map_err(err)?;
                if !same_file(&x, &now) {
                    return Err(status(NtStatus::ACCESS_DENIED));
                }
                if truncate {
                    rfs::ftruncate(&fd, 0).map_err(err)?;
                }
                fd
            }
            Err(Errno::ACCESS) if metadata_only => pfd,
            Err(e) => return Err(err(e)),
        }
    } else if metadata_only {
        // FIFOs, sockets and devices: their "data" is not file data.
        pfd
    } else {
        return Err(status(NtStatus::ACCESS_DENIED));
    };
    Ok((fd, is_dir, action))
}

pub(crate) fn stat_path(fs: &PosixFs, path: &str) -> Result<FileStat, FsError> {
    let comps = split_in(fs.posix, path)?;
    let fd = with_case(fs, &comps, |c| lookup(fs.root.as_fd(), c, last(fs)))?;
    stat_fd(fd.as_fd())
}

/// Delete `path`. A symlink is removed as a link, even when the handle
/// being closed was opened through it as a directory.
pub(crate) fn unlink(fs: &PosixFs, path: &str, is_dir: bool) -> Result<(), FsError> {
    if fs.read_only {
        return Err(FsError::ReadOnly);
    }
    let comps = split_in(fs.posix, path)?;
    with_case(fs, &comps, |comps| unlink_at(fs, comps, is_dir))
}

fn unlink_at(fs: &PosixFs, comps: &[&str], is_dir: bool) -> Result<(), FsError> {
    let Some((leaf, parent)) = comps.split_last() else {
        // The share root itself.
        return Err(status(NtStatus::ACCESS_DENIED));
    };
    let dir = open_parent(fs.root.as_fd(), parent)?;
    let x = statx_at(dir.as_fd(), leaf, AtFlags::SYMLINK_NOFOLLOW).map_err(err)?;
    let flags = if is_dir && file_type(&x) != FileType::Symlink {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    let edit = names::edit(fs.names.as_deref(), dir.as_fd());
    rfs::unlinkat(&dir, *leaf, flags).map_err(|e| match e {
        // Some file systems report a non-empty directory as EEXIST.
        Errno::NOTEMPTY | Errno::EXIST => status(NtStatus::DIRECTORY_NOT_EMPTY),
        Errno::NOTDIR => status(NtStatus::NOT_A_DIRECTORY),
        e => err(e),
    })?;
    edit.removed(leaf);
    Ok(())
}

/// MS-FSA 2.1.5.14.11 (FileRenameInformation): a directory target is
/// ACCESS_DENIED even with ReplaceIfExists. On a case-insensitive share a
/// target equal to an existing name ignoring case is that entry (a
/// collision, or the file replaced, whose name stays), unless it is the
/// file being renamed: then only the case of its name changes.
pub(crate) fn rename(fs: &PosixFs, from: &str, to: &str, replace: bool) -> Result<(), FsError> {
    if fs.read_only {
        return Err(FsError::ReadOnly);
    }
    let (from, to) = (split_in(fs.posix, from)?, split_in(fs.posix, to)?);
    let Some((tleaf, tparent)) = to.split_last() else {
        return Err(status(NtStatus::ACCESS_DENIED));
    };
    with_case(fs, &from, |from| {
        with_case(fs, tparent, |tparent| rename_at(fs, from, tparent, tleaf, replace))
    })
}

fn rename_at(
    fs: &PosixFs,
    from: &[&str],
    tparent: &[&str],
    tleaf: &str,
    replace: bool,
) -> Result<(), FsError> {
    let Some((fleaf, fparent)) = from.split_last() else {
        return Err(status(NtStatus::ACCESS_DENIED));
    };
    let root = fs.root.as_fd();
    let fdir = open_parent(root, fparent)?;
    let tdir = open_parent(root, tparent)?;
    // The target directory as the root of a one-component path.
    let variant = fs.names.as_ref().and_then(|n| n.resolve(tdir.as_fd(), &[tleaf]));
    let tleaf = match variant.and_then(|v| v.into_iter().next()) {
        Some(v) if !same_entry((fdir.as_fd(), fleaf), (tdir.as_fd(), &v)) => Cow::Owned(v),
        _ => Cow::Borrowed(tleaf),
    };
    // The same name of the same file (its directories named in another
    // case): nothing to do, as rename(2) does nothing there.
    if *fleaf == &*tleaf && same_entry((fdir.as_fd(), fleaf), (tdir.as_fd(), &tleaf)) {
        return Ok(());
    }
    let flags = if replace {
        match statx_at(tdir.as_fd(), &tleaf, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(x) if file_type(&x) == FileType::Directory => {
                return Err(status(NtStatus::ACCESS_DENIED))
            }
            _ => RenameFlags::empty(),
        }
    } else {
        RenameFlags::NOREPLACE
    };
    let (fedit, tedit) = (
        names::edit(fs.names.as_deref(), fdir.as_fd()),
        names::edit(fs.names.as_deref(), tdir.as_fd()),
    );
    rfs::renameat_with(&fdir, *fleaf, &tdir, &*tleaf, flags).map_err(|e| match e {
        Errno::NOENT => status(NtStatus::OBJECT_NAME_NOT_FOUND),
        // Different mounts inside the share.
        Errno::XDEV => status(NtStatus(0xC000_00D4)), // STATUS_NOT_SAME_DEVICE
        // A directory over a file, or over a directory created meanwhile.
        Errno::NOTEMPTY | Errno::ISDIR | Errno::NOTDIR => status(NtStatus::ACCESS_DENIED),
        e => err(e),
    })?;
    fedit.removed(fleaf);
    tedit.added(&tleaf);
    Ok(())
}

/// Whether two directory entries (not followed) are one file.
fn same_entry(a: (BorrowedFd<'_>, &str), b: (BorrowedFd<'_>, &str)) -> bool {
    let stat = |(dir, name)| statx_at(dir, name, AtFlags::SYMLINK_NOFOLLOW);
    matches!((stat(a), stat(b)), (Ok(x), Ok(y)) if same_file(&x, &y))
}

/// MS-FSCC 2.5.8 / 2.5.4 (FileFsFullSizeInformation, FileFsSizeInformation).
pub(crate) fn stat_fs(fs: &PosixFs) -> Result<FsStat, FsError> {
    let v = rfs::fstatvfs(&*fs.root).map_err(err)?;
    let x = fstatx(fs.root.as_fd()).map_err(err)?;
    let d = dev(&x);
    Ok(FsStat {
        total_blocks: v.f_blocks,
        free_blocks: v.f_bfree,
        avail_blocks: v.f_bavail,
        block_size: v.f_frsize,
        max_name_len: u32::try_from(v.f_namemax)
            .unwrap_or(u32::MAX)
            .min(MAX_COMPONENT as u32),
        serial: (d ^ (d >> 32)) as u32,
        block_refcounting: fs.clones,
    })
}

pub(crate) fn fstat(h: &PosixFile) -> Result<FileStat, FsError> {
    stat_fd(h.fd.as_fd())
}

/// pread straight into `out`'s spare capacity (no zeroing pass over a
/// buffer that is about to be overwritten), appending up to `len` bytes;
/// stops at `len` or at EOF.
pub(crate) fn read_append(h: &PosixFile, out: &mut Vec<u8>, len: usize, offset: u64) -> Result<usize, FsError> {
    out.reserve_exact(len);
    let start = out.len();
    while out.len() - start < len {
        let done = out.len() - start;
        let at = offset
            .checked_add(done as u64)
            .ok_or(status(NtStatus::INVALID_PARAMETER))?;
        let Some(spare) = out.spare_capacity_mut().get_mut(..len - done) else { break };
        match rustix::io::pread(&h.fd, spare, at) {
            Ok(([], _)) => break,
            Ok((read, _)) => {
                let n = read.len();
                // SAFETY: pread initialized these `n` bytes of the spare
                // capacity, right after the current end.
                unsafe { out.set_len(out.len() + n) };
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(err(e)),
        }
    }
    Ok(out.len() - start)
}

/// `preadv2(RWF_NOWAIT)`: the read the page cache can answer whole, or
/// `None` (a cold or partly cached range, or the end of the file: the
/// caller reads again where waiting is allowed).
pub(crate) fn read_cached(h: &PosixFile, out: &mut Vec<u8>, len: usize, offset: u64) -> Result<Option<usize>, FsError> {
    out.reserve_exact(len);
    let Some(spare) = out.spare_capacity_mut().get_mut(..len) else { return Ok(None) };
    let iov = libc::iovec { iov_base: spare.as_mut_ptr().cast(), iov_len: len };
    let Ok(at) = i64::try_from(offset) else { return Ok(None) };
    use std::os::fd::AsRawFd;
    // SAFETY: the kernel writes at most `len` bytes into the spare
    // capacity the iovec points at; only what it reports is kept.
    let n = unsafe { libc::preadv2(h.fd.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT) };
    match usize::try_from(n) {
        Ok(n) if n == len && len > 0 => {
            // SAFETY: preadv2 initialized these `n` bytes, right after the end.
            unsafe { out.set_len(out.len() + n) };
            Ok(Some(n))
        }
        Ok(_) => Ok(None),
        Err(_) => match Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)) {
            Errno::AGAIN | Errno::INTR | Errno::OPNOTSUPP => Ok(None),
            e => Err(err(e)),
        },
    }
}

pub(crate) fn write_at(h: &PosixFile, bufs: &[&[u8]], offset: u64) -> Result<(), FsError> {
    if h.read_only {
        return Err(FsError::ReadOnly);
    }
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut done = 0;
    while done < total {
        let at = offset
            .checked_add(done as u64)
            .ok_or(status(NtStatus::INVALID_PARAMETER))?;
        // What is left of the buffers, at most IOV_MAX (1024) of them.
        let mut skip = done;
        let iov: Vec<std::io::IoSlice<'_>> = bufs
            .iter()
            .filter_map(|b| match b.get(skip..) {
                Some(rest) if !rest.is_empty() => {
                    skip = 0;
                    Some(std::io::IoSlice::new(rest))
                }
                _ => {
                    skip = skip.saturating_sub(b.len());
                    None
                }
            })
            .take(1024)
            .collect();
        match rustix::io::pwritev(&h.fd, &iov, at) {
            Ok(0) => return Err(status(NtStatus::DISK_FULL)),
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(err(e)),
        }
    }
    Ok(())
}

/// Size changes need a handle opened for writing.
fn check_writable(h: &PosixFile) -> Result<(), FsError> {
    if h.read_only {
        return Err(FsError::ReadOnly);
    }
    let fl = rfs::fcntl_getfl(&h.fd).map_err(err)?;
    if fl.contains(OFlags::PATH) || fl & OFlags::RWMODE == OFlags::RDONLY {
        return Err(status(NtStatus::ACCESS_DENIED));
    }
    Ok(())
}

/// MS-FSCC 2.4.14 FileEndOfFileInformation.
pub(crate) fn set_len(h: &PosixFile, len: u64) -> Result<(), FsError> {
    check_writable(h)?;
    rfs::ftruncate(&h.fd, len).map_err(err)
}

/// MS-FSCC 2.4.4 FileAllocationInformation: below the end of file it
/// truncates; above, it reserves blocks without changing the size (where
/// the file system cannot, the request is a successful no-op).
pub(crate) fn set_allocation(h: &PosixFile, len: u64) -> Result<(), FsError> {
    check_writable(h)?;
    let size = fstatx(h.fd.as_fd()).map_err(err)?.stx_size;
    if len < size {
        return rfs::ftruncate(&h.fd, len).map_err(err);
    }
    if len == size {
        return Ok(());
    }
    match rfs::fallocate(&h.fd, FallocateFlags::KEEP_SIZE, 0, len) {
        Ok(()) | Err(Errno::OPNOTSUPP) => Ok(()),
        Err(e) => Err(err(e)),
    }
}

/// FILETIME to a timespec; `None` leaves the time unchanged.
fn timespec(t: Option<u64>) -> Timespec {
    match t {
        Some(ft) => Timespec {
            tv_sec: (ft / 10_000_000) as i64 - 11_644_473_600,
            tv_nsec: ((ft % 10_000_000) * 100) as _,
        },
        None => Timespec {
            tv_sec: 0,
            tv_nsec: rfs::UTIME_OMIT,
        },
    }
}

/// MS-FSCC 2.4.7 FileBasicInformation times.
pub(crate) fn set_times(h: &PosixFile, t: &SetTimes) -> Result<(), FsError> {
    if h.read_only {
        return Err(FsError::ReadOnly);
    }
    if let Some(c) = t.creation_time {
        let mut info = dos_info(h.fd.as_fd()).unwrap_or_default();
        info.creation_time = Some(c);
        set_dos_info(h.fd.as_fd(), &info).map_err(err)?;
    }
    if t.last_access_time.is_none() && t.last_write_time.is_none() {
        return Ok(());
    }
    let ts = Timestamps {
        last_access: timespec(t.last_access_time),
        last_modification: timespec(t.last_write_time),
    };
    rfs::futimens(&h.fd, &ts).map_err(err)
}

/// MS-FSA 2.1.5.14.2: the attributes go to `user.DOSATTRIB`, with the
/// creation time as it reads now (so that a birth time moves with the
/// file to Samba too). A file system without user extended attributes
/// keeps READONLY in the write bits (set clears every write bit, clear
/// restores the owner's) and ARCHIVE implied; others are NOT_SUPPORTED.
pub(crate) fn set_attributes(h: &PosixFile, attributes: u32) -> Result<(), FsError> {
    if h.read_only {
        return Err(FsError::ReadOnly);
    }
    let fd = h.fd.as_fd();
    let x = fstatx(fd).map_err(err)?;
    let old = dos_info(fd);
    // A reparse point stays one (FSCTL_DELETE_REPARSE_POINT removes it).
    let reparse = old.and_then(|d| d.attributes).unwrap_or(0) & FILE_ATTRIBUTE_REPARSE_POINT;
    let info = stored_dos_info(&x, old, attributes & STORED_ATTRIBUTES | reparse);
    match set_dos_info(fd, &info) {
        Err(Errno::OPNOTSUPP) => {}
        r => return r.map_err(err),
    }
    if attributes & STORED_ATTRIBUTES & !(FILE_ATTRIBUTE_READONLY | FILE_ATTRIBUTE_ARCHIVE) != 0 {
        return Err(status(NtStatus::NOT_SUPPORTED));
    }
    let mode = u32::from(x.stx_mode) & 0o7777;
    let new = if attributes & FILE_ATTRIBUTE_READONLY != 0 { mode & !0o222 } else { mode | 0o200 };
    if new == mode {
        return Ok(());
    }
    rfs::fchmod(fd, Mode::from_raw_mode(new)).map_err(err)
}

/// `st_mode` permission bits, setuid, setgid and sticky. A symlink has
/// none to set (INVALID_PARAMETER).
pub(crate) fn chmod(h: &PosixFile, mode: u32) -> Result<(), FsError> {
    if h.read_only {
        return Err(FsError::ReadOnly);
    }
    let fd = h.fd.as_fd();
    if file_type(&fstatx(fd).map_err(err)?) == FileType::Symlink {
        return Err(status(NtStatus::INVALID_PARAMETER));
    }
    let mode = Mode::from_raw_mode(mode & wire_posix::PERMISSION_BITS);
    match rfs::fchmod(fd, mode) {
        // An O_PATH fd (a metadata-only open): through its /proc link.
        Err(Errno::BADF) => rfs::chmod(xattr::proc_path(fd), mode),
        r => r,
    }
    .map_err(err)
}

/// `fchownat(fd, "", AT_EMPTY_PATH)`: the object itself, a symlink too.
pub(crate) fn chown(h: &PosixFile, uid: Option<u32>, gid: Option<u32>) -> Result<(), FsError> {
    if h.read_only {
        return Err(FsError::ReadOnly);
    }
    // -1 means "unchanged" to the kernel: no id a client can ask for.
    if uid == Some(u32::MAX) || gid == Some(u32::MAX) {
        return Err(status(NtStatus::INVALID_PARAMETER));
    }
    let (uid, gid) = (uid.map(rustix::fs::Uid::from_raw), gid.map(rustix::fs::Gid::from_raw));
    rfs::chownat(h.fd.as_fd(), "", uid, gid, AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW).map_err(err)
}

/// NFS_SPECFILE_* (MS-FSCC 2.1.2.6): what an IO_REPARSE_TAG_NFS buffer
/// says a special file is.
const NFS_SPECFILE_FIFO: u64 = 0x0000_0000_4F46_4946;
const NFS_SPECFILE_SOCK: u64 = 0x0000_0000_4B43_4F53;
const NFS_SPECFILE_CHR: u64 = 0x0000_0000_0052_4843;
const NFS_SPECFILE_BLK: u64 = 0x0000_0000_004B_4C42;

/// See [`crate::Handle::reparse_point`]; special files answer with an
/// IO_REPARSE_TAG_NFS buffer, as Samba builds them.
pub(crate) fn reparse_point(h: &PosixFile) -> Result<Vec<u8>, FsError> {
    let fd = h.fd.as_fd();
    let x = fstatx(fd).map_err(err)?;
    let nfs = |kind: u64, device: Option<(u32, u32)>| {
        let mut out = Vec::with_capacity(24);
        out.extend_from_slice(&REPARSE_TAG_NFS.to_le_bytes());
        out.extend_from_slice(&(8u16 + if device.is_some() { 8 } else { 0 }).to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&kind.to_le_bytes());
        if let Some((major, minor)) = device {
            out.extend_from_slice(&major.to_le_bytes());
            out.extend_from_slice(&minor.to_le_bytes());
        }
        out
    };
    let device = (x.stx_rdev_major, x.stx_rdev_minor);
    Ok(match file_type(&x) {
        FileType::Symlink => {
            let target = rfs::readlinkat(fd, "", Vec::new()).map_err(err)?;
            let target = target.to_str().map_err(|_| status(NtStatus::STOPPED_ON_SYMLINK_ERR))?;
            let mut out = Vec::new();
            Symlink::from_target(target).encode(&mut out);
            out
        }
        FileType::Fifo => nfs(NFS_SPECFILE_FIFO, None),
        FileType::Socket => nfs(NFS_SPECFILE_SOCK, None),
        FileType::CharacterDevice => nfs(NFS_SPECFILE_CHR, Some(device)),
        FileType::BlockDevice => nfs(NFS_SPECFILE_BLK, Some(device)),
        _ => {
            let dos = dos_info(fd);
            if dos.and_then(|d| d.attributes).unwrap_or(0) & FILE_ATTRIBUTE_REPARSE_POINT == 0 {
                return Err(status(NtStatus::NOT_A_REPARSE_POINT));
            }
            xattr::get(fd, REPARSE_XATTR).map_err(err)?.ok_or(status(NtStatus::NOT_A_REPARSE_POINT))?
        }
    })
}

/// The tag of the reparse point kept for the regular file `fd` is open on.
fn stored_tag(fd: BorrowedFd<'_>) -> Result<Option<u32>, FsError> {
    Ok(xattr::get(fd, REPARSE_XATTR)
        .map_err(err)?
        .and_then(|v| Some(u32::from_le_bytes(v.get(..4)?.try_into().ok()?))))
}

/// Set or clear FILE_ATTRIBUTE_REPARSE_POINT in `user.DOSATTRIB`.
fn mark_reparse(fd: BorrowedFd<'_>, on: bool) -> Result<(), FsError> {
    let x = fstatx(fd).map_err(err)?;
    let old = dos_info(fd);
    let shown = to_stat(&x, old, (0, file_type(&x))).attributes & STORED_ATTRIBUTES;
    let attributes = if on { shown | FILE_ATTRIBUTE_REPARSE_POINT } else { shown };
    set_dos_info(fd, &stored_dos_info(&x, old, attributes)).map_err(err)
}

/// `user.DOSATTRIB` holding `attributes`, with the creation time as it
/// reads now (the stored one, else the birth time), so that it moves with
/// the file to Samba too.
fn stored_dos_info(x: &Statx, old: Option<DosInfo>, attributes: u32) -> DosInfo {
    DosInfo { attributes: Some(attributes), creation_time: Some(old.and_then(|d| d.creation_time).unwrap_or_else(|| birth_time(x))) }
}

/// See [`crate::Handle::set_reparse_point`].
pub(crate) fn set_reparse_point(h: &PosixFile, buffer: &[u8]) -> Result<(), FsError> {
    if h.read_only {
        return Err(FsError::ReadOnly);
    }
    let fd = h.fd.as_fd();
    if file_type(&fstatx(fd).map_err(err)?) != FileType::RegularFile {
        return Err(status(NtStatus::ACCESS_DENIED));
    }
    let (tag, _) = wire_posix::split_reparse_buffer(buffer).map_err(|_| status(NtStatus::IO_REPARSE_DATA_INVALID))?;
    if stored_tag(fd)?.is_some_and(|t| t != tag) {
        return Err(status(NtStatus::IO_REPARSE_TAG_MISMATCH));
    }
    xattr::set(fd, REPARSE_XATTR, buffer, XattrFlags::empty()).map_err(err)?;
    mark_reparse(fd, true)
}

/// See [`crate::Handle::delete_reparse_point`].
pub(crate) fn delete_reparse_point(h: &PosixFile, tag: u32) -> Result<(), FsError> {
    if h.read_only {
        return Err(FsError::ReadOnly);
    }
    let fd = h.fd.as_fd();
    match stored_tag(fd)? {
        None => Err(status(NtStatus::NOT_A_REPARSE_POINT)),
        Some(t) if t != tag => Err(status(NtStatus::IO_REPARSE_TAG_MISMATCH)),
        Some(_) => {
            xattr::remove(fd, REPARSE_XATTR).map_err(err)?;
            mark_reparse(fd, false)
        }
    }
}

/// `user.` attributes that are not EAs: Samba's and smbq's own records
/// (DOS attributes, streams, Samba's POSIX ACL inheritance flags and its
/// old EA and attribute stores).
fn private_xattr(name: &str) -> bool {
    name == dosattrib::NAME
        || name.starts_with("user.DosStream.")
        || matches!(name, "user.SAMBA_PAI" | "user.DosEAs" | "user.DosAttrib" | REPARSE_XATTR)
}

fn ea_err(e: Errno) -> FsError {
    match e {
        Errno::OPNOTSUPP => status(NtStatus::EAS_NOT_SUPPORTED),
        Errno::NOSPC | Errno::TOOBIG | Errno::RANGE => status(NtStatus::EA_TOO_LARGE),
        e => err(e),
    }
}

/// See [`Handle::eas`].
pub(crate) fn eas(h: &PosixFile) -> Result<Vec<Ea>, FsError> {
    let fd = h.fd.as_fd();
    let names = match xattr::list(fd) {
        Err(Errno::OPNOTSUPP) => return Ok(Vec::new()),
        r => r.map_err(err)?,
    };
    let mut out = Vec::new();
    for full in names {
        let Some(name) = full.strip_prefix("user.") else { continue };
        if private_xattr(&full) || name.len() > 255 {
            continue;
        }
        if let Some(value) = xattr::get(fd, &full).map_err(err)? {
            out.push(Ea { flags: 0, name: name.to_owned(), value });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// See [`Handle::set_eas`]. A name Samba or smbq keep their own records
/// under is ACCESS_DENIED.
pub(crate) fn set_eas(h: &PosixFile, eas: &[Ea]) -> Result<(), FsError> {
    if h.read_only {
        return Err(FsError::ReadOnly);
    }
    let fd = h.fd.as_fd();
    let existing = xattr::list(fd).map_err(ea_err)?;
    for e in eas {
        let full = existing
            .iter()
            .find(|n| n.strip_prefix("user.").is_some_and(|n| n.eq_ignore_ascii_case(&e.name)))
            .cloned()
            .unwrap_or_else(|| format!("user.{}", e.name));
        if private_xattr(&full) {
            return Err(status(NtStatus::ACCESS_DENIED));
        }
        if e.value.is_empty() {
            xattr::remove(fd, &full).map_err(ea_err)?;
        } else {
            xattr::set(fd, &full, &e.value, XattrFlags::empty()).map_err(ea_err)?;
        }
    }
    Ok(())
}

/// MS-FSA 2.1.5.10.22: the data ranges of `offset..end` (clipped at the
/// end of file) by SEEK_DATA/SEEK_HOLE, at most `max`, and whether more
/// follow.
pub(crate) fn allocated_ranges(h: &PosixFile, offset: u64, end: u64, max: usize) -> Result<(Vec<(u64, u64)>, bool), FsError> {
    let end = end.min(fstatx(h.fd.as_fd()).map_err(err)?.stx_size);
    let mut ranges = Vec::new();
    let mut at = offset;
    while at < end {
        let data = match rfs::seek(&h.fd, rfs::SeekFrom::Data(at)) {
            Ok(d) => d,
            // No data from `at` to the end of file.
            Err(Errno::NXIO) => break,
            Err(e) => return Err(err(e)),
        };
        if data >= end {
            break;
        }
        let hole = rfs::seek(&h.fd, rfs::SeekFrom::Hole(data)).map_err(err)?;
        if hole <= data {
            return Err(status(NtStatus::INTERNAL_ERROR));
        }
        if ranges.len() == max {
            return Ok((ranges, true));
        }
        ranges.push((data, hole.min(end) - data));
        at = hole;
    }
    Ok((ranges, false))
}

/// FSCTL_SET_ZERO_DATA: `fallocate(PUNCH_HOLE | KEEP_SIZE)` to deallocate,
/// else `fallocate(ZERO_RANGE | KEEP_SIZE)`, which keeps the blocks; where
/// the file system has neither (ZERO_RANGE on tmpfs), zeros are written.
/// Only the part below the end of file is zeroed, so that KEEP_SIZE does
/// not allocate blocks past it.
pub(crate) fn zero_range(h: &PosixFile, offset: u64, len: u64, deallocate: bool) -> Result<(), FsError> {
    check_writable(h)?;
    let end = offset.saturating_add(len).min(fstatx(h.fd.as_fd()).map_err(err)?.stx_size);
    if offset >= end {
        return Ok(());
    }
    let mode = if deallocate { FallocateFlags::PUNCH_HOLE } else { FallocateFlags::ZERO_RANGE };
    match rfs::fallocate(&h.fd, mode | FallocateFlags::KEEP_SIZE, offset, end - offset) {
        Err(Errno::OPNOTSUPP) => {
            let zeros = [0u8; 64 * 1024];
            let mut at = offset;
            while at < end {
                let n = (end - at).min(zeros.len() as u64) as usize;
                write_at(h, &[zeros.get(..n).unwrap_or(&zeros)], at)?;
                at += n as u64;
            }
            Ok(())
        }
        r => r.map_err(err),
    }
}

/// FSCTL_DUPLICATE_EXTENTS_TO_FILE by FICLONERANGE from `src`. EOPNOTSUPP
/// and EXDEV (no cloning here, or across file systems) are
/// INVALID_DEVICE_REQUEST; EINVAL (a range not aligned to the file
/// system's blocks) is INVALID_PARAMETER.
pub(crate) fn clone_range(h: &PosixFile, src: BorrowedFd<'_>, src_offset: u64, dst_offset: u64, len: u64) -> Result<(), FsError> {
    check_writable(h)?;
    let range = libc::file_clone_range { src_fd: i64::from(src.as_raw_fd()), src_offset, src_length: len, dest_offset: dst_offset };
    // SAFETY: FICLONERANGE reads one file_clone_range, which lives for the
    // call; both descriptors are open.
    let r = unsafe { libc::ioctl(h.fd.as_raw_fd(), libc::FICLONERANGE, &range) };
    if r == 0 {
        return Ok(());
    }
    match Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)) {
        Errno::OPNOTSUPP | Errno::XDEV => Err(status(NtStatus::INVALID_DEVICE_REQUEST)),
        Errno::INVAL => Err(status(NtStatus::INVALID_PARAMETER)),
        e => Err(err(e)),
    }
}

pub(crate) fn sync(h: &PosixFile) -> Result<(), FsError> {
    rfs::fsync(&h.fd).map_err(err)
}

/// `.` and `..` (the root's `..` is the root), then every entry sorted by
/// name. Names no SMB client could open again (not UTF-8, or failing
/// [`check_component`]) and entries that vanish while we stat them are
/// left out. A symlink shows its target's metadata when the target is
/// inside the share, else the link's own; through a POSIX view always
/// its own, and the share root's `..` shows nothing of what lies above
/// (no owner, inode 0), as on Samba.
fn read_dir(h: &PosixFile, path: &str) -> Result<Vec<DirEntry>, FsError> {
    let root = h.root.as_fd();
    let me = fstatx(h.fd.as_fd()).map_err(err)?;
    if file_type(&me) != FileType::Directory {
        return Err(status(NtStatus::INVALID_PARAMETER));
    }
    let is_root = same_file(&me, &fstatx(root).map_err(err)?);
    // The handle's own path, to resolve symlink targets beneath the root.
    let comps = split_in(h.posix, path).ok();
    let parent = match (&comps, is_root) {
        (Some(c), false) => {
            let p = c.split_last().map_or(&[][..], |(_, p)| p);
            beneath(root, &rel(p), OFlags::PATH, 0).ok().and_then(|fd| stat_fd(fd.as_fd()).ok())
        }
        _ => None,
    };
    let me = to_stat(&me, dos_info(h.fd.as_fd()), (0, FileType::Directory));
    let above = if h.posix { FileStat { file_id: 0, unix: None, ..me } } else { me };
    let mut out = vec![
        DirEntry { name: ".".to_owned(), stat: me },
        DirEntry { name: "..".to_owned(), stat: parent.unwrap_or(above) },
    ];
    let valid = if h.posix { check_posix_component } else { check_component };
    let mut entries = Vec::new();
    let dir_path = xattr::proc_path(h.fd.as_fd());
    let mut dir = rfs::Dir::read_from(&h.fd).map_err(err)?;
    while let Some(ent) = dir.read() {
        let ent = ent.map_err(err)?;
        let Ok(name) = ent.file_name().to_str() else {
            continue;
        };
        if name == "." || name == ".." || valid(name).is_err() {
            continue;
        }
        let Ok(x) = statx_at(h.fd.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let target = match (&comps, file_type(&x) == FileType::Symlink && !h.posix) {
            (Some(c), true) => beneath(root, &format!("{}/{name}", rel(c)), OFlags::PATH, 0)
                .ok()
                .and_then(|fd| stat_fd(fd.as_fd()).ok()),
            _ => None,
        };
        let stat = target.unwrap_or_else(|| {
            let path = format!("{dir_path}/{name}");
            let mut buf = [0u8; 128];
            let dos = rfs::lgetxattr(&path, dosattrib::NAME, &mut buf[..])
                .ok()
                .and_then(|n| dosattrib::decode(buf.get(..n)?));
            let tag = reparse_tag(&x, dos, || {
                let mut v = vec![0u8; wire_posix::MAX_REPARSE_BUFFER];
                let n = rfs::lgetxattr(&path, REPARSE_XATTR, &mut v[..]).ok()?;
                v.truncate(n);
                Some(v)
            });
            to_stat(&x, dos, tag)
        });
        entries.push(DirEntry { name: name.to_owned(), stat });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    out.extend(entries);
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn split_components() {
        assert_eq!(split("").unwrap(), Vec::<&str>::new());
        assert_eq!(split("a").unwrap(), ["a"]);
        assert_eq!(split("a\\b c\\d.txt").unwrap(), ["a", "b c", "d.txt"]);
        assert_eq!(split("a\\f::$DATA").unwrap(), ["a", "f"]);
        assert_eq!(split("f::$data").unwrap(), ["f"]);
        assert_eq!(split("...").unwrap(), ["..."], "only . and .. are special");
        assert_eq!(split("é::$DATA").unwrap(), ["é"]);
        // A multi-byte character where the suffix would start.
        assert!(split("éé€::$DATA").is_ok());
        assert!(split("aé€").is_ok());
    }

    #[test]
    fn rejected_names() {
        for p in [
            "\\",
            "\\a",
            "a\\",
            "a\\\\b",
            ".",
            "..",
            "a\\.",
            "a\\..\\b",
            "a/b",
            "/a",
            "a:b",
            "::$DATA",
            "a::$INDEX_ALLOCATION",
            "\\\\?\\C:\\x",
            "\\??\\C:\\x",
            "a*",
            "a?",
            "a<",
            "a>",
            "a\"",
            "a|",
            "a\0",
            "a\x1f",
        ] {
            assert!(matches!(split(p), Err(FsError::InvalidName)), "{p:?}");
        }
        assert!(check_name(&"x".repeat(MAX_COMPONENT)).is_ok());
        assert!(check_name(&"x".repeat(MAX_COMPONENT + 1)).is_err());
        let at_limit = vec!["x".repeat(200); 20].join("\\");
        assert!(at_limit.len() <= MAX_PATH && check_name(&at_limit).is_ok());
        let over = vec!["x".repeat(200); 21].join("\\");
        assert!(over.len() > MAX_PATH && check_name(&over).is_err());
        // DEL and non-ASCII are ordinary characters.
        assert!(check_name("a\x7f\u{fffd}").is_ok());
    }

    #[test]
    fn filetime_round_trip() {
        let t = timespec(Some(filetime(1_234_567_890, 987_654_300)));
        assert_eq!((t.tv_sec, t.tv_nsec), (1_234_567_890, 987_654_300));
        let t = timespec(Some(0));
        assert_eq!((t.tv_sec, t.tv_nsec), (-11_644_473_600, 0));
        assert_eq!(timespec(None).tv_nsec, rfs::UTIME_OMIT);
    }
}

/// An open file or directory of a [`PosixFs`]: its fd, and the share root
/// to resolve symlinks and `..` in a directory listing.
#[derive(Debug)]
pub(crate) struct PosixFile {
    fd: OwnedFd,
    root: Arc<OwnedFd>,
    read_only: bool,
    /// Opened through a POSIX view: listings show symlinks as themselves.
    posix: bool,
}

impl PosixFile {
    /// Its fd (O_PATH for a metadata-only open of an unreadable file).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Opened on a read-only share.
    pub(crate) fn read_only(&self) -> bool {
        self.read_only
    }
}

impl FileObject for PosixFile {
    fn stat(&self) -> Result<FileStat, FsError> {
        fstat(self)
    }
    fn read_append(&self, out: &mut Vec<u8>, len: usize, offset: u64) -> Result<usize, FsError> {
        read_append(self, out, len, offset)
    }
    fn read_cached(&self, out: &mut Vec<u8>, len: usize, offset: u64) -> Result<Option<usize>, FsError> {
        read_cached(self, out, len, offset)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<(), FsError> {
        write_at(self, bufs, offset)
    }
    fn set_len(&self, len: u64) -> Result<(), FsError> {
        set_len(self, len)
    }
    fn set_allocation(&self, len: u64) -> Result<(), FsError> {
        set_allocation(self, len)
    }
    fn set_times(&self, t: &SetTimes) -> Result<(), FsError> {
        set_times(self, t)
    }
    fn set_attributes(&self, attributes: u32) -> Result<(), FsError> {
        set_attributes(self, attributes)
    }
    fn eas(&self) -> Result<Vec<Ea>, FsError> {
        eas(self)
    }
    fn set_eas(&self, eas: &[Ea]) -> Result<(), FsError> {
        set_eas(self, eas)
    }
    fn sync(&self) -> Result<(), FsError> {
        sync(self)
    }
    fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>, FsError> {
        read_dir(self, path)
    }
    fn allocated_ranges(&self, offset: u64, end: u64, max: usize) -> Result<(Vec<(u64, u64)>, bool), FsError> {
        allocated_ranges(self, offset, end, max)
    }
    fn zero_range(&self, offset: u64, len: u64, deallocate: bool) -> Result<(), FsError> {
        zero_range(self, offset, len, deallocate)
    }
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }
    fn clone_range(&self, src: &dyn FileObject, src_offset: u64, dst_offset: u64, len: u64) -> Result<(), FsError> {
        let src = src.fd().ok_or(status(NtStatus::INVALID_DEVICE_REQUEST))?;
        clone_range(self, src, src_offset, dst_offset, len)
    }
    fn streams(&self) -> Result<Vec<StreamInfo>, FsError> {
        crate::streams::list(self)
    }
    fn security(&self) -> Result<Security, FsError> {
        security_fd(self.fd.as_fd())
    }
    fn set_security(&self, descriptor: &[u8]) -> Result<(), FsError> {
        set_security(self, descriptor)
    }
    fn chmod(&self, mode: u32) -> Result<(), FsError> {
        chmod(self, mode)
    }
    fn chown(&self, uid: Option<u32>, gid: Option<u32>) -> Result<(), FsError> {
        chown(self, uid, gid)
    }
    fn reparse_point(&self) -> Result<Vec<u8>, FsError> {
        reparse_point(self)
    }
    fn set_reparse_point(&self, buffer: &[u8]) -> Result<(), FsError> {
        set_reparse_point(self, buffer)
    }
    fn delete_reparse_point(&self, tag: u32) -> Result<(), FsError> {
        delete_reparse_point(self, tag)
    }
}
