//! One connection's state, below the commands that change it: what
//! NEGOTIATE settled, the client's sessions and opens while the connection
//! handles something ([`ConnState`]), and the answers it queues
//! ([`Connection`]'s fields; its methods for the transport are in
//! `connection.rs`, the dispatch of requests in `dispatch.rs`).

use crate::client_table::Client;
use crate::credits::Credits;
use crate::open::Open;
use crate::pending::Pending;
use crate::server::Server;
use crate::session::Session;
use crate::transport_info::TransportInfo;
use smbq_crypto::{Cipher, PreauthHash, SigningAlgorithm};
use smbq_wire::{framing, Dialect};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

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
    /// while this connection handles something (see [`crate::client_table`]).
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
    pub(crate) next_job: u64,
}

impl ConnState {
    /// Forget an open: release it from the global file table and, when it was
    /// the last open of a file marked delete-on-close, delete the file.
    pub fn close_open(&mut self, volatile: u64, now: Instant) -> Option<Open> {
        let open = self.opens.remove(&volatile)?;
        Some(crate::teardown::release(&self.server, open, now))
    }

    /// Close every open matching `pred` (tree disconnect, logoff).
    pub fn close_where(&mut self, now: Instant, pred: impl Fn(&Open) -> bool) {
        let ids: Vec<u64> = self.opens.iter().filter(|(_, o)| pred(o)).map(|(k, _)| *k).collect();
        for v in ids {
            self.close_open(v, now);
        }
    }

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
        self.close_where(now, |o| o.session_id == sid);
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
                crate::teardown::release(&self.server, open, now);
            }
        }
    }

    /// This connection is gone: it leaves the channel lists of its
    /// sessions. A session with another channel lives on there, with its
    /// opens (their breaks now go to that channel); one without parks its
    /// durable opens and closes the others (MS-SMB2 3.3.7.1). Returns the
    /// sessions that live on, and the channel each now lives on.
    pub(crate) fn leave(&mut self, now: Instant) -> Vec<(u64, u64)> {
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

    pub(crate) fn forget_session(&mut self, sid: u64) {
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

pub struct Connection {
    pub(crate) st: ConnState,
    pub(crate) credits: Credits,
    pub(crate) pending: Vec<Pending>,
    pub(crate) next_async_id: u64,
    /// Framed answers, each with the stream it goes on.
    pub(crate) out: VecDeque<(u16, Vec<u8>)>,
    pub(crate) held: VecDeque<(u16, Vec<u8>)>,
    /// Where answers queued now go: the stream of the message being
    /// handled (see [`Connection::handle_frame_on`]).
    pub(crate) stream: u16,
    pub(crate) created: Instant,
    pub(crate) last_activity: Instant,
    pub(crate) closed: bool,
    /// A session on this connection has completed its logon (as of the
    /// end of the last thing it handled).
    pub(crate) authenticated: bool,
    /// In the open connections gauge while it lives.
    pub(crate) _counted: crate::metrics::Held,
}

impl Connection {
    /// Run `f` with answers it queues going on `stream`.
    pub(crate) fn on_stream<R>(&mut self, stream: u16, f: impl FnOnce(&mut Connection) -> R) -> R {
        let was = std::mem::replace(&mut self.stream, stream);
        let r = f(self);
        self.stream = was;
        r
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

    pub(crate) fn async_id(&mut self) -> u64 {
        self.next_async_id += 1;
        self.next_async_id
    }
}

/// Dialects we speak, best first.
pub const DIALECTS: [Dialect; 5] = [Dialect::SMB311, Dialect::SMB302, Dialect::SMB300, Dialect::SMB210, Dialect::SMB202];
