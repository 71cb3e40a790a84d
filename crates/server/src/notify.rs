//! Directory change notification from Linux inotify (MS-SMB2 3.3.5.19,
//! MS-FSA 2.1.5.10, MS-FSCC 2.7.1 FILE_NOTIFY_INFORMATION).
//!
//! One inotify instance per server ([`Watcher`], which [`crate::Sources`]
//! gives the server, made at the first CHANGE_NOTIFY), read by a thread
//! of its own and by the connections themselves (a connection drains it
//! before it looks at its watches, so a change its own request made is
//! seen at once). An open is known by its volatile id, unique server-wide.
//! The first CHANGE_NOTIFY on a directory open creates that open's watch:
//! its CompletionFilter, WATCH_TREE flag and OutputBufferLength stay fixed
//! until the open closes, as Windows keeps them (smbtorture
//! smb2.notify.mask-change), and the changes that happen between two
//! requests are buffered, up to that length (at most [`MAX_BUFFER`]
//! bytes); past it the next request gets STATUS_NOTIFY_ENUM_DIR and no
//! data. A tree watch also watches every subdirectory, and each new one as
//! it appears.
//!
//! Directories are reached from the share root the configuration names,
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` for the watched
//! directory (as the file system layer resolves it) and
//! `RESOLVE_NO_SYMLINKS` below it: no watch is put on anything outside the
//! share. An inotify watch is added through `/proc/self/fd/N` of the
//! directory so opened, never by path.
//!
//! Events map to FILE_NOTIFY_INFORMATION entries, names relative to the
//! watched directory with backslashes:
//! IN_CREATE → ADDED, IN_DELETE → REMOVED, a move within one directory →
//! RENAMED_OLD_NAME + RENAMED_NEW_NAME (paired by cookie), a move between
//! directories → REMOVED + ADDED (as Windows reports it), a move in or out
//! of the watched tree → ADDED or REMOVED (FILE_NAME or DIR_NAME by kind);
//! IN_MODIFY → MODIFIED (SIZE, LAST_WRITE); IN_ATTRIB → MODIFIED
//! (ATTRIBUTES, LAST_WRITE, LAST_ACCESS, SECURITY: a chmod, utimes or
//! xattr change). A file renamed while open reports MODIFIED (ATTRIBUTES)
//! when that handle closes, as Windows does once it has set the archive
//! bit (smbtorture smb2.notify.mask-change). IN_CLOSE_WRITE alone is no
//! change: creating a file and closing it unwritten reports only ADDED on
//! Windows, and every write raises IN_MODIFY already. Changes inotify
//! cannot see come in through [`changed`].
//!
//! Watches are bounded, so that no client spends what all share (the
//! kernel's `fs.inotify.max_user_watches` counts per user, not per
//! client): the opens of one session hold at most
//! `limits.notify_watches_per_session` watches, all sessions together at
//! most `limits.notify_watches` and never more than half the kernel's
//! quota (`Budget`). A request whose directory or tree needs a watch past
//! the bound, or one the kernel refuses (ENOSPC), completes with
//! STATUS_NOTIFY_ENUM_DIR once, as on a buffer overflow, and what lies
//! beyond goes unwatched; the open's next request watches what it lacks
//! if watches were freed meanwhile (and, having missed changes there,
//! gets STATUS_NOTIFY_ENUM_DIR again).
//!
//! Watches and buffers go when the open closes: the connection forgets
//! them when it sees the open gone (at its next CHANGE_NOTIFY, or when a
//! waiting one finds its handle closed), and the thread drops, every two
//! seconds, those whose open left the file table (a session that logged
//! off, a connection that ended). The thread ends with the server.

use crate::files::OpenOwner;
use crate::open::Open;
use crate::server::{Notice, Server};
use rustix::fs::{inotify, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

/// CompletionFilter bits (MS-SMB2 2.2.35).
pub mod filter {
    pub const FILE_NAME: u32 = 0x0000_0001;
    pub const DIR_NAME: u32 = 0x0000_0002;
    pub const ATTRIBUTES: u32 = 0x0000_0004;
    pub const SIZE: u32 = 0x0000_0008;
    pub const LAST_WRITE: u32 = 0x0000_0010;
    pub const LAST_ACCESS: u32 = 0x0000_0020;
    pub const CREATION: u32 = 0x0000_0040;
    pub const EA: u32 = 0x0000_0080;
    pub const SECURITY: u32 = 0x0000_0100;
    pub const STREAM_NAME: u32 = 0x0000_0200;
    pub const STREAM_SIZE: u32 = 0x0000_0400;
    pub const STREAM_WRITE: u32 = 0x0000_0800;
}

/// FILE_NOTIFY_INFORMATION Action values (MS-FSCC 2.7.1).
pub mod action {
    pub const ADDED: u32 = 1;
    pub const REMOVED: u32 = 2;
    pub const MODIFIED: u32 = 3;
    pub const RENAMED_OLD_NAME: u32 = 4;
    pub const RENAMED_NEW_NAME: u32 = 5;
}

/// The most bytes of changes an open buffers between requests (and the
/// most a waiting request collects), whatever OutputBufferLength asked.
pub const MAX_BUFFER: usize = 64 * 1024;
/// The most changes an open buffers.
const MAX_CHANGES: usize = 4096;
/// Files remembered per open as renamed while open (see the module doc).
const MAX_RENAMED: usize = 64;
/// How long a MOVED_FROM at the end of a read waits for its MOVED_TO.
const MOVE_PAIRING: Duration = Duration::from_millis(20);
/// How often the thread looks for watches whose open is gone.
const SWEEP: Duration = Duration::from_secs(2);

// inotify(7) event bits.
const IN_MODIFY: u32 = 0x0000_0002;
const IN_ATTRIB: u32 = 0x0000_0004;
const IN_CLOSE_WRITE: u32 = 0x0000_0008;
const IN_CLOSE_NOWRITE: u32 = 0x0000_0010;
const IN_MOVED_FROM: u32 = 0x0000_0040;
const IN_MOVED_TO: u32 = 0x0000_0080;
const IN_CREATE: u32 = 0x0000_0100;
const IN_DELETE: u32 = 0x0000_0200;
const IN_DELETE_SELF: u32 = 0x0000_0400;
const IN_Q_OVERFLOW: u32 = 0x0000_4000;
const IN_IGNORED: u32 = 0x0000_8000;
const IN_ONLYDIR: u32 = 0x0100_0000;
const IN_EXCL_UNLINK: u32 = 0x0400_0000;
const IN_MASK_ADD: u32 = 0x2000_0000;
const IN_ISDIR: u32 = 0x4000_0000;

/// Every watch asks for these; IN_CLOSE_* only for filters with ATTRIBUTES.
const BASE_MASK: u32 = IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF;
const ATTRIB_FILTER: u32 = filter::ATTRIBUTES | filter::LAST_WRITE | filter::LAST_ACCESS | filter::SECURITY;
const MODIFY_FILTER: u32 = filter::SIZE | filter::LAST_WRITE;

/// A pending watch on a directory open.
pub struct Watch {
    pub(crate) volatile: u64,
    /// The open's key in the global file table (0: not in it).
    pub(crate) file_key: u64,
    /// Held while the request waits: the watcher sizes and wakes by it.
    pub(crate) waiting: Arc<Waiting>,
}

/// A CHANGE_NOTIFY request waiting on an open. The watcher holds it
/// weakly: while it lives, changes to the open wake its connection and
/// are collected up to its `len`.
pub struct Waiting {
    pub len: u32,
}

/// What a request on a watched open gets now.
pub enum Outcome {
    /// No change yet: wait.
    Nothing,
    /// FILE_NOTIFY_INFORMATION entries, marshalled, that fit the request.
    Changes(Vec<u8>),
    /// More changes than the buffer or the request could hold.
    EnumDir,
    /// The watched directory itself was removed.
    DeletePending,
}

#[derive(Clone, Debug)]
struct Event {
    wd: i32,
    mask: u32,
    cookie: u32,
    /// None for an event on the watched directory itself, or a name that
    /// is not UTF-8 or that no SMB client could open.
    name: Option<String>,
}

struct Entry {
    id: u64,
    connection: u64,
    /// The session whose budget its watches count against.
    session: u64,
    volatile: u64,
    /// The open's key in the global file table (0: not in it).
    file_key: u64,
    share: String,
    /// Share-relative path of the watched directory (SMB form).
    path: String,
    /// The watched directory, O_PATH; subdirectories resolve beneath it.
    base: OwnedFd,
    filter: u32,
    recursive: bool,
    /// OutputBufferLength of the request that created the watch.
    first_len: u32,
    waiting: Vec<Weak<Waiting>>,
    changes: Vec<(u32, String)>,
    bytes: usize,
    overflow: bool,
    deleted: bool,
    /// A directory went unwatched for want of a watch (the budget or the
    /// kernel's quota spent): the next request tries again.
    short: bool,
    /// Something arrived since the connection was last woken.
    dirty: bool,
    /// Watch descriptor → path of that directory relative to the base.
    watches: HashMap<i32, String>,
    /// Files moved while open: (watch descriptor, name).
    renamed: Vec<(i32, String)>,
}

impl Entry {
    fn waiter(&mut self) -> Option<u32> {
        self.waiting.retain(|w| w.strong_count() > 0);
        self.waiting.first().and_then(Weak::upgrade).map(|w| w.len)
    }

    fn capacity(&mut self) -> usize {
        let len = self.waiter().unwrap_or(self.first_len);
        (len as usize).min(MAX_BUFFER)
    }

    fn mask(&self) -> u32 {
        let close = if self.filter & filter::ATTRIBUTES != 0 { IN_CLOSE_WRITE | IN_CLOSE_NOWRITE } else { 0 };
        BASE_MASK | close | IN_ONLYDIR | IN_EXCL_UNLINK | IN_MASK_ADD
    }

    /// Record a change if the filter wants it.
    fn emit(&mut self, action: u32, name: String, which: u32) {
        if self.filter & which == 0 || self.overflow {
            return;
        }
        self.dirty = true;
        // A change repeated back to back is one change (a write raises
        // IN_MODIFY per call).
        if action == action::MODIFIED && self.changes.last().is_some_and(|(a, n)| *a == action && *n == name) {
            return;
        }
        self.bytes += entry_size(&name);
        self.changes.push((action, name));
        if self.bytes > self.capacity() || self.changes.len() > MAX_CHANGES {
            self.set_overflow();
        }
    }

    fn set_overflow(&mut self) {
        self.overflow = true;
        self.dirty = true;
        self.changes = Vec::new();
        self.bytes = 0;
    }

    fn rel(&self, wd: i32, name: &str) -> Option<String> {
        let dir = self.watches.get(&wd)?;
        Some(if dir.is_empty() { name.to_string() } else { format!("{dir}\\{name}") })
    }
}

/// Bytes a change takes in FILE_NOTIFY_INFORMATION, padded to 4.
fn entry_size(name: &str) -> usize {
    (12 + 2 * name.encode_utf16().count() + 3) & !3
}

/// FILE_NOTIFY_INFORMATION entries (MS-FSCC 2.7.1): each 4-byte aligned,
/// the last with NextEntryOffset 0 and no padding.
fn marshal(changes: &[(u32, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, (action, name)) in changes.iter().enumerate() {
        let name: Vec<u8> = name.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let len = 12 + name.len();
        let last = i + 1 == changes.len();
        let next = if last { 0 } else { (len + 3) & !3 };
        out.extend_from_slice(&(next as u32).to_le_bytes());
        out.extend_from_slice(&action.to_le_bytes());
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(&name);
        if !last {
            out.resize(out.len() + (next - len), 0);
        }
    }
    out
}

/// The inotify watches the sessions hold, against
/// `limits.notify_watches_per_session` and `limits.notify_watches`. A
/// directory two opens watch counts twice (the kernel counts it once), so
/// what is counted here bounds what the kernel holds.
#[derive(Debug)]
struct Budget {
    per_session: usize,
    total: usize,
    /// Watches held, by session.
    held: HashMap<u64, usize>,
    /// Watches held by all sessions.
    all: usize,
}

impl Budget {
    /// The bounds `limits` sets, the total cut to half of the kernel's
    /// per-user quota `kernel` (`fs.inotify.max_user_watches`) if known.
    fn new(limits: &crate::config::Limits, kernel: Option<usize>) -> Budget {
        let mut total = limits.notify_watches;
        if let Some(k) = kernel.map(|k| (k / 2).max(1)).filter(|&k| k < total) {
            tracing::info!(
                limit = total,
                max_user_watches = k * 2,
                "limits.notify_watches cut to half of fs.inotify.max_user_watches"
            );
            total = k;
        }
        Budget { per_session: limits.notify_watches_per_session, total, held: HashMap::new(), all: 0 }
    }

    /// Whether `session` may hold another watch.
    fn room(&self, session: u64) -> bool {
        self.all < self.total && self.held.get(&session).is_none_or(|&n| n < self.per_session)
    }

    /// Count a watch for `session`, if it may hold one.
    fn take(&mut self, session: u64) -> bool {
        if !self.room(session) {
            return false;
        }
        *self.held.entry(session).or_default() += 1;
        self.all += 1;
        true
    }

    /// `session` holds `n` watches fewer.
    fn give(&mut self, session: u64, n: usize) {
        let Some(held) = self.held.get_mut(&session) else { return };
        let n = n.min(*held);
        *held -= n;
        self.all -= n;
        if *held == 0 {
            self.held.remove(&session);
        }
    }
}

/// The kernel's per-user quota of inotify watches, if it can be read.
fn max_user_watches() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches").ok()?.trim().parse().ok()
}

/// What the entries share: the watch descriptors and what they cost.
struct Table {
    /// Watch descriptor → the entries using it (one directory watched by
    /// several opens shares one descriptor).
    wds: HashMap<i32, Vec<u64>>,
    budget: Budget,
}

struct State {
    entries: HashMap<u64, Entry>,
    /// An open's volatile id → its entry.
    by_open: HashMap<u64, u64>,
    table: Table,
    /// A MOVED_FROM that ended a read, waiting for its MOVED_TO.
    held: Option<(Event, Instant)>,
    next_id: u64,
}

/// A server's change notification: an inotify instance and the thread
/// that reads it, made at the first CHANGE_NOTIFY (a server that never
/// sees one has neither) and gone with the server. [`crate::Sources`]
/// gives each server its own.
#[derive(Default)]
pub struct Watcher {
    /// `None` once tried: inotify is unavailable.
    instance: OnceLock<Option<Arc<Instance>>>,
}

impl Watcher {
    pub fn new() -> Watcher {
        Watcher::default()
    }

    /// The instance; the first request makes it, for `server`.
    fn instance(&self, server: &Arc<Server>) -> Option<&Arc<Instance>> {
        self.instance.get_or_init(|| Instance::new(server)).as_ref()
    }

    /// The instance, if a request has made it.
    fn started(&self) -> Option<&Arc<Instance>> {
        self.instance.get().and_then(Option::as_ref)
    }
}

struct Instance {
    fd: OwnedFd,
    /// The server it watches for (which holds it).
    server: Weak<Server>,
    state: Mutex<State>,
}

/// Connections to wake.
type Wakes = Vec<u64>;

/// Wake the connections in `wakes` but `skip` (the one asking, which looks for itself).
fn post(server: &Server, wakes: Wakes, skip: Option<u64>) {
    for connection in wakes.into_iter().filter(|&c| Some(c) != skip) {
        server.post(connection, Notice::Wake);
    }
}

/// Why a directory went unwatched.
enum Refusal {
    /// No watch to be had: the session's or the server's budget, or the
    /// kernel's quota, is spent.
    Full,
    /// The directory cannot be watched (gone, or not beneath the share).
    Failed(Errno),
}

/// A CHANGE_NOTIFY request on the directory open `open` (volatile id
/// `volatile`) of connection `connection`: start watching it if this is
/// the open's first request (with `filter`, `recursive` and `len`), then
/// hand over what it has buffered or register `waiting`. An open that
/// cannot be watched (no inotify, a directory gone) just waits; one past
/// the watch budget gets STATUS_NOTIFY_ENUM_DIR (see the module doc).
pub(crate) fn request(
    server: &Arc<Server>,
    connection: u64,
    volatile: u64,
    open: &Open,
    params: (u32, bool, u32),
    waiting: &Arc<Waiting>,
) -> Outcome {
    let Some(w) = server.notify.instance(server) else { return Outcome::Nothing };
    let (out, wakes) = {
        let mut st = w.lock();
        let wakes = w.drain(&mut st);
        let id = match st.by_open.get(&volatile).copied() {
            Some(id) => {
                w.refill(&mut st, id);
                Some(id)
            }
            None => w.start(&mut st, connection, volatile, open, params),
        };
        let out = match id.and_then(|id| st.entries.get_mut(&id)) {
            Some(e) => {
                e.connection = connection;
                e.path.clone_from(&open.path);
                let out = take(e, waiting.len);
                if matches!(out, Outcome::Nothing) {
                    e.waiting.push(Arc::downgrade(waiting));
                }
                out
            }
            None => Outcome::Nothing,
        };
        (out, wakes)
    };
    post(server, wakes, Some(connection));
    out
}

/// What a waiting request of `len` bytes on open `volatile` gets now.
pub(crate) fn poll(server: &Arc<Server>, connection: u64, volatile: u64, len: u32) -> Outcome {
    let Some(w) = server.notify.started() else { return Outcome::Nothing };
    let (out, wakes) = {
        let mut st = w.lock();
        let wakes = w.drain(&mut st);
        let out = match st.by_open.get(&volatile).copied().and_then(|id| st.entries.get_mut(&id)) {
            Some(e) => take(e, len),
            None => Outcome::Nothing,
        };
        (out, wakes)
    };
    post(server, wakes, Some(connection));
    out
}

fn take(e: &mut Entry, len: u32) -> Outcome {
    e.dirty = false;
    if e.deleted {
        return Outcome::DeletePending;
    }
    if e.overflow {
        e.overflow = false;
        return Outcome::EnumDir;
    }
    if e.changes.is_empty() {
        return Outcome::Nothing;
    }
    let changes = std::mem::take(&mut e.changes);
    e.bytes = 0;
    let buf = marshal(&changes);
    //= MS-SMB2 3.3.5.19 (MS-FSA 2.1.5.10): changes that do not fit the
    //= request's OutputBufferLength are dropped and the request completes
    //= with STATUS_NOTIFY_ENUM_DIR.
    if buf.len() > len as usize {
        return Outcome::EnumDir;
    }
    Outcome::Changes(buf)
}

/// The open `volatile` closed: drop its watch and buffer.
pub(crate) fn forget(server: &Server, volatile: u64) {
    let Some(w) = server.notify.started() else { return };
    let mut st = w.lock();
    if let Some(id) = st.by_open.get(&volatile).copied() {
        w.remove(&mut st, id);
    }
}

/// Drop the watches of connection `connection` whose open `live` says is gone.
pub(crate) fn sweep(server: &Arc<Server>, connection: u64, live: impl Fn(u64) -> bool) {
    let Some(w) = server.notify.started() else { return };
    let mut st = w.lock();
    let gone: Vec<u64> = st
        .by_open
        .iter()
        .filter(|(v, id)| !live(**v) && st.entries.get(id).is_some_and(|e| e.connection == connection))
        .map(|(_, &id)| id)
        .collect();
    for id in gone {
        w.remove(&mut st, id);
    }
}

/// Report a change inotify cannot see (one smbq makes without touching
/// the file system, such as a DOS attribute it does not store): `path`
/// is share-relative in SMB form, `which` the CompletionFilter bits it
/// matches. Every open watching it hears of it.
pub fn changed(server: &Arc<Server>, share: &str, path: &str, act: u32, which: u32) {
    let Some(w) = server.notify.started() else { return };
    let wakes = {
        let mut st = w.lock();
        let mut wakes = Vec::new();
        for e in st.entries.values_mut() {
            if !e.share.eq_ignore_ascii_case(share) {
                continue;
            }
            let rel = if e.path.is_empty() {
                Some(path)
            } else {
                path.strip_prefix(e.path.as_str()).and_then(|r| r.strip_prefix('\\'))
            };
            let Some(rel) = rel.filter(|r| !r.is_empty() && (e.recursive || !r.contains('\\'))) else { continue };
            e.emit(act, rel.to_string(), which);
            if e.dirty && e.waiter().is_some() {
                e.dirty = false;
                wakes.push(e.connection);
            }
        }
        wakes
    };
    post(server, wakes, None);
}

impl Instance {
    /// A new instance for `server`, its thread started; `None` (logged)
    /// without inotify.
    fn new(server: &Arc<Server>) -> Option<Arc<Instance>> {
        let fd = match inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(error = %e, "inotify unavailable: CHANGE_NOTIFY reports no changes");
                return None;
            }
        };
        let table = Table { wds: HashMap::new(), budget: Budget::new(&server.config.limits, max_user_watches()) };
        let state = State { entries: HashMap::new(), by_open: HashMap::new(), table, held: None, next_id: 0 };
        let w = Arc::new(Instance { fd, server: Arc::downgrade(server), state: Mutex::new(state) });
        let weak = Arc::downgrade(&w);
        let spawned = std::thread::Builder::new().name("smbq-notify".into()).spawn(move || Instance::run(&weak));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no notify thread: changes are seen only when a connection looks");
        }
        Some(w)
    }
}

impl Instance {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The thread: wait for events, hand them out, wake the connections
    /// they concern; now and then drop watches whose open is gone. It
    /// holds the instance only while it looks (at most [`SWEEP`]), and
    /// ends once the server, and with it the instance, is gone.
    fn run(weak: &Weak<Instance>) {
        let mut last_sweep = Instant::now();
        while let Some(w) = weak.upgrade() {
            let held = w.lock().held.is_some();
            let wait = if held { MOVE_PAIRING } else { SWEEP };
            let ts = rustix::event::Timespec { tv_sec: wait.as_secs() as i64, tv_nsec: i64::from(wait.subsec_nanos()) };
            let mut fds = [rustix::event::PollFd::new(&w.fd, rustix::event::PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "inotify poll failed; notify thread stops");
                    return;
                }
            }
            let wakes = {
                let mut st = w.lock();
                w.drain(&mut st)
            };
            let Some(server) = w.server.upgrade() else { return };
            post(&server, wakes, None);
            drop(server);
            if last_sweep.elapsed() >= SWEEP {
                last_sweep = Instant::now();
                w.sweep_dead();
            }
        }
    }

    /// Drop watches whose open left the file table.
    fn sweep_dead(&self) {
        let candidates: Vec<(u64, u64, OpenOwner)> = {
            let st = self.lock();
            st.entries
                .iter()
                .map(|(&id, e)| (id, e.file_key, OpenOwner { connection: e.connection, volatile: e.volatile }))
                .collect()
        };
        let mut dead = Vec::new();
        for (id, file_key, owner) in candidates {
            let alive = match self.server.upgrade() {
                None => false,
                Some(_) if file_key == 0 => true,
                Some(s) => s.files.get(file_key).is_some_and(|f| f.opens.iter().any(|o| o.owner == owner)),
            };
            if !alive {
                dead.push((id, owner));
            }
        }
        if dead.is_empty() {
            return;
        }
        let mut st = self.lock();
        for (id, owner) in dead {
            // Still the same open (a request may have moved it meanwhile).
            if st.entries.get(&id).is_some_and(|e| e.connection == owner.connection) {
                self.remove(&mut st, id);
            }
        }
    }

    /// Read every queued event and hand it to the watches; the
    /// connections to wake.
    fn drain(&self, st: &mut State) -> Wakes {
        let mut evs = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match rustix::io::read(&self.fd, &mut buf[..]) {
                Ok(0) => break,
                Ok(n) => parse(buf.get(..n).unwrap_or(&[]), &mut evs),
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "inotify read");
                    break;
                }
            }
        }
        let mut flush = false;
        if let Some((h, at)) = st.held.take() {
            if evs.is_empty() && at.elapsed() < MOVE_PAIRING {
                st.held = Some((h, at));
                return Vec::new();
            }
            flush = evs.is_empty();
            evs.insert(0, h);
        }
        if evs.is_empty() {
            return Vec::new();
        }
        self.process(st, evs, flush);
        let mut wakes = Vec::new();
        for e in st.entries.values_mut() {
            if e.dirty && e.waiter().is_some() {
                wakes.push(e.connection);
            }
            e.dirty = false;
        }
        wakes
    }

    fn process(&self, st: &mut State, mut evs: Vec<Event>, flush: bool) {
        let mut i = 0;
        while i < evs.len() {
            let ev = evs[i].clone();
            i += 1;
            if ev.mask & IN_Q_OVERFLOW != 0 {
                for e in st.entries.values_mut() {
                    e.set_overflow();
                }
                continue;
            }
            if ev.mask & IN_IGNORED != 0 {
                if let Some(users) = st.table.wds.remove(&ev.wd) {
                    for id in users {
                        if let Some(e) = st.entries.get_mut(&id) {
                            if e.watches.remove(&ev.wd).is_some() {
                                st.table.budget.give(e.session, 1);
                            }
                        }
                    }
                }
                continue;
            }
            let users = st.table.wds.get(&ev.wd).cloned().unwrap_or_default();
            let Some(name) = ev.name.clone() else {
                if ev.mask & IN_DELETE_SELF != 0 {
                    for id in &users {
                        if let Some(e) = st.entries.get_mut(id) {
                            if e.watches.get(&ev.wd).is_some_and(String::is_empty) {
                                e.deleted = true;
                                e.dirty = true;
                            }
                        }
                    }
                }
                continue;
            };
            let dir = ev.mask & IN_ISDIR != 0;
            let name_filter = if dir { filter::DIR_NAME } else { filter::FILE_NAME };
            if ev.mask & IN_MOVED_FROM != 0 {
                let to = evs.iter().skip(i).position(|t| t.mask & IN_MOVED_TO != 0 && t.cookie == ev.cookie).map(|p| p + i);
                if to.is_none() && i == evs.len() && !flush {
                    st.held = Some((ev, Instant::now()));
                    continue;
                }
                let to = to.map(|j| evs.remove(j));
                self.moved(st, &ev, &name, to.as_ref(), dir);
                continue;
            }
            if ev.mask & IN_MOVED_TO != 0 {
                // Moved in from outside every watch of this instance.
                for id in &users {
                    self.with_entry(st, *id, |w, t, e| {
                        let Some(rel) = e.rel(ev.wd, &name) else { return };
                        e.emit(action::ADDED, rel.clone(), name_filter);
                        if dir && e.recursive {
                            w.add_tree(t, e, &rel, false);
                        } else if !dir {
                            remember_renamed(e, ev.wd, &name);
                        }
                    });
                }
                continue;
            }
            for id in &users {
                self.with_entry(st, *id, |w, t, e| {
                    let Some(rel) = e.rel(ev.wd, &name) else { return };
                    if ev.mask & IN_CREATE != 0 {
                        e.emit(action::ADDED, rel.clone(), name_filter);
                        if dir && e.recursive {
                            w.add_tree(t, e, &rel, true);
                        }
                    }
                    if ev.mask & IN_DELETE != 0 {
                        e.emit(action::REMOVED, rel.clone(), name_filter);
                        if dir {
                            w.drop_tree(t, e, &rel);
                        }
                    }
                    if ev.mask & IN_MODIFY != 0 {
                        e.emit(action::MODIFIED, rel.clone(), MODIFY_FILTER);
                    }
                    if ev.mask & IN_ATTRIB != 0 {
                        e.emit(action::MODIFIED, rel.clone(), ATTRIB_FILTER);
                    }
                    if ev.mask & (IN_CLOSE_WRITE | IN_CLOSE_NOWRITE) != 0 {
                        if let Some(p) = e.renamed.iter().position(|(wd, n)| *wd == ev.wd && *n == name) {
                            e.renamed.remove(p);
                            e.emit(action::MODIFIED, rel, filter::ATTRIBUTES);
                        }
                    }
                });
            }
        }
    }

    /// A MOVED_FROM and, if it stayed under this inotify instance, its MOVED_TO.
    fn moved(&self, st: &mut State, from: &Event, old: &str, to: Option<&Event>, dir: bool) {
        let name_filter = if dir { filter::DIR_NAME } else { filter::FILE_NAME };
        let mut ids: Vec<u64> = st.table.wds.get(&from.wd).cloned().unwrap_or_default();
        if let Some(t) = to {
            for id in st.table.wds.get(&t.wd).cloned().unwrap_or_default() {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        for id in ids {
            self.with_entry(st, id, |w, t, e| {
                let src = e.rel(from.wd, old);
                let dst = to.and_then(|t| t.name.as_deref().and_then(|n| e.rel(t.wd, n)).map(|r| (t.wd, r)));
                match (src, dst) {
                    (Some(src), Some((to_wd, dst))) => {
                        if to_wd == from.wd {
                            e.emit(action::RENAMED_OLD_NAME, src.clone(), name_filter);
                            e.emit(action::RENAMED_NEW_NAME, dst.clone(), name_filter);
                        } else {
                            e.emit(action::REMOVED, src.clone(), name_filter);
                            e.emit(action::ADDED, dst.clone(), name_filter);
                        }
                        if dir {
                            rename_tree(e, &src, &dst);
                        } else if let Some(n) = to.and_then(|t| t.name.as_deref()) {
                            e.renamed.retain(|(wd, x)| !(*wd == from.wd && x == old));
                            remember_renamed(e, to_wd, n);
                        }
                    }
                    (Some(src), None) => {
                        e.emit(action::REMOVED, src.clone(), name_filter);
                        if dir {
                            w.drop_tree(t, e, &src);
                        }
                    }
                    (None, Some((to_wd, dst))) => {
                        e.emit(action::ADDED, dst.clone(), name_filter);
                        if dir && e.recursive {
                            w.add_tree(t, e, &dst, false);
                        } else if let Some(n) = to.and_then(|t| t.name.as_deref()) {
                            if !dir {
                                remember_renamed(e, to_wd, n);
                            }
                        }
                    }
                    (None, None) => {}
                }
            });
        }
    }

    /// Run `f` on entry `id` with the descriptor table borrowed beside it.
    fn with_entry(&self, st: &mut State, id: u64, f: impl FnOnce(&Instance, &mut Table, &mut Entry)) {
        let Some(mut e) = st.entries.remove(&id) else { return };
        f(self, &mut st.table, &mut e);
        st.entries.insert(id, e);
    }

    /// Begin watching `open`; the new entry's id. With no watch to be had
    /// (the budget spent) the entry watches nothing and its first request
    /// gets STATUS_NOTIFY_ENUM_DIR.
    fn start(
        &self,
        st: &mut State,
        connection: u64,
        volatile: u64,
        open: &Open,
        (filter, recursive, len): (u32, bool, u32),
    ) -> Option<u64> {
        let base = match open_dir(open) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::debug!(path = %open.path, error = %e, "directory not watched");
                return None;
            }
        };
        st.next_id += 1;
        let id = st.next_id;
        let mut e = Entry {
            id,
            connection,
            session: open.session_id,
            volatile,
            file_key: open.file_key,
            share: open.share.name.clone(),
            path: open.path.clone(),
            base,
            filter,
            recursive,
            first_len: len,
            waiting: Vec::new(),
            changes: Vec::new(),
            bytes: 0,
            overflow: false,
            deleted: false,
            short: false,
            dirty: false,
            watches: HashMap::new(),
            renamed: Vec::new(),
        };
        match self.add(&mut st.table, &mut e, "") {
            Ok(_) if recursive => self.walk(&mut st.table, &mut e, "", false, &HashSet::new()),
            Ok(_) => {}
            Err(Refusal::Full) => e.set_overflow(),
            Err(Refusal::Failed(err)) => {
                tracing::debug!(path = %open.path, error = %err, "inotify_add_watch failed");
                return None;
            }
        }
        st.entries.insert(id, e);
        st.by_open.insert(volatile, id);
        Some(id)
    }

    /// A new request on entry `id`: if it went short of watches and its
    /// session has room again, watch what it lacks.
    fn refill(&self, st: &mut State, id: u64) {
        self.with_entry(st, id, |w, t, e| {
            if e.short && t.budget.room(e.session) {
                w.fill(t, e);
            }
        });
    }

    /// Watch the directories `e` lacks, as far as the budget goes. Changes
    /// there went unseen until now: if it watches more, it overflows.
    fn fill(&self, t: &mut Table, e: &mut Entry) {
        e.short = false;
        let before = e.watches.len();
        let base = e.watches.values().any(String::is_empty) || self.add(t, e, "").is_ok();
        if base && e.recursive {
            let known: HashSet<String> = e.watches.values().cloned().collect();
            self.walk(t, e, "", false, &known);
        }
        if e.watches.len() > before {
            e.set_overflow();
        }
    }

    /// Watch the directory `rel` ("" is the entry's base) for `e`, a watch
    /// its session's budget pays for.
    fn add(&self, t: &mut Table, e: &mut Entry, rel: &str) -> Result<i32, Refusal> {
        if !t.budget.take(e.session) {
            e.short = true;
            return Err(Refusal::Full);
        }
        let wd = match self.add_watch(e, rel) {
            Ok(wd) => wd,
            Err(err) => {
                t.budget.give(e.session, 1);
                if err == Errno::NOSPC {
                    // The kernel's quota (fs.inotify.max_user_watches) is spent.
                    e.short = true;
                    return Err(Refusal::Full);
                }
                return Err(Refusal::Failed(err));
            }
        };
        let users = t.wds.entry(wd).or_default();
        if !users.contains(&e.id) {
            users.push(e.id);
        }
        // The same directory under another name (a bind mount): one watch.
        if e.watches.insert(wd, rel.to_string()).is_some() {
            t.budget.give(e.session, 1);
        }
        Ok(wd)
    }

    fn add_watch(&self, e: &Entry, rel: &str) -> Result<i32, Errno> {
        let fd = beneath(e.base.as_fd(), rel, OFlags::PATH | OFlags::DIRECTORY)?;
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        inotify::add_watch(&self.fd, path.as_str(), inotify::WatchFlags::from_bits_retain(e.mask()))
    }

    fn unuse(&self, wds: &mut HashMap<i32, Vec<u64>>, id: u64, wd: i32) {
        let Some(users) = wds.get_mut(&wd) else { return };
        users.retain(|&u| u != id);
        if users.is_empty() {
            wds.remove(&wd);
            // The kernel answers with IN_IGNORED, for a descriptor no
            // longer in the table; EINVAL if the directory went already.
            let _ = inotify::remove_watch(&self.fd, wd);
        }
    }

    /// A new directory `rel` in a tree watch: watch it and everything
    /// under it. `report` (a directory just created, not moved in): what
    /// it already holds was created after it, so report it as ADDED.
    fn add_tree(&self, t: &mut Table, e: &mut Entry, rel: &str, report: bool) {
        if e.watches.values().any(|p| p == rel) {
            return;
        }
        match self.add(t, e, rel) {
            Ok(_) => self.walk(t, e, rel, report, &HashSet::new()),
            Err(Refusal::Full) => e.set_overflow(),
            Err(Refusal::Failed(err)) => tracing::debug!(%rel, error = %err, "subdirectory not watched"),
        }
    }

    /// Watch every directory below `top` (already watched) but those in
    /// `known` (already watched too; what is below them is visited); with
    /// `report`, each entry found is ADDED. Past the budget the entry
    /// overflows and the walk stops.
    fn walk(&self, t: &mut Table, e: &mut Entry, top: &str, report: bool, known: &HashSet<String>) {
        let mut queue = vec![top.to_string()];
        while let Some(dir) = queue.pop() {
            for (name, is_dir) in list(e.base.as_fd(), &dir) {
                let rel = if dir.is_empty() { name } else { format!("{dir}\\{name}") };
                if report {
                    e.emit(action::ADDED, rel.clone(), if is_dir { filter::DIR_NAME } else { filter::FILE_NAME });
                }
                if !is_dir {
                    continue;
                }
                if known.contains(&rel) {
                    queue.push(rel);
                    continue;
                }
                match self.add(t, e, &rel) {
                    Ok(_) => queue.push(rel),
                    Err(Refusal::Full) => {
                        e.set_overflow();
                        return;
                    }
                    Err(Refusal::Failed(err)) => tracing::debug!(%rel, error = %err, "subdirectory not watched"),
                }
            }
        }
    }

    /// The directory `rel` left the tree: stop watching it and below.
    fn drop_tree(&self, t: &mut Table, e: &mut Entry, rel: &str) {
        let below = format!("{rel}\\");
        let gone: Vec<i32> = e.watches.iter().filter(|(_, p)| *p == rel || p.starts_with(&below)).map(|(&wd, _)| wd).collect();
        for wd in gone {
            e.watches.remove(&wd);
            t.budget.give(e.session, 1);
            self.unuse(&mut t.wds, e.id, wd);
        }
    }

    fn remove(&self, st: &mut State, id: u64) {
        let Some(e) = st.entries.remove(&id) else { return };
        st.by_open.retain(|_, v| *v != id);
        st.table.budget.give(e.session, e.watches.len());
        for &wd in e.watches.keys() {
            self.unuse(&mut st.table.wds, id, wd);
        }
    }
}

fn remember_renamed(e: &mut Entry, wd: i32, name: &str) {
    if e.filter & filter::ATTRIBUTES == 0 {
        return;
    }
    if e.renamed.len() >= MAX_RENAMED {
        e.renamed.remove(0);
    }
    e.renamed.push((wd, name.to_string()));
}

/// A directory of the tree moved from `src` to `dst` inside it.
fn rename_tree(e: &mut Entry, src: &str, dst: &str) {
    let below = format!("{src}\\");
    for p in e.watches.values_mut() {
        if p == src {
            *p = dst.to_string();
        } else if let Some(rest) = p.strip_prefix(&below) {
            *p = format!("{dst}\\{rest}");
        }
    }
}

/// Parse inotify_event records.
fn parse(mut buf: &[u8], out: &mut Vec<Event>) {
    let u32_at = |b: &[u8], at: usize| b.get(at..at + 4).and_then(|s| s.try_into().ok()).map(u32::from_ne_bytes);
    while buf.len() >= 16 {
        let (Some(wd), Some(mask), Some(cookie), Some(len)) = (u32_at(buf, 0), u32_at(buf, 4), u32_at(buf, 8), u32_at(buf, 12)) else {
            return;
        };
        let Some(raw) = buf.get(16..16 + len as usize) else { return };
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        let name = std::str::from_utf8(raw.get(..end).unwrap_or(&[]))
            .ok()
            .filter(|n| !n.is_empty() && smbq_vfs::check_name(n).is_ok())
            .map(str::to_string);
        // A name that is there but unusable: no event for it at all.
        let unusable = end > 0 && name.is_none();
        if !unusable {
            out.push(Event { wd: wd as i32, mask, cookie, name });
        }
        buf = buf.get(16 + len as usize..).unwrap_or(&[]);
    }
}

/// `rel` (SMB form, "" for `dir` itself) as a POSIX relative path.
fn posix(rel: &str) -> String {
    if rel.is_empty() {
        ".".into()
    } else {
        rel.replace('\\', "/")
    }
}

/// Open `rel` beneath `dir`: no symlink, no `..` out, no magic link.
fn beneath(dir: BorrowedFd<'_>, rel: &str, flags: OFlags) -> Result<OwnedFd, Errno> {
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    loop {
        match rustix::fs::openat2(dir, posix(rel).as_str(), flags | OFlags::CLOEXEC | OFlags::NOFOLLOW, Mode::empty(), resolve) {
            Err(Errno::AGAIN | Errno::INTR) => continue,
            r => return r,
        }
    }
}

/// The entries of directory `rel` beneath `base`: (name, is a directory),
/// names an SMB client could use only; symlinks count as files.
fn list(base: BorrowedFd<'_>, rel: &str) -> Vec<(String, bool)> {
    let Ok(fd) = beneath(base, rel, OFlags::RDONLY | OFlags::DIRECTORY) else { return Vec::new() };
    let Ok(dir) = rustix::fs::Dir::new(fd) else { return Vec::new() };
    let mut out = Vec::new();
    for ent in dir.flatten() {
        let Ok(name) = ent.file_name().to_str() else { continue };
        if name == "." || name == ".." || smbq_vfs::check_name(name).is_err() {
            continue;
        }
        let is_dir = ent.file_type() == rustix::fs::FileType::Directory;
        out.push((name.to_string(), is_dir));
    }
    out.sort();
    out
}

/// The directory of `open`, O_PATH, reached from the share root the
/// configuration names the way the file system layer reaches it; checked
/// to be the directory the open holds.
fn open_dir(open: &Open) -> Result<OwnedFd, String> {
    let cfg = &open.share.config;
    let root = rustix::fs::open(&cfg.path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(|e| e.to_string())?;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    let fd = loop {
        match rustix::fs::openat2(&root, posix(&open.path).as_str(), OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty(), resolve) {
            Err(Errno::AGAIN | Errno::INTR) => continue,
            r => break r.map_err(|e| e.to_string())?,
        }
    };
    let ino = rustix::fs::fstat(&fd).map_err(|e| e.to_string())?.st_ino;
    let held = open.handle().ok_or("not a file open")?.stat().map_err(|e| e.to_string())?.file_id;
    // FileStat::file_id is the inode number with the device mixed into
    // its top 24 bits.
    if (held ^ ino) & 0x0000_00FF_FFFF_FFFF != 0 {
        return Err("the path no longer names the open directory".into());
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marshal_pads_all_but_the_last() {
        let b = marshal(&[(action::ADDED, "ab".into()), (action::REMOVED, "abc".into())]);
        // 12 + 4 = 16 (aligned), then 12 + 6 = 18 unpadded.
        assert_eq!(b.len(), 16 + 18);
        assert_eq!(u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")), 16);
        assert_eq!(u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")), action::ADDED);
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")), 4);
        assert_eq!(&b[12..16], &[b'a', 0, b'b', 0]);
        assert_eq!(u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")), 0);
        assert_eq!(u32::from_le_bytes(b[20..24].try_into().expect("4 bytes")), action::REMOVED);
        assert_eq!(entry_size("ab"), 16);
        assert_eq!(entry_size("abc"), 20);
    }

    fn limits(per_session: usize, total: usize) -> crate::config::Limits {
        crate::config::Limits { notify_watches_per_session: per_session, notify_watches: total, ..Default::default() }
    }

    #[test]
    fn a_session_at_its_bound_leaves_the_others_theirs() {
        let mut b = Budget::new(&limits(3, 5), None);
        assert!((0..3).all(|_| b.take(1)));
        assert!(!b.take(1), "session 1 holds its maximum");
        assert!(!b.room(1));
        assert!(b.room(2), "session 2 holds nothing yet");
        assert!(b.take(2) && b.take(2));
        assert!(!b.take(2), "the server's total is spent");
        assert!(!b.take(3), "for every session");
        b.give(1, 3);
        assert_eq!(b.held.get(&1), None, "a session holding nothing is forgotten");
        assert!(b.take(3), "what session 1 gave back is to be had");
        assert_eq!((b.all, b.held.get(&2), b.held.get(&3)), (3, Some(&2), Some(&1)));
    }

    #[test]
    fn giving_back_more_than_is_held_changes_nothing_else() {
        let mut b = Budget::new(&limits(4, 8), None);
        b.give(9, 1);
        assert_eq!(b.all, 0);
        assert!(b.take(1) && b.take(2));
        b.give(1, 5);
        assert_eq!((b.all, b.held.get(&1), b.held.get(&2)), (1, None, Some(&1)));
    }

    #[test]
    fn the_total_is_at_most_half_the_kernel_quota() {
        assert_eq!(Budget::new(&limits(10, 4096), Some(8192)).total, 4096);
        assert_eq!(Budget::new(&limits(10, 4096), Some(1000)).total, 500);
        assert_eq!(Budget::new(&limits(10, 4096), Some(1)).total, 1);
        assert_eq!(Budget::new(&limits(10, 4096), None).total, 4096);
        assert_eq!(Budget::new(&limits(10, 4096), Some(1 << 20)).total, 4096);
    }

    #[test]
    fn parse_skips_unusable_names() {
        let mut buf = Vec::new();
        for (wd, mask, name) in [(1i32, IN_CREATE, &b"ok\0\0"[..]), (1, IN_CREATE, &b"a:b\0"[..]), (2, IN_DELETE_SELF, &b""[..])] {
            buf.extend_from_slice(&wd.to_ne_bytes());
            buf.extend_from_slice(&mask.to_ne_bytes());
            buf.extend_from_slice(&0u32.to_ne_bytes());
            buf.extend_from_slice(&(name.len() as u32).to_ne_bytes());
            buf.extend_from_slice(name);
        }
        let mut evs = Vec::new();
        parse(&buf, &mut evs);
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].name.as_deref(), Some("ok"));
        assert_eq!(evs[1].name, None);
        assert_eq!(evs[1].wd, 2);
    }
}
