//! READ request and response (MS-SMB2 2.2.19, 2.2.20).
//!
//! The response's data is not part of [`encode_response_head`]: the server
//! reads the file straight into the output buffer after the 16-byte head.

use crate::header::HEADER_LEN;
use crate::reader::{at, at_head, Put, Reader};
use crate::{check_structure_size, DecodeError, FileId};

pub const REQUEST_SIZE: u16 = 49;
pub const RESPONSE_SIZE: u16 = 17;
/// Header plus the response's fixed part: where the data starts.
pub const DATA_OFFSET: u8 = (HEADER_LEN + 16) as u8;
/// SMB2_READFLAG_READ_UNBUFFERED (3.0.2+).
pub const READ_UNBUFFERED: u8 = 0x01;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadRequest {
    pub flags: u8,
    pub length: u32,
    pub offset: u64,
    pub file_id: FileId,
    pub minimum_count: u32,
    pub channel: u32,
    pub remaining_bytes: u32,
}

impl ReadRequest {
    pub fn decode(msg: &[u8]) -> Result<ReadRequest, DecodeError> {
        let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
        check_structure_size(body, REQUEST_SIZE)?;
        let mut r = Reader::new(body);
        r.skip(3)?; // StructureSize, Padding
        let flags = r.u8()?;
        let length = r.u32()?;
        let offset = r.u64()?;
        let file_id = FileId::decode(&mut r)?;
        let minimum_count = r.u32()?;
        let channel = r.u32()?;
        let remaining_bytes = r.u32()?;
        let info_off = r.u16()? as usize;
        let info_len = r.u16()? as usize;
        // ReadChannelInfo (RDMA) is not used, but must lie in the message.
        at(msg, info_off, info_len)?;
        Ok(ReadRequest { flags, length, offset, file_id, minimum_count, channel, remaining_bytes })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u16(REQUEST_SIZE);
        out.u8(DATA_OFFSET);
        out.u8(self.flags);
        out.u32(self.length);
        out.u64(self.offset);
        self.file_id.encode(out);
        out.u32(self.minimum_count);
        out.u32(self.channel);
        out.u32(self.remaining_bytes);
        out.u16(0);
        out.u16(0);
        out.u8(0);
    }
}

/// The fixed part of a READ response announcing `data_len` bytes at
/// [`DATA_OFFSET`]; the caller appends exactly that many bytes.
pub fn encode_response_head(out: &mut Vec<u8>, data_len: u32, data_remaining: u32) {
    out.u16(RESPONSE_SIZE);
    out.u8(DATA_OFFSET);
    out.u8(0);
    out.u32(data_len);
    out.u32(data_remaining);
    out.u32(0); // Flags (3.1.1) / Reserved2
}

/// Patch DataLength of a head written at `head` (for short reads).
pub fn set_data_len(out: &mut Vec<u8>, head: usize, data_len: u32) {
    out.set_u32(head + 4, data_len);
}

/// The data of a READ response element (for our client and tests).
pub fn decode_response(msg: &[u8]) -> Result<&[u8], DecodeError> {
    decode_response_head(msg, 0).map(|(d, _)| d)
}

/// [`decode_response`] for a response of which `msg` is the first part and
/// `more` bytes follow elsewhere (kept in the chunks they arrived in): the
/// data starts inside `msg` and may run on into them. Returns its part
/// inside `msg` and DataLength.
pub fn decode_response_head(msg: &[u8], more: usize) -> Result<(&[u8], usize), DecodeError> {
    let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
    check_structure_size(body, RESPONSE_SIZE)?;
    let mut r = Reader::new(body);
    r.skip(2)?;
    let off = r.u8()? as usize;
    r.skip(1)?;
    let len = r.u32()? as usize;
    Ok((at_head(msg, off, len, more)?, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip() {
        let req = ReadRequest {
            flags: 0,
            length: 65536,
            offset: 1 << 40,
            file_id: FileId { persistent: 9, volatile: 10 },
            minimum_count: 1,
            channel: 0,
            remaining_bytes: 0,
        };
        let mut m = vec![0u8; HEADER_LEN];
        req.encode(&mut m);
        assert_eq!(m.len(), HEADER_LEN + 49);
        assert_eq!(ReadRequest::decode(&m).unwrap(), req);
        // Channel info outside the message.
        let mut bad = m.clone();
        bad[HEADER_LEN + 44..HEADER_LEN + 46].copy_from_slice(&0xFFF0u16.to_le_bytes());
        bad[HEADER_LEN + 46..HEADER_LEN + 48].copy_from_slice(&16u16.to_le_bytes());
        assert_eq!(ReadRequest::decode(&bad), Err(DecodeError::OutOfBounds));
        assert_eq!(ReadRequest::decode(&m[..HEADER_LEN + 47]), Err(DecodeError::Truncated));
    }

    #[test]
    fn response_round_trip() {
        let mut m = vec![0u8; HEADER_LEN];
        let head = m.len();
        encode_response_head(&mut m, 5, 0);
        assert_eq!(m.len(), DATA_OFFSET as usize);
        m.extend_from_slice(b"hello world");
        set_data_len(&mut m, head, 11);
        assert_eq!(decode_response(&m).unwrap(), b"hello world");
        // The first 6 data bytes here, 5 elsewhere.
        let head = &m[..DATA_OFFSET as usize + 6];
        assert_eq!(decode_response_head(head, 5).unwrap(), (&b"hello "[..], 11));
        assert_eq!(decode_response_head(head, 4), Err(DecodeError::OutOfBounds));
        // Data starting beyond the head.
        let mut far = m.clone();
        far[HEADER_LEN + 2] = DATA_OFFSET + 8;
        assert_eq!(decode_response_head(&far[..DATA_OFFSET as usize + 6], 100), Err(DecodeError::OutOfBounds));
        m.truncate(m.len() - 1);
        assert_eq!(decode_response(&m), Err(DecodeError::OutOfBounds));
    }
}
