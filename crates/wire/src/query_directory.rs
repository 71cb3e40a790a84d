//! QUERY_DIRECTORY request and response (MS-SMB2 2.2.33, 2.2.34).

use crate::header::HEADER_LEN;
use crate::reader::{at, put_utf16le, utf16_len, utf16le, Put, Reader};
use crate::{check_structure_size, DecodeError, FileId};

pub const REQUEST_SIZE: u16 = 33;
pub const RESPONSE_SIZE: u16 = 9;
/// Longest search pattern accepted, in bytes of UTF-16.
pub const MAX_PATTERN: usize = 65534;

/// Flags (2.2.33).
pub mod flags {
    pub const RESTART_SCANS: u8 = 0x01;
    pub const RETURN_SINGLE_ENTRY: u8 = 0x02;
    pub const INDEX_SPECIFIED: u8 = 0x04;
    pub const REOPEN: u8 = 0x10;
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryDirectoryRequest {
    pub class: u8,
    pub flags: u8,
    pub file_index: u32,
    pub file_id: FileId,
    /// The search pattern; empty when the client sent none.
    pub pattern: String,
    pub output_buffer_length: u32,
}

impl QueryDirectoryRequest {
    pub fn decode(msg: &[u8]) -> Result<QueryDirectoryRequest, DecodeError> {
        let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
        check_structure_size(body, REQUEST_SIZE)?;
        let mut r = Reader::new(body);
        r.skip(2)?;
        let class = r.u8()?;
        let flags = r.u8()?;
        let file_index = r.u32()?;
        let file_id = FileId::decode(&mut r)?;
        let name_off = r.u16()? as usize;
        let name_len = r.u16()? as usize;
        let output_buffer_length = r.u32()?;
        if name_len > MAX_PATTERN {
            return Err(DecodeError::TooLong);
        }
        if name_len > 0 && name_off < HEADER_LEN + 32 {
            return Err(DecodeError::OutOfBounds);
        }
        let pattern = utf16le(at(msg, name_off, name_len)?)?;
        Ok(QueryDirectoryRequest { class, flags, file_index, file_id, pattern, output_buffer_length })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u16(REQUEST_SIZE);
        out.u8(self.class);
        out.u8(self.flags);
        out.u32(self.file_index);
        self.file_id.encode(out);
        out.u16((HEADER_LEN + 32) as u16);
        out.u16(utf16_len(&self.pattern) as u16);
        out.u32(self.output_buffer_length);
        put_utf16le(out, &self.pattern);
        if self.pattern.is_empty() {
            out.u8(0);
        }
    }
}

/// Write the fixed part; the caller appends the entries and then calls
/// [`finish_response`] with the returned start of the output buffer.
/// `header_start` is where this element's SMB2 header starts in `out`.
pub fn begin_response(out: &mut Vec<u8>, header_start: usize) -> usize {
    out.u16(RESPONSE_SIZE);
    out.u16((out.len() + 6 - header_start) as u16);
    out.u32(0);
    out.len()
}

/// Set OutputBufferLength to what follows `data_start`; an empty buffer
/// still carries one byte (the variable part is never empty on the wire).
pub fn finish_response(out: &mut Vec<u8>, data_start: usize) {
    let len = out.len() - data_start;
    out.set_u32(data_start - 4, len as u32);
    if len == 0 {
        out.u8(0);
    }
}

/// The output buffer of a response element (for our client and tests).
pub fn decode_response(msg: &[u8]) -> Result<&[u8], DecodeError> {
    let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
    check_structure_size(body, RESPONSE_SIZE)?;
    let mut r = Reader::new(body);
    r.skip(2)?;
    let off = r.u16()? as usize;
    let len = r.u32()? as usize;
    at(msg, off, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip() {
        let req = QueryDirectoryRequest {
            class: 37,
            flags: flags::RESTART_SCANS,
            file_index: 0,
            file_id: FileId { persistent: 1, volatile: 2 },
            pattern: "*.txt".into(),
            output_buffer_length: 65536,
        };
        let mut m = vec![0u8; HEADER_LEN];
        req.encode(&mut m);
        assert_eq!(QueryDirectoryRequest::decode(&m).unwrap(), req);
        let empty = QueryDirectoryRequest { pattern: String::new(), ..req.clone() };
        let mut m0 = vec![0u8; HEADER_LEN];
        empty.encode(&mut m0);
        assert_eq!(QueryDirectoryRequest::decode(&m0).unwrap(), empty);

        let mut bad = m.clone();
        bad[HEADER_LEN + 26..HEADER_LEN + 28].copy_from_slice(&12u16.to_le_bytes());
        assert_eq!(QueryDirectoryRequest::decode(&bad), Err(DecodeError::OutOfBounds));
        let mut bad = m.clone();
        bad[HEADER_LEN + 24..HEADER_LEN + 26].copy_from_slice(&10u16.to_le_bytes());
        assert_eq!(QueryDirectoryRequest::decode(&bad), Err(DecodeError::OutOfBounds));
    }

    #[test]
    fn response_round_trip() {
        let mut m = vec![0u8; HEADER_LEN];
        let start = begin_response(&mut m, 0);
        assert_eq!(start, HEADER_LEN + 8);
        m.extend_from_slice(&[1, 2, 3]);
        finish_response(&mut m, start);
        assert_eq!(decode_response(&m).unwrap(), &[1, 2, 3]);

        let mut m = vec![0u8; HEADER_LEN];
        let start = begin_response(&mut m, 0);
        finish_response(&mut m, start);
        assert_eq!(m.len(), HEADER_LEN + 9);
        assert_eq!(decode_response(&m).unwrap(), &[] as &[u8]);
    }
}
