//! SMB over QUIC end to end on loopback: our QUIC listener and engine,
//! driven by `smbq-client` over quinn. (The independent client, smb-rs, is
//! exercised in tests/e2e/test_smbrs.py.)

use smbq_auth::UserDb;
use smbq_client::{Client, ClientError, QuicTarget};
use smbq_server::{EncryptPolicy, Server, ServerConfig, ShareConfig};
use smbq_transport::quic::{self, QuicOptions};
use smbq_transport::tls::{self, ClientAccess};
use smbq_wire::create::disposition;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

struct Running {
    addr: SocketAddr,
    tcp: SocketAddr,
    /// The server's QUIC endpoints on the port (to count connections).
    eps: Vec<quinn::Endpoint>,
    cert: rustls::pki_types::CertificateDer<'static>,
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

async fn start(share_encrypt: EncryptPolicy, access: ClientAccess, opts: QuicOptions) -> Running {
    start_with(share_encrypt, access, opts, false).await
}

async fn start_with(share_encrypt: EncryptPolicy, access: ClientAccess, opts: QuicOptions, signing_required: bool) -> Running {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("share")).unwrap();
    let mut users = UserDb::new();
    users.add("alice", "secret");
    let mut config = ServerConfig::default();
    config.signing_required = signing_required;
    config.shares.push(ShareConfig { encrypt: share_encrypt, ..ShareConfig::new("share", dir.path().join("share")) });
    let server = Arc::new(Server::new(config, users).unwrap());
    let (id, _) = tls::load_or_generate(dir.path(), None, &[]).unwrap();
    let cert = id.chain[0].clone();
    let tls_cfg = tls::server_config(tls::Certificates::new(&id).unwrap(), &access).unwrap();
    let eps = quic::endpoints("127.0.0.1:0".parse().unwrap(), tls_cfg, &opts).unwrap();
    assert_eq!(eps.len(), opts.endpoints);
    let addr = eps[0].local_addr().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tcp = listener.local_addr().unwrap();
    let (stop, rx) = oneshot::channel::<()>();
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _ = rx.await;
        let _ = stopping.send(true);
    });
    let until_stopped = |mut w: tokio::sync::watch::Receiver<bool>| async move {
        let _ = w.wait_for(|s| *s).await;
    };
    for ep in &eps {
        tokio::spawn(quic::serve(ep.clone(), server.clone(), opts.clone(), until_stopped(stopped.clone())));
    }
    tokio::spawn(smbq_transport::tcp::serve(listener, server, until_stopped(stopped)));
    Running { addr, tcp, eps, cert, stop: Some(stop), _dir: dir }
}

impl Running {
    fn open_connections(&self) -> usize {
        self.eps.iter().map(|e| e.open_connections()).sum()
    }
}

fn roots(cert: &rustls::pki_types::CertificateDer<'static>) -> rustls::RootCertStore {
    let mut r = rustls::RootCertStore::empty();
    r.add(cert.clone()).unwrap();
    r
}

async fn quic_client(s: &Running) -> Result<Client, ClientError> {
    Client::connect_quic(QuicTarget::new(s.addr, "localhost", roots(&s.cert))).await
}

async fn session(c: &mut Client, transport_caps: bool) {
    c.negotiate(transport_caps).await.unwrap();
    c.login("alice", "secret").await.unwrap();
    c.tree_connect("\\\\localhost\\share").await.unwrap();
}

