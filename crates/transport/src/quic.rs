//! SMB over QUIC (MS-SMB2 2.1): QUIC v1 with TLS 1.3 and ALPN "smb"; the
//! client opens one bidirectional stream and SMB2 messages travel on it with
//! the Direct TCP framing. The engine sees the stream like a TCP connection,
//! plus `TransportInfo::secure` (the transport encrypts and authenticates).
//!
//! `connection` is the one place that maps QUIC streams to the engine: one
//! bidirectional stream per connection; the peer may not open more (the
//! stream limits say so and quinn closes a connection that ignores them)
//! unless NEGOTIATE agreed smbq's multi-stream extension
//! (`docs/multistream.md`), when it may open up to the number agreed
//! (see `streams`).
//!
//! Clients that ask get TLS session tickets and may send their NEGOTIATE
//! as 0-RTT data on their next connection ([`zero_rtt`], docs/zero-rtt.md).
//!
//! Each connection's path and congestion figures feed the `smbq_quic_*`
//! metrics ([`path_metrics`]), and with [`QuicOptions::qlog`] each
//! connection writes a qlog trace ([`smbq_quictrace::qlog`]).

pub mod path_metrics;
pub(crate) mod streams;
pub mod zero_rtt;

use crate::connection::{serve_framed, Hooks, Source, SEND_TIMEOUT};
use crate::writer::FrameWriter;
use streams::QuicStreams;
use quinn::{Endpoint, EndpointConfig, TransportConfig, VarInt};
pub use smbq_quic::{reuseport::MAX_ENDPOINTS, Congestion};
use smbq_server::{Connection, Server, TransportInfo, TransportKind};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{info, warn};

/// QUIC settings (defaults from measurements on 2-core machines: see the
/// thesis in shared/seeds and the issue; quinn's defaults cap one
/// connection well below what encrypted TCP reaches).
#[derive(Clone, Debug)]
pub struct QuicOptions {
    pub idle_timeout: Duration,
    /// PING interval that keeps an idle connection (and NAT bindings) alive.
    pub keep_alive: Option<Duration>,
    /// Per-stream receive window (bytes): 1 GiB/s at 50 ms RTT needs ~50 MB.
    pub stream_window: u64,
    /// Connection receive window and send window (bytes).
    pub connection_window: u64,
    /// Connection receive window until the client has logged on: what an
    /// unauthenticated peer can make the server buffer.
    pub preauth_window: u64,
    /// UDP socket send and receive buffer (bytes).
    pub udp_buffer: usize,
    /// Time a client has to finish the handshake and open its stream.
    pub handshake_timeout: Duration,
    /// A client that accepts no data for this long is dropped.
    pub send_timeout: Duration,
    /// Upper bound for path MTU discovery (UDP payload bytes). Above 1452
    /// only pays where the path allows it (jumbo frames, loopback); probes
    /// elsewhere simply fail and the usual ~1452 stays. See [`smbq_quic`].
    pub max_udp_payload: u16,
    /// What the endpoint's UDP socket does (calls, datagrams, bytes).
    pub udp: Arc<smbq_quic::Counters>,
    pub congestion: Congestion,
    /// QUIC endpoints on the port, each with its own UDP socket in one
    /// SO_REUSEPORT group, steered by connection ID
    /// ([`smbq_quic::reuseport`]): connections spread over that many
    /// endpoint drivers, and so over cores.
    pub endpoints: usize,
    /// Send as if the kernel had no UDP GSO: batches go out with
    /// sendmmsg(2) (tests and `smbq-bench --no-gso`).
    pub no_gso: bool,
    /// The most streams one connection may use under smbq's multi-stream
    /// extension (`docs/multistream.md`); 1 turns the extension off.
    pub max_streams: u16,
    /// Write a qlog trace of each connection into a directory
    /// (`smbq serve --qlog-dir`, `SMBQ_QLOG_DIR`).
    pub qlog: Option<Qlog>,
}

