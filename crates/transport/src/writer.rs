//! Where a connection's framed answers go: the writer task's
//! [`FrameWriter`], and over TCP the engine's own way to the socket
//! ([`Direct`]) while the writer has nothing queued.

use crate::quic::streams::QuicStreams;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::unix::AsyncFd;

/// Where framed responses go.
pub(crate) enum FrameWriter {
    /// Registered for writability only (its bytes wake the engine, see
    /// [`TcpInput`](crate::tcp::input::TcpInput)); shared with the engine,
    /// which sends on it itself while nothing waits here (see [`Direct`]).
    Tcp(AsyncFd<Arc<std::net::TcpStream>>),
    /// QUIC takes each frame as `Bytes` without another copy.
    Quic(QuicStreams),
}

impl FrameWriter {
    pub(crate) async fn send(&mut self, stream: u16, frame: Vec<u8>) -> std::io::Result<()> {
        match self {
            FrameWriter::Tcp(w) => {
                let mut done = 0;
                while done < frame.len() {
                    let mut ready = w.writable().await?;
                    let sent = ready.try_io(|s| {
                        let mut sock: &std::net::TcpStream = s.get_ref();
                        sock.write(&frame[done..])
                    });
                    match sent {
                        Ok(Ok(n)) => done += n,
                        Ok(Err(e)) => return Err(e),
                        Err(_would_block) => {}
                    }
                }
                Ok(())
            }
            FrameWriter::Quic(s) => s.send(stream, frame).await,
        }
    }

    pub(crate) fn finish(&mut self) {
        if let FrameWriter::Quic(s) = self {
            s.finish();
        }
    }

    /// The engine's own way to the socket, where there is one.
    pub(crate) fn direct(&self, queued: &Arc<AtomicUsize>) -> Option<Direct> {
        match self {
            FrameWriter::Tcp(w) => Some(Direct { socket: Arc::clone(w.get_ref()), queued: Arc::clone(queued) }),
            FrameWriter::Quic(_) => None,
        }
    }
}

/// The engine writes an answer to the TCP socket itself when the writer
/// task has nothing queued and the socket takes it whole: a hand-off (a
/// thread wake-up) less per answer. Otherwise it queues it (and what is
/// left of it) for the writer, which keeps the order and the send timeout.
pub(crate) struct Direct {
    socket: Arc<std::net::TcpStream>,
    /// Frames handed to the writer and not yet sent.
    pub(crate) queued: Arc<AtomicUsize>,
}

impl Direct {
    /// Send what the socket takes now; what is left for the writer (None
    /// when all went). An error ends the connection.
    pub(crate) fn try_send(&self, mut frame: Vec<u8>) -> std::io::Result<Option<Vec<u8>>> {
        if self.queued.load(Ordering::Acquire) > 0 {
            return Ok(Some(frame));
        }
        match (&*self.socket).write(&frame) {
            Ok(n) if n == frame.len() => Ok(None),
            Ok(n) => {
                frame.drain(..n);
                Ok(Some(frame))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(Some(frame)),
            Err(e) => Err(e),
        }
    }
}
