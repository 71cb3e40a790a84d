//! `smbq-bench compare A B`: two `results.json` side by side.
//!
//! Entries are matched by `Entry::key()` (scenario, case, system, point)
//! and figures by name. A change counts only when it is larger than the
//! noise both runs showed: the larger of the two spreads, (max − min) ÷
//! median of the repetitions, and never less than [`NOISE_FLOOR`]. With one
//! repetition on both sides the noise is unknown, and the verdict says so.

use crate::report::{fmt_num, load};
use crate::results::{Entry, Figure, Results};
use serde::Serialize;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(clap::Args, Clone, Debug)]
pub struct CompareArgs {
    /// The earlier run's `results.json` (A).
    pub a: PathBuf,
    /// The later run's `results.json` (B).
    pub b: PathBuf,
    /// Print the changes as one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The smallest relative change that counts as one, whatever the spreads.
pub const NOISE_FLOOR: f64 = 0.02;

/// Which way a figure is better.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Higher,
    Lower,
}

/// Which way `figure` is better, from its name; None: unknown.
pub fn better_when(figure: &str) -> Option<Better> {
    let f = figure;
    if f == "mb_s"
        || f == "iops"
        || f.contains("throughput")
        || f.ends_with("_mb_s")
        || f.ends_with("_iops")
        || f.ends_with("_gbit")
        || f.ends_with("_ops_s")
    {
        Some(Better::Higher)
    } else if f == "seconds"
        || f.ends_with("_ms")
        || f.ends_with("_us")
        || f.ends_with("_seconds")
        || f.starts_with("lat_")
        || f.starts_with("cpu_")
        || f.contains("_cpu_")
        || f.starts_with("rss_")
        || f.contains("_rss_")
    {
        Some(Better::Lower)
    } else {
        None
    }
}

#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// |change| within the larger spread (or the floor).
    WithinNoise,
    /// One repetition on both sides and |change| within the floor.
    NoiseUnknown,
    Better,
    Worse,
    /// Beyond noise, but the figure's name says nothing of direction.
    Changed,
    /// Entry or figure only in A.
    OnlyInA,
    /// Entry or figure only in B.
    OnlyInB,
    /// The entry's status differs ("ok" → "failed: ...").
    StatusChanged,
    /// No value on one side (no repetitions).
    NoValue,
}

/// One line of a comparison.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Change {
    /// `Entry::key()`.
    pub key: String,
    /// The figure; empty for a whole entry (only in A/B, status changed).
    pub figure: String,
    /// Medians.
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// (B − A) ÷ |A|, in percent.
    pub change_pct: Option<f64>,
    /// The noise the verdict was held against, in percent.
    pub noise_pct: Option<f64>,
    pub verdict: Verdict,
    /// Whether both sides had a single repetition.
    pub one_rep: bool,
    /// Statuses, for a status change.
    pub status_a: Option<String>,
    pub status_b: Option<String>,
}

impl Change {
    fn entry(key: String, verdict: Verdict, a: Option<&Entry>, b: Option<&Entry>) -> Change {
        Change {
            key,
            figure: String::new(),
            a: None,
            b: None,
            change_pct: None,
            noise_pct: None,
            verdict,
            one_rep: false,
            status_a: a.map(|e| e.status.clone()),
            status_b: b.map(|e| e.status.clone()),
        }
    }

    /// The verdict in words.
    pub fn verdict_text(&self) -> String {
        match self.verdict {
            Verdict::WithinNoise => "within noise".into(),
            Verdict::NoiseUnknown => "1 rep, noise unknown".into(),
            Verdict::Better if self.one_rep => "better (1 rep, noise unknown)".into(),
            Verdict::Worse if self.one_rep => "worse (1 rep, noise unknown)".into(),
            Verdict::Changed if self.one_rep => "changed (1 rep, noise unknown)".into(),
            Verdict::Better => "better".into(),
            Verdict::Worse => "worse".into(),
            Verdict::Changed => "changed".into(),
            Verdict::OnlyInA => "only in A".into(),
            Verdict::OnlyInB => "only in B".into(),
            Verdict::NoValue => "no value".into(),
            Verdict::StatusChanged => format!(
                "status: {} → {}",
                self.status_a.as_deref().unwrap_or("?"),
                self.status_b.as_deref().unwrap_or("?")
            ),
        }
    }
}