/// Write (1 MiB requests, 4 in flight: sealed, signed, or with the data
/// passed on uncopied, as the connection has it) and read back `size`
/// bytes byte-exact.
async fn round_trip(c: &mut Client, name: &str, size: usize) {
    let data: Vec<u8> = (0..size).map(|i| (i * 7 + i / 4096) as u8).collect();
    let (fid, _) = c.create(name, disposition::OVERWRITE_IF, 0).await.unwrap();
    c.write_pipelined(fid, &bytes::Bytes::from(data.clone()), 1 << 20, 4).await.unwrap();
    // Pieces come with their offsets (answers in any order, over QUIC in
    // the chunks quinn received them in); together they cover the file.
    let mut back = vec![0u8; size];
    let mut got = 0;
    c.read_pipelined(fid, size as u64, 1 << 20, 4, |off, piece| {
        back[off as usize..off as usize + piece.len()].copy_from_slice(piece);
        got += piece.len();
    })
    .await
    .unwrap();
    assert_eq!(got, size, "bytes read");
    assert!(back == data, "read back differs");
    // And one READ, whole.
    assert!(c.read(fid, 12_345, 300_000).await.unwrap() == data[12_345..312_345], "READ differs");
    c.close(fid).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_capabilities_turn_off_smb_encryption_on_quic_only() {
    let s = start(EncryptPolicy::Required, ClientAccess::default(), QuicOptions::default()).await;
    // QUIC + SMB2_TRANSPORT_CAPABILITIES: no TRANSFORM header either way,
    // although the share requires encryption.
    let mut c = quic_client(&s).await.unwrap();
    session(&mut c, true).await;
    assert!(c.core.transport_security, "server answered the context");
    round_trip(&mut c, "q.bin", 3 << 20).await;
    assert_eq!((c.core.transforms_sent, c.core.transforms_received), (0, 0));
    // Nor SMB signing: QUIC's AEAD already protects every byte, and this
    // server does not require signing.
    assert_eq!(c.core.signed_sent, 0);

    // QUIC without the context: SMB encryption as usual.
    let mut c = quic_client(&s).await.unwrap();
    session(&mut c, false).await;
    assert!(!c.core.transport_security);
    round_trip(&mut c, "q2.bin", 1 << 20).await;
    assert!(c.core.transforms_received > 3 && c.core.transforms_sent > 3);

    // TCP never accepts the context: the share stays encrypted.
    let mut c = Client::connect_tcp(s.tcp).await.unwrap();
    session(&mut c, true).await;
    assert!(!c.core.transport_security, "never on TCP");
    round_trip(&mut c, "t.bin", 1 << 20).await;
    assert!(c.core.transforms_received > 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_signing_gets_signed_requests_over_quic() {
    let s = start_with(EncryptPolicy::Desired, ClientAccess::default(), QuicOptions::default(), true).await;
    let mut c = quic_client(&s).await.unwrap();
    session(&mut c, true).await;
    assert!(c.core.transport_security);
    let before = c.core.signed_sent;
    round_trip(&mut c, "s.bin", 1 << 20).await;
    assert_eq!(c.core.transforms_sent, 0);
    assert!(c.core.signed_sent > before + 3, "every request after the session is signed ({} signed)", c.core.signed_sent);
}

fn client_identity(cn: &str) -> (Vec<rustls::pki_types::CertificateDer<'static>>, rustls::pki_types::PrivateKeyDer<'static>, [u8; 32]) {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p = rcgen::CertificateParams::new(vec![cn.to_string()]).unwrap();
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let c = p.self_signed(&kp).unwrap();
    let der = c.der().clone();
    let fp = tls::parse_fingerprint(&tls::fingerprint(&der)).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(kp.serialize_der()).unwrap();
    (vec![der], key, fp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_allowed_by_fingerprint() {
    let (good_chain, good_key, good_fp) = client_identity("good-client");
    let (bad_chain, bad_key, _) = client_identity("bad-client");
    let access = ClientAccess { require_cert: true, fingerprints: vec![good_fp], ca: None };
    let s = start(EncryptPolicy::Desired, access, QuicOptions::default()).await;
    let connect = |chain, key| {
        Client::connect_quic(QuicTarget { client_cert: Some((chain, key)), ..QuicTarget::new(s.addr, "localhost", roots(&s.cert)) })
    };
    let mut c = connect(good_chain, good_key).await.expect("allowed certificate connects");
    session(&mut c, true).await;
    c.echo().await.unwrap();
    // Outside the allow list: refused in the handshake (TLS 1.3 reports the
    // client's failure when the server closes; either step may fail).
    let refused = match connect(bad_chain, bad_key).await {
        Err(_) => true,
        Ok(mut c) => c.negotiate(true).await.is_err(),
    };
    assert!(refused, "a certificate outside the allow list is refused");
    let refused = match quic_client(&s).await {
        Err(_) => true,
        Ok(mut c) => c.negotiate(true).await.is_err(),
    };
    assert!(refused, "no certificate is refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_allowed_by_ca() {
    // A local CA; a leaf it signed is allowed, a self-signed one is not.
    let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "smbq test clients CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut leaf_params = rcgen::CertificateParams::new(vec!["client.example".to_string()]).unwrap();
    leaf_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let access = ClientAccess { require_cert: true, fingerprints: Vec::new(), ca: Some(ca_path) };
    let s = start(EncryptPolicy::Desired, access, QuicOptions::default()).await;
    let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap();
    let target = QuicTarget { client_cert: Some((vec![leaf.der().clone()], key)), ..QuicTarget::new(s.addr, "localhost", roots(&s.cert)) };
    let mut c = Client::connect_quic(target).await.expect("a leaf of the allowed CA connects");
    session(&mut c, true).await;
    c.echo().await.unwrap();
    let (chain, key, _) = client_identity("stranger");
    let target = QuicTarget { client_cert: Some((chain, key)), ..QuicTarget::new(s.addr, "localhost", roots(&s.cert)) };
    let refused = match Client::connect_quic(target).await {
        Err(_) => true,
        Ok(mut c) => c.negotiate(true).await.is_err(),
    };
    assert!(refused, "a certificate from no allowed CA is refused");
}

/// With four endpoints on the port, a client that takes a new port six
/// times during a transfer still reaches the endpoint that has its
/// connection: datagrams are steered by connection ID, not by address
/// (by address, each new port would find it with a chance of 1 in 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_rebinding_mid_transfer_finishes_byte_exact() {
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), QuicOptions { endpoints: 4, ..QuicOptions::default() }).await;
    let mut c = quic_client(&s).await.unwrap();
    session(&mut c, true).await;
    let size = 32 << 20;
    let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let (fid, _) = c.create("migrate.bin", disposition::OVERWRITE_IF, 0).await.unwrap();
    let before = c.quic.as_ref().unwrap().0.local_addr().unwrap();
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        if i % 4 == 3 && i < 27 {
            // New local port mid-transfer (NAT rebinding / client roaming).
            let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            c.quic.as_ref().unwrap().0.rebind(sock).unwrap();
        }
        c.write(fid, (i << 20) as u64, chunk).await.unwrap();
    }
    let after = c.quic.as_ref().unwrap().0.local_addr().unwrap();
    assert_ne!(before.port(), after.port());
    let mut back = Vec::new();
    while back.len() < size {
        back.extend(c.read(fid, back.len() as u64, 1 << 20).await.unwrap());
    }
    assert!(back == data);
    c.close(fid).await.unwrap();
}

/// Connections spread over the endpoints of one port (SO_REUSEPORT),
/// and each is served whole by the endpoint that accepted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_spread_over_the_endpoints_of_one_port() {
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), QuicOptions { endpoints: 2, ..QuicOptions::default() }).await;
    let mut clients = Vec::new();
    for i in 0..12 {
        let mut c = quic_client(&s).await.unwrap();
        session(&mut c, true).await;
        round_trip(&mut c, &format!("spread{i}.bin"), 1 << 20).await;
        clients.push(c);
    }
    let per: Vec<usize> = s.eps.iter().map(|e| e.open_connections()).collect();
    assert_eq!(per.iter().sum::<usize>(), 12, "{per:?}");
    // Each endpoint gets a connection with probability 1 - 2^-11.
    assert!(per.iter().all(|&n| n > 0), "connections per endpoint: {per:?}");
}

