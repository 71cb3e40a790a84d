//! The plumbing under smbq's QUIC endpoints, server and client alike
//! (quinn does the protocol): the UDP socket and quinn [`Runtime`] under
//! them (GSO batches split to what one send carries, sendmmsg(2) where
//! the kernel has no GSO: `mmsg`), several endpoints on one port steered
//! by connection ID ([`reuseport`]), MTU discovery's upper bound from the
//! route ([`route`]), the congestion controllers ([`Congestion`], smbq's
//! own in [`congestion`]), what we ask of a peer's ACKs
//! ([`ack_frequency`]), and [`StreamChunks`], which reads the SMB stream
//! in the chunks quinn returns.
//!
//! The socket does two things quinn 0.11 does not do by itself, both
//! measured on loopback (`smbq-bench`):
//! - **Large buffers**: 8 MiB by default; bursts of a fast sender overflow
//!   the kernel's ~200 KiB and read as loss.
//! - **Datagrams up to 64 KiB** where the path allows them (loopback, whose
//!   MTU is 65,536): quinn's per-packet work (AEAD setup, header
//!   protection, ACK and loss bookkeeping) then happens once per 64 KiB
//!   instead of once per 1.4–6.5 KiB. A raw quinn transfer went from about
//!   0.9–1.0 to about 1.3–1.5 GB/s, at 0.65–0.75 instead of 1.0–1.3 CPU
//!   seconds per GiB and side. One UDP send carries at most
//!   [`MAX_DATAGRAM`] bytes; our quinn (third_party/quinn) keeps its GSO
//!   batches within that, and [`Runtime`] splits any larger batch (the
//!   released quinn's, up to 10 datagrams of any size) into sends that
//!   fit; otherwise every batched send of large datagrams fails, MTU
//!   discovery reads that as a black hole and the path drops to 1200
//!   bytes.
//! - **Counts** of system calls, datagrams and bytes each way
//!   ([`Counters`]), for `smbq-bench`'s per-packet figures.
//!
//! Elsewhere MTU discovery (RFC 9000 section 14.3, DPLPMTUD) probes up to
//! what the interface the route uses carries ([`mtu_upper_bound`],
//! [`route`]): 8972 bytes on a 9000-byte jumbo-frame LAN, 1472 on a
//! 1500-byte Ethernet, and [`ETHERNET_PAYLOAD`] when the route cannot be
//! read. Probing far beyond what the path carries was measured to cost the
//! first seconds of every connection (`smbq-bench suite`, S5 over the link
//! emulator at 20 ms one way with a bound of 65,507 on a 1500-byte path:
//! SMB setup 733 ms instead of 163, the path stuck at 1200 bytes), since
//! each probe too large for the path is sent several times and declared
//! lost before the search goes lower.

// Every unsafe block says why it is sound (`// SAFETY:`).
#![deny(clippy::undocumented_unsafe_blocks)]

mod chunks;
pub mod congestion;
mod mmsg;
pub mod reuseport;
pub mod route;

pub use chunks::StreamChunks;

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncTimer, AsyncUdpSocket, UdpPoller};
use socket2::{Domain, Protocol, Socket, Type};
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tracing::warn;

/// The largest UDP payload one send can carry over IPv4 (65,535 minus the
/// IPv4 and UDP headers), and so the most bytes one GSO send may hold.
pub const MAX_DATAGRAM: u16 = 65_507;

/// The UDP payload a 1500-byte Ethernet path carries with IPv6's and
/// UDP's headers (1500 - 40 - 8): quinn's default bound, and what real
/// paths without jumbo frames allow.
pub const ETHERNET_PAYLOAD: u16 = 1452;

/// The upper bound of MTU discovery for a connection to a peer at `ip`:
/// [`MAX_DATAGRAM`] on loopback; else the MTU of the route to `ip` (its
/// interface's, or less when the route or the kernel's path MTU cache
/// says so; [`route::route_mtu`]) less the IP and UDP headers, within
/// 1200 and [`MAX_DATAGRAM`]; [`ETHERNET_PAYLOAD`] when the route cannot
/// be read (no route, an unspecified address). Asks the calling thread's
/// network namespace.
pub fn mtu_upper_bound(ip: std::net::IpAddr) -> u16 {
    if ip.is_loopback() {
        MAX_DATAGRAM
    } else {
        route::route_mtu(ip).map_or(ETHERNET_PAYLOAD, |mtu| route::udp_payload(mtu, ip))
    }
}

