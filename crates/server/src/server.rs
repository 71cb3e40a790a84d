//! State shared by all connections: configuration, users, shares, the
//! global table of open files (share modes, delete-pending, byte-range
//! locks, oplocks), and each connection's mailbox: how one connection's
//! request reaches another (an oplock break to send, a blocked request
//! to retry).

use crate::share::{Share, ShareKind};
use crate::config::{EncryptPolicy, ServerConfig, ShareConfig};
use crate::files::FileTable;
use smbq_auth::UserDb;
use smbq_vfs::FileSystem;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;
use tokio::sync::Semaphore;

/// What one connection asks of another (MS-SMB2 3.3.4.6: an oplock break
/// goes out on the connection of the open that holds it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// Send an oplock break notification for the open `volatile`.
    OplockBreak { volatile: u64, level: u8 },
    /// Send a lease break notification (MS-SMB2 2.2.23.2).
    LeaseBreak { key: [u8; 16], epoch: u16, from: u8, to: u8, ack: bool },
    /// Something a blocked request waits for changed: retry it.
    Wake,
    /// The client logged on again naming this session as its previous
    /// one (MS-SMB2 3.3.5.5.3 PreviousSessionId): end it.
    EndSession { session: u64 },
}

/// What the server-wide session table knows of a session: where it lives,
/// whose it is, and what its connection negotiated (a bind on another
/// connection is checked against it, MS-SMB2 3.3.5.5).
#[derive(Clone, Debug)]
pub struct LiveSession {
    pub connection: u64,
    /// Lower-case user name.
    pub user: String,
    pub dialect: smbq_wire::Dialect,
    pub signing: smbq_crypto::SigningAlgorithm,
    pub cipher: Option<smbq_crypto::Cipher>,
    /// Session.SigningKey: verifies a binding request from any connection
    /// and signs the answer (MS-SMB2 3.3.5.2.4, 3.3.4.1.1).
    pub signer: Arc<smbq_crypto::Signer>,
    /// Set when a reconnect replaces the session: from then on its
    /// requests get USER_SESSION_DELETED, before its connection has
    /// closed its opens (the session's own copy of the flag).
    pub ended: Arc<std::sync::atomic::AtomicBool>,
}

/// How a transport learns that its connection has notices.
pub type Waker = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct Mailbox {
    notices: Vec<Notice>,
    waker: Option<Waker>,
}

/// Where the engine gets wall-clock time and random numbers: the system's
/// ([`Sources::system`]), or a test's fixed clock and seeded generator
/// ([`Sources::seeded`]), with which the same requests get the same
/// answers byte for byte. (Timers run on the `Instant` the transport
/// passes in.) And where it hears of changes to watched directories:
/// each server has its own [`crate::notify::Watcher`].
pub struct Sources {
    pub clock: Box<dyn Fn() -> SystemTime + Send + Sync>,
    pub rng: Box<dyn rand::RngCore + Send>,
    pub notify: crate::notify::Watcher,
}

impl Sources {
    pub fn system() -> Sources {
        Sources {
            clock: Box::new(SystemTime::now),
            rng: Box::new(<rand::rngs::StdRng as rand::SeedableRng>::from_entropy()),
            notify: crate::notify::Watcher::new(),
        }
    }

    pub fn seeded(seed: u64, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Sources {
        Sources {
            clock: Box::new(clock),
            rng: Box::new(<rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed)),
            notify: crate::notify::Watcher::new(),
        }
    }
}

