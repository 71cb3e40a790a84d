//! Alternate data streams (MS-FSCC 2.1.5, 2.4.43; MS-FSA 2.1.5.1,
//! 2.1.5.15.11.1) kept the way Samba's `vfs_streams_xattr` keeps them with
//! its defaults, so a share moved between Samba and smbq keeps its streams:
//! the stream `name` of a file is the extended attribute
//! `user.DosStream.name:$DATA` of that file (or directory), whose value is
//! the stream's data followed by one NUL byte.
//!
//! A stream is therefore as large as an extended attribute value can be,
//! less that byte: 65,535 bytes at most (XATTR_SIZE_MAX), and on ext4
//! without `ea_inode` all of a file's extended attributes share one block,
//! so about 4 KB there. A write or size change beyond what the file system
//! holds fails with STATUS_FILE_SYSTEM_LIMITATION, what Windows answers on
//! ReFS, whose streams are limited in size too (STATUS_DISK_FULL when the
//! volume itself is full). Stream names are matched without regard to
//! case, as NTFS does, and keep the case they were created with.

use crate::posix::{self, PosixFile};
use crate::{CreateAction, DirEntry, Disposition, FileObject, FileStat, FsError, Handle, Kind, OpenOptions, PosixFs, SetTimes};
use rustix::fs::{self as rfs, XattrFlags};
use rustix::io::Errno;
use smbq_wire::NtStatus;
use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex, Weak};

/// Samba's SAMBA_XATTR_DOSSTREAM_PREFIX.
const XATTR_PREFIX: &str = "user.DosStream.";
/// The stream type Samba stores after the name (`streams_xattr:store_stream_type = yes`).
const DATA_TYPE: &str = ":$DATA";
/// XATTR_SIZE_MAX: the largest value Linux stores.
const MAX_VALUE: usize = 65_536;
/// The largest stream: a value holds the data and a NUL byte.
pub const MAX_STREAM_SIZE: u64 = MAX_VALUE as u64 - 1;
/// XATTR_NAME_MAX: the longest attribute name, prefix and type included.
const MAX_XATTR_NAME: usize = 255;
/// MS-FSCC 2.1.5.3: at most 255 Unicode characters.
const MAX_STREAM_NAME: usize = 255;
const FILE_ATTRIBUTE_DIRECTORY: u32 = 0x0000_0010;
const FILE_ATTRIBUTE_NORMAL: u32 = 0x0000_0080;

/// Which stream of a file a path names (MS-FSCC 2.1.5:
/// `file[:stream[:type]]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream<'a> {
    /// No stream part: the file (or directory) itself.
    Unnamed,
    /// `file::$DATA`: the unnamed data stream, which a directory lacks.
    Data,
    /// `dir::$INDEX_ALLOCATION` or `dir:$I30:$INDEX_ALLOCATION`: the
    /// directory itself.
    Index,
    /// `file:name` or `file:name:$DATA`.
    Named(&'a str),
}

fn invalid<T>() -> Result<T, FsError> {
    Err(FsError::InvalidName)
}

/// Split a share-relative path into the path of the file and the stream
/// it names. Only the last component may carry a stream. A stream name
/// holds any character but `\ / :` and NUL (MS-FSCC 2.1.5.3; control
/// characters and wildcards are allowed), at most 255 of them; the type
/// (MS-FSCC 2.1.5.4) is `$DATA` or `$INDEX_ALLOCATION`, in any case.
/// Anything else (`file:`, `file:s:`, `file:s:$FOO`, `file::`) is
/// OBJECT_NAME_INVALID. The file part is left for the caller to check.
pub fn parse(path: &str) -> Result<(&str, Stream<'_>), FsError> {
    match path.split_once(':') {
        None => Ok((path, Stream::Unnamed)),
        Some(("", _)) => invalid(),
        Some((base, rest)) => Ok((base, stream_part(rest)?)),
    }
}

