//! Reading an SMB-over-QUIC stream (MS-SMB2 2.1: Direct TCP framing on one
//! bidirectional stream) in the chunks quinn returns, each a slice of a
//! packet quinn has already copied out of the socket and decrypted in
//! place. Small messages are gathered into one buffer (one copy, as a
//! socket read is); a large one keeps its first bytes in one buffer and
//! the rest in quinn's chunks, so that a WRITE's or a READ's payload
//! reaches its destination without being gathered first.

use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;

/// Messages above this size come as a head plus chunks.
pub const CHUNKED_ABOVE: usize = 64 * 1024;
/// The head of a chunked message: more than any header and fixed part
/// (a WRITE's data starts at byte 112, a READ response's at 80).
pub const HEAD_LEN: usize = 4096;

/// A QUIC stream's bytes as quinn's chunks, not yet framed.
pub struct StreamChunks {
    stream: quinn::RecvStream,
    queue: VecDeque<Bytes>,
    len: usize,
}

impl StreamChunks {
    pub fn new(stream: quinn::RecvStream) -> Self {
        StreamChunks { stream, queue: VecDeque::new(), len: 0 }
    }

    /// Read until `want` bytes are buffered (the caller bounds `want` by
    /// its frame limit; one chunk more may come with them). False when the
    /// stream ends or fails first.
    pub async fn fill(&mut self, want: usize) -> bool {
        while self.len < want {
            match self.stream.read_chunk(usize::MAX, true).await {
                Ok(Some(c)) => {
                    self.len += c.bytes.len();
                    self.queue.push_back(c.bytes);
                }
                Ok(None) | Err(_) => return false,
            }
        }
        true
    }

    /// The next `n` buffered bytes (fewer if fewer are buffered), without
    /// a copy.
    fn take(&mut self, mut n: usize) -> Vec<Bytes> {
        let mut out = Vec::new();
        while n > 0 {
            let Some(front) = self.queue.front_mut() else { break };
            let c = if front.len() <= n { self.queue.pop_front().unwrap_or_default() } else { front.split_to(n) };
            n -= c.len();
            self.len -= c.len();
            out.push(c);
        }
        out
    }

    /// The next `n` buffered bytes, copied into one buffer.
    pub fn copy(&mut self, n: usize) -> BytesMut {
        let mut b = BytesMut::with_capacity(n);
        self.take(n).iter().for_each(|c| b.extend_from_slice(c));
        b
    }

    /// The next `len` buffered bytes as one message: whole when it is at
    /// most [`CHUNKED_ABOVE`] bytes, else its first [`HEAD_LEN`] bytes and
    /// then the rest in quinn's chunks.
    pub fn message(&mut self, len: usize) -> (BytesMut, Vec<Bytes>) {
        if len > CHUNKED_ABOVE {
            (self.copy(HEAD_LEN), self.take(len - HEAD_LEN))
        } else {
            (self.copy(len), Vec::new())
        }
    }
}
