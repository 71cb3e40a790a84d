//! CLOSE request and response (MS-SMB2 2.2.15, 2.2.16).

use crate::header::HEADER_LEN;
use crate::reader::{Put, Reader};
use crate::{check_structure_size, DecodeError, FileId};

pub const REQUEST_SIZE: u16 = 24;
pub const RESPONSE_SIZE: u16 = 60;
/// SMB2_CLOSE_FLAG_POSTQUERY_ATTRIB.
pub const POSTQUERY_ATTRIB: u16 = 0x0001;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CloseRequest {
    pub flags: u16,
    pub file_id: FileId,
}

impl CloseRequest {
    pub fn decode(msg: &[u8]) -> Result<CloseRequest, DecodeError> {
        let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
        check_structure_size(body, REQUEST_SIZE)?;
        let mut r = Reader::new(body);
        r.skip(2)?;
        let flags = r.u16()?;
        r.skip(4)?;
        Ok(CloseRequest { flags, file_id: FileId::decode(&mut r)? })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u16(REQUEST_SIZE);
        out.u16(self.flags);
        out.u32(0);
        self.file_id.encode(out);
    }
}

/// The attributes a CLOSE with POSTQUERY_ATTRIB returns (all zero otherwise).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CloseResponse {
    pub flags: u16,
    pub creation_time: u64,
    pub last_access_time: u64,
    pub last_write_time: u64,
    pub change_time: u64,
    pub allocation_size: u64,
    pub end_of_file: u64,
    pub file_attributes: u32,
}

impl CloseResponse {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u16(RESPONSE_SIZE);
        out.u16(self.flags);
        out.u32(0);
        out.u64(self.creation_time);
        out.u64(self.last_access_time);
        out.u64(self.last_write_time);
        out.u64(self.change_time);
        out.u64(self.allocation_size);
        out.u64(self.end_of_file);
        out.u32(self.file_attributes);
    }

    pub fn decode(msg: &[u8]) -> Result<CloseResponse, DecodeError> {
        let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
        check_structure_size(body, RESPONSE_SIZE)?;
        let mut r = Reader::new(body);
        r.skip(2)?;
        let flags = r.u16()?;
        r.skip(4)?;
        Ok(CloseResponse {
            flags,
            creation_time: r.u64()?,
            last_access_time: r.u64()?,
            last_write_time: r.u64()?,
            change_time: r.u64()?,
            allocation_size: r.u64()?,
            end_of_file: r.u64()?,
            file_attributes: r.u32()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let req = CloseRequest { flags: POSTQUERY_ATTRIB, file_id: FileId { persistent: 1, volatile: 2 } };
        let mut m = vec![0u8; HEADER_LEN];
        req.encode(&mut m);
        assert_eq!(m.len(), HEADER_LEN + 24);
        assert_eq!(CloseRequest::decode(&m).unwrap(), req);
        assert_eq!(CloseRequest::decode(&m[..HEADER_LEN + 23]), Err(DecodeError::Truncated));
        m[HEADER_LEN] = 25;
        assert_eq!(CloseRequest::decode(&m), Err(DecodeError::BadStructureSize));

        let resp = CloseResponse { flags: 1, creation_time: 1, last_access_time: 2, last_write_time: 3, change_time: 4, allocation_size: 5, end_of_file: 6, file_attributes: 0x20 };
        let mut m = vec![0u8; HEADER_LEN];
        resp.encode(&mut m);
        assert_eq!(m.len(), HEADER_LEN + 60);
        assert_eq!(CloseResponse::decode(&m).unwrap(), resp);
    }
}
