//! SMBQ_MULTI_STREAM, smbq's negotiate context for SMB over several QUIC
//! streams (`docs/multistream.md`): an unused context type (MS-SMB2
//! 2.2.3.1 leaves types it does not define to the implementation; servers
//! ignore those they do not know, 3.3.5.4), whose data is
//! `Version` (u16, 1), `Flags` (u16, 0), `MaxStreams` (u16), `Reserved` (u16).

use crate::reader::{Put, Reader};

/// The context type: "SQ" read as a little-endian u16.
pub const NEGOTIATE_CONTEXT: u16 = 0x5351;
/// The version this page describes.
pub const VERSION: u16 = 1;
/// The data's length: a context of another length is ignored.
pub const LEN: usize = 8;

/// The context's data: how many bidirectional streams (the first
/// included) the sender will use, version 1.
pub fn encode(max_streams: u16) -> Vec<u8> {
    let mut d = Vec::with_capacity(LEN);
    d.u16(VERSION);
    d.u16(0);
    d.u16(max_streams);
    d.u16(0);
    d
}

/// `MaxStreams` of a version-1 context, or `None` (another version or
/// length, or no more than one stream: the context is ignored then).
pub fn decode(data: &[u8]) -> Option<u16> {
    if data.len() != LEN {
        return None;
    }
    let mut r = Reader::new(data);
    let version = r.u16().ok()?;
    let _flags = r.u16().ok()?;
    let max = r.u16().ok()?;
    (version == VERSION && max > 1).then_some(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let d = encode(16);
        assert_eq!(d, [1, 0, 0, 0, 16, 0, 0, 0]);
        assert_eq!(decode(&d), Some(16));
    }

    #[test]
    fn other_versions_lengths_and_one_stream_are_ignored() {
        assert_eq!(decode(&[2, 0, 0, 0, 16, 0, 0, 0]), None);
        assert_eq!(decode(&[1, 0, 0, 0, 16, 0, 0]), None);
        assert_eq!(decode(&[1, 0, 0, 0, 16, 0, 0, 0, 0]), None);
        assert_eq!(decode(&encode(1)), None);
        assert_eq!(decode(&encode(0)), None);
        assert_eq!(decode(&[]), None);
    }
}
