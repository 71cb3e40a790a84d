//! Transports for the SMB engine. They only move framed messages: each
//! connection gets a sans-IO [`smbq_server::Connection`] and a
//! [`TransportInfo`]; no SMB logic lives here.
//!
//! Per connection three stages run in parallel: a reader task that cuts the
//! byte stream into Direct TCP frames (MS-SMB2 2.1; SMB over QUIC uses the
//! same framing on its stream), an engine thread that runs the connection
//! state machine (file I/O and crypto are blocking work), and a writer task.
//!
//! Over TCP the reader copies the bytes out of the socket into the frame.
//! Over QUIC quinn has already copied each packet once; a large frame's
//! payload goes on in the chunks quinn returns (a `Frame`'s tail), so
//! that a WRITE reaches the file without another copy.

pub mod quic;
pub mod tcp;
pub mod tls;

use bytes::{Buf, Bytes, BytesMut};
use smbq_server::{Connection, Server, TransportInfo};
use smbq_udp::StreamChunks;
use smbq_wire::framing::{frame_len, FrameError};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tracing::{debug, info};

/// Frames in flight between the stages: enough to keep the pipe full.
const QUEUE: usize = 32;

/// Spare room the reader keeps for small messages (larger frames reserve
/// their whole length).
const READ_AHEAD: usize = 64 * 1024;

