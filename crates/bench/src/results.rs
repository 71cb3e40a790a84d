//! `results.json` of `smbq-bench suite`: every figure of a run, with what
//! it ran on. `report.rs` turns it into `report.md` and charts, and
//! `compare.rs` sets two of them side by side.
//!
//! Each figure keeps the value of every repetition (`Figure::reps`), so a
//! reader gets the median and the spread, and a comparison can tell a
//! change from noise.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The whole run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Results {
    /// Format version of this file.
    pub schema: u32,
    /// When the run started, RFC 3339 UTC.
    pub started: String,
    /// `git rev-parse HEAD` of the tree the bench was built from, and
    /// whether it had uncommitted changes.
    pub git_commit: String,
    pub git_dirty: bool,
    pub machine: Machine,
    /// Version string of every peer (smbq, smbd, sshd, rustc, kernel...),
    /// or "missing".
    pub versions: BTreeMap<String, String>,
    /// The run's parameters (mode, reps, ramp, runtime, sizes...).
    pub params: BTreeMap<String, serde_json::Value>,
    /// The link emulator's self-check at each setting the run used.
    pub link_checks: Vec<LinkCheck>,
    pub results: Vec<Entry>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Machine {
    pub cpu_model: String,
    pub cpus: usize,
    pub memory_gib: f64,
    pub kernel: String,
}

/// The emulator measured against what it was set to (BENCHMARKS.md, link
/// emulation).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LinkCheck {
    pub delay_ms: f64,
    pub loss_pct: f64,
    /// Rate limit, Mbit/s; None: unlimited.
    pub rate_mbit: Option<f64>,
    /// Median round-trip time of UDP echoes through the link.
    pub rtt_ms: f64,
    /// Datagrams lost one way, of `probes` sent.
    pub measured_loss_pct: f64,
    pub probes: u64,
    /// TCP bulk rate through the link; measured only without impairment.
    pub throughput_gbit: Option<f64>,
    /// Whether every check held: RTT within 1 ms of twice the delay, loss
    /// within 0.5 points, and at least 2 Gbit/s when measured.
    pub ok: bool,
}

/// One system in one case of one scenario, e.g. S1 / read / smbq-quic.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Entry {
    /// "S1" .. "S6".
    pub scenario: String,
    /// What was done: "read", "write", "randread", "group1-upload",
    /// "phases-1mib", "conns"...
    pub case: String,
    /// Row: "smbq-quic", "smbq-tcp-enc", "samba-tcp-enc", "samba-tcp-sign",
    /// "scp", "raw-tcp", "tcp-tls", "raw-quic".
    pub system: String,
    /// Where on a scenario's axes: "delay_ms", "loss_pct", "connections".
    #[serde(default)]
    pub point: BTreeMap<String, f64>,
    /// "ok", or why not: "not run: smbd missing", "failed: ...".
    pub status: String,
    /// Figures by name ("mb_s", "iops", "lat_p50_us", "lat_p99_us",
    /// "lat_p999_us", "server_cpu_s_per_gib", "client_cpu_s_per_gib",
    /// "server_rss_mib", "seconds", "handshake_ms", ...).
    #[serde(default)]
    pub figures: BTreeMap<String, Figure>,
}

/// One figure: its value in every repetition.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Figure {
    pub reps: Vec<f64>,
}

impl Figure {
    /// The median of the repetitions (the mean of the middle two for an
    /// even count); NaN when there are none.
    pub fn median(&self) -> f64 {
        let mut v = self.reps.clone();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    /// The spread of the repetitions, (max - min) / median; 0 for one.
    pub fn spread(&self) -> f64 {
        let lo = self.reps.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = self.reps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let m = self.median();
        if self.reps.len() < 2 || m == 0.0 {
            0.0
        } else {
            (hi - lo) / m.abs()
        }
    }
}

impl Entry {
    /// The key that matches this entry across two runs.
    pub fn key(&self) -> String {
        let point: Vec<String> = self.point.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}/{}/{}/{}", self.scenario, self.case, self.system, point.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        let f = Figure { reps: vec![3.0, 1.0, 2.0] };
        assert_eq!(f.median(), 2.0);
        assert_eq!(f.spread(), 1.0);
        let f = Figure { reps: vec![4.0, 1.0, 2.0, 3.0] };
        assert_eq!(f.median(), 2.5);
        assert!(Figure::default().median().is_nan());
        assert_eq!(Figure { reps: vec![5.0] }.spread(), 0.0);
    }
}
