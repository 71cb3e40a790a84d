//! smbq's congestion controller (`congestion = "smbq"`, the default): a
//! model-based controller in the manner of BBR (draft-cardwell-iccrg-bbr-
//! congestion-control), written for quinn's [`Controller`] interface and
//! for what smbq's users meet: lossy hotel and mobile links, where a
//! loss-based controller mistakes random loss for congestion, and LANs,
//! where a fresh connection must reach speed as quickly as slow start does.
//!
//! quinn's own BBR (a port of Chromium's BBRv1, marked experimental) was
//! measured to slow every fresh connection (a 1 MiB read 207 ms against
//! CUBIC's 6 ms on loopback): its minimum-RTT filter counts as expired
//! while no PROBE_RTT has ever started, so the first ACK of a connection
//! sends it into PROBE_RTT, which holds the window at a few packets for
//! 200 ms. Here:
//!
//! - **Start-up is a fast slow start.** The window starts at quinn's
//!   CUBIC's initial window and grows by [`STARTUP_GAIN`] - 1 times the
//!   bytes acknowledged, so by BBR's start-up gain of 2/ln 2 per round trip
//!   where slow start doubles, until the delivery rate stops growing by a
//!   quarter for three rounds (full bandwidth) or a round loses heavily.
//!   Random loss does not end it.
//! - **No PROBE_RTT before full bandwidth**, nor before an RTT sample: the
//!   minimum RTT expires only after [`MIN_RTT_WINDOW`] without a sample at
//!   or below it, counted from the first sample; PROBE_RTT then holds the
//!   window at half the estimated bandwidth-delay product (BBRv2's choice,
//!   gentler than four packets) for [`PROBE_RTT_TIME`] and one round.
//! - **Cruising** (PROBE_BW): the window is [`CWND_GAIN`] (1.25, where
//!   BBRv1 has 2: see there why) times the
//!   bandwidth-delay product (the windowed maximum of delivery-rate samples
//!   over [`BW_ROUNDS`] rounds times the minimum RTT), plus the largest ACK
//!   aggregation seen lately, so ACKs that arrive in bursts (quinn
//!   acknowledges a batch of datagrams at once, and asks peers to ACK every
//!   8 packets) do not starve the sender. quinn's pacer spreads the window
//!   over the smoothed RTT; this controller sets no pacing rate of its own
//!   (quinn 0.11 has no hook for one), so the window is its only lever, and
//!   probing for more bandwidth happens through the window's headroom.
//! - **Random loss is tolerated**: a round with a loss rate below
//!   [`HEAVY_LOSS`] changes nothing. Safety valves: a round above it
//!   (congestion a window cannot explain away: a shallow buffer, many
//!   competing flows) caps the window at [`LOSS_BETA`] of itself (BBRv2's
//!   inflight_hi), a cap each calmer round raises by an eighth until it no
//!   longer binds; persistent congestion (RFC 9002 section 7.6: every
//!   packet over a period lost) drops the window to the minimum and
//!   starts over.
//!
//! The model ([`Model`]) takes plain times and sizes, so the tests drive it
//! over a simulated path (delay, random loss, a rate limit and a drop-tail
//! queue) and assert its states and windows; [`Smbq`] adapts it to quinn.
//! Delivery-rate samples follow draft-cheng-iccrg-delivery-rate-estimation:
//! each send batch records how much had been delivered when it left, and an
//! ACK of it yields (delivered now - delivered then) / max(send interval,
//! ACK interval).

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;
use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The window in cruise, in bandwidth-delay products. BBRv1's 2 keeps a
/// bandwidth-delay product queued at the bottleneck and, since loss does
/// not slow it, starves a loss-based flow on a queue of one BDP: beside one
/// Linux TCP CUBIC flow (100 Mbit/s, 20 ms one way, `smbq-bench suite
/// --scenarios F`) it took 0.84-0.89 of the link, and 0.98 beside the
/// simulated loss-based flow of the unit tests, where 1.5 took 0.76, 1.2
/// to 1.3 took 0.47-0.53 and 1.1 only 0.26. Probing for more bandwidth
/// needs headroom above one product; 1.25 is quinn's pacer's own headroom.
pub const CWND_GAIN: f64 = 1.25;
/// The least round trip the window is sized for. On a LAN or loopback the
/// path's minimum RTT is tens of microseconds, but under load the hosts'
/// own batching (GRO, ACK frequency, scheduling on busy cores) holds
/// packets for milliseconds; a window of 1.25 times bandwidth x 30 µs then
/// limits the delivery rate, the rate samples fall, the window with them,
/// and the transfer collapses (seen over a 1500-byte veth pair: 80-101
/// MB/s where CUBIC ran at 700-890). Sizing for at least 4 ms keeps the
/// window above what a busy host holds; paths with real delay are
/// unaffected.
pub const MIN_RTT_FLOOR: Duration = Duration::from_millis(4);
/// Rounds over which the bandwidth estimate is the maximum sample.
pub const BW_ROUNDS: usize = 10;
/// How long a minimum RTT stands without being seen again.
pub const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// How long PROBE_RTT holds the window down (at least one round too).
pub const PROBE_RTT_TIME: Duration = Duration::from_millis(200);
/// How much the window grows per round trip in start-up (BBR's high gain,
/// 2/ln 2: the smallest that doubles the delivery rate each round). With
/// slow start's 2 a fresh connection over 30 ms took 0.45 s for S4's photo
/// group where TCP (the kernel's BBR) took 0.41.
pub const STARTUP_GAIN: f64 = 2.885;
/// Start-up ends when the bandwidth estimate has not grown by this factor
/// in [`STARTUP_FLAT_ROUNDS`] rounds.
pub const STARTUP_GROWTH: f64 = 1.25;
pub const STARTUP_FLAT_ROUNDS: u32 = 3;
/// A round that loses more than this share of the bytes it settles is
/// heavy loss (5% random loss is not).
pub const HEAVY_LOSS: f64 = 0.15;
/// What heavy loss leaves of the window (the cap it sets).
pub const LOSS_BETA: f64 = 0.7;
/// Send batches remembered for rate samples (a batch is one GSO send; the
/// oldest are forgotten first, so memory stays bounded on any path).
const MAX_RECORDS: usize = 4096;
/// quinn's datagram size before MTU discovery (RFC 9000 section 14).
const BASE_DATAGRAM: u64 = 1200;