/// One figure of the same entry in A and B.
fn figure_change(key: &str, name: &str, fa: &Figure, fb: &Figure) -> Change {
    let (ma, mb) = (fa.median(), fb.median());
    let one_rep = fa.reps.len() < 2 && fb.reps.len() < 2;
    let mut c = Change {
        key: key.into(),
        figure: name.into(),
        a: Some(ma).filter(|m| m.is_finite()),
        b: Some(mb).filter(|m| m.is_finite()),
        change_pct: None,
        noise_pct: None,
        verdict: Verdict::NoValue,
        one_rep,
        status_a: None,
        status_b: None,
    };
    let (Some(a), Some(b)) = (c.a, c.b) else { return c };
    let change = if a != 0.0 {
        (b - a) / a.abs()
    } else if b == 0.0 {
        0.0
    } else {
        f64::INFINITY.copysign(b)
    };
    let noise = if one_rep { NOISE_FLOOR } else { fa.spread().max(fb.spread()).max(NOISE_FLOOR) };
    c.change_pct = Some(change * 100.0).filter(|v| v.is_finite());
    c.noise_pct = Some(noise * 100.0);
    c.verdict = if change.abs() <= noise {
        if one_rep {
            Verdict::NoiseUnknown
        } else {
            Verdict::WithinNoise
        }
    } else {
        match better_when(name) {
            Some(Better::Higher) if change > 0.0 => Verdict::Better,
            Some(Better::Lower) if change < 0.0 => Verdict::Better,
            Some(_) => Verdict::Worse,
            None => Verdict::Changed,
        }
    };
    c
}

/// Every difference between two runs: figures of matching entries in A's
/// order, then entries and figures found on one side only, and status
/// changes.
pub fn compare(a: &Results, b: &Results) -> Vec<Change> {
    let mut in_b: HashMap<String, &Entry> = HashMap::new();
    for e in &b.results {
        in_b.entry(e.key()).or_insert(e);
    }
    let mut in_a: HashMap<String, &Entry> = HashMap::new();
    for e in &a.results {
        in_a.entry(e.key()).or_insert(e);
    }
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for ea in &a.results {
        let key = ea.key();
        if !seen.insert(key.clone()) {
            continue;
        }
        let Some(eb) = in_b.get(&key) else {
            out.push(Change::entry(key, Verdict::OnlyInA, Some(ea), None));
            continue;
        };
        if ea.status != eb.status {
            out.push(Change::entry(key.clone(), Verdict::StatusChanged, Some(ea), Some(eb)));
        }
        for (name, fa) in &ea.figures {
            match eb.figures.get(name) {
                Some(fb) => out.push(figure_change(&key, name, fa, fb)),
                None => {
                    let mut c = Change::entry(key.clone(), Verdict::OnlyInA, None, None);
                    c.figure = name.clone();
                    c.a = Some(fa.median()).filter(|m| m.is_finite());
                    out.push(c);
                }
            }
        }
        for (name, fb) in &eb.figures {
            if !ea.figures.contains_key(name) {
                let mut c = Change::entry(key.clone(), Verdict::OnlyInB, None, None);
                c.figure = name.clone();
                c.b = Some(fb.median()).filter(|m| m.is_finite());
                out.push(c);
            }
        }
    }
    for eb in &b.results {
        let key = eb.key();
        if !in_a.contains_key(&key) && seen.insert(key.clone()) {
            out.push(Change::entry(key, Verdict::OnlyInB, None, Some(eb)));
        }
    }
    out
}

fn describe(label: &str, path: &std::path::Path, r: &Results) -> String {
    let dirty = if r.git_dirty { " (dirty)" } else { "" };
    format!("{label}: {} — commit {}{dirty}, started {}", path.display(), r.git_commit, r.started)
}

