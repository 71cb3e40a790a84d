//! CHANGE_NOTIFY end to end in memory: a scripted SMB 2.1 client drives a
//! `Connection` with byte buffers while the test changes the share with
//! `std::fs`; the inotify watcher wakes the connection, which answers once
//! `handle_notices` runs (as a transport calls it when woken).

use smbq_auth::{ClientAuth, UserDb};
use smbq_server::notify::{action, filter};
use smbq_server::{Connection, Limits, Server, ServerConfig, ShareConfig, TransportInfo, TransportKind};
use smbq_wire::header::{flags, HEADER_LEN};
use smbq_wire::{framing, Command, Dialect, Header, NtStatus};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const FILE_READ_DATA: u32 = 0x0000_0001;
const SYNCHRONIZE: u32 = 0x0010_0000;
const READ_ATTRIBUTES: u32 = 0x0000_0080;
const DISPOSITION_OPEN_IF: u32 = 3;
const DIRECTORY_FILE: u32 = 0x0000_0001;
const WATCH_TREE: u16 = 0x0001;
const NOTIFY_CLEANUP: NtStatus = NtStatus(0x0000_010B);

struct Client {
    conn: Connection,
    server: Arc<Server>,
    dir: Arc<tempfile::TempDir>,
    next_id: u64,
    session_id: u64,
    tree_id: u32,
}

impl Client {
    /// NEGOTIATE (SMB 2.1), SESSION_SETUP (NTLM), TREE_CONNECT to `share`.
    fn connect() -> Client {
        Client::with_limits(Limits::default())
    }

    /// As [`Client::connect`], to a server with `limits`.
    fn with_limits(limits: Limits) -> Client {
        let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
        let mut users = UserDb::new();
        users.add("alice", "secret");
        let limits = Limits { failed_logon_delay_ms: 0, ..limits };
        let config = ServerConfig { shares: vec![ShareConfig::new("share", dir.path())], limits, ..ServerConfig::default() };
        Client::logon(Arc::new(Server::new(config, users).expect("server")), dir)
    }

    /// Another client of the same server, with a session of its own.
    fn another(&self) -> Client {
        Client::logon(Arc::clone(&self.server), Arc::clone(&self.dir))
    }