/// The upper bound of MTU discovery for a server's socket bound to `ip`,
/// before any peer is known: [`MAX_DATAGRAM`] on loopback; else the MTU
/// of the interface holding `ip`, or for an unspecified `ip` the largest
/// MTU of the interfaces that are up and not loopback, less the headers
/// ([`route::listen_payload`]); [`ETHERNET_PAYLOAD`] when none is found.
///
/// A server takes the largest rather than one peer's route because its
/// endpoint has one transport configuration and advertises one
/// max_udp_payload_size for all its connections. Too high a bound for a
/// given peer costs only probes: DPLPMTUD (RFC 8899) raises a path's
/// datagrams only when a probe of that size is acknowledged, so each
/// connection settles at what its own path carries (a client on a
/// 1500-byte LAN at about 1472 bytes even when the server has a 9000-byte
/// interface), after the failed probes above it (each sent three times)
/// while it sends at the size found so far. A bound from the peer's own
/// route, per connection, would save those probes: quinn 0.11 takes a
/// server configuration per connection (`Incoming::accept_with`), which
/// smbq's accept loop does not use yet.
pub fn listen_mtu_upper_bound(ip: std::net::IpAddr) -> u16 {
    if ip.is_loopback() {
        MAX_DATAGRAM
    } else {
        route::listen_payload(ip).unwrap_or(ETHERNET_PAYLOAD)
    }
}

/// Default UDP socket send and receive buffer (bytes).
pub const DEFAULT_BUFFER: usize = 8 << 20;

/// A UDP socket bound to `addr` with `buffer`-byte send and receive
/// buffers: SO_RCVBUFFORCE/SO_SNDBUFFORCE when permitted (root or
/// CAP_NET_ADMIN), else the largest the sysctls allow, with a warning.
pub fn socket(addr: SocketAddr, buffer: usize) -> io::Result<std::net::UdpSocket> {
    bind(addr, buffer, false)
}

/// [`socket`], with SO_REUSEPORT when `reuse_port` (see [`reuseport`]).
fn bind(addr: SocketAddr, buffer: usize, reuse_port: bool) -> io::Result<std::net::UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        let _ = s.set_only_v6(false);
    }
    for (force, name) in [
        (libc::SO_RCVBUFFORCE, "receive"),
        (libc::SO_SNDBUFFORCE, "send"),
    ] {
        if set_force(&s, force, buffer) {
            continue;
        }
        let receive = force == libc::SO_RCVBUFFORCE;
        let _ = if receive {
            s.set_recv_buffer_size(buffer)
        } else {
            s.set_send_buffer_size(buffer)
        };
        let got = if receive {
            s.recv_buffer_size()
        } else {
            s.send_buffer_size()
        }
        .unwrap_or(0);
        // Linux reports twice the value set.
        if got / 2 < buffer {
            let sysctl = if receive { "rmem_max" } else { "wmem_max" };
            warn!(
                requested = buffer,
                got = got / 2,
                "UDP {name} buffer smaller than requested (raise net.core.{sysctl})"
            );
        }
    }
    s.bind(&addr.into())?;
    Ok(s.into())
}

fn set_force(s: &Socket, opt: libc::c_int, size: usize) -> bool {
    use std::os::fd::AsRawFd;
    let v: libc::c_int = size.try_into().unwrap_or(libc::c_int::MAX);
    // SAFETY: `s` is an open socket, and the option takes a c_int, which
    // `v` is and which lives for the call.
    unsafe { socket_option(s.as_raw_fd(), opt, &v) }.is_ok()
}

