//! OPLOCK_BREAK notification, acknowledgment and response (MS-SMB2
//! 2.2.23.1, 2.2.24.1, 2.2.25.1): all three have the same 24-byte body.

use crate::header::HEADER_LEN;
use crate::reader::{Put, Reader};
use crate::{check_structure_size, DecodeError, FileId};

pub const SIZE: u16 = 24;

/// Oplock levels (MS-SMB2 2.2.13).
pub mod level {
    pub const NONE: u8 = 0x00;
    pub const II: u8 = 0x01;
    pub const EXCLUSIVE: u8 = 0x08;
    pub const BATCH: u8 = 0x09;
    pub const LEASE: u8 = 0xFF;
}

/// An oplock break acknowledgment (MS-SMB2 2.2.24.1): the level the
/// client now holds and its file.
pub fn decode_ack(msg: &[u8]) -> Result<(u8, FileId), DecodeError> {
    let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
    check_structure_size(body, SIZE)?;
    let mut r = Reader::new(body);
    r.skip(2)?; // StructureSize
    let level = r.u8()?;
    r.skip(5)?; // Reserved, Reserved2
    Ok((level, FileId::decode(&mut r)?))
}

/// The body of a notification, acknowledgment or response.
pub fn encode(out: &mut Vec<u8>, level: u8, file_id: FileId) {
    out.u16(SIZE);
    out.u8(level);
    out.u8(0);
    out.u32(0);
    file_id.encode(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let fid = FileId { persistent: 7, volatile: 9 };
        let mut m = vec![0u8; HEADER_LEN];
        encode(&mut m, level::II, fid);
        assert_eq!(m.len(), HEADER_LEN + 24);
        assert_eq!(&m[HEADER_LEN..HEADER_LEN + 4], &[24, 0, 1, 0]);
        assert_eq!(decode_ack(&m).unwrap(), (level::II, fid));
        assert_eq!(decode_ack(&m[..HEADER_LEN + 20]), Err(DecodeError::Truncated));
    }
}
