//! One client connection, sans-IO (MS-SMB2 3.3.1.7), driven like
//! quinn-proto: the transport feeds whole messages to [`Connection::handle_message`]
//! (with `now`), sends what [`Connection::poll_transmit`] yields, calls
//! [`Connection::handle_timeout`] at [`Connection::poll_timeout`], and
//! [`Connection::handle_notices`] when the waker it gave with
//! [`Connection::set_waker`] is called (another connection has posted an
//! oplock break for it, or released what a blocked request waits for).

use crate::client::Client;
use crate::credits::Credits;
use crate::dispatch::{self, AsyncWork};
use crate::open::Open;
use crate::server::{Notice, Server};
use crate::session::Session;
use bytes::Bytes;
use smbq_crypto::{Cipher, PreauthHash, SigningAlgorithm};
use smbq_wire::{framing, transform, Dialect};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportKind {
    Tcp,
    Quic,
}

/// What the transport tells the engine about itself; the only place SMB
/// logic learns which transport it runs on.
#[derive(Clone, Debug)]
pub struct TransportInfo {
    pub kind: TransportKind,
    pub peer: Option<SocketAddr>,
    /// Our own address on this connection (for FSCTL_QUERY_NETWORK_INTERFACE_INFO).
    pub local: Option<SocketAddr>,
    /// The transport encrypts and authenticates the server (TLS 1.3 in QUIC).
    pub secure: bool,
    /// The most bidirectional streams the transport carries for this
    /// connection: 1 (TCP; QUIC as MS-SMB2 2.1 has it), or more where smbq's
    /// multi-stream extension may be agreed (`smbq_wire::multistream`).
    pub streams: u16,
}

/// What NEGOTIATE settled (MS-SMB2 3.3.1.7).
#[derive(Clone, Debug)]
pub struct Negotiated {
    pub dialect: Dialect,
    pub client_guid: [u8; 16],
    pub client_capabilities: u32,
    pub client_security_mode: u16,
    pub cipher: Option<Cipher>,
    pub signing: SigningAlgorithm,
    pub max_io: u32,
    /// What the NEGOTIATE response said (FSCTL_VALIDATE_NEGOTIATE_INFO repeats it).
    pub server_capabilities: u32,
    pub server_security_mode: u16,
    /// SMB2_ACCEPT_TRANSPORT_LEVEL_SECURITY accepted: no SMB encryption here.
    pub transport_security: bool,
    /// The SMB3 POSIX extensions agreed (smbq_wire::posix): CREATEs with
    /// the POSIX create context on a `posix` share are POSIX opens.
    pub posix: bool,
    /// Streams agreed by the multi-stream extension (`docs/multistream.md`);
    /// 1 when it was not.
    pub streams: u16,
}