/// setsockopt(2) at SOL_SOCKET with `value` and its size.
///
/// # Safety
/// `fd` is an open socket, `opt` takes a `T`, and whatever `value` points
/// to stays valid for the call.
unsafe fn socket_option<T>(fd: std::os::fd::RawFd, opt: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: by the caller's contract; the kernel reads size_of::<T>()
    // bytes of `value`.
    let r = unsafe {
        libc::setsockopt(fd, libc::SOL_SOCKET, opt, (value as *const T).cast(), std::mem::size_of::<T>() as libc::socklen_t)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What an endpoint's UDP socket did: system calls, datagrams and bytes
/// each way (a GSO send or GRO receive of n datagrams is one call and n
/// datagrams). quinn's own statistics count a receive call per datagram;
/// these count what the kernel saw. Relaxed atomics, one add per call.
#[derive(Debug, Default)]
pub struct Counters {
    pub tx_calls: AtomicU64,
    pub tx_datagrams: AtomicU64,
    pub tx_bytes: AtomicU64,
    pub rx_calls: AtomicU64,
    pub rx_datagrams: AtomicU64,
    pub rx_bytes: AtomicU64,
    /// Received stream bytes that [`StreamChunks`] copied to gather them.
    pub rx_gathered: AtomicU64,
    /// Bytes of received messages that our quinn copies out of its
    /// receive buffer: those under [`QUINN_COPIES_BELOW`].
    pub rx_copied: AtomicU64,
}

/// Received messages (a datagram, or a GRO batch of them) shorter than
/// this our quinn copies out of its receive buffer; it hands longer ones
/// to quinn-proto without a copy (`RecvBuffers::MIN_HANDED` in
/// third_party/quinn/src/endpoint.rs).
pub const QUINN_COPIES_BELOW: usize = 16 * 1024;

/// A copy of [`Counters`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub tx_calls: u64,
    pub tx_datagrams: u64,
    pub tx_bytes: u64,
    pub rx_calls: u64,
    pub rx_datagrams: u64,
    pub rx_bytes: u64,
    pub rx_gathered: u64,
    pub rx_copied: u64,
}

impl Counters {
    pub fn get(&self) -> Counts {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counts {
            tx_calls: g(&self.tx_calls),
            tx_datagrams: g(&self.tx_datagrams),
            tx_bytes: g(&self.tx_bytes),
            rx_calls: g(&self.rx_calls),
            rx_datagrams: g(&self.rx_datagrams),
            rx_bytes: g(&self.rx_bytes),
            rx_gathered: g(&self.rx_gathered),
            rx_copied: g(&self.rx_copied),
        }
    }
}

impl std::ops::Sub for Counts {
    type Output = Counts;
    fn sub(self, b: Counts) -> Counts {
        Counts {
            tx_calls: self.tx_calls - b.tx_calls,
            tx_datagrams: self.tx_datagrams - b.tx_datagrams,
            tx_bytes: self.tx_bytes - b.tx_bytes,
            rx_calls: self.rx_calls - b.rx_calls,
            rx_datagrams: self.rx_datagrams - b.rx_datagrams,
            rx_bytes: self.rx_bytes - b.rx_bytes,
            rx_gathered: self.rx_gathered - b.rx_gathered,
            rx_copied: self.rx_copied - b.rx_copied,
        }
    }
}

/// The congestion controller of a QUIC endpoint's connections. The
/// default is smbq's own ([`congestion`]), a BBR-style controller whose
/// start-up is slow start and which tolerates random loss; quinn's three
/// stay selectable: CUBIC (RFC 9438, Linux TCP's), NewReno (RFC 9002
/// section 7, QUIC's reference) and quinn's experimental BBR.
///
/// Why not quinn's: `smbq-bench suite` measured (bench/results/2026-11-26
/// and 2026-11-26-bbr) that under 5% random loss at 25 ms one way, S4's
/// photo group took 45.8 s up and 47.7 s down with quinn's CUBIC (its
/// window stays at 4-6 packets there; scp 10.0 and 10.8 s), and 3.9 and
/// 3.7 s with quinn's BBR, whose start-up however paces a new connection's
/// first megabyte slowly (207 ms against CUBIC's 6 ms on loopback, 439
/// against 262 ms at 20 ms, S5): see [`congestion`] for the cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Congestion {
    #[default]
    Smbq,
    Cubic,
    Bbr,
    NewReno,
}

