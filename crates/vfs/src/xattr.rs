//! Extended attributes of an open object, through its fd. The f*xattr
//! calls refuse O_PATH fds (EBADF), which lookups give; for those the
//! path calls go through `/proc/self/fd/N`, which names the same object.

use rustix::fs::{self as rfs, XattrFlags};
use rustix::io::Errno;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Linux's largest extended attribute value (XATTR_SIZE_MAX).
pub(crate) const MAX_VALUE: usize = 65536;
/// Linux's largest list of names (XATTR_LIST_MAX).
const MAX_LIST: usize = 65536;

pub(crate) fn proc_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Read `name` into `buf`: its length, `None` when the object has no
/// such attribute (ERANGE when `buf` is too small).
pub(crate) fn get_into(fd: BorrowedFd<'_>, name: &str, buf: &mut [u8]) -> Result<Option<usize>, Errno> {
    let r = match rfs::fgetxattr(fd, name, &mut *buf) {
        Err(Errno::BADF) => rfs::getxattr(proc_path(fd), name, buf),
        r => r,
    };
    match r {
        Ok(n) => Ok(Some(n)),
        Err(Errno::NODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The value of `name`, `None` when the object has no such attribute.
/// Most values fit 4 KiB; a larger one is read again into a buffer of the
/// largest size Linux allows.
pub(crate) fn get(fd: BorrowedFd<'_>, name: &str) -> Result<Option<Vec<u8>>, Errno> {
    let mut buf = vec![0u8; 4096];
    let n = match get_into(fd, name, &mut buf) {
        Err(Errno::RANGE) => {
            buf.resize(MAX_VALUE, 0);
            get_into(fd, name, &mut buf)?
        }
        r => r?,
    };
    Ok(n.map(|n| {
        buf.truncate(n);
        buf
    }))
}

/// Set `name` to `value`; `flags` may ask that it exist already
/// (REPLACE) or not yet (CREATE).
pub(crate) fn set(fd: BorrowedFd<'_>, name: &str, value: &[u8], flags: XattrFlags) -> Result<(), Errno> {
    match rfs::fsetxattr(fd, name, value, flags) {
        Err(Errno::BADF) => rfs::setxattr(proc_path(fd), name, value, flags),
        r => r,
    }
}

/// Remove `name`; one that is not there is no error.
pub(crate) fn remove(fd: BorrowedFd<'_>, name: &str) -> Result<(), Errno> {
    let r = match rfs::fremovexattr(fd, name) {
        Err(Errno::BADF) => rfs::removexattr(proc_path(fd), name),
        r => r,
    };
    match r {
        Err(Errno::NODATA) => Ok(()),
        r => r,
    }
}

/// Every attribute name the object has (in the kernel's order; names
/// that are not UTF-8 are left out). The list is read into a buffer of
/// the size the kernel gives, or, should it grow meanwhile, of the
/// largest size Linux allows.
pub(crate) fn list(fd: BorrowedFd<'_>) -> Result<Vec<String>, Errno> {
    let read = |buf: &mut [u8]| match rfs::flistxattr(fd, &mut *buf) {
        Err(Errno::BADF) => rfs::listxattr(proc_path(fd), buf),
        r => r,
    };
    let len = match rfs::flistxattr_query(fd) {
        Err(Errno::BADF) => rfs::listxattr_query(proc_path(fd)),
        r => r,
    }?;
    if len == 0 {
        return Ok(Vec::new());
    }
    let mut buf = vec![0u8; len];
    let n = match read(&mut buf) {
        Err(Errno::RANGE) => {
            buf.resize(MAX_LIST, 0);
            read(&mut buf)?
        }
        r => r?,
    };
    Ok(buf
        .get(..n)
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .filter_map(|n| String::from_utf8(n.to_vec()).ok())
        .collect())
}
