//! LOCK request and response (MS-SMB2 2.2.26, 2.2.26.1, 2.2.27).

use crate::reader::{Put, Reader};
use crate::{check_structure_size, DecodeError, FileId};

pub const REQUEST_SIZE: u16 = 48;
pub const RESPONSE_SIZE: u16 = 4;
/// Bytes of one SMB2_LOCK_ELEMENT (2.2.26.1).
pub const ELEMENT_LEN: usize = 24;
/// More elements than this in one request is refused (INVALID_PARAMETER);
/// clients send one, or a handful when they batch unlocks.
pub const MAX_LOCKS: usize = 64;

/// SMB2_LOCK_ELEMENT Flags (2.2.26.1).
pub mod flags {
    pub const SHARED: u32 = 0x01;
    pub const EXCLUSIVE: u32 = 0x02;
    pub const UNLOCK: u32 = 0x04;
    pub const FAIL_IMMEDIATELY: u32 = 0x10;
}

/// One SMB2_LOCK_ELEMENT (2.2.26.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockElement {
    pub offset: u64,
    pub length: u64,
    pub flags: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRequest {
    /// LockSequenceNumber (low 4 bits) and LockSequenceIndex (high 28
    /// bits), as one field.
    pub lock_sequence: u32,
    pub file_id: FileId,
    pub locks: Vec<LockElement>,
}

impl LockRequest {
    /// `msg` is the element from the SMB2 header on. LockCount 0, a count
    /// above [`MAX_LOCKS`], or elements past the message are errors.
    pub fn decode(msg: &[u8]) -> Result<LockRequest, DecodeError> {
        let body = msg.get(crate::header::HEADER_LEN..).ok_or(DecodeError::Truncated)?;
        check_structure_size(body, REQUEST_SIZE)?;
        let mut r = Reader::new(body);
        r.skip(2)?;
        let count = r.u16()? as usize;
        let lock_sequence = r.u32()?;
        let file_id = FileId::decode(&mut r)?;
        //= MS-SMB2 3.3.5.14
        //# If the LockCount field in the SMB2 LOCK Request is zero, the
        //# server MUST fail the request with STATUS_INVALID_PARAMETER.
        if count == 0 {
            return Err(DecodeError::Invalid);
        }
        if count > MAX_LOCKS {
            return Err(DecodeError::TooLong);
        }
        let mut e = r.sub(count * ELEMENT_LEN)?;
        let mut locks = Vec::with_capacity(count);
        for _ in 0..count {
            let offset = e.u64()?;
            let length = e.u64()?;
            let flags = e.u32()?;
            e.skip(4)?;
            locks.push(LockElement { offset, length, flags });
        }
        Ok(LockRequest { lock_sequence, file_id, locks })
    }

    /// The request body (for tests and the client side).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u16(REQUEST_SIZE);
        out.u16(self.locks.len() as u16);
        out.u32(self.lock_sequence);
        self.file_id.encode(out);
        for l in &self.locks {
            out.u64(l.offset);
            out.u64(l.length);
            out.u32(l.flags);
            out.u32(0);
        }
    }
}

/// SMB2 LOCK Response (2.2.27): StructureSize 4 and Reserved.
pub fn encode_response(out: &mut Vec<u8>) {
    out.u16(RESPONSE_SIZE);
    out.u16(0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::HEADER_LEN;

    fn msg(req: &LockRequest) -> Vec<u8> {
        let mut m = vec![0u8; HEADER_LEN];
        req.encode(&mut m);
        m
    }

    #[test]
    fn round_trip() {
        let req = LockRequest {
            lock_sequence: 0x123ab1,
            file_id: FileId { persistent: 7, volatile: 9 },
            locks: vec![
                LockElement { offset: u64::MAX, length: u64::MAX, flags: flags::EXCLUSIVE | flags::FAIL_IMMEDIATELY },
                LockElement { offset: 10, length: 0, flags: flags::UNLOCK },
            ],
        };
        let m = msg(&req);
        assert_eq!(m.len(), HEADER_LEN + 24 + 2 * 24);
        assert_eq!(LockRequest::decode(&m).unwrap(), req);
    }

    #[test]
    fn hostile_counts() {
        let one = LockElement { offset: 0, length: 1, flags: flags::SHARED };
        let mut req = LockRequest { lock_sequence: 0, file_id: FileId::default(), locks: vec![one] };
        let mut m = msg(&req);
        // LockCount 0 (the structure still carries one element).
        m[HEADER_LEN + 2] = 0;
        assert_eq!(LockRequest::decode(&m), Err(DecodeError::Invalid));
        // LockCount 2 with only one element present.
        m[HEADER_LEN + 2] = 2;
        assert_eq!(LockRequest::decode(&m), Err(DecodeError::Truncated));
        // Too many.
        req.locks = vec![one; MAX_LOCKS + 1];
        assert_eq!(LockRequest::decode(&msg(&req)), Err(DecodeError::TooLong));
        req.locks = vec![one; MAX_LOCKS];
        assert_eq!(LockRequest::decode(&msg(&req)).unwrap().locks.len(), MAX_LOCKS);
        // Truncated fixed part.
        let m = msg(&LockRequest { lock_sequence: 0, file_id: FileId::default(), locks: vec![one] });
        assert!(LockRequest::decode(&m[..HEADER_LEN + 40]).is_err());
    }

    #[test]
    fn response() {
        let mut out = Vec::new();
        encode_response(&mut out);
        assert_eq!(out, [4, 0, 0, 0]);
    }
}
