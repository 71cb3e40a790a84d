//! A deterministic simulated path for [`Model`]: senders of fixed-size
//! packets paced as quinn paces (5/4 of the window per smoothed RTT), a
//! bottleneck with a rate limit and a drop-tail queue shared by all flows,
//! random loss before the queue, a one-way delay each way, a receiver that
//! acknowledges every `ack_every` packets (or 1 ms after the first one it
//! holds), loss declared three packets or 9/8 of an RTT behind the
//! largest acknowledged (RFC 9002 section 6.1), probe timeouts (6.2) and persistent
//! congestion (7.6). Time is simulated: the tests assert states and
//! windows, never seconds of the machine.

use super::*;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const MTU: u64 = 1452;

#[derive(Clone, Copy, Debug)]
struct PathConfig {
    one_way: Duration,
    loss: f64,
    /// Bottleneck rate, bytes per second.
    rate: u64,
    /// Drop-tail queue in front of the bottleneck, bytes.
    queue: u64,
    ack_every: u32,
    /// Everything sent in [start, end) is dropped.
    blackout: Option<(Duration, Duration)>,
}

impl PathConfig {
    /// A path with a queue of one bandwidth-delay product.
    fn new(one_way_ms: u64, loss: f64, mbit: u64) -> PathConfig {
        let rate = mbit * 1_000_000 / 8;
        let one_way = Duration::from_millis(one_way_ms);
        let mut p = PathConfig { one_way, loss, rate, queue: 0, ack_every: 1, blackout: None };
        p.queue = p.bdp().max(10 * MTU);
        p
    }

    fn bdp(&self) -> u64 {
        (self.rate as f64 * 2.0 * self.one_way.as_secs_f64()) as u64
    }
}

#[derive(Clone, Copy, Debug)]
struct Packet {
    pn: u64,
    sent: Instant,
    dropped: bool,
    done: bool,
}

/// A loss-based competitor, standing in for Linux's CUBIC at these
/// windows: slow start, then one packet per round trip, times 0.7 (CUBIC's
/// beta) at most once a round trip on loss.
struct Reno {
    cwnd: u64,
    ssthresh: u64,
    /// Losses of packets sent before this are part of the last event.
    recovery_start: Option<Instant>,
}

impl Reno {
    fn on_ack(&mut self, sent: Instant, bytes: u64) {
        if self.recovery_start.is_some_and(|r| sent < r) {
            return;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd += bytes;
        } else {
            self.cwnd += MTU * bytes / self.cwnd;
        }
    }

    fn on_loss(&mut self, now: Instant, sent: Instant) {
        if self.recovery_start.is_some_and(|r| sent < r) {
            return;
        }
        self.recovery_start = Some(now);
        self.cwnd = (self.cwnd * 7 / 10).max(2 * MTU);
        self.ssthresh = self.cwnd;
    }
}

struct Flow {
    model: Model,
    /// When set, this flow is a loss-based competitor and `model` idles.
    reno: Option<Reno>,
    /// Bytes the application still has to send (None: unlimited).
    remaining: Option<u64>,
    outstanding: VecDeque<Packet>,
    next_pn: u64,
    in_flight: u64,
    next_send: Instant,
    srtt: Option<Duration>,
    last_progress: Instant,
    backoff: u32,
    delivered: u64,
    lost_packets: u64,
    /// Packets the receiver holds unacknowledged: (pn, arrival).
    held: Vec<(u64, Instant)>,
    /// Every mode the model was in after an ACK, with its time.
    modes: Vec<(Instant, Mode)>,
    /// Delivered bytes when each whole simulated second ended.
    per_second: Vec<u64>,
}

impl Flow {
    fn window(&self) -> u64 {
        self.reno.as_ref().map_or_else(|| self.model.window(), |r| r.cwnd)
    }
}

struct Sim {
    path: PathConfig,
    start: Instant,
    now: Instant,
    link_free: Instant,
    rng: u64,
    flows: Vec<Flow>,
    /// ACK arrivals at the senders: (time, flow, index in `acks`).
    events: BinaryHeap<Reverse<(Instant, usize, usize)>>,
    acks: Vec<Vec<u64>>,
}