/// With no UDP GSO (as on kernels before 4.18) the server sends its
/// batches with sendmmsg(2): a 1452-byte-datagram transfer is byte-exact
/// and several datagrams go out per system call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_gso_batches_go_out_with_sendmmsg() {
    let opts = QuicOptions { no_gso: true, max_udp_payload: 1452, ..QuicOptions::default() };
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), opts.clone()).await;
    let target = QuicTarget { max_udp_payload: 1452, ..QuicTarget::new(s.addr, "localhost", roots(&s.cert)) };
    let mut c = Client::connect_quic(target).await.unwrap();
    session(&mut c, true).await;
    round_trip(&mut c, "mmsg.bin", 8 << 20).await;
    let u = opts.udp.get();
    assert!(u.tx_datagrams > 5_000, "{u:?}");
    assert!(u.tx_datagrams > 4 * u.tx_calls, "datagrams per send call: {u:?}");
}

/// On loopback (MTU 65,536) MTU discovery takes both directions to
/// datagrams of ~64 KiB, and quinn's GSO batches of them reach the peer
/// (smbq_quic splits them into sends the kernel takes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_transfers_use_64k_datagrams() {
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), QuicOptions::default()).await;
    let mut c = quic_client(&s).await.unwrap();
    session(&mut c, true).await;
    round_trip(&mut c, "big-datagrams.bin", 48 << 20).await;
    let st = c.quic.as_ref().unwrap().1.stats();
    assert!(st.path.current_mtu > 60_000, "path MTU {}", st.path.current_mtu);
    let (tx, rx) = (st.udp_tx.bytes / st.udp_tx.datagrams.max(1), st.udp_rx.bytes / st.udp_rx.datagrams.max(1));
    assert!(tx > 30_000 && rx > 30_000, "mean datagram sizes: sent {tx}, received {rx}");
}