/// The controller's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Startup,
    ProbeBw,
    ProbeRtt,
}

/// What was known when a batch of packets left.
#[derive(Clone, Copy, Debug)]
struct SendRecord {
    sent: Instant,
    /// Bytes delivered (acknowledged) by then.
    delivered: u64,
    /// When the last of those was acknowledged.
    delivered_time: Instant,
    /// When the packet most recently acknowledged by then was sent.
    first_sent: Instant,
}

/// The controller's state, driven with plain values (see the module docs).
#[derive(Clone, Debug)]
pub struct Model {
    mode: Mode,
    mtu: u64,
    initial_window: u64,
    cwnd: u64,
    // Delivery-rate estimation.
    delivered: u64,
    delivered_time: Option<Instant>,
    first_sent: Option<Instant>,
    records: VecDeque<SendRecord>,
    /// The newest record acknowledged in the current ACK batch.
    batch_best: Option<SendRecord>,
    batch_acked: u64,
    // Rounds: a round ends when a packet sent after its start is acked.
    round: u64,
    next_round_delivered: u64,
    round_start: bool,
    /// Per-round maximum delivery rate (bytes/s) of the last rounds,
    /// indexed by round modulo [`BW_ROUNDS`].
    bw_samples: [(u64, u64); BW_ROUNDS],
    // Minimum RTT.
    min_rtt: Option<Duration>,
    min_rtt_stamp: Option<Instant>,
    /// The minimum RTT expired at an ACK of the current batch.
    min_rtt_expired: bool,
    srtt: Option<Duration>,
    // Start-up.
    full_bw: u64,
    full_bw_rounds: u32,
    full_bw_reached: bool,
    // PROBE_RTT.
    probe_rtt_done: Option<Instant>,
    probe_rtt_round_done: bool,
    // ACK aggregation (the largest excess over the estimate, per epoch).
    agg_epoch_start: Option<Instant>,
    agg_epoch_bytes: u64,
    agg_max: [(u64, u64); BW_ROUNDS],
    // Loss in the current round.
    round_lost: u64,
    round_acked: u64,
    /// The cap heavy loss set on the window.
    inflight_hi: Option<u64>,
    /// Counters, for metrics and tests.
    pub heavy_loss_rounds: u64,
    pub probe_rtt_count: u64,
    pub persistent_congestion_events: u64,
}

