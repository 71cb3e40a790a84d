//! Linux errors to NTSTATUS (MS-ERREF 2.3.1; the mapping Samba's
//! `map_nt_error_from_unix` uses).

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
    pub fn status(&self) -> NtStatus {
        todo!("map errno to NTSTATUS")
    }
}
