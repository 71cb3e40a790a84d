//! File commands end to end: a minimal in-memory SMB 2.1 client (unsigned,
//! on a share backed by a temporary directory) drives CREATE, CLOSE, READ,
//! WRITE, FLUSH, QUERY_INFO, QUERY_DIRECTORY and SET_INFO. The same client
//! speaks SMB 2.0.2 too, negotiated by SMB2 or by SMB1.

use bytes::Bytes;
use smbq_auth::{ClientAuth, UserDb};
use smbq_server::{Connection, Server, ServerConfig, ShareConfig, TransportInfo, TransportKind};
use smbq_wire::close::{CloseRequest, CloseResponse, POSTQUERY_ATTRIB};
use smbq_wire::create::{disposition, options, share, CreateContext, CreateRequest, CreateResponse};
use smbq_wire::fscc::{class, fs_class, BasicInfo, RenameInfo};
use smbq_wire::header::HEADER_LEN;
use smbq_wire::negotiate::caps;
use smbq_wire::query_directory::QueryDirectoryRequest;
use smbq_wire::query_info::{info_type, QueryInfoRequest};
use smbq_wire::read::ReadRequest;
use smbq_wire::set_info::SetInfoRequest;
use smbq_wire::write::WriteRequest;
use smbq_wire::{framing, Command, FileId, Header, NtStatus, Put};
use std::sync::Arc;
use std::time::Instant;

const GENERIC_READ: u32 = 0x8000_0000;
const GENERIC_WRITE: u32 = 0x4000_0000;
const DELETE: u32 = 0x0001_0000;
const READ_ATTRIBUTES: u32 = 0x80;
const ALL_SHARE: u32 = share::READ | share::WRITE | share::DELETE;

struct Client {
    conn: Connection,
    srv: Arc<Server>,
    dir: tempfile::TempDir,
    next_id: u64,
    session_id: u64,
    tree_id: u32,
    told: Told,
}

/// How a client opens its connection.
#[derive(Clone, Copy)]
enum Hello {
    /// An SMB2 NEGOTIATE offering this one dialect.
    Smb2(u16),
    /// An SMB1 NEGOTIATE naming "SMB 2.002" and not "SMB 2.???", as
    /// Windows Vista and impacket over port 139 begin (MS-SMB2 3.3.5.3.2).
    Smb1Only202,
}

/// What the NEGOTIATE response told the client (MS-SMB2 2.2.4), by which
/// it charges credits and sizes its requests (3.2.5.2).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Told {
    dialect: u16,
    security_mode: u16,
    capabilities: u32,
    /// MaxTransactSize, MaxReadSize, MaxWriteSize.
    sizes: [u32; 3],
}

impl Told {
    /// Connection.SupportsMultiCredit of the client (MS-SMB2 3.2.5.2).
    fn multi_credit(&self) -> bool {
        self.dialect != 0x0202 && self.capabilities & caps::LARGE_MTU != 0
    }
}

impl Client {
    fn new() -> Client {
        Client::with_metrics(false)
    }

    /// A client of a server that counts into the `metrics` recorder (when `metrics`).
    fn with_metrics(metrics: bool) -> Client {
        let mut c = Client::connect(Hello::Smb2(0x0210), |config| config.metrics = metrics);
        c.logon();
        c
    }

    /// A client that said `hello` to a server of its own, configured by
    /// `tweak`; not yet logged on.
    fn connect(hello: Hello, tweak: impl FnOnce(&mut ServerConfig)) -> Client {
        let dir = tempfile::tempdir().unwrap();
        let mut users = UserDb::new();
        users.add("alice", "secret");
        let mut config = ServerConfig { encrypt: smbq_server::EncryptPolicy::Off, ..Default::default() };
        config.shares.push(ShareConfig { encrypt: smbq_server::EncryptPolicy::Off, ..ShareConfig::new("share", dir.path()) });
        tweak(&mut config);
        let srv = Arc::new(Server::new(config, users).unwrap());
        let info = TransportInfo { kind: TransportKind::Tcp, peer: None, local: None, secure: false, streams: 1 };
        let conn = Connection::new(srv.clone(), info, Instant::now());
        let mut c = Client { conn, srv, dir, next_id: 0, session_id: 0, tree_id: 0, told: Told::default() };
        c.negotiate(hello);
        c
    }

    /// A second client connection to the same server (its `dir` is unused).
    fn peer(&self) -> Client {
        let info = TransportInfo { kind: TransportKind::Tcp, peer: None, local: None, secure: false, streams: 1 };
        let conn = Connection::new(self.srv.clone(), info, Instant::now());
        let mut c = Client { conn, srv: self.srv.clone(), dir: tempfile::tempdir().unwrap(), next_id: 0, session_id: 0, tree_id: 0, told: Told::default() };
        c.negotiate(Hello::Smb2(0x0210));
        c.logon();
        c
    }

    /// Send one request element; return the response element.
    fn call(&mut self, command: Command, body: &[u8]) -> (NtStatus, Vec<u8>) {
        self.call_chunked(command, body, usize::MAX, 1)
    }

    /// [`Client::call`] with the message handed over as a transport that
    /// keeps what it received in chunks does: its first `head` bytes, then
    /// the rest in pieces of `chunk` bytes. The credit charge covers the
    /// body (MS-SMB2 3.3.5.2.5), or is 0 without multi-credit (3.2.4.1.5).
    fn call_chunked(&mut self, command: Command, body: &[u8], head: usize, chunk: usize) -> (NtStatus, Vec<u8>) {
        let charge = if self.told.multi_credit() { body.len().div_ceil(65536).max(1) as u16 } else { 0 };
        self.exchange(command, body, charge, head, chunk)
    }

    /// [`Client::call`] with CreditCharge `charge`.
    fn call_charged(&mut self, command: Command, body: &[u8], charge: u16) -> (NtStatus, Vec<u8>) {
        self.exchange(command, body, charge, usize::MAX, 1)
    }

    /// Send one request element charged `charge` (the message ids it takes
    /// are the ones the client believes the server counts); return the
    /// response element.
    fn exchange(&mut self, command: Command, body: &[u8], charge: u16, head: usize, chunk: usize) -> (NtStatus, Vec<u8>) {
        let h = Header {
            credit_charge: charge,
            command: command.0,
            credits: 64,
            message_id: self.next_id,
            session_id: self.session_id,
            tree_id: self.tree_id,
            ..Default::default()
        };
        self.next_id += if self.told.multi_credit() { u64::from(charge.max(1)) } else { 1 };
        let mut m = Vec::new();
        h.encode(&mut m);
        m.extend_from_slice(body);
        let head = head.min(m.len());
        let tail: Vec<Bytes> = m[head..].chunks(chunk).map(Bytes::copy_from_slice).collect();
        self.conn.handle_frame(Instant::now(), &mut m[..head], &tail).expect("connection stays up");
        self.response()
    }

    /// The one response frame the server has to send.
    fn response(&mut self) -> (NtStatus, Vec<u8>) {
        let f = self.conn.poll_transmit().expect("a response");
        let len = framing::frame_len(f[..4].try_into().unwrap(), usize::MAX).unwrap();
        assert_eq!(len, f.len() - 4);
        let resp = f[4..].to_vec();
        let rh = Header::decode(&resp).unwrap();
        self.session_id = rh.session_id;
        (NtStatus(rh.status), resp)
    }

    /// Open the connection as `hello` says; keep what the answer told.
    fn negotiate(&mut self, hello: Hello) {
        let (st, r) = match hello {
            Hello::Smb2(dialect) => {
                let mut b = Vec::new();
                b.u16(36);
                b.u16(1);
                b.u16(1);
                b.u16(0);
                b.u32(0);
                b.bytes(&[1; 16]);
                b.zeros(8);
                b.u16(dialect);
                self.call(Command::NEGOTIATE, &b)
            }
            Hello::Smb1Only202 => {
                // SMB1 header (command 0x72), WordCount 0, ByteCount, dialects.
                let mut m = vec![0xFF, b'S', b'M', b'B', 0x72];
                m.resize(32, 0);
                m.push(0);
                let dialects = b"\x02NT LM 0.12\0\x02SMB 2.002\0";
                m.u16(dialects.len() as u16);
                m.bytes(dialects);
                self.conn.handle_message(Instant::now(), &mut m).expect("connection stays up");
                self.next_id = 1;
                self.response()
            }
        };
        assert_eq!(st, NtStatus::SUCCESS);
        let b = &r[HEADER_LEN..];
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        self.told = Told {
            dialect: u16::from_le_bytes([b[4], b[5]]),
            security_mode: u16::from_le_bytes([b[2], b[3]]),
            capabilities: u32_at(24),
            sizes: [u32_at(28), u32_at(32), u32_at(36)],
        };
    }

