//! SMB2 over Direct TCP (MS-SMB2 2.1): a 4-byte prefix per message.

use crate::{run_engine, QUEUE};
use bytes::{BufMut, BytesMut};
use smbq_server::{Connection, Server, TransportInfo, TransportKind};
use smbq_wire::framing::{frame_len, FrameError};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{info, warn};

/// Accept connections until `shutdown` resolves; then stop listening
/// (existing connections end with the process).
pub async fn serve(listener: TcpListener, server: Arc<Server>, shutdown: impl std::future::Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    if Connection::at_limit(&server) {
                        warn!(%peer, "connection limit reached; refusing");
                        continue;
                    }
                    tokio::spawn(connection(stream, peer, server.clone()));
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
    drop(listener);
    info!("tcp listener closed");
}

async fn connection(stream: TcpStream, peer: SocketAddr, server: Arc<Server>) {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().ok();
    let max = server.config.limits.max_frame();
    let (rd, mut wr) = stream.into_split();
    let (in_tx, in_rx) = mpsc::channel::<BytesMut>(QUEUE);
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(QUEUE);
    let reader = tokio::spawn(async move {
        let mut rd = BufReader::with_capacity(256 * 1024, rd);
        loop {
            let mut prefix = [0u8; 4];
            if rd.read_exact(&mut prefix).await.is_err() {
                return;
            }
            let len = match frame_len(prefix, max) {
                Ok(l) => l,
                Err(FrameError::TooLong(l)) => {
                    info!(%peer, len = l, max, "frame above the maximum; closing");
                    return;
                }
                Err(FrameError::BadType(t)) => {
                    info!(%peer, kind = t, "not a Direct TCP session message; closing");
                    return;
                }
            };
            let mut buf = BytesMut::with_capacity(len);
            while buf.len() < len {
                let want = len - buf.len();
                match rd.read_buf(&mut (&mut buf).limit(want)).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
            if in_tx.send(buf).await.is_err() {
                return;
            }
        }
    });
    let writer = tokio::spawn(async move {
        while let Some(frame) = out_rx.recv().await {
            if wr.write_all(&frame).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let info = TransportInfo { kind: TransportKind::Tcp, peer: Some(peer), local, secure: false };
    let rt = tokio::runtime::Handle::current();
    let engine = tokio::task::spawn_blocking(move || run_engine(server, info, in_rx, out_tx, rt));
    let _ = engine.await;
    reader.abort();
    let _ = writer.await;
}