/// A QUIC connection with its SMB stream open, but no SMB client on it.
async fn raw_stream(s: &Running) -> (quinn::Endpoint, quinn::Connection, quinn::SendStream, quinn::RecvStream) {
    let ep = smbq_client::quic_endpoint(&QuicTarget::new(s.addr, "localhost", roots(&s.cert))).unwrap();
    let conn = ep.connect(s.addr, "localhost").unwrap().await.unwrap();
    let (send, recv) = conn.open_bi().await.unwrap();
    (ep, conn, send, recv)
}

async fn still_serves(s: &Running) {
    let mut c = quic_client(s).await.expect("server still accepts connections");
    session(&mut c, true).await;
    c.echo().await.unwrap();
}

/// Whether the server closes `conn` within `secs`. The bounds are far
/// above the ~0.5 s these take alone: the whole suite shares two cores, and
/// a 5 s bound once ran out there.
async fn closed_within(conn: &quinn::Connection, secs: u64) -> bool {
    tokio::time::timeout(Duration::from_secs(secs), conn.closed()).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_framing_closes_that_connection_only() {
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), QuicOptions::default()).await;
    // Not a Direct TCP session message.
    let (_ep, conn, mut send, _recv) = raw_stream(&s).await;
    send.write_all(&[0x85, 0, 0, 0, 1, 2, 3]).await.unwrap();
    assert!(closed_within(&conn, 20).await, "bad framing closes the connection");
    // A length prefix above the maximum.
    let (_ep, conn, mut send, _recv) = raw_stream(&s).await;
    send.write_all(&[0, 0xFF, 0xFF, 0xFF]).await.unwrap();
    assert!(closed_within(&conn, 20).await, "oversized frame closes the connection");
    // Garbage inside a well-framed message.
    let (_ep, conn, mut send, _recv) = raw_stream(&s).await;
    send.write_all(&[0, 0, 0, 8, b'G', b'A', b'R', b'B', b'A', b'G', b'E', b'!']).await.unwrap();
    assert!(closed_within(&conn, 20).await, "a non-SMB message closes the connection");
    still_serves(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_streams_are_not_granted() {
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), QuicOptions::default()).await;
    let (_ep, conn, _send, _recv) = raw_stream(&s).await;
    // The server allows one bidirectional stream and no unidirectional ones:
    // further opens get no credit (a peer that ignores the limit is closed by quinn).
    assert!(tokio::time::timeout(Duration::from_millis(500), conn.open_bi()).await.is_err());
    assert!(tokio::time::timeout(Duration::from_millis(500), conn.open_uni()).await.is_err());
    still_serves(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_clients_are_dropped() {
    let opts = QuicOptions { handshake_timeout: Duration::from_secs(1), ..QuicOptions::default() };
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), opts).await;
    // A handshake that never finishes: a lone datagram that is not QUIC, and
    // a UDP socket that goes quiet; neither holds the server up.
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    u.send_to(&[0xC0; 1200], s.addr).unwrap();
    // A finished handshake that never opens its stream is closed.
    let ep = smbq_client::quic_endpoint(&QuicTarget::new(s.addr, "localhost", roots(&s.cert))).unwrap();
    let conn = ep.connect(s.addr, "localhost").unwrap().await.unwrap();
    assert!(closed_within(&conn, 5).await, "no stream in time: closed");
    still_serves(&s).await;
}