    /// SESSION_SETUP as alice, then TREE_CONNECT to the share.
    fn logon(&mut self) {
        let mut auth = ClientAuth::new("alice", "", "secret", 133_000_000_000_000_000);
        let mut token = auth.step(None).unwrap().unwrap();
        loop {
            let mut m = vec![0u8; HEADER_LEN];
            smbq_wire::session_setup::encode_request(&mut m, 0, 1, &token);
            let (st, r) = self.call(Command::SESSION_SETUP, &m[HEADER_LEN..]);
            if st == NtStatus::SUCCESS {
                break;
            }
            assert_eq!(st, NtStatus::MORE_PROCESSING_REQUIRED);
            let off = u16::from_le_bytes([r[68], r[69]]) as usize;
            let len = u16::from_le_bytes([r[70], r[71]]) as usize;
            token = auth.step(Some(&r[off..off + len])).unwrap().unwrap();
        }
        let path: Vec<u8> = "\\\\127.0.0.1\\share".encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
        let mut b = Vec::new();
        b.u16(9);
        b.u16(0);
        b.u16(72);
        b.u16(path.len() as u16);
        b.bytes(&path);
        let (st, r) = self.call(Command::TREE_CONNECT, &b);
        assert_eq!(st, NtStatus::SUCCESS);
        self.tree_id = Header::decode(&r).unwrap().tree_id;
    }

    fn body(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut m = vec![0u8; HEADER_LEN];
        f(&mut m);
        m.split_off(HEADER_LEN)
    }

    fn create_ex(&mut self, name: &str, access: u32, share_access: u32, disp: u32, opts: u32, ctxs: Vec<CreateContext<'_>>) -> (NtStatus, Vec<u8>) {
        let req = CreateRequest {
            oplock_level: 0,
            impersonation_level: 2,
            desired_access: access,
            file_attributes: 0,
            share_access,
            disposition: disp,
            options: opts,
            name: name.into(),
            contexts: ctxs,
        };
        let b = Self::body(|m| req.encode(m, 0));
        self.call(Command::CREATE, &b)
    }

    fn create(&mut self, name: &str, access: u32, share_access: u32, disp: u32, opts: u32) -> Result<FileId, NtStatus> {
        let (st, r) = self.create_ex(name, access, share_access, disp, opts, vec![]);
        if st != NtStatus::SUCCESS {
            return Err(st);
        }
        Ok(CreateResponse::decode(&r).unwrap().0.file_id)
    }

    fn close(&mut self, fid: FileId, flags: u16) -> (NtStatus, Vec<u8>) {
        let b = Self::body(|m| CloseRequest { flags, file_id: fid }.encode(m));
        self.call(Command::CLOSE, &b)
    }

    fn write(&mut self, fid: FileId, offset: u64, data: &[u8]) -> NtStatus {
        let req = WriteRequest { offset, file_id: fid, channel: 0, remaining_bytes: 0, flags: 0, data };
        let b = Self::body(|m| req.encode(m));
        self.call(Command::WRITE, &b).0
    }

    fn read(&mut self, fid: FileId, offset: u64, length: u32) -> (NtStatus, Vec<u8>) {
        let req = ReadRequest { flags: 0, length, offset, file_id: fid, minimum_count: 0, channel: 0, remaining_bytes: 0 };
        let b = Self::body(|m| req.encode(m));
        let (st, r) = self.call(Command::READ, &b);
        if st != NtStatus::SUCCESS {
            return (st, vec![]);
        }
        (st, smbq_wire::read::decode_response(&r).unwrap().to_vec())
    }

    fn query(&mut self, fid: FileId, typ: u8, cls: u8, len: u32, addl: u32) -> (NtStatus, Vec<u8>) {
        let req = QueryInfoRequest { info_type: typ, class: cls, output_buffer_length: len, input: &[], additional_information: addl, flags: 0, file_id: fid };
        let b = Self::body(|m| req.encode(m));
        let (st, r) = self.call(Command::QUERY_INFO, &b);
        if st == NtStatus::SUCCESS || st == NtStatus::BUFFER_OVERFLOW {
            return (st, smbq_wire::query_info::decode_response(&r).unwrap().to_vec());
        }
        (st, r[HEADER_LEN..].to_vec())
    }

    fn list(&mut self, fid: FileId, flags: u8, pattern: &str) -> (NtStatus, Vec<String>) {
        let req = QueryDirectoryRequest { class: class::ID_BOTH_DIRECTORY, flags, file_index: 0, file_id: fid, pattern: pattern.into(), output_buffer_length: 65536 };
        let b = Self::body(|m| req.encode(m));
        let (st, r) = self.call(Command::QUERY_DIRECTORY, &b);
        if st != NtStatus::SUCCESS {
            return (st, vec![]);
        }
        let buf = smbq_wire::query_directory::decode_response(&r).unwrap();
        let mut names = Vec::new();
        let mut at = 0usize;
        loop {
            let e = &buf[at..];
            let next = u32::from_le_bytes(e[0..4].try_into().unwrap()) as usize;
            let nlen = u32::from_le_bytes(e[60..64].try_into().unwrap()) as usize;
            names.push(smbq_wire::reader::utf16le(&e[104..104 + nlen]).unwrap());
            if next == 0 {
                break;
            }
            assert_eq!(next % 8, 0);
            at += next;
        }
        (st, names)
    }

