//! Transports for the SMB engine. They only move framed messages: each
//! connection gets a sans-IO [`smbq_server::Connection`] and a
//! [`TransportInfo`]; no SMB logic lives here.
//!
//! Per connection three tasks run in parallel: a reader that cuts the
//! byte stream into Direct TCP frames (MS-SMB2 2.1; SMB over QUIC uses the
//! same framing on its stream), the engine that runs the connection state
//! machine (its file I/O and crypto are blocking work, done on a blocking
//! thread while the connection is busy: an idle connection holds no
//! thread), and a writer.
//!
//! Over TCP the reader copies the bytes out of the socket into the frame.
//! Over QUIC quinn has already copied each packet once; a large frame's
//! payload goes on in the chunks quinn returns (a `Frame`'s tail), so
//! that a WRITE reaches the file without another copy.

pub mod interfaces;
pub mod quic;
pub mod tcp;
pub mod tls;

use bytes::{Buf, Bytes, BytesMut};
use smbq_server::job::JobDone;
use smbq_server::{Connection, Server, TransportInfo};
use smbq_udp::StreamChunks;
use smbq_wire::framing::{frame_len, FrameError};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info};

/// Frames in flight between the stages: enough to keep the pipe full.
const QUEUE: usize = 32;

/// Spare room the reader keeps for small messages (larger frames reserve
/// their whole length).
const READ_AHEAD: usize = 64 * 1024;