/// A client that sends its first handshake flight and then goes quiet (a
/// real client Initial, caught on a socket of ours and replayed from one
/// that never answers): the server drops the half-open connection after
/// its handshake timeout and keeps serving others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_that_stops_halfway_is_dropped() {
    let opts = QuicOptions { handshake_timeout: Duration::from_secs(1), ..QuicOptions::default() };
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), opts).await;
    let trap = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let trap_addr = trap.local_addr().unwrap();
    let client = smbq_client::quic_endpoint(&QuicTarget::new(trap_addr, "localhost", roots(&s.cert))).unwrap();
    let never = tokio::spawn(client.connect(trap_addr, "localhost").unwrap());
    let mut buf = vec![0u8; 65536];
    let n = tokio::time::timeout(Duration::from_secs(5), trap.recv(&mut buf)).await.expect("the client's Initial").unwrap();
    let ghost = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ghost.send_to(&buf[..n], s.addr).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), ghost.recv(&mut buf)).await.expect("the server answers the Initial").unwrap();
    assert_eq!(s.open_connections(), 1, "the handshake is under way");
    let mut open = s.open_connections();
    for _ in 0..200 {
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        open = s.open_connections();
    }
    assert_eq!(open, 0, "the half-open connection is gone");
    still_serves(&s).await;
    never.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_dropped() {
    let opts = QuicOptions { send_timeout: Duration::from_secs(1), stream_window: 256 << 10, connection_window: 512 << 10, ..QuicOptions::default() };
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), opts).await;
    let target = QuicTarget { receive_window: 1 << 20, ..QuicTarget::new(s.addr, "localhost", roots(&s.cert)) };
    let mut c = Client::connect_quic(target).await.unwrap();
    session(&mut c, true).await;
    let (fid, _) = c.create("big.bin", disposition::OVERWRITE_IF, 0).await.unwrap();
    c.write(fid, 0, &vec![1u8; 4 << 20]).await.unwrap();
    // Ask for 4 MiB many times and never read the answers.
    for _ in 0..8 {
        let req = smbq_wire::read::ReadRequest { length: 4 << 20, offset: 0, file_id: fid, ..Default::default() };
        let mut b = Vec::new();
        req.encode(&mut b);
        let (_, m) = c.core.request(smbq_wire::Command::READ, 64, &b);
        c.send(m).await.unwrap();
    }
    let conn = c.quic.as_ref().unwrap().1.clone();
    assert!(closed_within(&conn, 10).await, "the server gives up on a peer that takes no data");
    still_serves(&s).await;
}