impl Sim {
    fn new(path: PathConfig, flows: usize) -> Sim {
        let start = Instant::now();
        let flow = || Flow {
            model: Model::new(MTU as u16),
            reno: None,
            remaining: None,
            outstanding: VecDeque::new(),
            next_pn: 0,
            in_flight: 0,
            next_send: start,
            srtt: None,
            last_progress: start,
            backoff: 1,
            delivered: 0,
            lost_packets: 0,
            held: Vec::new(),
            modes: Vec::new(),
            per_second: Vec::new(),
        };
        Sim {
            path,
            start,
            now: start,
            link_free: start,
            rng: 0x9e37_79b9_7f4a_7c15,
            flows: (0..flows).map(|_| flow()).collect(),
            events: BinaryHeap::new(),
            acks: Vec::new(),
        }
    }

    fn random(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    fn pto_base(&self, f: usize) -> Duration {
        self.flows[f].srtt.map_or(Duration::from_secs(1), |s| (s * 3 / 2).max(Duration::from_millis(10)))
    }

    /// The probe timeout, backed off.
    fn pto(&self, f: usize) -> Duration {
        self.pto_base(f) * self.flows[f].backoff
    }

    /// The next thing flow `f` does on its own: send, flush its receiver's
    /// delayed ACK, or time out.
    fn next_own_event(&self, f: usize) -> Option<Instant> {
        let fl = &self.flows[f];
        let can_send = fl.remaining != Some(0) && fl.in_flight + MTU <= fl.window();
        let send = can_send.then(|| fl.next_send.max(self.now));
        let flush = fl.held.first().map(|&(_, t)| t + Duration::from_millis(1));
        let pto = (fl.in_flight > 0).then(|| fl.last_progress + self.pto(f));
        [send, flush, pto].into_iter().flatten().min()
    }

    /// Run until `until` after the start, or until every flow has
    /// delivered all its data.
    fn run(&mut self, until: Duration) {
        let end = self.start + until;
        loop {
            if self.flows.iter().all(|f| f.remaining == Some(0) && f.in_flight == 0) {
                return;
            }
            let own = (0..self.flows.len()).filter_map(|f| Some((self.next_own_event(f)?, f))).min();
            let ack = self.events.peek().map(|Reverse((t, f, _))| (*t, *f));
            let next = match (own, ack) {
                (Some(o), Some(a)) => o.min(a),
                (Some(o), None) => o,
                (None, Some(a)) => a,
                (None, None) => return,
            };
            if next.0 > end {
                self.now = end;
                self.tick_seconds();
                return;
            }
            self.now = next.0;
            self.tick_seconds();
            if ack.is_some_and(|a| a <= next) {
                let Some(Reverse((_, f, i))) = self.events.pop() else { return };
                let pns = std::mem::take(&mut self.acks[i]);
                self.on_ack_frame(f, &pns);
            } else {
                self.own_event(next.1);
            }
        }
    }

    fn tick_seconds(&mut self) {
        let secs = self.elapsed().as_secs() as usize;
        for f in &mut self.flows {
            while f.per_second.len() < secs {
                f.per_second.push(f.delivered);
            }
        }
    }

    fn own_event(&mut self, f: usize) {
        let now = self.now;
        let fl = &self.flows[f];
        if fl.held.first().is_some_and(|&(_, t)| t + Duration::from_millis(1) <= now) {
            self.flush_acks(f, now);
        } else if fl.in_flight > 0 && fl.last_progress + self.pto(f) <= now {
            // The probe timeout (RFC 9002 section 6.2): one packet outside
            // the window, the next timeout twice as far; nothing is
            // declared lost until an ACK comes.
            self.send(f);
            let fl = &mut self.flows[f];
            fl.backoff *= 2;
            fl.last_progress = now;
        } else {
            self.send(f);
        }
    }

    fn send(&mut self, f: usize) {
        let now = self.now;
        let dropped_by_loss = self.random() < self.path.loss;
        let blackout = self.path.blackout.is_some_and(|(a, b)| self.elapsed() >= a && self.elapsed() < b);
        let fl = &mut self.flows[f];
        let pn = fl.next_pn;
        fl.next_pn += 1;
        fl.in_flight += MTU;
        if let Some(r) = &mut fl.remaining {
            *r = r.saturating_sub(MTU);
        }
        fl.model.on_sent(now);
        if let Some(srtt) = fl.srtt {
            let rate = fl.window() as f64 * 1.25 / srtt.as_secs_f64();
            fl.next_send = now.max(fl.next_send) + Duration::from_secs_f64(MTU as f64 / rate);
        }
        let mut dropped = dropped_by_loss || blackout;
        let mut arrival = None;
        if !dropped {
            let backlog = (self.link_free.saturating_duration_since(now).as_secs_f64() * self.path.rate as f64) as u64;
            if backlog + MTU > self.path.queue {
                dropped = true;
            } else {
                let depart = self.link_free.max(now) + Duration::from_secs_f64(MTU as f64 / self.path.rate as f64);
                self.link_free = depart;
                arrival = Some(depart + self.path.one_way);
            }
        }
        let fl = &mut self.flows[f];
        fl.outstanding.push_back(Packet { pn, sent: now, dropped, done: false });
        if let Some(t) = arrival {
            // The receiver's delayed-ACK timer fires before this arrival.
            if fl.held.first().is_some_and(|&(_, h)| h + Duration::from_millis(1) < t) {
                self.flush_acks(f, t);
            }
            let fl = &mut self.flows[f];
            fl.held.push((pn, t));
            if fl.held.len() as u32 >= self.path.ack_every {
                self.flush_acks(f, t);
            }
        }
    }

    /// The receiver of flow `f` acknowledges what it holds, at `at` at the
    /// latest (its delayed-ACK timer), the ACK reaching the sender one
    /// delay later.
    fn flush_acks(&mut self, f: usize, at: Instant) {
        let held = std::mem::take(&mut self.flows[f].held);
        let Some(&(_, first)) = held.first() else { return };
        let last = held.last().map_or(first, |h| h.1);
        let sent_at = last.max(at.min(first + Duration::from_millis(1)));
        self.acks.push(held.into_iter().map(|h| h.0).collect());
        self.events.push(Reverse((sent_at + self.path.one_way, f, self.acks.len() - 1)));
    }

    fn on_ack_frame(&mut self, f: usize, pns: &[u64]) {
        let now = self.now;
        let pto_base = self.pto_base(f);
        let fl = &mut self.flows[f];
        let Some(front) = fl.outstanding.front().map(|p| p.pn) else { return };
        let mut largest = None;
        for &pn in pns {
            let Some(p) = pn.checked_sub(front).and_then(|i| fl.outstanding.get_mut(i as usize)) else { continue };
            if p.done {
                continue;
            }
            p.done = true;
            largest = Some((pn, p.sent));
            fl.in_flight -= MTU;
            fl.delivered += MTU;
            let srtt = fl.srtt.unwrap_or(now - p.sent);
            let sent = p.sent;
            match &mut fl.reno {
                Some(r) => r.on_ack(sent, MTU),
                None => fl.model.on_ack(now, sent, MTU, srtt),
            }
        }
        let Some((largest, largest_sent)) = largest else { return };
        let sample = now - largest_sent;
        fl.srtt = Some(fl.srtt.map_or(sample, |s| (s * 7 + sample) / 8));
        fl.last_progress = now;
        fl.backoff = 1;
        fl.model.on_end_acks(now, fl.in_flight, fl.remaining == Some(0));
        // Packet- and time-threshold loss detection (RFC 9002 section
        // 6.1); persistent congestion when the lost packets span three
        // probe timeouts.
        let mut lost = 0;
        let mut span: Option<(Instant, Instant)> = None;
        let time_threshold = sample.max(fl.srtt.unwrap_or(sample)) * 9 / 8;
        for p in fl.outstanding.iter_mut().take_while(|p| p.pn < largest) {
            if !p.done && (p.pn + 3 <= largest || now - p.sent > time_threshold) {
                p.done = true;
                lost += MTU;
                span = Some((span.map_or(p.sent, |s| s.0), p.sent));
                debug_assert!(p.dropped);
            }
        }
        if let Some((first, last)) = span {
            fl.in_flight -= lost;
            fl.lost_packets += lost / MTU;
            match &mut fl.reno {
                Some(r) => r.on_loss(now, last),
                None => fl.model.on_loss(lost, last - first > 3 * pto_base),
            }
        }
        while fl.outstanding.front().is_some_and(|p| p.done) {
            fl.outstanding.pop_front();
        }
        fl.modes.push((now, fl.model.mode()));
    }

    /// Flow `f`'s goodput over whole simulated seconds [from, to), bytes/s.
    fn goodput(&self, f: usize, from: usize, to: usize) -> f64 {
        let d = &self.flows[f].per_second;
        let at = |s: usize| if s == 0 { 0 } else { d[s - 1] };
        (at(to) - at(from)) as f64 / (to - from) as f64
    }
}

#[test]
fn no_probe_rtt_at_the_first_ack() {
    // quinn 0.11's BBR enters PROBE_RTT here, for 200 ms.
    let mut m = Model::new(1200);
    let t0 = Instant::now();
    let initial = m.window();
    m.on_sent(t0);
    let t1 = t0 + Duration::from_millis(40);
    m.on_ack(t1, t0, 1200, Duration::from_millis(40));
    m.on_end_acks(t1, 0, false);
    assert_eq!(m.mode(), Mode::Startup);
    assert_eq!(m.window(), initial + (1200.0 * (STARTUP_GAIN - 1.0)) as u64, "start-up grows with what was acknowledged");
    assert_eq!(m.min_rtt(), Some(Duration::from_millis(40)));
}

#[test]
fn a_fresh_connection_grows_faster_than_slow_start() {
    // 1 MiB at 20 ms one way over 1 Gbit/s, against slow start (the
    // loss-based flow, alone) over the same path.
    let path = PathConfig::new(20, 0.0, 1000);
    let took = |reno: bool| {
        let mut sim = Sim::new(path, 1);
        sim.flows[0].remaining = Some(1 << 20);
        if reno {
            sim.flows[0].reno = Some(Reno { cwnd: sim.flows[0].model.window(), ssthresh: u64::MAX, recovery_start: None });
        }
        sim.run(Duration::from_secs(5));
        let f = &sim.flows[0];
        assert_eq!(f.delivered, (1u64 << 20).div_ceil(MTU) * MTU);
        if !reno {
            assert!(f.modes.iter().all(|(_, m)| *m == Mode::Startup), "no PROBE_RTT, no cruise before full bandwidth");
        }
        f.modes.last().map(|(t, _)| *t - sim.start).unwrap_or_default()
    };
    let (ours, slow_start) = (took(false), took(true));
    let rtt = Duration::from_millis(40);
    assert!(ours + rtt <= slow_start, "1 MiB in {ours:?} of simulated time, slow start {slow_start:?}");
}

#[test]
fn finds_the_bottleneck_and_cruises_at_its_rate() {
    let path = PathConfig::new(20, 0.0, 100);
    let mut sim = Sim::new(path, 1);
    sim.run(Duration::from_secs(10));
    let m = &sim.flows[0].model;
    assert!(m.full_bandwidth_reached());
    assert_ne!(m.mode(), Mode::Startup);
    let bw = m.bandwidth() as f64 / path.rate as f64;
    assert!((0.9..=1.15).contains(&bw), "bandwidth estimate {bw:.2} of the link");
    let goodput = sim.goodput(0, 2, 10) / path.rate as f64;
    assert!(goodput > 0.9, "goodput {goodput:.2} of the link");
    let bdp = path.bdp();
    assert!(m.window() >= bdp && m.window() <= 3 * bdp, "window {} for a BDP of {bdp}", m.window());
    assert!(m.records.len() < MAX_RECORDS);
}

#[test]
fn random_loss_does_not_shrink_the_window() {
    // The source document's S4 point: 25 ms one way, 5% random loss.
    let path = PathConfig::new(25, 0.05, 100);
    let mut sim = Sim::new(path, 1);
    sim.run(Duration::from_secs(10));
    let f = &sim.flows[0];
    assert!(f.lost_packets > 1000, "lost {}", f.lost_packets);
    // The valve fires only where start-up overshoots the queue.
    assert!(f.model.heavy_loss_rounds <= 2, "heavy-loss rounds {}", f.model.heavy_loss_rounds);
    let bw = f.model.bandwidth() as f64 / path.rate as f64;
    assert!(bw > 0.8, "bandwidth estimate {bw:.2} of the link");
    let goodput = sim.goodput(0, 3, 10) / path.rate as f64;
    assert!(goodput > 0.75, "goodput {goodput:.2} of the link under 5% loss");
    assert!(f.model.window() >= path.bdp(), "window {} for a BDP of {}", f.model.window(), path.bdp());
}

#[test]
fn heavy_loss_is_a_safety_valve() {
    let path = PathConfig::new(20, 0.30, 100);
    let mut sim = Sim::new(path, 1);
    sim.run(Duration::from_secs(10));
    let m = &sim.flows[0].model;
    assert!(m.heavy_loss_rounds > 10, "heavy-loss rounds {}", m.heavy_loss_rounds);
    assert!(m.window() < path.bdp(), "window {} under 30% loss, BDP {}", m.window(), path.bdp());
}

#[test]
fn persistent_congestion_starts_over_and_recovers() {
    let mut path = PathConfig::new(20, 0.0, 100);
    path.blackout = Some((Duration::from_secs(3), Duration::from_secs(4)));
    let mut sim = Sim::new(path, 1);
    sim.run(Duration::from_secs(3));
    assert!(sim.flows[0].model.full_bandwidth_reached());
    assert_eq!(sim.flows[0].model.persistent_congestion_events, 0);
    sim.run(Duration::from_secs(6));
    let f = &sim.flows[0];
    assert_eq!(f.model.persistent_congestion_events, 1);
    let after = sim.start + Duration::from_secs(4);
    let first = f.modes.iter().find(|(t, _)| *t > after);
    assert_eq!(first.map(|m| m.1), Some(Mode::Startup), "starts over after the blackout");
    sim.run(Duration::from_secs(10));
    let m = &sim.flows[0].model;
    assert!(m.full_bandwidth_reached());
    let bw = m.bandwidth() as f64 / path.rate as f64;
    assert!(bw > 0.9, "bandwidth estimate {bw:.2} after the blackout");
}

#[test]
fn probe_rtt_comes_only_after_full_bandwidth_and_gives_the_window_back() {
    let path = PathConfig::new(20, 0.0, 100);
    let mut sim = Sim::new(path, 1);
    sim.run(Duration::from_secs(25));
    let f = &sim.flows[0];
    let first_cruise = f.modes.iter().find(|(_, m)| *m == Mode::ProbeBw).map(|(t, _)| *t);
    let first_probe = f.modes.iter().find(|(_, m)| *m == Mode::ProbeRtt).map(|(t, _)| *t);
    let (Some(cruise), Some(probe)) = (first_cruise, first_probe) else {
        panic!("cruise {first_cruise:?}, PROBE_RTT {first_probe:?}");
    };
    assert!(probe > cruise + MIN_RTT_WINDOW, "PROBE_RTT {:?} after cruising began", probe - cruise);
    assert!((1..=3).contains(&f.model.probe_rtt_count), "{} PROBE_RTTs", f.model.probe_rtt_count);
    // Each PROBE_RTT ends: the flow cruises again at the link's rate.
    let goodput = sim.goodput(0, 2, 25) / path.rate as f64;
    assert!(goodput > 0.9, "goodput {goodput:.2} with PROBE_RTT");
}

#[test]
fn stretched_acks_do_not_starve_the_sender() {
    // A receiver that acknowledges every 8 packets (smbq's ACK frequency).
    let mut path = PathConfig::new(5, 0.0, 400);
    path.ack_every = 8;
    let mut sim = Sim::new(path, 1);
    sim.run(Duration::from_secs(3));
    let goodput = sim.goodput(0, 1, 3) / path.rate as f64;
    assert!(goodput > 0.9, "goodput {goodput:.2} with an ACK per 8 packets");
}

#[test]
fn beside_a_loss_based_flow_neither_starves() {
    // Issue 33's fairness point: 100 Mbit/s, a queue of one BDP, 20 ms one
    // way, beside one loss-based flow, for 30 s.
    let path = PathConfig::new(20, 0.0, 100);
    let mut sim = Sim::new(path, 2);
    sim.flows[1].reno = Some(Reno { cwnd: 10 * MTU, ssthresh: u64::MAX, recovery_start: None });
    sim.run(Duration::from_secs(30));
    let ours = sim.goodput(0, 0, 30);
    let theirs = sim.goodput(1, 0, 30);
    let share = ours / (ours + theirs);
    assert!((1.0 / 3.0..=2.0 / 3.0).contains(&share), "our share {share:.2}");
    assert!((ours + theirs) / path.rate as f64 > 0.9, "the link is used");
}

#[test]
fn a_lan_whose_acks_come_late_does_not_collapse() {
    // A path of microseconds whose receiver acknowledges every 64 packets
    // (about 0.75 ms at 1 Gbit/s): the RTT under load is many times the
    // minimum, as on a busy host. Sized by the minimum RTT alone, the
    // window would hold a tenth of what the ACK delay needs.
    let mut path = PathConfig::new(0, 0.0, 1000);
    path.one_way = Duration::from_micros(15);
    path.ack_every = 64;
    // A host's queue (a veth's 1000 packets), not one BDP of microseconds.
    path.queue = 1000 * MTU;
    let mut sim = Sim::new(path, 1);
    sim.run(Duration::from_secs(2));
    let goodput = sim.goodput(0, 1, 2) / path.rate as f64;
    assert!(goodput > 0.9, "goodput {goodput:.2} of the link");
}