/// The comparison as an aligned text table with a summary line.
pub fn table(changes: &[Change]) -> String {
    let head = ["key", "figure", "A", "B", "change", "verdict"];
    let rows: Vec<[String; 6]> = changes
        .iter()
        .map(|c| {
            [
                c.key.clone(),
                c.figure.clone(),
                c.a.map_or("–".into(), fmt_num),
                c.b.map_or("–".into(), fmt_num),
                c.change_pct.map_or("–".into(), |p| format!("{p:+.1}%")),
                c.verdict_text(),
            ]
        })
        .collect();
    let mut width = head.map(|h| h.chars().count());
    for r in &rows {
        for (w, s) in width.iter_mut().zip(r) {
            *w = (*w).max(s.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        let mut l = String::new();
        for (i, (s, w)) in cells.iter().zip(width).enumerate() {
            let pad = w.saturating_sub(s.chars().count());
            // Numbers right-aligned, words left.
            if (2..=4).contains(&i) {
                let _ = write!(l, "{}{s}  ", " ".repeat(pad));
            } else {
                let _ = write!(l, "{s}{}  ", " ".repeat(pad));
            }
        }
        let _ = writeln!(out, "{}", l.trim_end());
    };
    line(&mut out, &head.map(String::from));
    line(&mut out, &width.map(|w| "-".repeat(w)));
    for r in &rows {
        line(&mut out, r);
    }
    let count = |v: Verdict| changes.iter().filter(|c| c.verdict == v).count();
    let _ = writeln!(
        out,
        "\n{} better, {} worse, {} within noise, {} with noise unknown, {} changed, {} only in A, {} only in B, {} status changes",
        count(Verdict::Better),
        count(Verdict::Worse),
        count(Verdict::WithinNoise),
        count(Verdict::NoiseUnknown),
        count(Verdict::Changed),
        count(Verdict::OnlyInA),
        count(Verdict::OnlyInB),
        count(Verdict::StatusChanged),
    );
    out
}

pub fn main(args: CompareArgs) -> anyhow::Result<()> {
    let a = load(&args.a)?;
    let b = load(&args.b)?;
    let changes = compare(&a, &b);
    if args.json {
        let side = |p: &std::path::Path, r: &Results| {
            serde_json::json!({
                "path": p.display().to_string(),
                "git_commit": r.git_commit,
                "git_dirty": r.git_dirty,
                "started": r.started,
            })
        };
        let doc = serde_json::json!({
            "a": side(&args.a, &a),
            "b": side(&args.b, &b),
            "noise_floor_pct": NOISE_FLOOR * 100.0,
            "changes": changes,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!("{}", describe("A", &args.a, &a));
    println!("{}", describe("B", &args.b, &b));
    println!(
        "change = (B − A) ÷ A; within noise: |change| ≤ max(spread A, spread B, {:.0}%)\n",
        NOISE_FLOOR * 100.0
    );
    print!("{}", table(&changes));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{entry, sample};

    fn find<'a>(cs: &'a [Change], key: &str, figure: &str) -> &'a Change {
        cs.iter().find(|c| c.key == key && c.figure == figure).unwrap_or_else(|| panic!("{key} {figure} in {cs:#?}"))
    }

    #[test]
    fn compare_identical_is_noise() {
        let r = sample();
        let cs = compare(&r, &r);
        assert!(!cs.is_empty());
        for c in &cs {
            assert!(matches!(c.verdict, Verdict::WithinNoise | Verdict::NoiseUnknown), "{c:?}");
            assert_eq!(c.change_pct, Some(0.0));
        }
        let c = find(&cs, "S1/read/smbq-quic/", "mb_s");
        assert_eq!(c.verdict_text(), "within noise");
        let c = find(&cs, "S1/write/smbq-quic/", "mb_s");
        assert_eq!(c.verdict_text(), "1 rep, noise unknown");
    }

    #[test]
    fn compare_better_worse_and_one_sided() {
        let a = sample();
        let mut b = sample();
        for e in &mut b.results {
            if e.key() == "S1/read/smbq-quic/" {
                // A 20% drop, spread 2% on both sides.
                e.figures.insert("mb_s".into(), Figure { reps: vec![1192.0, 1200.0, 1216.0] });
            }
            if e.scenario == "S4" && e.system == "smbq-quic" {
                for r in &mut e.figures.get_mut("seconds").expect("seconds").reps {
                    *r *= 0.5;
                }
            }
            if e.system == "samba-tcp-sign" {
                e.status = "failed: crashed".into();
            }
        }
        b.results.retain(|e| e.key() != "S1/read/raw-quic/");
        b.results.push(entry("S2", "randread", "smbq-quic", &[], &[("iops", &[5000.0])]));
        let cs = compare(&a, &b);
        let c = find(&cs, "S1/read/smbq-quic/", "mb_s");
        assert_eq!(c.verdict, Verdict::Worse, "{c:?}");
        assert!((c.change_pct.expect("pct") + 20.0).abs() < 1e-9);
        let c = find(&cs, "S1/read/smbq-quic/", "server_cpu_s_per_gib");
        assert_eq!(c.verdict, Verdict::WithinNoise);
        let c = find(&cs, "S4/group1-upload/smbq-quic/delay_ms=25,loss_pct=5", "seconds");
        assert_eq!(c.verdict, Verdict::Better, "{c:?}");
        assert_eq!(find(&cs, "S1/read/raw-quic/", "").verdict, Verdict::OnlyInA);
        assert_eq!(find(&cs, "S2/randread/smbq-quic/", "").verdict, Verdict::OnlyInB);
        let c = find(&cs, "S1/read/samba-tcp-sign/", "");
        assert_eq!(c.verdict_text(), "status: not run: smbd missing → failed: crashed");
        let t = table(&cs);
        assert!(t.contains("only in A") && t.contains("only in B") && t.contains("worse"), "{t}");
        assert!(t.contains("-20.0%"), "{t}");
    }

    #[test]
    fn compare_directions() {
        assert_eq!(better_when("mb_s"), Some(Better::Higher));
        assert_eq!(better_when("iops"), Some(Better::Higher));
        assert_eq!(better_when("throughput_gbit"), Some(Better::Higher));
        assert_eq!(better_when("seconds"), Some(Better::Lower));
        assert_eq!(better_when("ttfb_ms"), Some(Better::Lower));
        assert_eq!(better_when("lat_p99_us"), Some(Better::Lower));
        assert_eq!(better_when("server_cpu_s_per_gib"), Some(Better::Lower));
        assert_eq!(better_when("server_rss_mib"), Some(Better::Lower));
        assert_eq!(better_when("connections"), None);
        // Single repetitions beyond the floor still get a direction, marked.
        let c = figure_change("k", "mb_s", &Figure { reps: vec![100.0] }, &Figure { reps: vec![110.0] });
        assert_eq!(c.verdict_text(), "better (1 rep, noise unknown)");
    }
}