/// What follows the first `:` of a path, or of a rename target's `:`.
pub fn stream_part(rest: &str) -> Result<Stream<'_>, FsError> {
    let (name, kind) = match rest.split_once(':') {
        Some((name, kind)) => (name, Some(kind)),
        None => (rest, None),
    };
    let bad_name = name.chars().any(|c| matches!(c, '\\' | '/' | ':' | '\0'))
        || name.encode_utf16().count() > MAX_STREAM_NAME;
    if bad_name {
        return invalid();
    }
    let data = kind.is_none_or(|k| k.eq_ignore_ascii_case("$DATA"));
    let index = kind.is_some_and(|k| k.eq_ignore_ascii_case("$INDEX_ALLOCATION"));
    match (name, data, index) {
        ("", _, _) if kind.is_none() => invalid(),
        ("", true, _) => Ok(Stream::Data),
        ("", _, true) => Ok(Stream::Index),
        (n, _, true) if n.eq_ignore_ascii_case("$I30") => Ok(Stream::Index),
        (n, true, _) => Ok(Stream::Named(n)),
        _ => invalid(),
    }
}

/// The named stream a path names, if any (for callers that key opens by
/// stream).
pub fn named_stream(path: &str) -> Option<&str> {
    match parse(path) {
        Ok((_, Stream::Named(n))) => Some(n),
        _ => None,
    }
}

/// Stream names compare as NTFS compares them: without regard to case.
pub fn fold(name: &str) -> String {
    name.chars().map(crate::names::fold).collect()
}

/// One entry of FileStreamInformation (MS-FSCC 2.4.43): the name as
/// `:name:$DATA` (`::$DATA` for the unnamed stream), its size and
/// allocation size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    pub name: String,
    pub size: u64,
    pub allocation_size: u64,
}

/// Small streams are resident, as on NTFS, which reports the allocation
/// of resident data in 8-byte units.
fn allocation(size: u64) -> u64 {
    size.div_ceil(8).saturating_mul(8)
}

use crate::xattr::{get, list as names, remove, set};

/// The stream name an attribute holds (without its `:$DATA`), if it
/// holds one. Samba without `store_stream_type` leaves the type off.
fn stream_of_xattr(xattr: &str) -> Option<&str> {
    let name = xattr.strip_prefix(XATTR_PREFIX)?;
    let cut = name.len().checked_sub(DATA_TYPE.len()).filter(|&i| name.is_char_boundary(i));
    Some(match cut {
        Some(i) if name[i..].eq_ignore_ascii_case(DATA_TYPE) => &name[..i],
        _ => name,
    })
}

/// The attribute holding stream `name` of the file, whatever the case it
/// was created with.
fn find(fd: BorrowedFd<'_>, name: &str) -> Result<Option<String>, FsError> {
    let want = fold(name);
    Ok(names(fd)
        .map_err(io)?
        .into_iter()
        .find(|x| stream_of_xattr(x).is_some_and(|s| fold(s) == want)))
}

/// The attribute a new stream `name` is created as.
fn new_xattr(name: &str) -> Result<String, FsError> {
    let x = format!("{XATTR_PREFIX}{name}{DATA_TYPE}");
    if x.len() > MAX_XATTR_NAME {
        // The name fits NTFS but not an attribute name.
        return invalid();
    }
    Ok(x)
}

fn io(e: Errno) -> FsError {
    FsError::Io(e.into())
}

fn status(s: NtStatus) -> FsError {
    FsError::Status(s)
}

/// A write the attribute could not hold: the volume is full, or the file
/// system holds no larger attribute (ENOSPC on ext4 past its one block,
/// E2BIG past XATTR_SIZE_MAX).
fn no_room(fd: BorrowedFd<'_>, e: Errno) -> FsError {
    match e {
        Errno::NOSPC | Errno::TOOBIG | Errno::DQUOT => match rfs::fstatvfs(fd) {
            Ok(v) if v.f_bavail == 0 => status(NtStatus::DISK_FULL),
            _ => status(NtStatus::FILE_SYSTEM_LIMITATION),
        },
        e => io(e),
    }
}

/// The data streams of an open file for FileStreamInformation: `::$DATA`
/// first for a file (a directory has no unnamed data stream), then each
/// stream stored as an attribute, as Samba lists them.
pub(crate) fn list(f: &PosixFile) -> Result<Vec<StreamInfo>, FsError> {
    let st = f.stat()?;
    let mut out = Vec::new();
    if !st.is_dir {
        out.push(StreamInfo { name: "::$DATA".to_owned(), size: st.size, allocation_size: st.allocation_size });
    }
    let fd = f.fd();
    for x in names(fd).map_err(io)? {
        let Some(name) = stream_of_xattr(&x) else { continue };
        let Some(v) = get(fd, &x).map_err(io)? else { continue };
        let size = v.len().saturating_sub(1) as u64;
        out.push(StreamInfo { name: format!(":{name}{DATA_TYPE}"), size, allocation_size: allocation(size) });
    }
    Ok(out)
}