/// Where [`QuicOptions::qlog`] writes its traces. A trace needs a
/// transport configuration of the connection's own (quinn-proto writes
/// into the qlog stream the configuration holds), so such a connection is
/// accepted with a copy of the endpoints' server configuration, which
/// [`endpoints`] leaves here for [`serve`].
#[derive(Clone, Debug)]
pub struct Qlog {
    pub dir: PathBuf,
    server_config: Arc<Mutex<Option<quinn::ServerConfig>>>,
}

impl Qlog {
    pub fn new(dir: PathBuf) -> Qlog {
        Qlog { dir, server_config: Arc::default() }
    }

    /// The server configuration for one traced connection from `peer`
    /// and its trace; none (a warning logged) if the file cannot be made.
    fn connection(&self, opts: &QuicOptions, peer: SocketAddr) -> Option<(Arc<quinn::ServerConfig>, smbq_quictrace::qlog::Trace)> {
        let mut sc = self.server_config.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        let (trace, stream) = smbq_quictrace::qlog::Trace::create(&self.dir, smbq_quictrace::qlog::Role::Server, peer)
            .map_err(|e| warn!(dir = %self.dir.display(), error = %e, "cannot write a qlog trace"))
            .ok()?;
        let mut t = transport_config(opts);
        t.qlog_stream(Some(stream));
        sc.transport = Arc::new(t);
        Some((Arc::new(sc), trace))
    }
}

/// Streams per connection under the multi-stream extension, by default,
/// and at most (each may hold a stream window of unread bytes).
pub const DEFAULT_MAX_STREAMS: u16 = 16;
pub const MAX_STREAMS: u16 = 256;

impl Default for QuicOptions {
    fn default() -> Self {
        QuicOptions {
            idle_timeout: Duration::from_secs(120),
            keep_alive: Some(Duration::from_secs(15)),
            stream_window: 64 << 20,
            connection_window: 128 << 20,
            preauth_window: 256 << 10,
            udp_buffer: smbq_quic::DEFAULT_BUFFER,
            handshake_timeout: Duration::from_secs(10),
            send_timeout: SEND_TIMEOUT,
            max_udp_payload: smbq_quic::MAX_DATAGRAM,
            udp: Arc::default(),
            congestion: Congestion::default(),
            endpoints: std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
            no_gso: false,
            max_streams: DEFAULT_MAX_STREAMS,
            qlog: None,
        }
    }
}

pub fn transport_config(opts: &QuicOptions) -> TransportConfig {
    let mut t = TransportConfig::default();
    t.max_concurrent_bidi_streams(VarInt::from_u32(1));
    t.max_concurrent_uni_streams(VarInt::from_u32(0));
    t.stream_receive_window(VarInt::from_u64(opts.stream_window).unwrap_or(VarInt::MAX));
    // Raised to connection_window at logon (see `connection`).
    t.receive_window(VarInt::from_u64(opts.preauth_window.min(opts.connection_window)).unwrap_or(VarInt::MAX));
    t.send_window(opts.connection_window);
    t.max_idle_timeout(quinn::IdleTimeout::try_from(opts.idle_timeout).ok());
    t.keep_alive_interval(opts.keep_alive);
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(opts.max_udp_payload);
    t.mtu_discovery_config(Some(mtu));
    t.congestion_controller_factory(opts.congestion.factory());
    t.ack_frequency_config(Some(smbq_quic::ack_frequency()));
    t
}

