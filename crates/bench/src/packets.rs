//! Per-packet figures of a run (issue: the QUIC datapath at a real MTU):
//! for each side, CPU nanoseconds per packet and packets per system call,
//! and for the receiving side, ACKs sent per data packet received.
//!
//! Where each count comes from:
//! - **quinn** (raw-quic, smbq-quic): calls, datagrams and bytes from the
//!   endpoint's socket wrapper (`smbq_quic::Counters`: what the kernel saw,
//!   a GSO send or GRO receive of n datagrams being one call); ACK frames
//!   from the client connection's statistics (those it sent, and those it
//!   received, which the server sent).
//! - **s2n-quic**: its events, per endpoint: packets sent and received,
//!   ACK frames sent, and system calls (platform events; their packet
//!   counts count a GSO batch once, so packets come from packet events).
//! - **TCP**: the client socket's TCP_INFO: segments each way, data
//!   segments each way; the server's are their mirror image on loopback.
//!   System calls are not counted on TCP.

use s2n_quic::provider::event::{events, ConnectionInfo, ConnectionMeta, Subscriber};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One side's packet work during a run.
#[derive(Clone, Copy, Default, Debug)]
pub struct Side {
    /// Packets (UDP datagrams or TCP segments) sent and received.
    pub packets: u64,
    /// System calls that sent or received them; 0 when not counted.
    pub calls: u64,
    /// ACK frames (QUIC) or pure ACK segments (TCP) sent.
    pub acks_sent: u64,
    /// Packets sent.
    pub sent: u64,
    /// The calls of `calls` that sent (the others received).
    pub sent_calls: u64,
    /// UDP payload bytes sent; 0 when not counted.
    pub sent_bytes: u64,
    /// Bytes copied in user space while receiving, when counted. For
    /// quinn: the messages under 16 KiB that our quinn copies out of its
    /// receive buffer (it hands GRO batches and large datagrams on without
    /// a copy, and quinn-proto decrypts them in place and returns the
    /// stream's data in them: third_party/quinn/PATCHED.md; quinn as
    /// released copies every message), and what `smbq_quic::StreamChunks`
    /// gathers.
    pub copied: Option<u64>,
}

impl Side {
    pub fn from_udp(c: smbq_quic::Counts, acks_sent: u64) -> Side {
        Side {
            packets: c.tx_datagrams + c.rx_datagrams,
            calls: c.tx_calls + c.rx_calls,
            acks_sent,
            sent: c.tx_datagrams,
            sent_calls: c.tx_calls,
            sent_bytes: c.tx_bytes,
            copied: Some(c.rx_gathered + c.rx_copied),
        }
    }

    /// Packets received.
    pub fn received(&self) -> u64 {
        self.packets.saturating_sub(self.sent)
    }

    /// Packets per sending call; None when calls are not counted.
    pub fn sent_per_call(&self) -> Option<f64> {
        (self.sent_calls > 0).then(|| ratio(self.sent, self.sent_calls))
    }

    /// Packets per receiving call; None when calls are not counted.
    pub fn received_per_call(&self) -> Option<f64> {
        let calls = self.calls.saturating_sub(self.sent_calls);
        (calls > 0).then(|| ratio(self.received(), calls))
    }

    /// ACKs this side sent per packet it received.
    pub fn acks_per_received(&self) -> Option<f64> {
        (self.received() > 0).then(|| ratio(self.acks_sent, self.received()))
    }

    /// Mean bytes of the datagrams this side sent; None when not counted.
    pub fn mean_sent_bytes(&self) -> Option<f64> {
        (self.sent_bytes > 0).then(|| ratio(self.sent_bytes, self.sent))
    }
}

/// Both sides of a run.
#[derive(Clone, Copy, Default, Debug)]
pub struct Packets {
    pub server: Side,
    pub client: Side,
}

impl Packets {
    /// ACKs the receiving side sent per packet the sending side sent
    /// (`write`: the server receives).
    pub fn acks_per_data_packet(&self, dir: &str) -> f64 {
        let (rx, tx) = if dir == "write" { (self.server, self.client) } else { (self.client, self.server) };
        ratio(rx.acks_sent, tx.sent)
    }