/// Remove every stream of a file (an overwrite or supersede of its
/// unnamed stream replaces the whole file, MS-FSA 2.1.5.1.2.1).
fn remove_all(fd: BorrowedFd<'_>) -> Result<(), FsError> {
    for x in names(fd).map_err(io)? {
        if stream_of_xattr(&x).is_some() {
            remove(fd, &x).map_err(io)?;
        }
    }
    Ok(())
}

/// What every open of one stream shares: the attribute it lives in now
/// (a rename moves it; `None` once renamed onto the unnamed stream), and
/// the lock that makes each read-modify-write of the value whole.
#[derive(Debug)]
struct Shared {
    xattr: Mutex<Option<String>>,
}

/// Key of a stream's [`Shared`]: the base file's id and the folded name.
type StreamKey = (u64, String);

/// The streams open anywhere in this process, so that all their opens
/// follow a rename and serialize their writes.
static OPEN: Mutex<Option<HashMap<StreamKey, Weak<Shared>>>> = Mutex::new(None);

fn with_open<T>(f: impl FnOnce(&mut HashMap<StreamKey, Weak<Shared>>) -> T) -> T {
    let mut g = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    map.retain(|_, w| w.strong_count() > 0);
    f(map)
}

fn shared(file_id: u64, xattr: &str, name: &str) -> Arc<Shared> {
    with_open(|m| {
        let key = (file_id, fold(name));
        if let Some(s) = m.get(&key).and_then(Weak::upgrade) {
            return s;
        }
        let s = Arc::new(Shared { xattr: Mutex::new(Some(xattr.to_owned())) });
        m.insert(key, Arc::downgrade(&s));
        s
    })
}

/// An open stream: its base file (opened with the stream's data access)
/// and the attribute holding its data.
#[derive(Debug)]
pub(crate) struct StreamFile {
    base: PosixFile,
    file_id: u64,
    shared: Arc<Shared>,
    write: bool,
}

fn disposition_of_base(d: Disposition) -> Disposition {
    match d {
        Disposition::Open | Disposition::Overwrite => Disposition::Open,
        _ => Disposition::OpenIf,
    }
}

/// Open the unnamed stream of `base` (the file itself), removing its named
/// streams when the open overwrites it.
fn open_unnamed(fs: &PosixFs, base: &str, opts: &OpenOptions) -> Result<(Handle, CreateAction), FsError> {
    let (file, is_dir, action, path) = posix::open(fs, base, opts)?;
    if matches!(action, CreateAction::Overwritten | CreateAction::Superseded) {
        remove_all(file.fd())?;
    }
    Ok((Handle::new(path, is_dir, Arc::new(file)), action))
}

/// [`crate::FileSystem::open`] for any path: the file, its unnamed data
/// stream (`::$DATA` refuses a directory: NOT_A_DIRECTORY asked as one,
/// FILE_IS_A_DIRECTORY else), its index (`::$INDEX_ALLOCATION`, a
/// directory), or a named stream.
pub(crate) fn open(fs: &PosixFs, path: &str, opts: &OpenOptions) -> Result<(Handle, CreateAction), FsError> {
    let (base, stream) = if fs.posix { (path, Stream::Unnamed) } else { parse(path)? };
    match stream {
        Stream::Unnamed => open_unnamed(fs, base, opts),
        Stream::Data | Stream::Named(_) if opts.kind == Kind::Directory => Err(status(NtStatus::NOT_A_DIRECTORY)),
        Stream::Data => open_unnamed(fs, base, &OpenOptions { kind: Kind::NonDirectory, ..*opts }),
        Stream::Index if opts.kind == Kind::NonDirectory => Err(status(NtStatus::FILE_IS_A_DIRECTORY)),
        Stream::Index => open_unnamed(fs, base, &OpenOptions { kind: Kind::Directory, ..*opts }),
        Stream::Named(name) => open_named(fs, base, name, opts),
    }
}

