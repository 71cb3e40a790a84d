//! Reading an SMB-over-QUIC stream (MS-SMB2 2.1: Direct TCP framing on one
//! bidirectional stream) in the chunks quinn returns, each a slice of the
//! buffer the kernel received its packet in (our quinn hands that buffer
//! on without a copy, third_party/quinn/PATCHED.md), decrypted in place.
//! Small messages are gathered into one buffer (one copy, as a socket
//! read is); a large one keeps its first bytes in one buffer and
//! the rest in quinn's chunks (those in runs of at least 48 KiB, see
//! `MIN_KEPT`), so that a WRITE's or a READ's payload reaches its
//! destination without being gathered first.

use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Messages above this size come as a head plus chunks.
const CHUNKED_ABOVE: usize = 64 * 1024;
/// The head of a chunked message: more than any header and fixed part
/// (a WRITE's data starts at byte 112, a READ response's at 80).
const HEAD_LEN: usize = 4096;

/// Which chunks are kept rather than copied. A kept chunk holds the
/// buffer quinn received its packet in: a 64 KiB buffer holding one GRO
/// batch or one large datagram (our quinn's endpoint receives each
/// message into a buffer of its own and splits the batch's datagrams off
/// it), or a copy of a message under 16 KiB. A peer that sent small
/// stream frames in large packets could thus make a message hold many
/// times its size in memory, so a chunk is kept only as part of a *run*:
/// chunks of at least `MIN_RUN_CHUNK` bytes, each starting at most
/// `MAX_RUN_GAP` bytes after the previous one ends in memory (the next
/// packet of the same batch: AEAD tag, packet and frame headers), that
/// together hold at least `MIN_KEPT` bytes. A run's chunks then hold at
/// most its span (at most 1.125 times its bytes) plus the parts of the
/// first and last buffer outside it (2 x 64 KiB): at most 3.8 times its
/// bytes whatever the peer sends, and about once for what a sender
/// really sends (a batch of 1452-byte datagrams is one run of ~62 KiB; a
/// 64 KiB datagram's chunk is a run alone). Everything else is copied.
///
/// Measured at 1452-byte datagrams (`smbq-bench --max-udp-payload 1452`),
/// keeping runs instead of copying every chunk under 32 KiB took smbq's
/// QUIC writes from about 0.93 to 1.17 GB/s and the server's CPU from
/// 1.13 to 0.91 seconds per GiB.
const MIN_KEPT: usize = 48 * 1024;
const MIN_RUN_CHUNK: usize = 512;
const MAX_RUN_GAP: usize = 64;

/// A QUIC stream's bytes as quinn's chunks, not yet framed.
pub struct StreamChunks {
    stream: quinn::RecvStream,
    buf: ChunkQueue,
    /// Where the bytes gathered (copied) here are counted.
    counters: Arc<crate::Counters>,
    /// Messages held back until an event: see [`StreamChunks::hold`].
    hold: Option<Hold>,
}

/// See [`StreamChunks::hold`].
struct Hold {
    /// Whether the stream's first message may go before `until`.
    first_passes: fn(&[u8]) -> bool,
    /// A message was handed on already.
    started: bool,
    /// Resolves to true when held messages may go, false when they must
    /// never go (the stream then ends).
    until: Pin<Box<dyn Future<Output = bool> + Send>>,
}

impl StreamChunks {
    pub fn new(stream: quinn::RecvStream, counters: Arc<crate::Counters>) -> Self {
        StreamChunks { stream, buf: ChunkQueue::default(), counters, hold: None }
    }

    /// Hold messages back until `until` resolves: the stream's first
    /// message goes at once if `first_passes` says so of its bytes (its
    /// first 4 KiB at least), every other message waits; if `until`
    /// resolves to false, the stream ends there (nothing held is handed
    /// on). A server uses this for what arrives as QUIC 0-RTT data, which
    /// an attacker may have replayed (RFC 9001 4.6.1, RFC 8446 8 and
    /// E.5): only a first message that is safe to replay is served before
    /// the handshake completes.
    pub fn hold(mut self, first_passes: fn(&[u8]) -> bool, until: impl Future<Output = bool> + Send + 'static) -> Self {
        self.hold = Some(Hold { first_passes, started: false, until: Box::pin(until) });
        self
    }

    /// Wait, if `head` (the start of the next message) must be held.
    /// False: the message must not be handed on.
    async fn release(&mut self, head: &[u8]) -> bool {
        let Some(h) = &mut self.hold else { return true };
        let first = !std::mem::replace(&mut h.started, true);
        if first && (h.first_passes)(head) {
            return true;
        }
        let ok = h.until.as_mut().await;
        self.hold = None;
        ok
    }

    /// Where this stream counts what it copies (for the connection's other streams).
    pub fn counters(&self) -> Arc<crate::Counters> {
        Arc::clone(&self.counters)
    }

    /// Count what `buf` copied since the last call.
    fn count(&mut self) {
        let n = std::mem::take(&mut self.buf.copied);
        self.counters.rx_gathered.fetch_add(n, Ordering::Relaxed);
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
        self.count();
        Some(prefix)
    }