impl Model {
    pub fn new(mtu: u16) -> Model {
        let mtu = u64::from(mtu).max(BASE_DATAGRAM);
        // quinn's CUBIC's default, RFC 9002 section 7.2: min(10 * 1200, max(2 * 1200, 14720)).
        let initial_window = 14_720u64.clamp(2 * BASE_DATAGRAM, 10 * BASE_DATAGRAM);
        Model {
            mode: Mode::Startup,
            mtu,
            initial_window,
            cwnd: initial_window,
            delivered: 0,
            delivered_time: None,
            first_sent: None,
            records: VecDeque::new(),
            batch_best: None,
            batch_acked: 0,
            round: 0,
            next_round_delivered: 0,
            round_start: false,
            bw_samples: [(0, 0); BW_ROUNDS],
            min_rtt: None,
            min_rtt_stamp: None,
            min_rtt_expired: false,
            srtt: None,
            full_bw: 0,
            full_bw_rounds: 0,
            full_bw_reached: false,
            probe_rtt_done: None,
            probe_rtt_round_done: false,
            agg_epoch_start: None,
            agg_epoch_bytes: 0,
            agg_max: [(0, 0); BW_ROUNDS],
            round_lost: 0,
            round_acked: 0,
            inflight_hi: None,
            heavy_loss_rounds: 0,
            probe_rtt_count: 0,
            persistent_congestion_events: 0,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn full_bandwidth_reached(&self) -> bool {
        self.full_bw_reached
    }

    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    pub fn round(&self) -> u64 {
        self.round
    }

    /// The bandwidth estimate, bytes per second (0 before any sample).
    pub fn bandwidth(&self) -> u64 {
        windowed_max(&self.bw_samples, self.round)
    }

    fn min_window(&self) -> u64 {
        4 * self.mtu
    }

    /// The bandwidth-delay product at `gain`, or None before the model has
    /// a bandwidth sample and an RTT.
    fn bdp(&self, gain: f64) -> Option<u64> {
        let bw = self.bandwidth();
        let rtt = self.min_rtt?.max(MIN_RTT_FLOOR);
        if bw == 0 {
            return None;
        }
        Some((bw as f64 * rtt.as_secs_f64() * gain) as u64)
    }

    /// The window quinn may fill.
    pub fn window(&self) -> u64 {
        match self.mode {
            Mode::ProbeRtt => self.probe_rtt_window(),
            _ => self.cwnd.min(self.inflight_hi.unwrap_or(u64::MAX)),
        }
    }

    fn probe_rtt_window(&self) -> u64 {
        self.bdp(0.5).unwrap_or(self.min_window()).max(self.min_window())
    }

    /// The rate quinn's pacer sends at (bits/s): 5/4 of the window per
    /// smoothed RTT (quinn-proto's `Pacer`).
    pub fn pacing_rate(&self) -> Option<u64> {
        let srtt = self.srtt?.as_secs_f64();
        (srtt > 0.0).then(|| (self.window() as f64 * 1.25 / srtt * 8.0) as u64)
    }

    /// A batch of packets left at `now`.
    pub fn on_sent(&mut self, now: Instant) {
        if self.records.len() == MAX_RECORDS {
            self.records.pop_front();
        }
        self.records.push_back(SendRecord {
            sent: now,
            delivered: self.delivered,
            delivered_time: self.delivered_time.unwrap_or(now),
            first_sent: self.first_sent.unwrap_or(now),
        });
    }

    /// A packet of `bytes` sent at `sent` was acknowledged at `now`; `srtt`
    /// is the connection's smoothed RTT.
    pub fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, srtt: Duration) {
        self.delivered += bytes;
        self.delivered_time = Some(now);
        self.batch_acked += bytes;
        self.round_acked += bytes;
        self.srtt = Some(srtt);
        // The RTT this packet saw (the ACK delay included, as in BBR).
        let rtt = now.saturating_duration_since(sent);
        let expired = self.min_rtt_stamp.is_some_and(|t| now.saturating_duration_since(t) > MIN_RTT_WINDOW);
        self.min_rtt_expired |= expired;
        if expired || self.min_rtt.is_none_or(|m| rtt <= m) {
            self.min_rtt = Some(rtt);
            self.min_rtt_stamp = Some(now);
        }
        // Find the batch this packet left in; older records are done with.
        let i = self.records.partition_point(|r| r.sent < sent);
        if let Some(r) = self.records.get(i).copied().filter(|r| r.sent == sent) {
            self.first_sent = Some(sent);
            if self.batch_best.is_none_or(|b| r.delivered >= b.delivered) {
                self.batch_best = Some(r);
            }
            if r.delivered >= self.next_round_delivered {
                self.next_round_delivered = self.delivered;
                self.round += 1;
                self.round_start = true;
            }
            self.records.drain(..i);
        }
    }

    /// `bytes` were declared lost; `persistent` when RFC 9002's persistent
    /// congestion holds.
    pub fn on_loss(&mut self, bytes: u64, persistent: bool) {
        self.round_lost += bytes;
        if persistent {
            self.persistent_congestion_events += 1;
            self.cwnd = self.min_window();
            self.bw_samples = [(0, 0); BW_ROUNDS];
            self.agg_max = [(0, 0); BW_ROUNDS];
            self.full_bw = 0;
            self.full_bw_rounds = 0;
            self.full_bw_reached = false;
            self.mode = Mode::Startup;
        }
    }

    /// The end of one ACK frame's acknowledgements; `app_limited` when
    /// the sender had run out of data before them.
    pub fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool) {
        let acked = std::mem::take(&mut self.batch_acked);
        let round_start = std::mem::take(&mut self.round_start);
        if let Some(p) = self.batch_best.take() {
            let send_elapsed = p.sent.saturating_duration_since(p.first_sent);
            let ack_elapsed = now.saturating_duration_since(p.delivered_time);
            let interval = send_elapsed.max(ack_elapsed);
            if interval > Duration::ZERO {
                let rate = ((self.delivered - p.delivered) as f64 / interval.as_secs_f64()) as u64;
                // An app-limited sample counts only if it raises the estimate.
                if !app_limited || rate > self.bandwidth() {
                    update_max(&mut self.bw_samples, self.round, rate);
                }
            }
        }
        if acked > 0 {
            self.update_aggregation(now, acked);
        }
        if round_start {
            self.end_round(app_limited);
        }
        match self.mode {
            Mode::Startup => {
                self.cwnd += (acked as f64 * (STARTUP_GAIN - 1.0)) as u64;
                if self.full_bw_reached {
                    self.mode = Mode::ProbeBw;
                    self.cwnd = self.cwnd.min(self.target_window());
                }
            }
            Mode::ProbeBw => {
                self.cwnd = (self.cwnd + acked).min(self.target_window());
            }
            Mode::ProbeRtt => {
                if self.probe_rtt_done.is_none() && in_flight <= self.probe_rtt_window() {
                    self.probe_rtt_done = Some(now + PROBE_RTT_TIME);
                    self.probe_rtt_round_done = false;
                    self.next_round_delivered = self.delivered;
                } else if round_start {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_done.is_some_and(|t| now >= t) && self.probe_rtt_round_done {
                    self.min_rtt_stamp = Some(now);
                    self.mode = Mode::ProbeBw;
                    self.probe_rtt_done = None;
                }
            }
        }
        self.cwnd = self.cwnd.max(self.min_window());
        // PROBE_RTT only once the pipe is known, and from a real sample.
        let expired = std::mem::take(&mut self.min_rtt_expired);
        if expired && self.full_bw_reached && self.mode == Mode::ProbeBw && !app_limited {
            self.mode = Mode::ProbeRtt;
            self.probe_rtt_done = None;
            self.probe_rtt_count += 1;
        }
    }

    /// The window in cruise: [`CWND_GAIN`] bandwidth-delay products plus
    /// the ACK aggregation seen lately.
    fn target_window(&self) -> u64 {
        let Some(bdp) = self.bdp(CWND_GAIN) else { return self.initial_window.max(self.cwnd) };
        (bdp + windowed_max(&self.agg_max, self.round)).max(self.min_window())
    }

    fn end_round(&mut self, app_limited: bool) {
        let lost = std::mem::take(&mut self.round_lost);
        let acked = std::mem::take(&mut self.round_acked);
        // Heavy loss: the safety valve (enough packets for a rate to mean
        // something) caps what may be in flight, as BBRv2's inflight_hi.
        let heavy = lost >= 8 * BASE_DATAGRAM && lost as f64 > HEAVY_LOSS * (lost + acked) as f64;
        if heavy {
            self.heavy_loss_rounds += 1;
            let hi = ((self.window() as f64 * LOSS_BETA) as u64).max(self.min_window());
            self.inflight_hi = Some(hi);
            self.cwnd = self.cwnd.min(hi);
            self.full_bw_reached = true;
            if self.mode == Mode::Startup {
                self.mode = Mode::ProbeBw;
            }
            return;
        }
        // A round without heavy loss lets the cap grow by an eighth, and
        // lifts it once it no longer binds.
        if let Some(hi) = self.inflight_hi {
            let hi = hi + hi / 8 + self.mtu;
            self.inflight_hi = (hi < 2 * self.target_window()).then_some(hi);
        }
        if self.full_bw_reached || app_limited {
            return;
        }
        let bw = self.bandwidth();
        if bw as f64 >= self.full_bw as f64 * STARTUP_GROWTH {
            self.full_bw = bw;
            self.full_bw_rounds = 0;
        } else {
            self.full_bw_rounds += 1;
            self.full_bw_reached = self.full_bw_rounds >= STARTUP_FLAT_ROUNDS;
        }
    }

    fn update_aggregation(&mut self, now: Instant, acked: u64) {
        let bw = self.bandwidth();
        let start = *self.agg_epoch_start.get_or_insert(now);
        let expected = (bw as f64 * now.saturating_duration_since(start).as_secs_f64()) as u64;
        if self.agg_epoch_bytes <= expected {
            self.agg_epoch_start = Some(now);
            self.agg_epoch_bytes = acked;
            return;
        }
        self.agg_epoch_bytes += acked;
        let excess = (self.agg_epoch_bytes - expected).min(self.cwnd);
        update_max(&mut self.agg_max, self.round, excess);
    }

    pub fn on_mtu_update(&mut self, mtu: u16) {
        self.mtu = u64::from(mtu).max(BASE_DATAGRAM);
        self.cwnd = self.cwnd.max(self.min_window());
    }
}

/// Raise round `round`'s slot of a per-round maximum filter.
fn update_max(slots: &mut [(u64, u64); BW_ROUNDS], round: u64, v: u64) {
    let slot = &mut slots[(round % BW_ROUNDS as u64) as usize];
    if slot.0 != round {
        *slot = (round, v);
    } else {
        slot.1 = slot.1.max(v);
    }
}

/// The maximum over the last [`BW_ROUNDS`] rounds.
fn windowed_max(slots: &[(u64, u64); BW_ROUNDS], round: u64) -> u64 {
    slots
        .iter()
        .filter(|(r, _)| round.saturating_sub(*r) < BW_ROUNDS as u64)
        .map(|s| s.1)
        .max()
        .unwrap_or(0)
}

/// [`Model`] behind quinn's [`Controller`] trait.
#[derive(Clone, Debug)]
pub struct Smbq(Model);

impl Controller for Smbq {
    fn on_sent(&mut self, now: Instant, _bytes: u64, _last_packet_number: u64) {
        self.0.on_sent(now);
    }

    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, _app_limited: bool, rtt: &RttEstimator) {
        self.0.on_ack(now, sent, bytes, rtt.get());
    }

    fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool, _largest: Option<u64>) {
        self.0.on_end_acks(now, in_flight, app_limited);
    }

    fn on_congestion_event(&mut self, _now: Instant, _sent: Instant, persistent: bool, lost_bytes: u64) {
        self.0.on_loss(lost_bytes, persistent);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.0.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        self.0.window()
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = ControllerMetrics::default();
        m.congestion_window = self.0.window();
        m.pacing_rate = self.0.pacing_rate();
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        self.0.initial_window
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// Builds [`Smbq`] controllers.
#[derive(Debug, Default)]
pub struct SmbqConfig;

impl ControllerFactory for SmbqConfig {
    fn build(self: Arc<Self>, _now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(Smbq(Model::new(current_mtu)))
    }
}

#[cfg(test)]
mod sim;
