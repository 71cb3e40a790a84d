//! The `smbq_quic_*` metrics of each connection's path and congestion
//! control (`smbq_server::metrics::names`), sampled when the connection
//! starts, every [`SAMPLE_EVERY`] and when it ends (`sample`).
//!
//! No series carries a connection label: a server may hold thousands of
//! connections, each of which would be a series of its own (and one left
//! behind by every connection that ended). So:
//! - the window, the pacing rate and the RTTs are **histograms** of the
//!   samples of every connection: the distribution of the windows and
//!   RTTs the server's connections had (a gauge of the latest value would
//!   show whichever connection was sampled last, which says nothing once
//!   there are two);
//! - packets sent, lost and bytes lost and congestion events are
//!   **counters** that each sample advances by what the connection did
//!   since its previous sample, so their rates are the server's.
//!
//! Retransmitted packets have no series of their own: quinn resends a
//! lost packet's frames, never the packet, so the packets whose content
//! was resent are the lost ones (`smbq_quic_lost_packets_total`; see
//! `smbq_quictrace::figures`). The smoothed RTT is `smbq_quic_rtt_seconds`.

use metrics::{Counter, Histogram};
use smbq_quictrace::Figures;
use smbq_server::metrics::names;
use std::time::Duration;

/// How often `sample` samples a connection.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// One connection's handles, and what its counters have been given.
pub(crate) struct PathMetrics {
    rtt: Histogram,
    min_rtt: Histogram,
    cwnd: Histogram,
    pacing_rate: Histogram,
    sent: Counter,
    lost: Counter,
    lost_bytes: Counter,
    congestion_events: Counter,
    counted: Figures,
}

impl PathMetrics {
    /// The handles of the installed recorder.
    pub(crate) fn registered() -> PathMetrics {
        PathMetrics {
            rtt: metrics::histogram!(names::QUIC_RTT),
            min_rtt: metrics::histogram!(names::QUIC_MIN_RTT),
            cwnd: metrics::histogram!(names::QUIC_CWND),
            pacing_rate: metrics::histogram!(names::QUIC_PACING_RATE),
            sent: metrics::counter!(names::QUIC_SENT_PACKETS),
            lost: metrics::counter!(names::QUIC_LOST_PACKETS),
            lost_bytes: metrics::counter!(names::QUIC_LOST_BYTES),
            congestion_events: metrics::counter!(names::QUIC_CONGESTION_EVENTS),
            counted: Figures::default(),
        }
    }

    /// One sample: the histograms get the figures (the pacing rate only
    /// from a controller that gives one), the counters what grew since
    /// the previous sample.
    pub(crate) fn record(&mut self, f: &Figures) {
        self.rtt.record(f.srtt.as_secs_f64());
        self.min_rtt.record(f.min_rtt.as_secs_f64());
        self.cwnd.record(f.cwnd as f64);
        if let Some(bps) = f.pacing_rate {
            self.pacing_rate.record(bps as f64);
        }
        let c = &self.counted;
        self.sent.increment(f.sent_packets.saturating_sub(c.sent_packets));
        self.lost.increment(f.lost_packets.saturating_sub(c.lost_packets));
        self.lost_bytes.increment(f.lost_bytes.saturating_sub(c.lost_bytes));
        self.congestion_events.increment(f.congestion_events.saturating_sub(c.congestion_events));
        self.counted = *f;
    }
}

/// Feed `conn`'s figures into the metrics when it starts, every
/// [`SAMPLE_EVERY`], and when it ends.
pub(crate) async fn sample(conn: quinn::Connection) {
    let mut m = PathMetrics::registered();
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    loop {
        let end = tokio::select! {
            _ = conn.closed() => true,
            _ = tick.tick() => false,
        };
        m.record(&Figures::of(&conn));
        if end {
            return;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    #[derive(Default)]
    struct Samples(Mutex<Vec<f64>>);
    impl metrics::HistogramFn for Samples {
        fn record(&self, value: f64) {
            self.0.lock().unwrap().push(value);
        }
    }

    struct Handles {
        rtt: Arc<Samples>,
        min_rtt: Arc<Samples>,
        cwnd: Arc<Samples>,
        pacing: Arc<Samples>,
        sent: Arc<AtomicU64>,
        lost: Arc<AtomicU64>,
        lost_bytes: Arc<AtomicU64>,
        events: Arc<AtomicU64>,
    }

    fn metrics() -> (PathMetrics, Handles) {
        let h = Handles {
            rtt: Arc::default(),
            min_rtt: Arc::default(),
            cwnd: Arc::default(),
            pacing: Arc::default(),
            sent: Arc::default(),
            lost: Arc::default(),
            lost_bytes: Arc::default(),
            events: Arc::default(),
        };
        (on(&h), h)
    }

    /// A connection's handles onto the series `h` counts.
    fn on(h: &Handles) -> PathMetrics {
        PathMetrics {
            rtt: Histogram::from_arc(h.rtt.clone()),
            min_rtt: Histogram::from_arc(h.min_rtt.clone()),
            cwnd: Histogram::from_arc(h.cwnd.clone()),
            pacing_rate: Histogram::from_arc(h.pacing.clone()),
            sent: Counter::from_arc(h.sent.clone()),
            lost: Counter::from_arc(h.lost.clone()),
            lost_bytes: Counter::from_arc(h.lost_bytes.clone()),
            congestion_events: Counter::from_arc(h.events.clone()),
            counted: Figures::default(),
        }
    }

    fn figures(sent: u64, lost: u64, cwnd: u64, pacing_rate: Option<u64>) -> Figures {
        Figures {
            cwnd,
            pacing_rate,
            srtt: Duration::from_millis(40),
            min_rtt: Duration::from_millis(25),
            sent_packets: sent,
            lost_packets: lost,
            lost_bytes: lost * 1200,
            congestion_events: lost.min(1),
            mtu: 1452,
            ..Figures::default()
        }
    }

    #[test]
    fn samples_feed_histograms_and_counters_grow_by_what_the_connection_did_since() {
        let (mut m, h) = metrics();
        m.record(&figures(10, 0, 14_720, None));
        m.record(&figures(2_010, 3, 300_000, Some(50_000_000)));
        // The end: nothing more happened; a counter going back (never, in
        // quinn) adds nothing.
        m.record(&figures(2_010, 3, 290_000, Some(48_000_000)));
        m.record(&figures(2_000, 3, 290_000, None));
        assert_eq!(h.sent.load(Ordering::Relaxed), 2_010);
        assert_eq!(h.lost.load(Ordering::Relaxed), 3);
        assert_eq!(h.lost_bytes.load(Ordering::Relaxed), 3_600);
        assert_eq!(h.events.load(Ordering::Relaxed), 1);
        assert_eq!(*h.cwnd.0.lock().unwrap(), [14_720.0, 300_000.0, 290_000.0, 290_000.0]);
        assert_eq!(*h.pacing.0.lock().unwrap(), [50e6, 48e6], "only samples that have a pacing rate");
        assert_eq!(*h.rtt.0.lock().unwrap(), [0.04; 4]);
        assert_eq!(*h.min_rtt.0.lock().unwrap(), [0.025; 4]);
    }

    #[test]
    fn two_connections_add_up_in_the_counters() {
        let (mut a, h) = metrics();
        let mut b = on(&h);
        a.record(&figures(100, 1, 20_000, None));
        b.record(&figures(50, 0, 20_000, None));
        a.record(&figures(150, 1, 20_000, None));
        assert_eq!(h.sent.load(Ordering::Relaxed), 200);
        assert_eq!(h.lost.load(Ordering::Relaxed), 1);
    }
}