    /// The second step: the `len` bytes of the message after its prefix.
    pub async fn next_body(&mut self, len: usize) -> Option<(BytesMut, Vec<Bytes>)> {
        if !self.fill(len).await {
            return None;
        }
        let m = self.buf.message(len);
        self.count();
        if self.hold.is_some() && !self.release(&m.0).await {
            return None;
        }
        Some(m)
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

/// The buffered bytes: kept chunks, then small ones gathered, then the
/// run being collected.
#[derive(Default)]
struct ChunkQueue {
    queue: VecDeque<Bytes>,
    /// Chunks gathered since the last run kept; they follow `queue`.
    small: BytesMut,
    /// The current run (see `MIN_KEPT`) and its bytes; it follows `small`.
    run: Vec<Bytes>,
    run_len: usize,
    len: usize,
    /// Bytes copied (gathered into `small` or into a message's head).
    copied: u64,
}

impl ChunkQueue {
    fn push(&mut self, c: Bytes) {
        self.len += c.len();
        if c.len() < MIN_RUN_CHUNK {
            self.end_run();
            self.copied += c.len() as u64;
            self.small.extend_from_slice(&c);
            return;
        }
        let follows = self.run.last().is_some_and(|last| {
            let (end, start) = (last.as_ptr() as usize + last.len(), c.as_ptr() as usize);
            start >= end && start - end <= MAX_RUN_GAP
        });
        if !follows {
            self.end_run();
        }
        self.run_len += c.len();
        self.run.push(c);
    }

    /// Keep the current run if it is long enough, else copy it.
    fn end_run(&mut self) {
        if self.run_len >= MIN_KEPT {
            self.queue_small();
            self.queue.extend(self.run.drain(..));
        } else {
            for c in self.run.drain(..) {
                self.copied += c.len() as u64;
                self.small.extend_from_slice(&c);
            }
        }
        self.run_len = 0;
    }

    fn queue_small(&mut self) {
        if !self.small.is_empty() {
            self.queue.push_back(self.small.split().freeze());
        }
    }

    /// The next `n` buffered bytes (fewer if fewer are buffered), without
    /// another copy.
    fn take(&mut self, mut n: usize) -> Vec<Bytes> {
        self.end_run();
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
        let parts = self.take(n);
        parts.iter().for_each(|c| b.extend_from_slice(c));
        self.copied += b.len() as u64;
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
        let big = [pattern(65_000, 1), pattern(50_000, 2)];
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

    /// Chunks as quinn returns them from one GRO batch: slices of one
    /// buffer, `gap` bytes apart.
    fn batch(chunk: usize, gap: usize, n: usize, seed: u8) -> (Bytes, Vec<Bytes>) {
        let buf = pattern(n * (chunk + gap), seed);
        let chunks = (0..n).map(|i| buf.slice(i * (chunk + gap)..i * (chunk + gap) + chunk)).collect();
        (buf, chunks)
    }

    fn message_of(q: &mut ChunkQueue, chunks: &[Bytes]) -> (Vec<u8>, Vec<Bytes>) {
        let mut all = Vec::new();
        for c in chunks {
            q.push(c.clone());
            all.extend_from_slice(c);
        }
        let (head, tail) = q.message(all.len());
        let mut got = head.to_vec();
        tail.iter().for_each(|t| got.extend_from_slice(t));
        assert_eq!(got, all, "bytes in order");
        (all, tail)
    }

    /// Two batches of 45 packets of 1452 bytes (1415 of data each): their
    /// chunks stay in quinn's buffers; a run of 20 (28 KiB) is copied.
    #[test]
    fn runs_of_packet_sized_chunks_are_kept() {
        let (b1, c1) = batch(1415, 37, 45, 1);
        let (b2, c2) = batch(1415, 37, 45, 2);
        let (b3, c3) = batch(1415, 37, 20, 3);
        let chunks: Vec<Bytes> = c1.iter().chain(&c2).chain(&c3).cloned().collect();
        let mut q = ChunkQueue::default();
        let (_, tail) = message_of(&mut q, &chunks);
        let inside = |b: &Bytes| tail.iter().filter(|t| b.as_ptr_range().contains(&t.as_ptr())).count();
        // The head (4 KiB) takes the first three chunks and part of the
        // fourth; the rest of batch 1 and all of batch 2 are kept.
        assert!(inside(&b1) >= 41, "batch 1: {} kept", inside(&b1));
        assert_eq!(inside(&b2), 45);
        assert_eq!(inside(&b3), 0, "a short run is copied");
        assert_eq!(q.len, 0);
    }

    /// What a hostile peer could send: 1 KiB of stream data in each 64 KiB
    /// packet, or packet-sized chunks far apart in memory. Nothing is kept.
    #[test]
    fn chunks_that_would_hold_more_than_their_bytes_are_copied() {
        let packets: Vec<Bytes> = (0..100).map(|i| Bytes::from(vec![i as u8; 64 * 1024])).collect();
        let mut q = ChunkQueue::default();
        let (_, tail) = message_of(&mut q, &packets.iter().map(|p| p.slice(100..1124)).collect::<Vec<_>>());
        for t in &tail {
            assert!(!packets.iter().any(|p| p.as_ptr_range().contains(&t.as_ptr())), "a tail chunk points into a packet");
        }
        // Dense but with gaps wider than a packet's headers.
        let (buf, chunks) = batch(1024, 200, 100, 7);
        let (_, tail) = message_of(&mut q, &chunks);
        assert!(!tail.iter().any(|t| buf.as_ptr_range().contains(&t.as_ptr())));
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
        // Every byte gathered once, and the head's bytes once more.
        assert_eq!(q.copied, 70_000 + HEAD_LEN as u64);
        for t in &tail {
            assert!(!packets.iter().any(|p| p.as_ptr_range().contains(&t.as_ptr())), "a tail chunk points into a packet");
        }
        drop(packets);
        // Small messages are whole.
        let mut q = ChunkQueue::default();
        q.push(pattern(70_000, 9));
        let (head, tail) = q.message(CHUNKED_ABOVE);
        assert_eq!((head.len(), tail.len(), q.len), (CHUNKED_ABOVE, 0, 70_000 - CHUNKED_ABOVE));
        assert_eq!(q.copied, CHUNKED_ABOVE as u64, "a whole message is copied once out of its chunk");
    }
}