pub struct Server {
    pub config: ServerConfig,
    clock: Box<dyn Fn() -> SystemTime + Send + Sync>,
    rng: Mutex<Box<dyn rand::RngCore + Send>>,
    pub users: RwLock<UserDb>,
    /// The shares, IPC$ last; a reload replaces the list.
    shares: RwLock<Vec<Arc<Share>>>,
    pub guid: [u8; 16],
    /// FILETIME of start-up.
    pub start_time: u64,
    /// The open files, each locked alone (see its lock order).
    pub files: FileTable,
    next_connection_id: AtomicU64,
    next_volatile: AtomicU64,
    next_session_id: AtomicU64,
    pub connections: AtomicUsize,
    pub sessions: AtomicUsize,
    /// What the engine counts, when `config.metrics` is set.
    pub metrics: Option<crate::metrics::Metrics>,
    /// `limits.memory_budget`: bytes of received, not yet handled requests
    /// all connections together may hold (the transports take from it).
    pub memory: Arc<Semaphore>,
    mailboxes: Mutex<HashMap<u64, Mailbox>>,
    /// Authenticated sessions (MS-SMB2 3.3.1.5 GlobalSessionTable).
    live_sessions: Mutex<HashMap<u64, LiveSession>>,
    /// Waiting requests of connections that are gone, for another channel
    /// of their session to carry out.
    adopted: Mutex<HashMap<u64, Vec<crate::pending::Pending>>>,
    /// The clients (ClientGuid) and what their connections share.
    pub(crate) clients: crate::client_table::Registry,
    /// Durable opens whose connection is gone.
    pub(crate) durable: Mutex<crate::durable::Table>,
    /// Watches directories for CHANGE_NOTIFY (from [`Sources`]).
    pub(crate) notify: crate::notify::Watcher,
}

/// What [`Server::reload`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reloaded {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    pub users_removed: Vec<String>,
}

/// The shares `configs` describe, then IPC$: those of `old` whose
/// configuration is the same are kept as they are.
fn open_shares(configs: &[ShareConfig], old: &[Arc<Share>]) -> Result<Vec<Arc<Share>>, String> {
    let mut shares = Vec::new();
    for s in configs {
        if shares.iter().any(|o: &Arc<Share>| o.name.eq_ignore_ascii_case(&s.name)) {
            return Err(format!("share {} is named twice", s.name));
        }
        match old.iter().find(|o| o.name.eq_ignore_ascii_case(&s.name) && o.config.same_as(s)) {
            Some(o) => shares.push(Arc::clone(o)),
            None => shares.push(Share::open(s)?),
        }
    }
    match old.iter().find(|o| matches!(o.kind, ShareKind::Ipc)) {
        Some(ipc) => shares.push(Arc::clone(ipc)),
        None => shares.push(Arc::new(Share::new("IPC$", ShareKind::Ipc, EncryptPolicy::Off))),
    }
    Ok(shares)
}

impl Server {
    /// Open every share root; a missing or unreadable one is an error.
    pub fn new(config: ServerConfig, users: UserDb) -> Result<Server, String> {
        Server::with_sources(config, users, Sources::system())
    }

    /// As [`Server::new`], with the clock and randomness given.
    pub fn with_sources(config: ServerConfig, users: UserDb, sources: Sources) -> Result<Server, String> {
        let Sources { clock, mut rng, notify } = sources;
        config.limits.check()?;
        let shares = open_shares(&config.shares, &[])?;
        Ok(Server {
            users: RwLock::new(users),
            shares: RwLock::new(shares),
            guid: rand::Rng::gen(&mut rng),
            start_time: now_filetime(clock()),
            clock,
            rng: Mutex::new(rng),
            files: FileTable::default(),
            next_connection_id: AtomicU64::new(1),
            next_volatile: AtomicU64::new(1),
            next_session_id: AtomicU64::new(1),
            connections: AtomicUsize::new(0),
            sessions: AtomicUsize::new(0),
            metrics: config.metrics.then(crate::metrics::Metrics::new),
            memory: Arc::new(Semaphore::new(config.limits.memory_budget.min(Semaphore::MAX_PERMITS))),
            mailboxes: Mutex::new(HashMap::new()),
            live_sessions: Mutex::new(HashMap::new()),
            durable: Mutex::new(Default::default()),
            clients: Default::default(),
            adopted: Default::default(),
            notify,
            config,
        })
    }

    /// Deliver `notice` to connection `id` and wake its transport; a
    /// connection that is gone is ignored. Taken with the file table
    /// locked or not (the mailboxes are locked after it, never before).
    pub fn post(&self, id: u64, notice: Notice) {
        let waker = {
            let mut m = self.mailboxes.lock().unwrap_or_else(|p| p.into_inner());
            let Some(b) = m.get_mut(&id) else { return };
            if notice == Notice::Wake && b.notices.contains(&Notice::Wake) {
                return;
            }
            b.notices.push(notice);
            b.waker.clone()
        };
        if let Some(w) = waker {
            w();
        }
    }

