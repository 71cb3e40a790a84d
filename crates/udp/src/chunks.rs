//! Reading an SMB-over-QUIC stream (MS-SMB2 2.1: Direct TCP framing on one
//! bidirectional stream) in the chunks quinn returns, each a slice of a
//! packet quinn has already copied out of the socket and decrypted in
//! place. Small messages are gathered into one buffer (one copy, as a
//! socket read is); a large one keeps its first bytes in one buffer and
//! the rest in quinn's chunks (those of at least 32 KiB, see `MIN_KEPT`),
//! so that a WRITE's or a READ's payload reaches its destination without
//! being gathered first.

use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;

/// Messages above this size come as a head plus chunks.
const CHUNKED_ABOVE: usize = 64 * 1024;
/// The head of a chunked message: more than any header and fixed part
/// (a WRITE's data starts at byte 112, a READ response's at 80).
const HEAD_LEN: usize = 4096;

/// Chunks shorter than this are copied, not kept. A kept chunk holds its
/// whole packet's buffer (up to 64 KiB), so a peer that sent small stream
/// frames in large packets could make a message hold many times its size
/// in memory; from this size on a kept chunk holds at most twice its
/// bytes. Paths with smaller datagrams (a LAN's 1452 bytes) get one copy,
/// as a socket read would.
const MIN_KEPT: usize = 32 * 1024;

/// A QUIC stream's bytes as quinn's chunks, not yet framed.
pub struct StreamChunks {
    stream: quinn::RecvStream,
    buf: ChunkQueue,
}

impl StreamChunks {
    pub fn new(stream: quinn::RecvStream) -> Self {
        StreamChunks { stream, buf: ChunkQueue::default() }
    }

    /// The next message of the stream's Direct TCP framing (MS-SMB2 2.1):
    /// `frame_len` reads the 4-byte prefix (bounding the length by the
    /// caller's frame limit, or refusing it), then the message: whole when
    /// it is at most `CHUNKED_ABOVE` (64 KiB), else its first `HEAD_LEN`
    /// (4 KiB) bytes and the rest in quinn's chunks. `Ok(None)` when the
    /// stream ends or fails.
    pub async fn next_message<E>(&mut self, frame_len: impl FnOnce([u8; 4]) -> Result<usize, E>) -> Result<Option<(BytesMut, Vec<Bytes>)>, E> {
        let Some(prefix) = self.next_prefix().await else { return Ok(None) };
        let len = frame_len(prefix)?;
        Ok(self.next_body(len).await)
    }

    /// The first step of [`StreamChunks::next_message`] alone: the next
    /// 4-byte prefix, consumed; `None` when the stream ends or fails.
    pub async fn next_prefix(&mut self) -> Option<[u8; 4]> {
        if !self.fill(4).await {
            return None;
        }
        let mut prefix = [0u8; 4];
        prefix.copy_from_slice(&self.buf.copy(4));
        Some(prefix)
    }

    /// The second step: the `len` bytes of the message after its prefix.
    pub async fn next_body(&mut self, len: usize) -> Option<(BytesMut, Vec<Bytes>)> {
        if !self.fill(len).await {
            return None;
        }
        Some(self.buf.message(len))
    }

    /// Read until `want` bytes are buffered (one chunk more may come with
    /// them). False when the stream ends or fails first.
    async fn fill(&mut self, want: usize) -> bool {
        while self.buf.len < want {
            match self.stream.read_chunk(usize::MAX, true).await {
                Ok(Some(c)) => self.buf.push(c.bytes),
                Ok(None) | Err(_) => return false,
            }
        }
        true
    }
}

/// The buffered bytes: kept chunks, then small ones gathered.
#[derive(Default)]
struct ChunkQueue {
    queue: VecDeque<Bytes>,
    /// Small chunks gathered since the last one kept; they follow `queue`.
    small: BytesMut,
    len: usize,
}

impl ChunkQueue {
    fn push(&mut self, c: Bytes) {
        self.len += c.len();
        if c.len() < MIN_KEPT {
            self.small.extend_from_slice(&c);
        } else {
            self.queue_small();
            self.queue.push_back(c);
        }
    }

    fn queue_small(&mut self) {
        if !self.small.is_empty() {
            self.queue.push_back(self.small.split().freeze());
        }
    }

    /// The next `n` buffered bytes (fewer if fewer are buffered), without
    /// another copy.
    fn take(&mut self, mut n: usize) -> Vec<Bytes> {
        self.queue_small();
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

    fn copy(&mut self, n: usize) -> BytesMut {
        let mut b = BytesMut::with_capacity(n);
        self.take(n).iter().for_each(|c| b.extend_from_slice(c));
        b
    }

    fn message(&mut self, len: usize) -> (BytesMut, Vec<Bytes>) {
        if len > CHUNKED_ABOVE {
            (self.copy(HEAD_LEN), self.take(len - HEAD_LEN))
        } else {
            (self.copy(len), Vec::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize, seed: u8) -> Bytes {
        (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect::<Vec<u8>>().into()
    }

    #[test]
    fn large_chunks_pass_through_and_order_holds() {
        let big = [pattern(65_000, 1), pattern(40_000, 2)];
        let small = [pattern(1000, 3), pattern(10, 4)];
        let mut q = ChunkQueue::default();
        let mut all = Vec::new();
        for c in [&small[0], &big[0], &small[1], &big[1]] {
            q.push(c.clone());
            all.extend_from_slice(c);
        }
        all.extend_from_slice(&pattern(7, 5));
        q.push(pattern(7, 5));
        assert_eq!(q.len, all.len());
        let (head, tail) = q.message(all.len());
        let mut got = head.to_vec();
        tail.iter().for_each(|t| got.extend_from_slice(t));
        assert_eq!(got, all);
        // The large chunks are the caller's own buffers (no copy), the
        // second one whole.
        assert!(tail.iter().any(|t| t.as_ptr() == big[1].as_ptr() && t.len() == big[1].len()));
        assert!(tail.iter().any(|t| big[0].as_ptr_range().contains(&t.as_ptr())));
        assert_eq!(q.len, 0);
    }

    #[test]
    fn small_chunks_do_not_hold_their_packets() {
        // Ten-byte chunks, each a slice of its own 16 KiB packet buffer.
        let packets: Vec<Bytes> = (0..7000).map(|i| Bytes::from(vec![i as u8; 16 * 1024])).collect();
        let mut q = ChunkQueue::default();
        packets.iter().for_each(|p| q.push(p.slice(0..10)));
        let (head, tail) = q.message(70_000);
        assert_eq!(head.len(), HEAD_LEN);
        assert_eq!(tail.iter().map(Bytes::len).sum::<usize>(), 70_000 - HEAD_LEN);
        for t in &tail {
            assert!(!packets.iter().any(|p| p.as_ptr_range().contains(&t.as_ptr())), "a tail chunk points into a packet");
        }
        drop(packets);
        // Small messages are whole.
        let mut q = ChunkQueue::default();
        q.push(pattern(70_000, 9));
        let (head, tail) = q.message(CHUNKED_ABOVE);
        assert_eq!((head.len(), tail.len(), q.len), (CHUNKED_ABOVE, 0, 70_000 - CHUNKED_ABOVE));
    }
}
