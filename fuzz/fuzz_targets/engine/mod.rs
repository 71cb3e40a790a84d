//! An in-memory client for the engine targets: a fixed prologue logs on
//! with the real NTLM client (no fuzzing hook in the server), connects a
//! disk share and IPC$ and opens a file, a directory and the srvsvc pipe;
//! then the fuzzer's input is a list of records, each one SMB2 request:
//!
//! ```text
//! [command] [flags] [charge] [len u16 LE] [body: len bytes, from StructureSize on]
//! ```
//!
//! The harness writes the 64-byte header (valid MessageId inside the
//! credit window, SessionId, TreeId) and patches the FileId field of the
//! body with a live handle, so mutations reach the handlers instead of
//! the header checks. `flags`:
//!
//! - bits 0-1: which handle: 0 file, 1 directory, 2 pipe (on IPC$),
//!   3 the last handle a fuzzed CREATE returned (else the file);
//! - bit 2: leave the body's FileId as it is;
//! - bit 3: send on the IPC$ tree;
//! - bit 4: compound: chain the next record after this one;
//! - bit 5: SMB2_FLAGS_RELATED_OPERATIONS;
//! - bit 6: CANCEL: the last async id the server handed out (else the
//!   previous MessageId);
//! - bit 7: SessionId and TreeId all ones (as in related requests).
//!
//! `charge` & 7 is the CreditCharge. The command is `command` % 19. A
//! NEGOTIATE record (the server ends the connection on a second one) is
//! sent only as the input's last record and skipped elsewhere, so the
//! records after it still run.
//!
//! The logged-on connection is kept from one input to the next ([`fuzz`]):
//! building it (logon, trees, opens, share reset) costs far more than
//! most inputs. It is rebuilt only when an input may have spoiled it (the
//! connection ended; a LOGOFF, TREE_DISCONNECT or SESSION_SETUP; a
//! successful CLOSE of a prologue handle; a probe of the prologue objects
//! every [`PROBE_EVERY`] inputs answering differently than right after
//! the prologue; the credit window used up) and when its state reaches a
//! cap ([`REBUILD_EVERY`] inputs, [`MAX_OBJECTS`] opens and trees made by
//! inputs, [`MAX_PENDING`] async requests, [`MAX_SHARE_BYTES`] in the
//! share), so memory stays flat. A crash may therefore depend on the
//! inputs before it: the panic hook writes them all (since the last
//! rebuild) next to the crash; `SMBQ_FUZZ_FRESH=1` rebuilds before every
//! input (each input then runs alone, as a replay of one file does).
use smbq_auth::{ClientAuth, UserDb};
use smbq_server::{Connection, EncryptPolicy, Server, ServerConfig, ShareConfig, TransportInfo, TransportKind};
use smbq_wire::create::CreateRequest;
use smbq_wire::header::{flags, HEADER_LEN};
use smbq_wire::negotiate::{ctx, encode_request};
use smbq_wire::{Command, Dialect, FileId, Header, NtStatus, Put};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const RECORD_HEAD: usize = 5;
const MAX_RECORDS: usize = 64;
const ALL_ONES: u64 = u64::MAX;

/// Rebuild the connection after this many inputs whatever happened.
pub const REBUILD_EVERY: u32 = 1024;
/// Check the prologue's session, trees and opens every this many inputs.
pub const PROBE_EVERY: u32 = 32;
/// Successful CREATEs and TREE_CONNECTs of inputs before a rebuild.
pub const MAX_OBJECTS: u32 = 256;
/// Requests that went async (interim STATUS_PENDING) before a rebuild.
pub const MAX_PENDING: u32 = 256;
/// Reset the share after this many inputs (bounds the crash history too),
/// or once inputs made this many files and trees,
pub const RESET_EVERY: u32 = 4096;
pub const MAX_SHARE_OBJECTS: u32 = 1024;
/// or once it holds this many bytes (checked every 64 inputs).
pub const MAX_SHARE_BYTES: u64 = 256 << 20;
/// FileAllocationInformation sizes are cut below this: the share may be
/// on tmpfs, where a fallocate takes memory.
const MAX_ALLOCATION: u64 = 1 << 20;

