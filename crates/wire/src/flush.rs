//! FLUSH request and response (MS-SMB2 2.2.17, 2.2.18).

use crate::header::HEADER_LEN;
use crate::reader::{Put, Reader};
use crate::{check_structure_size, DecodeError, FileId};

pub const REQUEST_SIZE: u16 = 24;
pub const RESPONSE_SIZE: u16 = 4;

/// The FileId to flush.
pub fn decode_request(msg: &[u8]) -> Result<FileId, DecodeError> {
    let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
    check_structure_size(body, REQUEST_SIZE)?;
    let mut r = Reader::new(body);
    r.skip(8)?; // StructureSize, Reserved1, Reserved2
    FileId::decode(&mut r)
}

pub fn encode_request(out: &mut Vec<u8>, file_id: FileId) {
    out.u16(REQUEST_SIZE);
    out.u16(0);
    out.u32(0);
    file_id.encode(out);
}

pub fn encode_response(out: &mut Vec<u8>) {
    out.u16(RESPONSE_SIZE);
    out.u16(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let fid = FileId { persistent: 3, volatile: 4 };
        let mut m = vec![0u8; HEADER_LEN];
        encode_request(&mut m, fid);
        assert_eq!(decode_request(&m).unwrap(), fid);
        assert_eq!(decode_request(&m[..HEADER_LEN + 10]), Err(DecodeError::Truncated));
        let mut r = Vec::new();
        encode_response(&mut r);
        assert_eq!(r, [4, 0, 0, 0]);
    }
}
