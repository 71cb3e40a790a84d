//! SET_INFO request and response (MS-SMB2 2.2.39, 2.2.40). The buffer's
//! structures are decoded by [`crate::fscc`].

use crate::header::HEADER_LEN;
use crate::reader::{at, Put, Reader};
use crate::{check_structure_size, DecodeError, FileId};

pub const REQUEST_SIZE: u16 = 33;
pub const RESPONSE_SIZE: u16 = 2;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetInfoRequest<'a> {
    pub info_type: u8,
    pub class: u8,
    pub buffer: &'a [u8],
    pub additional_information: u32,
    pub file_id: FileId,
}

impl<'a> SetInfoRequest<'a> {
    /// The buffer must lie inside this element.
    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
        check_structure_size(body, REQUEST_SIZE)?;
        let mut r = Reader::new(body);
        r.skip(2)?;
        let info_type = r.u8()?;
        let class = r.u8()?;
        let len = r.u32()? as usize;
        let off = r.u16()? as usize;
        r.skip(2)?;
        let additional_information = r.u32()?;
        let file_id = FileId::decode(&mut r)?;
        if len > 0 && off < HEADER_LEN + 32 {
            return Err(DecodeError::OutOfBounds);
        }
        let buffer = at(msg, off, len)?;
        Ok(SetInfoRequest { info_type, class, buffer, additional_information, file_id })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u16(REQUEST_SIZE);
        out.u8(self.info_type);
        out.u8(self.class);
        out.u32(self.buffer.len() as u32);
        out.u16((HEADER_LEN + 32) as u16);
        out.u16(0);
        out.u32(self.additional_information);
        self.file_id.encode(out);
        out.bytes(self.buffer);
        if self.buffer.is_empty() {
            out.u8(0);
        }
    }
}

pub fn encode_response(out: &mut Vec<u8>) {
    out.u16(RESPONSE_SIZE);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fscc::{class, RenameInfo};

    #[test]
    fn round_trip() {
        let mut info = Vec::new();
        RenameInfo { replace_if_exists: false, root_directory: 0, name: "b".into() }.encode(&mut info);
        let req = SetInfoRequest { info_type: 1, class: class::RENAME, buffer: &info, additional_information: 0, file_id: FileId { persistent: 7, volatile: 8 } };
        let mut m = vec![0u8; HEADER_LEN];
        req.encode(&mut m);
        let d = SetInfoRequest::decode(&m).unwrap();
        assert_eq!(d, req);
        assert_eq!(RenameInfo::decode(d.buffer).unwrap().name, "b");

        let mut bad = m.clone();
        bad[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(SetInfoRequest::decode(&bad), Err(DecodeError::OutOfBounds));
        let mut bad = m.clone();
        bad[HEADER_LEN + 8..HEADER_LEN + 10].copy_from_slice(&8u16.to_le_bytes());
        assert_eq!(SetInfoRequest::decode(&bad), Err(DecodeError::OutOfBounds));

        let mut r = Vec::new();
        encode_response(&mut r);
        assert_eq!(r, [2, 0]);
    }
}