    fn set(&mut self, fid: FileId, cls: u8, buf: &[u8]) -> NtStatus {
        let req = SetInfoRequest { info_type: info_type::FILE, class: cls, buffer: buf, additional_information: 0, file_id: fid };
        let b = Self::body(|m| req.encode(m));
        self.call(Command::SET_INFO, &b).0
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

#[test]
fn create_write_read_close() {
    let mut c = Client::new();
    // Names are share-relative: a leading separator is invalid.
    assert_eq!(c.create("\\a.txt", GENERIC_READ, 0, disposition::OVERWRITE_IF, 0), Err(NtStatus::INVALID_PARAMETER));
    let f = c.create("a.txt", GENERIC_READ | GENERIC_WRITE, 0, disposition::OVERWRITE_IF, options::NON_DIRECTORY_FILE).unwrap();
    assert_eq!(c.write(f, 0, b"hello world"), NtStatus::SUCCESS);
    assert_eq!(c.read(f, 6, 100), (NtStatus::SUCCESS, b"world".to_vec()));
    // The read moved FilePositionInformation to its end.
    assert_eq!(u64_at(&c.query(f, info_type::FILE, class::POSITION, 8, 0).1, 0), 11);
    assert_eq!(c.set(f, class::POSITION, &3u64.to_le_bytes()), NtStatus::SUCCESS);
    assert_eq!(u64_at(&c.query(f, info_type::FILE, class::ALL, 4096, 0).1, 80), 3);
    assert_eq!(c.read(f, 11, 1).0, NtStatus::END_OF_FILE);
    assert_eq!(c.read(f, 0, 0).0, NtStatus::SUCCESS);
    // FileModeInformation: write-through and sequential-only can change.
    assert_eq!(c.set(f, class::MODE, &2u32.to_le_bytes()), NtStatus::SUCCESS);
    assert_eq!(c.query(f, info_type::FILE, class::MODE, 4, 0).1, 2u32.to_le_bytes());
    assert_eq!(c.set(f, class::MODE, &1u32.to_le_bytes()), NtStatus::INVALID_PARAMETER);
    assert_eq!(c.set(f, class::MODE, &0u32.to_le_bytes()), NtStatus::SUCCESS);
    assert_eq!(u32::from_le_bytes(c.query(f, info_type::FILE, class::ALL, 4096, 0).1[88..92].try_into().unwrap()), 0);
    // Offsets are signed: -1 is no "append" over SMB2, and ranges must end
    // by i64::MAX (writes by NTFS's 16 TiB - 64 KiB).
    assert_eq!(c.write(f, u64::MAX, b"!"), NtStatus::INVALID_PARAMETER);
    assert_eq!(c.write(f, i64::MAX as u64, b"!"), NtStatus::INVALID_PARAMETER);
    assert_eq!(c.write(f, i64::MAX as u64, b""), NtStatus::SUCCESS);
    assert_eq!(c.write(f, 0xFFF_FFFF_0000, b"!"), NtStatus::INVALID_PARAMETER);
    assert_eq!(c.read(f, i64::MAX as u64, 1).0, NtStatus::INVALID_PARAMETER);
    assert_eq!(c.read(f, 1 << 63, 0).0, NtStatus::INVALID_PARAMETER);
    assert_eq!(c.read(f, i64::MAX as u64 - 1, 1).0, NtStatus::END_OF_FILE);
    assert_eq!(c.write(f, 11, b"!"), NtStatus::SUCCESS);
    let (st, r) = c.close(f, POSTQUERY_ATTRIB);
    assert_eq!(st, NtStatus::SUCCESS);
    let resp = CloseResponse::decode(&r).unwrap();
    assert_eq!(resp.end_of_file, 12);
    assert_eq!(resp.file_attributes & 0x10, 0);
    assert_eq!(std::fs::read(c.dir.path().join("a.txt")).unwrap(), b"hello world!");
    // Closed: the id is gone.
    assert_eq!(c.close(f, 0).0, NtStatus::FILE_CLOSED);
    assert_eq!(c.read(f, 0, 1).0, NtStatus::FILE_CLOSED);

    // Without read access, READ is refused; without write access, WRITE.
    let w = c.create("a.txt", GENERIC_WRITE, ALL_SHARE, disposition::OPEN, 0).unwrap();
    assert_eq!(c.read(w, 0, 1).0, NtStatus::ACCESS_DENIED);
    let r = c.create("a.txt", GENERIC_READ, ALL_SHARE, disposition::OPEN, 0).unwrap();
    assert_eq!(c.write(r, 0, b"x"), NtStatus::ACCESS_DENIED);
    // Read longer than max I/O.
    assert_eq!(c.read(r, 0, 64 * 1024 * 1024).0, NtStatus::INVALID_PARAMETER);
}

/// The engine's counts, as a `metrics` recorder sees them (the debugging
/// recorder: a snapshot reads each counter and gauge and sets it to 0).
#[test]
fn metrics_count_bytes_requests_errors_connections_sessions_and_opens() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use smbq_server::metrics::names;
    type Snapshot = Vec<(metrics_util::CompositeKey, Option<metrics::Unit>, Option<metrics::SharedString>, DebugValue)>;
    fn find<'a>(all: &'a Snapshot, name: &str, labels: &[(&str, &str)]) -> Option<&'a DebugValue> {
        all.iter()
            .find(|(k, ..)| {
                let key = k.key();
                key.name() == name && labels.iter().all(|(l, v)| key.labels().any(|kl| kl.key() == *l && kl.value() == *v))
            })
            .map(|(.., v)| v)
    }
    let counter = |n| Some(DebugValue::Counter(n));
    let gauge = |g: f64| Some(DebugValue::Gauge(g.into()));
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let mut c = Client::with_metrics(true);
        let fid = c.create("m.bin", GENERIC_READ | GENERIC_WRITE, ALL_SHARE, disposition::CREATE, 0).unwrap();
        assert_eq!(c.write(fid, 0, &[7; 1000]), NtStatus::SUCCESS);
        assert_eq!(c.read(fid, 10, 500), (NtStatus::SUCCESS, vec![7; 500]));
        assert_eq!(c.read(fid, 1000, 10).0, NtStatus::END_OF_FILE);
        assert_eq!(c.create("missing", GENERIC_READ, ALL_SHARE, disposition::OPEN, 0), Err(NtStatus::OBJECT_NAME_NOT_FOUND));
        let all: Snapshot = snap.snapshot().into_vec();
        let v = |name, labels: &[(&str, &str)]| find(&all, name, labels);
        assert_eq!(v(names::WRITTEN_BYTES, &[]), counter(1000).as_ref());
        assert_eq!(v(names::READ_BYTES, &[]), counter(500).as_ref());
        assert_eq!(v(names::REQUESTS, &[("command", "WRITE")]), counter(1).as_ref());
        assert_eq!(v(names::REQUESTS, &[("command", "READ")]), counter(2).as_ref());
        assert_eq!(v(names::REQUESTS, &[("command", "CREATE")]), counter(2).as_ref());
        assert!(matches!(v(names::REQUEST_DURATION, &[("command", "READ")]), Some(DebugValue::Histogram(h)) if h.len() == 2));
        assert_eq!(v(names::ERRORS, &[("status", "STATUS_OBJECT_NAME_NOT_FOUND")]), counter(1).as_ref());
        assert_eq!(v(names::ERRORS, &[("status", "STATUS_END_OF_FILE")]), counter(1).as_ref());
        // The logon's MORE_PROCESSING_REQUIRED is no error.
        assert_eq!(v(names::ERRORS, &[("status", "STATUS_MORE_PROCESSING_REQUIRED")]), None);
        assert!(matches!(v(names::RECEIVED_BYTES, &[("transport", "tcp")]), Some(DebugValue::Counter(n)) if *n > 1000));
        assert!(matches!(v(names::SENT_BYTES, &[("transport", "tcp")]), Some(DebugValue::Counter(n)) if *n > 500));
        assert_eq!(v(names::CONNECTIONS_ACCEPTED, &[("transport", "tcp")]), counter(1).as_ref());
        assert_eq!(v(names::CONNECTIONS, &[("transport", "tcp")]), gauge(1.0).as_ref());
        assert_eq!(v(names::CONNECTIONS, &[("transport", "quic")]), gauge(0.0).as_ref());
        assert_eq!(v(names::SESSIONS, &[]), gauge(1.0).as_ref());
        assert_eq!(v(names::OPENS, &[]), gauge(1.0).as_ref());
        // The connection goes with its session and open: each gauge down
        // by one from the snapshot (which set it to 0).
        drop(c);
        let all: Snapshot = snap.snapshot().into_vec();
        let v = |name, labels: &[(&str, &str)]| find(&all, name, labels);
        assert_eq!(v(names::CONNECTIONS, &[("transport", "tcp")]), gauge(-1.0).as_ref());
        assert_eq!(v(names::SESSIONS, &[]), gauge(-1.0).as_ref());
        assert_eq!(v(names::OPENS, &[]), gauge(-1.0).as_ref());
    });
}

#[test]
fn messages_in_chunks() {
    let mut c = Client::new();
    let f = c.create("big", GENERIC_READ | GENERIC_WRITE, 0, disposition::CREATE, 0).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let write = |offset, data| Client::body(|m| WriteRequest { offset, file_id: f, channel: 0, remaining_bytes: 0, flags: 0, data }.encode(m));
    // A WRITE whose data starts in the head and runs on through uneven
    // chunks, and one whose data is all in the chunks.
    let fixed = HEADER_LEN + smbq_wire::write::HEAD_LEN;
    assert_eq!(c.call_chunked(Command::WRITE, &write(0, &data), fixed + 10, 4099).0, NtStatus::SUCCESS);
    assert_eq!(c.call_chunked(Command::WRITE, &write(300_000, &data[..70_000]), fixed, 65_536).0, NtStatus::SUCCESS);
    let mut want = data.clone();
    want.extend_from_slice(&data[..70_000]);
    assert_eq!(std::fs::read(c.dir.path().join("big")).unwrap(), want);
    // Length beyond the message's end is refused as it is when whole.
    let mut long = write(0, &data[..1000]);
    long[4..8].copy_from_slice(&1001u32.to_le_bytes());
    assert_eq!(c.call_chunked(Command::WRITE, &long, fixed, 100).0, NtStatus::INVALID_PARAMETER);
    // Data that starts past the head (DataOffset 5000): gathered, then
    // served as usual.
    let mut padded = write(1 << 20, b"");
    padded.truncate(smbq_wire::write::HEAD_LEN);
    padded[2..4].copy_from_slice(&5000u16.to_le_bytes());
    padded[4..8].copy_from_slice(&100_000u32.to_le_bytes());
    padded.resize(5000 - HEADER_LEN, 0);
    padded.extend_from_slice(&data[..100_000]);
    assert_eq!(c.call_chunked(Command::WRITE, &padded, 4096, 65_536).0, NtStatus::SUCCESS);
    let f2 = std::fs::read(c.dir.path().join("big")).unwrap();
    assert_eq!(&f2[1 << 20..], &data[..100_000]);
    // Any other command is gathered first: a READ split after 70 bytes.
    let rd = Client::body(|m| ReadRequest { flags: 0, length: 5, offset: 3, file_id: f, minimum_count: 0, channel: 0, remaining_bytes: 0 }.encode(m));
    let (st, r) = c.call_chunked(Command::READ, &rd, 70, 3);
    assert_eq!(st, NtStatus::SUCCESS);
    assert_eq!(smbq_wire::read::decode_response(&r).unwrap(), &data[3..8]);
}

