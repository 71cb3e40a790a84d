//! SESSION_SETUP, LOGOFF (MS-SMB2 2.2.5–2.2.8).

use crate::header::HEADER_LEN;
use crate::reader::{at, Put, Reader};
use crate::{check_structure_size, DecodeError};

pub const REQUEST_SIZE: u16 = 25;
pub const RESPONSE_SIZE: u16 = 9;
pub const FLAG_BINDING: u8 = 0x01;

pub mod session_flags {
    pub const IS_GUEST: u16 = 0x1;
    pub const IS_NULL: u16 = 0x2;
    pub const ENCRYPT_DATA: u16 = 0x4;
}

#[derive(Debug)]
pub struct SessionSetupRequest<'a> {
    pub flags: u8,
    pub security_mode: u8,
    pub capabilities: u32,
    pub previous_session_id: u64,
    pub security_buffer: &'a [u8],
}

impl<'a> SessionSetupRequest<'a> {
    pub fn decode(msg: &'a [u8], max_token: usize) -> Result<Self, DecodeError> {
        let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
        check_structure_size(body, REQUEST_SIZE)?;
        let mut r = Reader::new(body);
        r.skip(2)?;
        let flags = r.u8()?;
        let security_mode = r.u8()?;
        let capabilities = r.u32()?;
        r.skip(4)?; // Channel
        let off = r.u16()? as usize;
        let len = r.u16()? as usize;
        let previous_session_id = r.u64()?;
        if len > max_token {
            return Err(DecodeError::TooLong);
        }
        let security_buffer = at(msg, off, len)?;
        Ok(SessionSetupRequest { flags, security_mode, capabilities, previous_session_id, security_buffer })
    }
}

pub fn encode_response(out: &mut Vec<u8>, header_start: usize, session_flags: u16, token: &[u8]) {
    out.u16(RESPONSE_SIZE);
    out.u16(session_flags);
    let off = out.len() + 4 - header_start;
    out.u16(off as u16);
    out.u16(token.len() as u16);
    if token.is_empty() {
        out.u8(0);
    } else {
        out.bytes(token);
    }
}

/// Build a SESSION_SETUP request body (our client and tests).
pub fn encode_request(out: &mut Vec<u8>, header_start: usize, security_mode: u8, token: &[u8]) {
    out.u16(REQUEST_SIZE);
    out.u8(0);
    out.u8(security_mode);
    out.u32(0);
    out.u32(0);
    let off = out.len() + 12 - header_start;
    out.u16(off as u16);
    out.u16(token.len() as u16);
    out.u64(0);
    out.bytes(token);
}

/// The 4-byte body shared by LOGOFF, TREE_DISCONNECT and ECHO requests and responses.
pub fn encode_empty(out: &mut Vec<u8>) {
    out.u16(4);
    out.u16(0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::Header;

    #[test]
    fn token_bounds() {
        let mut m = Vec::new();
        Header::default().encode(&mut m);
        encode_request(&mut m, 0, 1, b"tok");
        let r = SessionSetupRequest::decode(&m, 100).unwrap();
        assert_eq!(r.security_buffer, b"tok");
        assert_eq!(SessionSetupRequest::decode(&m, 2).unwrap_err(), DecodeError::TooLong);
        let n = m.len();
        assert_eq!(SessionSetupRequest::decode(&m[..n - 1], 100).unwrap_err(), DecodeError::OutOfBounds);
    }
}
