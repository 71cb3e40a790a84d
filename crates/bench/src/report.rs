//! `smbq-bench report`: `results.json` into `report.md` and SVG charts
//! (BENCHMARKS.md, output).
//!
//! The report opens with what the run ran on (date, commit, machine, the
//! version of every peer, the parameters), the headline ratios and the link
//! emulator's self-check; then one section per scenario, one table per case:
//! rows are the systems in a fixed order (points of the scenario's axes,
//! e.g. delay and loss, first), columns the figures, each cell the median of
//! the repetitions and their spread. Every table has the ratio of the case's
//! primary figure to samba-tcp-enc, and S1 the ratio to each system's
//! transport ceiling.
//!
//! Charts use plotters' SVG backend alone: it writes `<text>` elements and
//! estimates text sizes itself, so no font library is needed.

use crate::compare::{better_when, Better};
use crate::results::{Entry, Figure, Results};
use anyhow::Context as _;
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Clone, Debug)]
pub struct ReportArgs {
    /// `results.json` of `smbq-bench suite`.
    pub results: PathBuf,
    /// Where `report.md` and the charts go; default: the json's directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn main(a: ReportArgs) -> anyhow::Result<()> {
    let results = load(&a.results)?;
    let dir = match a.out {
        Some(d) => d,
        None => match a.results.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
    };
    write(&results, &dir)?;
    println!("{}", dir.join("report.md").display());
    for c in charts(&results) {
        println!("{}", dir.join(c.file).display());
    }
    Ok(())
}

/// Reads a `results.json`.
pub fn load(path: &Path) -> anyhow::Result<Results> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Writes `dir/report.md` and the charts it links to (the files named by
/// [`charts`]).
pub fn write(results: &Results, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for chart in charts(results) {
        let path = dir.join(&chart.file);
        let svg = chart.svg().with_context(|| format!("drawing {}", chart.file))?;
        std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    let md = dir.join("report.md");
    std::fs::write(&md, markdown(results)).with_context(|| format!("writing {}", md.display()))?;
    Ok(())
}

/// The scenarios of BENCHMARKS.md, in report order, with their titles.
const SCENARIOS: [(&str, &str); 9] = [
    ("S1", "single-seq"),
    ("S1v", "single-seq between two namespaces over a veth pair"),
    ("S2", "single-rand"),
    ("S3", "multiple-rand"),
    ("S4", "file groups over a degraded link"),
    ("S5", "connection phases"),
    ("S5m", "a transfer across an address change"),
    ("F", "fairness beside a TCP CUBIC flow"),
    ("S6", "scale"),
];

/// Rows of every table, in this order; other systems follow by name.
const SYSTEMS: [&str; 10] = [
    "smbq-quic",
    "smbq-quic-cubic",
    "smbq-quic-ms",
    "smbq-tcp-enc",
    "samba-tcp-enc",
    "samba-tcp-sign",
    "scp",
    "raw-quic",
    "tcp-tls",
    "raw-tcp",
];

/// The system every ratio column divides by.
const BASELINE: &str = "samba-tcp-enc";

/// Columns in this order; other figures follow by name.
const FIGURES: [&str; 35] = [
    "mb_s",
    "iops",
    "seconds",
    "seconds_moved",
    "lost_s",
    "handshake_ms",
    "negotiate_ms",
    "session_setup_ms",
    "setup_ms",
    "tree_connect_ms",
    "ttfb_ms",
    "first_byte_ms",
    "transfer_ms",
    "close_ms",
    "total_ms",
    "lat_p50_us",
    "lat_p99_us",
    "lat_p999_us",
    "server_cpu_s_per_gib",
    "client_cpu_s_per_gib",
    "server_cpu_ns_per_packet",
    "client_cpu_ns_per_packet",
    "server_tx_packets_per_call",
    "server_rx_packets_per_call",
    "client_tx_packets_per_call",
    "client_rx_packets_per_call",
    "acks_per_data_packet",
    "server_acks_per_rx_packet",
    "client_acks_per_rx_packet",
    "data_datagram_bytes",
    "client_path_mtu",
    "client_mtu_reached_ms",
    "server_cpu_us_per_op",
    "server_rss_mib",
    "client_rss_mib",
];

/// A second system a scenario's rows are set against, beside
/// samba-tcp-enc: the paper's SCP for S4, TCP for the phases of S5 and
/// for S1 over a veth pair.
fn second_baseline(scenario: &str) -> Option<&'static str> {
    match scenario {
        "S4" => Some("scp"),
        "S5" | "S1v" => Some("smbq-tcp-enc"),
        _ => None,
    }
}

/// The transport ceiling of an S1 row: the same transport without SMB.
fn ceiling_of(system: &str) -> Option<&'static str> {
    match system {
        "smbq-quic" => Some("raw-quic"),
        "smbq-tcp-enc" | "samba-tcp-enc" => Some("tcp-tls"),
        "samba-tcp-sign" => Some("raw-tcp"),
        _ => None,
    }
}

fn rank<'a>(order: &[&str], name: &'a str) -> (usize, &'a str) {
    (order.iter().position(|s| *s == name).unwrap_or(order.len()), name)
}

fn scenario_title(s: &str) -> String {
    match SCENARIOS.iter().find(|(id, _)| *id == s) {
        Some((id, title)) => format!("{id} {title}"),
        None => s.to_string(),
    }
}

/// The figure a case is ranked by: MB/s, else IOPS, else seconds, else the
/// first column.
fn primary(figures: &[String]) -> Option<String> {
    ["mb_s", "iops", "seconds"]
        .iter()
        .find(|p| figures.iter().any(|f| f == *p))
        .map(|p| p.to_string())
        .or_else(|| figures.first().cloned())
}

/// Which way a ratio of `figure` is better, for table headers.
fn direction_note(figure: &str) -> String {
    match better_when(figure) {
        Some(Better::Higher) => format!("ratios of {figure}: above 1 is better"),
        Some(Better::Lower) if is_time(figure) => format!("ratios of {figure}: below 1 is faster"),
        Some(Better::Lower) => format!("ratios of {figure}: below 1 is better"),
        None => format!("ratios of {figure}"),
    }
}

