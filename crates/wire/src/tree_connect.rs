//! TREE_CONNECT (MS-SMB2 2.2.9, 2.2.10).

use crate::header::HEADER_LEN;
use crate::reader::{at, utf16le, Put, Reader};
use crate::{check_structure_size, DecodeError};

pub const REQUEST_SIZE: u16 = 9;
pub const RESPONSE_SIZE: u16 = 16;
pub const MAX_PATH: usize = 1024;

pub const SHARE_TYPE_DISK: u8 = 1;
pub const SHARE_TYPE_PIPE: u8 = 2;

pub mod share_flags {
    pub const MANUAL_CACHING: u32 = 0x0000;
    pub const NO_CACHING: u32 = 0x0030;
    pub const ENCRYPT_DATA: u32 = 0x8000;
}

/// `\\server\share` as the client sent it.
pub fn decode_request(msg: &[u8]) -> Result<String, DecodeError> {
    let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
    check_structure_size(body, REQUEST_SIZE)?;
    let mut r = Reader::new(body);
    r.skip(4)?;
    let off = r.u16()? as usize;
    let len = r.u16()? as usize;
    if len > MAX_PATH {
        return Err(DecodeError::TooLong);
    }
    utf16le(at(msg, off, len)?)
}

pub fn encode_response(out: &mut Vec<u8>, share_type: u8, flags: u32, capabilities: u32, maximal_access: u32) {
    out.u16(RESPONSE_SIZE);
    out.u8(share_type);
    out.u8(0);
    out.u32(flags);
    out.u32(capabilities);
    out.u32(maximal_access);
}

/// The share name part of `\\server\share` (case preserved).
pub fn share_name(path: &str) -> Option<&str> {
    let p = path.strip_prefix("\\\\")?;
    let (_, share) = p.split_once('\\')?;
    if share.is_empty() || share.contains('\\') {
        return None;
    }
    Some(share)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn share_names() {
        assert_eq!(share_name("\\\\127.0.0.1\\share"), Some("share"));
        assert_eq!(share_name("\\\\h\\IPC$"), Some("IPC$"));
        assert_eq!(share_name("\\\\h\\"), None);
        assert_eq!(share_name("share"), None);
        assert_eq!(share_name("\\\\h\\a\\b"), None);
    }
}
