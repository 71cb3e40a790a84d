//! Transports for the SMB engine. They only move framed messages: each
//! connection gets a sans-IO [`smbq_server::Connection`] and a
//! [`TransportInfo`]; no SMB logic lives here.
//!
//! Per connection an engine runs the connection state machine (its file
//! I/O and crypto are blocking work, done on a blocking thread while the
//! connection is busy: an idle connection holds no thread) on Direct TCP
//! frames (MS-SMB2 2.1; SMB over QUIC uses the same framing on its
//! stream), and a writer task sends what the engine cannot send at once.
//!
//! Over TCP the engine reads the socket itself ([`TcpInput`]), copying the
//! bytes out of it into the frame. Over QUIC a reader task cuts quinn's
//! chunks into frames: quinn has already copied each packet once, and a
//! large frame's payload goes on in the chunks quinn returns (a `Frame`'s
//! tail), so that a WRITE reaches the file without another copy.

pub mod interfaces;
pub mod quic;
pub mod quic_path;
pub mod tcp;
pub mod tls;

use bytes::{Buf, Bytes, BytesMut};
use smbq_server::job::JobDone;
use smbq_server::{Connection, Server, TransportInfo, CONTROL_STREAM};
use smbq_udp::StreamChunks;
use smbq_wire::framing::{frame_len, FrameError};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info};

/// Frames in flight between the stages: enough to keep the pipe full.
const QUEUE: usize = 32;

/// Spare room the reader keeps for small messages (larger frames reserve
/// their whole length).
const READ_AHEAD: usize = 64 * 1024;

/// One SMB message for the engine: `head`, then `tail` (empty except for a
/// large frame over QUIC, see [`StreamChunks`]), and the share of the
/// memory budgets it holds until the engine has handled it.
pub(crate) struct Frame {
    /// The stream it came on (0 but with smbq's multi-stream extension).
    stream: u16,
    head: BytesMut,
    tail: Vec<Bytes>,
    _held: Held,
}