/// Read into `acc` until it holds `want` bytes (`want` is bounded by the
/// frame limit). False when the peer is gone first.
async fn fill<R: AsyncRead + Unpin>(rd: &mut R, acc: &mut BytesMut, want: usize) -> bool {
    if acc.capacity() < want {
        acc.reserve(want - acc.len());
    }
    while acc.len() < want {
        if acc.capacity() == acc.len() {
            acc.reserve(READ_AHEAD);
        }
        match rd.read_buf(acc).await {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
    }
    true
}

/// One SMB message for the engine: `head`, then `tail` (empty except for a
/// large frame over QUIC, see [`StreamChunks`]).
pub(crate) struct Frame {
    head: BytesMut,
    tail: Vec<Bytes>,
}

/// The frame length a Direct TCP prefix announces (MS-SMB2 2.1), or `None`
/// after logging why the connection ends.
fn announced_len(prefix: [u8; 4], max: usize, peer: Option<SocketAddr>) -> Option<usize> {
    match frame_len(prefix, max) {
        Ok(l) => Some(l),
        Err(FrameError::TooLong(l)) => {
            info!(?peer, len = l, max, "frame above the maximum; closing");
            None
        }
        Err(FrameError::BadType(t)) => {
            info!(?peer, kind = t, "not a Direct TCP session message; closing");
            None
        }
    }
}

/// Where framed requests come from.
pub(crate) enum FrameReader {
    Tcp(tokio::net::tcp::OwnedReadHalf),
    Quic(quinn::RecvStream),
}

impl FrameReader {
    /// Cut the stream into frames for the engine until the peer ends it,
    /// breaks the framing, or the engine is gone.
    async fn run(self, tx: mpsc::Sender<Frame>, max: usize, peer: Option<SocketAddr>) {
        match self {
            FrameReader::Tcp(mut rd) => {
                // One buffer takes the bytes as they come (one copy out of
                // the socket); each frame is split off it without another.
                let mut acc = BytesMut::with_capacity(READ_AHEAD);
                loop {
                    if !fill(&mut rd, &mut acc, 4).await {
                        return;
                    }
                    let mut prefix = [0u8; 4];
                    prefix.copy_from_slice(&acc[..4]);
                    let Some(len) = announced_len(prefix, max, peer) else { return };
                    if !fill(&mut rd, &mut acc, 4 + len).await {
                        return;
                    }
                    acc.advance(4);
                    if tx.send(Frame { head: acc.split_to(len), tail: Vec::new() }).await.is_err() {
                        return;
                    }
                }
            }
            FrameReader::Quic(stream) => {
                let mut rd = StreamChunks::new(stream);
                while let Ok(Some((head, tail))) = rd.next_message(|p| announced_len(p, max, peer).ok_or(())).await {
                    if tx.send(Frame { head, tail }).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// A peer that takes no bytes for this long is gone (it stopped reading).
pub const SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// Where framed responses go.
pub(crate) enum FrameWriter {
    Tcp(tokio::net::tcp::OwnedWriteHalf),
    /// QUIC takes each frame as `Bytes` without another copy.
    Quic(quinn::SendStream),
}

impl FrameWriter {
    async fn send(&mut self, frame: Vec<u8>) -> std::io::Result<()> {
        match self {
            FrameWriter::Tcp(w) => w.write_all(&frame).await,
            FrameWriter::Quic(s) => s.write_chunk(Bytes::from(frame)).await.map_err(std::io::Error::other),
        }
    }

    async fn finish(&mut self) {
        match self {
            FrameWriter::Tcp(w) => {
                let _ = w.shutdown().await;
            }
            FrameWriter::Quic(s) => {
                let _ = s.finish();
            }
        }
    }
}

/// Keep 1 MiB READ/WRITE buffers on the heap. They are above glibc's
/// default mmap threshold, so each would be mmap'd, faulted in page by page,
/// zeroed by the kernel and unmapped again: measured here, that halves
/// encrypted TCP throughput until glibc's dynamic threshold happens to
/// adapt. A fixed threshold of 32 MiB (glibc's maximum) and a matching trim
/// threshold keep them in the arenas for reuse. Call once at start, before
/// threads spawn.
pub fn keep_large_buffers_on_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc allocator parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

/// Serve one SMB connection over a byte stream until either side ends it.
pub(crate) async fn serve_framed(
    rd: FrameReader,
    mut wr: FrameWriter,
    info: TransportInfo,
    server: Arc<Server>,
    send_timeout: Duration,
) {
    let peer = info.peer;
    let max = server.config.limits.max_frame();
    let (in_tx, in_rx) = mpsc::channel::<Frame>(QUEUE);
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(QUEUE);
    let reader = tokio::spawn(rd.run(in_tx, max, peer));
    let mut writer = tokio::spawn(async move {
        while let Some(frame) = out_rx.recv().await {
            match tokio::time::timeout(send_timeout, wr.send(frame)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    debug!(?peer, error = %e, "send failed");
                    return;
                }
                Err(_) => {
                    info!(?peer, "peer stopped reading; closing");
                    return;
                }
            }
        }
        wr.finish().await;
    });
    let rt = tokio::runtime::Handle::current();
    let mut engine = tokio::task::spawn_blocking(move || run_engine(server, info, in_rx, out_tx, rt));
    // Whichever side ends first ends the connection: stopping the reader
    // closes the engine's input, and a finished engine closes the writer's.
    tokio::select! {
        _ = &mut engine => {
            reader.abort();
            let _ = writer.await;
        }
        _ = &mut writer => {
            reader.abort();
            let _ = engine.await;
        }
    }
}

/// Run one connection's engine given its framed input and output channels.
/// Returns when the peer goes away, the engine closes it, or it times out.
fn run_engine(
    server: Arc<Server>,
    info: TransportInfo,
    mut rx: mpsc::Receiver<Frame>,
    tx: mpsc::Sender<Vec<u8>>,
    rt: tokio::runtime::Handle,
) {
    let peer = info.peer;
    let mut conn = Connection::new(server, info, Instant::now());
    let reason = loop {
        let deadline = conn.poll_timeout();
        let ev = rt.block_on(async {
            match deadline {
                Some(d) => tokio::select! {
                    m = rx.recv() => Some(m),
                    _ = tokio::time::sleep_until(d.into()) => None,
                },
                None => Some(rx.recv().await),
            }
        });
        let result = match ev {
            Some(Some(mut f)) => conn.handle_frame(Instant::now(), &mut f.head, &f.tail),
            Some(None) => break "peer closed".to_string(),
            None => conn.handle_timeout(Instant::now()),
        };
        let mut send_failed = false;
        while let Some(out) = conn.poll_transmit() {
            if tx.blocking_send(out).is_err() {
                send_failed = true;
                break;
            }
        }
        if let Err(e) = result {
            break e.to_string();
        }
        if send_failed {
            break "peer stopped reading".to_string();
        }
    };
    if reason == "peer closed" {
        debug!(?peer, "connection closed by peer");
    } else {
        info!(?peer, %reason, "closing connection");
    }
}
