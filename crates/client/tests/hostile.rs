//! A hostile server (issue 16): a small fake SMB2 peer, scripted per test,
//! answers NEGOTIATE and then misbehaves: truncated responses, lengths past
//! the buffer, a credit grant of 0 or 65535, responses to requests never
//! sent, bad compound chains, and over QUIC a certificate that does not
//! match. Each time the client must return an error, within a bounded
//! time, without panicking or allocating the lengths it is told.

#![allow(clippy::unwrap_used)]
#![deny(clippy::undocumented_unsafe_blocks)]

use smbq_client::connect::{connect, verifier, ConnectOptions, Session, Transport, Trust};
use smbq_client::core::MAX_CREDITS;
use smbq_client::share::Share;
use smbq_client::url::SmbUrl;
use smbq_client::{Client, ClientError, QuicTarget};
use smbq_wire::header::{flags, HEADER_LEN};
use smbq_wire::negotiate::NegotiateResponse;
use smbq_wire::{framing, Command, Dialect, FileId, Header, NtStatus, Put};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinHandle;

/// Every exchange here is on loopback: far less than this, unless the client hangs.
const LIMIT: Duration = Duration::from_secs(10);

// ---- The largest single allocation made on this thread ----------------
//
// `#[tokio::test]` runs the client and the fake server on the test's own
// thread, so a thread-local high-water mark sees what one test allocates.