/// Why the connection must end. Fatal stays fatal.
#[derive(Debug, thiserror::Error)]
pub enum Fatal {
    #[error("malformed message: {0}")]
    Malformed(&'static str),
    #[error("peer misbehaved: {0}")]
    PeerMisbehaved(&'static str),
    #[error("timed out: {0}")]
    Timeout(&'static str),
    #[error("connection closed")]
    Closed,
}

/// Connection state handlers may touch (everything but the output queues).
pub struct ConnState {
    pub id: u64,
    pub server: Arc<Server>,
    pub info: TransportInfo,
    pub neg: Option<Negotiated>,
    pub preauth: PreauthHash,
    /// The client's sessions and opens, moved here from [`ConnState::client`]
    /// while this connection handles something (see [`crate::client`]).
    pub sessions: HashMap<u64, Session>,
    pub opens: HashMap<u64, Open>,
    pub creating: HashMap<[u8; 16], u64>,
    pub client: Arc<Client>,
    /// The ClientGuid NEGOTIATE named: the connection joins that client
    /// once the NEGOTIATE is handled.
    pub(crate) join_client: Option<[u8; 16]>,
    /// Answers held back until the instant (failed-logon delay).
    pub(crate) delay_until: Option<Instant>,
    /// The transport runs blocking work handed out as jobs.
    pub(crate) offload: bool,
    pub(crate) jobs: Vec<crate::job::Job>,
    next_job: u64,
}

impl ConnState {
    /// The ClientGuid NEGOTIATE named (zero before it, and for SMB 2.0.2).
    pub fn client_guid(&self) -> [u8; 16] {
        self.neg.as_ref().map(|n| n.client_guid).unwrap_or_default()
    }

    /// Session `sid` if this connection is one of its channels.
    pub fn session(&self, sid: u64) -> Option<&Session> {
        self.sessions.get(&sid).filter(|s| s.on(self.id))
    }

    pub fn session_mut(&mut self, sid: u64) -> Option<&mut Session> {
        let id = self.id;
        self.sessions.get_mut(&sid).filter(|s| s.on(id))
    }

    /// Forget a session: close its opens and trees (LOGOFF, a failed
    /// logon).
    pub fn end_session(&mut self, sid: u64, now: Instant) {
        crate::cmd::close::close_where(self, now, |o| o.session_id == sid);
        self.forget_session(sid);
    }

    /// Durable opens of `pred` are parked for a reconnect, the others
    /// closed (MS-SMB2 3.3.7.1: a lost connection, a session replaced by
    /// a reconnect naming it as PreviousSessionId).
    pub(crate) fn disconnect_opens(&mut self, now: Instant, pred: impl Fn(&Open) -> bool) {
        let ids: Vec<u64> = self.opens.iter().filter(|(_, o)| pred(o)).map(|(&k, _)| k).collect();
        for v in ids {
            let Some(open) = self.opens.remove(&v) else { continue };
            if let Some(open) = self.server.park(open, now) {
                crate::cmd::close::release(&self.server, open, now);
            }
        }
    }

    /// This connection is gone: it leaves the channel lists of its
    /// sessions. A session with another channel lives on there, with its
    /// opens (their breaks now go to that channel); one without parks its
    /// durable opens and closes the others (MS-SMB2 3.3.7.1). Returns the
    /// sessions that live on, and the channel each now lives on.
    fn leave(&mut self, now: Instant) -> Vec<(u64, u64)> {
        let me = self.id;
        let mut moved = Vec::new();
        let sids: Vec<u64> = self.sessions.iter().filter(|(_, s)| s.on(me)).map(|(&k, _)| k).collect();
        for sid in sids {
            let Some(s) = self.sessions.get_mut(&sid) else { continue };
            s.channels.retain(|c| c.connection != me);
            let next = s.channels.iter().find(|c| c.signer.is_some()).map(|c| c.connection);
            match next.filter(|_| s.is_valid()) {
                Some(next) => {
                    moved.push((sid, next));
                    self.server.move_session(sid, next);
                    for o in self.opens.values_mut().filter(|o| o.session_id == sid && o.home == me) {
                        let old = o.owner();
                        o.home = next;
                        if let Some(mut e) = self.server.files.get(o.file_key) {
                            e.reown(old, o.owner());
                        }
                    }
                }
                None => {
                    self.disconnect_opens(now, |o| o.session_id == sid);
                    self.forget_session(sid);
                }
            }
        }
        // The CREATEs that waited here wait on (see Drop), or are gone.
        match moved.first() {
            Some(&(_, next)) => self.creating.values_mut().filter(|c| **c == me).for_each(|c| *c = next),
            None => self.creating.retain(|_, c| *c != me),
        }
        moved
    }

    fn forget_session(&mut self, sid: u64) {
        if self.sessions.remove(&sid).is_some() {
            self.server.count_session(false);
        }
        self.server.unregister_session(sid);
    }

    /// Hand `work` on `file` to the transport; the id its result comes back with.
    pub(crate) fn job(&mut self, file: Arc<dyn smbq_vfs::FileObject>, work: crate::job::Work) -> u64 {
        self.next_job += 1;
        self.jobs.push(crate::job::Job { id: self.next_job, file, work });
        self.next_job
    }

    pub fn volatile_id(&mut self) -> u64 {
        self.server.volatile_id()
    }
}

pub(crate) struct Pending {
    pub async_id: u64,
    pub message_id: u64,
    pub session_id: u64,
    pub tree_id: u32,
    pub command: u16,
    pub encrypted: bool,
    pub signed: bool,
    pub work: AsyncWork,
    /// Taken over from a channel that is gone: carried out, not answered.
    pub adopted: bool,
    /// A job's request, answered by nothing yet: when it gets its interim
    /// response ([`crate::job::INTERIM_DELAY`]). Until then its final
    /// answer is an ordinary one, granting the credits asked for.
    pub interim_at: Option<Instant>,
    pub credit_charge: u16,
    pub credits_asked: u16,
    /// The request's priority bits, echoed (MS-SMB2 2.2.1.2).
    pub priority: u32,
    /// When the request reached the engine (its latency ends with the final answer).
    pub arrived: Instant,
    /// The stream the request came on, where its final answer goes.
    pub stream: u16,
}

impl Pending {
    /// Request `hdr`, arrived at `now`, answered later under `async_id`,
    /// in session and tree `ids`; sealed when `encrypted`. Its interim
    /// response is sent with it unless `interim_at` is set afterwards.
    pub(crate) fn new(hdr: &smbq_wire::Header, now: Instant, async_id: u64, ids: (u64, u32), encrypted: bool, work: AsyncWork) -> Pending {
        use smbq_wire::header::flags;
        Pending {
            async_id,
            message_id: hdr.message_id,
            session_id: ids.0,
            tree_id: ids.1,
            command: hdr.command,
            encrypted,
            signed: hdr.flags & flags::SIGNED != 0,
            work,
            adopted: false,
            interim_at: None,
            credit_charge: hdr.credit_charge,
            credits_asked: hdr.credits,
            priority: hdr.flags & flags::PRIORITY_MASK,
            arrived: now,
            stream: CONTROL_STREAM,
        }
    }

    /// Room before the header of an answer: the Direct TCP prefix, and
    /// the transform header when it is sealed.
    pub(crate) fn prefix(&self) -> usize {
        4 + if self.encrypted { smbq_crypto::TRANSFORM_HEADER_LEN } else { 0 }
    }
}

/// The control stream of smbq's multi-stream extension: the connection's
/// first (and, without the extension, only) stream.
pub const CONTROL_STREAM: u16 = 0;

pub struct Connection {
    pub(crate) st: ConnState,
    pub(crate) credits: Credits,
    pub(crate) pending: Vec<Pending>,
    next_async_id: u64,
    /// Framed answers, each with the stream it goes on.
    out: VecDeque<(u16, Vec<u8>)>,
    held: VecDeque<(u16, Vec<u8>)>,
    /// Where answers queued now go: the stream of the message being
    /// handled (see [`Connection::handle_frame_on`]).
    pub(crate) stream: u16,
    created: Instant,
    last_activity: Instant,
    closed: bool,
    /// A session on this connection has completed its logon (as of the
    /// end of the last thing it handled).
    authenticated: bool,
    /// In the open connections gauge while it lives.
    _counted: crate::metrics::Held,
}

impl Connection {
    pub fn new(server: Arc<Server>, info: TransportInfo, now: Instant) -> Connection {
        server.connections.fetch_add(1, Ordering::Relaxed);
        let counted = server.metrics.as_ref().map_or(crate::metrics::Held::NONE, |m| m.connection(info.kind));
        let credits = Credits::new(server.config.limits.credits);
        let id = server.connection_id();
        server.open_mailbox(id);
        Connection {
            st: ConnState {
                id,
                server,
                info,
                neg: None,
                preauth: PreauthHash::new(),
                sessions: HashMap::new(),
                opens: HashMap::new(),
                creating: HashMap::new(),
                client: Arc::default(),
                join_client: None,
                delay_until: None,
                offload: false,
                jobs: Vec::new(),
                next_job: 0,
            },
            credits,
            pending: Vec::new(),
            next_async_id: 0,
            stream: CONTROL_STREAM,
            out: VecDeque::new(),
            held: VecDeque::new(),
            created: now,
            last_activity: now,
            closed: false,
            authenticated: false,
            _counted: counted,
        }
    }

    /// Whether the server is already at its connection limit (the transport
    /// should refuse before creating a `Connection`).
    pub fn at_limit(server: &Server) -> bool {
        server.connections.load(Ordering::Relaxed) >= server.config.limits.max_connections
    }

    /// One message as framed by the transport (no length prefix). Mutable so
    /// an encrypted message can be decrypted in place.
    pub fn handle_message(&mut self, now: Instant, msg: &mut [u8]) -> Result<(), Fatal> {
        self.handle_frame(now, msg, &[])
    }

    /// A message that arrives as `head` followed by `tail`, the chunks a
    /// transport received it in (SMB over QUIC hands on large messages
    /// so, see smbq-transport). A lone WRITE that is neither signed nor
    /// encrypted is served from them as they are: its data goes to the
    /// file with one pwritev, without being gathered first. Any other
    /// message is joined into one buffer and handled as
    /// [`Connection::handle_message`] does.
    pub fn handle_frame(&mut self, now: Instant, head: &mut [u8], tail: &[Bytes]) -> Result<(), Fatal> {
        self.handle_frame_on(now, CONTROL_STREAM, head, tail)
    }

    /// [`Connection::handle_frame`] for a message that came on `stream`
    /// (smbq's multi-stream extension, `docs/multistream.md`): its answer
    /// goes back on that stream, and so does the final answer of a request
    /// that goes async; interim answers and breaks go on the control
    /// stream, 0. The transport only opens streams past the first once
    /// [`Connection::streams`] says they were agreed.
    pub fn handle_frame_on(&mut self, now: Instant, stream: u16, head: &mut [u8], tail: &[Bytes]) -> Result<(), Fatal> {
        if self.closed {
            return Err(Fatal::Closed);
        }
        if let Some(m) = &self.st.server.metrics {
            m.received(self.st.info.kind, 4 + head.len() + tail.iter().map(|t| t.len()).sum::<usize>());
        }
        self.on_stream(stream, |c| c.with_client(|c| c.frame(now, head, tail)))
    }

    /// Run `f` with answers it queues going on `stream`.
    pub(crate) fn on_stream<R>(&mut self, stream: u16, f: impl FnOnce(&mut Connection) -> R) -> R {
        let was = std::mem::replace(&mut self.stream, stream);
        let r = f(self);
        self.stream = was;
        r
    }

    /// The streams agreed for this connection: 1 until NEGOTIATE agreed
    /// smbq's multi-stream extension (`docs/multistream.md`).
    pub fn streams(&self) -> u16 {
        self.st.neg.as_ref().map_or(1, |n| n.streams)
    }

    /// Run `f` with the client's tables in [`ConnState`] and the client
    /// locked (see [`crate::client`]); then join the client NEGOTIATE
    /// named, if it named one.
    fn with_client<R>(&mut self, f: impl FnOnce(&mut Connection) -> R) -> R {
        let client = Arc::clone(&self.st.client);
        let mut shared = client.lock();
        std::mem::swap(&mut self.st.sessions, &mut shared.sessions);
        std::mem::swap(&mut self.st.opens, &mut shared.opens);
        std::mem::swap(&mut self.st.creating, &mut shared.creating);
        let r = f(self);
        let id = self.st.id;
        self.authenticated = self.st.sessions.values().any(|s| s.on(id) && s.is_valid());
        std::mem::swap(&mut self.st.sessions, &mut shared.sessions);
        std::mem::swap(&mut self.st.opens, &mut shared.opens);
        std::mem::swap(&mut self.st.creating, &mut shared.creating);
        drop(shared);
        if let Some(guid) = self.st.join_client.take() {
            // Right after NEGOTIATE: this connection has no session yet.
            self.st.client = self.st.server.clients.join(guid);
        }
        r
    }

    fn frame(&mut self, now: Instant, head: &mut [u8], tail: &[Bytes]) -> Result<(), Fatal> {
        self.last_activity = now;
        let r = if tail.is_empty() || plain_write(head) {
            self.handle_inner(now, head, tail)
        } else {
            self.handle_inner(now, &mut framing::gather(head.to_vec(), tail), &[])
        };
        if r.is_ok() && !self.pending.is_empty() {
            // A request may have released a lock or closed a watched handle.
            dispatch::retry_pending(self, now);
        }
        if r.is_ok() {
            // Breaks this message caused on this connection's own opens.
            self.notices(now);
        }
        if r.is_err() {
            self.closed = true;
        }
        r
    }

    fn handle_inner(&mut self, now: Instant, msg: &mut [u8], tail: &[Bytes]) -> Result<(), Fatal> {
        if msg.get(..4) == Some(&smbq_wire::header::SMB1_PROTOCOL_ID[..]) {
            let reply = crate::cmd::negotiate::smb1(&mut self.st, &mut self.credits, msg)?;
            self.queue(reply);
            return Ok(());
        }
        if transform::is_transform(msg) {
            let sid = smbq_crypto::transform_session_id(msg).ok_or(Fatal::Malformed("transform header"))?;
            let session = self.st.session(sid).ok_or(Fatal::PeerMisbehaved("transform for unknown session"))?;
            let dec = session.decryptor.as_ref().ok_or(Fatal::PeerMisbehaved("transform without encryption keys"))?;
            let plain = dec.open(msg).map_err(|_| Fatal::PeerMisbehaved("decryption failed"))?;
            return dispatch::process(self, now, plain, Some(sid), &[]);
        }
        dispatch::process(self, now, msg, None, tail)
    }

    /// Queue a framed response. `buf` starts with 4 bytes reserved for the prefix.
    pub(crate) fn queue(&mut self, mut buf: Vec<u8>) {
        let len = buf.len().saturating_sub(4);
        // dispatch bounds every response below it (MAX_RESPONSE).
        debug_assert!(len <= framing::MAX_FRAME, "response of {len} bytes overflows the frame length");
        if let Some(p) = buf.get_mut(..4) {
            p.copy_from_slice(&framing::prefix(len));
        }
        let item = (self.stream, buf);
        if self.st.delay_until.is_some() {
            self.held.push_back(item);
        } else {
            self.out.push_back(item);
        }
    }

    /// Next frame to send, with its 4-byte Direct TCP prefix.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.poll_transmit_on().map(|(_, m)| m)
    }

    /// [`Connection::poll_transmit`] with the stream the frame goes on
    /// (always 0 unless the multi-stream extension was agreed).
    pub fn poll_transmit_on(&mut self) -> Option<(u16, Vec<u8>)> {
        let out = self.out.pop_front();
        if let (Some(m), Some((_, out))) = (&self.st.server.metrics, &out) {
            m.sent(self.st.info.kind, out.len());
        }
        out
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.deadline();
        if let Some(d) = self.st.delay_until {
            t = t.min(d);
        }
        // Opens waiting for an oplock break stop waiting at its deadline.
        for d in self.pending.iter().filter_map(|p| p.work.deadline()) {
            t = t.min(d);
        }
        // Jobs not done in time get their interim response.
        for d in self.pending.iter().filter_map(|p| p.interim_at) {
            t = t.min(d);
        }
        Some(t)
    }

    /// Whether a session on this connection has completed its logon.
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    fn deadline(&self) -> Instant {
        let l = &self.st.server.config.limits;
        if self.authenticated() {
            self.last_activity + Duration::from_secs(l.idle_timeout_secs)
        } else {
            self.created + l.preauth_timeout()
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Fatal> {
        self.with_client(|c| c.timeout(now))
    }

    fn timeout(&mut self, now: Instant) -> Result<(), Fatal> {
        if let Some(d) = self.st.delay_until {
            if now >= d {
                self.st.delay_until = None;
                self.out.extend(self.held.drain(..));
            }
        }
        if self.pending.iter().filter_map(|p| p.work.deadline()).any(|d| now >= d) {
            dispatch::retry_pending(self, now);
        }
        if self.pending.iter().filter_map(|p| p.interim_at).any(|d| now >= d) {
            dispatch::send_interims(self, now);
        }
        if now >= self.deadline() && self.pending.is_empty() {
            let idle_with_opens = !self.st.opens.is_empty() && self.authenticated();
            if !idle_with_opens {
                self.closed = true;
                return Err(Fatal::Timeout(if self.authenticated() {
                    "idle"
                } else {
                    "no authenticated session in time"
                }));
            }
        }
        Ok(())
    }

    /// How the transport is told that [`Connection::handle_notices`] has
    /// work: called from any thread, so it should only wake the driver.
    pub fn set_waker(&self, waker: crate::server::Waker) {
        self.st.server.set_waker(self.st.id, waker);
    }

    /// Act on what other connections posted: send oplock break
    /// notifications (MS-SMB2 3.3.4.6), retry blocked requests.
    pub fn handle_notices(&mut self, now: Instant) {
        if !self.closed {
            self.with_client(|c| c.notices(now));
        }
    }

    fn notices(&mut self, now: Instant) {
        let mut wake = false;
        for n in self.st.server.take_notices(self.st.id) {
            match n {
                Notice::OplockBreak { volatile, level } => dispatch::send_oplock_break(self, volatile, level),
                Notice::LeaseBreak { key, epoch, from, to, ack } => {
                    dispatch::send_lease_break(self, &key, epoch, from, to, ack)
                }
                Notice::Wake => {
                    let adopted = self.st.server.take_adopted(self.st.id);
                    self.pending.extend(adopted.into_iter().map(|p| Pending { adopted: true, ..p }));
                    wake = true;
                }
                Notice::EndSession { session } => {
                    self.st.disconnect_opens(now, |o| o.session_id == session);
                    // Watches on its closed handles end with NOTIFY_CLEANUP
                    // while the session's keys still sign the answers.
                    dispatch::retry_pending(self, now);
                    self.st.forget_session(session);
                    wake = true;
                }
            }
        }
        if wake && !self.pending.is_empty() {
            dispatch::retry_pending(self, now);
        }
    }

    /// The transport runs the blocking work [`Connection::poll_job`] hands
    /// out, and brings back its results.
    pub fn set_offload(&mut self, on: bool) {
        self.st.offload = on;
    }

    pub fn poll_job(&mut self) -> Option<crate::job::Job> {
        self.st.jobs.pop()
    }

    /// A job is done: its request gets its final answer.
    pub fn handle_job_done(&mut self, done: crate::job::JobDone) {
        if !self.closed {
            self.with_client(|c| dispatch::job_done(c, done));
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub(crate) fn async_id(&mut self) -> u64 {
        self.next_async_id += 1;
        self.next_async_id
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let moved = self.with_client(|c| c.st.leave(Instant::now()));
        //= MS-SMB2 3.3.5.2.10 (replay): a CREATE that waited for a break
        //= on a channel that is gone goes on, on another channel of its
        //= session (Samba: smbtorture smb2.replay.dhv2-pending2*); its
        //= answer has nowhere to go, but a replay finds the open.
        for (sid, next) in moved {
            let (adopt, keep): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.pending)
                .into_iter()
                .partition(|p| p.session_id == sid && p.command == smbq_wire::Command::CREATE.0 && matches!(p.work, AsyncWork::Deferred(_)));
            self.pending = keep;
            if !adopt.is_empty() {
                self.st.server.adopt(next, adopt);
            }
        }
        self.st.server.close_mailbox(self.st.id);
        self.st.server.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An SMB2 WRITE alone in its message (no compound), not signed, whose
/// data starts in `head`: one whose data [`Connection::handle_frame`] can
/// take from the chunks. The signature of a signed one covers the whole
/// message, so it is gathered, as is one whose data starts further on.
fn plain_write(head: &[u8]) -> bool {
    smbq_wire::Header::decode(head).is_ok_and(|h| {
        h.command() == smbq_wire::Command::WRITE
            && h.next_command == 0
            && h.flags & smbq_wire::header::flags::SIGNED == 0
            && smbq_wire::write::WriteRequest::decode_head(head, usize::MAX).is_ok()
    })
}
