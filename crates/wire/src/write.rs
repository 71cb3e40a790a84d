//! WRITE request and response (MS-SMB2 2.2.21, 2.2.22).

use crate::header::HEADER_LEN;
use crate::reader::{at, at_head, Put, Reader};
use crate::{check_structure_size, DecodeError, FileId};

pub const REQUEST_SIZE: u16 = 49;
pub const RESPONSE_SIZE: u16 = 17;
/// The request's fixed part: StructureSize counts the buffer's first byte.
pub const HEAD_LEN: usize = REQUEST_SIZE as usize - 1;
/// SMB2_WRITEFLAG_WRITE_THROUGH.
pub const WRITE_THROUGH: u32 = 0x0000_0001;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteRequest<'a> {
    pub offset: u64,
    pub file_id: FileId,
    pub channel: u32,
    pub remaining_bytes: u32,
    pub flags: u32,
    /// The payload, borrowed from the message.
    pub data: &'a [u8],
}

impl<'a> WriteRequest<'a> {
    /// DataOffset/Length must lie inside this element (MS-SMB2 3.3.5.13).
    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        Self::decode_head(msg, 0).map(|(r, _)| r)
    }

    /// [`decode`](Self::decode) for a message of which `msg` is the first
    /// part and `more` bytes follow elsewhere (a transport that hands on a
    /// large message's payload in the chunks it arrived in). The data must
    /// start inside `msg` and may run on into those bytes; `data` is its
    /// part inside `msg`, and the Length field comes with the request.
    pub fn decode_head(msg: &'a [u8], more: usize) -> Result<(Self, usize), DecodeError> {
        let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
        check_structure_size(body, REQUEST_SIZE)?;
        let mut r = Reader::new(body);
        r.skip(2)?;
        let data_off = r.u16()? as usize;
        let len = r.u32()? as usize;
        let offset = r.u64()?;
        let file_id = FileId::decode(&mut r)?;
        let channel = r.u32()?;
        let remaining_bytes = r.u32()?;
        let info_off = r.u16()? as usize;
        let info_len = r.u16()? as usize;
        let flags = r.u32()?;
        if len > 0 && data_off < HEADER_LEN + HEAD_LEN {
            return Err(DecodeError::OutOfBounds);
        }
        at(msg, info_off, info_len)?;
        let data = at_head(msg, data_off, len, more)?;
        Ok((WriteRequest { offset, file_id, channel, remaining_bytes, flags, data }, len))
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_head(out);
        out.bytes(self.data);
        if self.data.is_empty() {
            out.u8(0);
        }
    }

    /// The fixed part alone ([`HEAD_LEN`] bytes, Length from `data`): the
    /// data follows it in the message, for a sender that passes it on
    /// without copying it in.
    pub fn encode_head(&self, out: &mut Vec<u8>) {
        out.u16(REQUEST_SIZE);
        out.u16((HEADER_LEN + HEAD_LEN) as u16);
        out.u32(self.data.len() as u32);
        out.u64(self.offset);
        self.file_id.encode(out);
        out.u32(self.channel);
        out.u32(self.remaining_bytes);
        out.u16(0);
        out.u16(0);
        out.u32(self.flags);
    }
}

pub fn encode_response(out: &mut Vec<u8>, count: u32) {
    out.u16(RESPONSE_SIZE);
    out.u16(0);
    out.u32(count);
    out.u32(0); // Remaining
    out.u16(0); // WriteChannelInfoOffset
    out.u16(0); // WriteChannelInfoLength
}

/// Count from a WRITE response element (for our client and tests).
pub fn decode_response(msg: &[u8]) -> Result<u32, DecodeError> {
    let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
    check_structure_size(body, RESPONSE_SIZE)?;
    let mut r = Reader::new(body);
    r.skip(4)?;
    r.u32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let req = WriteRequest {
            offset: 4096,
            file_id: FileId { persistent: 1, volatile: 1 },
            channel: 0,
            remaining_bytes: 0,
            flags: WRITE_THROUGH,
            data: b"payload",
        };
        let mut m = vec![0u8; HEADER_LEN];
        req.encode(&mut m);
        assert_eq!(WriteRequest::decode(&m).unwrap(), req);
        let empty = WriteRequest { data: &[], ..req };
        let mut m0 = vec![0u8; HEADER_LEN];
        empty.encode(&mut m0);
        assert_eq!(WriteRequest::decode(&m0).unwrap(), empty);

        let mut r = vec![0u8; HEADER_LEN];
        encode_response(&mut r, 7);
        assert_eq!(r.len(), HEADER_LEN + 16);
        assert_eq!(decode_response(&r).unwrap(), 7);
    }

    #[test]
    fn head_then_data_is_the_whole_request() {
        let req = WriteRequest { offset: 1 << 20, file_id: FileId { persistent: 3, volatile: 4 }, channel: 0, remaining_bytes: 0, flags: 0, data: b"some data" };
        let (mut whole, mut parts) = (Vec::new(), Vec::new());
        req.encode(&mut whole);
        req.encode_head(&mut parts);
        assert_eq!(parts.len(), HEAD_LEN);
        parts.extend_from_slice(req.data);
        assert_eq!(parts, whole);
    }

    #[test]
    fn data_stays_inside_the_element() {
        let req = WriteRequest { offset: 0, file_id: FileId::default(), channel: 0, remaining_bytes: 0, flags: 0, data: b"abcd" };
        let mut m = vec![0u8; HEADER_LEN];
        req.encode(&mut m);
        let mut long = m.clone();
        long[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&5u32.to_le_bytes());
        assert_eq!(WriteRequest::decode(&long), Err(DecodeError::OutOfBounds));
        let mut huge = m.clone();
        huge[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(WriteRequest::decode(&huge), Err(DecodeError::OutOfBounds));
        // DataOffset pointing into the fixed part.
        let mut low = m.clone();
        low[HEADER_LEN + 2..HEADER_LEN + 4].copy_from_slice(&64u16.to_le_bytes());
        assert_eq!(WriteRequest::decode(&low), Err(DecodeError::OutOfBounds));
    }

    #[test]
    fn data_may_run_on_past_the_head() {
        let data = [9u8; 100];
        let req = WriteRequest { offset: 0, file_id: FileId::default(), channel: 0, remaining_bytes: 0, flags: 0, data: &data };
        let mut m = vec![0u8; HEADER_LEN];
        req.encode(&mut m);
        let head = &m[..HEADER_LEN + HEAD_LEN + 30];
        let (r, len) = WriteRequest::decode_head(head, 70).unwrap();
        assert_eq!((r.data, len), (&data[..30], 100));
        // Whole in the head, with nothing more: the same as decode.
        assert_eq!(WriteRequest::decode_head(&m, 0).unwrap(), (req, 100));
        // Length reaching past what follows.
        assert_eq!(WriteRequest::decode_head(head, 69), Err(DecodeError::OutOfBounds));
        // Data starting beyond the head.
        let mut far = m.clone();
        far[HEADER_LEN + 2..HEADER_LEN + 4].copy_from_slice(&((HEADER_LEN + HEAD_LEN + 40) as u16).to_le_bytes());
        far[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&10u32.to_le_bytes());
        assert_eq!(WriteRequest::decode_head(&far[..HEADER_LEN + HEAD_LEN + 30], 70), Err(DecodeError::OutOfBounds));
    }
}
