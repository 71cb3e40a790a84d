//! Linux errors to NTSTATUS (MS-ERREF 2.3.1; the mapping Samba's
//! `map_nt_error_from_unix` uses).

use rustix::io::Errno;
use smbq_wire::NtStatus;

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A name the share can never contain (streams, `..`, wildcards...).
    #[error("invalid name")]
    InvalidName,
    /// A path that would leave the share.
    #[error("path escapes the share")]
    Escape,
    #[error("share is read-only")]
    ReadOnly,
    #[error("{0:?}")]
    Status(NtStatus),
}

impl FsError {
    /// The NTSTATUS an SMB2 response carries for this error.
    pub fn status(&self) -> NtStatus {
        match self {
            FsError::Io(e) => Errno::from_io_error(e).map_or(NtStatus::UNSUCCESSFUL, errno_status),
            FsError::InvalidName => NtStatus::OBJECT_NAME_INVALID,
            FsError::Escape => NtStatus::ACCESS_DENIED,
            FsError::ReadOnly => NtStatus::MEDIA_WRITE_PROTECTED,
            FsError::Status(s) => *s,
        }
    }
}

/// errno to NTSTATUS. Context-specific cases (a missing parent, a
/// non-empty directory on rmdir, rename across mounts) are decided where
/// they happen and arrive as [`FsError::Status`].
fn errno_status(e: Errno) -> NtStatus {
    match e {
        Errno::NOENT => NtStatus::OBJECT_NAME_NOT_FOUND,
        // A path component that is not a directory.
        Errno::NOTDIR => NtStatus::OBJECT_PATH_NOT_FOUND,
        Errno::EXIST => NtStatus::OBJECT_NAME_COLLISION,
        // EXDEV: openat2(RESOLVE_BENEATH) refused to leave the share.
        // EBADF: the fd lacks the access (a write on a read-only open).
        Errno::ACCESS | Errno::PERM | Errno::XDEV | Errno::BADF => NtStatus::ACCESS_DENIED,
        Errno::ISDIR => NtStatus::FILE_IS_A_DIRECTORY,
        Errno::NOTEMPTY => NtStatus::DIRECTORY_NOT_EMPTY,
        Errno::NOSPC | Errno::DQUOT | Errno::FBIG => NtStatus::DISK_FULL,
        Errno::NAMETOOLONG => NtStatus::OBJECT_NAME_INVALID,
        Errno::ROFS => NtStatus::MEDIA_WRITE_PROTECTED,
        // Too many symlinks, a symlink loop, or a /proc magic link.
        Errno::LOOP => NtStatus::OBJECT_NAME_NOT_FOUND,
        Errno::MFILE | Errno::NFILE => NtStatus::TOO_MANY_OPENED_FILES,
        Errno::INVAL => NtStatus::INVALID_PARAMETER,
        Errno::NOMEM => NtStatus::NO_MEMORY,
        Errno::BUSY | Errno::TXTBSY => NtStatus::SHARING_VIOLATION,
        Errno::OPNOTSUPP => NtStatus::NOT_SUPPORTED,
        Errno::NOSYS => NtStatus::NOT_IMPLEMENTED,
        _ => NtStatus::UNSUCCESSFUL,
    }
}
