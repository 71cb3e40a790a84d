//! SMB over QUIC (MS-SMB2 2.1): QUIC v1 with TLS 1.3 and ALPN "smb"; the
//! client opens one bidirectional stream and SMB2 messages travel on it with
//! the Direct TCP framing. The engine sees the stream like a TCP connection,
//! plus `TransportInfo::secure` (the transport encrypts and authenticates).
//!
//! `connection` is the one place that maps QUIC streams to the engine: one
//! bidirectional stream per connection; the peer may not open more (the
//! stream limits say so and quinn closes a connection that ignores them).

use crate::{serve_framed, FrameWriter, Source, SEND_TIMEOUT};
use quinn::{Endpoint, EndpointConfig, TransportConfig, VarInt};
pub use smbq_udp::{reuseport::MAX_ENDPOINTS, Congestion};
use smbq_server::{Connection, Server, TransportInfo, TransportKind};
use std::net::SocketAddr;
use std::sync::Arc;
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
    /// elsewhere simply fail and the usual ~1452 stays. See [`smbq_udp`].
    pub max_udp_payload: u16,
    /// What the endpoint's UDP socket does (calls, datagrams, bytes).
    pub udp: Arc<smbq_udp::Counters>,
    pub congestion: Congestion,
    /// QUIC endpoints on the port, each with its own UDP socket in one
    /// SO_REUSEPORT group, steered by connection ID
    /// ([`smbq_udp::reuseport`]): connections spread over that many
    /// endpoint drivers, and so over cores.
    pub endpoints: usize,
    /// Send as if the kernel had no UDP GSO: batches go out with
    /// sendmmsg(2) (tests and `smbq-bench --no-gso`).
    pub no_gso: bool,
}

impl Default for QuicOptions {
    fn default() -> Self {
        QuicOptions {
            idle_timeout: Duration::from_secs(120),
            keep_alive: Some(Duration::from_secs(15)),
            stream_window: 64 << 20,
            connection_window: 128 << 20,
            preauth_window: 256 << 10,
            udp_buffer: smbq_udp::DEFAULT_BUFFER,
            handshake_timeout: Duration::from_secs(10),
            send_timeout: SEND_TIMEOUT,
            max_udp_payload: smbq_udp::MAX_DATAGRAM,
            udp: Arc::default(),
            congestion: Congestion::default(),
            endpoints: std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
            no_gso: false,
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
    t.ack_frequency_config(Some(smbq_udp::ack_frequency()));
    t
}

/// `opts.endpoints` QUIC endpoints serving SMB on `addr`, one port (that
/// of the first when `addr`'s is 0); serve each with [`serve`].
pub fn endpoints(addr: SocketAddr, tls: rustls::ServerConfig, opts: &QuicOptions) -> std::io::Result<Vec<Endpoint>> {
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(std::io::Error::other)?;
    let mut sc = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    sc.transport_config(Arc::new(transport_config(opts)));
    sc.migration(true);
    let n = opts.endpoints.max(1);
    let sockets = smbq_udp::reuseport::sockets(addr, opts.udp_buffer, n)?;
    let runtime = Arc::new(smbq_udp::Runtime { counters: opts.udp.clone(), no_gso: opts.no_gso });
    sockets
        .into_iter()
        .enumerate()
        .map(|(i, socket)| {
            let mut ec = endpoint_config(opts);
            ec.cid_generator(move || Box::new(smbq_udp::reuseport::SteeringCids::new(i, n)));
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
                    tokio::spawn(connection(incoming, server.clone(), opts.clone()));
                }
                None => break,
            }
        }
    }
    endpoint.close(VarInt::from_u32(0), b"server shutting down");
    info!("quic listener closed");
}

async fn connection(incoming: quinn::Incoming, server: Arc<Server>, opts: QuicOptions) {
    let peer = incoming.remote_address();
    let local = incoming.local_ip().map(|ip| SocketAddr::new(ip, 0));
    let conn = match tokio::time::timeout(opts.handshake_timeout, incoming).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            info!(%peer, error = %e, "QUIC handshake failed");
            return;
        }
        Err(_) => {
            info!(%peer, "QUIC handshake not finished in time; dropping");
            return;
        }
    };
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
    let info = TransportInfo { kind: TransportKind::Quic, peer: Some(peer), local, secure: true };
    let window = VarInt::from_u64(opts.connection_window).unwrap_or(VarInt::MAX);
    let opened = conn.clone();
    let on_logon = Box::new(move || opened.set_receive_window(window));
    if server.metrics.is_some() {
        tokio::spawn(sample_path(conn.clone()));
    }
    tokio::spawn(crate::quic_path::watch(conn.clone()));
    serve_framed(Source::Quic(smbq_udp::StreamChunks::new(recv, opts.udp.clone())), FrameWriter::Quic(send), info, server, opts.send_timeout, on_logon).await;
    conn.close(VarInt::from_u32(0), b"");
}

/// How often [`sample_path`] samples a connection.
const PATH_SAMPLE: Duration = Duration::from_secs(10);

/// Record the connection's path RTT and packets lost into the metrics
/// (smbq_server::metrics): when it starts, every [`PATH_SAMPLE`], and
/// when it ends.
async fn sample_path(conn: quinn::Connection) {
    use smbq_server::metrics::names;
    let rtt = metrics::histogram!(names::QUIC_RTT);
    let lost = metrics::counter!(names::QUIC_LOST_PACKETS);
    let mut counted = 0;
    let mut tick = tokio::time::interval(PATH_SAMPLE);
    loop {
        let end = tokio::select! {
            _ = conn.closed() => true,
            _ = tick.tick() => false,
        };
        rtt.record(conn.rtt().as_secs_f64());
        let now_lost = conn.stats().path.lost_packets;
        lost.increment(now_lost.saturating_sub(counted));
        counted = now_lost;
        if end {
            return;
        }
    }
}
