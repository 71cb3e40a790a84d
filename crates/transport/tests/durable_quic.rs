//! A durable v2 handle (MS-SMB2 3.3.5.9.10, 3.3.5.9.12) over QUIC end to
//! end: a client writes through a batch-oplocked durable open, moves to a
//! new UDP port (QUIC connection migration), loses its connection without
//! LOGOFF or CLOSE, and a new connection of the same user reclaims the open
//! with DH2C and finds every byte it wrote.

use smbq_client::{Client, ClientError, QuicTarget};
use smbq_transport::quic::QuicOptions;
use smbq_wire::create::{ctx_name, disposition, share, CreateContext, CreateRequest, CreateResponse};
use smbq_wire::header::HEADER_LEN;
use smbq_wire::oplock_break::level;
use smbq_wire::{Command, FileId, NtStatus};
use std::time::{Duration, Instant};

mod common;
use common::Running;

/// The server on its defaults, QUIC only, one share; users alice and bob.
async fn start() -> Running {
    common::start(&[("alice", "secret"), ("bob", "hunter2")], QuicOptions::default()).await
}

/// A new QUIC connection (its own endpoint, so its own UDP port), logged
/// on and connected to the share.
async fn session(s: &Running, user: &str, password: &str) -> Client {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(s.cert.clone()).unwrap();
    let mut c = Client::connect_quic(QuicTarget::new(s.addr, "localhost", roots)).await.unwrap();
    c.negotiate(true).await.unwrap();
    c.login(user, password).await.unwrap();
    c.tree_connect("\\\\localhost\\share").await.unwrap();
    c
}

/// splitmix64, seeded from the process's random hasher keys and the clock
/// (this crate has no `rand`): random test data and CreateGuids.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
        Rng(h.finish())
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v: Vec<u8> = (0..n.div_ceil(8)).flat_map(|_| self.next().to_le_bytes()).collect();
        v.truncate(n);
        v
    }
    fn guid(&mut self) -> [u8; 16] {
        self.bytes(16).try_into().unwrap()
    }
}

const NAME: &str = "durable.bin";
/// FILE_GENERIC_READ | FILE_GENERIC_WRITE.
const READ_WRITE: u32 = 0x0012_0089 | 0x0012_0116;

/// DH2Q data (MS-SMB2 2.2.13.2.11): Timeout, Flags, Reserved, CreateGuid.
fn dh2q(timeout_ms: u32, create_guid: [u8; 16]) -> Vec<u8> {
    let mut d = Vec::with_capacity(32);
    d.extend_from_slice(&timeout_ms.to_le_bytes());
    d.extend_from_slice(&[0; 12]);
    d.extend_from_slice(&create_guid);
    d
}

/// DH2C data (MS-SMB2 2.2.13.2.12): FileId, CreateGuid, Flags.
fn dh2c(fid: FileId, create_guid: [u8; 16]) -> Vec<u8> {
    let mut d = Vec::with_capacity(36);
    d.extend_from_slice(&fid.persistent.to_le_bytes());
    d.extend_from_slice(&fid.volatile.to_le_bytes());
    d.extend_from_slice(&create_guid);
    d.extend_from_slice(&0u32.to_le_bytes());
    d
}

/// A CREATE of `NAME` asking for a batch oplock with one create context;
/// the decoded response and its contexts as (name, data).
async fn create_with(c: &mut Client, disp: u32, ctx: (&[u8], &[u8])) -> Result<(CreateResponse, Vec<(Vec<u8>, Vec<u8>)>), ClientError> {
    let req = CreateRequest {
        oplock_level: level::BATCH,
        impersonation_level: 2,
        desired_access: READ_WRITE,
        file_attributes: 0,
        share_access: share::READ,
        disposition: disp,
        options: 0,
        name: NAME.to_string(),
        contexts: vec![CreateContext { name: ctx.0, data: ctx.1 }],
    };
    let mut b = vec![0u8; HEADER_LEN];
    req.encode(&mut b, 0);
    let (_, r) = c.call(Command::CREATE, 1, &b[HEADER_LEN..]).await?;
    let (resp, contexts) = CreateResponse::decode(&r).map_err(|e| ClientError::Protocol(e.to_string()))?;
    Ok((resp, contexts.iter().map(|x| (x.name.to_vec(), x.data.to_vec())).collect()))
}

async fn reconnect(c: &mut Client, fid: FileId, create_guid: [u8; 16]) -> Result<(CreateResponse, Vec<(Vec<u8>, Vec<u8>)>), ClientError> {
    create_with(c, disposition::OPEN, (ctx_name::DURABLE_RECONNECT_V2, &dh2c(fid, create_guid))).await
}

fn status(r: Result<impl Sized, ClientError>) -> NtStatus {
    match r {
        Ok(_) => NtStatus::SUCCESS,
        Err(ClientError::Status(Command::CREATE, st)) => st,
        Err(e) => panic!("CREATE failed outside SMB: {e}"),
    }
}