    /// The sending side's mean datagram size (`write`: the client sends):
    /// the data packets' size, with the few others sent among them.
    pub fn data_datagram_bytes(&self, dir: &str) -> Option<f64> {
        let tx = if dir == "write" { self.client } else { self.server };
        tx.mean_sent_bytes()
    }

    /// Bytes the receiving side copied in user space per byte of the
    /// transfer (`size`); `None` when not counted.
    pub fn receiver_copies(&self, dir: &str, size: usize) -> Option<f64> {
        let rx = if dir == "write" { self.server } else { self.client };
        rx.copied.map(|c| ratio(c, size as u64))
    }
}

pub fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// An s2n-quic endpoint's counts, from its events.
#[derive(Clone, Default)]
pub struct S2nCounts(Arc<[AtomicU64; 5]>);

const TX_PACKETS: usize = 0;
const TX_CALLS: usize = 1;
const RX_PACKETS: usize = 2;
const RX_CALLS: usize = 3;
const ACKS: usize = 4;

impl S2nCounts {
    pub fn side(&self) -> Side {
        let g = |i: usize| self.0[i].load(Ordering::Relaxed);
        Side {
            packets: g(TX_PACKETS) + g(RX_PACKETS),
            calls: g(TX_CALLS) + g(RX_CALLS),
            acks_sent: g(ACKS),
            sent: g(TX_PACKETS),
            sent_calls: g(TX_CALLS),
            sent_bytes: 0,
            copied: None,
        }
    }

    fn add(&self, i: usize, n: usize) {
        self.0[i].fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl Subscriber for S2nCounts {
    type ConnectionContext = ();

    fn create_connection_context(&mut self, _: &ConnectionMeta, _: &ConnectionInfo) {}

    fn on_frame_sent(&mut self, _: &mut (), _: &ConnectionMeta, e: &events::FrameSent) {
        if matches!(e.frame, events::Frame::Ack { .. }) {
            self.add(ACKS, 1);
        }
    }

    fn on_packet_sent(&mut self, _: &mut (), _: &ConnectionMeta, _: &events::PacketSent) {
        self.add(TX_PACKETS, 1);
    }

    fn on_packet_received(&mut self, _: &mut (), _: &ConnectionMeta, _: &events::PacketReceived) {
        self.add(RX_PACKETS, 1);
    }

    fn on_platform_tx(&mut self, _: &events::EndpointMeta, e: &events::PlatformTx) {
        self.add(TX_CALLS, e.syscalls);
    }

    fn on_platform_rx(&mut self, _: &events::EndpointMeta, e: &events::PlatformRx) {
        self.add(RX_CALLS, e.syscalls);
    }
}

/// Segment counts of a TCP socket (struct tcp_info, Linux 4.6 and later):
/// (segments out, segments in, data segments out, data segments in).
pub fn tcp_segments(fd: std::os::fd::RawFd) -> Option<(u64, u64, u64, u64)> {
    let mut buf = [0u8; 160];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `buf`.
    let r = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, buf.as_mut_ptr().cast(), &mut len) };
    if r != 0 || (len as usize) < buf.len() {
        return None;
    }
    let u32_at = |o: usize| u64::from(u32::from_ne_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]));
    // tcpi_segs_out at 136, tcpi_segs_in 140, tcpi_data_segs_in 152,
    // tcpi_data_segs_out 156.
    Some((u32_at(136), u32_at(140), u32_at(156), u32_at(152)))
}

/// Both sides of a TCP connection from the client's TCP_INFO.
pub fn tcp_packets(fd: std::os::fd::RawFd) -> Packets {
    let Some((out, inn, data_out, data_in)) = tcp_segments(fd) else { return Packets::default() };
    Packets {
        client: Side { packets: out + inn, acks_sent: out - data_out.min(out), sent: out, ..Side::default() },
        server: Side { packets: out + inn, acks_sent: inn - data_in.min(inn), sent: inn, ..Side::default() },
    }
}
