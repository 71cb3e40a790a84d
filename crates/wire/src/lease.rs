//! Leases on the wire: the lease create context (MS-SMB2 2.2.13.2.8,
//! 2.2.13.2.10, 2.2.14.2.10, 2.2.14.2.11), the lease break notification
//! (2.2.23.2), acknowledgment (2.2.24.2) and response (2.2.25.2).

use crate::header::HEADER_LEN;
use crate::reader::{Put, Reader};
use crate::DecodeError;

/// SMB2_LEASE_FLAG_BREAK_IN_PROGRESS, SMB2_LEASE_FLAG_PARENT_LEASE_KEY_SET.
pub const FLAG_BREAK_IN_PROGRESS: u32 = 0x2;
pub const FLAG_PARENT_LEASE_KEY_SET: u32 = 0x4;
/// SMB2_NOTIFY_BREAK_LEASE_FLAG_ACK_REQUIRED.
pub const BREAK_ACK_REQUIRED: u32 = 0x1;
/// StructureSize of a lease break notification and of an acknowledgment.
pub const NOTIFICATION_SIZE: u16 = 44;
pub const ACK_SIZE: u16 = 36;

/// A lease request or response context: v1 is 32 bytes, v2 52.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseContext {
    pub key: [u8; 16],
    pub state: u32,
    pub flags: u32,
    /// Version 2 only: the parent directory's lease key and the epoch.
    pub v2: Option<([u8; 16], u16)>,
}

impl LeaseContext {
    pub fn decode(data: &[u8]) -> Result<LeaseContext, DecodeError> {
        if data.len() != 32 && data.len() != 52 {
            return Err(DecodeError::Invalid);
        }
        let mut r = Reader::new(data);
        let key = r.array()?;
        let state = r.u32()?;
        let flags = r.u32()?;
        r.skip(8)?; // LeaseDuration
        let v2 = if data.len() == 52 {
            let parent = r.array()?;
            Some((parent, r.u16()?))
        } else {
            None
        };
        Ok(LeaseContext { key, state, flags, v2 })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(52);
        out.bytes(&self.key);
        out.u32(self.state);
        out.u32(self.flags);
        out.u64(0);
        if let Some((parent, epoch)) = self.v2 {
            out.bytes(&parent);
            out.u16(epoch);
            out.u16(0);
        }
        out
    }
}

/// A lease break notification body (2.2.23.2).
pub fn encode_break(out: &mut Vec<u8>, epoch: u16, ack_required: bool, key: &[u8; 16], current: u32, new: u32) {
    out.u16(NOTIFICATION_SIZE);
    out.u16(epoch);
    out.u32(if ack_required { BREAK_ACK_REQUIRED } else { 0 });
    out.bytes(key);
    out.u32(current);
    out.u32(new);
    out.u32(0); // BreakReason
    out.u32(0); // AccessMaskHint
    out.u32(0); // ShareMaskHint
}

/// A lease break acknowledgment (2.2.24.2): the key and the state kept.
pub fn decode_ack(msg: &[u8]) -> Result<([u8; 16], u32), DecodeError> {
    let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
    crate::check_structure_size(body, ACK_SIZE)?;
    let mut r = Reader::new(body);
    r.skip(8)?; // StructureSize, Reserved, Flags
    let key = r.array()?;
    Ok((key, r.u32()?))
}

/// A lease break acknowledgment or response body (2.2.24.2, 2.2.25.2).
pub fn encode_ack(out: &mut Vec<u8>, key: &[u8; 16], state: u32) {
    out.u16(ACK_SIZE);
    out.u16(0);
    out.u32(0);
    out.bytes(key);
    out.u32(state);
    out.u64(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_round_trip() {
        let v1 = LeaseContext { key: [1; 16], state: 7, flags: 0, v2: None };
        assert_eq!(v1.encode().len(), 32);
        assert_eq!(LeaseContext::decode(&v1.encode()).unwrap(), v1);
        let v2 = LeaseContext { key: [2; 16], state: 3, flags: FLAG_PARENT_LEASE_KEY_SET, v2: Some(([9; 16], 4)) };
        assert_eq!(v2.encode().len(), 52);
        assert_eq!(LeaseContext::decode(&v2.encode()).unwrap(), v2);
        assert_eq!(LeaseContext::decode(&[0; 31]), Err(DecodeError::Invalid));
    }

    #[test]
    fn break_and_ack() {
        let mut b = Vec::new();
        encode_break(&mut b, 3, true, &[5; 16], 7, 1);
        assert_eq!(b.len(), 44);
        assert_eq!(&b[..8], &[44, 0, 3, 0, 1, 0, 0, 0]);
        let mut m = vec![0u8; HEADER_LEN];
        encode_ack(&mut m, &[5; 16], 1);
        assert_eq!(m.len(), HEADER_LEN + 36);
        assert_eq!(decode_ack(&m).unwrap(), ([5; 16], 1));
    }
}