/// `opts.endpoints` QUIC endpoints serving SMB on `addr`, one port (that
/// of the first when `addr`'s is 0); serve each with [`serve`].
pub fn endpoints(addr: SocketAddr, tls: rustls::ServerConfig, opts: &QuicOptions) -> std::io::Result<Vec<Endpoint>> {
    let crypto = zero_rtt::TicketsOnRequest::new(tls)?;
    let mut sc = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    sc.transport_config(Arc::new(transport_config(opts)));
    sc.migration(true);
    let n = opts.endpoints.max(1);
    let sockets = smbq_quic::reuseport::sockets(addr, opts.udp_buffer, n)?;
    if let Some(q) = &opts.qlog {
        *q.server_config.lock().unwrap_or_else(|p| p.into_inner()) = Some(sc.clone());
    }
    let runtime = Arc::new(smbq_quic::Runtime { counters: opts.udp.clone(), no_gso: opts.no_gso });
    sockets
        .into_iter()
        .enumerate()
        .map(|(i, socket)| {
            let mut ec = endpoint_config(opts);
            ec.cid_generator(move || Box::new(smbq_quic::reuseport::SteeringCids::new(i, n)));
            Endpoint::new(ec, Some(sc.clone()), socket, runtime.clone())
        })
        .collect()
}

/// One QUIC endpoint serving SMB on `addr` ([`endpoints`] with one).
pub fn endpoint(addr: SocketAddr, tls: rustls::ServerConfig, opts: &QuicOptions) -> std::io::Result<Endpoint> {
    let mut v = endpoints(addr, tls, &QuicOptions { endpoints: 1, ..opts.clone() })?;
    v.pop().ok_or_else(|| std::io::Error::other("no endpoint"))
}

/// Accept datagrams as large as MTU discovery may reach (quinn's default
/// advertises 1480 bytes, which caps the path MTU whatever the link allows).
pub fn endpoint_config(opts: &QuicOptions) -> EndpointConfig {
    let mut c = EndpointConfig::default();
    let _ = c.max_udp_payload_size(opts.max_udp_payload.max(1200));
    c
}

/// Accept connections until `shutdown` resolves, then close the endpoint.
pub async fn serve(
    endpoint: Endpoint,
    server: Arc<Server>,
    opts: QuicOptions,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let port = endpoint.local_addr().map_or(0, |a| a.port());
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => {
                    if Connection::at_limit(&server) {
                        warn!(peer = %incoming.remote_address(), "connection limit reached; refusing");
                        incoming.refuse();
                        continue;
                    }
                    tokio::spawn(connection(incoming, port, server.clone(), opts.clone()));
                }
                None => break,
            }
        }
    }
    endpoint.close(VarInt::from_u32(0), b"server shutting down");
    info!("quic listener closed");
}

/// One connection from its first packet to its end; `port`: the endpoint's.
async fn connection(incoming: quinn::Incoming, port: u16, server: Arc<Server>, opts: QuicOptions) {
    let peer = incoming.remote_address();
    let local = incoming.local_ip().map(|ip| SocketAddr::new(ip, 0));
    // Dropped with this task: a trace's end is written however it ends.
    let (config, mut trace) = opts.qlog.as_ref().and_then(|q| q.connection(&opts, peer)).unzip();
    let Some((conn, handshake)) = handshake(incoming, config, peer, opts.handshake_timeout).await else { return };
    if let Some(t) = &mut trace {
        let alpn = conn.handshake_data().and_then(|d| d.downcast::<zero_rtt::Handshake>().ok()).and_then(|h| h.protocol);
        t.started(&conn, local.map(|l| SocketAddr::new(l.ip(), port)), alpn.as_deref());
    }
    let (send, recv) = match tokio::time::timeout(opts.handshake_timeout, conn.accept_bi()).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            info!(%peer, error = %e, "QUIC connection ended before opening its SMB stream");
            return;
        }
        Err(_) => {
            info!(%peer, "QUIC client opened no stream in time; closing");
            conn.close(VarInt::from_u32(1), b"no stream");
            return;
        }
    };
    let info = TransportInfo { kind: TransportKind::Quic, peer: Some(peer), local, secure: true, streams: opts.max_streams.max(1) };
    let window = VarInt::from_u64(opts.connection_window).unwrap_or(VarInt::MAX);
    let opened = conn.clone();
    let hooks = Hooks { on_logon: Some(Box::new(move || opened.set_receive_window(window))), on_streams: None };
    if server.metrics.is_some() {
        tokio::spawn(path_metrics::sample(conn.clone()));
    }
    tokio::spawn(crate::quic_path::watch(conn.clone()));
    // Until the handshake is complete only a first NEGOTIATE may run
    // (from 0-RTT data; its answer goes as 0.5-RTT data, RFC 9001 4.1.1).
    let stream = smbq_quic::StreamChunks::new(recv, opts.udp.clone()).hold(zero_rtt::is_negotiate, settled(handshake.clone()));
    let source = Source::Quic(stream, conn.clone(), handshake);
    serve_framed(source, FrameWriter::Quic(QuicStreams::new(send)), info, server, opts.send_timeout, hooks).await;
    conn.close(VarInt::from_u32(0), b"");
    if let Some(t) = &mut trace {
        t.end();
    }
}