    /// How long a break waits for its acknowledgment.
    pub fn break_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.config.limits.oplock_break_secs)
    }

    /// Send oplock and lease breaks to the connections that hold them.
    /// Something in the directory holding `path` changed: its leases break
    /// to none, but `spared` (client, ParentLeaseKey of the change; see
    /// [`crate::oplock::break_leases`]).
    pub(crate) fn dir_changed(&self, fs: &dyn FileSystem, path: &str, spared: Option<crate::files::LeaseId>, now: std::time::Instant) {
        if !self.files.any_lease() {
            return;
        }
        let parent = path.rsplit_once('\\').map_or("", |(d, _)| d);
        let Ok(st) = fs.stat_path(parent) else { return };
        let breaks = {
            let Some(mut e) = self.files.get(st.file_id) else { return };
            let all = crate::oplock::READ | crate::oplock::HANDLE | crate::oplock::WRITE;
            crate::oplock::break_leases(&mut e, spared.as_ref(), all, now, self.break_timeout())
        };
        self.send_breaks(&breaks);
    }

    pub fn send_breaks(&self, breaks: &[crate::oplock::Break]) {
        use crate::oplock::Break;
        for &b in breaks {
            match b {
                Break::Oplock { owner, level } => {
                    self.post(owner.connection, Notice::OplockBreak { volatile: owner.volatile, level })
                }
                Break::Lease { connection, key, epoch, from, to, ack } => {
                    self.post(connection, Notice::LeaseBreak { key, epoch, from, to, ack })
                }
            }
        }
    }

    /// Hand `pending` to connection `id` to carry out.
    pub(crate) fn adopt(&self, id: u64, pending: Vec<crate::pending::Pending>) {
        self.adopted.lock().unwrap_or_else(|p| p.into_inner()).entry(id).or_default().extend(pending);
        self.post(id, Notice::Wake);
    }

    pub(crate) fn take_adopted(&self, id: u64) -> Vec<crate::pending::Pending> {
        self.adopted.lock().unwrap_or_else(|p| p.into_inner()).remove(&id).unwrap_or_default()
    }

    /// Wake every connection in `ids`.
    pub fn wake(&self, ids: &[u64]) {
        for &id in ids {
            self.post(id, Notice::Wake);
        }
    }

    pub(crate) fn register_session(&self, session: u64, s: LiveSession) {
        self.live_sessions.lock().unwrap_or_else(|p| p.into_inner()).insert(session, s);
    }

    pub(crate) fn live_session(&self, session: u64) -> Option<LiveSession> {
        self.live_sessions.lock().unwrap_or_else(|p| p.into_inner()).get(&session).cloned()
    }

    /// Session `session` lives on connection `connection` now (the one it
    /// was set up on is gone, another channel remains).
    pub(crate) fn move_session(&self, session: u64, connection: u64) {
        if let Some(s) = self.live_sessions.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&session) {
            s.connection = connection;
        }
    }

    pub(crate) fn unregister_session(&self, session: u64) {
        self.live_sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(&session);
    }

    /// End `previous` if `user` owns it (a reconnecting client names its
    /// old session; MS-SMB2 3.3.5.5.3).
    pub(crate) fn end_previous_session(&self, previous: u64, user: &str) {
        if let Some(s) = self.live_session(previous) {
            if s.user == user.to_lowercase() {
                s.ended.store(true, Ordering::Release);
                self.post(s.connection, Notice::EndSession { session: previous });
            }
        }
    }

    pub(crate) fn open_mailbox(&self, id: u64) {
        self.mailboxes.lock().unwrap_or_else(|p| p.into_inner()).insert(id, Mailbox::default());
    }

    pub(crate) fn close_mailbox(&self, id: u64) {
        self.mailboxes.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        self.take_adopted(id);
    }

    pub(crate) fn set_waker(&self, id: u64, waker: Waker) {
        if let Some(b) = self.mailboxes.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&id) {
            b.waker = Some(waker);
        }
    }

    pub(crate) fn take_notices(&self, id: u64) -> Vec<Notice> {
        let mut m = self.mailboxes.lock().unwrap_or_else(|p| p.into_inner());
        m.get_mut(&id).map(|b| std::mem::take(&mut b.notices)).unwrap_or_default()
    }

    pub fn share(&self, name: &str) -> Option<Arc<Share>> {
        self.shares.read().unwrap_or_else(|p| p.into_inner()).iter().find(|s| s.name.eq_ignore_ascii_case(name)).cloned()
    }

    /// The shares now, IPC$ last.
    pub fn shares(&self) -> Vec<Arc<Share>> {
        self.shares.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Serve `shares` and `users` from now on, as a reload asks: a share
    /// whose configuration is unchanged stays as it is (its tree connects
    /// too); a share removed or changed ends its tree connects (requests
    /// on them get STATUS_NETWORK_NAME_DELETED, MS-SMB2 3.3.5.2.11; a
    /// changed one takes new tree connects under its new configuration);
    /// the sessions of users no longer in `users` end (their requests get
    /// STATUS_USER_SESSION_DELETED, MS-SMB2 3.3.5.2.9). Nothing changes when a share cannot
    /// be opened: that is the error.
    pub fn reload(&self, shares: &[ShareConfig], users: UserDb) -> Result<Reloaded, String> {
        let old = self.shares();
        let new = open_shares(shares, &old)?;
        let kept = |s: &Arc<Share>| new.iter().any(|n| Arc::ptr_eq(n, s));
        let named = |list: &[Arc<Share>], name: &str| list.iter().any(|s| s.name.eq_ignore_ascii_case(name));
        let mut done = Reloaded::default();
        for s in old.iter().filter(|s| !kept(s)) {
            s.remove();
            if named(&new, &s.name) { &mut done.changed } else { &mut done.removed }.push(s.name.clone());
        }
        done.added = new.iter().filter(|s| !named(&old, &s.name)).map(|s| s.name.clone()).collect();
        *self.shares.write().unwrap_or_else(|p| p.into_inner()) = new;
        let gone: Vec<String> = {
            let mut db = self.users.write().unwrap_or_else(|p| p.into_inner());
            let gone = db.names().into_iter().filter(|u| users.get(u).is_none()).collect();
            *db = users;
            gone
        };
        // Their requests get USER_SESSION_DELETED, still signed with the
        // session's keys (a client verifies the answer); their opens close
        // when the client logs off or its connection ends.
        for s in self.live_sessions.lock().unwrap_or_else(|p| p.into_inner()).values() {
            if gone.iter().any(|u| u.eq_ignore_ascii_case(&s.user)) {
                s.ended.store(true, Ordering::Release);
            }
        }
        done.users_removed = gone;
        Ok(done)
    }

    /// A session was made (`true`) or forgotten: counted in
    /// [`Server::sessions`] and the sessions gauge.
    pub(crate) fn count_session(&self, made: bool) {
        if made {
            self.sessions.fetch_add(1, Ordering::Relaxed);
        } else {
            self.sessions.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(m) = &self.metrics {
            m.sessions.increment(if made { 1.0 } else { -1.0 });
        }
    }

    pub(crate) fn connection_id(&self) -> u64 {
        self.next_connection_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Volatile FileIds are unique server-wide (an open keeps its id when
    /// it moves to another connection).
    pub(crate) fn volatile_id(&self) -> u64 {
        self.next_volatile.fetch_add(1, Ordering::Relaxed)
    }

    /// Session ids are unique server-wide and never 0 or all-ones.
    pub(crate) fn session_id(&self) -> u64 {
        // Mix in randomness in the high bits so ids are not guessable.
        let n = self.next_session_id.fetch_add(1, Ordering::Relaxed);
        (self.random::<u64>() & 0x7FFF_0000_0000_0000) | n
    }

    /// A random value from the server's generator.
    pub fn random<T>(&self) -> T
    where
        rand::distributions::Standard: rand::distributions::Distribution<T>,
    {
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        rand::Rng::gen(&mut **rng)
    }

    /// The time now, as FILETIME.
    /// Some share offers the SMB3 POSIX extensions: NEGOTIATE agrees to
    /// them when asked.
    pub fn has_posix_share(&self) -> bool {
        self.shares.read().unwrap_or_else(|p| p.into_inner()).iter().any(|s| s.posix.is_some())
    }

    pub fn now(&self) -> u64 {
        now_filetime((self.clock)())
    }

    pub fn lookup_user(&self, user: &str) -> Option<[u8; 16]> {
        self.users.read().ok()?.get(user)
    }
}

pub fn now_filetime(t: SystemTime) -> u64 {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    smbq_vfs::filetime(d.as_secs() as i64, d.subsec_nanos() as i64)
}
