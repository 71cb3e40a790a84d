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

/// A payload of `len` bytes that starts in a message's head (`first`) and
/// runs on into the chunks the rest of the message arrived in (`rest`), as
/// the slices it is made of; empty pieces are left out.
pub fn payload<'a, B: AsRef<[u8]>>(first: &'a [u8], rest: &'a [B], len: usize) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut left = len;
    std::iter::once(first)
        .chain(rest.iter().map(AsRef::as_ref))
        .map_while(move |b| {
            let piece = b.get(..b.len().min(left)).filter(|_| left > 0)?;
            left -= piece.len();
            Some(piece)
        })
        .filter(|p| !p.is_empty())
}

/// A message that came as `head` and then the chunks `tail`, in one buffer
/// (`head` itself when there are none).
pub fn gather<B: AsRef<[u8]>>(mut head: Vec<u8>, tail: &[B]) -> Vec<u8> {
    head.reserve(tail.iter().map(|t| t.as_ref().len()).sum());
    tail.iter().for_each(|t| head.extend_from_slice(t.as_ref()));
    head
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

    #[test]
    fn gather_joins_head_and_chunks() {
        let rest: [&[u8]; 3] = [b"cd", b"", b"efgh"];
        assert_eq!(gather(b"ab".to_vec(), &rest), b"abcdefgh");
        assert_eq!(gather::<&[u8]>(b"ab".to_vec(), &[]), b"ab");
    }

    #[test]
    fn payload_spans_head_and_chunks() {
        let rest: [&[u8]; 3] = [b"cd", b"", b"efgh"];
        let got: Vec<&[u8]> = payload(b"ab", &rest, 5).collect();
        assert_eq!(got, [&b"ab"[..], b"cd", b"e"]);
        assert_eq!(payload(b"", &rest, 3).collect::<Vec<_>>(), [&b"cd"[..], b"e"]);
        assert_eq!(payload(b"ab", &rest, 0).count(), 0);
        // Never more than is there.
        assert_eq!(payload(b"ab", &rest, 100).map(<[u8]>::len).sum::<usize>(), 8);
    }
}