/// Accept `incoming` (with `config`, if the connection has one of its own)
/// as a 0-RTT connection (RFC 9001 4.6): streams the
/// client opened in its early data can be read before the handshake is
/// complete, and what the server sends then goes as 0.5-RTT data. Returns
/// the connection and a future that resolves when the handshake is done:
/// true if it completed, false if it failed or timed out (the connection
/// is closed then). None if the connection failed before its ClientHello
/// was read.
async fn handshake(incoming: quinn::Incoming, config: Option<Arc<quinn::ServerConfig>>, peer: SocketAddr, timeout: Duration) -> Option<(quinn::Connection, Settled)> {
    let deadline = tokio::time::Instant::now() + timeout;
    let failed = |e: &dyn std::fmt::Display| info!(%peer, error = %e, "QUIC handshake failed");
    let accepted = match config {
        Some(c) => incoming.accept_with(c),
        None => incoming.accept(),
    };
    let mut connecting = accepted.map_err(|e| failed(&e)).ok()?;
    // The ClientHello has been read once the handshake data is there: it
    // says whether the early data was accepted (zero_rtt::Handshake).
    match tokio::time::timeout_at(deadline, connecting.handshake_data()).await {
        Ok(Ok(data)) => {
            if let Ok(h) = data.downcast::<zero_rtt::Handshake>() {
                if h.early_data == zero_rtt::EarlyData::Refused {
                    info!(%peer, "QUIC 0-RTT data refused (ticket unknown, used already or stale; a replay?): its early data is dropped");
                }
                tracing::debug!(%peer, tickets = h.tickets, early_data = ?h.early_data, "QUIC ClientHello");
            }
        }
        Ok(Err(e)) => {
            failed(&e);
            return None;
        }
        Err(_) => {
            info!(%peer, "QUIC handshake not finished in time; dropping");
            return None;
        }
    }
    let (tx, rx) = tokio::sync::watch::channel(None);
    let (conn, done) = match connecting.into_0rtt() {
        Ok(c) => c,
        // Never on a server (quinn: a server always may); wait it out.
        Err(connecting) => {
            let conn = match tokio::time::timeout_at(deadline, connecting).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    failed(&e);
                    return None;
                }
                Err(_) => return None,
            };
            let _ = tx.send(Some(true));
            return Some((conn, rx));
        }
    };
    // A task of its own, so a handshake that never completes closes the
    // connection whether or not a held message waits for it.
    let watched = conn.clone();
    tokio::spawn(async move {
        // quinn's ZeroRttAccepted resolves when the handshake completes
        // or the connection fails (its value is a client's notion).
        let finished = tokio::time::timeout_at(deadline, done).await.is_ok();
        if !finished {
            info!(%peer, "QUIC handshake not finished in time; dropping");
            watched.close(VarInt::from_u32(1), b"handshake timeout");
        }
        let _ = tx.send(Some(finished && watched.close_reason().is_none()));
    });
    Some((conn, rx))
}

/// How a connection's handshake ended: `None` while under way, then
/// whether it completed.
pub(crate) type Settled = tokio::sync::watch::Receiver<Option<bool>>;

/// True once the handshake completed, false if it failed.
pub(crate) async fn settled(mut rx: Settled) -> bool {
    rx.wait_for(Option::is_some).await.ok().and_then(|v| *v).unwrap_or(false)
}