/// Read into `acc` until it holds `want` bytes (`want` is bounded by the
/// frame limit). False when the peer is gone first.
async fn fill<R: AsyncRead + Unpin>(rd: &mut R, acc: &mut BytesMut, want: usize) -> bool {
    // Nothing is allocated before the peer sends (an idle connection
    // holds no buffer); from then on read ahead at least READ_AHEAD.
    if acc.capacity() < want {
        acc.reserve((want - acc.len()).max(READ_AHEAD));
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
/// large frame over QUIC, see [`StreamChunks`]), and the share of the
/// memory budgets it holds until the engine has handled it.
pub(crate) struct Frame {
    head: BytesMut,
    tail: Vec<Bytes>,
    _held: (OwnedSemaphorePermit, OwnedSemaphorePermit),
}

/// Frames before logon: this many of `limits.preauth_max_frame()` may
/// wait for the engine.
const PREAUTH_FRAMES: usize = 2;

/// What one connection may queue after logon at most, whatever its credit
/// window allows (8192 credits would charge 512 MiB).
const MAX_QUEUED: usize = 64 << 20;

/// What one connection's reader may take in ahead of its engine. Before
/// a session exists a frame over `limits.preauth_max_frame()` (64 KiB of
/// security blob plus headers) closes the connection and only
/// [`PREAUTH_FRAMES`] of them are buffered. From logon on, frames up to
/// `limits.max_frame()` and as many bytes as the credit window can
/// charge (credits × 64 KiB, MS-SMB2 3.3.5.2.5; at most [`MAX_QUEUED`],
/// at least two largest frames). Every frame also holds
/// its bytes of the server-wide `limits.memory_budget`; readers wait while
/// it is spent.
struct Admission {
    server: Arc<Semaphore>,
    conn: Arc<Semaphore>,
    logged_on: AtomicBool,
    preauth_max: usize,
    max: usize,
    /// Permits the connection gains at logon.
    grown: usize,
}

impl Admission {
    fn new(server: &Server) -> Admission {
        let l = &server.config.limits;
        let preauth = PREAUTH_FRAMES * l.preauth_max_frame();
        let after = (usize::from(l.credits) * 65536).min(MAX_QUEUED).max(2 * l.max_frame());
        Admission {
            server: Arc::clone(&server.memory),
            conn: Arc::new(Semaphore::new(preauth)),
            logged_on: AtomicBool::new(false),
            preauth_max: l.preauth_max_frame(),
            max: l.max_frame(),
            grown: after.saturating_sub(preauth),
        }
    }

    fn max_frame(&self) -> usize {
        if self.logged_on.load(Ordering::Acquire) {
            self.max
        } else {
            self.preauth_max
        }
    }

    /// Wait until `len` bytes fit both budgets; `None` once the server's
    /// budget is closed.
    async fn admit(&self, len: usize) -> Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)> {
        let n = u32::try_from(len.max(1)).ok()?;
        let conn = Arc::clone(&self.conn).acquire_many_owned(n).await.ok()?;
        let server = Arc::clone(&self.server).acquire_many_owned(n).await.ok()?;
        Some((conn, server))
    }

    /// Called by the engine after each frame: true the first time the
    /// connection has an authenticated session.
    fn note_logon(&self, conn: &Connection) -> bool {
        if self.logged_on.load(Ordering::Relaxed) || !conn.authenticated() {
            return false;
        }
        self.conn.add_permits(self.grown);
        self.logged_on.store(true, Ordering::Release);
        true
    }
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
    /// breaks the framing or the limits, or the engine is gone.
    async fn run(self, tx: mpsc::Sender<Frame>, adm: Arc<Admission>, peer: Option<SocketAddr>) {
        match self {
            FrameReader::Tcp(mut rd) => {
                // One buffer takes the bytes as they come (one copy out of
                // the socket); each frame is split off it without another.
                let mut acc = BytesMut::new();
                loop {
                    if !fill(&mut rd, &mut acc, 4).await {
                        return;
                    }
                    let mut prefix = [0u8; 4];
                    prefix.copy_from_slice(&acc[..4]);
                    let Some(len) = announced_len(prefix, adm.max_frame(), peer) else { return };
                    let Some(held) = adm.admit(len).await else { return };
                    if !fill(&mut rd, &mut acc, 4 + len).await {
                        return;
                    }
                    acc.advance(4);
                    if tx.send(Frame { head: acc.split_to(len), tail: Vec::new(), _held: held }).await.is_err() {
                        return;
                    }
                }
            }
            FrameReader::Quic(stream) => {
                let mut rd = StreamChunks::new(stream);
                while let Some(prefix) = rd.next_prefix().await {
                    let Some(len) = announced_len(prefix, adm.max_frame(), peer) else { return };
                    let Some(held) = adm.admit(len).await else { return };
                    let Some((head, tail)) = rd.next_body(len).await else { return };
                    if tx.send(Frame { head, tail, _held: held }).await.is_err() {
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
    /// Shared with the engine, which sends on it itself while nothing
    /// waits here (see [`Direct`]); the last one to drop it ends the
    /// sending side.
    Tcp(Arc<tokio::net::tcp::OwnedWriteHalf>),
    /// QUIC takes each frame as `Bytes` without another copy.
    Quic(quinn::SendStream),
}

impl FrameWriter {
    async fn send(&mut self, frame: Vec<u8>) -> std::io::Result<()> {
        match self {
            FrameWriter::Tcp(w) => {
                let mut done = 0;
                while done < frame.len() {
                    w.writable().await?;
                    match w.try_write(&frame[done..]) {
                        Ok(n) => done += n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
            FrameWriter::Quic(s) => s.write_chunk(Bytes::from(frame)).await.map_err(std::io::Error::other),
        }
    }

    async fn finish(&mut self) {
        if let FrameWriter::Quic(s) = self {
            let _ = s.finish();
        }
    }

    /// The engine's own way to the socket, where there is one.
    fn direct(&self, queued: &Arc<AtomicUsize>) -> Option<Direct> {
        match self {
            FrameWriter::Tcp(w) => Some(Direct { socket: Arc::clone(w), queued: Arc::clone(queued) }),
            FrameWriter::Quic(_) => None,
        }
    }
}

/// The engine writes an answer to the TCP socket itself when the writer
/// task has nothing queued and the socket takes it whole: a hand-off (a
/// thread wake-up) less per answer. Otherwise it queues it (and what is
/// left of it) for the writer, which keeps the order and the send timeout.
struct Direct {
    socket: Arc<tokio::net::tcp::OwnedWriteHalf>,
    /// Frames handed to the writer and not yet sent.
    queued: Arc<AtomicUsize>,
}

impl Direct {
    /// Send what the socket takes now; what is left for the writer (None
    /// when all went). An error ends the connection.
    fn try_send(&self, mut frame: Vec<u8>) -> std::io::Result<Option<Vec<u8>>> {
        if self.queued.load(Ordering::Acquire) > 0 {
            return Ok(Some(frame));
        }
        match self.socket.try_write(&frame) {
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
/// `on_logon` runs (on the engine's thread) when the connection first has
/// an authenticated session: QUIC opens its flow-control window then.
pub(crate) async fn serve_framed(
    rd: FrameReader,
    mut wr: FrameWriter,
    info: TransportInfo,
    server: Arc<Server>,
    send_timeout: Duration,
    on_logon: Box<dyn FnOnce() + Send>,
) {
    let peer = info.peer;
    let adm = Arc::new(Admission::new(&server));
    let (in_tx, in_rx) = mpsc::channel::<Frame>(QUEUE);
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(QUEUE);
    let reader = tokio::spawn(rd.run(in_tx, Arc::clone(&adm), peer));
    let queued = Arc::new(AtomicUsize::new(0));
    let direct = wr.direct(&queued);
    let mut writer = tokio::spawn(async move {
        while let Some(frame) = out_rx.recv().await {
            let sent = tokio::time::timeout(send_timeout, wr.send(frame)).await;
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
        wr.finish().await;
    });
    let mut engine = tokio::spawn(run_engine(server, info, in_rx, (out_tx, direct), adm, on_logon));
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

/// What wakes a connection's engine.
enum Event {
    Frame(Option<Frame>),
    Notice,
    Timeout,
    /// A job done on the pool (a FLUSH's fsync).
    Job(JobDone),
}

/// A connection's engine and its ends of the channels, moved between the
/// async task that waits and the blocking thread that works.
struct Engine {
    conn: Connection,
    rx: mpsc::Receiver<Frame>,
    tx: mpsc::Sender<Vec<u8>>,
    direct: Option<Direct>,
    adm: Arc<Admission>,
    on_logon: Option<Box<dyn FnOnce() + Send>>,
    notices: Arc<tokio::sync::Notify>,
    /// Jobs done on the blocking pool come back here.
    done_tx: mpsc::UnboundedSender<JobDone>,
    done_rx: mpsc::UnboundedReceiver<JobDone>,
}

/// A busy connection keeps its thread this long after its last event,
/// so a stream of requests is handled without a hand-off per request.
const BUSY_LINGER: Duration = Duration::from_millis(20);

impl Engine {
    /// The next event: a frame, a notice from another connection, or the
    /// engine's own timer.
    async fn next(&mut self) -> Event {
        let deadline = self.conn.poll_timeout();
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            m = self.rx.recv() => Event::Frame(m),
            _ = self.notices.notified() => Event::Notice,
            Some(d) = self.done_rx.recv() => Event::Job(d),
            _ = sleep => Event::Timeout,
        }
    }

    /// An event that is there already, taken without waiting (and without
    /// a timer): while a connection is busy most are.
    fn ready(&mut self) -> Option<Event> {
        if let Ok(d) = self.done_rx.try_recv() {
            return Some(Event::Job(d));
        }
        let notified = std::pin::pin!(self.notices.notified());
        if notified.poll(&mut std::task::Context::from_waker(std::task::Waker::noop())).is_ready() {
            return Some(Event::Notice);
        }
        match self.rx.try_recv() {
            Ok(f) => Some(Event::Frame(Some(f))),
            Err(mpsc::error::TryRecvError::Disconnected) => Some(Event::Frame(None)),
            // A timer that is due (one that stays due cannot hold up the rest).
            Err(mpsc::error::TryRecvError::Empty) => {
                self.conn.poll_timeout().is_some_and(|d| d <= Instant::now()).then_some(Event::Timeout)
            }
        }
    }

    /// Handle `ev` and what follows it within [`BUSY_LINGER`], on this
    /// (blocking) thread; `Some(reason)` when the connection ends.
    fn work(&mut self, mut ev: Event, rt: &tokio::runtime::Handle) -> Option<String> {
        loop {
            let result = match ev {
                Event::Frame(None) => return Some("peer closed".to_string()),
                Event::Notice => {
                    self.conn.handle_notices(Instant::now());
                    Ok(())
                }
                Event::Frame(Some(mut f)) => {
                    let r = self.conn.handle_frame(Instant::now(), &mut f.head, &f.tail);
                    if self.adm.note_logon(&self.conn) {
                        if let Some(f) = self.on_logon.take() {
                            f();
                        }
                    }
                    r
                }
                Event::Timeout => self.conn.handle_timeout(Instant::now()),
                Event::Job(d) => {
                    self.conn.handle_job_done(d);
                    Ok(())
                }
            };
            // Blocking work goes to the pool (bounded: max_blocking_threads);
            // the connection goes on meanwhile.
            while let Some(job) = self.conn.poll_job() {
                let tx = self.done_tx.clone();
                rt.spawn_blocking(move || {
                    let _ = tx.send(job.run());
                });
            }
            while let Some(out) = self.conn.poll_transmit() {
                let left = match &self.direct {
                    Some(d) => match d.try_send(out) {
                        Ok(left) => left,
                        Err(e) => return Some(format!("send failed: {e}")),
                    },
                    None => Some(out),
                };
                if let Some(out) = left {
                    if let Some(d) = &self.direct {
                        d.queued.fetch_add(1, Ordering::AcqRel);
                    }
                    if self.tx.blocking_send(out).is_err() {
                        return Some("peer stopped reading".to_string());
                    }
                }
            }
            if let Err(e) = result {
                return Some(e.to_string());
            }
            ev = match self.ready() {
                Some(ev) => ev,
                None => rt.block_on(async { tokio::time::timeout(BUSY_LINGER, self.next()).await }).ok()?,
            };
        }
    }
}

/// Run one connection's engine given its framed input and output channels.
/// Returns when the peer goes away, the engine closes it, or it times out.
///
/// An idle connection holds no thread: the engine waits as a task. An
/// event moves it to a blocking thread (its file I/O and crypto block),
/// where it stays while events keep coming, and back once the
/// connection has been quiet for [`BUSY_LINGER`]: the threads in use
/// follow the connections that are busy, not those that are open.
async fn run_engine(
    server: Arc<Server>,
    info: TransportInfo,
    rx: mpsc::Receiver<Frame>,
    (tx, direct): (mpsc::Sender<Vec<u8>>, Option<Direct>),
    adm: Arc<Admission>,
    on_logon: Box<dyn FnOnce() + Send>,
) {
    let peer = info.peer;
    let mut conn = Connection::new(server, info, Instant::now());
    conn.set_offload(true);
    // Other connections post oplock breaks and wake-ups to this one.
    let notices = Arc::new(tokio::sync::Notify::new());
    let n = Arc::clone(&notices);
    conn.set_waker(Arc::new(move || n.notify_one()));
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let mut engine = Engine { conn, rx, tx, direct, adm, on_logon: Some(on_logon), notices, done_tx, done_rx };
    let rt = tokio::runtime::Handle::current();
    let reason = loop {
        let ev = engine.next().await;
        let rt = rt.clone();
        let busy = tokio::task::spawn_blocking(move || {
            let end = engine.work(ev, &rt);
            (engine, end)
        });
        match busy.await {
            Ok((e, None)) => engine = e,
            Ok((e, Some(reason))) => {
                // Closing the connection's opens may take file I/O.
                let _ = tokio::task::spawn_blocking(move || drop(e)).await;
                break reason;
            }
            Err(_) => break "engine failed".to_string(),
        }
    };
    if reason == "peer closed" {
        debug!(?peer, "connection closed by peer");
    } else {
        info!(?peer, %reason, "closing connection");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smbq_server::ServerConfig;

    fn server(budget: usize) -> Server {
        let mut config = ServerConfig::default();
        config.limits.memory_budget = budget;
        Server::new(config, smbq_auth::UserDb::new()).expect("server")
    }

    /// Whether `admit` would wait (it resolves at once when it may not).
    async fn waits(adm: &Admission, len: usize) -> bool {
        tokio::time::timeout(Duration::from_millis(50), adm.admit(len)).await.is_err()
    }

    #[tokio::test]
    async fn before_logon_two_small_frames_wait_for_the_engine() {
        let srv = server(1 << 30);
        let adm = Admission::new(&srv);
        let l = &srv.config.limits;
        assert_eq!(adm.max_frame(), l.preauth_max_frame());
        assert!(adm.max_frame() < 128 << 10, "pre-logon frames stay small");
        let first = adm.admit(l.preauth_max_frame()).await.expect("budget open");
        let _second = adm.admit(l.preauth_max_frame()).await.expect("budget open");
        assert!(waits(&adm, 1).await, "a third frame waits while two are unhandled");
        drop(first);
        assert!(!waits(&adm, 1).await, "handling one lets the next in");
    }

    #[tokio::test]
    async fn the_server_wide_budget_bounds_all_connections_together() {
        let l = smbq_server::Limits::default();
        let srv = server(l.max_frame());
        let (a, b) = (Admission::new(&srv), Admission::new(&srv));
        a.conn.add_permits(a.grown); // as at logon
        let held = a.admit(l.max_frame() - 1000).await.expect("budget open");
        let rest = tokio::time::timeout(Duration::from_secs(5), b.admit(1000)).await;
        assert!(matches!(rest, Ok(Some(_))), "what is left of the budget is given");
        assert!(waits(&b, 1000).await, "another connection waits once the budget is spent");
        drop(held);
        assert!(!waits(&b, 1000).await, "and goes on once the first connection's frame is handled");
    }
}
