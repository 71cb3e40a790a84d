//! TRANSFORM_HEADER recognition (MS-SMB2 2.2.41); its fields are read and
//! checked by `smbq_crypto::Sealer`, which opens the message.

pub const PROTOCOL_ID: [u8; 4] = *b"\xfdSMB";

pub fn is_transform(msg: &[u8]) -> bool {
    msg.get(..4) == Some(&PROTOCOL_ID[..])
}
