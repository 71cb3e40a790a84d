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
//! `charge` & 7 is the CreditCharge. The command is `command` % 19.
use smbq_auth::{ClientAuth, UserDb};
use smbq_server::{Connection, EncryptPolicy, Server, ServerConfig, ShareConfig, TransportInfo, TransportKind};
use smbq_wire::create::CreateRequest;
use smbq_wire::header::{flags, HEADER_LEN};
use smbq_wire::negotiate::{ctx, encode_request};
use smbq_wire::{Command, Dialect, FileId, Header, NtStatus, Put};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

pub const RECORD_HEAD: usize = 5;
const MAX_RECORDS: usize = 64;
const ALL_ONES: u64 = u64::MAX;

fn server() -> &'static (Arc<Server>, PathBuf) {
    static S: OnceLock<(Arc<Server>, PathBuf)> = OnceLock::new();
    S.get_or_init(|| {
        let dir = tempfile::Builder::new().prefix("smbq-fuzz-").tempdir().expect("tempdir").keep();
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

fn trace() -> bool {
    static T: OnceLock<bool> = OnceLock::new();
    *T.get_or_init(|| std::env::var_os("SMBQ_FUZZ_TRACE").is_some())
}

/// The share's contents before each input: `f.txt` (4 KiB) and `d\g.txt`.
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
    /// Connect, log on, connect the trees and open the handles.
    pub fn new() -> Harness {
        let (srv, dir) = server();
        reset(dir);
        let now = Instant::now();
        let info = TransportInfo { kind: TransportKind::Tcp, peer: None, local: None, secure: false };
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
        };
        h.negotiate();
        h.logon();
        h.share_tree = h.tree_connect("share");
        h.ipc_tree = h.tree_connect("IPC$");
        h.file = h.create(h.share_tree, "f.txt", 0);
        h.dir = h.create(h.share_tree, "d", 1);
        h.pipe = h.create(h.ipc_tree, "srvsvc", 0);
        h
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
        if r.is_err() || self.conn.handle_timeout(self.now).is_err() {
            return None;
        }
        Some(out)
    }

    fn on_response(&mut self, h: &Header, elem: &[u8]) {
        if trace() {
            let name = NtStatus(h.status).name().unwrap_or("?");
            eprintln!("  <- {:?} mid {} {} ({:#x})", h.command().name(), h.message_id, name, h.status);
        }
        if h.is_async() {
            self.async_id = h.async_id;
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
    fn create(&mut self, tree_id: u32, name: &str, options: u32) -> FileId {
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
        assert_eq!(h.status, 0, "prologue: CREATE {name}");
        let mut rd = smbq_wire::Reader::new(r.get(HEADER_LEN + 64..).unwrap_or_default());
        let fid = FileId::decode(&mut rd).expect("prologue: CREATE FileId");
        self.created = None;
        fid
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
        m
    }

    /// Run the records of `data`.
    pub fn run(&mut self, data: &[u8], allowed: &[Command]) {
        let mut rest = data;
        let mut msg: Vec<u8> = Vec::new();
        let mut last_elem = 0usize;
        for _ in 0..MAX_RECORDS {
            let [c, fl, charge, a, b, tail @ ..] = rest else { break };
            let len = usize::from(u16::from_le_bytes([*a, *b])).min(tail.len());
            let (body, next) = tail.split_at(len);
            rest = next;
            let cmd = if allowed.is_empty() { Command(u16::from(*c % 19)) } else { allowed[usize::from(*c) % allowed.len()] };
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