#[test]
fn create_errors() {
    let mut c = Client::new();
    assert_eq!(c.create("missing", GENERIC_READ, 0, disposition::OPEN, 0), Err(NtStatus::OBJECT_NAME_NOT_FOUND));
    // A stream of an unknown type, or one on a directory of the path.
    assert_eq!(c.create("a:b:$FOO", GENERIC_READ, 0, disposition::OPEN_IF, 0), Err(NtStatus::OBJECT_NAME_INVALID));
    assert_eq!(c.create("a:b\\c", GENERIC_READ, 0, disposition::OPEN_IF, 0), Err(NtStatus::OBJECT_NAME_INVALID));
    assert_eq!(c.create("..\\..", GENERIC_READ, 0, disposition::OPEN_IF, 0), Err(NtStatus::OBJECT_PATH_SYNTAX_BAD));
    assert_eq!(c.create("a\\..\\b", GENERIC_READ, 0, disposition::OPEN_IF, 0), Err(NtStatus::OBJECT_PATH_SYNTAX_BAD));
    assert_eq!(c.create("x", GENERIC_READ, 0, 6, 0), Err(NtStatus::INVALID_PARAMETER));
    assert_eq!(c.create("x", GENERIC_READ, 0, 1, options::DIRECTORY_FILE | options::NON_DIRECTORY_FILE), Err(NtStatus::INVALID_PARAMETER));
    assert_eq!(c.create("x", GENERIC_READ, 0, 1, options::OPEN_BY_FILE_ID), Err(NtStatus::NOT_SUPPORTED));
    assert_eq!(c.create("x", GENERIC_READ, 0, disposition::CREATE, options::DELETE_ON_CLOSE), Err(NtStatus::ACCESS_DENIED));
    assert_eq!(c.create("x", 0x0100_0000, 0, disposition::CREATE, 0), Err(NtStatus::PRIVILEGE_NOT_HELD));
    let d = c.create("d", GENERIC_READ, ALL_SHARE, disposition::CREATE, options::DIRECTORY_FILE).unwrap();
    assert!(c.dir.path().join("d").is_dir());
    assert_eq!(c.create("d", GENERIC_READ, ALL_SHARE, disposition::CREATE, options::DIRECTORY_FILE), Err(NtStatus::OBJECT_NAME_COLLISION));
    assert_eq!(c.create("d", GENERIC_READ, ALL_SHARE, disposition::OPEN, options::NON_DIRECTORY_FILE), Err(NtStatus::FILE_IS_A_DIRECTORY));
    assert_eq!(c.read(d, 0, 1).0, NtStatus::INVALID_DEVICE_REQUEST);

    // MxAc and QFid are answered; unknown contexts ignored.
    let (st, r) = c.create_ex(
        "d",
        READ_ATTRIBUTES,
        ALL_SHARE,
        disposition::OPEN,
        0,
        vec![CreateContext { name: b"MxAc", data: &[] }, CreateContext { name: b"RqLs", data: &[0; 32] }, CreateContext { name: b"QFid", data: &[] }],
    );
    assert_eq!(st, NtStatus::SUCCESS);
    let (resp, ctxs) = CreateResponse::decode(&r).unwrap();
    assert_eq!(resp.file_attributes & 0x10, 0x10);
    assert_eq!(ctxs.len(), 2);
    assert_eq!(ctxs[0].name, b"MxAc");
    assert_eq!(ctxs[0].data, &[0, 0, 0, 0, 0xFF, 0x01, 0x1F, 0]);
    assert_eq!(ctxs[1].name, b"QFid");
    assert_eq!(ctxs[1].data.len(), 32);
}

#[test]
fn share_modes_and_delete_pending() {
    let mut c = Client::new();
    let a = c.create("f", GENERIC_READ, share::READ, disposition::CREATE, 0).unwrap();
    assert_eq!(c.create("f", GENERIC_WRITE, ALL_SHARE, disposition::OPEN, 0), Err(NtStatus::SHARING_VIOLATION));
    // A refused overwrite truncates nothing.
    std::fs::write(c.dir.path().join("f"), b"data").unwrap();
    assert_eq!(c.create("f", GENERIC_WRITE, ALL_SHARE, disposition::OVERWRITE, 0), Err(NtStatus::SHARING_VIOLATION));
    assert_eq!(std::fs::read(c.dir.path().join("f")).unwrap(), b"data");
    let b = c.create("f", GENERIC_READ, share::READ, disposition::OPEN, 0).unwrap();
    let attrs = c.create("f", READ_ATTRIBUTES, 0, disposition::OPEN, 0).unwrap();
    c.close(a, 0);
    c.close(b, 0);
    c.close(attrs, 0);

    // Disposition set: new opens see DELETE_PENDING; the last close deletes.
    let d = c.create("f", DELETE | READ_ATTRIBUTES, ALL_SHARE, disposition::OPEN, 0).unwrap();
    assert_eq!(c.set(d, class::DISPOSITION, &[1]), NtStatus::SUCCESS);
    let (_, std) = c.query(d, info_type::FILE, class::STANDARD, 24, 0);
    assert_eq!(std[20], 1, "DeletePending");
    assert_eq!(c.create("f", READ_ATTRIBUTES, ALL_SHARE, disposition::OPEN, 0), Err(NtStatus::DELETE_PENDING));
    c.close(d, 0);
    assert!(!c.dir.path().join("f").exists());

    // Delete-on-close at create.
    let g = c.create("g", DELETE | GENERIC_WRITE, 0, disposition::CREATE, options::DELETE_ON_CLOSE).unwrap();
    assert!(c.dir.path().join("g").exists());
    c.close(g, 0);
    assert!(!c.dir.path().join("g").exists());

    // Disposition without DELETE access; on a non-empty directory.
    let h = c.create("h", GENERIC_WRITE, ALL_SHARE, disposition::CREATE, 0).unwrap();
    assert_eq!(c.set(h, class::DISPOSITION, &[1]), NtStatus::ACCESS_DENIED);
    std::fs::create_dir(c.dir.path().join("full")).unwrap();
    std::fs::write(c.dir.path().join("full/x"), b"").unwrap();
    let full = c.create("full", DELETE | GENERIC_READ, ALL_SHARE, disposition::OPEN, options::DIRECTORY_FILE).unwrap();
    assert_eq!(c.set(full, class::DISPOSITION, &[1]), NtStatus::DIRECTORY_NOT_EMPTY);
}

#[test]
fn query_info_classes() {
    let mut c = Client::new();
    std::fs::create_dir(c.dir.path().join("sub")).unwrap();
    let f = c.create("sub\\q.bin", GENERIC_READ | GENERIC_WRITE, 0, disposition::CREATE, 0).unwrap();
    c.write(f, 0, &[7; 1000]);
    let (st, basic) = c.query(f, info_type::FILE, class::BASIC, 40, 0);
    assert_eq!((st, basic.len()), (NtStatus::SUCCESS, 40));
    assert_eq!(c.query(f, info_type::FILE, class::BASIC, 39, 0).0, NtStatus::INFO_LENGTH_MISMATCH);
    let (_, std) = c.query(f, info_type::FILE, class::STANDARD, 100, 0);
    assert_eq!(u64_at(&std, 8), 1000);
    let (st, all) = c.query(f, info_type::FILE, class::ALL, 4096, 0);
    assert_eq!(st, NtStatus::SUCCESS);
    let name: Vec<u8> = "\\sub\\q.bin".encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
    assert_eq!(&all[100..], &name[..]);
    let (st, cut) = c.query(f, info_type::FILE, class::ALL, 104, 0);
    assert_eq!((st, cut.len()), (NtStatus::BUFFER_OVERFLOW, 104));
    // Below the fixed part as Windows counts it (rounded to 8): mismatch.
    assert_eq!(c.query(f, info_type::FILE, class::ALL, 103, 0).0, NtStatus::INFO_LENGTH_MISMATCH);
    let (_, stream) = c.query(f, info_type::FILE, class::STREAM, 4096, 0);
    assert_eq!(u64_at(&stream, 8), 1000);
    assert_eq!(c.query(f, info_type::FILE, 99, 4096, 0).0, NtStatus::INVALID_INFO_CLASS);
    // 8.3 alternate name: a valid 8.3 name comes back upper-cased.
    let (st, alt) = c.query(f, info_type::FILE, class::ALTERNATE_NAME, 4096, 0);
    assert_eq!(st, NtStatus::SUCCESS);
    let want: Vec<u8> = "Q.BIN".encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
    assert_eq!(&alt[4..], &want[..]);
    // Without FILE_READ_EA the EA list is denied; with it there are none.
    assert_eq!(c.query(f, info_type::FILE, class::FULL_EA, 4096, 0).0, NtStatus::NO_EAS_ON_FILE);
    assert_eq!(c.query(f, info_type::QUOTA, 0, 4096, 0).0, NtStatus::NOT_SUPPORTED);

    let (st, fsa) = c.query(f, info_type::FILESYSTEM, fs_class::ATTRIBUTE, 4096, 0);
    assert_eq!(st, NtStatus::SUCCESS);
    assert_eq!(&fsa[12..], &[b'N', 0, b'T', 0, b'F', 0, b'S', 0]);
    // FILE_SUPPORTS_SPARSE_FILES (MS-FSCC 2.5.1).
    assert_ne!(u32::from_le_bytes(fsa[..4].try_into().unwrap()) & 0x40, 0);
    let (st, ctl) = c.query(f, info_type::FILESYSTEM, fs_class::CONTROL, 4096, 0);
    assert_eq!((st, ctl.len()), (NtStatus::SUCCESS, 48));
    let (_, size) = c.query(f, info_type::FILESYSTEM, fs_class::FULL_SIZE, 4096, 0);
    assert_eq!(size.len(), 32);
    assert!(u64_at(&size, 0) > 0);

    // Security: too small a buffer says how much is needed.
    let (st, err) = c.query(f, info_type::SECURITY, 0, 8, 0x7);
    assert_eq!(st, NtStatus::BUFFER_TOO_SMALL);
    assert_eq!(&err[4..8], &4u32.to_le_bytes());
    let (st, sd) = c.query(f, info_type::SECURITY, 0, 4096, 0x7);
    assert_eq!(&err[8..12], &(sd.len() as u32).to_le_bytes());
    assert_eq!(st, NtStatus::SUCCESS);
    // A file created where no descriptor is kept keeps none: one is made
    // from its owner (the Unix user smbq runs as), group and mode.
    let sd = smbq_wire::security::SecurityDescriptor::decode(&sd).unwrap();
    let uid = rustix::process::geteuid().as_raw();
    assert_eq!(sd.owner.unwrap().to_string(), format!("S-1-22-1-{uid}"));
    assert!(sd.group.unwrap().to_string().starts_with("S-1-22-2-"));
    assert!(!sd.dacl.unwrap().aces.is_empty());

    // Attribute-only access cannot read the security descriptor.
    let a = c.create("sub\\q.bin", READ_ATTRIBUTES, ALL_SHARE, disposition::OPEN, 0).unwrap();
    assert_eq!(c.query(a, info_type::SECURITY, 0, 4096, 0x7).0, NtStatus::ACCESS_DENIED);
    assert_eq!(c.query(a, info_type::FILE, class::BASIC, 40, 0).0, NtStatus::SUCCESS);
    assert_eq!(c.query(a, info_type::FILE, class::FULL_EA, 4096, 0).0, NtStatus::ACCESS_DENIED);
}

