//! SMB2 over Direct TCP (MS-SMB2 2.1): a 4-byte prefix per message.

pub(crate) mod input;

use crate::connection::{serve_framed, Hooks, Source, SEND_TIMEOUT};
use crate::writer::FrameWriter;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use smbq_server::{Connection, Server, TransportInfo, TransportKind};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// Accept connections until `shutdown` resolves; then stop listening
/// (existing connections end with the process).
pub async fn serve(listener: TcpListener, server: Arc<Server>, shutdown: impl std::future::Future<Output = ()>) {
    tokio::pin!(shutdown);
    let live = Arc::new(Mutex::new(Live::default()));
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    if Connection::at_limit(&server) {
                        warn!(%peer, "connection limit reached; refusing");
                        continue;
                    }
                    tokio::spawn(connection(stream, peer, server.clone(), Arc::clone(&live)));
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

async fn connection(stream: TcpStream, peer: SocketAddr, server: Arc<Server>, live: Arc<Mutex<Live>>) {
    // Taken before this connection is listed: those it may have to wait for.
    let ending = lock(&live).ending(peer.ip());
    let _ = stream.set_nodelay(true);
    if let Err(e) = detect_dead_peer(&stream, server.config.limits.dead_peer_secs) {
        warn!(%peer, error = %e, "cannot set TCP keepalive");
    }
    let local = stream.local_addr().ok();
    // The engine reads a duplicate of the fd; the writer waits for
    // writability on the other (see `input::TcpInput`).
    let split = stream.into_std().and_then(|s| Ok((s.try_clone()?, Arc::new(s)))).and_then(|(rd, wr)| {
        let sock = Arc::clone(&wr);
        Ok((rd, register(wr, Interest::WRITABLE)?, sock))
    });
    let (rd, wr, sock) = match split {
        Ok(p) => p,
        Err(e) => {
            warn!(%peer, error = %e, "cannot set the connection up");
            return;
        }
    };
    let (ended, end) = watch::channel(());
    let id = lock(&live).add(peer.ip(), sock, end);
    for mut end in ending {
        if tokio::time::timeout(ENDING_WAIT, end.changed()).await.is_err() {
            debug!(%peer, "a closed connection of the same address still ends; going on");
        }
    }
    let info = TransportInfo { kind: TransportKind::Tcp, peer: Some(peer), local, secure: false, streams: 1 };
    serve_framed(Source::Tcp(rd), FrameWriter::Tcp(wr), info, server, SEND_TIMEOUT, Hooks::default()).await;
    lock(&live).conns.remove(&id);
    drop(ended);
}

/// Register a socket (a `TcpStream`, or an `Arc` of one) with the
/// runtime for `interest`, as the engine's reads and the writer's writes
/// wait for it.
pub(crate) fn register<S: AsRawFd + Borrow<std::net::TcpStream>>(sock: S, interest: Interest) -> std::io::Result<AsyncFd<S>> {
    // SAFETY: `sock` owns the socket (or shares its ownership), and the
    // AsyncFd owns `sock`: the fd stays open, and the same socket, until
    // the AsyncFd is dropped or gives `sock` back; nothing replaces it
    // through `get_mut`.
    Ok(unsafe { AsyncFd::register_with_interest(sock, interest) }?)
}

/// How long a new connection waits for the end of a connection of the
/// same address whose peer has closed it.
const ENDING_WAIT: Duration = Duration::from_secs(1);

/// The TCP connections being served, so that a new connection can wait
/// for the end of those its client has already closed. A client that
/// closes a connection and opens its files again from a new one (as
/// smbtorture does between subtests, its unlink and create coming right
/// after the new connection's TREE_CONNECT) must find the old
/// connection's opens closed, as smbd's process for it has ended. The
/// old engine sees the end of its socket and closes them on its own,
/// but on a loaded machine its thread may be scheduled after the new
/// connection's first requests: the FIN that came before the new SYN
/// orders them here.
#[derive(Default)]
struct Live {
    next: u64,
    /// The peer's address, the socket, and what tells the connection's end.
    conns: HashMap<u64, (IpAddr, Arc<std::net::TcpStream>, watch::Receiver<()>)>,
}

fn lock(live: &Mutex<Live>) -> std::sync::MutexGuard<'_, Live> {
    live.lock().unwrap_or_else(|p| p.into_inner())
}

impl Live {
    fn add(&mut self, ip: IpAddr, sock: Arc<std::net::TcpStream>, end: watch::Receiver<()>) -> u64 {
        self.next += 1;
        self.conns.insert(self.next, (ip, sock, end));
        self.next
    }

    /// The ends of the connections from `ip` whose peer has closed them.
    fn ending(&self, ip: IpAddr) -> Vec<watch::Receiver<()>> {
        self.conns.values().filter(|(a, s, _)| *a == ip && peer_closed(s)).map(|(_, _, e)| e.clone()).collect()
    }
}

/// Whether the peer of `s` has closed or reset its end, without reading.
fn peer_closed(s: &std::net::TcpStream) -> bool {
    let mut p = [PollFd::new(s, PollFlags::RDHUP)];
    // A zero timeout does not block.
    let now = Timespec { tv_sec: 0, tv_nsec: 0 };
    let n = poll(&mut p, Some(&now)).unwrap_or(0);
    n > 0 && p[0].revents().intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR)
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_whose_peer_closed_it_is_ending() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut live = Live::default();
        let mut clients = Vec::new();
        let mut ends = Vec::new();
        for _ in 0..2 {
            clients.push(std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap());
            let (s, _) = l.accept().unwrap();
            let (tx, rx) = watch::channel(());
            live.add(IpAddr::from([127, 0, 0, 1]), Arc::new(s), rx);
            ends.push(tx);
        }
        let ip = IpAddr::from([127, 0, 0, 1]);
        assert!(live.ending(ip).is_empty(), "both peers are there");
        drop(clients.remove(0));
        // Loopback delivers the FIN at once; allow the kernel a moment anyway.
        let t = std::time::Instant::now();
        while live.ending(ip).is_empty() && t.elapsed() < Duration::from_secs(5) {
            std::thread::yield_now();
        }
        assert_eq!(live.ending(ip).len(), 1);
        assert!(live.ending(IpAddr::from([10, 0, 0, 1])).is_empty(), "another address waits for none");
    }
}