async fn read_all(c: &mut Client, fid: FileId, len: usize) -> Vec<u8> {
    let mut back = Vec::with_capacity(len);
    while back.len() < len {
        let piece = c.read(fid, back.len() as u64, (len - back.len()).min(256 << 10) as u32).await.unwrap();
        assert!(!piece.is_empty(), "short file at {}", back.len());
        back.extend(piece);
    }
    back
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_handle_survives_migration_and_a_lost_quic_connection() {
    let t0 = Instant::now();
    let s = start().await;
    let mut rng = Rng::new();
    let create_guid = rng.guid();

    // 1. A opens durable.bin with a batch oplock and a DH2Q context.
    let mut a = session(&s, "alice", "secret").await;
    let (resp, ctxs) = create_with(&mut a, disposition::OVERWRITE_IF, (ctx_name::DURABLE_REQUEST_V2, &dh2q(60_000, create_guid))).await.unwrap();
    assert_eq!(resp.oplock_level, level::BATCH, "batch oplock granted");
    let dh2q_resp = ctxs.iter().find(|(n, _)| n == ctx_name::DURABLE_REQUEST_V2).expect("a DH2Q response context");
    assert_eq!(dh2q_resp.1.len(), 8, "DH2Q response: Timeout, Flags");
    assert_eq!(u32::from_le_bytes(dh2q_resp.1[..4].try_into().unwrap()), 60_000, "the timeout asked for");
    assert_eq!(u32::from_le_bytes(dh2q_resp.1[4..].try_into().unwrap()), 0, "not persistent");
    let fid = resp.file_id;

    // 2. 1 MiB of random data in four WRITEs, no FLUSH.
    let mut data = rng.bytes(1 << 20);
    for (i, chunk) in data.chunks(256 << 10).enumerate() {
        assert_eq!(a.write(fid, (i * (256 << 10)) as u64, chunk).await.unwrap() as usize, chunk.len());
    }

    // 3. A's UDP socket moves to a new port; the connection follows.
    let (ep, conn) = a.quic.clone().unwrap();
    let before = ep.local_addr().unwrap();
    ep.rebind(std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).unwrap();
    let after = ep.local_addr().unwrap();
    assert_ne!(before.port(), after.port(), "a new local port");
    let more = rng.bytes(64 << 10);
    a.write(fid, data.len() as u64, &more).await.unwrap();
    assert!(a.read(fid, data.len() as u64, more.len() as u32).await.unwrap() == more, "read back after migrating");
    assert!(a.read(fid, 4096, 4096).await.unwrap() == data[4096..8192], "earlier data after migrating");
    data.extend_from_slice(&more);
    // The server validated the new path (PATH_CHALLENGE, answered).
    let st = conn.stats();
    assert!(st.frame_rx.path_challenge > 0 && st.frame_tx.path_response > 0, "path validation: {:?}", st.frame_rx);

    // While A is connected its open is not there to reclaim, whoever asks.
    let mut bob = session(&s, "bob", "hunter2").await;
    assert_eq!(status(reconnect(&mut bob, fid, create_guid).await), NtStatus::OBJECT_NAME_NOT_FOUND, "a live open");

    // 4. A's connection is gone: no CLOSE, no LOGOFF.
    conn.close(0u32.into(), b"lost");
    drop(conn);
    drop(ep);
    drop(a);

    // Wait until the server has parked the open. Another user naming it
    // gets ACCESS_DENIED once it is parked (OBJECT_NAME_NOT_FOUND before),
    // and leaves it parked.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut probes = 0;
    loop {
        probes += 1;
        match status(reconnect(&mut bob, fid, create_guid).await) {
            NtStatus::ACCESS_DENIED => break,
            NtStatus::OBJECT_NAME_NOT_FOUND if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(20)).await,
            st => panic!("another user's reconnect: {st:?}"),
        }
    }
    let parked_after = t0.elapsed();

    // 6. (before the reclaim) The same user with a wrong CreateGuid: not found.
    let mut b = session(&s, "alice", "secret").await;
    let mut wrong = create_guid;
    wrong[0] ^= 0xFF;
    assert_eq!(status(reconnect(&mut b, fid, wrong).await), NtStatus::OBJECT_NAME_NOT_FOUND, "a wrong CreateGuid");

    // 5. B reclaims the open: same FileId, batch oplock, no durable context.
    let (resp, ctxs) = reconnect(&mut b, fid, create_guid).await.expect("the durable open is reclaimed");
    assert_eq!(resp.file_id, fid, "the same FileId");
    assert_eq!(resp.oplock_level, level::BATCH, "the batch oplock comes back");
    assert!(ctxs.is_empty(), "a reconnect answers with no context: {ctxs:?}");
    assert_eq!(resp.end_of_file, data.len() as u64, "every write, unflushed, is there");
    assert!(read_all(&mut b, fid, data.len()).await == data, "1 MiB + 64 KiB read back byte-exact");
    let tail = rng.bytes(100_000);
    b.write(fid, data.len() as u64, &tail).await.unwrap();
    data.extend_from_slice(&tail);
    assert!(read_all(&mut b, fid, data.len()).await == data, "written through the reclaimed handle");
    b.close(fid).await.unwrap();
    // Closed for good: nothing left to reclaim.
    assert_eq!(status(reconnect(&mut b, fid, create_guid).await), NtStatus::OBJECT_NAME_NOT_FOUND);
    eprintln!("parked after {parked_after:?} ({probes} probes), whole test {:?}", t0.elapsed());
}