#[test]
fn set_info_basic_eof_and_rename() {
    let mut c = Client::new();
    let f = c.create("r1", GENERIC_READ | GENERIC_WRITE | DELETE, share::READ | share::DELETE, disposition::CREATE, 0).unwrap();
    assert_eq!(c.set(f, class::END_OF_FILE, &100u64.to_le_bytes()), NtStatus::SUCCESS);
    assert_eq!(std::fs::metadata(c.dir.path().join("r1")).unwrap().len(), 100);
    assert_eq!(c.set(f, class::END_OF_FILE, &[1, 2]), NtStatus::INFO_LENGTH_MISMATCH);
    let t = 133_000_000_000_000_000u64;
    let mut b = Vec::new();
    BasicInfo { last_write_time: t, ..Default::default() }.encode(&mut b);
    assert_eq!(c.set(f, class::BASIC, &b), NtStatus::SUCCESS);
    let (_, basic) = c.query(f, info_type::FILE, class::BASIC, 40, 0);
    assert_eq!(u64_at(&basic, 16), t);

    std::fs::write(c.dir.path().join("r2"), b"x").unwrap();
    let mut ri = Vec::new();
    RenameInfo { replace_if_exists: false, root_directory: 0, name: "r2".into() }.encode(&mut ri);
    assert_eq!(c.set(f, class::RENAME, &ri), NtStatus::OBJECT_NAME_COLLISION);
    ri.clear();
    RenameInfo { replace_if_exists: true, root_directory: 0, name: "\\r2".into() }.encode(&mut ri);
    assert_eq!(c.set(f, class::RENAME, &ri), NtStatus::SUCCESS);
    assert!(!c.dir.path().join("r1").exists());
    assert_eq!(std::fs::metadata(c.dir.path().join("r2")).unwrap().len(), 100);
    let (_, all) = c.query(f, info_type::FILE, class::ALL, 4096, 0);
    assert_eq!(&all[100..], &[b'\\', 0, b'r', 0, b'2', 0]);
    ri.clear();
    RenameInfo { replace_if_exists: false, root_directory: 5, name: "r3".into() }.encode(&mut ri);
    assert_eq!(c.set(f, class::RENAME, &ri), NtStatus::INVALID_PARAMETER);

    // A directory with an open file below it cannot be renamed.
    let d = c.create("dir", GENERIC_READ | DELETE, ALL_SHARE, disposition::CREATE, options::DIRECTORY_FILE).unwrap();
    let child = c.create("dir\\c", GENERIC_WRITE, ALL_SHARE, disposition::CREATE, 0).unwrap();
    ri.clear();
    RenameInfo { replace_if_exists: false, root_directory: 0, name: "dir2".into() }.encode(&mut ri);
    assert_eq!(c.set(d, class::RENAME, &ri), NtStatus::ACCESS_DENIED);
    c.close(child, 0);
    assert_eq!(c.set(d, class::RENAME, &ri), NtStatus::SUCCESS);
    assert!(c.dir.path().join("dir2/c").exists());
}

#[test]
fn delete_on_close_follows_a_rename_made_by_another_connection() {
    let mut a = Client::new();
    let mut b = a.peer();
    let fa = a.create("old", GENERIC_READ | DELETE, ALL_SHARE, disposition::CREATE, 0).unwrap();
    let fb = b.create("old", GENERIC_READ | DELETE, ALL_SHARE, disposition::OPEN, 0).unwrap();
    let mut ri = Vec::new();
    RenameInfo { replace_if_exists: false, root_directory: 0, name: "new".into() }.encode(&mut ri);
    assert_eq!(b.set(fb, class::RENAME, &ri), NtStatus::SUCCESS);
    b.close(fb, 0);
    // A new file takes the old name; A's delete-on-close must remove the
    // renamed file, not the newcomer.
    std::fs::write(a.dir.path().join("old"), b"newcomer").unwrap();
    assert_eq!(a.set(fa, class::DISPOSITION, &[1]), NtStatus::SUCCESS);
    a.close(fa, 0);
    assert!(!a.dir.path().join("new").exists(), "the renamed file is deleted");
    assert_eq!(std::fs::read(a.dir.path().join("old")).unwrap(), b"newcomer");
}

#[test]
fn directory_listing() {
    let mut c = Client::new();
    for n in ["a.txt", "B.TXT", "c.dat"] {
        std::fs::write(c.dir.path().join(n), b"").unwrap();
    }
    let root = c.create("", GENERIC_READ, ALL_SHARE, disposition::OPEN, options::DIRECTORY_FILE).unwrap();
    let (st, mut names) = c.list(root, 0, "*.txt");
    assert_eq!(st, NtStatus::SUCCESS);
    names.sort();
    assert_eq!(names, ["B.TXT", "a.txt"]);
    assert_eq!(c.list(root, 0, "").0, NtStatus::NO_MORE_FILES);
    let (st, names) = c.list(root, 0x10, "*");
    assert_eq!(st, NtStatus::SUCCESS);
    assert_eq!(names.len(), 5, "., .., and three files: {names:?}");
    assert_eq!(c.list(root, 0x10, "nothing*").0, NtStatus::NO_SUCH_FILE);
    let (st, one) = c.list(root, 0x01 | 0x02, "c.*");
    assert_eq!((st, one), (NtStatus::SUCCESS, vec!["c.dat".to_string()]));
    let f = c.create("a.txt", GENERIC_READ, ALL_SHARE, disposition::OPEN, 0).unwrap();
    assert_eq!(c.list(f, 0, "*").0, NtStatus::INVALID_PARAMETER);
}

impl Client {
    /// Send a related compound (every element after the first is RELATED);
    /// return each response element.
    fn compound(&mut self, elems: &[(Command, Vec<u8>)]) -> Vec<(NtStatus, Vec<u8>)> {
        let mut m = Vec::new();
        let mut starts = Vec::new();
        for (i, (command, body)) in elems.iter().enumerate() {
            if i > 0 {
                let pad = (8 - m.len() % 8) % 8;
                m.resize(m.len() + pad, 0);
                let prev: usize = *starts.last().unwrap();
                let next = (m.len() - prev) as u32;
                m[prev + 20..prev + 24].copy_from_slice(&next.to_le_bytes());
            }
            starts.push(m.len());
            let h = Header {
                credit_charge: 1,
                command: command.0,
                credits: 64,
                flags: if i > 0 { smbq_wire::header::flags::RELATED_OPERATIONS } else { 0 },
                message_id: self.next_id,
                session_id: self.session_id,
                tree_id: self.tree_id,
                ..Default::default()
            };
            self.next_id += 1;
            h.encode(&mut m);
            m.extend_from_slice(body);
        }
        self.conn.handle_message(Instant::now(), &mut m).expect("connection stays up");
        let f = self.conn.poll_transmit().expect("a response");
        let mut rest = &f[4..];
        let mut out = Vec::new();
        loop {
            let h = Header::decode(rest).unwrap();
            let len = if h.next_command == 0 { rest.len() } else { h.next_command as usize };
            out.push((NtStatus(h.status), rest[..len].to_vec()));
            if h.next_command == 0 {
                break;
            }
            rest = &rest[len..];
        }
        out
    }
}