/// MS-FSA 2.1.5.1.2.1: open or create a named stream. A missing base file
/// is created when the disposition creates (as NTFS does); the stream
/// then obeys the disposition itself: OPEN and OVERWRITE need it,
/// CREATE refuses it (OBJECT_NAME_COLLISION), the overwriting ones empty it.
fn open_named(fs: &PosixFs, base: &str, name: &str, opts: &OpenOptions) -> Result<(Handle, CreateAction), FsError> {
    let creates = !matches!(opts.disposition, Disposition::Open | Disposition::Overwrite);
    if fs.read_only() && (opts.write || !matches!(opts.disposition, Disposition::Open | Disposition::OpenIf)) {
        return Err(FsError::ReadOnly);
    }
    let base_opts = OpenOptions { disposition: disposition_of_base(opts.disposition), kind: Kind::Any, read: true, write: opts.write };
    let (file, _, _, base_path) = posix::open(fs, base, &base_opts)?;
    let fd = file.fd();
    let existing = find(fd, name)?;
    let (xattr, action) = match (existing, opts.disposition) {
        (Some(_), Disposition::Create) => return Err(status(NtStatus::OBJECT_NAME_COLLISION)),
        (None, _) if !creates => return Err(status(NtStatus::OBJECT_NAME_NOT_FOUND)),
        (Some(x), Disposition::Open | Disposition::OpenIf) => (x, CreateAction::Opened),
        (Some(x), d) => {
            set(fd, &x, &[0], XattrFlags::REPLACE).map_err(|e| no_room(fd, e))?;
            (x, if d == Disposition::Supersede { CreateAction::Superseded } else { CreateAction::Overwritten })
        }
        (None, _) => {
            if fs.read_only() {
                return Err(FsError::ReadOnly);
            }
            let x = new_xattr(name)?;
            // Another open may create it meanwhile: then it is there.
            match set(fd, &x, &[0], XattrFlags::CREATE) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(no_room(fd, e)),
            }
            (x, CreateAction::Created)
        }
    };
    let stored = stream_of_xattr(&xattr).unwrap_or(name).to_owned();
    let file_id = file.stat()?.file_id;
    let shared = shared(file_id, &xattr, &stored);
    let path = format!("{base_path}:{stored}");
    let object = StreamFile { base: file, file_id, shared, write: opts.write };
    Ok((Handle::new(path, false, Arc::new(object)), action))
}

/// [`crate::FileSystem::stat_path`] for any path; a named stream reports
/// its base file's metadata with its own size ([`StreamFile::stat`]).
pub(crate) fn stat_path(fs: &PosixFs, path: &str) -> Result<FileStat, FsError> {
    let (base, stream) = if fs.posix { (path, Stream::Unnamed) } else { parse(path)? };
    let Stream::Named(name) = stream else { return posix::stat_path(fs, base) };
    let opts = OpenOptions { disposition: Disposition::Open, kind: Kind::Any, read: false, write: false };
    let (file, _, _, _) = posix::open(fs, base, &opts)?;
    let x = find(file.fd(), name)?.ok_or(status(NtStatus::OBJECT_NAME_NOT_FOUND))?;
    let v = get(file.fd(), &x).map_err(io)?.ok_or(status(NtStatus::OBJECT_NAME_NOT_FOUND))?;
    Ok(stream_stat(file.stat()?, v.len().saturating_sub(1) as u64))
}

/// A stream's metadata: its base file's, with its own sizes, as a file.
fn stream_stat(base: FileStat, size: u64) -> FileStat {
    let mut attributes = base.attributes & !FILE_ATTRIBUTE_DIRECTORY;
    if attributes == 0 {
        attributes = FILE_ATTRIBUTE_NORMAL;
    }
    FileStat { size, allocation_size: allocation(size), attributes, is_dir: false, ..base }
}

/// [`crate::FileSystem::unlink`] for any path: a named stream is removed
/// from its file, which stays.
pub(crate) fn unlink(fs: &PosixFs, path: &str, is_dir: bool) -> Result<(), FsError> {
    let (base, stream) = if fs.posix { (path, Stream::Unnamed) } else { parse(path)? };
    let Stream::Named(name) = stream else { return posix::unlink(fs, base, is_dir) };
    if fs.read_only() {
        return Err(FsError::ReadOnly);
    }
    let opts = OpenOptions { disposition: Disposition::Open, kind: Kind::Any, read: true, write: false };
    let (file, _, _, _) = posix::open(fs, base, &opts)?;
    let x = find(file.fd(), name)?.ok_or(status(NtStatus::OBJECT_NAME_NOT_FOUND))?;
    remove(file.fd(), &x).map_err(io)
}

