//! SMB2 over Direct TCP (MS-SMB2 2.1): a 4-byte prefix per message.

use crate::{serve_framed, FrameReader, FrameWriter, SEND_TIMEOUT};
use smbq_server::{Connection, Server, TransportInfo, TransportKind};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
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
    let (rd, wr) = stream.into_split();
    let info = TransportInfo { kind: TransportKind::Tcp, peer: Some(peer), local, secure: false };
    serve_framed(FrameReader::Tcp(rd), FrameWriter::Tcp(wr), info, server, SEND_TIMEOUT).await;
}
