//! One client connection, sans-IO (MS-SMB2 3.3.1.7), driven like
//! quinn-proto: the transport feeds whole messages to [`Connection::handle_message`]
//! (with `now`), sends what [`Connection::poll_transmit`] yields, calls
//! [`Connection::handle_timeout`] at [`Connection::poll_timeout`], and
//! [`Connection::handle_notices`] when the waker it gave with
//! [`Connection::set_waker`] is called (another connection has posted an
//! oplock break for it, or released what a blocked request waits for).

use crate::conn_state::{ConnState, Connection, Fatal};
use crate::pending::{AsyncWork, Pending};
use crate::transport_info::{TransportInfo, CONTROL_STREAM};
use crate::credits::Credits;
use crate::dispatch;
use crate::server::{Notice, Server};
use bytes::Bytes;
use smbq_crypto::PreauthHash;
use smbq_wire::{framing, transform};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

    /// The streams agreed for this connection: 1 until NEGOTIATE agreed
    /// smbq's multi-stream extension (`docs/multistream.md`).
    pub fn streams(&self) -> u16 {
        self.st.neg.as_ref().map_or(1, |n| n.streams)
    }

    /// Run `f` with the client's tables in [`ConnState`] and the client
    /// locked (see [`crate::client_table`]); then join the client NEGOTIATE
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