fn server() -> &'static (Arc<Server>, PathBuf) {
    static S: OnceLock<(Arc<Server>, PathBuf)> = OnceLock::new();
    S.get_or_init(|| {
        // On tmpfs when there is one (file creation and removal on a disk
        // file system cost more than the rest of most inputs);
        // SMBQ_FUZZ_DIR picks another parent.
        let parent = match std::env::var_os("SMBQ_FUZZ_DIR") {
            Some(d) => PathBuf::from(d),
            None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
            None => std::env::temp_dir(),
        };
        let dir = tempfile::Builder::new().prefix("smbq-fuzz-").tempdir_in(parent).expect("tempdir").keep();
        SHARE.set(dir.clone()).expect("share set once");
        extern "C" {
            fn atexit(f: extern "C" fn()) -> i32;
        }
        // libFuzzer ends with exit(): remove the share then.
        // SAFETY: registers a plain function without captures.
        unsafe { atexit(remove_share) };
        let mut c = ServerConfig::default();
        c.limits.failed_logon_delay_ms = 0;
        // Unsigned, unencrypted requests are accepted: the default is
        // `signing_required = false`; encryption must be off too.
        c.encrypt = EncryptPolicy::Off;
        c.shares.push(ShareConfig::new("share", &dir));
        let mut users = UserDb::new();
        users.add("alice", "secret");
        (Arc::new(Server::new(c, users).expect("server")), dir)
    })
}

static SHARE: OnceLock<PathBuf> = OnceLock::new();

/// Rebuilds by reason, printed at exit with SMBQ_FUZZ_STATS=1.
static REBUILDS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
const REASONS: [&str; 8] =
    ["connection ended", "spoiled", "input cap", "object/async cap", "credits", "probe", "share reset", "fixtures gone"];

static FATALS: Mutex<std::collections::BTreeMap<String, u64>> = Mutex::new(std::collections::BTreeMap::new());

fn stats() -> bool {
    static T: OnceLock<bool> = OnceLock::new();
    *T.get_or_init(|| std::env::var_os("SMBQ_FUZZ_STATS").is_some())
}