#[test]
fn related_compound_create_query_close() {
    let mut c = Client::new();
    std::fs::write(c.dir.path().join("cmp"), b"12345").unwrap();
    let create = CreateRequest {
        oplock_level: 0,
        impersonation_level: 2,
        desired_access: GENERIC_READ,
        file_attributes: 0,
        share_access: ALL_SHARE,
        disposition: disposition::OPEN,
        options: 0,
        name: "cmp".into(),
        contexts: vec![],
    };
    let q = QueryInfoRequest { info_type: info_type::FILE, class: class::STANDARD, output_buffer_length: 24, input: &[], additional_information: 0, flags: 0, file_id: FileId::RELATED };
    let close = CloseRequest { flags: POSTQUERY_ATTRIB, file_id: FileId::RELATED };
    let elems = vec![
        (Command::CREATE, Client::body(|m| create.encode(m, 0))),
        (Command::QUERY_INFO, Client::body(|m| q.encode(m))),
        (Command::CLOSE, Client::body(|m| close.encode(m))),
    ];
    let r = c.compound(&elems);
    assert_eq!(r.iter().map(|e| e.0).collect::<Vec<_>>(), [NtStatus::SUCCESS; 3]);
    let std = smbq_wire::query_info::decode_response(&r[1].1).unwrap();
    assert_eq!(u64_at(std, 8), 5);
    assert_eq!(CloseResponse::decode(&r[2].1).unwrap().end_of_file, 5);

    // A failed CREATE fails the related elements with its status.
    let missing = CreateRequest { name: "nope".into(), ..create };
    let elems = vec![
        (Command::CREATE, Client::body(|m| missing.encode(m, 0))),
        (Command::QUERY_INFO, Client::body(|m| q.encode(m))),
        (Command::CLOSE, Client::body(|m| close.encode(m))),
    ];
    let r = c.compound(&elems);
    assert_eq!(r.iter().map(|e| e.0).collect::<Vec<_>>(), [NtStatus::OBJECT_NAME_NOT_FOUND; 3]);
}

#[test]
fn create_contexts_and_special_names() {
    let mut c = Client::new();
    // AllocationSize reserves space for a created file.
    let alsi = (1u64 << 20).to_le_bytes();
    let (st, r) = c.create_ex("big", GENERIC_READ | GENERIC_WRITE, ALL_SHARE, disposition::CREATE, 0, vec![CreateContext { name: b"AlSi", data: &alsi }]);
    assert_eq!(st, NtStatus::SUCCESS);
    let resp = CreateResponse::decode(&r).unwrap().0;
    assert_eq!((resp.allocation_size, resp.end_of_file), (1 << 20, 0));
    // A malformed AllocationSize, or a context name under 4 bytes, is invalid.
    let (st, _) = c.create_ex("big2", GENERIC_READ, ALL_SHARE, disposition::CREATE, 0, vec![CreateContext { name: b"AlSi", data: &[1, 2] }]);
    assert_eq!(st, NtStatus::INVALID_PARAMETER);
    let (st, _) = c.create_ex("big2", GENERIC_READ, ALL_SHARE, disposition::CREATE, 0, vec![CreateContext { name: b"xyz", data: &[] }]);
    assert_eq!(st, NtStatus::INVALID_PARAMETER);
    // No snapshots: a timewarp open finds nothing.
    let (st, _) = c.create_ex("big", GENERIC_READ, ALL_SHARE, disposition::OPEN, 0, vec![CreateContext { name: b"TWrp", data: &[0; 8] }]);
    assert_eq!(st, NtStatus::OBJECT_NAME_NOT_FOUND);
    // No access at all is denied; a TEMPORARY directory is invalid.
    assert_eq!(c.create("big", 0, ALL_SHARE, disposition::OPEN, 0), Err(NtStatus::ACCESS_DENIED));
    let (st, _) = c.call(Command::CREATE, &Client::body(|m| {
        CreateRequest {
            oplock_level: 0,
            impersonation_level: 2,
            desired_access: GENERIC_READ,
            file_attributes: 0x100,
            share_access: ALL_SHARE,
            disposition: disposition::CREATE,
            options: options::DIRECTORY_FILE,
            name: "tmpdir".into(),
            contexts: vec![],
        }
        .encode(m, 0)
    }));
    assert_eq!(st, NtStatus::INVALID_PARAMETER);
    // The quota file is faked as a hidden system directory on the root.
    let (st, r) = c.create_ex("$Extend\\$Quota:$Q:$INDEX_ALLOCATION", GENERIC_READ, ALL_SHARE, disposition::OPEN, 0, vec![]);
    assert_eq!(st, NtStatus::SUCCESS);
    let resp = CreateResponse::decode(&r).unwrap().0;
    assert_eq!((resp.file_attributes, resp.creation_time, resp.last_write_time), (0x36, 0, 0));
    assert_eq!(c.set(resp.file_id, class::DISPOSITION, &[1]), NtStatus::ACCESS_DENIED);
    assert_eq!(c.close(resp.file_id, 0).0, NtStatus::SUCCESS);
}

#[test]
fn rename_needs_the_parent_shareable() {
    let mut c = Client::new();
    std::fs::create_dir(c.dir.path().join("d")).unwrap();
    std::fs::write(c.dir.path().join("d").join("f"), b"x").unwrap();
    let rename = |c: &mut Client, fid: FileId, to: &str| {
        let mut b = Vec::new();
        RenameInfo { replace_if_exists: false, root_directory: 0, name: to.into() }.encode(&mut b);
        c.set(fid, class::RENAME, &b)
    };
    let f = c.create("d\\f", DELETE | READ_ATTRIBUTES, ALL_SHARE, disposition::OPEN, 0).unwrap();
    // An open of the parent holding DELETE, or data access without sharing
    // delete, blocks renames inside it.
    let d = c.create("d", DELETE | READ_ATTRIBUTES, ALL_SHARE, disposition::OPEN, options::DIRECTORY_FILE).unwrap();
    assert_eq!(rename(&mut c, f, "d\\g"), NtStatus::SHARING_VIOLATION);
    c.close(d, 0);
    let d = c.create("d", GENERIC_READ, share::READ | share::WRITE, disposition::OPEN, options::DIRECTORY_FILE).unwrap();
    assert_eq!(rename(&mut c, f, "d\\g"), NtStatus::SHARING_VIOLATION);
    c.close(d, 0);
    // Sharing delete without holding it is fine.
    let d = c.create("d", GENERIC_READ, ALL_SHARE, disposition::OPEN, options::DIRECTORY_FILE).unwrap();
    assert_eq!(rename(&mut c, f, "d\\g"), NtStatus::SUCCESS);
    assert!(c.dir.path().join("d").join("g").exists());
    c.close(d, 0);
}

#[test]
fn enumeration_sees_deletions_made_meanwhile() {
    let mut c = Client::new();
    std::fs::create_dir(c.dir.path().join("d")).unwrap();
    for n in ["a", "b", "c", "d"] {
        std::fs::write(c.dir.path().join("d").join(n), b"").unwrap();
    }
    let d = c.create("d", GENERIC_READ, ALL_SHARE, disposition::OPEN, options::DIRECTORY_FILE).unwrap();
    // One entry at a time: ".", "..", "a".
    for want in [".", "..", "a"] {
        assert_eq!(c.list(d, 0x02, "*"), (NtStatus::SUCCESS, vec![want.to_string()]));
    }
    std::fs::remove_file(c.dir.path().join("d").join("c")).unwrap();
    std::fs::write(c.dir.path().join("d").join("bb"), b"").unwrap();
    let (st, rest) = c.list(d, 0, "*");
    assert_eq!((st, rest), (NtStatus::SUCCESS, vec!["b".to_string(), "bb".to_string(), "d".to_string()]));
    assert_eq!(c.list(d, 0, "*").0, NtStatus::NO_MORE_FILES);
}

