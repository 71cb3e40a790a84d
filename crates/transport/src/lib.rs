//! Transports for the SMB engine. They only move framed messages: each
//! connection gets a sans-IO [`smbq_server::Connection`] and a
//! [`TransportInfo`]; no SMB logic lives here.
//!
//! Per connection three stages run in parallel: a reader task that cuts the
//! byte stream into frames, an engine thread that runs the connection state
//! machine (file I/O and crypto are blocking work), and a writer task.

pub mod tcp;

use bytes::BytesMut;
use smbq_server::{Connection, Server, TransportInfo};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use tracing::{debug, info};

/// Frames in flight between the stages: enough to keep the pipe full.
const QUEUE: usize = 32;

/// Run one connection given its framed input and output channels. Returns
/// when the peer goes away, the engine closes it, or it times out.
pub(crate) fn run_engine(
    server: Arc<Server>,
    info: TransportInfo,
    mut rx: mpsc::Receiver<BytesMut>,
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
            Some(Some(mut msg)) => conn.handle_message(Instant::now(), &mut msg),
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