impl Congestion {
    pub const NAMES: &'static str = "smbq, cubic, bbr or newreno";

    /// The factory of this controller.
    pub fn factory(self) -> Arc<dyn quinn::congestion::ControllerFactory + Send + Sync> {
        use quinn::congestion::{BbrConfig, CubicConfig, NewRenoConfig};
        match self {
            Congestion::Smbq => Arc::new(congestion::SmbqConfig),
            Congestion::Cubic => Arc::new(CubicConfig::default()),
            Congestion::Bbr => Arc::new(BbrConfig::default()),
            Congestion::NewReno => Arc::new(NewRenoConfig::default()),
        }
    }

    /// The name the configuration and command lines use.
    pub fn name(self) -> &'static str {
        match self {
            Congestion::Smbq => "smbq",
            Congestion::Cubic => "cubic",
            Congestion::Bbr => "bbr",
            Congestion::NewReno => "newreno",
        }
    }
}

impl std::str::FromStr for Congestion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "smbq" => Ok(Congestion::Smbq),
            "cubic" => Ok(Congestion::Cubic),
            "bbr" => Ok(Congestion::Bbr),
            "newreno" => Ok(Congestion::NewReno),
            _ => Err(format!("unknown congestion controller {s:?} (expected {})", Congestion::NAMES)),
        }
    }
}

/// What smbq's endpoints ask of a peer that supports the ACK frequency
/// extension (draft-ietf-quic-ack-frequency, which quinn implements; a peer
/// supports it when it sends the min_ack_delay transport parameter, as
/// quinn does, and a peer that does not is asked nothing): acknowledge at
/// least every 8 ack-eliciting packets, or 5 ms after the first one not yet
/// acknowledged, and at once on a packet out of order. quinn already
/// acknowledges once per batch of received datagrams; this bounds how
/// often a peer that acknowledges every second packet (RFC 9000 13.2.2)
/// does, and so the ACKs the sender must process.
pub fn ack_frequency() -> quinn::AckFrequencyConfig {
    let mut c = quinn::AckFrequencyConfig::default();
    c.ack_eliciting_threshold(quinn::VarInt::from_u32(7));
    c.max_ack_delay(Some(std::time::Duration::from_millis(5)));
    c
}

/// quinn's tokio runtime, with sockets that split GSO batches above
/// [`MAX_DATAGRAM`] bytes into sends the kernel takes, send a batch with
/// one sendmmsg(2) where the kernel has no UDP GSO, and count their calls
/// in `counters`.
#[derive(Debug, Default)]
pub struct Runtime {
    pub counters: Arc<Counters>,
    /// Send batches as if the kernel had no UDP GSO (tests, measurements).
    pub no_gso: bool,
}

impl quinn::Runtime for Runtime {
    fn new_timer(&self, i: Instant) -> Pin<Box<dyn AsyncTimer>> {
        quinn::TokioRuntime.new_timer(i)
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        quinn::TokioRuntime.spawn(future)
    }

    fn wrap_udp_socket(&self, t: std::net::UdpSocket) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        use std::os::fd::AsRawFd;
        let fd = t.as_raw_fd();
        let v6 = t.local_addr()?.is_ipv6();
        let inner = quinn::TokioRuntime.wrap_udp_socket(t)?;
        let mmsg = self.no_gso || inner.max_transmit_segments() <= 1;
        Ok(Arc::new(SplitGso { inner, counters: self.counters.clone(), fd, v6, mmsg }))
    }
}

#[derive(Debug)]
struct SplitGso {
    inner: Arc<dyn AsyncUdpSocket>,
    counters: Arc<Counters>,
    /// The socket's fd, for sendmmsg(2); `inner` owns it.
    fd: std::os::fd::RawFd,
    v6: bool,
    /// No UDP GSO: batches go out with sendmmsg(2).
    mmsg: bool,
}

impl SplitGso {
    fn count(&self, calls: u64, t: &Transmit) {
        let c = &self.counters;
        c.tx_calls.fetch_add(calls, Ordering::Relaxed);
        let n = t.segment_size.map_or(1, |s| t.contents.len().div_ceil(s.max(1)));
        c.tx_datagrams.fetch_add(n as u64, Ordering::Relaxed);
        c.tx_bytes.fetch_add(t.contents.len() as u64, Ordering::Relaxed);
    }