/// Named streams have share modes of their own (a different stream of the
/// same file opens alongside), a DELETE open of the file needs its open
/// streams to share delete, a file deleted while a stream is open goes when
/// the stream closes (DELETE_PENDING meanwhile), a file with an open stream
/// keeps its name, and a stream renames within its file (smbtorture
/// smb2.streams semantics, MS-FSA 2.1.5.1.2).
#[test]
fn streams_share_modes_and_deletion() {
    let mut c = Client::new();
    let rw = GENERIC_READ | GENERIC_WRITE;
    let s1 = c.create("f:one", rw, 0, disposition::CREATE, 0).unwrap();
    assert_eq!(c.write(s1, 0, b"stream data"), NtStatus::SUCCESS);
    // Another stream, and the file itself, open despite share mode 0.
    let s2 = c.create("f:two:$DATA", rw, 0, disposition::CREATE, 0).unwrap();
    let base = c.create("f", rw, 0, disposition::OPEN, 0).unwrap();
    assert_eq!(c.create("f:ONE", rw, 0, disposition::OPEN, 0), Err(NtStatus::SHARING_VIOLATION));
    // The stream shares no delete: the file cannot be opened for DELETE.
    assert_eq!(c.create("f", DELETE, ALL_SHARE, disposition::OPEN, 0), Err(NtStatus::SHARING_VIOLATION));
    c.close(s2, 0);
    c.close(base, 0);
    // A file with an open stream keeps its name.
    let f = c.create("f", DELETE | READ_ATTRIBUTES, ALL_SHARE, disposition::OPEN, 0);
    assert_eq!(f, Err(NtStatus::SHARING_VIOLATION), "s1 still shares no delete");
    c.close(s1, 0);
    let s1 = c.create("f:one", GENERIC_READ, ALL_SHARE, disposition::OPEN, 0).unwrap();
    let f = c.create("f", DELETE, ALL_SHARE, disposition::OPEN, 0).unwrap();
    let mut ri = Vec::new();
    RenameInfo { replace_if_exists: false, root_directory: 0, name: "g".into() }.encode(&mut ri);
    assert_eq!(c.set(f, class::RENAME, &ri), NtStatus::ACCESS_DENIED);
    // Deleted while the stream is open: pending until it closes.
    assert_eq!(c.set(f, class::DISPOSITION, &[1]), NtStatus::SUCCESS);
    c.close(f, 0);
    assert!(c.dir.path().join("f").exists());
    assert_eq!(c.read(s1, 0, 100), (NtStatus::SUCCESS, b"stream data".to_vec()));
    assert_eq!(c.create("f", GENERIC_READ, ALL_SHARE, disposition::OPEN, 0), Err(NtStatus::DELETE_PENDING));
    assert_eq!(c.create("f:two", GENERIC_READ, ALL_SHARE, disposition::OPEN, 0), Err(NtStatus::DELETE_PENDING));
    c.close(s1, 0);
    assert!(!c.dir.path().join("f").exists());

    // A stream renames within its file; delete-on-close removes only it.
    let s = c.create("g:old", rw | DELETE, ALL_SHARE, disposition::CREATE, 0).unwrap();
    assert_eq!(c.write(s, 0, b"moved"), NtStatus::SUCCESS);
    ri.clear();
    RenameInfo { replace_if_exists: false, root_directory: 0, name: ":new:$DATA".into() }.encode(&mut ri);
    assert_eq!(c.set(s, class::RENAME, &ri), NtStatus::SUCCESS);
    ri.clear();
    RenameInfo { replace_if_exists: false, root_directory: 0, name: "h:x".into() }.encode(&mut ri);
    assert_eq!(c.set(s, class::RENAME, &ri), NtStatus::SHARING_VIOLATION, "a stream does not leave its file");
    let n = c.create("g:NEW", GENERIC_READ, ALL_SHARE, disposition::OPEN, 0).unwrap();
    assert_eq!(c.read(n, 0, 100), (NtStatus::SUCCESS, b"moved".to_vec()));
    assert_eq!(c.set(s, class::DISPOSITION, &[1]), NtStatus::SUCCESS);
    c.close(s, 0);
    assert_eq!(c.create("g:new", GENERIC_READ, ALL_SHARE, disposition::OPEN, 0), Err(NtStatus::DELETE_PENDING));
    c.close(n, 0);
    assert_eq!(c.create("g:new", GENERIC_READ, ALL_SHARE, disposition::OPEN, 0), Err(NtStatus::OBJECT_NAME_NOT_FOUND));
    assert!(c.dir.path().join("g").exists(), "the file stays");
}

/// SET_INFO SECURITY keeps a DACL and CREATE enforces it (MS-SMB2
/// 3.3.5.21.3, 3.3.5.9; MS-DTYP 2.5.3.2): a denied write open is
/// ACCESS_DENIED, MAXIMUM_ALLOWED and the MaximalAccess context leave the
/// write out, a new file inherits, and READ_CONTROL/WRITE_DAC are needed.
/// Needs root (security.NTACL); elsewhere SET_INFO says ACCESS_DENIED.
#[test]
fn security_descriptors_kept_and_enforced() {
    use smbq_wire::security::{ace_flags, ace_type, Ace, Acl, SecurityDescriptor, Sid};
    const READ_DATA: u32 = 0x1;
    const WRITE_DATA: u32 = 0x2;
    const READ_CONTROL: u32 = 0x0002_0000;
    const WRITE_DAC: u32 = 0x0004_0000;
    const MAXIMUM_ALLOWED: u32 = 0x0200_0000;
    let mut c = Client::new();
    let d = c.create("acl", READ_CONTROL | WRITE_DAC, ALL_SHARE, disposition::CREATE, options::DIRECTORY_FILE).unwrap();
    let f = c.create("acl\\f", GENERIC_READ | GENERIC_WRITE | READ_CONTROL | WRITE_DAC, ALL_SHARE, disposition::CREATE, 0).unwrap();
    let everyone = |t, flags, mask| Ace::new(t, flags, mask, Sid::everyone());
    let sd = |aces| SecurityDescriptor { dacl: Some(Acl::new(aces)), ..Default::default() }.to_bytes();
    let set = |c: &mut Client, fid, info, buf: &[u8]| {
        let req = SetInfoRequest { info_type: info_type::SECURITY, class: 0, buffer: buf, additional_information: info, file_id: fid };
        let b = Client::body(|m| req.encode(m));
        c.call(Command::SET_INFO, &b).0
    };
    let deny_write = sd(vec![everyone(ace_type::ACCESS_DENIED, 0, WRITE_DATA), everyone(ace_type::ACCESS_ALLOWED, 0, 0x001F_01FF)]);
    let st = set(&mut c, f, 0x4, &deny_write);
    if rustix::process::geteuid().as_raw() != 0 {
        assert_eq!(st, NtStatus::ACCESS_DENIED);
        return;
    }
    assert_eq!(st, NtStatus::SUCCESS);
    let (st, back) = c.query(f, info_type::SECURITY, 0, 4096, 0x4);
    assert_eq!(st, NtStatus::SUCCESS);
    assert_eq!(SecurityDescriptor::decode(&back).unwrap().dacl, SecurityDescriptor::decode(&deny_write).unwrap().dacl);
    assert_eq!(c.create("acl\\f", WRITE_DATA, ALL_SHARE, disposition::OPEN, 0), Err(NtStatus::ACCESS_DENIED));
    assert_eq!(c.create("acl\\f", READ_DATA, ALL_SHARE, disposition::OVERWRITE_IF, 0), Err(NtStatus::ACCESS_DENIED));
    // The same file named in another case, or through a stream, is held by the same DACL.
    assert_eq!(c.create("ACL\\F", WRITE_DATA, ALL_SHARE, disposition::OPEN, 0), Err(NtStatus::ACCESS_DENIED));
    assert_eq!(c.create("acl\\f:s", WRITE_DATA, ALL_SHARE, disposition::OPEN_IF, 0), Err(NtStatus::ACCESS_DENIED));
    // MAXIMUM_ALLOWED opens, without the write; the MaximalAccess context says so.
    let mxac = [CreateContext { name: b"MxAc", data: &[] }];
    let (st, r) = c.create_ex("acl\\f", MAXIMUM_ALLOWED, ALL_SHARE, disposition::OPEN, 0, mxac.to_vec());
    assert_eq!(st, NtStatus::SUCCESS);
    let (_, ctxs) = CreateResponse::decode(&r).unwrap();
    let m = ctxs.iter().find(|x| x.name == b"MxAc").unwrap();
    assert_eq!(u32::from_le_bytes(m.data[4..8].try_into().unwrap()) & WRITE_DATA, 0);
    // Without READ_CONTROL no query; without WRITE_DAC no set.
    let r = c.create("acl\\f", READ_DATA, ALL_SHARE, disposition::OPEN, 0).unwrap();
    assert_eq!(c.query(r, info_type::SECURITY, 0, 4096, 0x4).0, NtStatus::ACCESS_DENIED);
    assert_eq!(set(&mut c, r, 0x4, &deny_write), NtStatus::ACCESS_DENIED);
    // A new file inherits the directory's inheritable ACEs.
    // (The directory's own WRITE_DATA is FILE_ADD_FILE, not passed on.)
    let inherit = everyone(ace_type::ACCESS_ALLOWED, ace_flags::OBJECT_INHERIT, READ_DATA | READ_CONTROL);
    let add_file = everyone(ace_type::ACCESS_ALLOWED, 0, WRITE_DATA);
    assert_eq!(set(&mut c, d, 0x4, &sd(vec![inherit.clone(), add_file])), NtStatus::SUCCESS);
    let n = c.create("acl\\new", READ_CONTROL, ALL_SHARE, disposition::CREATE, 0).unwrap();
    let (_, got) = c.query(n, info_type::SECURITY, 0, 4096, 0x4);
    assert_eq!(SecurityDescriptor::decode(&got).unwrap().dacl.unwrap().aces, vec![everyone(ace_type::ACCESS_ALLOWED, 0, READ_DATA | READ_CONTROL)]);
    assert_eq!(c.create("acl\\new", WRITE_DATA, ALL_SHARE, disposition::OPEN, 0), Err(NtStatus::ACCESS_DENIED));
    // Without FILE_ADD_FILE in the directory's DACL nothing is created there.
    assert_eq!(set(&mut c, d, 0x4, &sd(vec![inherit])), NtStatus::SUCCESS);
    assert_eq!(c.create("acl\\other", READ_CONTROL, ALL_SHARE, disposition::CREATE, 0), Err(NtStatus::ACCESS_DENIED));
}

