//! One connection's tasks: its input (the engine reads a TCP socket
//! itself; QUIC streams have reader tasks), its [`engine`](crate::engine)
//! and a writer task for what the engine cannot send at once. Whichever
//! ends first ends the connection.

use crate::engine::{run_engine, Input};
use crate::frame::{Admission, QUEUE};
use crate::quic::{self, streams};
use crate::tcp::input::TcpInput;
use crate::writer::FrameWriter;
use smbq_server::{Server, TransportInfo};
use smbq_quic::StreamChunks;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::{debug, info};

/// Where a connection's bytes come from.
pub(crate) enum Source {
    /// A TCP socket (a duplicate of its fd; the writer has the other),
    /// which the engine reads itself.
    Tcp(std::net::TcpStream),
    /// The QUIC connection's first stream, which a reader task cuts into
    /// frames, and the connection, whose further streams are accepted
    /// once the multi-stream extension is agreed (see [`streams`]),
    /// and how its handshake ends (they wait for that).
    Quic(StreamChunks, quinn::Connection, quic::Settled),
}

/// A peer that takes no bytes for this long is gone (it stopped reading).
pub const SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// What the engine tells the transport, on the engine's thread.
#[derive(Default)]
pub(crate) struct Hooks {
    /// The connection first has an authenticated session: QUIC opens its
    /// flow-control window then.
    pub on_logon: Option<Box<dyn FnOnce() + Send>>,
    /// NEGOTIATE agreed this many streams (more than one): QUIC raises its
    /// stream limit and accepts them.
    pub on_streams: Option<Box<dyn FnOnce(u16) + Send>>,
}

/// Serve one SMB connection over a byte stream until either side ends it.
pub(crate) async fn serve_framed(
    source: Source,
    mut wr: FrameWriter,
    info: TransportInfo,
    server: Arc<Server>,
    send_timeout: Duration,
    mut hooks: Hooks,
) {
    let peer = info.peer;
    let adm = Arc::new(Admission::new(&server));
    let (out_tx, mut out_rx) = mpsc::channel::<(u16, Vec<u8>)>(QUEUE);
    let (input, reader) = match source {
        Source::Tcp(sock) => match TcpInput::new(sock) {
            Ok(t) => (Input::Tcp(t), None),
            Err(e) => {
                info!(?peer, error = %e, "no eventfd for the connection; closing");
                return;
            }
        },
        Source::Quic(stream, conn, handshake) => {
            let FrameWriter::Quic(sends) = &mut wr else { return };
            let (frames, reader) = streams::read_streams((stream, conn, handshake), sends, &mut hooks, &adm, peer);
            (Input::Frames(frames), Some(reader))
        }
    };
    let queued = Arc::new(AtomicUsize::new(0));
    let direct = wr.direct(&queued);
    let mut writer = tokio::spawn(async move {
        while let Some((stream, frame)) = out_rx.recv().await {
            let sent = tokio::time::timeout(send_timeout, wr.send(stream, frame)).await;
            queued.fetch_sub(1, Ordering::Release);
            match sent {
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
        wr.finish();
    });
    let mut engine = tokio::spawn(run_engine(server, info, input, (out_tx, direct), adm, hooks));
    // Whichever side ends first ends the connection: the engine stops when
    // the writer is gone (or its reader, which is stopped then), and a
    // finished engine closes the writer's input.
    tokio::select! {
        _ = &mut engine => {
            if let Some(r) = &reader {
                r.abort();
            }
            let _ = writer.await;
        }
        _ = &mut writer => {
            if let Some(r) = &reader {
                r.abort();
            }
            let _ = engine.await;
        }
    }
}