fn is_time(figure: &str) -> bool {
    figure == "seconds" || figure.ends_with("_ms") || figure.ends_with("_us")
}

/// A number with as many digits as a benchmark figure deserves.
pub(crate) fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        // Three significant digits.
        let digits = (2.0 - a.log10().floor()).clamp(3.0, 9.0) as usize;
        format!("{v:.digits$}")
    }
}

/// "median ±spread%", the spread only with two repetitions or more.
fn fmt_figure(f: &Figure) -> String {
    let m = f.median();
    if f.reps.len() >= 2 && m.is_finite() {
        format!("{} ±{:.1}%", fmt_num(m), f.spread() * 100.0)
    } else {
        fmt_num(m)
    }
}

fn fmt_ratio(num: Option<f64>, den: Option<f64>) -> String {
    match (num, den) {
        (Some(n), Some(d)) if n.is_finite() && d.is_finite() && d != 0.0 => format!("{:.2}", n / d),
        _ => "–".into(),
    }
}

/// A point's value as written in tables and file names: 25, 0.5.
fn fmt_axis(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// "delay_ms=25, loss_pct=5"; "" for no point.
fn fmt_point(e: &Entry) -> String {
    e.point.iter().map(|(k, v)| format!("{k}={}", fmt_axis(*v))).collect::<Vec<_>>().join(", ")
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn same_point(a: &Entry, b: &Entry) -> bool {
    a.point.len() == b.point.len()
        && a.point.iter().zip(&b.point).all(|((ka, va), (kb, vb))| ka == kb && va.total_cmp(vb).is_eq())
}

fn is_ok(e: &Entry) -> bool {
    e.status == "ok"
}

/// The median of `figure` of a system's ok entry at `like`'s case and point.
fn median_beside(entries: &[&Entry], like: &Entry, system: &str, figure: &str) -> Option<f64> {
    entries
        .iter()
        .find(|e| e.system == system && is_ok(e) && same_point(e, like))
        .and_then(|e| e.figures.get(figure))
        .map(Figure::median)
        .filter(|m| m.is_finite())
}

/// One scenario's entries, case by case in the order of the run.
struct Section<'a> {
    scenario: String,
    cases: Vec<(String, Vec<&'a Entry>)>,
}

fn sections(r: &Results) -> Vec<Section<'_>> {
    let mut out: Vec<Section<'_>> = Vec::new();
    for e in &r.results {
        let s = match out.iter_mut().find(|s| s.scenario == e.scenario) {
            Some(s) => s,
            None => {
                out.push(Section { scenario: e.scenario.clone(), cases: Vec::new() });
                let last = out.len() - 1;
                &mut out[last]
            }
        };
        match s.cases.iter_mut().find(|(c, _)| *c == e.case) {
            Some((_, v)) => v.push(e),
            None => s.cases.push((e.case.clone(), vec![e])),
        }
    }
    let ids: Vec<&str> = SCENARIOS.iter().map(|(id, _)| *id).collect();
    out.sort_by(|a, b| rank(&ids, &a.scenario).cmp(&rank(&ids, &b.scenario)));
    out
}

/// Figure names present in a case, in column order.
fn figure_names(entries: &[&Entry]) -> Vec<String> {
    let mut names = names_present(entries, |e| e.figures.keys());
    names.sort_by(|a, b| rank(&FIGURES, a).cmp(&rank(&FIGURES, b)));
    names
}

/// Axis names present in a case.
fn axis_names(entries: &[&Entry]) -> Vec<String> {
    let mut names = names_present(entries, |e| e.point.keys());
    names.sort();
    names
}

/// Every name `keys` gives for some entry, once each.
fn names_present<'a, I: Iterator<Item = &'a String>>(entries: &[&'a Entry], keys: impl Fn(&'a Entry) -> I) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for e in entries {
        for k in keys(e) {
            if !names.contains(k) {
                names.push(k.clone());
            }
        }
    }
    names
}

/// Rows in report order: by point, then by system.
fn sorted_rows<'a>(entries: &[&'a Entry], axes: &[String]) -> Vec<&'a Entry> {
    let mut rows = entries.to_vec();
    rows.sort_by(|a, b| {
        for ax in axes {
            let va = a.point.get(ax).copied().unwrap_or(f64::NEG_INFINITY);
            let vb = b.point.get(ax).copied().unwrap_or(f64::NEG_INFINITY);
            let o = va.total_cmp(&vb);
            if o.is_ne() {
                return o;
            }
        }
        rank(&SYSTEMS, &a.system).cmp(&rank(&SYSTEMS, &b.system))
    });
    rows
}

/// The report (the charts it links to are written by [`write`]).
pub fn markdown(r: &Results) -> String {
    let mut md = String::new();
    header(&mut md, r);
    headlines_md(&mut md, r);
    link_checks(&mut md, r);
    let charts = charts(r);
    for s in sections(r) {
        let _ = writeln!(md, "## {}\n", scenario_title(&s.scenario));
        for c in charts.iter().filter(|c| c.scenario == s.scenario && c.case.is_none()) {
            let _ = writeln!(md, "![{}]({})\n", c.title, c.file);
        }
        for (case, entries) in &s.cases {
            case_table(&mut md, &s.scenario, case, entries);
            for c in charts.iter().filter(|c| c.scenario == s.scenario && c.case.as_deref() == Some(case)) {
                let _ = writeln!(md, "![{}]({})\n", c.title, c.file);
            }
        }
    }
    md
}

