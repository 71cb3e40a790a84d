//! SMB2 over Direct TCP (MS-SMB2 2.1): a 4-byte prefix per message.

use crate::{serve_framed, FrameWriter, Hooks, Source, SEND_TIMEOUT};
use smbq_server::{Connection, Server, TransportInfo, TransportKind};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
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
    if let Err(e) = detect_dead_peer(&stream, server.config.limits.dead_peer_secs) {
        warn!(%peer, error = %e, "cannot set TCP keepalive");
    }
    let local = stream.local_addr().ok();
    // The engine reads a duplicate of the fd; the writer waits for
    // writability on the other (see `TcpInput` in lib.rs).
    let split = stream.into_std().and_then(|s| Ok((s.try_clone()?, Arc::new(s)))).and_then(|(rd, wr)| {
        // SAFETY: the TcpStream owns its fd, open for as long as the AsyncFd holds it.
        let wr = unsafe { tokio::io::unix::AsyncFd::register_with_interest(wr, tokio::io::Interest::WRITABLE) }?;
        Ok((rd, wr))
    });
    let (rd, wr) = match split {
        Ok(p) => p,
        Err(e) => {
            warn!(%peer, error = %e, "cannot set the connection up");
            return;
        }
    };
    let info = TransportInfo { kind: TransportKind::Tcp, peer: Some(peer), local, secure: false, streams: 1 };
    serve_framed(Source::Tcp(rd), FrameWriter::Tcp(wr), info, server, SEND_TIMEOUT, Hooks::default()).await;
}

/// A peer that vanishes without a FIN (a laptop that sleeps or roams, a
/// cut cable) would otherwise hold its opens, share modes and locks for
/// ever: the idle timeout spares connections with open files. Keepalive
/// probes start after half of `secs` idle and four go unanswered by
/// `secs`; TCP_USER_TIMEOUT bounds unacknowledged data the same way. The
/// kernel then fails the socket, the reader ends and the engine closes
/// every open of the connection.
fn detect_dead_peer(stream: &TcpStream, secs: u64) -> std::io::Result<()> {
    let secs = secs.max(2);
    let ka = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(secs / 2))
        .with_interval(Duration::from_secs((secs / 8).max(1)))
        .with_retries(4);
    let sock = socket2::SockRef::from(stream);
    sock.set_tcp_keepalive(&ka)?;
    sock.set_tcp_user_timeout(Some(Duration::from_secs(secs)))
}
