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
            // As Samba answers on a read-only share (MEDIA_WRITE_PROTECTED
            // is for snapshots and read-only media).
            FsError::ReadOnly => NtStatus::ACCESS_DENIED,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn io(e: Errno) -> NtStatus {
        FsError::Io(e.into()).status()
    }

    #[test]
    fn errno_to_status() {
        assert_eq!(io(Errno::NOENT), NtStatus::OBJECT_NAME_NOT_FOUND);
        assert_eq!(io(Errno::NOTDIR), NtStatus::OBJECT_PATH_NOT_FOUND);
        assert_eq!(io(Errno::EXIST), NtStatus::OBJECT_NAME_COLLISION);
        assert_eq!(io(Errno::ACCESS), NtStatus::ACCESS_DENIED);
        assert_eq!(io(Errno::PERM), NtStatus::ACCESS_DENIED);
        assert_eq!(io(Errno::XDEV), NtStatus::ACCESS_DENIED);
        assert_eq!(io(Errno::BADF), NtStatus::ACCESS_DENIED);
        assert_eq!(io(Errno::ISDIR), NtStatus::FILE_IS_A_DIRECTORY);
        assert_eq!(io(Errno::NOTEMPTY), NtStatus::DIRECTORY_NOT_EMPTY);
        assert_eq!(io(Errno::NOSPC), NtStatus::DISK_FULL);
        assert_eq!(io(Errno::DQUOT), NtStatus::DISK_FULL);
        assert_eq!(io(Errno::FBIG), NtStatus::DISK_FULL);
        assert_eq!(io(Errno::NAMETOOLONG), NtStatus::OBJECT_NAME_INVALID);
        assert_eq!(io(Errno::ROFS), NtStatus::MEDIA_WRITE_PROTECTED);
        assert_eq!(io(Errno::LOOP), NtStatus::OBJECT_NAME_NOT_FOUND);
        assert_eq!(io(Errno::MFILE), NtStatus::TOO_MANY_OPENED_FILES);
        assert_eq!(io(Errno::NFILE), NtStatus::TOO_MANY_OPENED_FILES);
        assert_eq!(io(Errno::INVAL), NtStatus::INVALID_PARAMETER);
        assert_eq!(io(Errno::NOMEM), NtStatus::NO_MEMORY);
        assert_eq!(io(Errno::BUSY), NtStatus::SHARING_VIOLATION);
        assert_eq!(io(Errno::TXTBSY), NtStatus::SHARING_VIOLATION);
        assert_eq!(io(Errno::OPNOTSUPP), NtStatus::NOT_SUPPORTED);
        assert_eq!(io(Errno::NOSYS), NtStatus::NOT_IMPLEMENTED);
        assert_eq!(io(Errno::IO), NtStatus::UNSUCCESSFUL);
        let no_errno = std::io::Error::other("x");
        assert_eq!(FsError::Io(no_errno).status(), NtStatus::UNSUCCESSFUL);
    }

    #[test]
    fn variants_to_status() {
        assert_eq!(FsError::InvalidName.status(), NtStatus::OBJECT_NAME_INVALID);
        assert_eq!(FsError::Escape.status(), NtStatus::ACCESS_DENIED);
        assert_eq!(FsError::ReadOnly.status(), NtStatus::ACCESS_DENIED);
        assert_eq!(
            FsError::Status(NtStatus::DELETE_PENDING).status(),
            NtStatus::DELETE_PENDING
        );
        assert_eq!(
            NtStatus::from(FsError::ReadOnly),
            NtStatus::ACCESS_DENIED
        );
    }
}