fn header(md: &mut String, r: &Results) {
    let m = &r.machine;
    let _ = writeln!(md, "# smbq benchmark report\n");
    let _ = writeln!(md, "- date: {}", r.started);
    let dirty = if r.git_dirty { " (dirty: uncommitted changes)" } else { "" };
    let _ = writeln!(md, "- git commit: {}{dirty}", r.git_commit);
    let _ = writeln!(
        md,
        "- machine: {}, {} CPUs, {:.1} GiB memory, kernel {}",
        m.cpu_model, m.cpus, m.memory_gib, m.kernel
    );
    let _ = writeln!(md, "- results.json schema {}\n", r.schema);
    if !r.versions.is_empty() {
        let _ = writeln!(md, "| peer | version |\n| --- | --- |");
        for (k, v) in &r.versions {
            let _ = writeln!(md, "| {} | {} |", cell(k), cell(v));
        }
        md.push('\n');
    }
    if !r.params.is_empty() {
        let _ = writeln!(md, "| parameter | value |\n| --- | --- |");
        for (k, v) in &r.params {
            let v = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let _ = writeln!(md, "| {} | {} |", cell(k), cell(&v));
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "Each cell is the median of the repetitions, ±(max − min) ÷ median when there are two or \
         more. Ratios divide medians of the same run.\n"
    );
}

fn link_checks(md: &mut String, r: &Results) {
    if r.link_checks.is_empty() {
        return;
    }
    let _ = writeln!(md, "## Link emulator checks\n");
    let _ = writeln!(
        md,
        "Set against measured: RTT should be twice the delay within 1 ms, loss within 0.5 points, \
         and an unimpaired link should carry at least 2 Gbit/s.\n"
    );
    let _ = writeln!(
        md,
        "| delay ms | RTT set ms | RTT measured ms | loss set % | loss measured % | probes | rate set Mbit/s | throughput Gbit/s | ok |"
    );
    let _ = writeln!(md, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    for c in &r.link_checks {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            fmt_axis(c.delay_ms),
            fmt_axis(2.0 * c.delay_ms),
            fmt_num(c.rtt_ms),
            fmt_axis(c.loss_pct),
            fmt_num(c.measured_loss_pct),
            c.probes,
            c.rate_mbit.map_or("unlimited".into(), fmt_axis),
            c.throughput_gbit.map_or("–".into(), fmt_num),
            if c.ok { "ok" } else { "**FAILED**" },
        );
    }
    md.push('\n');
}

fn case_table(md: &mut String, scenario: &str, case: &str, entries: &[&Entry]) {
    let axes = axis_names(entries);
    let figures = figure_names(entries);
    let prim = primary(&figures);
    let ceiling = scenario == "S1";
    let second = second_baseline(scenario).filter(|b| entries.iter().any(|e| e.system == *b && is_ok(e)));
    // S1v runs smbq's two rows alone (over a veth pair): no Samba column.
    let base = scenario != "S1v";
    let _ = writeln!(md, "### {} {case}\n", scenario);
    if let Some(p) = &prim {
        let mut note = if base { format!("{BASELINE} of the same case and point") } else { String::new() };
        if let Some(b) = second {
            if base {
                let _ = write!(note, ", and ÷ {b}");
            } else {
                let _ = write!(note, "{b} of the same case and point");
            }
        }
        if ceiling {
            note.push_str(
                "; ceiling: smbq-quic ÷ raw-quic, smbq-tcp-enc ÷ tcp-tls, samba-tcp-enc ÷ tcp-tls, \
                 samba-tcp-sign ÷ raw-tcp",
            );
        }
        let _ = writeln!(md, "{} (÷ {note}).\n", capitalize(&direction_note(p)));
    }
    let mut head: Vec<String> = axes.clone();
    head.push("system".into());
    if figures.is_empty() {
        head.push("status".into());
    }
    head.extend(figures.iter().cloned());
    if let Some(p) = &prim {
        if base {
            head.push(format!("{p} ÷ {BASELINE}"));
        }
        if let Some(b) = second {
            head.push(format!("{p} ÷ {b}"));
        }
        if ceiling {
            head.push(format!("{p} ÷ ceiling"));
        }
    }
    let _ = writeln!(md, "| {} |", head.join(" | "));
    let align: Vec<&str> = head
        .iter()
        .enumerate()
        .map(|(i, _)| if i < axes.len() || i > axes.len() { "---:" } else { "---" })
        .collect();
    let _ = writeln!(md, "| {} |", align.join(" | "));
    for e in sorted_rows(entries, &axes) {
        let mut row: Vec<String> =
            axes.iter().map(|a| e.point.get(a).map_or(String::new(), |v| fmt_axis(*v))).collect();
        row.push(cell(&e.system));
        if !is_ok(e) {
            row.push(cell(&e.status));
            row.extend(std::iter::repeat_n(String::new(), figures.len().saturating_sub(1)));
            if prim.is_some() {
                let n = usize::from(base) + usize::from(second.is_some()) + usize::from(ceiling);
                row.extend(std::iter::repeat_n("–".to_string(), n));
            }
        } else {
            if figures.is_empty() {
                row.push("ok".into());
            }
            for f in &figures {
                row.push(e.figures.get(f).map_or("–".into(), fmt_figure));
            }
            if let Some(p) = &prim {
                let own = e.figures.get(p).map(Figure::median);
                if base {
                    row.push(fmt_ratio(own, median_beside(entries, e, BASELINE, p)));
                }
                if let Some(b) = second {
                    row.push(fmt_ratio(own, median_beside(entries, e, b, p)));
                }
                if ceiling {
                    let den = ceiling_of(&e.system).and_then(|c| median_beside(entries, e, c, p));
                    row.push(fmt_ratio(own, den));
                }
            }
        }
        let _ = writeln!(md, "| {} |", row.join(" | "));
    }
    md.push('\n');
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// One line of the headline ratios.
struct Headline {
    what: String,
    figure: String,
    num: f64,
    den: f64,
}

/// The median of an ok entry's figure, its point matching `at` on the
/// axes `at` names.
fn lookup(r: &Results, scenario: &str, case: &str, system: &str, at: &[(&str, f64)], figure: &str) -> Option<f64> {
    r.results
        .iter()
        .filter(|e| e.scenario == scenario && e.case == case && e.system == system && is_ok(e))
        .filter(|e| at.iter().all(|(k, v)| e.point.get(*k).is_some_and(|p| (p - v).abs() < 1e-9)))
        .find_map(|e| e.figures.get(figure))
        .map(Figure::median)
        .filter(|m| m.is_finite())
}

fn headlines(r: &Results) -> Vec<Headline> {
    let mut out = Vec::new();
    let mut add = |what: String, scen: &str, case: &str, num: &str, den: &str, at: &[(&str, f64)], fig: &str| {
        if let (Some(n), Some(d)) = (lookup(r, scen, case, num, at, fig), lookup(r, scen, case, den, at, fig)) {
            out.push(Headline { what, figure: fig.into(), num: n, den: d });
        }
    };
    for (num, den) in [("smbq-quic", "raw-quic"), ("smbq-quic", BASELINE), ("smbq-tcp-enc", BASELINE)] {
        for case in ["read", "write"] {
            add(format!("S1 {case}: {num} ÷ {den}"), "S1", case, num, den, &[], "mb_s");
        }
    }
    for mtu in [1500.0, 9000.0] {
        for case in ["read", "write"] {
            let at = [("mtu", mtu)];
            add(format!("S1v {case}, veth MTU {mtu}: smbq-quic ÷ smbq-tcp-enc"), "S1v", case, "smbq-quic", "smbq-tcp-enc", &at, "mb_s");
        }
    }
    for case in ["randread", "randwrite"] {
        add(format!("S2 {case}: smbq-quic ÷ {BASELINE}"), "S2", case, "smbq-quic", BASELINE, &[], "iops");
    }
    let at = [("delay_ms", 25.0), ("loss_pct", 5.0)];
    for case in ["group1-upload", "group1-download"] {
        add(format!("S4 {case} at 25 ms, 5% loss: smbq-quic ÷ scp"), "S4", case, "smbq-quic", "scp", &at, "seconds");
        add(format!("S4 {case} at 25 ms, 5% loss: smbq's controller ÷ CUBIC (smbq-quic ÷ smbq-quic-cubic)"), "S4", case, "smbq-quic", "smbq-quic-cubic", &at, "seconds");
        // smbq's multi-stream extension (docs/multistream.md): a stream per file.
        add(format!("S4 {case} at 25 ms, 5% loss: several streams ÷ one (smbq-quic-ms ÷ smbq-quic)"), "S4", case, "smbq-quic-ms", "smbq-quic", &at, "seconds");
        add(format!("S4 {case} at 25 ms, 5% loss: several streams ÷ scp (smbq-quic-ms ÷ scp)"), "S4", case, "smbq-quic-ms", "scp", &at, "seconds");
    }
    let at = [("delay_ms", 25.0), ("loss_pct", 1.0)];
    for case in ["group2-upload", "group2-download"] {
        add(format!("S4 {case} (one large file) at 25 ms, 1% loss: several streams ÷ one (smbq-quic-ms ÷ smbq-quic)"), "S4", case, "smbq-quic-ms", "smbq-quic", &at, "mb_s");
    }
    let s5_cases: Vec<String> = sections(r)
        .into_iter()
        .filter(|s| s.scenario == "S5")
        .flat_map(|s| s.cases.into_iter().map(|(c, _)| c))
        .collect();
    for case in &s5_cases {
        add(
            format!("S5 {case} at 20 ms: QUIC ÷ TCP (smbq-quic ÷ smbq-tcp-enc)"),
            "S5",
            case,
            "smbq-quic",
            "smbq-tcp-enc",
            &[("delay_ms", 20.0)],
            "ttfb_ms",
        );
        // smbq's congestion controller against quinn's CUBIC it replaced, a
        // fresh connection's whole read (issue 33: at most 1.1).
        for d in [0.0, 20.0] {
            add(format!("S5 {case} at {d} ms: smbq's controller ÷ CUBIC, transfer (smbq-quic ÷ smbq-quic-cubic)"), "S5", case, "smbq-quic", "smbq-quic-cubic", &[("delay_ms", d)], "transfer_ms");
        }
        add(
            format!("S5 {case} at 20 ms: 0-RTT reconnect ÷ TCP, first byte (smbq-quic-0rtt ÷ smbq-tcp-enc)"),
            "S5",
            case,
            "smbq-quic-0rtt",
            "smbq-tcp-enc",
            &[("delay_ms", 20.0)],
            "first_byte_ms",
        );
    }
    for num in ["smbq-quic", "smbq-tcp-enc"] {
        for case in ["read", "write"] {
            add(format!("S1 {case}: {num} ÷ {BASELINE}"), "S1", case, num, BASELINE, &[], "server_cpu_s_per_gib");
        }
    }
    for mtu in [1500.0, 9000.0] {
        for case in ["read", "write"] {
            let at = [("mtu", mtu)];
            for side in ["server", "client"] {
                let fig = format!("{side}_cpu_ns_per_packet");
                add(format!("S1v {case}, veth MTU {mtu}: smbq-quic ÷ smbq-tcp-enc, {side}'s CPU per packet"), "S1v", case, "smbq-quic", "smbq-tcp-enc", &at, &fig);
            }
        }
    }
    // F: the QUIC flow's goodput over the TCP CUBIC flow's beside it (the
    // target: between 0.5 and 2, neither below a third of the link).
    for sys in ["smbq-quic", "smbq-quic-cubic"] {
        let at = [("delay_ms", 20.0)];
        if let (Some(q), Some(t)) = (lookup(r, "F", "beside-tcp-cubic", sys, &at, "quic_mbit_s"), lookup(r, "F", "beside-tcp-cubic", sys, &at, "tcp_mbit_s")) {
            out.push(Headline { what: format!("F at 100 Mbit/s, 20 ms: {sys} ÷ the TCP CUBIC flow beside it"), figure: "mbit_s".into(), num: q, den: t });
        }
    }
    out
}

fn headlines_md(md: &mut String, r: &Results) {
    let _ = writeln!(md, "## Headline ratios\n");
    let h = headlines(r);
    if h.is_empty() {
        let _ = writeln!(md, "No scenario ran that the headline ratios need.\n");
        return;
    }
    let _ = writeln!(md, "| comparison | figure | numerator | denominator | ratio | better |");
    let _ = writeln!(md, "| --- | --- | ---: | ---: | ---: | --- |");
    for l in h {
        let better = match better_when(&l.figure) {
            Some(Better::Higher) => "above 1",
            Some(Better::Lower) => "below 1",
            None => "",
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {better} |",
            l.what,
            l.figure,
            fmt_num(l.num),
            fmt_num(l.den),
            fmt_ratio(Some(l.num), Some(l.den)),
        );
    }
    md.push('\n');
}

// ---- charts ----

/// A figure's median and the range of its repetitions.
#[derive(Clone, Copy, Debug)]
struct Stat {
    median: f64,
    min: f64,
    max: f64,
}

impl Stat {
    fn of(f: &Figure) -> Option<Stat> {
        let median = f.median();
        if !median.is_finite() {
            return None;
        }
        let min = f.reps.iter().copied().fold(f64::INFINITY, f64::min);
        let max = f.reps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Stat { median, min, max })
    }
}

enum Body {
    /// Groups along x, one bar per series in each.
    Bars { groups: Vec<String>, series: Vec<(String, Vec<Option<Stat>>)> },
    /// x values (evenly spaced, labelled with their value), one line per
    /// series.
    Lines { xs: Vec<f64>, series: Vec<(String, Vec<Option<Stat>>)> },
}

/// One chart, with its data.
pub struct Chart {
    /// File name inside the report's directory, e.g. `s1.svg`.
    pub file: String,
    pub title: String,
    scenario: String,
    /// The case whose table it follows; None: the top of its section.
    case: Option<String>,
    x_desc: String,
    y_desc: String,
    body: Body,
}

fn file_part(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '-' }).collect()
}