impl StreamFile {
    fn xattr(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.shared.xattr.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stream's data; OBJECT_NAME_NOT_FOUND when its attribute went
    /// (removed from outside smbq).
    fn data(&self, xattr: &str) -> Result<Vec<u8>, FsError> {
        let mut v = get(self.base.fd(), xattr).map_err(io)?.ok_or(status(NtStatus::OBJECT_NAME_NOT_FOUND))?;
        v.pop();
        Ok(v)
    }

    fn store(&self, xattr: &str, mut data: Vec<u8>) -> Result<(), FsError> {
        data.push(0);
        set(self.base.fd(), xattr, &data, XattrFlags::empty()).map_err(|e| no_room(self.base.fd(), e))
    }

    fn check_write(&self) -> Result<(), FsError> {
        if self.base.read_only() {
            return Err(FsError::ReadOnly);
        }
        if !self.write {
            return Err(status(NtStatus::ACCESS_DENIED));
        }
        Ok(())
    }

    /// Change the data with `f` under the stream's lock; the result may be
    /// at most [`MAX_STREAM_SIZE`] long.
    fn modify(&self, end: u64, f: impl FnOnce(&mut Vec<u8>)) -> Result<(), FsError> {
        self.check_write()?;
        if end > MAX_STREAM_SIZE {
            return Err(status(NtStatus::FILE_SYSTEM_LIMITATION));
        }
        let g = self.xattr();
        let Some(x) = g.as_deref() else { return Err(status(NtStatus::INVALID_HANDLE)) };
        let mut data = self.data(x)?;
        f(&mut data);
        self.store(x, data)
    }

    /// MS-FSA 2.1.5.15.11.1: rename this stream to `target` (`:name`,
    /// `:name:$DATA`, or `::$DATA` for the unnamed stream). An existing
    /// target needs `replace` (else OBJECT_NAME_COLLISION), must be empty
    /// (else INVALID_PARAMETER) and not open (ACCESS_DENIED); a directory
    /// has no unnamed stream to rename onto (INVALID_PARAMETER). Renaming
    /// onto its own name (in any case) changes only the case. Returns the
    /// stream's new name (`None`: the unnamed stream).
    fn rename(&self, target: &str, replace: bool) -> Result<Option<String>, FsError> {
        let new = match target.strip_prefix(':').map(stream_part) {
            Some(Ok(s)) => s,
            _ => return Err(status(NtStatus::INVALID_PARAMETER)),
        };
        if self.base.read_only() {
            return Err(FsError::ReadOnly);
        }
        let fd = self.base.fd();
        let mut g = self.xattr();
        let Some(own) = g.clone() else { return Err(status(NtStatus::INVALID_HANDLE)) };
        let own_name = stream_of_xattr(&own).unwrap_or_default().to_owned();
        match new {
            Stream::Named(name) => {
                let existing = find(fd, name)?.filter(|x| *x != own);
                if let Some(t) = &existing {
                    let busy = with_open(|m| m.contains_key(&(self.file_id, fold(name))));
                    let size = get(fd, t).map_err(io)?.map_or(0, |v| v.len().saturating_sub(1));
                    if !replace {
                        return Err(status(NtStatus::OBJECT_NAME_COLLISION));
                    } else if busy {
                        return Err(status(NtStatus::ACCESS_DENIED));
                    } else if size != 0 {
                        return Err(status(NtStatus::INVALID_PARAMETER));
                    }
                }
                let x = new_xattr(name)?;
                if x == own {
                    return Ok(Some(own_name));
                }
                let data = get(fd, &own).map_err(io)?.ok_or(status(NtStatus::OBJECT_NAME_NOT_FOUND))?;
                if let Some(t) = existing.filter(|t| *t != x) {
                    remove(fd, &t).map_err(io)?;
                }
                set(fd, &x, &data, XattrFlags::empty()).map_err(|e| no_room(fd, e))?;
                remove(fd, &own).map_err(io)?;
                with_open(|m| {
                    if let Some(w) = m.remove(&(self.file_id, fold(&own_name))) {
                        m.insert((self.file_id, fold(name)), w);
                    }
                });
                *g = Some(x);
                Ok(Some(name.to_owned()))
            }
            Stream::Data => {
                let st = self.base.stat()?;
                if st.is_dir {
                    return Err(status(NtStatus::INVALID_PARAMETER));
                }
                if !replace {
                    return Err(status(NtStatus::OBJECT_NAME_COLLISION));
                }
                if st.size != 0 {
                    return Err(status(NtStatus::INVALID_PARAMETER));
                }
                let data = self.data(&own)?;
                // The base fd may be read-only: write through a new fd.
                let w = rfs::open(crate::xattr::proc_path(fd), rfs::OFlags::WRONLY | rfs::OFlags::CLOEXEC, rfs::Mode::empty()).map_err(io)?;
                let mut done = 0;
                while done < data.len() {
                    match rustix::io::pwrite(&w, data.get(done..).unwrap_or_default(), done as u64) {
                        Ok(0) => return Err(status(NtStatus::DISK_FULL)),
                        Ok(n) => done += n,
                        Err(Errno::INTR) => {}
                        Err(e) => return Err(io(e)),
                    }
                }
                remove(fd, &own).map_err(io)?;
                with_open(|m| m.remove(&(self.file_id, fold(&own_name))));
                *g = None;
                Ok(None)
            }
            Stream::Unnamed | Stream::Index => Err(status(NtStatus::INVALID_PARAMETER)),
        }
    }
}

impl FileObject for StreamFile {
    /// The base file's metadata (times, attributes, file id: Windows
    /// reports the file's id for its streams) with the stream's sizes.
    fn stat(&self) -> Result<FileStat, FsError> {
        let g = self.xattr();
        let Some(x) = g.as_deref() else { return self.base.stat() };
        let size = self.data(x)?.len() as u64;
        Ok(stream_stat(self.base.stat()?, size))
    }

