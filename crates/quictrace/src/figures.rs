//! A QUIC connection's congestion and loss figures at one moment, as the
//! server's metrics (`smbq_quic_*`), the client's `--json` summary and the
//! end of a qlog trace ([`crate::qlog`]) report them.
//!
//! Where each comes from (quinn 0.11.12 over quinn-proto 0.11.19):
//! - `ConnectionStats::path` gives the congestion window, the smoothed and
//!   the minimum RTT (quinn-proto's `RttEstimator::get` and `min`, the
//!   latter ignoring ACK delay), packets sent (PLPMTUD probes included),
//!   packets and bytes lost (probes excluded), congestion events and the
//!   path MTU reached.
//! - The controller (`Connection::congestion_state().metrics()`) gives the
//!   slow-start threshold and the pacing rate in bits/s; quinn's CUBIC and
//!   NewReno give no pacing rate (their pacer derives one from the window
//!   and the RTT but does not report it), BBR does.
//! - Retransmitted packets: quinn has no such count, because it never
//!   resends a packet. When it declares a packet lost it queues that
//!   packet's retransmittable frames (stream data, control frames) again,
//!   and they go out in new packets among new data. So every lost packet
//!   (an ACK-only packet is never declared lost: it is not tracked) is a
//!   packet whose content was retransmitted, and
//!   [`Figures::retransmitted_packets`] is the lost count; PTO probes
//!   (which may repeat data not yet declared lost) are not counted, as
//!   quinn counts them nowhere.

use quinn::congestion::ControllerMetrics;
use quinn::ConnectionStats;
use std::time::Duration;

/// See the module documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Slow-start threshold, bytes, if the controller has one (CUBIC, NewReno).
    pub ssthresh: Option<u64>,
    /// Pacing rate, bits/s, if the controller gives one (BBR).
    pub pacing_rate: Option<u64>,
    pub min_rtt: Duration,
    /// Smoothed RTT (RFC 9002 5.3), what `Connection::rtt()` returns.
    pub srtt: Duration,
    pub sent_packets: u64,
    pub lost_packets: u64,
    pub lost_bytes: u64,
    /// Times the controller reacted to loss or ECN marks (a window cut).
    pub congestion_events: u64,
    /// The largest UDP payload the path carries now (MTU discovery's result).
    pub mtu: u16,
}

impl Figures {
    /// The figures of `conn` now (two locks of its state; the controller
    /// is cloned once to read its metrics).
    pub fn of(conn: &quinn::Connection) -> Figures {
        Figures::from_parts(&conn.stats(), &conn.congestion_state().metrics())
    }

    /// The figures in quinn's statistics and its controller's metrics.
    pub fn from_parts(stats: &ConnectionStats, controller: &ControllerMetrics) -> Figures {
        let p = &stats.path;
        Figures {
            cwnd: p.cwnd,
            ssthresh: controller.ssthresh,
            pacing_rate: controller.pacing_rate,
            min_rtt: p.min_rtt,
            srtt: p.rtt,
            sent_packets: p.sent_packets,
            lost_packets: p.lost_packets,
            lost_bytes: p.lost_bytes,
            congestion_events: p.congestion_events,
            mtu: p.current_mtu,
        }
    }

    /// Packets whose content was sent again: the packets declared lost
    /// (see the module documentation for why).
    pub fn retransmitted_packets(&self) -> u64 {
        self.lost_packets
    }

    /// As the client's `--json` and the qlog trace's last event show them:
    /// `cwnd_bytes`, `ssthresh_bytes` and `pacing_rate_bps` (null when the
    /// controller has none), `min_rtt_ms`, `srtt_ms`, `packets_sent`,
    /// `packets_lost`, `packets_retransmitted`, `lost_bytes`,
    /// `congestion_events`, `mtu`.
    pub fn json(&self) -> serde_json::Value {
        let ms = |d: Duration| d.as_nanos() as f64 / 1e6;
        serde_json::json!({
            "cwnd_bytes": self.cwnd,
            "ssthresh_bytes": self.ssthresh,
            "pacing_rate_bps": self.pacing_rate,
            "min_rtt_ms": ms(self.min_rtt),
            "srtt_ms": ms(self.srtt),
            "packets_sent": self.sent_packets,
            "packets_lost": self.lost_packets,
            "packets_retransmitted": self.retransmitted_packets(),
            "lost_bytes": self.lost_bytes,
            "congestion_events": self.congestion_events,
            "mtu": self.mtu,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Statistics and controller metrics as quinn would report them.
    fn sample(pacing: Option<u64>) -> (ConnectionStats, ControllerMetrics) {
        let mut s = ConnectionStats::default();
        s.path.cwnd = 120_000;
        s.path.rtt = Duration::from_micros(2500);
        s.path.min_rtt = Duration::from_micros(900);
        s.path.sent_packets = 1000;
        s.path.lost_packets = 7;
        s.path.lost_bytes = 7 * 1452;
        s.path.congestion_events = 2;
        s.path.current_mtu = 1452;
        let mut m = ControllerMetrics::default();
        m.congestion_window = 120_000;
        m.ssthresh = Some(60_000);
        m.pacing_rate = pacing;
        (s, m)
    }

    #[test]
    fn figures_from_stats_and_controller() {
        let (s, m) = sample(None);
        let f = Figures::from_parts(&s, &m);
        assert_eq!(f.cwnd, 120_000);
        assert_eq!(f.srtt, Duration::from_micros(2500));
        assert_eq!(f.min_rtt, Duration::from_micros(900));
        assert_eq!((f.sent_packets, f.lost_packets, f.retransmitted_packets()), (1000, 7, 7));
        assert_eq!((f.ssthresh, f.pacing_rate, f.mtu), (Some(60_000), None, 1452));
    }

    #[test]
    fn json_names_units_and_a_missing_pacing_rate() {
        let (s, m) = sample(None);
        let j = Figures::from_parts(&s, &m).json();
        assert_eq!(j["cwnd_bytes"], 120_000);
        assert!(j["pacing_rate_bps"].is_null());
        assert_eq!(j["srtt_ms"], 2.5);
        assert_eq!(j["min_rtt_ms"], 0.9);
        assert_eq!(j["packets_sent"], 1000);
        assert_eq!(j["packets_lost"], 7);
        assert_eq!(j["packets_retransmitted"], 7);
        assert_eq!(j["mtu"], 1452);
        let (s, m) = sample(Some(80_000_000));
        assert_eq!(Figures::from_parts(&s, &m).json()["pacing_rate_bps"], 80_000_000);
    }
}