/// Every chart of a run: bars for S1–S3, lines over loss (S4), delay (S5)
/// and connections (S6).
pub fn charts(r: &Results) -> Vec<Chart> {
    let mut out = Vec::new();
    for s in sections(r) {
        match s.scenario.as_str() {
            "S1" | "S1v" | "S2" | "S3" => out.extend(bar_chart(&s)),
            "S4" => {
                for (case, entries) in &s.cases {
                    let figs = figure_names(entries);
                    if let Some(p) = primary(&figs) {
                        out.extend(line_charts(&s.scenario, case, entries, "loss_pct", &p, false));
                    }
                }
            }
            "S5" => {
                for (case, entries) in &s.cases {
                    for f in figure_names(entries).iter().filter(|f| f.ends_with("_ms")) {
                        out.extend(line_charts(&s.scenario, case, entries, "delay_ms", f, true));
                    }
                }
            }
            "S6" => {
                for (case, entries) in &s.cases {
                    let figs = figure_names(entries);
                    if let Some(p) = primary(&figs) {
                        out.extend(line_charts(&s.scenario, case, entries, "connections", &p, false));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn bar_chart(s: &Section<'_>) -> Option<Chart> {
    let mut groups: Vec<(String, &Entry, String)> = Vec::new(); // label, point's entry, figure
    let mut figs: Vec<String> = Vec::new();
    for (case, entries) in &s.cases {
        let Some(p) = primary(&figure_names(entries)) else { continue };
        let axes = axis_names(entries);
        for e in sorted_rows(entries, &axes) {
            if groups.iter().any(|(_, g, _)| g.case == e.case && same_point(g, e)) {
                continue;
            }
            let pt = fmt_point(e);
            let label = if pt.is_empty() { case.clone() } else { format!("{case} {pt}") };
            groups.push((label, e, p.clone()));
        }
        if !figs.contains(&p) {
            figs.push(p);
        }
    }
    let mut systems: Vec<&str> = s
        .cases
        .iter()
        .flat_map(|(_, es)| es.iter().filter(|e| is_ok(e)).map(|e| e.system.as_str()))
        .collect();
    systems.sort_by(|a, b| rank(&SYSTEMS, a).cmp(&rank(&SYSTEMS, b)));
    systems.dedup();
    let series: Vec<(String, Vec<Option<Stat>>)> = systems
        .iter()
        .map(|sys| {
            let vals = groups
                .iter()
                .map(|(_, g, fig)| {
                    s.cases
                        .iter()
                        .flat_map(|(_, es)| es.iter())
                        .find(|e| e.case == g.case && e.system == *sys && is_ok(e) && same_point(e, g))
                        .and_then(|e| e.figures.get(fig))
                        .and_then(Stat::of)
                })
                .collect::<Vec<_>>();
            (sys.to_string(), vals)
        })
        .filter(|(_, v)| v.iter().any(Option::is_some))
        .collect();
    if series.is_empty() {
        return None;
    }
    let y_desc = figs.join(" / ");
    Some(Chart {
        file: format!("{}.svg", file_part(&s.scenario.to_lowercase())),
        title: format!("{}: {y_desc} (median, whiskers: min–max)", scenario_title(&s.scenario)),
        scenario: s.scenario.clone(),
        case: None,
        x_desc: "case".into(),
        y_desc,
        body: Body::Bars { groups: groups.into_iter().map(|(l, _, _)| l).collect(), series },
    })
}

/// Charts of `figure` over axis `x`, one line per system; one chart per
/// combination of the other axes. `with_figure`: the figure is part of the
/// file name (several charts per case).
fn line_charts(scenario: &str, case: &str, entries: &[&Entry], x: &str, figure: &str, with_figure: bool) -> Vec<Chart> {
    let oks: Vec<&Entry> = entries.iter().copied().filter(|e| is_ok(e) && e.point.contains_key(x)).collect();
    // The other axes' values, one chart each.
    let mut others: Vec<Vec<(String, f64)>> = Vec::new();
    for e in &oks {
        let o: Vec<(String, f64)> = e.point.iter().filter(|(k, _)| *k != x).map(|(k, v)| (k.clone(), *v)).collect();
        if !others.iter().any(|p| p.len() == o.len() && p.iter().zip(&o).all(|(a, b)| a.0 == b.0 && a.1.total_cmp(&b.1).is_eq())) {
            others.push(o);
        }
    }
    others.sort_by(|a, b| {
        a.iter().zip(b).map(|(p, q)| p.1.total_cmp(&q.1)).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut out = Vec::new();
    for other in others {
        let here: Vec<&Entry> = oks
            .iter()
            .copied()
            .filter(|e| other.iter().all(|(k, v)| e.point.get(k).is_some_and(|p| p.total_cmp(v).is_eq())))
            .filter(|e| e.point.len() == other.len() + 1)
            .collect();
        let mut xs: Vec<f64> = here.iter().filter_map(|e| e.point.get(x).copied()).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup_by(|a, b| a.total_cmp(b).is_eq());
        let mut systems: Vec<&str> = here.iter().map(|e| e.system.as_str()).collect();
        systems.sort_by(|a, b| rank(&SYSTEMS, a).cmp(&rank(&SYSTEMS, b)));
        systems.dedup();
        let series: Vec<(String, Vec<Option<Stat>>)> = systems
            .iter()
            .map(|sys| {
                let vals = xs
                    .iter()
                    .map(|xv| {
                        here.iter()
                            .find(|e| e.system == *sys && e.point.get(x).is_some_and(|p| p.total_cmp(xv).is_eq()))
                            .and_then(|e| e.figures.get(figure))
                            .and_then(Stat::of)
                    })
                    .collect::<Vec<_>>();
                (sys.to_string(), vals)
            })
            .filter(|(_, v)| v.iter().any(Option::is_some))
            .collect();
        if series.is_empty() {
            continue;
        }
        let mut file = format!("{}-{}", scenario.to_lowercase(), case);
        if with_figure {
            file.push('-');
            file.push_str(figure);
        }
        for (k, v) in &other {
            let _ = write!(file, "-{k}{}", fmt_axis(*v));
        }
        let at: Vec<String> = other.iter().map(|(k, v)| format!("{k}={}", fmt_axis(*v))).collect();
        let at = if at.is_empty() { String::new() } else { format!(", {}", at.join(", ")) };
        out.push(Chart {
            file: format!("{}.svg", file_part(&file)),
            title: format!("{} {case}{at}: {figure} over {x}", scenario),
            scenario: scenario.into(),
            case: Some(case.into()),
            x_desc: x.into(),
            y_desc: figure.into(),
            body: Body::Lines { xs, series },
        });
    }
    out
}

const WIDTH: u32 = 900;
const HEIGHT: u32 = 480;
const LEGEND_WIDTH: u32 = 170;

/// A system's colour, the same in every chart.
fn color_of(system: &str) -> RGBColor {
    const COLORS: [RGBColor; 12] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
        RGBColor(57, 59, 121),
        RGBColor(173, 73, 74),
    ];
    let i = match SYSTEMS.iter().position(|s| *s == system) {
        Some(i) => i,
        None => SYSTEMS.len() + system.bytes().map(usize::from).sum::<usize>() % (COLORS.len() - SYSTEMS.len()),
    };
    COLORS[i % COLORS.len()]
}

/// An x axis of evenly spaced slots (bar groups, or the values of a point
/// axis), labelled at exactly `keys`.
struct Slots {
    lo: f64,
    hi: f64,
    keys: Vec<f64>,
}

impl plotters::coord::ranged1d::Ranged for Slots {
    type ValueType = f64;
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let r = (v - self.lo) / (self.hi - self.lo);
        limit.0 + (r * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: plotters::coord::ranged1d::KeyPointHint>(&self, _hint: H) -> Vec<f64> {
        self.keys.clone()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

type DrawResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

impl Chart {
    /// The chart as an SVG document.
    pub fn svg(&self) -> anyhow::Result<String> {
        let mut buf = String::new();
        self.draw(&mut buf).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(buf)
    }

    fn draw(&self, buf: &mut String) -> DrawResult<()> {
        let root = SVGBackend::with_string(buf, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot, legend) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
        let series = match &self.body {
            Body::Bars { series, .. } | Body::Lines { series, .. } => series,
        };
        let ymax = series
            .iter()
            .flat_map(|(_, v)| v.iter().flatten())
            .map(|s| s.max.max(s.median))
            .fold(0.0_f64, f64::max);
        let ymax = if ymax > 0.0 { ymax * 1.1 } else { 1.0 };
        // One number format along the whole axis.
        let decimals: usize = if ymax >= 100.0 {
            0
        } else if ymax >= 1.0 {
            1
        } else {
            3
        };
        let (n, labels): (usize, Vec<String>) = match &self.body {
            Body::Bars { groups, .. } => (groups.len(), groups.clone()),
            Body::Lines { xs, .. } => (xs.len(), xs.iter().map(|x| fmt_axis(*x)).collect()),
        };
        let (lo, hi, keys): (f64, f64, Vec<f64>) = match &self.body {
            Body::Bars { .. } => (0.0, n as f64, (0..n).map(|i| i as f64 + 0.5).collect()),
            Body::Lines { .. } => (-0.5, n as f64 - 0.5, (0..n).map(|i| i as f64).collect()),
        };
        let label_of = |x: &f64| -> String {
            let i = match &self.body {
                Body::Bars { .. } => (x - 0.5).round(),
                Body::Lines { .. } => x.round(),
            };
            if i >= 0.0 { labels.get(i as usize).cloned().unwrap_or_default() } else { String::new() }
        };
        let mut chart = ChartBuilder::on(&plot)
            .caption(&self.title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(Slots { lo, hi, keys }, 0.0..ymax)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n.max(1))
            .x_label_formatter(&label_of)
            .y_label_formatter(&|y: &f64| format!("{y:.decimals$}"))
            .x_desc(self.x_desc.as_str())
            .y_desc(self.y_desc.as_str())
            .draw()?;
        match &self.body {
            Body::Bars { series, .. } => {
                let k = series.len().max(1) as f64;
                let bw = 0.8 / k;
                for (si, (sys, vals)) in series.iter().enumerate() {
                    let color = color_of(sys);
                    for (gi, v) in vals.iter().enumerate() {
                        let Some(s) = v else { continue };
                        let x0 = gi as f64 + 0.1 + si as f64 * bw;
                        chart.draw_series(std::iter::once(Rectangle::new(
                            [(x0, 0.0), (x0 + bw, s.median)],
                            color.filled(),
                        )))?;
                        if s.max > s.min {
                            let xc = x0 + bw / 2.0;
                            let w = bw / 4.0;
                            chart.draw_series([
                                PathElement::new(vec![(xc, s.min), (xc, s.max)], BLACK),
                                PathElement::new(vec![(xc - w, s.min), (xc + w, s.min)], BLACK),
                                PathElement::new(vec![(xc - w, s.max), (xc + w, s.max)], BLACK),
                            ])?;
                        }
                    }
                }
            }
            Body::Lines { series, .. } => {
                for (sys, vals) in series {
                    let color = color_of(sys);
                    let pts: Vec<(f64, f64)> = vals
                        .iter()
                        .enumerate()
                        .filter_map(|(i, v)| v.map(|s| (i as f64, s.median)))
                        .collect();
                    chart.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?;
                    chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
                    for (i, v) in vals.iter().enumerate() {
                        if let Some(s) = v.filter(|s| s.max > s.min) {
                            let x = i as f64;
                            chart.draw_series(std::iter::once(PathElement::new(
                                vec![(x, s.min), (x, s.max)],
                                color.stroke_width(1),
                            )))?;
                        }
                    }
                }
            }
        }
        // The legend beside the plot, so it never hides a bar.
        for (i, (sys, _)) in series.iter().enumerate() {
            let y = 50 + 22 * i as i32;
            let color = color_of(sys);
            legend.draw(&Rectangle::new([(8, y - 6), (22, y + 6)], color.filled()))?;
            legend.draw(&Text::new(sys.clone(), (28, y - 7), ("sans-serif", 13)))?;
        }
        root.present()?;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::results::{LinkCheck, Machine};
    use std::collections::BTreeMap;

    pub(crate) fn entry(scenario: &str, case: &str, system: &str, point: &[(&str, f64)], figs: &[(&str, &[f64])]) -> Entry {
        Entry {
            scenario: scenario.into(),
            case: case.into(),
            system: system.into(),
            point: point.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            status: "ok".into(),
            figures: figs.iter().map(|(k, r)| (k.to_string(), Figure { reps: r.to_vec() })).collect(),
        }
    }

    /// A small run: S1 with a missing system, S4 at two points, S5.
    pub(crate) fn sample() -> Results {
        let mut results = vec![
            entry("S1", "read", "smbq-quic", &[], &[("mb_s", &[1490.0, 1500.0, 1520.0]), ("server_cpu_s_per_gib", &[1.0, 1.0, 1.0])]),
            entry("S1", "read", "raw-quic", &[], &[("mb_s", &[2000.0, 1980.0, 2010.0])]),
            entry("S1", "read", "samba-tcp-enc", &[], &[("mb_s", &[1200.0, 1190.0, 1210.0]), ("server_cpu_s_per_gib", &[2.0, 2.0, 2.0])]),
            entry("S1", "write", "smbq-quic", &[], &[("mb_s", &[900.0])]),
            entry("S1", "write", "samba-tcp-enc", &[], &[("mb_s", &[1000.0])]),
        ];
        let mut missing = entry("S1", "read", "samba-tcp-sign", &[], &[]);
        missing.status = "not run: smbd missing".into();
        results.push(missing);
        for (delay, loss, quic, scp) in [(25.0, 0.0, 10.0, 12.0), (25.0, 5.0, 11.0, 22.0)] {
            for case in ["group1-upload", "group1-download"] {
                let p = [("delay_ms", delay), ("loss_pct", loss)];
                results.push(entry("S4", case, "smbq-quic", &p, &[("seconds", &[quic, quic + 0.2])]));
                results.push(entry("S4", case, "scp", &p, &[("seconds", &[scp])]));
            }
        }
        for (delay, q, t) in [(0.0, 1.0, 1.5), (20.0, 40.0, 60.0)] {
            let p = [("delay_ms", delay)];
            results.push(entry("S5", "phases-1mib", "smbq-quic", &p, &[("handshake_ms", &[q / 2.0]), ("ttfb_ms", &[q])]));
            results.push(entry("S5", "phases-1mib", "smbq-tcp-enc", &p, &[("handshake_ms", &[t / 2.0]), ("ttfb_ms", &[t])]));
        }
        Results {
            schema: 1,
            started: "2026-11-26T12:00:00Z".into(),
            git_commit: "0123abcd".into(),
            git_dirty: true,
            machine: Machine { cpu_model: "Test CPU 9000".into(), cpus: 4, memory_gib: 15.6, kernel: "6.1.0-test".into() },
            versions: BTreeMap::from([("smbd".to_string(), "4.17.12-Debian".to_string())]),
            params: BTreeMap::from([("reps".to_string(), serde_json::json!(3))]),
            link_checks: vec![LinkCheck {
                delay_ms: 25.0,
                loss_pct: 5.0,
                rate_mbit: None,
                rtt_ms: 50.4,
                measured_loss_pct: 5.1,
                probes: 10_000,
                throughput_gbit: None,
                ok: true,
            }],
            results,
        }
    }

    #[test]
    fn report_tables_and_ratios() {
        let md = markdown(&sample());
        assert!(md.contains("- git commit: 0123abcd (dirty"), "{md}");
        assert!(md.contains("Test CPU 9000, 4 CPUs, 15.6 GiB memory, kernel 6.1.0-test"));
        assert!(md.contains("| smbd | 4.17.12-Debian |"));
        assert!(md.contains("| reps | 3 |"));
        assert!(md.contains("| 25 | 50 | 50.4 | 5 | 5.10 | 10000 | unlimited | – | ok |"), "{md}");
        for t in ["## S1 single-seq", "## S4 file groups over a degraded link", "## S5 connection phases"] {
            assert!(md.contains(t), "{t}");
        }
        assert!(!md.contains("## S2"));
        // Rows in the fixed order; smbq-quic ÷ raw-quic = 1500 / 2000.
        let read = md.split("### S1 read").nth(1).expect("S1 read table");
        let rows: Vec<&str> = read.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| system")).collect();
        assert_eq!(rows[1], "| smbq-quic | 1500 ±2.0% | 1.00 ±0.0% | 1.25 | 0.75 |", "{read}");
        assert_eq!(rows[2], "| samba-tcp-enc | 1200 ±1.7% | 2.00 ±0.0% | 1.00 | – |");
        assert_eq!(rows[3], "| samba-tcp-sign | not run: smbd missing |  | – | – |");
        assert_eq!(rows[4], "| raw-quic | 2000 ±1.5% | – | 1.67 | – |");
        assert!(md.contains("| system | mb_s | server_cpu_s_per_gib | mb_s ÷ samba-tcp-enc | mb_s ÷ ceiling |"));
        assert!(md.contains("Ratios of mb_s: above 1 is better"));
        // S4: points as rows, a time's ratio says lower is faster.
        assert!(md.contains("| delay_ms | loss_pct | system | seconds | seconds ÷ samba-tcp-enc | seconds ÷ scp |"), "{md}");
        assert!(md.contains("| 25 | 5 | smbq-quic | 11.1 ±1.8% | – | 0.50 |"), "{md}");
        assert!(md.contains("| 25 | 5 | scp | 22.0 | – | 1.00 |"));
        assert!(md.contains("Ratios of seconds: below 1 is faster"));
        // S5: TCP as the second baseline.
        assert!(md.contains("| delay_ms | system | handshake_ms | ttfb_ms | handshake_ms ÷ samba-tcp-enc | handshake_ms ÷ smbq-tcp-enc |"), "{md}");
        assert!(md.contains("| 20 | smbq-quic | 20.0 | 40.0 | – | 0.67 |"), "{md}");
        // Headlines.
        let head = md.split("## Headline ratios").nth(1).expect("headlines");
        assert!(md.find("## Headline ratios") < md.find("## S1"));
        assert!(head.contains("| S1 read: smbq-quic ÷ raw-quic | mb_s | 1500 | 2000 | 0.75 | above 1 |"), "{head}");
        assert!(head.contains("| S1 write: smbq-quic ÷ samba-tcp-enc | mb_s | 900 | 1000 | 0.90 | above 1 |"));
        assert!(head.contains("| S4 group1-upload at 25 ms, 5% loss: smbq-quic ÷ scp | seconds | 11.1 | 22.0 | 0.50 | below 1 |"), "{head}");
        assert!(head.contains("| S5 phases-1mib at 20 ms: QUIC ÷ TCP (smbq-quic ÷ smbq-tcp-enc) | ttfb_ms | 40.0 | 60.0 | 0.67 | below 1 |"));
        assert!(head.contains("| S1 read: smbq-quic ÷ samba-tcp-enc | server_cpu_s_per_gib | 1.00 | 2.00 | 0.50 | below 1 |"));
        assert!(!head.contains("S2 randread"), "no S2 data, no S2 headline");
    }

    /// S1v: points by MTU, ratios against smbq-tcp-enc, no Samba column,
    /// and its headlines.
    #[test]
    fn s1v_rows_against_tcp() {
        let mut r = sample();
        for (mtu, quic, tcp) in [(1500.0, 600.0, 1200.0), (9000.0, 1100.0, 1000.0)] {
            let p = [("mtu", mtu)];
            r.results.push(entry("S1v", "write", "smbq-quic", &p, &[("mb_s", &[quic]), ("server_cpu_ns_per_packet", &[1500.0])]));
            r.results.push(entry("S1v", "write", "smbq-tcp-enc", &p, &[("mb_s", &[tcp]), ("server_cpu_ns_per_packet", &[1000.0])]));
        }
        let md = markdown(&r);
        assert!(md.contains("## S1v single-seq between two namespaces over a veth pair"), "{md}");
        let table = md.split("### S1v write").nth(1).expect("S1v write table");
        assert!(table.contains("| mtu | system | mb_s | server_cpu_ns_per_packet | mb_s ÷ smbq-tcp-enc |"), "{table}");
        assert!(table.contains("| 1500 | smbq-quic | 600 | 1500 | 0.50 |"), "{table}");
        assert!(table.contains("| 9000 | smbq-quic | 1100 | 1500 | 1.10 |"), "{table}");
        let head = md.split("## Headline ratios").nth(1).expect("headlines");
        assert!(head.contains("| S1v write, veth MTU 9000: smbq-quic ÷ smbq-tcp-enc | mb_s | 1100 | 1000 | 1.10 | above 1 |"), "{head}");
        assert!(head.contains("| S1v write, veth MTU 1500: smbq-quic ÷ smbq-tcp-enc, server's CPU per packet | server_cpu_ns_per_packet | 1500 | 1000 | 1.50 | below 1 |"), "{head}");
        assert!(charts(&r).iter().any(|c| c.file == "s1v.svg"));
    }

    #[test]
    fn report_writes_charts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = sample();
        write(&r, dir.path()).expect("write");
        let names: Vec<String> = charts(&r).into_iter().map(|c| c.file).collect();
        let files: Vec<PathBuf> = names.iter().map(|n| dir.path().join(n)).collect();
        for want in [
            "s1.svg",
            "s4-group1-upload-delay_ms25.svg",
            "s4-group1-download-delay_ms25.svg",
            "s5-phases-1mib-handshake_ms.svg",
            "s5-phases-1mib-ttfb_ms.svg",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
        let md = std::fs::read_to_string(dir.path().join("report.md")).expect("report.md");
        for (name, path) in names.iter().zip(&files) {
            let svg = std::fs::read_to_string(path).expect("svg");
            assert!(svg.starts_with("<svg"), "{name}: {}", &svg[..svg.len().min(80)]);
            assert!(svg.trim_end().ends_with("</svg>"), "{name}");
            assert!(svg.contains("<text"), "{name} has labels");
            assert!(md.contains(&format!("]({name})")), "report links {name}");
        }
        let s1 = std::fs::read_to_string(dir.path().join("s1.svg")).expect("s1");
        assert!(s1.contains("smbq-quic") && s1.contains("raw-quic") && s1.contains("\nread\n</text>"), "{s1}");
        write(&r, dir.path()).expect("write again");
    }

    #[test]
    fn report_of_json_on_disk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let json = dir.path().join("results.json");
        std::fs::write(&json, serde_json::to_string_pretty(&sample()).expect("json")).expect("write json");
        main(ReportArgs { results: json, out: None }).expect("report");
        assert!(dir.path().join("report.md").exists());
        assert!(dir.path().join("s1.svg").exists());
    }

    #[test]
    fn numbers() {
        assert_eq!(fmt_num(1500.4), "1500");
        assert_eq!(fmt_num(22.0), "22.0");
        assert_eq!(fmt_num(5.1), "5.10");
        assert_eq!(fmt_num(0.0123), "0.0123");
        assert_eq!(fmt_num(f64::NAN), "–");
        assert_eq!(fmt_ratio(Some(1500.0), Some(2000.0)), "0.75");
        assert_eq!(fmt_ratio(Some(1.0), None), "–");
        assert_eq!(fmt_ratio(Some(1.0), Some(0.0)), "–");
    }
}