/// A client offering smbq's multi-stream extension (`docs/multistream.md`)
/// with `offer` streams, logged on and connected to the share.
async fn multi_stream_session(s: &Running, offer: u16) -> Client {
    let mut c = quic_client(s).await.unwrap();
    c.core.offer_streams = offer;
    session(&mut c, true).await;
    c
}

/// A READ of `len` bytes at 0 of `fid`, sent on `stream`: its message id.
async fn read_on(c: &mut Client, stream: u16, fid: smbq_wire::FileId, len: u32) -> u64 {
    let req = smbq_wire::read::ReadRequest { length: len, offset: 0, file_id: fid, ..Default::default() };
    let mut b = Vec::new();
    req.encode(&mut b);
    let (id, m) = c.core.request(smbq_wire::Command::READ, smbq_client::charge(len as usize), &b);
    c.send_on(stream, m).await.unwrap();
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_streams_are_agreed_and_each_answer_comes_on_its_request_stream() {
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), QuicOptions::default()).await;
    let mut c = multi_stream_session(&s, 4).await;
    assert_eq!((c.core.streams, c.streams()), (4, 4), "agreed and opened");
    // Pipelined transfers striped over the streams, byte-exact.
    round_trip(&mut c, "striped.bin", 9 << 20).await;
    // Several READs of 8 MiB on stream 1, then an ECHO on each other stream:
    // every answer comes back on the stream of its request.
    let (fid, _) = c.create("big.bin", disposition::OVERWRITE_IF, 0).await.unwrap();
    let data: Vec<u8> = (0..8 << 20).map(|i: usize| (i / 1000) as u8).collect();
    c.write_pipelined(fid, &bytes::Bytes::from(data.clone()), 1 << 20, 4).await.unwrap();
    let mut sent = std::collections::HashMap::new();
    for _ in 0..4 {
        sent.insert(read_on(&mut c, 1, fid, 8 << 20).await, (1u16, smbq_wire::Command::READ));
    }
    for stream in [0u16, 2, 3] {
        let (id, m) = c.core.request(smbq_wire::Command::ECHO, 1, &[4, 0, 0, 0]);
        c.send_on(stream, m).await.unwrap();
        sent.insert(id, (stream, smbq_wire::Command::ECHO));
    }
    let mut order = Vec::new();
    while !sent.is_empty() {
        let r = c.recv().await.unwrap();
        let h = smbq_wire::Header::decode(&r).unwrap();
        let (stream, command) = sent.remove(&h.message_id).expect("an answer to a request in flight");
        assert_eq!(h.command, command.0);
        assert_eq!(c.last_stream(), stream, "the answer to {command:?} comes on its request's stream");
        if command == smbq_wire::Command::READ {
            assert!(smbq_wire::read::decode_response(&r).unwrap() == &data[..], "READ data");
        }
        order.push(command);
    }
    assert_eq!(order.len(), 7);
    c.close(fid).await.unwrap();
}