extern "C" fn remove_share() {
    if let Some(d) = SHARE.get() {
        let _ = std::fs::remove_dir_all(d);
    }
    if stats() {
        let r: Vec<String> = REASONS.iter().zip(&REBUILDS).map(|(n, c)| format!("{n} {}", c.load(Ordering::Relaxed))).collect();
        eprintln!("engine: rebuilds: {}", r.join(", "));
        eprintln!("engine: connection ends: {:?}", FATALS.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

fn fresh_mode() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| std::env::var_os("SMBQ_FUZZ_FRESH").is_some_and(|v| v != "0"))
}

fn trace() -> bool {
    static T: OnceLock<bool> = OnceLock::new();
    *T.get_or_init(|| std::env::var_os("SMBQ_FUZZ_TRACE").is_some())
}

/// The share's contents after a reset: `f.txt` (4 KiB) and `d\g.txt`.
fn reset(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir_all(&p);
            } else {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    let body: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
    std::fs::write(dir.join("f.txt"), &body).expect("fixture file");
    std::fs::create_dir(dir.join("d")).expect("fixture dir");
    std::fs::write(dir.join("d").join("g.txt"), b"hello").expect("fixture file");
}

/// A SET_INFO of FileAllocationInformation: cut the size below
/// [`MAX_ALLOCATION`] (keeping it below, at or above the file's size).
fn clamp_allocation(m: &mut [u8]) {
    let b = HEADER_LEN;
    if m.get(b + 2) != Some(&1) || m.get(b + 3) != Some(&19) {
        return;
    }
    let Some(off) = m.get(b + 8..b + 10).map(|o| usize::from(u16::from_le_bytes([o[0], o[1]]))) else { return };
    if let Some(v) = m.get_mut(off..off + 8) {
        let len = u64::from_le_bytes(v.try_into().unwrap_or_default());
        if len >= MAX_ALLOCATION {
            v.copy_from_slice(&(len % MAX_ALLOCATION).to_le_bytes());
        }
    }
}

/// Bytes allocated under `dir` (st_blocks, so sparse files count what they hold).
fn share_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

pub struct Harness {
    pub conn: Connection,
    now: Instant,
    next_id: u64,
    last_id: u64,
    session_id: u64,
    share_tree: u32,
    ipc_tree: u32,
    file: FileId,
    dir: FileId,
    pipe: FileId,
    created: Option<FileId>,
    async_id: u64,
    /// 1 (NEGOTIATE's id) + every CreditResponse: the ids the window allows.
    granted: u64,
    /// The connection ended (a fatal error).
    dead: bool,
    /// An input may have destroyed a prologue object.
    spoiled: bool,
    /// Inputs run, CREATE/TREE_CONNECT successes and async requests since the build.
    inputs: u32,
    objects: u32,
    pending: u32,
    /// CLOSE requests of the message being answered: (MessageId, FileId as sent).
    closes: Vec<(u64, [u8; 16])>,
    /// What the probe answered right after the prologue.
    healthy: Vec<u32>,
}

/// Body offset of the FileId field per command, for those that carry one.
fn file_id_offset(cmd: Command) -> Option<usize> {
    Some(match cmd {
        Command::CLOSE | Command::FLUSH | Command::LOCK | Command::IOCTL | Command::QUERY_DIRECTORY | Command::CHANGE_NOTIFY => 8,
        Command::READ | Command::WRITE | Command::SET_INFO => 16,
        Command::QUERY_INFO => 24,
        Command::OPLOCK_BREAK => 8,
        _ => return None,
    })
}

impl Harness {
    /// Connect, log on, connect the trees and open the handles; `None`
    /// if the share's `f.txt` or `d` cannot be opened (an earlier input
    /// renamed, deleted or locked it).
    pub fn new() -> Option<Harness> {
        let (srv, _) = server();
        let now = Instant::now();
        let info = TransportInfo { kind: TransportKind::Tcp, peer: None, local: None, secure: false, streams: 1 };
        let mut h = Harness {
            conn: Connection::new(srv.clone(), info, now),
            now,
            next_id: 0,
            last_id: 0,
            session_id: 0,
            share_tree: 0,
            ipc_tree: 0,
            file: FileId::default(),
            dir: FileId::default(),
            pipe: FileId::default(),
            created: None,
            async_id: 0,
            granted: 1,
            dead: false,
            spoiled: false,
            inputs: 0,
            objects: 0,
            pending: 0,
            closes: Vec::new(),
            healthy: Vec::new(),
        };
        h.negotiate();
        h.logon();
        h.share_tree = h.tree_connect("share");
        h.ipc_tree = h.tree_connect("IPC$");
        h.file = h.create(h.share_tree, "f.txt", 0)?;
        h.dir = h.create(h.share_tree, "d", 1)?;
        h.pipe = h.create(h.ipc_tree, "srvsvc", 0).expect("prologue: CREATE srvsvc");
        // What a probe answers on these objects (the same on every build).
        static HEALTHY: OnceLock<Vec<u32>> = OnceLock::new();
        if HEALTHY.get().is_none() {
            let _ = HEALTHY.set(h.probe().expect("prologue: probe"));
        }
        (h.spoiled, h.objects) = (false, 0);
        h.healthy = HEALTHY.get().cloned().unwrap_or_default();
        Some(h)
    }

    /// Why the next input cannot run on this connection as it is (an
    /// index into [`REASONS`]), or `None` if it can.
    fn unusable(&mut self) -> Option<usize> {
        Some(if self.dead {
            0
        } else if self.spoiled {
            1
        } else if self.inputs >= REBUILD_EVERY {
            2
        } else if self.objects >= MAX_OBJECTS || self.pending >= MAX_PENDING {
            3
        } else if self.next_id + 16 > self.granted {
            4
        } else if self.inputs > 0 && self.inputs % PROBE_EVERY == 0 && self.probe().as_ref() != Some(&self.healthy) {
            5
        } else {
            return None;
        })
    }

    /// QUERY_INFO (FileStandardInformation) on each prologue handle on
    /// its tree: the statuses, or `None` if the connection ended. A
    /// logged-off session, a disconnected tree or a closed handle answers
    /// differently than the prologue's objects do.
    fn probe(&mut self) -> Option<Vec<u32>> {
        let mut out = Vec::with_capacity(3);
        for (fid, tree) in [(self.file, self.share_tree), (self.dir, self.share_tree), (self.pipe, self.ipc_tree)] {
            let mut m = Vec::with_capacity(HEADER_LEN + 41);
            self.header(Command::QUERY_INFO, 1, tree).encode(&mut m);
            m.u16(41);
            m.u8(1); // SMB2_0_INFO_FILE
            m.u8(5); // FileStandardInformation
            m.u32(256);
            m.u16(0);
            m.u16(0);
            m.u32(0);
            m.u32(0);
            m.u32(0);
            fid.encode(&mut m);
            m.u8(0);
            let r = self.send(m)?;
            out.push(r.first().and_then(|e| Header::decode(e).ok()).map_or(u32::MAX, |h| h.status));
        }
        Some(out)
    }

    fn header(&mut self, command: Command, charge: u16, tree_id: u32) -> Header {
        let id = self.next_id;
        self.last_id = id;
        self.next_id += u64::from(charge.max(1));
        Header {
            credit_charge: charge,
            command: command.0,
            credits: 256,
            message_id: id,
            session_id: self.session_id,
            tree_id,
            ..Default::default()
        }
    }

    /// Send one message; every response element (header on), in order.
    /// `None` if the connection ended.
    pub fn send(&mut self, mut msg: Vec<u8>) -> Option<Vec<Vec<u8>>> {
        let r = self.conn.handle_message(self.now, &mut msg);
        let mut out = Vec::new();
        while let Some(f) = self.conn.poll_transmit() {
            let mut rest = f.get(4..).unwrap_or_default();
            while let Ok(h) = Header::decode(rest) {
                let next = h.next_command as usize;
                let (elem, tail) = if next == 0 || next > rest.len() { (rest, &[][..]) } else { rest.split_at(next) };
                self.on_response(&h, elem);
                out.push(elem.to_vec());
                rest = tail;
                if next == 0 {
                    break;
                }
            }
        }
        self.now += Duration::from_millis(1);
        let r = r.and_then(|()| self.conn.handle_timeout(self.now));
        if let Err(e) = r {
            if stats() {
                *FATALS.lock().unwrap_or_else(|e| e.into_inner()).entry(e.to_string()).or_default() += 1;
            }
            self.dead = true;
            return None;
        }
        Some(out)
    }

    fn on_response(&mut self, h: &Header, elem: &[u8]) {
        if trace() {
            let name = NtStatus(h.status).name().unwrap_or("?");
            eprintln!("  <- {:?} mid {} {} ({:#x})", h.command().name(), h.message_id, name, h.status);
        }
        self.granted += u64::from(h.credits);
        if h.is_async() {
            self.async_id = h.async_id;
            if h.status == NtStatus::PENDING.0 {
                self.pending += 1;
            }
        }
        let ok = h.status == 0;
        match h.command() {
            Command::LOGOFF | Command::TREE_DISCONNECT if ok => self.spoiled = true,
            // Any answer: a valid session is re-authenticated (and dropped if that fails).
            Command::SESSION_SETUP => self.spoiled = true,
            Command::CLOSE if ok => {
                let prologue = [self.file.volatile, self.dir.volatile, self.pipe.volatile];
                let sent = self.closes.iter().find(|c| c.0 == h.message_id).map(|c| c.1);
                // Unknown, related (all ones) or a prologue handle's volatile id.
                let volatile = sent.map(|f| u64::from_le_bytes(f[8..].try_into().unwrap_or_default()));
                if volatile.is_none_or(|v| v == u64::MAX || prologue.contains(&v)) {
                    self.spoiled = true;
                }
            }
            Command::CREATE | Command::TREE_CONNECT if ok => self.objects += 1,
            _ => {}
        }
        let gone = [NtStatus::USER_SESSION_DELETED.0, NtStatus::NETWORK_NAME_DELETED.0, NtStatus::NETWORK_SESSION_EXPIRED.0];
        if h.session_id == self.session_id && gone.contains(&h.status) {
            self.spoiled = true;
        }
        if h.command() == Command::CREATE && h.status == 0 {
            let mut r = smbq_wire::Reader::new(elem.get(HEADER_LEN + 64..).unwrap_or_default());
            if let Ok(fid) = FileId::decode(&mut r) {
                self.created = Some(fid);
            }
        }
    }

    fn call(&mut self, command: Command, tree_id: u32, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        self.header(command, 1, tree_id).encode(&mut m);
        m.extend_from_slice(body);
        let mut r = self.send(m).expect("prologue: connection stays up");
        assert_eq!(r.len(), 1, "prologue: one response to {command:?}");
        r.remove(0)
    }

    fn negotiate(&mut self) {
        let mut pre = Vec::new();
        pre.u16(1);
        pre.u16(32);
        pre.u16(1);
        pre.bytes(&[3; 32]);
        let ctxs = vec![(ctx::PREAUTH_INTEGRITY, pre), (ctx::ENCRYPTION, vec![2, 0, 2, 0, 1, 0]), (ctx::SIGNING, vec![1, 0, 1, 0])];
        let mut m = vec![0u8; HEADER_LEN];
        encode_request(&mut m, 0, &[Dialect::SMB210, Dialect::SMB300, Dialect::SMB311], 1, 0x7F, [5; 16], &ctxs);
        let r = self.call(Command::NEGOTIATE, 0, &m[HEADER_LEN..]);
        assert_eq!(Header::decode(&r).map(|h| h.status), Ok(0), "prologue: NEGOTIATE");
    }

    fn logon(&mut self) {
        let mut auth = ClientAuth::new("alice", "", "secret", 133_000_000_000_000_000);
        let mut token = auth.step(None).expect("client starts").expect("a first token");
        loop {
            let mut m = vec![0u8; HEADER_LEN];
            smbq_wire::session_setup::encode_request(&mut m, 0, 1, &token);
            let r = self.call(Command::SESSION_SETUP, 0, &m[HEADER_LEN..]);
            let h = Header::decode(&r).expect("prologue: SESSION_SETUP response");
            self.session_id = h.session_id;
            let off = r.get(68..70).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]) as usize);
            let len = r.get(70..72).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]) as usize);
            let server_token = r.get(off..off + len).unwrap_or_default().to_vec();
            match NtStatus(h.status) {
                NtStatus::MORE_PROCESSING_REQUIRED => {
                    token = auth.step(Some(&server_token)).expect("client step").expect("AUTHENTICATE");
                }
                NtStatus::SUCCESS => return,
                s => panic!("prologue: logon failed: {s:?}"),
            }
        }
    }

    fn tree_connect(&mut self, share: &str) -> u32 {
        let path: Vec<u8> = format!("\\\\127.0.0.1\\{share}").encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
        let mut b = Vec::new();
        b.u16(9);
        b.u16(0);
        b.u16(72);
        b.u16(path.len() as u16);
        b.bytes(&path);
        let r = self.call(Command::TREE_CONNECT, 0, &b);
        let h = Header::decode(&r).expect("prologue: TREE_CONNECT response");
        assert_eq!(h.status, 0, "prologue: TREE_CONNECT {share}");
        h.tree_id
    }

    /// CREATE (open existing) of `name`; `options` 1 for a directory.
    fn create(&mut self, tree_id: u32, name: &str, options: u32) -> Option<FileId> {
        let req = CreateRequest {
            oplock_level: 0,
            impersonation_level: 2,
            desired_access: if tree_id == self.ipc_tree { 0x0012_019F } else { 0x001F_01FF },
            file_attributes: 0,
            share_access: 7,
            disposition: 1,
            options,
            name: name.into(),
            contexts: Vec::new(),
        };
        let mut m = vec![0u8; HEADER_LEN];
        req.encode(&mut m, 0);
        let r = self.call(Command::CREATE, tree_id, &m[HEADER_LEN..]);
        let h = Header::decode(&r).expect("prologue: CREATE response");
        if h.status != 0 {
            return None;
        }
        let mut rd = smbq_wire::Reader::new(r.get(HEADER_LEN + 64..).unwrap_or_default());
        let fid = FileId::decode(&mut rd).expect("prologue: CREATE FileId");
        self.created = None;
        Some(fid)
    }

    /// Build one element from a record; the header's NextCommand is left 0.
    fn element(&mut self, cmd: Command, fl: u8, charge: u8, body: &[u8]) -> Vec<u8> {
        let choice = fl & 3;
        let tree = if choice == 2 || fl & 8 != 0 { self.ipc_tree } else { self.share_tree };
        let mut h = if cmd == Command::CANCEL {
            // CANCEL names the request it cancels and takes no credit.
            let mut h = Header { command: cmd.0, message_id: self.last_id, session_id: self.session_id, tree_id: tree, ..Default::default() };
            if fl & 0x40 != 0 {
                h.flags |= flags::ASYNC_COMMAND;
                h.async_id = self.async_id;
            }
            h
        } else {
            self.header(cmd, u16::from(charge & 7), tree)
        };
        if fl & 0x20 != 0 {
            h.flags |= flags::RELATED_OPERATIONS;
        }
        if fl & 0x80 != 0 {
            h.session_id = ALL_ONES;
            h.tree_id = u32::MAX;
        }
        let mut m = Vec::with_capacity(HEADER_LEN + body.len());
        h.encode(&mut m);
        m.extend_from_slice(body);
        if fl & 4 == 0 {
            if let Some(off) = file_id_offset(cmd) {
                let fid = match choice {
                    0 => self.file,
                    1 => self.dir,
                    2 => self.pipe,
                    _ => self.created.unwrap_or(self.file),
                };
                let at = HEADER_LEN + off;
                if let Some(f) = m.get_mut(at..at + 16) {
                    f[..8].copy_from_slice(&fid.persistent.to_le_bytes());
                    f[8..].copy_from_slice(&fid.volatile.to_le_bytes());
                }
            }
        }
        if cmd == Command::CLOSE {
            let at = HEADER_LEN + 8;
            let sent = m.get(at..at + 16).and_then(|f| f.try_into().ok()).unwrap_or([0xFF; 16]);
            self.closes.push((h.message_id, sent));
        }
        if cmd == Command::SET_INFO {
            clamp_allocation(&mut m);
        }
        m
    }

    /// Run the records of `data`.
    pub fn run(&mut self, data: &[u8], allowed: &[Command]) {
        self.inputs += 1;
        self.closes.clear();
        let mut rest = data;
        let mut msg: Vec<u8> = Vec::new();
        let mut last_elem = 0usize;
        for _ in 0..MAX_RECORDS {
            let [c, fl, charge, a, b, tail @ ..] = rest else { break };
            let len = usize::from(u16::from_le_bytes([*a, *b])).min(tail.len());
            let (body, next) = tail.split_at(len);
            rest = next;
            let cmd = if allowed.is_empty() { Command(u16::from(*c % 19)) } else { allowed[usize::from(*c) % allowed.len()] };
            if cmd == Command::NEGOTIATE && rest.len() >= RECORD_HEAD {
                // A second NEGOTIATE ends the connection: only as the last record.
                continue;
            }
            if !msg.is_empty() {
                // Chain: 8-byte align the previous element and point at this one.
                while msg.len() % 8 != 0 {
                    msg.push(0);
                }
                let next_cmd = (msg.len() - last_elem) as u32;
                msg[last_elem + 20..last_elem + 24].copy_from_slice(&next_cmd.to_le_bytes());
            }
            last_elem = msg.len();
            let e = self.element(cmd, *fl, *charge, body);
            msg.extend_from_slice(&e);
            if trace() {
                eprintln!("-> {:?} flags {:#04x} body {} bytes", cmd.name(), fl, body.len());
            }
            if fl & 0x10 != 0 && rest.len() >= RECORD_HEAD {
                continue;
            }
            if self.send(std::mem::take(&mut msg)).is_none() {
                return;
            }
            last_elem = 0;
        }
        if !msg.is_empty() {
            let _ = self.send(msg);
        }
    }
}