    fn send(&self, t: &Transmit) -> io::Result<()> {
        self.inner.try_send(t)?;
        self.count(1, t);
        Ok(())
    }

    /// A batch without GSO: sendmmsg(2), or, for a destination of another
    /// family than the socket's, one datagram at a time through quinn-udp.
    fn send_batch(&self, t: &Transmit, seg: usize) -> io::Result<()> {
        if mmsg::can_send(t, self.v6) {
            let calls = mmsg::send(self.fd, t)?;
            self.count(calls, t);
            return Ok(());
        }
        for contents in t.contents.chunks(seg) {
            self.send(&Transmit { contents, segment_size: None, ..*t })?;
        }
        Ok(())
    }
}

impl AsyncUdpSocket for SplitGso {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    /// A batch over [`MAX_DATAGRAM`] bytes goes out as several sends of
    /// whole datagrams. If one of them would block, the whole batch is
    /// retried later and the receiver drops the datagrams it got twice
    /// (QUIC discards duplicate packet numbers).
    fn try_send(&self, t: &Transmit) -> io::Result<()> {
        let Some(seg) = t.segment_size.map(|s| s.max(1)) else { return self.send(t) };
        if self.mmsg {
            return self.send_batch(t, seg);
        }
        if t.contents.len() <= usize::from(MAX_DATAGRAM) {
            return self.send(t);
        }
        let per_send = (usize::from(MAX_DATAGRAM) / seg).max(1) * seg;
        for contents in t.contents.chunks(per_send) {
            self.send(&Transmit { contents, ..*t })?;
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let r = self.inner.poll_recv(cx, bufs, meta);
        if let Poll::Ready(Ok(n)) = r {
            let c = &self.counters;
            c.rx_calls.fetch_add(1, Ordering::Relaxed);
            for m in &meta[..n] {
                c.rx_datagrams.fetch_add(m.len.div_ceil(m.stride.max(1)) as u64, Ordering::Relaxed);
                c.rx_bytes.fetch_add(m.len as u64, Ordering::Relaxed);
                if m.len < QUINN_COPIES_BELOW {
                    c.rx_copied.fetch_add(m.len as u64, Ordering::Relaxed);
                }
            }
        }
        r
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        if self.mmsg {
            mmsg::MAX_BATCH
        } else {
            self.inner.max_transmit_segments()
        }
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn mtu_bound_from_the_route() {
        assert_eq!(super::mtu_upper_bound("127.0.0.1".parse().expect("ip")), super::MAX_DATAGRAM);
        assert_eq!(super::mtu_upper_bound("::1".parse().expect("ip")), super::MAX_DATAGRAM);
        assert_eq!(super::listen_mtu_upper_bound("127.0.0.1".parse().expect("ip")), super::MAX_DATAGRAM);
        assert_eq!(super::listen_mtu_upper_bound("::1".parse().expect("ip")), super::MAX_DATAGRAM);
        // No path to measure: the Ethernet default.
        assert_eq!(super::mtu_upper_bound("0.0.0.0".parse().expect("ip")), super::ETHERNET_PAYLOAD);
    }

    use super::*;
    use quinn::Runtime as _;

    #[test]
    fn congestion_controllers_by_name() {
        assert_eq!(Congestion::default(), Congestion::Smbq);
        assert_eq!("smbq".parse(), Ok(Congestion::Smbq));
        assert_eq!("cubic".parse(), Ok(Congestion::Cubic));
        assert_eq!("BBR".parse(), Ok(Congestion::Bbr));
        assert_eq!("newreno".parse(), Ok(Congestion::NewReno));
        let e = "reno".parse::<Congestion>().expect_err("reno is not offered");
        assert!(e.contains("smbq, cubic, bbr or newreno"), "{e}");
        for c in [Congestion::Smbq, Congestion::Cubic, Congestion::Bbr, Congestion::NewReno] {
            assert_eq!(c.name().parse(), Ok(c));
        }
    }

    /// Send as quinn does: wait until the socket is writable, then try.
    async fn send(s: &Arc<dyn AsyncUdpSocket>, t: &Transmit<'_>) -> io::Result<()> {
        let mut poller = s.clone().create_io_poller();
        for _ in 0..100 {
            std::future::poll_fn(|cx| poller.as_mut().poll_writable(cx)).await?;
            match s.try_send(t) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return r,
            }
        }
        Err(io::ErrorKind::WouldBlock.into())
    }

    /// Without GSO a batch of 40 datagrams (the last shorter) goes out in
    /// one sendmmsg(2), bare and with an ECN codepoint and a source
    /// address (as quinn sends from a wildcard-bound server socket), and
    /// arrives as 40 whole datagrams in order.
    #[tokio::test]
    async fn batches_without_gso_go_out_in_one_sendmmsg() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
        let seg = 1200;
        let contents: Vec<u8> = (0..40 * seg - 100).map(|i| (i / seg) as u8 ^ (i % 253) as u8).collect();
        let counted = Runtime { no_gso: true, ..Runtime::default() };
        let s = counted
            .wrap_udp_socket(socket("127.0.0.1:0".parse().expect("addr"), 1 << 20).expect("socket"))
            .expect("wrap");
        assert_eq!(s.max_transmit_segments(), mmsg::MAX_BATCH);
        let mut buf = vec![0u8; 65536];
        let local = Some(std::net::IpAddr::from([127, 0, 0, 1]));
        for (ecn, src_ip) in [(None, None), (Some(quinn::udp::EcnCodepoint::Ect0), local)] {
            let t = Transmit {
                destination: rx.local_addr().expect("addr"),
                ecn,
                contents: &contents,
                segment_size: Some(seg),
                src_ip,
            };
            send(&s, &t).await.expect("sendmmsg");
            for expected in contents.chunks(seg) {
                let n = rx.recv(&mut buf).expect("datagram");
                assert_eq!(&buf[..n], expected);
            }
        }
        let c = counted.counters.get();
        assert_eq!((c.tx_calls, c.tx_datagrams), (2, 80), "one call per batch");
    }