struct Tracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every call is passed on to `System` unchanged; `note` only
// touches a const-initialized thread-local `Cell` (no allocation).
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: our caller's contract for `alloc` is `System`'s, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`, the caller's contract passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: `ptr` came from `System` (every allocation here does)
        // with `layout`, by the caller's contract, which is `System`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `realloc`: `ptr` and `layout` are from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

fn largest_allocation_since(f: impl FnOnce()) -> usize {
    LARGEST.with(|l| l.set(0));
    f();
    LARGEST.with(Cell::get)
}

// ---- The fake server ----------------------------------------------------

type Rd = Box<dyn AsyncRead + Unpin + Send>;
type Wr = Box<dyn AsyncWrite + Unpin + Send>;

/// The server's end of one connection.
struct Peer {
    rd: Rd,
    wr: Wr,
}

impl Peer {
    /// The messages of the next request frame (several for a compound);
    /// `None` once the client has gone.
    async fn request(&mut self) -> Option<Vec<(Header, Vec<u8>)>> {
        let mut p = [0u8; 4];
        self.rd.read_exact(&mut p).await.ok()?;
        let len = framing::frame_len(p, framing::MAX_FRAME).unwrap();
        let mut m = vec![0u8; len];
        self.rd.read_exact(&mut m).await.ok()?;
        let mut out = Vec::new();
        loop {
            let h = Header::decode(&m).unwrap();
            let next = h.next_command as usize;
            if next == 0 {
                out.push((h, m));
                return Some(out);
            }
            let rest = m.split_off(next);
            out.push((h, m));
            m = rest;
        }
    }

    /// The next request, which must be one `command` alone.
    async fn one(&mut self, command: Command) -> (Header, Vec<u8>) {
        let mut r = self.request().await.expect("a request");
        assert_eq!(r.len(), 1, "one request, not a compound");
        let (h, m) = r.remove(0);
        assert_eq!(h.command(), command);
        (h, m)
    }

    /// Bytes as they are, framing and all.
    async fn raw(&mut self, b: &[u8]) {
        let _ = self.wr.write_all(b).await;
        let _ = self.wr.flush().await;
    }

    /// One message, framed.
    async fn send(&mut self, m: &[u8]) {
        self.raw(&framed(m)).await
    }

    /// Answer NEGOTIATE properly (SMB 3.1.1, no contexts, no signing
    /// required), granting `credits`.
    async fn negotiate(&mut self, credits: u16) {
        let (h, _) = self.one(Command::NEGOTIATE).await;
        self.send(&answer(&h, credits, NtStatus::SUCCESS, &negotiate_body())).await;
    }

    /// Answer nothing more until the client goes; how many requests came.
    async fn hold(&mut self) -> usize {
        let mut n = 0;
        while self.request().await.is_some() {
            n += 1;
        }
        n
    }

    /// A well-behaved server for ECHO and READ (data of the length asked
    /// for), granting `credits` on every answer, until the client goes.
    async fn serve(&mut self, credits: u16) {
        while let Some(r) = self.request().await {
            for (h, m) in r {
                let body = match h.command() {
                    Command::ECHO => vec![4, 0, 0, 0],
                    Command::READ => {
                        let req = smbq_wire::read::ReadRequest::decode(&m).unwrap();
                        read_body(smbq_wire::read::DATA_OFFSET, req.length, &vec![7; req.length as usize])
                    }
                    c => panic!("unexpected {c:?}"),
                };
                self.send(&answer(&h, credits, NtStatus::SUCCESS, &body)).await;
            }
        }
    }
}

fn framed(m: &[u8]) -> Vec<u8> {
    [&framing::prefix(m.len())[..], m].concat()
}

/// A response to `req`: its command and message id, `credits` granted.
fn answer(req: &Header, credits: u16, status: NtStatus, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    Header {
        credit_charge: req.credit_charge,
        status: status.0,
        command: req.command,
        credits,
        flags: flags::SERVER_TO_REDIR,
        message_id: req.message_id,
        tree_id: req.tree_id,
        session_id: req.session_id,
        ..Default::default()
    }
    .encode(&mut m);
    m.extend_from_slice(body);
    m
}

fn negotiate_body() -> Vec<u8> {
    let mut m = vec![0u8; HEADER_LEN];
    NegotiateResponse {
        security_mode: 1,
        dialect: Dialect::SMB311,
        server_guid: [9; 16],
        capabilities: 0,
        max_transact: 65536,
        max_read: 65536,
        max_write: 65536,
        system_time: 0,
        start_time: 0,
        security_buffer: &[],
        contexts: Vec::new(),
    }
    .encode(&mut m, 0);
    m.split_off(HEADER_LEN)
}

/// A READ response body: DataOffset, DataLength and the bytes that follow.
fn read_body(offset: u8, len: u32, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.u16(smbq_wire::read::RESPONSE_SIZE);
    b.u8(offset);
    b.u8(0);
    b.u32(len);
    b.u32(0);
    b.u32(0);
    b.bytes(data);
    b
}

/// A client connected over TCP to a fake server running `script`.
async fn fake<S, F>(script: S) -> (Client, JoinHandle<()>)
where
    S: FnOnce(Peer) -> F + Send + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let (r, w) = s.into_split();
        script(Peer { rd: Box::new(r), wr: Box::new(w) }).await;
    });
    (Client::connect_tcp(addr).await.unwrap(), task)
}

/// The client goes; the server's script must then finish without failing.
async fn done(c: Client, task: JoinHandle<()>) {
    drop(c);
    task.await.expect("the fake server's script");
}

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f).await.expect("the client answered within the time limit (it hung)")
}

#[track_caller]
fn protocol(e: &ClientError, words: &str) {
    assert!(matches!(e, ClientError::Protocol(s) if s.contains(words)), "a protocol error about {words:?}, not {e:?}");
}

/// The error of an ECHO that the server answers with `reply(request)`
/// (raw bytes, framing included), after a proper NEGOTIATE.
async fn echo_answered_with(reply: impl FnOnce(&Header) -> Vec<u8> + Send + 'static) -> ClientError {
    let (mut c, task) = fake(move |mut p| async move {
        p.negotiate(64).await;
        let (h, _) = p.one(Command::ECHO).await;
        p.raw(&reply(&h)).await;
        p.hold().await;
    })
    .await;
    c.negotiate(false).await.unwrap();
    let e = c.echo().await.expect_err("the ECHO fails");
    done(c, task).await;
    e
}

/// The error of a READ of 16 bytes answered with `body`, by `Client::read`
/// or, when `ranged`, by the pipelined `Client::read_range`.
async fn read_answered_with(body: Vec<u8>, ranged: bool) -> ClientError {
    let (mut c, task) = fake(move |mut p| async move {
        p.negotiate(64).await;
        let (h, _) = p.one(Command::READ).await;
        p.send(&answer(&h, 1, NtStatus::SUCCESS, &body)).await;
        p.hold().await;
    })
    .await;
    c.negotiate(false).await.unwrap();
    let e = if ranged {
        c.read_range(FileId::default(), 0, 16, 16, 4, |_, _| Ok(())).await.expect_err("the READ fails")
    } else {
        c.read(FileId::default(), 0, 16).await.expect_err("the READ fails")
    };
    done(c, task).await;
    e
}

/// The error of a NEGOTIATE answered with `body`.
async fn negotiate_answered_with(body: Vec<u8>) -> ClientError {
    let (mut c, task) = fake(move |mut p| async move {
        let (h, _) = p.one(Command::NEGOTIATE).await;
        p.send(&answer(&h, 64, NtStatus::SUCCESS, &body)).await;
        p.hold().await;
    })
    .await;
    let e = c.negotiate(false).await.expect_err("the NEGOTIATE fails");
    done(c, task).await;
    e
}

// ---- A dialect never offered, a server that says nothing -------------------

#[tokio::test]
async fn dialect_never_offered() {
    let mut b = negotiate_body();
    // DialectRevision follows StructureSize and SecurityMode: SMB 2.0.2 (0x0202).
    b[4..6].copy_from_slice(&0x0202u16.to_le_bytes());
    protocol(&bounded(negotiate_answered_with(b)).await, "did not offer");
}

#[tokio::test]
async fn server_that_stops_answering() {
    let (mut c, task) = fake(|mut p| async move {
        p.negotiate(64).await;
        let _ = p.one(Command::ECHO).await;
        p.hold().await;
    })
    .await;
    c.negotiate(false).await.unwrap();
    c.response_timeout = Some(Duration::from_millis(200));
    let e = bounded(c.echo()).await.expect_err("the ECHO times out");
    assert!(matches!(&e, ClientError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut), "{e:?}");
    assert!(e.is_connection_lost(), "a transfer reconnects after it");
    done(c, task).await;
}

// ---- Truncated responses -------------------------------------------------

#[tokio::test]
async fn truncated_header() {
    bounded(async {
        // A frame whose SMB2 header is cut at 40 of its 64 bytes.
        let e = echo_answered_with(|h| framed(&answer(h, 1, NtStatus::SUCCESS, &[4, 0, 0, 0])[..40])).await;
        protocol(&e, "bad response header");
        // An empty frame.
        let e = echo_answered_with(|_| framed(&[])).await;
        protocol(&e, "bad response header");
        // Not an SMB2 header at all.
        let e = echo_answered_with(|_| framed(&[0xAB; 80])).await;
        protocol(&e, "bad response header");
    })
    .await;
}

#[tokio::test]
async fn truncated_read_response() {
    bounded(async {
        // StructureSize 17, but the body stops after 8 bytes.
        let short = read_body(smbq_wire::read::DATA_OFFSET, 0, &[])[..8].to_vec();
        for ranged in [false, true] {
            let e = read_answered_with(short.clone(), ranged).await;
            protocol(&e, "truncated");
        }
        // The body is only its StructureSize.
        let e = read_answered_with(vec![17, 0], false).await;
        protocol(&e, "truncated");
    })
    .await;
}

#[tokio::test]
async fn truncated_negotiate_response() {
    bounded(async {
        let e = negotiate_answered_with(negotiate_body()[..20].to_vec()).await;
        protocol(&e, "bad NEGOTIATE response");
        let e = negotiate_answered_with(Vec::new()).await;
        protocol(&e, "bad NEGOTIATE response");
    })
    .await;
}

// ---- Lengths past the buffer ---------------------------------------------

#[tokio::test]
async fn read_data_past_the_end() {
    bounded(async {
        let at = smbq_wire::read::DATA_OFFSET;
        let cases = [
            // DataLength 1000, 16 bytes there.
            read_body(at, 1000, &[1; 16]),
            // DataLength 4 GiB - 1.
            read_body(at, u32::MAX, &[1; 16]),
            // DataOffset past the end of the message.
            read_body(0xF0, 16, &[1; 16]),
            // DataOffset inside the header, DataLength running past the end.
            read_body(8, 200, &[1; 16]),
        ];
        for body in cases {
            for ranged in [false, true] {
                let e = read_answered_with(body.clone(), ranged).await;
                protocol(&e, "outside the message");
            }
        }
        // The data is there, but less than asked for: a short READ in a range is an error.
        let e = read_answered_with(read_body(at, 8, &[1; 8]), true).await;
        protocol(&e, "returned 8 of 16 bytes");
    })
    .await;
}

/// A frame announcing 16 MiB (the most the 24-bit length can say), of
/// which 100 bytes come before the server closes: the client reports the
/// end of the stream and never allocates the 16 MiB it was told of.
#[tokio::test]
async fn frame_longer_than_what_comes() {
    let mut largest = 0;
    let e = bounded(async {
        let (mut c, task) = fake(|mut p| async move {
            p.negotiate(64).await;
            p.one(Command::ECHO).await;
            p.raw(&[0, 0xFF, 0xFF, 0xFF]).await;
            p.raw(&[0xFE; 100]).await;
            // Dropping the peer closes the connection.
        })
        .await;
        c.negotiate(false).await.unwrap();
        LARGEST.with(|l| l.set(0));
        let e = c.echo().await.expect_err("the ECHO fails");
        largest = LARGEST.with(Cell::get);
        done(c, task).await;
        e
    })
    .await;
    assert!(matches!(&e, ClientError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof), "end of stream, not {e:?}");
    assert!(largest < 1 << 20, "the client allocated {largest} bytes at once for a frame that never came");
}

#[tokio::test]
async fn frame_prefix_not_a_session_message() {
    bounded(async {
        // 0x85 is a NetBIOS keep-alive, not Direct TCP (MS-SMB2 2.1).
        let e = echo_answered_with(|_| vec![0x85, 0, 0, 0]).await;
        protocol(&e, "BadType");
    })
    .await;
}

#[tokio::test]
async fn negotiate_contexts_past_the_end() {
    bounded(async {
        // Body offsets: 6 NegotiateContextCount, 60 NegotiateContextOffset
        // (from the start of the header).
        let set = |b: &mut Vec<u8>, count: u16, offset: u32| {
            b[6..8].copy_from_slice(&count.to_le_bytes());
            b[60..64].copy_from_slice(&offset.to_le_bytes());
        };
        // Two contexts announced, at an offset past the message.
        let mut b = negotiate_body();
        set(&mut b, 2, 0xFFFF);
        let e = negotiate_answered_with(b).await;
        protocol(&e, "bad NEGOTIATE response");
        // A context whose DataLength runs past the message.
        let mut b = negotiate_body();
        b.resize(b.len().next_multiple_of(8), 0);
        let off = (HEADER_LEN + b.len()) as u32;
        set(&mut b, 1, off);
        b.u16(smbq_wire::negotiate::ctx::ENCRYPTION);
        b.u16(0xFFFF);
        b.u32(0);
        b.bytes(&[1, 0, 2, 0]);
        let e = negotiate_answered_with(b.clone()).await;
        protocol(&e, "bad NEGOTIATE response");
        // 65535 contexts announced, one there.
        set(&mut b, u16::MAX, off);
        let e = negotiate_answered_with(b).await;
        protocol(&e, "bad NEGOTIATE response");
    })
    .await;
}

/// QUERY_DIRECTORY answers decoded by `Share::list_open`.
#[tokio::test]
async fn directory_listing_past_the_end() {
    bounded(async {
        // OutputBufferOffset/Length (body offsets 2 and 4) past the message.
        let past = {
            let mut b = Vec::new();
            b.u16(smbq_wire::query_directory::RESPONSE_SIZE);
            b.u16((HEADER_LEN + 8) as u16);
            b.u32(5000);
            b.bytes(&[0; 64]);
            b
        };
        let e = list_answered_with(past, false).await;
        protocol(&e, "QUERY_DIRECTORY response");
        // One entry whose FileNameLength runs past the buffer.
        let mut entry = vec![0u8; 104];
        entry[60..64].copy_from_slice(&5000u32.to_le_bytes());
        let e = list_answered_with(query_directory_body(&entry), false).await;
        protocol(&e, "bad directory entry");
        // One entry whose NextEntryOffset points past the buffer.
        let mut entry = vec![0u8; 104];
        entry[0..4].copy_from_slice(&4096u32.to_le_bytes());
        let e = list_answered_with(query_directory_body(&entry), false).await;
        protocol(&e, "bad directory entry");
    })
    .await;
}

/// The same with FILE_POSIX_INFORMATION entries (a POSIX share): SIDs,
/// names and offsets that run past the buffer fail as bad entries.
#[tokio::test]
async fn posix_directory_listing_past_the_end() {
    bounded(async {
        // Shorter than the fixed part of one entry.
        let e = list_answered_with(query_directory_body(&[0u8; 60]), true).await;
        protocol(&e, "bad POSIX directory entry");
        // A SID announcing 15 sub-authorities it does not have.
        let mut entry = vec![0u8; 8 + 68 + 12];
        entry.extend_from_slice(&[1, 15, 0, 0, 0, 0, 0, 22, 1, 0, 0, 0]);
        let e = list_answered_with(query_directory_body(&entry), true).await;
        protocol(&e, "bad POSIX directory entry");
        // A whole entry whose NextEntryOffset points past the buffer.
        let mut entry = vec![0u8; 8 + 68 + 12];
        for _ in 0..2 {
            entry.extend_from_slice(&[1, 1, 0, 0, 0, 0, 0, 22, 0, 0, 0, 0]);
        }
        entry.extend_from_slice(&[0; 4]);
        entry[0..4].copy_from_slice(&4096u32.to_le_bytes());
        let e = list_answered_with(query_directory_body(&entry), true).await;
        protocol(&e, "bad POSIX directory entry");
    })
    .await;
}

/// An IOCTL answer whose output lies past the message.
#[tokio::test]
async fn fsctl_output_past_the_end() {
    bounded(async {
        let mut body = Vec::new();
        body.u16(smbq_wire::ioctl::RESPONSE_SIZE);
        body.bytes(&[0; 22]);
        body.u32(0);
        body.u32(0);
        body.u32((HEADER_LEN + 48) as u32);
        body.u32(5000);
        body.bytes(&[0; 9]);
        let (mut c, task) = fake(move |mut p| async move {
            p.negotiate(64).await;
            let (h, _) = p.one(Command::IOCTL).await;
            p.send(&answer(&h, 1, NtStatus::SUCCESS, &body)).await;
            p.hold().await;
        })
        .await;
        c.negotiate(false).await.unwrap();
        let e = c.fsctl(FileId::default(), smbq_wire::ioctl::fsctl::GET_REPARSE_POINT, &[], 16384).await.expect_err("the FSCTL fails");
        done(c, task).await;
        protocol(&e, "IOCTL response");
    })
    .await;
}

fn query_directory_body(buf: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.u16(smbq_wire::query_directory::RESPONSE_SIZE);
    b.u16((HEADER_LEN + 8) as u16);
    b.u32(buf.len() as u32);
    b.bytes(buf);
    b
}

fn share(client: Client) -> Share {
    let session = Session { client, transport: Transport::Tcp, addr: SocketAddr::from(([127, 0, 0, 1], 445)) };
    Share { session, url: SmbUrl::parse("smb://127.0.0.1/share").unwrap(), options: ConnectOptions::default(), chunk: 65536, depth: 4, posix: false }
}

/// The error of `list_open` answered with `body`, on a POSIX share if `posix`.
async fn list_answered_with(body: Vec<u8>, posix: bool) -> ClientError {
    let (mut c, task) = fake(move |mut p| async move {
        p.negotiate(64).await;
        let (h, _) = p.one(Command::QUERY_DIRECTORY).await;
        p.send(&answer(&h, 1, NtStatus::SUCCESS, &body)).await;
        p.hold().await;
    })
    .await;
    c.negotiate(false).await.unwrap();
    let mut s = share(c);
    s.posix = posix;
    let e = s.list_open(FileId::default(), "*").await.expect_err("the listing fails");
    done(s.session.client, task).await;
    e
}

// ---- Credits -------------------------------------------------------------

/// NEGOTIATE grants no credit: nothing more may be sent, and with nothing
/// in flight no credit can ever come, so each request fails at once
/// (rather than going out unpaid or waiting for ever).
#[tokio::test]
async fn credit_grant_of_zero() {
    bounded(async {
        let (mut c, task) = fake(|mut p| async move {
            p.negotiate(0).await;
            assert_eq!(p.hold().await, 0, "the client sent a request with no credit");
        })
        .await;
        c.negotiate(false).await.unwrap();
        assert_eq!(c.core.credits, 0);
        protocol(&c.echo().await.expect_err("ECHO"), "credits");
        protocol(&c.read(FileId::default(), 0, 16).await.expect_err("READ"), "credits");
        protocol(&c.write(FileId::default(), 0, b"abc").await.expect_err("WRITE"), "credits");
        protocol(&c.read_range(FileId::default(), 0, 64, 16, 4, |_, _| Ok(())).await.expect_err("ranged READ"), "credits");
        let data = bytes::Bytes::from_static(b"0123456789abcdef");
        protocol(&c.write_pipelined(FileId::default(), &data, 4, 4).await.expect_err("pipelined WRITE"), "credits");
        protocol(&c.login("alice", "secret").await.expect_err("SESSION_SETUP"), "credits");
        done(c, task).await;
    })
    .await;
}

/// NEGOTIATE grants 2 credits and each READ answer grants none: the
/// pipelined read sends two READs and then fails, not waits.
#[tokio::test]
async fn credit_grant_of_zero_while_pipelining() {
    bounded(async {
        let (mut c, task) = fake(|mut p| async move {
            p.negotiate(2).await;
            let mut asked = Vec::new();
            for _ in 0..2 {
                let (h, _) = p.one(Command::READ).await;
                asked.push(h.clone());
            }
            for h in asked {
                p.send(&answer(&h, 0, NtStatus::SUCCESS, &read_body(smbq_wire::read::DATA_OFFSET, 16, &[5; 16]))).await;
            }
            assert_eq!(p.hold().await, 0, "no READ past the credits granted");
        })
        .await;
        c.negotiate(false).await.unwrap();
        let mut got = 0;
        let e = c
            .read_range(FileId::default(), 0, 6 * 16, 16, 4, |_, piece| {
                got += piece.len();
                Ok(())
            })
            .await
            .expect_err("the read runs out of credits");
        protocol(&e, "credits");
        assert_eq!(got, 32);
        done(c, task).await;
    })
    .await;
}

/// 65535 credits on every answer: the client keeps at most MAX_CREDITS
/// and works as usual.
#[tokio::test]
async fn credit_grant_of_65535() {
    bounded(async {
        let (mut c, task) = fake(|mut p| async move {
            p.negotiate(u16::MAX).await;
            p.serve(u16::MAX).await;
        })
        .await;
        c.negotiate(false).await.unwrap();
        assert_eq!(c.core.credits, MAX_CREDITS);
        for _ in 0..5 {
            c.echo().await.unwrap();
            assert_eq!(c.core.credits, MAX_CREDITS);
        }
        let mut got = Vec::new();
        c.read_range(FileId::default(), 0, 64 * 100, 100, 64, |_, piece| {
            got.extend_from_slice(piece);
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(got, vec![7; 6400]);
        assert_eq!(c.core.credits, MAX_CREDITS);
        assert_eq!(c.core.in_flight(), 0);
        done(c, task).await;
    })
    .await;
}

// ---- Responses to requests never sent ------------------------------------

#[tokio::test]
async fn response_to_a_request_never_sent() {
    bounded(async {
        // The ECHO answered under another message id.
        let e = echo_answered_with(|h| framed(&answer(&Header { message_id: 999, ..h.clone() }, 1, NtStatus::SUCCESS, &[4, 0, 0, 0]))).await;
        protocol(&e, "never sent");
        // An unsolicited READ answer first (not an oplock break), then the real one.
        let e = echo_answered_with(|h| {
            let read = Header { command: Command::READ.0, message_id: 7, ..h.clone() };
            [framed(&answer(&read, 1, NtStatus::SUCCESS, &read_body(smbq_wire::read::DATA_OFFSET, 0, &[0]))), framed(&answer(h, 1, NtStatus::SUCCESS, &[4, 0, 0, 0]))].concat()
        })
        .await;
        protocol(&e, "never sent");
        // An answer without SMB2_FLAGS_SERVER_TO_REDIR: a request.
        let e = echo_answered_with(|h| {
            let mut m = answer(h, 1, NtStatus::SUCCESS, &[4, 0, 0, 0]);
            m[16] &= !(flags::SERVER_TO_REDIR as u8);
            framed(&m)
        })
        .await;
        protocol(&e, "a request where a response was expected");
        // The answer to a different command under the right id.
        let e = echo_answered_with(|h| framed(&answer(&Header { command: Command::READ.0, ..h.clone() }, 1, NtStatus::SUCCESS, &[4, 0, 0, 0]))).await;
        protocol(&e, "response to READ for ECHO");
    })
    .await;
}

/// An ECHO answered twice: the second copy answers nothing outstanding.
#[tokio::test]
async fn response_repeated() {
    bounded(async {
        let (mut c, task) = fake(|mut p| async move {
            p.negotiate(64).await;
            let (h, _) = p.one(Command::ECHO).await;
            let a = answer(&h, 1, NtStatus::SUCCESS, &[4, 0, 0, 0]);
            p.raw(&[framed(&a), framed(&a)].concat()).await;
            p.hold().await;
        })
        .await;
        c.negotiate(false).await.unwrap();
        c.echo().await.unwrap();
        protocol(&c.echo().await.expect_err("the repeated answer"), "already answered");
        done(c, task).await;
    })
    .await;
}

/// The control: an oplock break (message id all ones) may come unasked.
#[tokio::test]
async fn oplock_break_unasked_is_skipped() {
    bounded(async {
        let echo = echo_answered_with(|h| {
            let brk = Header { command: Command::OPLOCK_BREAK.0, message_id: u64::MAX, ..h.clone() };
            [framed(&answer(&brk, 0, NtStatus::SUCCESS, &[0; 24])), framed(&answer(h, 1, NtStatus::ACCESS_DENIED, &[9, 0, 0, 0, 0, 0, 0, 0, 0]))].concat()
        })
        .await;
        // The ECHO's own answer (an error status here) came through.
        assert!(matches!(echo, ClientError::Status(Command::ECHO, NtStatus::ACCESS_DENIED)), "{echo:?}");
    })
    .await;
}

// ---- Compound responses ----------------------------------------------------

#[tokio::test]
async fn compound_next_command_out_of_bounds() {
    bounded(async {
        for next in [1000u32, 68, 8, 0xFFFF_FFF8] {
            let e = echo_answered_with(move |h| {
                let mut m = answer(h, 1, NtStatus::SUCCESS, &[4, 0, 0, 0]);
                m.resize(96, 0);
                m[20..24].copy_from_slice(&next.to_le_bytes());
                framed(&m)
            })
            .await;
            protocol(&e, "compound response");
        }
        // NextCommand inside the frame, but what it points at is no header.
        let e = echo_answered_with(|h| {
            let mut m = answer(h, 1, NtStatus::SUCCESS, &[4, 0, 0, 0]);
            m.resize(72 + 40, 0xEE);
            m[20..24].copy_from_slice(&72u32.to_le_bytes());
            framed(&m)
        })
        .await;
        protocol(&e, "bad compound response");
    })
    .await;
}

/// `Share::stat` sends CREATE + QUERY_INFO + CLOSE as a compound; the
/// answer's first NextCommand points past the frame and the server then
/// keeps the connection open: the client fails, not waits for the rest.
#[tokio::test]
async fn stat_with_a_bad_compound_answer() {
    bounded(async {
        let (c, task) = fake(|mut p| async move {
            p.negotiate(64).await;
            let parts = p.request().await.unwrap();
            assert_eq!(parts.iter().map(|(h, _)| h.command()).collect::<Vec<_>>(), [Command::CREATE, Command::QUERY_INFO, Command::CLOSE]);
            let mut m = answer(&parts[0].0, 3, NtStatus::SUCCESS, &[0; 96]);
            m[20..24].copy_from_slice(&1000u32.to_le_bytes());
            p.send(&m).await;
            p.hold().await;
        })
        .await;
        let mut s = share(c);
        s.client().negotiate(false).await.unwrap();
        let e = s.stat("a.txt").await.expect_err("the stat fails");
        protocol(&e, "compound response");
        done(s.session.client, task).await;
    })
    .await;
}

// ---- Certificates (QUIC) -------------------------------------------------

/// A CA and a leaf certificate it signed for "localhost" (only).
struct Pki {
    ca_pem: String,
    leaf: rustls::pki_types::CertificateDer<'static>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
    fingerprint: [u8; 32],
}

fn pki(name: &str) -> Pki {
    let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, format!("{name} CA"));
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut leaf_params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    leaf_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    let fingerprint = smbq_crypto::tls::parse_fingerprint(&smbq_crypto::tls::fingerprint(leaf.der())).unwrap();
    Pki {
        ca_pem: ca.pem(),
        leaf: leaf.der().clone(),
        key: rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap(),
        fingerprint,
    }
}

fn ca_file_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("hostile-{}-{name}.pem", std::process::id()))
}

fn ca_file(pki: &Pki, name: &str) -> std::path::PathBuf {
    let p = ca_file_path(name);
    std::fs::write(&p, &pki.ca_pem).unwrap();
    p
}

#[derive(Clone, Copy)]
enum Misbehave {
    /// Answer NEGOTIATE, then refuse the logon (ACCESS_DENIED).
    RefuseLogon,
    /// Answer NEGOTIATE with a frame announcing 16 MiB, send 100 bytes, end the stream.
    ShortFrame,
}

/// A QUIC endpoint on loopback (ALPN "smb") presenting `pki`'s leaf, and
/// behind it on each connection's first stream a fake SMB server.
fn quic_fake(pki: &Pki, what: Misbehave) -> (quinn::Endpoint, JoinHandle<()>) {
    let provider = Arc::new(smbq_crypto::tls_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![pki.leaf.clone()], pki.key.clone_key())
        .unwrap();
    tls.alpn_protocols = vec![b"smb".to_vec()];
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).unwrap();
    let ep = quinn::Endpoint::server(quinn::ServerConfig::with_crypto(Arc::new(crypto)), SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let server = ep.clone();
    let task = tokio::spawn(async move {
        while let Some(incoming) = server.accept().await {
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake here.
                let Ok(conn) = incoming.await else { return };
                let Ok((send, recv)) = conn.accept_bi().await else { return };
                let mut p = Peer { rd: Box::new(recv), wr: Box::new(send) };
                match what {
                    Misbehave::RefuseLogon => {
                        p.negotiate(64).await;
                        if let Some(r) = p.request().await {
                            p.send(&answer(&r[0].0, 1, NtStatus::ACCESS_DENIED, &[9, 0, 0, 0, 0, 0, 0, 0, 0])).await;
                        }
                    }
                    Misbehave::ShortFrame => {
                        p.one(Command::NEGOTIATE).await;
                        p.raw(&[0, 0xFF, 0xFF, 0xFF]).await;
                        p.raw(&[0xFE; 100]).await;
                        let _ = p.wr.shutdown().await;
                    }
                }
                p.hold().await;
                conn.closed().await;
            });
        }
    });
    (ep, task)
}

fn options(transport: Transport, trust: Trust) -> ConnectOptions {
    ConnectOptions { transport, trust, user: "alice".into(), password: "secret".into(), quic_timeout: Duration::from_secs(3), timeout: Duration::from_secs(5), ..ConnectOptions::default() }
}

#[tokio::test]
async fn certificate_that_does_not_match() {
    bounded(async {
        let server = pki("server");
        let stranger = pki("stranger");
        let (ep, task) = quic_fake(&server, Misbehave::RefuseLogon);
        let port = ep.local_addr().unwrap().port();
        let attempt = |transport, trust| async move { connect("127.0.0.1", Some(port), &options(transport, trust), None).await.map(|_| ()) };
        let refused = |r: Result<(), ClientError>, what: &str| match r {
            Err(ClientError::Certificate(_)) => {}
            other => panic!("{what}: a certificate error, not {other:?}"),
        };
        // Pinned to another certificate's fingerprint.
        refused(attempt(Transport::Quic, Trust::Fingerprint(stranger.fingerprint)).await, "another fingerprint");
        // With auto, a refused certificate is not a reason to try TCP.
        refused(attempt(Transport::Auto, Trust::Fingerprint(stranger.fingerprint)).await, "auto, another fingerprint");
        // Another CA.
        refused(attempt(Transport::Quic, Trust::CaFile(ca_file(&stranger, "stranger"))).await, "another CA");
        // The right CA, but the leaf names "localhost", not 127.0.0.1.
        let right_ca = ca_file(&server, "server");
        refused(attempt(Transport::Quic, Trust::CaFile(right_ca.clone())).await, "another name");
        // The system's roots know neither CA.
        refused(attempt(Transport::Quic, Trust::System).await, "system roots");
        // The right fingerprint gets past the handshake to the logon the server refuses.
        match attempt(Transport::Quic, Trust::Fingerprint(server.fingerprint)).await {
            Err(ClientError::Status(Command::SESSION_SETUP, NtStatus::ACCESS_DENIED)) => {}
            other => panic!("the pinned certificate: the logon refused, not {other:?}"),
        }
        // So does the right CA under the certificate's name.
        let mut target = QuicTarget::new(ep.local_addr().unwrap(), "localhost", rustls::RootCertStore::empty());
        target.verifier = Some(verifier(&Trust::CaFile(right_ca)).unwrap());
        let mut c = Client::connect_quic(target).await.expect("the right CA and name");
        c.negotiate(true).await.unwrap();
        drop(c);
        task.abort();
        for name in ["server", "stranger"] {
            let _ = std::fs::remove_file(ca_file_path(name));
        }
    })
    .await;
}

/// Over QUIC too, a frame announcing more than comes is an error, not a wait.
#[tokio::test]
async fn quic_frame_longer_than_what_comes() {
    bounded(async {
        let server = pki("server");
        let (ep, task) = quic_fake(&server, Misbehave::ShortFrame);
        let mut target = QuicTarget::new(ep.local_addr().unwrap(), "localhost", rustls::RootCertStore::empty());
        target.verifier = Some(verifier(&Trust::Fingerprint(server.fingerprint)).unwrap());
        let mut c = Client::connect_quic(target).await.unwrap();
        let e = c.negotiate(true).await.expect_err("the NEGOTIATE fails");
        assert!(matches!(&e, ClientError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof), "end of stream, not {e:?}");
        drop(c);
        task.abort();
    })
    .await;
}

#[test]
fn allocation_tracking_sees_large_allocations() {
    let n = largest_allocation_since(|| drop(std::hint::black_box(vec![0u8; 3 << 20])));
    assert!(n >= 3 << 20);
}
