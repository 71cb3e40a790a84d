//! SMB2/3 wire format: headers, PDUs, negotiate and create contexts, FSCC
//! information classes, transform header and Direct TCP framing; for the
//! named pipes of IPC$, the DCE/RPC header, NDR and srvsvc's codes.
//! Decoders borrow their input and never panic; encoders append to a `Vec<u8>`.
//!
//! One PDU per module; each module cites its MS-SMB2 section.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::indexing_slicing, clippy::unwrap_used))]

pub mod reader;
pub mod status;
pub mod header;
pub mod framing;
pub mod transform;
pub mod negotiate;
pub mod session_setup;
pub mod tree_connect;
pub mod create;
pub mod close;
pub mod flush;
pub mod oplock_break;
pub mod lease;
pub mod read;
pub mod write;
pub mod lock;
pub mod ioctl;
pub mod query_directory;
pub mod query_info;
pub mod set_info;
pub mod fscc;
pub mod ea;
pub mod security;
pub mod posix;
pub mod multistream;
pub mod ndr;
pub mod dcerpc;
pub mod srvsvc;

pub use header::{Command, Dialect, Header};
pub use reader::{Put, Reader};
pub use status::NtStatus;

/// Why bytes from the peer could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("message truncated")]
    Truncated,
    #[error("offset/length outside the message")]
    OutOfBounds,
    #[error("bad protocol id")]
    BadProtocolId,
    #[error("bad structure size")]
    BadStructureSize,
    #[error("bad UTF-16 string")]
    BadString,
    #[error("length above the allowed maximum")]
    TooLong,
    #[error("invalid field value")]
    Invalid,
}

impl From<DecodeError> for NtStatus {
    fn from(e: DecodeError) -> NtStatus {
        match e {
            DecodeError::BadString => NtStatus::OBJECT_NAME_INVALID,
            _ => NtStatus::INVALID_PARAMETER,
        }
    }
}

/// The 16-byte FileId (MS-SMB2 2.2.14.1): persistent and volatile parts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FileId {
    pub persistent: u64,
    pub volatile: u64,
}

impl FileId {
    /// All-ones FileId: "the file of the previous related operation".
    pub const RELATED: FileId = FileId { persistent: u64::MAX, volatile: u64::MAX };

    pub fn decode(r: &mut Reader<'_>) -> Result<FileId, DecodeError> {
        Ok(FileId { persistent: r.u64()?, volatile: r.u64()? })
    }
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u64(self.persistent);
        out.u64(self.volatile);
    }
}

/// Read the body's StructureSize and check it (MS-SMB2 3.3.5.2.6 rule: the
/// low bit marks a variable part, so the fixed part is `size & !1` bytes).
pub fn check_structure_size(body: &[u8], expected: u16) -> Result<(), DecodeError> {
    let mut r = Reader::new(body);
    if r.u16()? != expected {
        return Err(DecodeError::BadStructureSize);
    }
    if body.len() < (expected & !1) as usize {
        return Err(DecodeError::Truncated);
    }
    Ok(())
}
