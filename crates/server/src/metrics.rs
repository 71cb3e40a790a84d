//! What the engine counts, through the `metrics` facade; the binary
//! installs a recorder (smbq serve --metrics) and exports it.
//!
//! The handles are made once, with the server, when
//! `ServerConfig::metrics` is set; without it the server holds none and
//! nothing is counted or timed. Each handle is an atomic in the recorder,
//! so a request (a READ or WRITE too) takes no lock and allocates nothing
//! for its counts. Only an error response looks its counter up by status.

use crate::transport_info::TransportKind;
use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};
use smbq_wire::{Command, NtStatus};
use std::time::Instant;

/// The metric names (Prometheus conventions: `_total` on counters, units
/// in the name).
pub mod names {
    /// Gauge, label `transport`: connections open now.
    pub const CONNECTIONS: &str = "smbq_connections";
    /// Counter, label `transport`: connections accepted.
    pub const CONNECTIONS_ACCEPTED: &str = "smbq_connections_accepted_total";
    /// Gauge: sessions (set up or being set up).
    pub const SESSIONS: &str = "smbq_sessions";
    /// Gauge: open handles (durable ones waiting for a reconnect too).
    pub const OPENS: &str = "smbq_opens";
    /// Counter, label `command`: requests received (each compound element).
    pub const REQUESTS: &str = "smbq_requests_total";
    /// Histogram, label `command`: seconds from a request's arrival at the
    /// engine to its final response.
    pub const REQUEST_DURATION: &str = "smbq_request_duration_seconds";
    /// Counter, label `status`: error and warning responses by NTSTATUS.
    pub const ERRORS: &str = "smbq_errors_total";
    /// Counter: file data READ returned.
    pub const READ_BYTES: &str = "smbq_read_bytes_total";
    /// Counter: file data WRITE wrote.
    pub const WRITTEN_BYTES: &str = "smbq_written_bytes_total";
    /// Counter, label `transport`: SMB message bytes received (with the
    /// 4-byte Direct TCP prefix, also over QUIC).
    pub const RECEIVED_BYTES: &str = "smbq_received_bytes_total";
    /// Counter, label `transport`: SMB message bytes sent (likewise).
    pub const SENT_BYTES: &str = "smbq_sent_bytes_total";
    // The QUIC path and congestion control figures below are sampled per
    // connection at its start, every 10 s and at its end, without a
    // connection label (smbq-transport's `quic::path_metrics` says why).
    /// Histogram: smoothed RTT samples (RFC 9002 5.3), in seconds.
    pub const QUIC_RTT: &str = "smbq_quic_rtt_seconds";
    /// Histogram: minimum RTT samples, in seconds.
    pub const QUIC_MIN_RTT: &str = "smbq_quic_min_rtt_seconds";
    /// Histogram: congestion window samples, in bytes.
    pub const QUIC_CWND: &str = "smbq_quic_cwnd_bytes";
    /// Histogram: pacing rate samples, bits/s (from controllers that give
    /// one; quinn's CUBIC and NewReno do not).
    pub const QUIC_PACING_RATE: &str = "smbq_quic_pacing_rate_bits_per_second";
    /// Counter: QUIC packets sent (MTU probes included).
    pub const QUIC_SENT_PACKETS: &str = "smbq_quic_sent_packets_total";
    /// Counter: QUIC packets lost (MTU probes not included); their frames
    /// are what quinn sends again, so this is also the count of packets
    /// whose content was retransmitted.
    pub const QUIC_LOST_PACKETS: &str = "smbq_quic_lost_packets_total";
    /// Counter: bytes of the QUIC packets lost.
    pub const QUIC_LOST_BYTES: &str = "smbq_quic_lost_bytes_total";
    /// Counter: congestion events (the controller cut its window for loss
    /// or ECN marks).
    pub const QUIC_CONGESTION_EVENTS: &str = "smbq_quic_congestion_events_total";
    /// Counter: QUIC connections that resumed a TLS session with 0-RTT
    /// data accepted (smbq-transport, docs/zero-rtt.md).
    pub const QUIC_0RTT_ACCEPTED: &str = "smbq_quic_0rtt_accepted_total";
    /// Counter: QUIC connections whose 0-RTT data was refused (a ticket
    /// unknown, used already or stale: a replay, or a server restart).
    pub const QUIC_0RTT_REFUSED: &str = "smbq_quic_0rtt_refused_total";
    /// Counter: QUIC connections seen moving to another client address
    /// (connection migration; smbq-transport).
    pub const QUIC_MIGRATIONS: &str = "smbq_quic_migrations_total";
    /// Gauge: the QUIC server certificate's notAfter, Unix seconds (smbq).
    pub const CERTIFICATE_EXPIRY: &str = "smbq_certificate_expiry_timestamp_seconds";
}

/// The label value of a transport.
pub fn transport_label(kind: TransportKind) -> &'static str {
    match kind {
        TransportKind::Tcp => "tcp",
        TransportKind::Quic => "quic",
    }
}

struct PerCommand {
    requests: Counter,
    duration: Histogram,
}

