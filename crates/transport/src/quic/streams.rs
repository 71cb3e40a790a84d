//! A QUIC connection's streams as the engine's input and output: a reader
//! task per stream cuts quinn's chunks into [`Frame`]s, and
//! [`QuicStreams`] holds the send halves. The first stream is read from
//! the start; the others once smbq's multi-stream extension is agreed
//! ([`accept_streams`]).

use crate::connection::Hooks;
use crate::frame::{announced_len, Admission, Frame, QUEUE};
use crate::quic::{self, Settled};
use bytes::Bytes;
use smbq_server::CONTROL_STREAM;
use smbq_quic::StreamChunks;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::mpsc;
use tracing::debug;

/// Read a QUIC connection for its engine: the first stream now, more once
/// NEGOTIATE has agreed them (through `hooks.on_streams`; their send
/// halves reach `sends`). Returns the frames and the task reading the
/// first stream, whose end (or abort) ends the others' readers too.
pub(crate) fn read_streams(
    (first, conn, handshake): (StreamChunks, quinn::Connection, Settled),
    sends: &mut QuicStreams,
    hooks: &mut Hooks,
    adm: &Arc<Admission>,
    peer: Option<SocketAddr>,
) -> (mpsc::Receiver<Frame>, tokio::task::JoinHandle<()>) {
    let (in_tx, in_rx) = mpsc::channel::<Frame>(QUEUE);
    let (sends_tx, sends_rx) = mpsc::unbounded_channel();
    sends.added = sends_rx;
    let (agreed_tx, agreed_rx) = tokio::sync::oneshot::channel();
    let more = AbortOnDrop(tokio::spawn(accept_streams(
        conn.clone(),
        handshake,
        agreed_rx,
        sends_tx,
        (in_tx.clone(), Arc::clone(adm), first.counters(), peer),
    )));
    hooks.on_streams = Some(Box::new(move |n| {
        conn.set_max_concurrent_bi_streams(quinn::VarInt::from(n));
        let _ = agreed_tx.send(n);
    }));
    let first = read_quic(first, CONTROL_STREAM, in_tx, Arc::clone(adm), peer);
    let reader = tokio::spawn(async move {
        let _more = more;
        first.await;
    });
    (in_rx, reader)
}

/// Cut a QUIC stream into frames for the engine until the peer ends it,
/// breaks the framing or the limits, or the engine is gone. A message
/// not wholly received when the stream ends is dropped.
async fn read_quic(mut rd: StreamChunks, stream: u16, tx: mpsc::Sender<Frame>, adm: Arc<Admission>, peer: Option<SocketAddr>) {
    while let Some(prefix) = rd.next_prefix().await {
        let Some(len) = announced_len(prefix, adm.max_frame(), peer) else { return };
        let Some(held) = adm.admit(len).await else { return };
        let Some((head, tail)) = rd.next_body(len).await else { return };
        if tx.send(Frame { stream, head, tail, _held: held }).await.is_err() {
            return;
        }
    }
}

/// Accept the streams past the first that smbq's multi-stream extension
/// allows (`docs/multistream.md`), once [`Hooks::on_streams`] has raised
/// quinn's stream limit to the number agreed: each gets stream number
/// 1, 2, ... (in the order accepted), a reader like the first's, and its
/// send half goes to the writer. At most `agreed - 1` streams are
/// accepted over the connection's life; then the peer gets no more stream
/// credit. Nothing read on them reaches the engine before the handshake
/// is complete (they cannot carry 0-RTT data, docs/zero-rtt.md). The
/// readers end with this task (aborted with the control stream's reader).
async fn accept_streams(
    conn: quinn::Connection,
    handshake: quic::Settled,
    agreed: tokio::sync::oneshot::Receiver<u16>,
    sends: mpsc::UnboundedSender<(u16, quinn::SendStream)>,
    (tx, adm, udp, peer): (mpsc::Sender<Frame>, Arc<Admission>, Arc<smbq_quic::Counters>, Option<SocketAddr>),
) {
    let Ok(agreed) = agreed.await else { return };
    let mut readers = tokio::task::JoinSet::new();
    for stream in 1..agreed {
        let Ok((send, recv)) = conn.accept_bi().await else { break };
        if sends.send((stream, send)).is_err() {
            break;
        }
        debug!(?peer, stream, "stream accepted");
        let held = StreamChunks::new(recv, Arc::clone(&udp)).hold(|_| false, quic::settled(handshake.clone()));
        readers.spawn(read_quic(held, stream, tx.clone(), Arc::clone(&adm), peer));
        if stream + 1 == agreed {
            conn.set_max_concurrent_bi_streams(quinn::VarInt::from_u32(0));
        }
    }
    drop(tx);
    while readers.join_next().await.is_some() {}
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The send halves of a QUIC connection's streams: the first, and those
/// [`accept_streams`] adds. A stream the peer stopped (STOP_SENDING or a
/// reset stream) is gone: what would go on it goes on the control stream
/// instead, so no answer and none of the credits it grants are lost
/// (`docs/multistream.md`, "Lost streams").
pub(crate) struct QuicStreams {
    streams: Vec<Option<quinn::SendStream>>,
    added: mpsc::UnboundedReceiver<(u16, quinn::SendStream)>,
}

impl QuicStreams {
    /// The first stream's; [`read_streams`] connects `added` to [`accept_streams`].
    pub(crate) fn new(first: quinn::SendStream) -> QuicStreams {
        QuicStreams { streams: vec![Some(first)], added: mpsc::unbounded_channel().1 }
    }

    pub(crate) async fn send(&mut self, stream: u16, frame: Vec<u8>) -> std::io::Result<()> {
        // A stream is added before its reader starts, so before any answer
        // to a request on it is queued.
        while let Ok((n, s)) = self.added.try_recv() {
            let i = usize::from(n);
            if self.streams.len() <= i {
                self.streams.resize_with(i + 1, || None);
            }
            self.streams[i] = Some(s);
        }
        let frame = Bytes::from(frame);
        let i = usize::from(stream);
        if let Some(s) = self.streams.get_mut(i).filter(|_| i != 0).and_then(Option::as_mut) {
            match s.write_chunk(frame.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    debug!(stream, error = %e, "stream gone; its answers go on the control stream");
                    self.streams[i] = None;
                }
            }
        }
        match self.streams.first_mut().and_then(Option::as_mut) {
            Some(s) => s.write_chunk(frame).await.map_err(std::io::Error::other),
            None => Err(std::io::Error::other("no control stream")),
        }
    }

    pub(crate) fn finish(&mut self) {
        for s in self.streams.iter_mut().flatten() {
            let _ = s.finish();
        }
    }
}