    /// Ten 8000-byte datagrams in one GSO batch: the kernel refuses the
    /// 80,000-byte send and none arrives; split, all ten arrive whole and
    /// in order.
    #[tokio::test]
    async fn batches_over_the_send_limit_arrive_as_whole_datagrams() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        let seg = 8000;
        let contents: Vec<u8> = (0..10 * seg)
            .map(|i| (i / seg) as u8 ^ (i % 251) as u8)
            .collect();
        let t = Transmit {
            destination: rx.local_addr().expect("addr"),
            ecn: None,
            contents: &contents,
            segment_size: Some(seg),
            src_ip: None,
        };

        let plain = quinn::TokioRuntime
            .wrap_udp_socket(socket("127.0.0.1:0".parse().expect("addr"), 1 << 20).expect("socket"))
            .expect("wrap");
        if plain.max_transmit_segments() < 10 {
            eprintln!("no UDP GSO here; nothing to split");
            return;
        }
        // quinn-udp logs the kernel's EMSGSIZE and reports the batch sent:
        // to quinn it is lost.
        send(&plain, &t).await.expect("plain send");

        let counted = Runtime::default();
        let split = counted
            .wrap_udp_socket(socket("127.0.0.1:0".parse().expect("addr"), 1 << 20).expect("socket"))
            .expect("wrap");
        send(&split, &t).await.expect("split send");
        let mut buf = vec![0u8; 65536];
        for expected in contents.chunks(seg) {
            let n = rx.recv(&mut buf).expect("datagram");
            assert_eq!(&buf[..n], expected);
        }
        rx.set_read_timeout(Some(std::time::Duration::from_millis(300)))
            .expect("timeout");
        assert!(
            rx.recv(&mut buf).is_err(),
            "more than the split batch arrived"
        );
        // Eight datagrams fit one 65,507-byte send, the other two a second.
        let c = counted.counters.get();
        assert_eq!((c.tx_calls, c.tx_datagrams, c.tx_bytes), (2, 10, 80_000));
    }
}