/// The live connection and what inputs did to the share since its reset.
struct Live {
    h: Option<Harness>,
    /// Inputs since the share was reset (all in [`HISTORY`]).
    inputs: u32,
    /// CREATE/TREE_CONNECT successes on connections dropped since then.
    objects: u32,
}

thread_local! {
    static LIVE: RefCell<Live> = const { RefCell::new(Live { h: None, inputs: 0, objects: 0 }) };
}

/// The inputs run since the share was last reset, the last one included:
/// what the panic hook writes out.
static HISTORY: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

fn history() -> std::sync::MutexGuard<'static, Vec<Vec<u8>>> {
    HISTORY.lock().unwrap_or_else(|e| e.into_inner())
}

/// One fuzz input: on the live connection if it is still usable (see the
/// module doc), else on a new one; the share is reset only now and then.
pub fn fuzz(data: &[u8], allowed: &[Command]) {
    static HOOK: OnceLock<()> = OnceLock::new();
    HOOK.get_or_init(install_panic_hook);
    LIVE.with(|live| {
        let live = &mut *live.borrow_mut();
        let dir = &server().1;
        let mut reset_share = fresh_mode()
            || live.h.is_none()
            || live.inputs >= RESET_EVERY
            || live.objects >= MAX_SHARE_OBJECTS
            || (live.inputs % 64 == 0 && share_bytes(dir) > MAX_SHARE_BYTES);
        let why = if reset_share { Some(6) } else { live.h.as_mut().and_then(Harness::unusable) };
        if let Some(why) = why {
            REBUILDS[why].fetch_add(1, Ordering::Relaxed);
            // The old connection goes first: dropping it closes its opens.
            if let Some(old) = live.h.take() {
                live.objects += old.objects;
            }
            loop {
                if reset_share {
                    reset(dir);
                    (live.inputs, live.objects) = (0, 0);
                    history().clear();
                }
                if let Some(h) = Harness::new() {
                    live.h = Some(h);
                    break;
                }
                assert!(!reset_share, "prologue: f.txt and d open on a fresh share");
                REBUILDS[7].fetch_add(1, Ordering::Relaxed);
                reset_share = true;
            }
        }
        live.inputs += 1;
        history().push(data.to_vec());
        if let Some(h) = live.h.as_mut() {
            h.run(data, allowed);
        }
    });
}

/// Before libFuzzer's hook (which aborts): when the crashing input was
/// not the first since the share was reset, write every input since then
/// to `<artifact_prefix>history-<pid>/NNNNN` (the last one crashed), so
/// `TARGET <that dir>/*` replays them in order, as the fuzzer ran them.
fn install_panic_hook() {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if let Ok(h) = HISTORY.try_lock() {
            if h.len() > 1 {
                let prefix = std::env::args()
                    .find_map(|a| a.strip_prefix("-artifact_prefix=").map(str::to_owned))
                    .unwrap_or_default();
                let dir = format!("{prefix}history-{}", std::process::id());
                if std::fs::create_dir_all(&dir).is_ok() {
                    for (i, input) in h.iter().enumerate() {
                        let _ = std::fs::write(format!("{dir}/{i:05}"), input);
                    }
                    eprintln!(
                        "engine: this input ran after {} others on the same share (and maybe connection); all {} are in {dir}/ \
                         (replay in order: TARGET {dir}/*; alone, or with SMBQ_FUZZ_FRESH=1, an input runs on a new connection and share)",
                        h.len() - 1,
                        h.len()
                    );
                }
            }
        }
        prev(info);
    }));
}