    fn read_append(&self, out: &mut Vec<u8>, len: usize, offset: u64) -> Result<usize, FsError> {
        let g = self.xattr();
        let Some(x) = g.as_deref() else { return self.base.read_append(out, len, offset) };
        let data = self.data(x)?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(data.len());
        let end = start.saturating_add(len).min(data.len());
        let part = data.get(start..end).unwrap_or_default();
        out.extend_from_slice(part);
        Ok(part.len())
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<(), FsError> {
        if self.xattr().is_none() {
            return self.base.write_vectored_at(bufs, offset);
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return self.check_write();
        }
        let end = offset.checked_add(total as u64).ok_or(status(NtStatus::INVALID_PARAMETER))?;
        self.modify(end, |data| {
            // `end` is at most MAX_STREAM_SIZE, so these fit in usize.
            let (start, end) = (offset as usize, end as usize);
            if data.len() < end {
                data.resize(end, 0);
            }
            let mut at = start;
            for b in bufs {
                if let Some(dst) = data.get_mut(at..at + b.len()) {
                    dst.copy_from_slice(b);
                }
                at += b.len();
            }
        })
    }

    fn set_len(&self, len: u64) -> Result<(), FsError> {
        if self.xattr().is_none() {
            return self.base.set_len(len);
        }
        self.modify(len, |data| data.resize(len as usize, 0))
    }

    /// Below the size it truncates; above, nothing is reserved (an
    /// attribute holds what it holds).
    fn set_allocation(&self, len: u64) -> Result<(), FsError> {
        if self.xattr().is_none() {
            return self.base.set_allocation(len);
        }
        if len < self.stat()?.size {
            return self.set_len(len);
        }
        self.check_write()
    }

    /// Times, attributes and extended attributes are the file's, for all
    /// its streams.
    fn set_times(&self, t: &SetTimes) -> Result<(), FsError> {
        self.base.set_times(t)
    }

    fn set_attributes(&self, attributes: u32) -> Result<(), FsError> {
        self.base.set_attributes(attributes)
    }

    fn eas(&self) -> Result<Vec<smbq_wire::ea::Ea>, FsError> {
        self.base.eas()
    }

    fn set_eas(&self, eas: &[smbq_wire::ea::Ea]) -> Result<(), FsError> {
        self.base.set_eas(eas)
    }

    /// fsync of the file writes its attributes too.
    fn sync(&self) -> Result<(), FsError> {
        self.base.sync()
    }

    fn read_dir(&self, _path: &str) -> Result<Vec<DirEntry>, FsError> {
        Err(status(NtStatus::INVALID_PARAMETER))
    }

    /// The streams of the stream's file.
    fn streams(&self) -> Result<Vec<StreamInfo>, FsError> {
        list(&self.base)
    }

    fn rename_stream(&self, target: &str, replace: bool) -> Result<Option<String>, FsError> {
        self.rename(target, replace)
    }
}