/// A frame's share of the connection's and the server's memory budgets.
type Held = (OwnedSemaphorePermit, OwnedSemaphorePermit);

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
    async fn admit(&self, len: usize) -> Option<Held> {
        let n = u32::try_from(len.max(1)).ok()?;
        let conn = Arc::clone(&self.conn).acquire_many_owned(n).await.ok()?;
        let server = Arc::clone(&self.server).acquire_many_owned(n).await.ok()?;
        Some((conn, server))
    }

    /// [`Admission::admit`] when it need not wait.
    fn try_admit(&self, len: usize) -> Option<Held> {
        let n = u32::try_from(len.max(1)).ok()?;
        let conn = Arc::clone(&self.conn).try_acquire_many_owned(n).ok()?;
        let server = Arc::clone(&self.server).try_acquire_many_owned(n).ok()?;
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

/// Where a connection's bytes come from.
pub(crate) enum Source {
    /// A TCP socket (a duplicate of its fd; the writer has the other),
    /// which the engine reads itself.
    Tcp(std::net::TcpStream),
    /// The QUIC connection's first stream, which a reader task cuts into
    /// frames, and the connection, whose further streams are accepted
    /// once the multi-stream extension is agreed (see [`accept_streams`]),
    /// and how its handshake ends (they wait for that).
    Quic(StreamChunks, quinn::Connection, quic::Settled),
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
    (tx, adm, udp, peer): (mpsc::Sender<Frame>, Arc<Admission>, Arc<smbq_udp::Counters>, Option<SocketAddr>),
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

/// An eventfd that wakes a busy TCP engine out of its poll(2) when another
/// connection posts it a notice or a job of its is done.
struct Wake(OwnedFd);

impl Wake {
    fn new() -> std::io::Result<Wake> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new fd.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is open and nothing else owns it.
        Ok(Wake(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn signal(&self) {
        let one = 1u64;
        // SAFETY: writes the 8 bytes of a live u64 to our eventfd.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn clear(&self) {
        let mut n = 0u64;
        // SAFETY: reads at most 8 bytes into a live u64 from our non-blocking eventfd.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
    }
}

/// The socket's read side as the engine holds it.
enum ReadIo {
    /// Idle: registered with the runtime, which wakes the engine's task.
    Idle(AsyncFd<std::net::TcpStream>),
    /// Busy: not registered, so no runtime thread wakes for its bytes.
    Busy(std::net::TcpStream),
    /// The registration failed; the connection ends.
    Gone,
}

/// Over TCP the engine reads the socket itself. An idle connection waits
/// for bytes through the runtime (an epoll registration of its own, on a
/// duplicate of the socket's fd); a busy one drops that registration and
/// its blocking thread waits in poll(2) on the socket and a [`Wake`]: a
/// request wakes the thread that handles it, and nothing else (no reader
/// task, no hand-off between threads). The bytes are read into one
/// buffer (one copy out of the socket) and each frame is split off it.
struct TcpInput {
    io: ReadIo,
    acc: BytesMut,
    /// Length and budget share of the frame whose body is being read.
    body: Option<(usize, Held)>,
    wake: Arc<Wake>,
}

impl TcpInput {
    fn fd(&self) -> RawFd {
        match &self.io {
            ReadIo::Idle(a) => a.get_ref().as_raw_fd(),
            ReadIo::Busy(s) => s.as_raw_fd(),
            ReadIo::Gone => -1,
        }
    }

    /// Register with the runtime (in its context) before the engine waits as a task.
    fn register(&mut self) -> std::io::Result<()> {
        if let ReadIo::Busy(s) = std::mem::replace(&mut self.io, ReadIo::Gone) {
            // SAFETY: the TcpStream owns its fd, open for as long as the AsyncFd holds it.
            self.io = ReadIo::Idle(unsafe { AsyncFd::register_with_interest(s, Interest::READABLE) }?);
        }
        Ok(())
    }

    fn deregister(&mut self) {
        if let ReadIo::Idle(a) = std::mem::replace(&mut self.io, ReadIo::Gone) {
            self.io = ReadIo::Busy(a.into_inner());
        }
    }

    /// Wait (as a task) until the socket may have bytes.
    async fn readable(&self) -> Event {
        match &self.io {
            ReadIo::Idle(a) => match a.readable().await {
                Ok(_) => Event::Readable,
                Err(_) => Event::Frame(None),
            },
            ReadIo::Busy(_) => Event::Readable,
            ReadIo::Gone => Event::Frame(None),
        }
    }

    /// The next frame if the socket has all of it now (without waiting,
    /// except for the memory budget); `Frame(None)` when the peer is gone
    /// or breaks the framing or the limits.
    fn try_frame(&mut self, adm: &Admission, rt: &tokio::runtime::Handle, peer: Option<SocketAddr>) -> Option<Event> {
        loop {
            if self.body.is_none() && self.acc.len() >= 4 {
                let prefix = [self.acc[0], self.acc[1], self.acc[2], self.acc[3]];
                let Some(len) = announced_len(prefix, adm.max_frame(), peer) else { return Some(Event::Frame(None)) };
                // The budget is taken before the body is read, as it comes.
                let Some(held) = adm.try_admit(len).or_else(|| rt.block_on(adm.admit(len))) else {
                    return Some(Event::Frame(None));
                };
                self.body = Some((len, held));
            }
            let want = self.body.as_ref().map_or(4, |(len, _)| 4 + len);
            if self.acc.len() >= want {
                if let Some((len, held)) = self.body.take() {
                    self.acc.advance(4);
                    return Some(Event::Frame(Some(Frame { stream: CONTROL_STREAM, head: self.acc.split_to(len), tail: Vec::new(), _held: held })));
                }
            }
            // Nothing is allocated before the peer sends (an idle connection
            // holds no buffer); from then on read ahead at least READ_AHEAD.
            if self.acc.capacity() < want {
                self.acc.reserve((want - self.acc.len()).max(READ_AHEAD));
            } else if self.acc.capacity() == self.acc.len() {
                self.acc.reserve(READ_AHEAD);
            }
            let fd = self.fd();
            let spare = self.acc.spare_capacity_mut();
            // SAFETY: recv writes at most `spare.len()` bytes into the spare
            // capacity; `set_len` below covers only what it wrote.
            let n = unsafe { libc::recv(fd, spare.as_mut_ptr().cast(), spare.len(), 0) };
            match n {
                0 => return Some(Event::Frame(None)),
                // SAFETY: the first `n` spare bytes were written by recv.
                n if n > 0 => unsafe { self.acc.set_len(self.acc.len() + n as usize) },
                _ => match std::io::Error::last_os_error().kind() {
                    std::io::ErrorKind::WouldBlock => return None,
                    std::io::ErrorKind::Interrupted => {}
                    _ => return Some(Event::Frame(None)),
                },
            }
        }
    }

    /// Wait on this (blocking) thread until the socket has bytes, the
    /// [`Wake`] is signalled, or `until`.
    fn wait(&self, until: Instant) {
        let ms = until.saturating_duration_since(Instant::now()).as_micros().div_ceil(1000);
        let mut fds = [
            libc::pollfd { fd: self.fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: self.wake.0.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: `fds` is a live array of two pollfd.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, ms.min(i32::MAX as u128) as i32) };
        if fds[1].revents != 0 {
            self.wake.clear();
        }
    }
}

/// Where the engine's frames come from.
enum Input {
    Frames(mpsc::Receiver<Frame>),
    Tcp(TcpInput),
}

/// A peer that takes no bytes for this long is gone (it stopped reading).
pub const SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// Where framed responses go.
pub(crate) enum FrameWriter {
    /// Registered for writability only (its bytes wake the engine, see
    /// [`TcpInput`]); shared with the engine, which sends on it itself
    /// while nothing waits here (see [`Direct`]).
    Tcp(AsyncFd<Arc<std::net::TcpStream>>),
    /// QUIC takes each frame as `Bytes` without another copy.
    Quic(QuicStreams),
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
    /// The first stream's; [`serve_framed`] connects `added` to [`accept_streams`].
    pub(crate) fn new(first: quinn::SendStream) -> QuicStreams {
        QuicStreams { streams: vec![Some(first)], added: mpsc::unbounded_channel().1 }
    }

    async fn send(&mut self, stream: u16, frame: Vec<u8>) -> std::io::Result<()> {
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

    fn finish(&mut self) {
        for s in self.streams.iter_mut().flatten() {
            let _ = s.finish();
        }
    }
}

impl FrameWriter {
    async fn send(&mut self, stream: u16, frame: Vec<u8>) -> std::io::Result<()> {
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

    fn finish(&mut self) {
        if let FrameWriter::Quic(s) = self {
            s.finish();
        }
    }

    /// The engine's own way to the socket, where there is one.
    fn direct(&self, queued: &Arc<AtomicUsize>) -> Option<Direct> {
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
struct Direct {
    socket: Arc<std::net::TcpStream>,
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
        Source::Tcp(sock) => match Wake::new() {
            Ok(wake) => {
                let io = ReadIo::Busy(sock);
                (Input::Tcp(TcpInput { io, acc: BytesMut::new(), body: None, wake: Arc::new(wake) }), None)
            }
            Err(e) => {
                info!(?peer, error = %e, "no eventfd for the connection; closing");
                return;
            }
        },
        Source::Quic(stream, conn, handshake) => {
            let (in_tx, in_rx) = mpsc::channel::<Frame>(QUEUE);
            let FrameWriter::Quic(streams) = &mut wr else { return };
            let (sends_tx, sends_rx) = mpsc::unbounded_channel();
            streams.added = sends_rx;
            let (agreed_tx, agreed_rx) = tokio::sync::oneshot::channel();
            let more = AbortOnDrop(tokio::spawn(accept_streams(
                conn.clone(),
                handshake,
                agreed_rx,
                sends_tx,
                (in_tx.clone(), Arc::clone(&adm), stream.counters(), peer),
            )));
            hooks.on_streams = Some(Box::new(move |n| {
                conn.set_max_concurrent_bi_streams(quinn::VarInt::from(n));
                let _ = agreed_tx.send(n);
            }));
            let first = read_quic(stream, CONTROL_STREAM, in_tx, Arc::clone(&adm), peer);
            // The control stream's end ends the others' readers too.
            (Input::Frames(in_rx), Some(tokio::spawn(async move {
                let _more = more;
                first.await;
            })))
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

/// What wakes a connection's engine.
enum Event {
    /// A frame, or `None` when the input ended.
    Frame(Option<Frame>),
    /// The TCP socket may have bytes: go and look.
    Readable,
    Notice,
    Timeout,
    /// A job done on the pool (a FLUSH's fsync).
    Job(JobDone),
}

/// A connection's engine and its ends of the channels, moved between the
/// async task that waits and the blocking thread that works.
struct Engine {
    conn: Connection,
    input: Input,
    peer: Option<SocketAddr>,
    tx: mpsc::Sender<(u16, Vec<u8>)>,
    direct: Option<Direct>,
    adm: Arc<Admission>,
    hooks: Hooks,
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
        let Engine { input, tx, notices, done_rx, .. } = self;
        let input = async {
            match input {
                Input::Frames(rx) => Event::Frame(rx.recv().await),
                Input::Tcp(t) => t.readable().await,
            }
        };
        tokio::select! {
            ev = input => ev,
            _ = notices.notified() => Event::Notice,
            Some(d) = done_rx.recv() => Event::Job(d),
            _ = sleep => Event::Timeout,
            // The writer is gone (the peer stopped reading).
            _ = tx.closed() => Event::Frame(None),
        }
    }

    /// An event that is there already, taken without waiting (and without
    /// a timer): while a connection is busy most are.
    fn ready(&mut self, rt: &tokio::runtime::Handle) -> Option<Event> {
        if let Ok(d) = self.done_rx.try_recv() {
            return Some(Event::Job(d));
        }
        let notified = std::pin::pin!(self.notices.notified());
        if notified.poll(&mut std::task::Context::from_waker(std::task::Waker::noop())).is_ready() {
            return Some(Event::Notice);
        }
        let frame = match &mut self.input {
            Input::Frames(rx) => match rx.try_recv() {
                Ok(f) => Some(Event::Frame(Some(f))),
                Err(mpsc::error::TryRecvError::Disconnected) => Some(Event::Frame(None)),
                Err(mpsc::error::TryRecvError::Empty) => None,
            },
            Input::Tcp(t) => t.try_frame(&self.adm, rt, self.peer),
        };
        // Else a timer that is due (one that stays due cannot hold up the rest).
        frame.or_else(|| self.conn.poll_timeout().is_some_and(|d| d <= Instant::now()).then_some(Event::Timeout))
    }

    /// The next event while busy: one that is there, or one that comes
    /// within [`BUSY_LINGER`]; `None` once the connection is quiet.
    fn next_busy(&mut self, rt: &tokio::runtime::Handle) -> Option<Event> {
        if let Some(ev) = self.ready(rt) {
            return Some(ev);
        }
        let quiet = Instant::now() + BUSY_LINGER;
        loop {
            match &self.input {
                Input::Frames(_) => {
                    return rt.block_on(async { tokio::time::timeout(BUSY_LINGER, self.next()).await }).ok();
                }
                Input::Tcp(t) => t.wait(self.conn.poll_timeout().map_or(quiet, |d| d.min(quiet))),
            }
            if let Some(ev) = self.ready(rt) {
                return Some(ev);
            }
            if Instant::now() >= quiet {
                return None;
            }
        }
    }

    /// What wakes a busy TCP engine besides its socket.
    fn wake(&self) -> Option<Arc<Wake>> {
        match &self.input {
            Input::Tcp(t) => Some(Arc::clone(&t.wake)),
            Input::Frames(_) => None,
        }
    }

    /// Handle `ev` and what follows it within [`BUSY_LINGER`], on this
    /// (blocking) thread; `Some(reason)` when the connection ends.
    fn work(&mut self, mut ev: Event, rt: &tokio::runtime::Handle) -> Option<String> {
        loop {
            let result = match ev {
                Event::Frame(None) => return Some("peer closed".to_string()),
                Event::Readable => Ok(()),
                Event::Notice => {
                    self.conn.handle_notices(Instant::now());
                    Ok(())
                }
                Event::Frame(Some(mut f)) => {
                    let r = self.conn.handle_frame_on(Instant::now(), f.stream, &mut f.head, &f.tail);
                    if self.adm.note_logon(&self.conn) {
                        if let Some(f) = self.hooks.on_logon.take() {
                            f();
                        }
                    }
                    if self.conn.streams() > 1 {
                        if let Some(f) = self.hooks.on_streams.take() {
                            f(self.conn.streams());
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
                let wake = self.wake();
                rt.spawn_blocking(move || {
                    let _ = tx.send(job.run());
                    if let Some(w) = wake {
                        w.signal();
                    }
                });
            }
            while let Some((stream, out)) = self.conn.poll_transmit_on() {
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
                    if self.tx.blocking_send((stream, out)).is_err() {
                        return Some("peer stopped reading".to_string());
                    }
                }
            }
            if let Err(e) = result {
                return Some(e.to_string());
            }
            ev = self.next_busy(rt)?;
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
    input: Input,
    (tx, direct): (mpsc::Sender<(u16, Vec<u8>)>, Option<Direct>),
    adm: Arc<Admission>,
    hooks: Hooks,
) {
    let peer = info.peer;
    let mut conn = Connection::new(server, info, Instant::now());
    conn.set_offload(true);
    // Other connections post oplock breaks and wake-ups to this one.
    let notices = Arc::new(tokio::sync::Notify::new());
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let mut engine =
        Engine { conn, input, peer, tx, direct, adm, hooks, notices, done_tx, done_rx };
    let (n, wake) = (Arc::clone(&engine.notices), engine.wake());
    engine.conn.set_waker(Arc::new(move || {
        n.notify_one();
        if let Some(w) = &wake {
            w.signal();
        }
    }));
    let rt = tokio::runtime::Handle::current();
    let reason = loop {
        if let Input::Tcp(t) = &mut engine.input {
            if let Err(e) = t.register() {
                break format!("cannot wait for the socket: {e}");
            }
        }
        let ev = engine.next().await;
        if let Input::Tcp(t) = &mut engine.input {
            t.deregister();
        }
        let rt = rt.clone();
        let busy = tokio::task::spawn_blocking(move || match engine.work(ev, &rt) {
            None => Ok(engine),
            Some(reason) => {
                // The connection's opens are closed here, on the thread
                // that saw its end, before anything else is waited for:
                // a client that drops a connection and opens its files
                // again from a new one (smbtorture between subtests) must
                // not find them open, as it does not on smbd. A hop back
                // to the task and out to the pool again (file I/O) cost
                // two wake-ups, several milliseconds on a loaded machine:
                // longer than the new connection's NEGOTIATE, SESSION_SETUP,
                // TREE_CONNECT and CREATE.
                drop(engine);
                Err(reason)
            }
        });
        match busy.await {
            Ok(Ok(e)) => engine = e,
            Ok(Err(reason)) => break reason,
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