pub(crate) struct PerTransport {
    pub(crate) connections: Gauge,
    accepted: Counter,
    received: Counter,
    sent: Counter,
}

pub struct Metrics {
    /// Indexed by opcode (as `dispatch::TABLE`).
    commands: Vec<PerCommand>,
    /// Indexed by [`TransportKind`] (Tcp, Quic).
    transports: [PerTransport; 2],
    pub(crate) sessions: Gauge,
    pub(crate) opens: Gauge,
    read_bytes: Counter,
    written_bytes: Counter,
}

impl Metrics {
    /// Register every series with the installed recorder.
    pub fn new() -> Metrics {
        // Indexed by opcode: every command's, in order.
        let commands = (0u16..)
            .map_while(|op| Command(op).name())
            .map(|name| {
                PerCommand {
                    requests: counter!(names::REQUESTS, "command" => name),
                    duration: histogram!(names::REQUEST_DURATION, "command" => name),
                }
            })
            .collect();
        let transport = |kind| {
            let t = transport_label(kind);
            PerTransport {
                connections: gauge!(names::CONNECTIONS, "transport" => t),
                accepted: counter!(names::CONNECTIONS_ACCEPTED, "transport" => t),
                received: counter!(names::RECEIVED_BYTES, "transport" => t),
                sent: counter!(names::SENT_BYTES, "transport" => t),
            }
        };
        Metrics {
            commands,
            transports: [transport(TransportKind::Tcp), transport(TransportKind::Quic)],
            sessions: gauge!(names::SESSIONS),
            opens: gauge!(names::OPENS),
            read_bytes: counter!(names::READ_BYTES),
            written_bytes: counter!(names::WRITTEN_BYTES),
        }
    }

    pub(crate) fn transport(&self, kind: TransportKind) -> &PerTransport {
        let [tcp, quic] = &self.transports;
        match kind {
            TransportKind::Tcp => tcp,
            TransportKind::Quic => quic,
        }
    }

    /// A connection was accepted: open until the guard goes.
    pub(crate) fn connection(&self, kind: TransportKind) -> Held {
        let t = self.transport(kind);
        t.accepted.increment(1);
        Held::new(&t.connections)
    }

    pub(crate) fn received(&self, kind: TransportKind, bytes: usize) {
        self.transport(kind).received.increment(bytes as u64);
    }

    pub(crate) fn sent(&self, kind: TransportKind, bytes: usize) {
        self.transport(kind).sent.increment(bytes as u64);
    }

    pub(crate) fn request(&self, command: u16) {
        if let Some(c) = self.commands.get(usize::from(command)) {
            c.requests.increment(1);
        }
    }

    /// The final response to a request that arrived at `arrived`.
    pub(crate) fn response(&self, command: u16, status: NtStatus, arrived: Instant) {
        if let Some(c) = self.commands.get(usize::from(command)) {
            c.duration.record(arrived.elapsed().as_secs_f64());
        }
        if counts_as_error(status) {
            match status.status_name() {
                Some(name) => counter!(names::ERRORS, "status" => name).increment(1),
                None => counter!(names::ERRORS, "status" => format!("{:#010x}", status.0)).increment(1),
            }
        }
    }

    pub(crate) fn read(&self, bytes: usize) {
        self.read_bytes.increment(bytes as u64);
    }

    pub(crate) fn written(&self, bytes: usize) {
        self.written_bytes.increment(bytes as u64);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Whether a response with `status` is counted in [`names::ERRORS`]: every
/// error and warning (NO_MORE_FILES, BUFFER_OVERFLOW) but the one that
/// only says a logon goes on.
fn counts_as_error(status: NtStatus) -> bool {
    status.0 >= 0x8000_0000 && status != NtStatus::MORE_PROCESSING_REQUIRED
}

/// One unit of a gauge while it lives (a connection, an open).
pub struct Held(Option<Gauge>);

impl Held {
    pub(crate) fn new(gauge: &Gauge) -> Held {
        gauge.increment(1.0);
        Held(Some(gauge.clone()))
    }

    /// Counts nothing (metrics off).
    pub const NONE: Held = Held(None);
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(g) = &self.0 {
            g.decrement(1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_and_warnings_count_but_not_success_pending_or_logon_steps() {
        assert!(counts_as_error(NtStatus::OBJECT_NAME_NOT_FOUND));
        assert!(counts_as_error(NtStatus::NO_MORE_FILES));
        assert!(counts_as_error(NtStatus::BUFFER_OVERFLOW));
        assert!(counts_as_error(NtStatus(0xC0FF_FFFF)));
        assert!(!counts_as_error(NtStatus::SUCCESS));
        assert!(!counts_as_error(NtStatus::PENDING));
        assert!(!counts_as_error(NtStatus::NOTIFY_ENUM_DIR));
        assert!(!counts_as_error(NtStatus::MORE_PROCESSING_REQUIRED));
    }

    #[test]
    fn every_command_has_a_name() {
        for op in 0..crate::dispatch::TABLE.len() as u16 {
            assert!(Command(op).name().is_some(), "opcode {op:#x}");
        }
    }
}
