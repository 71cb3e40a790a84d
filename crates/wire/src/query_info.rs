//! QUERY_INFO request and response (MS-SMB2 2.2.37, 2.2.38). The
//! response has the QUERY_DIRECTORY response's shape; the information
//! structures are in [`crate::fscc`].

use crate::header::HEADER_LEN;
use crate::reader::{at, Put, Reader};
use crate::{check_structure_size, DecodeError, FileId};

pub use crate::query_directory::{begin_response, decode_response, finish_response};

pub const REQUEST_SIZE: u16 = 41;
/// Longest input buffer accepted (quota SIDs, EA names): 64 KiB.
pub const MAX_INPUT: usize = 65536;

/// InfoType values (2.2.37).
pub mod info_type {
    pub const FILE: u8 = 1;
    pub const FILESYSTEM: u8 = 2;
    pub const SECURITY: u8 = 3;
    pub const QUOTA: u8 = 4;
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryInfoRequest<'a> {
    pub info_type: u8,
    pub class: u8,
    pub output_buffer_length: u32,
    pub input: &'a [u8],
    pub additional_information: u32,
    pub flags: u32,
    pub file_id: FileId,
}

impl<'a> QueryInfoRequest<'a> {
    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
        check_structure_size(body, REQUEST_SIZE)?;
        let mut r = Reader::new(body);
        r.skip(2)?;
        let info_type = r.u8()?;
        let class = r.u8()?;
        let output_buffer_length = r.u32()?;
        let input_off = r.u16()? as usize;
        r.skip(2)?;
        let input_len = r.u32()? as usize;
        let additional_information = r.u32()?;
        let flags = r.u32()?;
        let file_id = FileId::decode(&mut r)?;
        if input_len > MAX_INPUT {
            return Err(DecodeError::TooLong);
        }
        let input = at(msg, input_off, input_len)?;
        Ok(QueryInfoRequest { info_type, class, output_buffer_length, input, additional_information, flags, file_id })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u16(REQUEST_SIZE);
        out.u8(self.info_type);
        out.u8(self.class);
        out.u32(self.output_buffer_length);
        out.u16(if self.input.is_empty() { 0 } else { (HEADER_LEN + 40) as u16 });
        out.u16(0);
        out.u32(self.input.len() as u32);
        out.u32(self.additional_information);
        out.u32(self.flags);
        self.file_id.encode(out);
        out.bytes(self.input);
        if self.input.is_empty() {
            out.u8(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let req = QueryInfoRequest {
            info_type: info_type::SECURITY,
            class: 0,
            output_buffer_length: 4096,
            input: &[],
            additional_information: 7,
            flags: 0,
            file_id: FileId { persistent: 1, volatile: 2 },
        };
        let mut m = vec![0u8; HEADER_LEN];
        req.encode(&mut m);
        assert_eq!(m.len(), HEADER_LEN + 41);
        assert_eq!(QueryInfoRequest::decode(&m).unwrap(), req);
        let with_input = QueryInfoRequest { input: b"sid-list", ..req.clone() };
        let mut m = vec![0u8; HEADER_LEN];
        with_input.encode(&mut m);
        assert_eq!(QueryInfoRequest::decode(&m).unwrap(), with_input);
        let mut bad = m.clone();
        bad[HEADER_LEN + 12..HEADER_LEN + 16].copy_from_slice(&100u32.to_le_bytes());
        assert_eq!(QueryInfoRequest::decode(&bad), Err(DecodeError::OutOfBounds));
        bad[HEADER_LEN + 12..HEADER_LEN + 16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(QueryInfoRequest::decode(&bad), Err(DecodeError::TooLong));
    }
}
