//! Direct TCP transport framing (MS-SMB2 2.1): a zero byte and a 24-bit
//! big-endian length before each SMB2 message. SMB over QUIC uses the same
//! framing on its stream.

/// The largest length the 24-bit field can carry.
pub const MAX_FRAME: usize = 0x00FF_FFFF;

#[derive(Debug, PartialEq, Eq)]
pub enum FrameError {
    /// First byte not zero (NetBIOS session message type other than 0).
    BadType(u8),
    /// Length above the configured maximum.
    TooLong(usize),
}

/// Length of the frame announced by a 4-byte prefix, checked against `max`.
pub fn frame_len(prefix: [u8; 4], max: usize) -> Result<usize, FrameError> {
    if prefix[0] != 0 {
        return Err(FrameError::BadType(prefix[0]));
    }
    let len = u32::from_be_bytes([0, prefix[1], prefix[2], prefix[3]]) as usize;
    if len > max {
        return Err(FrameError::TooLong(len));
    }
    Ok(len)
}

pub fn prefix(len: usize) -> [u8; 4] {
    let b = (len as u32).to_be_bytes();
    [0, b[1], b[2], b[3]]
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn bounds() {
        assert_eq!(frame_len(prefix(100), 1000), Ok(100));
        assert_eq!(frame_len(prefix(1001), 1000), Err(FrameError::TooLong(1001)));
        assert_eq!(frame_len([0x81, 0, 0, 0], 1000), Err(FrameError::BadType(0x81)));
        assert_eq!(frame_len([0, 0xFF, 0xFF, 0xFF], MAX_FRAME), Ok(MAX_FRAME));
    }
}