/// A LOCK on `fid` of bytes 0..10, exclusive (or unlocking), as a body.
fn lock_body(fid: smbq_wire::FileId, flags: u32) -> Vec<u8> {
    let mut b = Vec::new();
    let locks = vec![smbq_wire::lock::LockElement { offset: 0, length: 10, flags }];
    smbq_wire::lock::LockRequest { lock_sequence: 0, file_id: fid, locks }.encode(&mut b);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_on_several_streams_complete_out_of_order() {
    const EXCLUSIVE: u32 = 2;
    const UNLOCK: u32 = 4;
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), QuicOptions::default()).await;
    let mut c = multi_stream_session(&s, 4).await;
    let (a, _) = c.create("locked.bin", disposition::OVERWRITE_IF, 0).await.unwrap();
    let (b, _) = c.create("locked.bin", disposition::OPEN, 0).await.unwrap();
    c.write(a, 0, b"0123456789abcdef").await.unwrap();
    c.call(smbq_wire::Command::LOCK, 1, &lock_body(a, EXCLUSIVE)).await.unwrap();
    // B's LOCK of the same bytes waits on stream 1 (its interim answer
    // goes on the control stream), while requests on streams 2 and 3 are
    // answered; A's unlock then lets it finish, on stream 1.
    let (waiting, m) = c.core.request(smbq_wire::Command::LOCK, 1, &lock_body(b, EXCLUSIVE));
    c.send_on(1, m).await.unwrap();
    let mut done = Vec::new();
    for stream in [2u16, 3] {
        let (id, m) = c.core.request(smbq_wire::Command::ECHO, 1, &[4, 0, 0, 0]);
        c.send_on(stream, m).await.unwrap();
        let r = c.recv().await.unwrap();
        let h = smbq_wire::Header::decode(&r).unwrap();
        assert_eq!((h.message_id, c.last_stream()), (id, stream), "the ECHO on stream {stream} is answered while the LOCK waits");
        done.push(id);
    }
    let (id, m) = c.core.request(smbq_wire::Command::LOCK, 1, &lock_body(a, UNLOCK));
    c.send_on(2, m).await.unwrap();
    let mut answers = Vec::new();
    for _ in 0..2 {
        let r = c.recv().await.unwrap();
        let h = smbq_wire::Header::decode(&r).unwrap();
        assert_eq!(smbq_wire::NtStatus(h.status), smbq_wire::NtStatus::SUCCESS);
        answers.push((h.message_id, c.last_stream()));
    }
    answers.sort();
    assert_eq!(answers, [(waiting, 1), (id, 2)], "the waiting LOCK finishes on its own stream, after requests sent later");
    assert!(waiting < done[0], "completed out of order");
    c.close(a).await.unwrap();
    c.close(b).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_the_extension_off_or_a_client_not_offering_it_uses_one_stream() {
    let off = start(EncryptPolicy::Desired, ClientAccess::default(), QuicOptions { max_streams: 1, ..QuicOptions::default() }).await;
    let mut c = multi_stream_session(&off, 4).await;
    assert_eq!((c.core.streams, c.streams()), (1, 1), "not answered: one stream");
    round_trip(&mut c, "one.bin", 3 << 20).await;
    let conn = c.quic.as_ref().unwrap().1.clone();
    assert!(tokio::time::timeout(Duration::from_millis(500), conn.open_bi()).await.is_err(), "no second stream granted");
    // A client that does not offer it, against a server that has it.
    let on = start(EncryptPolicy::Desired, ClientAccess::default(), QuicOptions::default()).await;
    let mut c = multi_stream_session(&on, 1).await;
    assert_eq!((c.core.streams, c.streams()), (1, 1));
    round_trip(&mut c, "one.bin", 3 << 20).await;
    let conn = c.quic.as_ref().unwrap().1.clone();
    assert!(tokio::time::timeout(Duration::from_millis(500), conn.open_bi()).await.is_err(), "no second stream granted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_caps_the_streams_and_grants_no_more_than_agreed() {
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), QuicOptions { max_streams: 3, ..QuicOptions::default() }).await;
    let mut c = multi_stream_session(&s, 8).await;
    assert_eq!((c.core.streams, c.streams()), (3, 3), "the smaller of offer and limit");
    let conn = c.quic.as_ref().unwrap().1.clone();
    assert!(tokio::time::timeout(Duration::from_millis(500), conn.open_bi()).await.is_err(), "a fourth stream gets no credit");
    c.echo().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reset_in_the_middle_of_reads_loses_none_of_the_other_requests() {
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), QuicOptions::default()).await;
    let mut c = multi_stream_session(&s, 4).await;
    let (fid, _) = c.create("reset.bin", disposition::OVERWRITE_IF, 0).await.unwrap();
    let data: Vec<u8> = (0..4 << 20).map(|i: usize| (i % 251) as u8).collect();
    c.write_pipelined(fid, &bytes::Bytes::from(data.clone()), 1 << 20, 4).await.unwrap();
    // 8 READs of 4 MiB on stream 2, 8 on stream 1.
    let mut on2 = std::collections::HashSet::new();
    let mut others = std::collections::HashSet::new();
    for _ in 0..8 {
        on2.insert(read_on(&mut c, 2, fid, 4 << 20).await);
        others.insert(read_on(&mut c, 1, fid, 4 << 20).await);
    }
    let check = |r: &[u8]| assert!(smbq_wire::read::decode_response(r).unwrap() == &data[..], "READ data");
    // Once the first answer comes on stream 2, give that stream up.
    let mut reset = false;
    let mut rerouted = 0;
    while !others.is_empty() || !reset {
        let r = tokio::time::timeout(Duration::from_secs(30), c.recv()).await.expect("the other stream's answers keep coming").unwrap();
        let id = smbq_wire::Header::decode(&r).unwrap().message_id;
        check(&r);
        if others.remove(&id) {
            assert_eq!(c.last_stream(), 1);
            continue;
        }
        assert!(on2.remove(&id), "an answer to a READ in flight");
        match c.last_stream() {
            // Read off stream 2 before it was given up.
            2 if !reset => {
                c.reset_stream(2);
                reset = true;
            }
            2 => {}
            stream => {
                assert_eq!(stream, 0, "after the reset, stream 2's answers come on the control stream");
                assert!(reset);
                rerouted += 1;
            }
        }
    }
    // Answers the server had not yet handed to stream 2 come on the
    // control stream; those quinn had taken for it are lost with it.
    while let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(2), c.recv()).await {
        let id = smbq_wire::Header::decode(&r).unwrap().message_id;
        assert!(on2.remove(&id), "only stream 2's READs are left");
        check(&r);
        // Some may have been read off stream 2 before the reset.
        if c.last_stream() == 0 {
            rerouted += 1;
        }
    }
    eprintln!("stream 2: {rerouted} answers rerouted to the control stream, {} lost with the stream", on2.len());
    // The connection goes on, on the streams that are left.
    assert_eq!(c.read(fid, 1000, 5000).await.unwrap(), &data[1000..6000]);
    c.echo().await.unwrap();
    assert_eq!(s.open_connections(), 1, "still the one connection");
    c.close(fid).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_files_at_a_time_one_stream_each_or_all_on_one() {
    use smbq_client::many::FileJob;
    let s = start(EncryptPolicy::Desired, ClientAccess::default(), QuicOptions::default()).await;
    let sizes = [0usize, 1, 4096, 700_000, 1 << 20, (1 << 20) + 1, 1_720_000, 3 << 20, 5, 65536];
    for offer in [1u16, 8] {
        let mut c = multi_stream_session(&s, offer).await;
        let files: Vec<(String, Vec<u8>)> = sizes.iter().enumerate().map(|(i, &n)| (format!("f{offer}-{i}.jpg"), (0..n).map(|j| (j * 31 + i) as u8).collect())).collect();
        let puts: Vec<FileJob> = files.iter().map(|(name, d)| FileJob::Put { name: name.clone(), data: bytes::Bytes::from(d.clone()) }).collect();
        c.transfer_files(&puts, 4, 1 << 20).await.unwrap();
        let gets: Vec<FileJob> = files.iter().map(|(name, d)| FileJob::Get { name: name.clone(), size: d.len() as u64 }).collect();
        let back = c.transfer_files(&gets, 4, 1 << 20).await.unwrap();
        for ((name, d), b) in files.iter().zip(&back) {
            assert!(d == b, "{name} ({} bytes) read back differs with {offer} streams", d.len());
        }
        assert_eq!(c.core.in_flight(), 0, "nothing left in flight");
    }
}
