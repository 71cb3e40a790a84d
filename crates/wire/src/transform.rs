//! TRANSFORM_HEADER fields the engine needs before decrypting (MS-SMB2 2.2.41).

use crate::reader::Reader;
use crate::DecodeError;

pub const PROTOCOL_ID: [u8; 4] = *b"\xfdSMB";
pub const LEN: usize = 52;

pub fn is_transform(msg: &[u8]) -> bool {
    msg.get(..4) == Some(&PROTOCOL_ID[..])
}

/// SessionId of a transform message.
pub fn session_id(msg: &[u8]) -> Result<u64, DecodeError> {
    let mut r = Reader::new(msg);
    r.skip(44)?;
    r.u64()
}