/// A WRITE body of `data` at `offset` to `fid`.
fn write_body(fid: FileId, offset: u64, data: &[u8]) -> Vec<u8> {
    Client::body(|m| WriteRequest { offset, file_id: fid, channel: 0, remaining_bytes: 0, flags: 0, data }.encode(m))
}

/// A QUERY_DIRECTORY body for `*` in `fid` with room for `len` bytes.
fn list_body(fid: FileId, len: u32) -> Vec<u8> {
    Client::body(|m| {
        QueryDirectoryRequest { class: class::ID_BOTH_DIRECTORY, flags: 0x01, file_index: 0, file_id: fid, pattern: "*".into(), output_buffer_length: len }
            .encode(m)
    })
}

//= MS-SMB2 3.2.4.1.5
//= type=test
//# Otherwise, the CreditCharge field MUST be set to 0 and the payload size
//# of a request or the maximum size of a response MUST be a maximum of
//# 65536.
/// An SMB 2.0.2 client, whether it negotiated by SMB2 or by SMB1, is told
/// 64 KiB for MaxTransactSize, MaxReadSize and MaxWriteSize, as Samba
/// tells it, and is served at that size with CreditCharge 0; more is
/// INVALID_PARAMETER, and a CreditCharge, which 2.0.2 does not have, buys
/// nothing and costs one message id all the same (2.2.1.2).
#[test]
fn smb_2_0_2_is_told_64_kib_and_served_at_it_with_credit_charge_0() {
    for hello in [Hello::Smb2(0x0202), Hello::Smb1Only202] {
        let mut c = Client::connect(hello, |_| {});
        assert_eq!((c.told.dialect, c.told.capabilities & caps::LARGE_MTU, c.told.sizes), (0x0202, 0, [65536; 3]));
        assert!(!c.told.multi_credit());
        c.logon();
        let f = c.create("f.bin", GENERIC_READ | GENERIC_WRITE, 0, disposition::OVERWRITE_IF, options::NON_DIRECTORY_FILE).unwrap();
        let data: Vec<u8> = (0..65537u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(c.call_charged(Command::WRITE, &write_body(f, 0, &data[..65536]), 0).0, NtStatus::SUCCESS);
        assert_eq!(c.call_charged(Command::WRITE, &write_body(f, 0, &data), 0).0, NtStatus::INVALID_PARAMETER);
        assert_eq!(c.call_charged(Command::WRITE, &write_body(f, 0, &data), 2).0, NtStatus::INVALID_PARAMETER);
        // Charged 3, the server counts one id: the next request, one id
        // on, is no reuse (a reuse would end the connection).
        assert_eq!(c.call_charged(Command::WRITE, &write_body(f, 65536, &data[65536..]), 3).0, NtStatus::SUCCESS);
        let (st, got) = c.read(f, 0, 65536);
        assert!(st == NtStatus::SUCCESS && got == data[..65536], "{st:?}");
        assert_eq!(c.read(f, 0, 65537).0, NtStatus::INVALID_PARAMETER);
        assert!(std::fs::read(c.dir.path().join("f.bin")).unwrap() == data);
        let root = c.create("", GENERIC_READ, ALL_SHARE, disposition::OPEN, options::DIRECTORY_FILE).unwrap();
        assert_eq!(c.call(Command::QUERY_DIRECTORY, &list_body(root, 65537)).0, NtStatus::INVALID_PARAMETER);
        assert_eq!(c.call(Command::QUERY_DIRECTORY, &list_body(root, 65536)).0, NtStatus::SUCCESS);
    }
}

//= MS-SMB2 3.3.5.2.5
//= type=test
//# If CreditCharge is zero and the payload size of the request or the
//# maximum response size is greater than 64 kilobytes, the server MUST
//# fail the request with the error code STATUS_INVALID_PARAMETER.
/// An SMB 2.1 client is told LARGE_MTU and the configured sizes, and a
/// request of more than 64 KiB must be charged a credit per 64 KiB.
#[test]
fn smb_2_1_is_told_large_mtu_and_charged_a_credit_per_64_kib() {
    let mut c = Client::connect(Hello::Smb2(0x0210), |_| {});
    assert_eq!((c.told.dialect, c.told.capabilities & caps::LARGE_MTU, c.told.sizes), (0x0210, caps::LARGE_MTU, [8 << 20; 3]));
    c.logon();
    let f = c.create("f.bin", GENERIC_READ | GENERIC_WRITE, 0, disposition::OVERWRITE_IF, options::NON_DIRECTORY_FILE).unwrap();
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(c.call_charged(Command::WRITE, &write_body(f, 0, &data[..65537]), 0).0, NtStatus::INVALID_PARAMETER);
    assert_eq!(c.call_charged(Command::WRITE, &write_body(f, 0, &data[..65537]), 1).0, NtStatus::INVALID_PARAMETER);
    assert_eq!(c.call_charged(Command::WRITE, &write_body(f, 0, &data[..65537]), 2).0, NtStatus::SUCCESS);
    assert_eq!(c.call_charged(Command::WRITE, &write_body(f, 0, &data), 48).0, NtStatus::SUCCESS);
    assert!(std::fs::read(c.dir.path().join("f.bin")).unwrap() == data);
    let read = |length| Client::body(|m| ReadRequest { flags: 0, length, offset: 0, file_id: f, minimum_count: 0, channel: 0, remaining_bytes: 0 }.encode(m));
    assert_eq!(c.call_charged(Command::READ, &read(3 << 20), 47).0, NtStatus::INVALID_PARAMETER);
    let (st, r) = c.call_charged(Command::READ, &read(3 << 20), 48);
    assert_eq!(st, NtStatus::SUCCESS);
    assert!(smbq_wire::read::decode_response(&r).unwrap() == &data[..], "the file read back");
    let root = c.create("", GENERIC_READ, ALL_SHARE, disposition::OPEN, options::DIRECTORY_FILE).unwrap();
    assert_eq!(c.call_charged(Command::QUERY_DIRECTORY, &list_body(root, 1 << 20), 1).0, NtStatus::INVALID_PARAMETER);
    assert_eq!(c.call_charged(Command::QUERY_DIRECTORY, &list_body(root, 1 << 20), 16).0, NtStatus::SUCCESS);
}

//= MS-SMB2 3.3.5.3.2
//= type=test
//# If RequireMessageSigning is TRUE, the server MUST also set
//# SMB2_NEGOTIATE_SIGNING_REQUIRED in the SecurityMode.
/// The SMB1 way to 2.0.2 tells the client what the SMB2 way does.
#[test]
fn smb1_and_smb2_negotiates_at_2_0_2_tell_the_same() {
    for required in [false, true] {
        let smb2 = Client::connect(Hello::Smb2(0x0202), |config| config.signing_required = required).told;
        let smb1 = Client::connect(Hello::Smb1Only202, |config| config.signing_required = required).told;
        assert_eq!(smb1, smb2);
        assert_eq!(smb1.security_mode, if required { 3 } else { 1 });
    }
}