    fn logon(server: Arc<Server>, dir: Arc<tempfile::TempDir>) -> Client {
        let info = TransportInfo { kind: TransportKind::Tcp, peer: None, local: None, secure: false, streams: 1 };
        let conn = Connection::new(Arc::clone(&server), info, Instant::now());
        let mut c = Client { conn, server, dir, next_id: 0, session_id: 0, tree_id: 0 };

        let mut m = vec![0u8; HEADER_LEN];
        smbq_wire::negotiate::encode_request(&mut m, 0, &[Dialect::SMB210], 1, 0, [7; 16], &[]);
        let (h, _) = c.call(Command::NEGOTIATE, &m[HEADER_LEN..]);
        assert_eq!(NtStatus(h.status), NtStatus::SUCCESS);

        let mut auth = ClientAuth::new("alice", "", "secret", 133_000_000_000_000_000);
        let mut token = auth.step(None).expect("NTLM negotiate").expect("a token");
        loop {
            let mut m = vec![0u8; HEADER_LEN];
            smbq_wire::session_setup::encode_request(&mut m, 0, 1, &token);
            let (h, r) = c.call(Command::SESSION_SETUP, &m[HEADER_LEN..]);
            c.session_id = h.session_id;
            let off = usize::from(u16::from_le_bytes([r[HEADER_LEN + 4], r[HEADER_LEN + 5]]));
            let len = usize::from(u16::from_le_bytes([r[HEADER_LEN + 6], r[HEADER_LEN + 7]]));
            let server_token = r[off..off + len].to_vec();
            match NtStatus(h.status) {
                NtStatus::MORE_PROCESSING_REQUIRED => {
                    token = auth.step(Some(&server_token)).expect("NTLM authenticate").expect("a token");
                }
                NtStatus::SUCCESS => break,
                s => panic!("logon failed: {s:?}"),
            }
        }

        let path: Vec<u8> = "\\\\127.0.0.1\\share".encode_utf16().flat_map(u16::to_le_bytes).collect();
        let mut b = Vec::new();
        b.extend_from_slice(&9u16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&72u16.to_le_bytes());
        b.extend_from_slice(&(path.len() as u16).to_le_bytes());
        b.extend_from_slice(&path);
        let (h, _) = c.call(Command::TREE_CONNECT, &b);
        assert_eq!(NtStatus(h.status), NtStatus::SUCCESS);
        c.tree_id = h.tree_id;
        c
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Send one request; every frame the connection answers with.
    fn send(&mut self, command: Command, body: &[u8]) -> Vec<Vec<u8>> {
        let h = Header {
            credit_charge: 1,
            command: command.0,
            credits: 64,
            message_id: self.next_id,
            session_id: self.session_id,
            tree_id: self.tree_id,
            ..Default::default()
        };
        self.next_id += 1;
        let mut m = Vec::new();
        h.encode(&mut m);
        m.extend_from_slice(body);
        self.conn.handle_message(Instant::now(), &mut m).expect("connection stays up");
        self.drain()
    }

    fn call(&mut self, command: Command, body: &[u8]) -> (Header, Vec<u8>) {
        let mut r = self.send(command, body);
        assert_eq!(r.len(), 1, "one response to {command:?}");
        let r = r.remove(0);
        (Header::decode(&r).expect("SMB2 header"), r)
    }

    fn drain(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(f) = self.conn.poll_transmit() {
            let len = framing::frame_len(f[..4].try_into().expect("prefix"), usize::MAX).expect("frame length");
            assert_eq!(len, f.len() - 4);
            out.push(f[4..].to_vec());
        }
        out
    }

    /// Open directory `name` (created if missing); its FileId bytes.
    fn open_dir(&mut self, name: &str) -> [u8; 16] {
        let req = smbq_wire::create::CreateRequest {
            oplock_level: 0,
            impersonation_level: 2,
            desired_access: FILE_READ_DATA | READ_ATTRIBUTES | SYNCHRONIZE,
            file_attributes: 0,
            share_access: 7,
            disposition: DISPOSITION_OPEN_IF,
            options: DIRECTORY_FILE,
            name: name.into(),
            contexts: Vec::new(),
        };
        let mut b = vec![0u8; HEADER_LEN];
        req.encode(&mut b, 0);
        let (h, r) = self.call(Command::CREATE, &b[HEADER_LEN..]);
        assert_eq!(NtStatus(h.status), NtStatus::SUCCESS, "CREATE {name}");
        r[HEADER_LEN + 64..HEADER_LEN + 80].try_into().expect("FileId")
    }

    /// CLOSE `fid`; every frame it brings (the CLOSE response first).
    fn close(&mut self, fid: [u8; 16]) -> Vec<Vec<u8>> {
        let mut b = Vec::new();
        b.extend_from_slice(&24u16.to_le_bytes());
        b.extend_from_slice(&[0; 6]);
        b.extend_from_slice(&fid);
        let r = self.send(Command::CLOSE, &b);
        assert!(r.iter().any(|f| Header::decode(f).is_ok_and(|h| h.command == Command::CLOSE.0 && h.status == 0)));
        r
    }

    /// Send CHANGE_NOTIFY; the frames it brings at once (an interim
    /// STATUS_PENDING response, or the final one).
    fn notify(&mut self, fid: [u8; 16], len: u32, completion_filter: u32, tree: bool) -> Vec<Vec<u8>> {
        let mut b = Vec::new();
        b.extend_from_slice(&32u16.to_le_bytes());
        b.extend_from_slice(&(if tree { WATCH_TREE } else { 0 }).to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&fid);
        b.extend_from_slice(&completion_filter.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        self.send(Command::CHANGE_NOTIFY, &b)
    }

    /// Send CHANGE_NOTIFY and expect it to go async.
    fn notify_pending(&mut self, fid: [u8; 16], len: u32, completion_filter: u32, tree: bool) {
        let r = self.notify(fid, len, completion_filter, tree);
        assert_eq!(r.len(), 1);
        let h = Header::decode(&r[0]).expect("header");
        assert_eq!(NtStatus(h.status), NtStatus::PENDING, "interim response");
        assert!(h.flags & flags::ASYNC_COMMAND != 0);
    }

    /// Act on notices until a final CHANGE_NOTIFY response arrives (at
    /// most 5 s): its status and changes.
    fn wait_final(&mut self) -> (NtStatus, Vec<(u32, String)>) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            self.conn.handle_notices(Instant::now());
            if let Some(r) = self.drain().into_iter().find_map(final_notify) {
                return r;
            }
            assert!(Instant::now() < deadline, "no CHANGE_NOTIFY response within 5 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A final CHANGE_NOTIFY response: its status and FILE_NOTIFY_INFORMATION entries.
fn final_notify(frame: Vec<u8>) -> Option<(NtStatus, Vec<(u32, String)>)> {
    let h = Header::decode(&frame).ok()?;
    if h.command != Command::CHANGE_NOTIFY.0 || NtStatus(h.status) == NtStatus::PENDING {
        return None;
    }
    let status = NtStatus(h.status);
    let body = &frame[HEADER_LEN..];
    let mut changes = Vec::new();
    if status == NtStatus::SUCCESS {
        let off = usize::from(u16::from_le_bytes([body[2], body[3]]));
        let len = u32::from_le_bytes(body[4..8].try_into().expect("length")) as usize;
        let buf = &frame[off..off + len];
        let mut at = 0;
        loop {
            let word = |i: usize| u32::from_le_bytes(buf[at + i..at + i + 4].try_into().expect("u32"));
            let (next, act, name_len) = (word(0) as usize, word(4), word(8) as usize);
            let name: Vec<u16> = buf[at + 12..at + 12 + name_len].chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
            changes.push((act, String::from_utf16(&name).expect("UTF-16 name")));
            if next == 0 {
                break;
            }
            assert_eq!(next % 4, 0, "entries are 4-byte aligned");
            at += next;
        }
    }
    Some((status, changes))
}

const NAMES: u32 = filter::FILE_NAME | filter::DIR_NAME;

#[test]
fn file_created_with_std_fs_completes_the_pending_request() {
    let mut c = Client::connect();
    let fid = c.open_dir("watched");
    c.notify_pending(fid, 4096, NAMES, false);
    std::fs::write(c.root().join("watched").join("new.txt"), b"hello").expect("write");
    let (status, changes) = c.wait_final();
    assert_eq!(status, NtStatus::SUCCESS);
    assert_eq!(changes, vec![(action::ADDED, "new.txt".to_string())]);
}

#[test]
fn changes_between_requests_are_kept_and_a_rename_pairs() {
    let mut c = Client::connect();
    let fid = c.open_dir("watched");
    let dir = c.root().join("watched");
    c.notify_pending(fid, 4096, NAMES | filter::SIZE, false);
    std::fs::OpenOptions::new().write(true).create_new(true).open(dir.join("a.txt")).expect("create");
    assert_eq!(c.wait_final(), (NtStatus::SUCCESS, vec![(action::ADDED, "a.txt".to_string())]));

    // No request outstanding: the changes wait for the next one, which
    // completes at once with them, in order.
    std::fs::rename(dir.join("a.txt"), dir.join("b.txt")).expect("rename");
    std::fs::create_dir(dir.join("sub")).expect("mkdir");
    std::fs::write(dir.join("b.txt"), b"grown").expect("write");
    std::fs::remove_file(dir.join("b.txt")).expect("unlink");
    std::fs::write(c.root().join("outside.txt"), b"").expect("a file outside the watched directory");
    let r = c.notify(fid, 4096, NAMES, false);
    let (status, changes) = r.into_iter().find_map(final_notify).expect("completes without going async");
    assert_eq!(status, NtStatus::SUCCESS);
    let want: Vec<(u32, String)> = vec![
        (action::RENAMED_OLD_NAME, "a.txt".into()),
        (action::RENAMED_NEW_NAME, "b.txt".into()),
        (action::ADDED, "sub".into()),
        (action::MODIFIED, "b.txt".into()),
        (action::REMOVED, "b.txt".into()),
    ];
    assert_eq!(changes, want, "the filter and WATCH_TREE of the first request hold");
}

#[test]
fn tree_watch_reports_paths_below_with_backslashes() {
    let mut c = Client::connect();
    let fid = c.open_dir("top");
    let top = c.root().join("top");
    std::fs::create_dir(top.join("old")).expect("mkdir before the watch");
    c.notify_pending(fid, 4096, NAMES, true);
    std::fs::create_dir_all(top.join("sub").join("deeper")).expect("mkdir -p");
    std::fs::write(top.join("old").join("f.txt"), b"x").expect("file in a directory there before");
    let want = ["sub", "sub\\deeper", "old\\f.txt"];
    let mut seen: Vec<(u32, String)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut r = c.wait_final();
    loop {
        assert_eq!(r.0, NtStatus::SUCCESS);
        seen.extend(r.1);
        if want.iter().all(|w| seen.contains(&(action::ADDED, w.to_string()))) {
            break;
        }
        assert!(Instant::now() < deadline, "missing changes; have {seen:?}");
        r = match c.notify(fid, 4096, NAMES, true).into_iter().find_map(final_notify) {
            Some(r) => r,
            None => c.wait_final(),
        };
    }
}

#[test]
fn too_small_a_buffer_gets_notify_enum_dir_and_close_cleans_up() {
    let mut c = Client::connect();
    let fid = c.open_dir("watched");
    let dir = c.root().join("watched");
    // The first request fixes the buffer at 16 bytes: one short name fits.
    c.notify_pending(fid, 16, NAMES, false);
    std::fs::write(dir.join("x"), b"").expect("create");
    assert_eq!(c.wait_final(), (NtStatus::SUCCESS, vec![(action::ADDED, "x".to_string())]));
    // Three names buffered between requests overflow it.
    for n in ["one", "two", "three"] {
        std::fs::write(dir.join(n), b"").expect("create");
    }
    let (status, changes) = c.notify(fid, 4096, NAMES, false).into_iter().find_map(final_notify).expect("at once");
    assert_eq!(status, NtStatus::NOTIFY_ENUM_DIR);
    assert!(changes.is_empty());
    // Nothing left over; a request now waits, and closing the handle ends it.
    c.notify_pending(fid, 4096, NAMES, false);
    let (status, _) = c.close(fid).into_iter().find_map(final_notify).expect("answered with the CLOSE");
    assert_eq!(status, NOTIFY_CLEANUP);
}

#[test]
fn a_file_handle_cannot_be_watched() {
    let mut c = Client::connect();
    std::fs::write(c.root().join("plain"), b"").expect("create");
    let req = smbq_wire::create::CreateRequest {
        oplock_level: 0,
        impersonation_level: 2,
        desired_access: FILE_READ_DATA,
        file_attributes: 0,
        share_access: 7,
        disposition: 1,
        options: 0,
        name: "plain".into(),
        contexts: Vec::new(),
    };
    let mut b = vec![0u8; HEADER_LEN];
    req.encode(&mut b, 0);
    let (h, r) = c.call(Command::CREATE, &b[HEADER_LEN..]);
    assert_eq!(NtStatus(h.status), NtStatus::SUCCESS);
    let fid: [u8; 16] = r[HEADER_LEN + 64..HEADER_LEN + 80].try_into().expect("FileId");
    let r = c.notify(fid, 4096, NAMES, false);
    assert_eq!(final_notify(r.into_iter().next().expect("a response")).map(|r| r.0), Some(NtStatus::INVALID_PARAMETER));
}

/// A server that allows each session 4 inotify watches and all of them 6.
fn watch_limits() -> Limits {
    Limits { notify_watches_per_session: 4, notify_watches: 6, ..Limits::default() }
}

/// `top` with directories d0..d`n` below it, each holding one more.
fn deep_tree(top: &Path, n: usize) {
    let mut dir = top.to_path_buf();
    for i in 0..n {
        dir = dir.join(format!("d{i}"));
    }
    std::fs::create_dir_all(dir).expect("mkdir -p");
}

#[test]
fn a_session_past_its_watches_gets_notify_enum_dir_and_another_session_is_served() {
    let mut a = Client::with_limits(watch_limits());
    let mut b = a.another();
    deep_tree(&a.root().join("deep"), 8);
    let deep = a.open_dir("deep");
    // 9 directories, 4 watches: the tree watch overflows at once.
    let (status, changes) = a.notify(deep, 4096, NAMES, true).into_iter().find_map(final_notify).expect("at once");
    assert_eq!((status, changes), (NtStatus::NOTIFY_ENUM_DIR, vec![]));
    // The next request waits, and hears of what happens where it has a watch.
    a.notify_pending(deep, 4096, NAMES, true);
    std::fs::write(a.root().join("deep").join("d0").join("seen"), b"").expect("create");
    assert_eq!(a.wait_final(), (NtStatus::SUCCESS, vec![(action::ADDED, "d0\\seen".to_string())]));
    // The session has no watch left, not even for a directory alone.
    let other = a.open_dir("other");
    let (status, _) = a.notify(other, 4096, NAMES, false).into_iter().find_map(final_notify).expect("at once");
    assert_eq!(status, NtStatus::NOTIFY_ENUM_DIR);

    // Another session's watch works while the first holds its maximum.
    let fid = b.open_dir("mine");
    b.notify_pending(fid, 4096, NAMES, false);
    std::fs::write(b.root().join("mine").join("new.txt"), b"").expect("create");
    assert_eq!(b.wait_final(), (NtStatus::SUCCESS, vec![(action::ADDED, "new.txt".to_string())]));
    // It holds 1 of the 2 left of the total; a tree of 3 takes the other
    // and overflows.
    deep_tree(&b.root().join("three"), 2);
    let three = b.open_dir("three");
    let (status, _) = b.notify(three, 4096, NAMES, true).into_iter().find_map(final_notify).expect("at once");
    assert_eq!(status, NtStatus::NOTIFY_ENUM_DIR);

    // Closing the tree watch's handle frees its watches: the first session's
    // other directory, refused before, is watched at its next request, which
    // reports STATUS_NOTIFY_ENUM_DIR for what went unseen, then waits.
    a.close(deep);
    let (status, _) = a.notify(other, 4096, NAMES, false).into_iter().find_map(final_notify).expect("at once");
    assert_eq!(status, NtStatus::NOTIFY_ENUM_DIR);
    a.notify_pending(other, 4096, NAMES, false);
    std::fs::write(a.root().join("other").join("late"), b"").expect("create");
    assert_eq!(a.wait_final(), (NtStatus::SUCCESS, vec![(action::ADDED, "late".to_string())]));
}

#[test]
fn each_server_has_its_own_watcher_and_it_goes_with_the_server() {
    let mut a = Client::connect();
    let mut b = Client::connect();
    let (fa, fb) = (a.open_dir("watched"), b.open_dir("watched"));
    a.notify_pending(fa, 4096, NAMES, false);
    b.notify_pending(fb, 4096, NAMES, false);
    // The same volatile id on two servers names two opens.
    std::fs::write(b.root().join("watched").join("only-b"), b"").expect("create");
    assert_eq!(b.wait_final(), (NtStatus::SUCCESS, vec![(action::ADDED, "only-b".to_string())]));
    std::fs::write(a.root().join("watched").join("only-a"), b"").expect("create");
    assert_eq!(a.wait_final(), (NtStatus::SUCCESS, vec![(action::ADDED, "only-a".to_string())]));
    // Its thread holds the server only while it wakes a connection.
    let server = Arc::downgrade(&a.server);
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.upgrade().is_some() {
        assert!(Instant::now() < deadline, "the server outlives its last connection");
        std::thread::sleep(Duration::from_millis(10));
    }
}
