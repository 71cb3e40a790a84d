//! `smbq-bench suite`: the scenarios of BENCHMARKS.md, side by side in one
//! run, against every peer, written to `results.json`, `report.md` and
//! SVG charts (report.rs).
//!
//! - **S1-S3** (the thesis's fio jobs) and **S6** (scale) run on loopback:
//!   the servers on CPU 0, this process's client on CPU 1, as two hosts.
//!   Our client drives every SMB row (random.rs's engine: `iodepth`
//!   requests outstanding on one connection), so what differs is the
//!   server. The S1 ceilings (raw TCP, TCP + rustls TLS 1.3, raw quinn)
//!   are the transport bench (`smbq-bench --systems raw-tcp,tcp-tls,raw-quic`)
//!   run once per repetition with the file's size.
//! - **S1v** is S1's sequential read and write of one file between two
//!   network namespaces joined by a plain veth pair (veth.rs), at MTU 1500
//!   and 9000, for smbq-quic and smbq-tcp-enc: the transport bench
//!   (`smbq-bench --veth-mtu M --systems smbq-quic,smbq-tcp-enc`) run once
//!   per repetition and MTU, with the S1 file's size, 1 MiB requests, 4 in
//!   flight; per side, CPU nanoseconds per packet, packets per system
//!   call each way and ACKs per packet received; the datagram size MTU
//!   discovery reached and when.
//! - **S4** (file groups) and **S5** (connection phases) run over the link
//!   emulator (linkem.rs): servers in one network namespace, the client in
//!   the other, delay and loss applied by our forwarder; the emulator's
//!   self-check at each setting goes into the results.
//!
//! Rows: smbq-quic (QUIC's TLS protects the data, no SMB encryption),
//! smbq-tcp-enc (SMB 3.1.1 AES-128-GCM), samba-tcp-enc (smbd, share with
//! `server smb encrypt = required`), samba-tcp-sign (smbd, signing only),
//! scp (S4), and the ceilings. A peer that is missing is not installed by
//! the suite: its rows say "not run" and why.

use crate::linkem::{Link, LinkParams};
use crate::peers::{self, Place, Server};
use crate::random::{Job, Pipe};
use crate::results::{Entry, LinkCheck, Machine, Results};
use anyhow::{bail, Context};
use smbq_client::many::FileJob;
use smbq_client::{Client, QuicTarget};
use smbq_wire::create::disposition;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone, Debug)]
pub struct SuiteArgs {
    /// Where results.json, report.md and the charts go (default:
    /// bench/results/DATE).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The thesis's lengths (15 s ramp, 120 s runs, 5 GiB S1 file), the
    /// whole S4 delay x loss grid with both file groups, S5 at 0-50 ms.
    #[arg(long)]
    full: bool,
    /// Scenarios to run; S5m (a read across the client's change of
    /// address, migration.rs) only when named; F is fairness beside a TCP
    /// CUBIC flow (fairness.rs).
    #[arg(long, value_delimiter = ',', default_value = "S1,S1v,S2,S3,S4,S5,S6,F")]
    scenarios: Vec<String>,
    /// Rows to run (default: all).
    #[arg(long, value_delimiter = ',')]
    systems: Option<Vec<String>>,
    /// Repetitions of every figure (S4 and S6: `--reps-slow`).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Repetitions of S4 transfers and S6 levels.
    #[arg(long, default_value_t = 1)]
    reps_slow: usize,
    /// Seconds of load before measuring / measured (default: 1 / 3, --full 15 / 120).
    #[arg(long)]
    ramp: Option<f64>,
    #[arg(long)]
    runtime: Option<f64>,
    /// Parent of the servers' directories (default: /dev/shm when present,
    /// so no disk's writeback is measured; else the temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Files of S4's photo group (default 10 quick, 100 --full).
    #[arg(long)]
    s4_files: Option<usize>,
    /// S4's points as DELAY_MS:LOSS_PCT (default 25:5 quick, the 5/15/25 ms x 0/1/3/5% grid --full).
    #[arg(long, value_delimiter = ',', value_parser = parse_point)]
    s4_points: Option<Vec<(f64, f64)>>,
    /// Size of S4's group 2, one large file, in MB (default: none quick, 1470 --full; 0: none).
    #[arg(long)]
    s4_large_mb: Option<u64>,
    /// A config file for `smbq serve` (default: none, the defaults a user
    /// gets), e.g. `[quic_options] congestion = "bbr"`.
    #[arg(long)]
    smbq_config: Option<PathBuf>,
    /// Congestion controller of our QUIC client: smbq, cubic, bbr or newreno.
    #[arg(long, default_value = "smbq")]
    quic_congestion: smbq_quic::Congestion,
}

/// `DELAY_MS:LOSS_PCT`.
fn parse_point(s: &str) -> Result<(f64, f64), String> {
    let (d, l) = s.split_once(':').ok_or_else(|| format!("{s:?}: want DELAY_MS:LOSS_PCT"))?;
    let num = |x: &str| x.trim().parse::<f64>().map_err(|e| format!("{s:?}: {e}"));
    Ok((num(d)?, num(l)?))
}

/// Our QUIC client's congestion controller (`--quic-congestion`), set once
/// at the start.
static CLIENT_CONGESTION: std::sync::OnceLock<smbq_quic::Congestion> = std::sync::OnceLock::new();

/// What a run does: the quick defaults or the thesis's lengths.
#[derive(Clone, Debug)]
struct Plan {
    full: bool,
    reps: usize,
    reps_slow: usize,
    ramp: f64,
    runtime: f64,
    s1_filesize: u64,
    /// MTUs of S1v's veth pairs.
    s1v_mtus: Vec<u32>,
    s2_filesize: u64,
    s4_points: Vec<(f64, f64)>,
    s4_files: usize,
    /// Bytes of group 2's one file (0: no group 2).
    s4_large: u64,
    s5_delays: Vec<f64>,
    s5_sizes: Vec<u64>,
    s6_conns: Vec<usize>,
    /// Seconds of scenario F (fairness.rs).
    fair_secs: f64,
}

impl Plan {
    fn new(a: &SuiteArgs) -> Plan {
        let full = a.full;
        let grid = || [5.0, 15.0, 25.0].iter().flat_map(|&d| [0.0, 1.0, 3.0, 5.0].map(move |l| (d, l))).collect();
        Plan {
            full,
            reps: a.reps.max(1),
            reps_slow: a.reps_slow.max(1),
            ramp: a.ramp.unwrap_or(if full { 15.0 } else { 1.0 }),
            runtime: a.runtime.unwrap_or(if full { 120.0 } else { 3.0 }),
            s1_filesize: if full { 5 << 30 } else { 1 << 30 },
            s1v_mtus: vec![1500, 9000],
            s2_filesize: if full { 1 << 30 } else { 256 << 20 },
            s4_points: a.s4_points.clone().unwrap_or_else(|| if full { grid() } else { vec![(25.0, 5.0)] }),
            s4_files: a.s4_files.unwrap_or(if full { 100 } else { 10 }),
            s4_large: a.s4_large_mb.unwrap_or(if full { 1470 } else { 0 }) * 1_000_000,
            s5_delays: if full { vec![0.0, 10.0, 20.0, 50.0] } else { vec![0.0, 20.0] },
            s5_sizes: if full { vec![1 << 20, 100 << 20] } else { vec![1 << 20] },
            fair_secs: if full { 30.0 } else { 10.0 },
            s6_conns: vec![1, 8, 64, 256],
        }
    }

    fn params(&self) -> BTreeMap<String, serde_json::Value> {
        use serde_json::json;
        BTreeMap::from([
            ("mode".into(), json!(if self.full { "full" } else { "quick" })),
            ("reps".into(), json!(self.reps)),
            ("reps_s4_s6".into(), json!(self.reps_slow)),
            ("ramp_s".into(), json!(self.ramp)),
            ("runtime_s".into(), json!(self.runtime)),
            ("s1".into(), json!(format!("rw=read|write filesize={} bs=1m nrfiles=1 iodepth=4", self.s1_filesize))),
            ("s1v".into(), json!(format!("S1 over a veth pair of MTU {:?}: rw=read|write filesize={} bs=1m iodepth=4, the whole file once per repetition", self.s1v_mtus, self.s1_filesize))),
            ("s2".into(), json!(format!("rw=randread|randwrite filesize={} bs=4k nrfiles=1 iodepth=16", self.s2_filesize))),
            ("s3".into(), json!("rw=randread|randwrite filesize=100k bs=4k nrfiles=16 iodepth=4")),
            ("s4".into(), json!(format!("group 1: {} photo-like files{}; points (delay ms, loss %) {:?}", self.s4_files, if self.s4_large > 0 { format!(", group 2: one {} MB file", self.s4_large / 1_000_000) } else { String::new() }, self.s4_points))),
            ("s5".into(), json!(format!("delays ms {:?}, files {:?} bytes", self.s5_delays, self.s5_sizes))),
            ("f".into(), json!(format!("smbq-quic beside one TCP CUBIC flow, both uploads, {} s, 100 Mbit/s, 20 ms one way, a queue of one BDP", self.fair_secs))),
            ("s6".into(), json!(format!("connections {:?}, each randread bs=4k 16 files of 100k iodepth 4; idle: 256 connections", self.s6_conns))),
        ])
    }
}

const SMB_ROWS: [&str; 4] = ["smbq-quic", "smbq-tcp-enc", "samba-tcp-enc", "samba-tcp-sign"];
const CEILINGS: [&str; 3] = ["raw-quic", "tcp-tls", "raw-tcp"];
const S1V_ROWS: [&str; 2] = ["smbq-quic", "smbq-tcp-enc"];

/// Every figure of the run, as it is gathered.
struct Book {
    entries: Vec<Entry>,
}

impl Book {
    fn entry(&mut self, scenario: &str, case: &str, system: &str, point: &[(&str, f64)]) -> &mut Entry {
        let point: BTreeMap<String, f64> = point.iter().map(|&(k, v)| (k.to_string(), v)).collect();
        let i = match self.entries.iter().position(|e| e.scenario == scenario && e.case == case && e.system == system && e.point == point) {
            Some(i) => i,
            None => {
                self.entries.push(Entry { scenario: scenario.into(), case: case.into(), system: system.into(), point, status: "ok".into(), figures: BTreeMap::new() });
                self.entries.len() - 1
            }
        };
        &mut self.entries[i]
    }

    fn add(&mut self, scenario: &str, case: &str, system: &str, point: &[(&str, f64)], figures: &[(&str, f64)]) {
        let e = self.entry(scenario, case, system, point);
        for &(k, v) in figures {
            if v.is_finite() {
                e.figures.entry(k.to_string()).or_default().reps.push(v);
            }
        }
    }

    /// A row that could not be measured, and why (the first reason stays).
    fn fail(&mut self, scenario: &str, case: &str, system: &str, point: &[(&str, f64)], why: &str) {
        let e = self.entry(scenario, case, system, point);
        if e.status == "ok" {
            e.status = why.to_string();
        }
    }
}

/// Progress on stderr: what runs now, how far along, time so far.
struct Progress {
    start: Instant,
    done: usize,
}

impl Progress {
    fn step(&mut self, what: &str, result: &str) {
        self.done += 1;
        let t = self.start.elapsed().as_secs();
        eprintln!("[{:>3}:{:02}] #{:<4} {what:<48} {result}", t / 60, t % 60, self.done);
    }
}

pub fn main(a: SuiteArgs) -> anyhow::Result<()> {
    let plan = Plan::new(&a);
    let _ = CLIENT_CONGESTION.set(a.quic_congestion);
    let started = now_rfc3339();
    let out = a.out.clone().unwrap_or_else(|| PathBuf::from("bench/results").join(&started[..10]));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let parent = a.dir.clone().unwrap_or_else(|| if Path::new("/dev/shm").is_dir() { "/dev/shm".into() } else { std::env::temp_dir() });
    let work = tempfile::Builder::new().prefix("smbq-suite-").tempdir_in(&parent)?;
    // smbd opens files as its Unix user, who must be able to pass through.
    std::fs::set_permissions(work.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    // smbq-quic-cubic (the controller smbq's replaced, side by side) only
    // when named.
    let want = |s: &str| a.systems.as_ref().map_or(s != "smbq-quic-cubic", |v| v.iter().any(|x| x == s));
    let scenario = |s: &str| a.scenarios.iter().any(|x| x.eq_ignore_ascii_case(s));
    let mut book = Book { entries: Vec::new() };
    let mut progress = Progress { start: Instant::now(), done: 0 };
    let mut link_checks = Vec::new();
    eprintln!("smbq-bench suite ({}), servers under {}, results to {}", if plan.full { "full" } else { "quick" }, parent.display(), out.display());

    if ["S1", "S2", "S3", "S6"].iter().any(|s| scenario(s)) {
        loopback(&plan, work.path(), a.smbq_config.as_deref(), &want, &scenario, &mut book, &mut progress)?;
    }
    if scenario("S1") {
        ceilings(&plan, &parent, &want, &mut book, &mut progress);
    }
    if scenario("S1v") {
        over_veth(&plan, &parent, &want, &mut book, &mut progress);
    }
    if ["S4", "S5", "S5m", "F"].iter().any(|s| scenario(s)) {
        if let Err(e) = over_link(&plan, work.path(), a.smbq_config.as_deref(), &want, &scenario, &mut book, &mut progress, &mut link_checks) {
            eprintln!("the link scenarios stopped: {e:#}");
            for s in ["S4", "S5", "S5m", "F"].into_iter().filter(|s| scenario(s)) {
                book.fail(s, "all", "all", &[], &format!("failed: {e:#}"));
            }
        }
    }

    let results = Results {
        schema: 1,
        started,
        git_commit: git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into()),
        git_dirty: git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty()),
        machine: machine(),
        versions: versions(),
        params: {
            let mut p = plan.params();
            p.insert("smbq_config".into(), a.smbq_config.as_ref().map_or("none (defaults)".into(), |c| std::fs::read_to_string(c).unwrap_or_default()).into());
            p.insert("quic_client_congestion".into(), format!("{:?}", a.quic_congestion).to_lowercase().into());
            p
        },
        link_checks,
        results: book.entries,
    };
    let json = out.join("results.json");
    std::fs::write(&json, serde_json::to_string_pretty(&results)?)?;
    crate::report::write(&results, &out)?;
    eprintln!("wrote {}, {} and charts in {}", json.display(), out.join("report.md").display(), progress.start.elapsed().as_secs());
    Ok(())
}

/// S1-S3 and S6: smbq and smbd on 127.0.0.1, pinned to CPU 0.
fn loopback(plan: &Plan, work: &Path, smbq_config: Option<&Path>, want: &dyn Fn(&str) -> bool, scenario: &dyn Fn(&str) -> bool, book: &mut Book, progress: &mut Progress) -> anyhow::Result<()> {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let at = Place { ip: IpAddr::V4(Ipv4Addr::LOCALHOST), netns: None, cpu: (cpus >= 2).then_some(0) };
    let smbq = if SMB_ROWS[..2].iter().any(|s| want(s)) { start(peers::start_smbq(&work.join("smbq"), &at, smbq_config)) } else { Err("not asked for".into()) };
    let smbd = if SMB_ROWS[2..].iter().any(|s| want(s)) { start(peers::start_smbd(&work.join("smbd"), &at)) } else { Err("not asked for".into()) };
    let rows: Vec<(&str, Result<&Server, String>)> = SMB_ROWS.iter().filter(|s| want(s)).map(|&s| (s, server_of(s, &smbq, &smbd))).collect();
    // The client: one thread, on CPU 1.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("suite-client")
        .on_thread_start(move || {
            if cpus >= 2 {
                crate::pin(1);
            }
        })
        .enable_all()
        .build()?;
    let mib = |b: u64| b as f64 / f64::from(1u32 << 30);
    let jobs: Vec<(&str, &str, Job)> = [
        ("S1", "read", job("read", 1 << 20, 1, plan.s1_filesize, 4, plan, "s1")),
        ("S1", "write", job("write", 1 << 20, 1, plan.s1_filesize, 4, plan, "s1")),
        ("S2", "randread", job("randread", 4096, 1, plan.s2_filesize, 16, plan, "s2")),
        ("S2", "randwrite", job("randwrite", 4096, 1, plan.s2_filesize, 16, plan, "s2")),
        ("S3", "randread", job("randread", 4096, 16, 100 << 10, 4, plan, "s3")),
        ("S3", "randwrite", job("randwrite", 4096, 16, 100 << 10, 4, plan, "s3")),
    ]
    .into_iter()
    .filter(|(s, _, _)| scenario(s))
    .collect();
    for rep in 0..plan.reps {
        for (sc, case, j) in &jobs {
            for (sys, srv) in &rows {
                let what = format!("{sc} {case} {sys} rep {}/{}", rep + 1, plan.reps);
                let srv = match srv {
                    Ok(s) => *s,
                    Err(why) => {
                        book.fail(sc, case, sys, &[], why);
                        continue;
                    }
                };
                let j = Job { server_pid: Some(srv.pid()), ..j.clone() };
                let r = rt.block_on(async {
                    let mut pipe = Pipe::new(RemoteSmb::of(srv).connect(sys).await?);
                    pipe.layout(&j).await?;
                    let r = pipe.measure(&j).await?;
                    pipe.close_all().await?;
                    hang_up(pipe.c);
                    anyhow::Ok(r)
                });
                match r {
                    Ok(r) => {
                        let gib = mib(r.bytes);
                        book.add(
                            sc,
                            case,
                            sys,
                            &[],
                            &[
                                ("mb_s", r.mb_s()),
                                ("iops", r.iops()),
                                ("lat_p50_us", r.lat_us(0.5)),
                                ("lat_p99_us", r.lat_us(0.99)),
                                ("lat_p999_us", r.lat_us(0.999)),
                                ("server_cpu_s_per_gib", r.server_cpu.map_or(f64::NAN, |s| s / gib)),
                                ("client_cpu_s_per_gib", r.client_cpu / gib),
                                ("server_rss_mib", srv.rss_mib()),
                            ],
                        );
                        progress.step(&what, &format!("{:.1} MB/s {:.0} IOPS p99 {:.0} us", r.mb_s(), r.iops(), r.lat_us(0.99)));
                    }
                    Err(e) => {
                        book.fail(sc, case, sys, &[], &format!("failed: {e:#}"));
                        progress.step(&what, &format!("failed: {e:#}"));
                    }
                }
            }
        }
    }
    if scenario("S6") {
        for rep in 0..plan.reps_slow {
            for (sys, srv) in rows.iter().filter(|(s, _)| *s != "samba-tcp-sign") {
                let srv = match srv {
                    Ok(s) => *s,
                    Err(why) => {
                        book.fail("S6", "conns", sys, &[], why);
                        continue;
                    }
                };
                // Idle first, on a server no load has churned yet.
                let what = format!("S6 idle connections {sys} rep {}/{}", rep + 1, plan.reps_slow);
                let n = *plan.s6_conns.iter().max().unwrap_or(&256);
                match rt.block_on(idle(sys, srv, n)) {
                    Ok(kib) => {
                        progress.step(&what, &format!("{kib:.0} KiB per connection"));
                        book.add("S6", "idle", sys, &[("connections", n as f64)], &[("server_kib_per_conn", kib)]);
                    }
                    Err(e) => {
                        progress.step(&what, &format!("failed: {e:#}"));
                        book.fail("S6", "idle", sys, &[("connections", n as f64)], &format!("failed: {e:#}"));
                    }
                }
                for &n in &plan.s6_conns {
                    let what = format!("S6 {n} connections {sys} rep {}/{}", rep + 1, plan.reps_slow);
                    let point = [("connections", n as f64)];
                    match rt.block_on(scale(sys, srv, n, plan)) {
                        Ok(f) => {
                            progress.step(&what, &format!("{:.0} IOPS, server {:.0} MiB", f[0].1, f[2].1));
                            book.add("S6", "conns", sys, &point, &f);
                        }
                        Err(e) => {
                            progress.step(&what, &format!("failed: {e:#}"));
                            book.fail("S6", "conns", sys, &point, &format!("failed: {e:#}"));
                        }
                    }
                }
            }
        }
    }
    // As the transport bench does: tear the runtime down without waiting
    // on QUIC endpoints' last timers.
    rt.shutdown_background();
    Ok(())
}

fn job(rw: &str, bs: u64, nrfiles: usize, filesize: u64, iodepth: usize, plan: &Plan, name: &str) -> Job {
    Job { rw: rw.into(), bs, nrfiles, filesize, iodepth, ramp: plan.ramp, runtime: plan.runtime, name: format!("smbq-bench-{name}"), seed: 1, server_pid: None }
}

fn start(r: anyhow::Result<Server>) -> Result<Server, String> {
    r.map_err(|e| {
        let why = format!("not run: {e:#}");
        eprintln!("{why}");
        why
    })
}

/// A config for `smbq serve` with quinn's CUBIC (the smbq-quic-cubic row).
fn cubic_config(work: &Path) -> anyhow::Result<PathBuf> {
    let p = work.join("cubic.toml");
    std::fs::write(&p, "[quic_options]\ncongestion = \"cubic\"\n")?;
    Ok(p)
}

fn server_of<'a>(system: &str, smbq: &'a Result<Server, String>, smbd: &'a Result<Server, String>) -> Result<&'a Server, String> {
    let s = if system.starts_with("smbq") { smbq } else { smbd };
    s.as_ref().map_err(Clone::clone)
}

/// S6: `n` connections, each an S3-like job (randread, 4 KiB, 16 files of
/// 100 KiB, 4 outstanding), measured together: total IOPS, the server's
/// CPU per operation and its memory (PSS of it and its children).
async fn scale(system: &str, srv: &Server, n: usize, plan: &Plan) -> anyhow::Result<Vec<(&'static str, f64)>> {
    let j = Job { runtime: plan.runtime, ..job("randread", 4096, 16, 100 << 10, 4, plan, "s6") };
    let mut pipes = Vec::with_capacity(n);
    let remote = RemoteSmb::of(srv);
    for _ in 0..n {
        let mut p = Pipe::new(remote.connect(system).await?);
        p.layout(&j).await?;
        pipes.push(p);
    }
    let cpu0 = crate::random::tree_cpu_seconds(srv.pid());
    let mut set = tokio::task::JoinSet::new();
    for mut p in pipes {
        let j = j.clone();
        set.spawn(async move {
            let r = p.measure(&j).await;
            (p, r)
        });
    }
    let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 120_000_000_000, 3)?;
    let (mut ops, mut window) = (0u64, 0f64);
    let mem = srv_mem_mib(srv);
    let mut pipes = Vec::new();
    while let Some(joined) = set.join_next().await {
        let (p, r) = joined?;
        let r = r?;
        ops += r.ops;
        window = window.max(r.measured_secs);
        hist.add(&r.hist)?;
        pipes.push(p);
    }
    let cpu = crate::random::tree_cpu_seconds(srv.pid()).zip(cpu0).map(|(b, a)| b - a);
    for mut p in pipes {
        p.close_all().await?;
        hang_up(p.c);
    }
    let iops = ops as f64 / window.max(1e-9);
    Ok(vec![
        ("iops", iops),
        ("lat_p99_us", hist.value_at_quantile(0.99) as f64 / 1e3),
        ("server_pss_mib", mem),
        ("server_cpu_us_per_op", cpu.map_or(f64::NAN, |c| c * 1e6 / ops.max(1) as f64)),
    ])
}

/// S6 idle: the server's memory per authenticated, tree-connected idle
/// connection: its PSS with 16 such connections (what any connection
/// shares is allocated by then), and with `n` more.
async fn idle(system: &str, srv: &Server, n: usize) -> anyhow::Result<f64> {
    let remote = RemoteSmb::of(srv);
    let mut conns = Vec::with_capacity(n + 16);
    for _ in 0..16 {
        conns.push(remote.connect(system).await?);
    }
    let before = settled_mem_mib(srv).await;
    for _ in 0..n {
        conns.push(remote.connect(system).await?);
    }
    let after = settled_mem_mib(srv).await;
    conns.into_iter().for_each(hang_up);
    Ok((after - before) * 1024.0 / n as f64)
}

/// The server's memory once two readings 200 ms apart agree within 1%
/// (connections that just ended are gone), at most 5 s.
async fn settled_mem_mib(srv: &Server) -> f64 {
    let mut last = srv_mem_mib(srv);
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = srv_mem_mib(srv);
        if (now - last).abs() <= 0.01 * last {
            return now;
        }
        last = now;
    }
    last
}

/// Ends a client's connection now: QUIC with CONNECTION_CLOSE (the
/// server would keep a silently dropped one until its idle timeout), TCP
/// with the socket's FIN.
fn hang_up(c: Client) {
    if let Some((_, conn)) = &c.quic {
        conn.close(0u32.into(), b"");
    }
}

/// Proportional set size of the server and its children (smbd forks one
/// per connection; their shared pages are counted once), MiB.
fn srv_mem_mib(srv: &Server) -> f64 {
    crate::random::tree_pids(srv.pid())
        .iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).ok())
        .filter_map(|s| s.lines().find_map(|l| l.strip_prefix("Pss:")).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse::<f64>().ok()))
        .sum::<f64>()
        / 1024.0
}

/// The transport bench (main.rs) in a child process, `--json --reps 1`
/// with `args`, its servers' files under `parent`: its JSON.
fn transport_bench(args: &[&str], parent: &Path) -> anyhow::Result<serde_json::Value> {
    let exe = std::env::current_exe()?;
    let o = std::process::Command::new(exe).args(["--json", "--reps", "1"]).args(args).arg("--dir").arg(parent).output()?;
    if !o.status.success() {
        bail!("{}", String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("failed"));
    }
    Ok(serde_json::from_slice::<serde_json::Value>(&o.stdout)?)
}

/// The S1 ceilings: the transport bench in a child process, once per
/// repetition, on the S1 file's size.
fn ceilings(plan: &Plan, parent: &Path, want: &dyn Fn(&str) -> bool, book: &mut Book, progress: &mut Progress) {
    let systems: Vec<&str> = CEILINGS.into_iter().filter(|s| want(s)).collect();
    if systems.is_empty() {
        return;
    }
    let size_mib = (plan.s1_filesize >> 20).to_string();
    for rep in 0..plan.reps {
        let what = format!("S1 ceilings rep {}/{}", rep + 1, plan.reps);
        match transport_bench(&["--size-mib", &size_mib, "--systems", &systems.join(",")], parent) {
            Ok(v) => {
                let mut line = String::new();
                for sys in &systems {
                    for dir in ["read", "write"] {
                        let m = &v["median"][format!("{sys}-{dir}")];
                        let f = |k: &str| m[k].as_f64().unwrap_or(f64::NAN);
                        book.add("S1", dir, sys, &[], &[("mb_s", f("mb_s")), ("server_cpu_s_per_gib", f("server_cpu_s_per_gib")), ("client_cpu_s_per_gib", f("client_cpu_s_per_gib"))]);
                        line += &format!("{sys} {dir} {:.0}  ", f("mb_s"));
                    }
                }
                progress.step(&what, &line);
            }
            Err(e) => {
                progress.step(&what, &format!("failed: {e:#}"));
                for sys in &systems {
                    for dir in ["read", "write"] {
                        book.fail("S1", dir, sys, &[], &format!("failed: {e:#}"));
                    }
                }
            }
        }
    }
}

/// S1v: S1 between two namespaces joined by a veth pair of each MTU (the
/// transport bench with `--veth-mtu`, which makes and removes them), the
/// MTUs alternating within each repetition. The figures, per side where
/// they say so: CPU ns per packet (the side's threads' CPU time over the
/// packets it sent and received: UDP datagrams, or TCP segments of MSS
/// size as TCP_INFO counts them), packets per sending and per receiving
/// system call (QUIC; not counted for TCP), ACKs sent per packet
/// received (the server's from the ACK frames our client received), the
/// data sender's mean datagram size, and the client's path MTU and when
/// MTU discovery reached it.
fn over_veth(plan: &Plan, parent: &Path, want: &dyn Fn(&str) -> bool, book: &mut Book, progress: &mut Progress) {
    let systems: Vec<&str> = S1V_ROWS.into_iter().filter(|s| want(s)).collect();
    if systems.is_empty() {
        return;
    }
    let size_mib = (plan.s1_filesize >> 20).to_string();
    const FIGURES: [(&str, &str); 15] = [
        ("mb_s", "mb_s"),
        ("server_cpu_s_per_gib", "server_cpu_s_per_gib"),
        ("client_cpu_s_per_gib", "client_cpu_s_per_gib"),
        ("server_cpu_ns_per_packet", "server_ns_per_packet"),
        ("client_cpu_ns_per_packet", "client_ns_per_packet"),
        ("server_tx_packets_per_call", "server_tx_packets_per_call"),
        ("server_rx_packets_per_call", "server_rx_packets_per_call"),
        ("client_tx_packets_per_call", "client_tx_packets_per_call"),
        ("client_rx_packets_per_call", "client_rx_packets_per_call"),
        ("acks_per_data_packet", "acks_per_data_packet"),
        ("server_acks_per_rx_packet", "server_acks_per_rx_packet"),
        ("client_acks_per_rx_packet", "client_acks_per_rx_packet"),
        ("data_datagram_bytes", "data_datagram_bytes"),
        ("client_path_mtu", "client_path_mtu"),
        ("client_mtu_reached_ms", "client_mtu_reached_ms"),
    ];
    for rep in 0..plan.reps {
        for &mtu in &plan.s1v_mtus {
            let what = format!("S1v MTU {mtu} rep {}/{}", rep + 1, plan.reps);
            let point = [("mtu", f64::from(mtu))];
            match transport_bench(&["--size-mib", &size_mib, "--systems", &systems.join(","), "--veth-mtu", &mtu.to_string()], parent) {
                Ok(v) => {
                    let mut line = String::new();
                    for sys in &systems {
                        for dir in ["read", "write"] {
                            let m = &v["median"][format!("{sys}-{dir}")];
                            let figures: Vec<(&str, f64)> = FIGURES.iter().map(|&(name, key)| (name, m[key].as_f64().unwrap_or(f64::NAN))).collect();
                            book.add("S1v", dir, sys, &point, &figures);
                            line += &format!("{sys} {dir} {:.0}  ", m["mb_s"].as_f64().unwrap_or(f64::NAN));
                        }
                    }
                    progress.step(&what, &line);
                }
                Err(e) => {
                    progress.step(&what, &format!("failed: {e:#}"));
                    for sys in &systems {
                        for dir in ["read", "write"] {
                            book.fail("S1v", dir, sys, &point, &format!("failed: {e:#}"));
                        }
                    }
                }
            }
        }
    }
}

/// S4 and S5, over the link emulator.
#[allow(clippy::too_many_arguments)]
fn over_link(
    plan: &Plan,
    work: &Path,
    smbq_config: Option<&Path>,
    want: &dyn Fn(&str) -> bool,
    scenario: &dyn Fn(&str) -> bool,
    book: &mut Book,
    progress: &mut Progress,
    checks: &mut Vec<LinkCheck>,
) -> anyhow::Result<()> {
    let link = Link::start(LinkParams::default()).context("starting the link emulator (needs root, /dev/net/tun, iproute2)")?;
    let unimpaired = link.check_twice(10_000, true)?;
    progress.step("link check, no impairment", &check_line(&unimpaired));
    checks.push(unimpaired);
    let at = Place { ip: IpAddr::V4(link.server_addr()), netns: Some(link.server_ns().to_string()), cpu: None };
    let smbq = if ["smbq-quic", "smbq-quic-ms", "smbq-tcp-enc"].iter().any(|s| want(s)) { start(peers::start_smbq(&work.join("link-smbq"), &at, smbq_config)) } else { Err("not asked for".into()) };
    // The same server on quinn's CUBIC (smbq-quic-cubic), in the same run.
    let smbq_cubic = if want("smbq-quic-cubic") {
        start(cubic_config(work).and_then(|c| peers::start_smbq(&work.join("link-smbq-cubic"), &at, Some(&c))))
    } else {
        Err("not asked for".into())
    };
    let smbd = if want("samba-tcp-enc") { start(peers::start_smbd(&work.join("link-smbd"), &at)) } else { Err("not asked for".into()) };
    let server = |sys: &str| if sys == "smbq-quic-cubic" { smbq_cubic.as_ref().map_err(Clone::clone) } else { server_of(sys, &smbq, &smbd) };
    let sshd = if want("scp") && scenario("S4") { start(peers::start_sshd(&work.join("link-sshd"), &at)) } else { Err("not asked for".into()) };
    let mut checked: Vec<(f64, f64)> = Vec::new();
    let mut set = |delay: f64, loss: f64, progress: &mut Progress, checks: &mut Vec<LinkCheck>| -> anyhow::Result<()> {
        let p = LinkParams { delay: Duration::from_secs_f64(delay / 1e3), loss: loss / 100.0, ..LinkParams::default() };
        link.set(p);
        // Packets already in the delay line leave under the old setting.
        std::thread::sleep(Duration::from_millis(200));
        if !checked.contains(&(delay, loss)) && (delay, loss) != (0.0, 0.0) {
            checked.push((delay, loss));
            let c = link.check_twice(10_000, false)?;
            progress.step(&format!("link check, delay {delay} ms, loss {loss}%"), &check_line(&c));
            checks.push(c);
        }
        Ok(())
    };

    if scenario("S4") {
        let local = work.join("s4-local");
        let group1 = make_group1(&local, plan.s4_files)?;
        let mut groups = vec![("group1", group1)];
        if plan.s4_large > 0 {
            groups.push(("group2", make_files(&local, "group2", &[plan.s4_large], 2)?));
        }
        for &(delay, loss) in &plan.s4_points {
            set(delay, loss, progress, checks)?;
            let point = [("delay_ms", delay), ("loss_pct", loss)];
            for rep in 0..plan.reps_slow {
                for sys in ["scp", "smbq-quic", "smbq-quic-cubic", "smbq-quic-ms", "smbq-tcp-enc", "samba-tcp-enc"].into_iter().filter(|s| want(s)) {
                    let srv = match sys {
                        "scp" => sshd.as_ref().map_err(Clone::clone),
                        s => server(s),
                    };
                    for (g, files) in &groups {
                        for dir in ["upload", "download"] {
                            let case = format!("{g}-{dir}");
                            let srv = match &srv {
                                Ok(s) => *s,
                                Err(why) => {
                                    book.fail("S4", &case, sys, &point, why);
                                    continue;
                                }
                            };
                            let what = format!("S4 {case} {sys} {delay}ms {loss}% rep {}/{}", rep + 1, plan.reps_slow);
                            let bytes: u64 = files.iter().map(|f| f.1).sum();
                            let before = link.stats();
                            let r = transfer_group(&link, sys, srv, files, dir, &local);
                            if std::env::var_os("SMBQ_BENCH_DEBUG").is_some() {
                                let (a, b) = (before, link.stats());
                                let d = |x: crate::linkem::DirStats, y: crate::linkem::DirStats| format!("{} forwarded {} lost", y.forwarded - x.forwarded, y.lost - x.lost);
                                eprintln!("link during {what}: client->server {}, server->client {}", d(a.client_to_server, b.client_to_server), d(a.server_to_client, b.server_to_client));
                            }
                            match r {
                                Ok(secs) => {
                                    progress.step(&what, &format!("{secs:.2} s"));
                                    book.add("S4", &case, sys, &point, &[("seconds", secs), ("mb_s", bytes as f64 / secs / 1e6)]);
                                }
                                Err(e) => {
                                    progress.step(&what, &format!("failed: {e:#}"));
                                    book.fail("S4", &case, sys, &point, &format!("failed: {e:#}"));
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    if scenario("S5") {
        for &size in &plan.s5_sizes {
            let name = format!("s5-{size}.bin");
            for srv in [&smbq, &smbq_cubic, &smbd].into_iter().flatten() {
                put_in_share(&srv.share_dir.join(&name), &crate::pattern(size as usize))?;
            }
        }
        for &delay in &plan.s5_delays {
            set(delay, 0.0, progress, checks)?;
            for rep in 0..plan.reps {
                for sys in ["smbq-quic", "smbq-quic-cubic", "smbq-quic-0rtt", "smbq-tcp-enc", "samba-tcp-enc"].into_iter().filter(|s| want(s)) {
                    for &size in &plan.s5_sizes {
                        let case = format!("phases-{}mib", size >> 20);
                        let point = [("delay_ms", delay)];
                        let srv = match server(sys) {
                            Ok(s) => s,
                            Err(why) => {
                                book.fail("S5", &case, sys, &point, &why);
                                continue;
                            }
                        };
                        let what = format!("S5 {case} {sys} {delay}ms rep {}/{}", rep + 1, plan.reps);
                        match phases(&link, sys, srv, size) {
                            Ok(f) => {
                                progress.step(&what, &format!("handshake {:.1} setup {:.1} ttfb {:.1} ms", f[0].1, f[1].1, f[2].1));
                                book.add("S5", &case, sys, &point, &f);
                            }
                            Err(e) => {
                                progress.step(&what, &format!("failed: {e:#}"));
                                book.fail("S5", &case, sys, &point, &format!("failed: {e:#}"));
                            }
                        }
                    }
                }
            }
        }
    }

    // F: one smbq-quic upload beside one TCP CUBIC flow (fairness.rs).
    if scenario("F") {
        let p = crate::fairness::params();
        link.set(p);
        std::thread::sleep(Duration::from_millis(200));
        let c = link.check_twice(2_000, false)?;
        progress.step("link check, fairness bottleneck", &check_line(&c));
        checks.push(c);
        let point = [("delay_ms", 20.0), ("rate_mbit", 100.0)];
        for rep in 0..plan.reps_slow {
            for sys in ["smbq-quic", "smbq-quic-cubic"].into_iter().filter(|s| want(s)) {
                let srv = match server(sys) {
                    Ok(s) => s,
                    Err(why) => {
                        book.fail("F", "beside-tcp-cubic", sys, &point, &why);
                        continue;
                    }
                };
                let what = format!("F {sys} beside TCP CUBIC, {} s, rep {}/{}", plan.fair_secs, rep + 1, plan.reps_slow);
                match crate::fairness::measure(&link, RemoteSmb::of(srv), sys, plan.fair_secs) {
                    Ok((quic, tcp)) => {
                        let share = quic / (quic + tcp);
                        progress.step(&what, &format!("QUIC {:.1} Mbit/s, TCP {:.1} Mbit/s, QUIC's share {share:.2}", quic / 1e6, tcp / 1e6));
                        book.add("F", "beside-tcp-cubic", sys, &point, &[("quic_mbit_s", quic / 1e6), ("tcp_mbit_s", tcp / 1e6), ("quic_share", share)]);
                    }
                    Err(e) => {
                        progress.step(&what, &format!("failed: {e:#}"));
                        book.fail("F", "beside-tcp-cubic", sys, &point, &format!("failed: {e:#}"));
                    }
                }
            }
        }
    }

    // S5m: a read across the client's change of address (migration.rs).
    if scenario("S5m") {
        let (delay, size) = (20.0, crate::migration::SIZE);
        crate::migration::prepare(&link)?;
        if let Ok(srv) = &smbq {
            put_in_share(&srv.share_dir.join(crate::migration::NAME), &crate::pattern(size as usize))?;
        }
        set(delay, 0.0, progress, checks)?;
        let (case, point) = (format!("read-{}mib", size >> 20), [("delay_ms", delay)]);
        for rep in 0..plan.reps_slow {
            for sys in ["smbq-quic", "smbq-tcp-enc"].into_iter().filter(|s| want(s)) {
                let srv = match server_of(sys, &smbq, &smbd) {
                    Ok(s) => s,
                    Err(why) => {
                        book.fail("S5m", &case, sys, &point, &why);
                        continue;
                    }
                };
                let what = format!("S5m {case} {sys} {delay}ms rep {}/{}", rep + 1, plan.reps_slow);
                match crate::migration::measure(&link, sys, srv, &work.join("link-smbq").join("server.log"), &work.join("s5m-local")) {
                    Ok(f) => {
                        progress.step(&what, &f.iter().map(|(k, v)| format!("{k} {v:.2}")).collect::<Vec<_>>().join(", "));
                        book.add("S5m", &case, sys, &point, &f);
                    }
                    Err(e) => {
                        progress.step(&what, &format!("failed: {e:#}"));
                        book.fail("S5m", &case, sys, &point, &format!("failed: {e:#}"));
                    }
                }
            }
        }
    }
    Ok(())
}

fn check_line(c: &LinkCheck) -> String {
    format!(
        "rtt {:.2} ms, loss {:.2}%{} {}",
        c.rtt_ms,
        c.measured_loss_pct,
        c.throughput_gbit.map(|g| format!(", {g:.2} Gbit/s")).unwrap_or_default(),
        if c.ok { "ok" } else { "OUT OF BOUNDS" }
    )
}

/// Group 1 of the 001 paper: `n` files with the sizes of its JPEG photos
/// (min 177 KB, max 1.72 MB, mean 658 KB, sd 407 KB), from a fixed seed.
fn make_group1(dir: &Path, n: usize) -> anyhow::Result<Vec<(PathBuf, u64)>> {
    make_files(dir, "group1", &group1_sizes(n, 1), 1)
}

/// Sizes from a log-normal with the paper's mean and deviation, kept
/// within its minimum and maximum.
fn group1_sizes(n: usize, seed: u64) -> Vec<u64> {
    let (mean, sd): (f64, f64) = (658e3, 407e3);
    let s2 = (1.0 + (sd / mean).powi(2)).ln();
    let mu = mean.ln() - s2 / 2.0;
    let mut rng = crate::random::Rng::new(seed);
    let mut uniform = || ((rng.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    (0..n)
        .map(|_| {
            let z = (-2.0 * uniform().ln()).sqrt() * (2.0 * std::f64::consts::PI * uniform()).cos();
            (mu + s2.sqrt() * z).exp().clamp(177e3, 1.72e6) as u64
        })
        .collect()
}

/// Files of the given sizes with incompressible content.
fn make_files(dir: &Path, prefix: &str, sizes: &[u64], seed: u64) -> anyhow::Result<Vec<(PathBuf, u64)>> {
    std::fs::create_dir_all(dir)?;
    let mut x = seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1;
    let mut out = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let path = dir.join(format!("{prefix}-{i:03}.jpg"));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
        let mut left = size;
        while left > 0 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = x.to_le_bytes();
            let n = left.min(8) as usize;
            std::io::Write::write_all(&mut f, &b[..n])?;
            left -= n as u64;
        }
        std::io::Write::flush(&mut f)?;
        out.push((path, size));
    }
    Ok(out)
}

/// A file for a server to read, writable by whoever it serves as (smbd
/// opens as its Unix user, and our client asks for read and write).
fn put_in_share(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, data)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(())
}

fn sha256_file(p: &Path) -> anyhow::Result<[u8; 32]> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut f = std::fs::File::open(p)?;
    std::io::copy(&mut f, &mut h)?;
    Ok(h.finalize().into())
}

/// Uploads or downloads a group with `system`, from the client's
/// namespace; the seconds it took. Every file is checked by SHA-256
/// afterwards (upload: the server's copy; download: the copy received).
fn transfer_group(link: &Link, system: &str, srv: &Server, files: &[(PathBuf, u64)], dir: &str, local: &Path) -> anyhow::Result<f64> {
    let names: Vec<String> = files.iter().filter_map(|(p, _)| Some(p.file_name()?.to_string_lossy().into_owned())).collect();
    let back = local.join("received");
    let _ = std::fs::remove_dir_all(&back);
    std::fs::create_dir_all(&back)?;
    for n in &names {
        let _ = std::fs::remove_file(srv.share_dir.join(n));
    }
    if dir == "download" {
        for (p, _) in files {
            put_in_share(&srv.share_dir.join(p.file_name().context("file name")?), &std::fs::read(p)?)?;
        }
    }
    let secs = if system == "scp" {
        let key = srv.ssh_key.clone().context("no client key")?;
        let remote = format!("root@{}", srv.tcp.ip());
        let mut cmd = link.command(link.client_ns(), "scp");
        cmd.args(["-q", "-B", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-P", &srv.tcp.port().to_string(), "-i"]).arg(&key);
        if dir == "upload" {
            cmd.args(files.iter().map(|f| &f.0)).arg(format!("{remote}:{}/", srv.share_dir.display()));
        } else {
            // One remote pattern: one SSH connection for the group, as an
            // upload has (a remote path each would open one each).
            let prefix = names.first().and_then(|n| n.split('-').next()).context("no files")?;
            cmd.arg(format!("{remote}:{}/{prefix}-*", srv.share_dir.display())).arg(&back);
        }
        let t = Instant::now();
        let out = cmd.output()?;
        if !out.status.success() {
            bail!("scp: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        t.elapsed().as_secs_f64()
    } else {
        let (system, remote) = (system.to_string(), RemoteSmb::of(srv));
        let (files, back2, dir2, names2) = (files.to_vec(), back.clone(), dir.to_string(), names.clone());
        link.in_ns(link.client_ns(), move || -> anyhow::Result<f64> {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async move {
                let mut c = remote.connect(&system).await?;
                // Several files at a time (S4_FILES_IN_FLIGHT), each with its
                // CREATE, 1 MiB READs or WRITEs and CLOSE; with several streams,
                // each file on a stream of its own (smbq_client::many).
                let jobs: Vec<FileJob> = if dir2 == "upload" {
                    files.iter().zip(&names2).map(|((path, _), name)| Ok(FileJob::Put { name: name.clone(), data: bytes::Bytes::from(std::fs::read(path)?) })).collect::<anyhow::Result<_>>()?
                } else {
                    files.iter().zip(&names2).map(|((_, size), name)| FileJob::Get { name: name.clone(), size: *size }).collect()
                };
                let t = Instant::now();
                let got = c.transfer_files(&jobs, S4_FILES_IN_FLIGHT, 1 << 20).await?;
                let secs = t.elapsed().as_secs_f64();
                if dir2 == "download" {
                    for (data, name) in got.iter().zip(&names2) {
                        std::fs::write(back2.join(name), data)?;
                    }
                }
                if let Some((_, conn)) = &c.quic {
                    crate::debug_stats(&system, &dir2, conn);
                }
                Ok(secs)
            })
        })??
    };
    for ((p, _), n) in files.iter().zip(&names) {
        let copy = if dir == "upload" { srv.share_dir.join(n) } else { back.join(n) };
        if sha256_file(p)? != sha256_file(&copy).with_context(|| format!("{} missing", copy.display()))? {
            bail!("{n}: SHA-256 of the {dir}ed copy differs");
        }
    }
    Ok(secs)
}

/// Files under way at a time in S4's SMB transfers (`smbq_client::many`).
const S4_FILES_IN_FLIGHT: usize = 8;

/// Streams of the smbq-quic-ms row (smbq's multi-stream extension, one
/// per file in flight); smbq-quic uses one, as Windows and Samba do.
const S4_STREAMS: u16 = 1 + S4_FILES_IN_FLIGHT as u16;

/// What a client needs of a server it reaches from another thread.
pub(crate) struct RemoteSmb {
    tcp: SocketAddr,
    quic: Option<SocketAddr>,
    cert: Option<rustls::pki_types::CertificateDer<'static>>,
    user: String,
    password: String,
}

impl RemoteSmb {
    pub(crate) fn of(s: &Server) -> RemoteSmb {
        RemoteSmb { tcp: s.tcp, quic: s.quic, cert: s.cert.clone(), user: s.user.clone(), password: s.password.clone() }
    }

    /// A client of `system`, logged on, its tree connected; the encryption
    /// the row names checked.
    pub(crate) async fn connect(&self, system: &str) -> anyhow::Result<Client> {
        let (c, _) = self.transport(system).await?;
        self.setup(system, c).await
    }

    async fn transport(&self, system: &str) -> anyhow::Result<(Client, Instant)> {
        let t = Instant::now();
        let c = if system.starts_with("smbq-quic") {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(self.cert.clone().context("no certificate")?)?;
            let addr = self.quic.context("no QUIC address")?;
            let congestion = if system == "smbq-quic-cubic" { smbq_quic::Congestion::Cubic } else { CLIENT_CONGESTION.get().copied().unwrap_or_default() };
            let target = |resumption| QuicTarget { congestion, resumption, ..QuicTarget::new(addr, "localhost", roots.clone()) };
            if system == "smbq-quic-0rtt" {
                // S5's 0-RTT reconnect: a first connection, untimed, logs
                // on and brings session tickets; the timed one resumes.
                let r = Some(std::sync::Arc::new(smbq_client::resume::Resumption::default()));
                let first = self.setup(system, Client::connect_quic(target(r.clone())).await.context("QUIC connect")?).await?;
                if let Some((_, conn)) = &first.quic {
                    conn.close(quinn::VarInt::from_u32(0), b"");
                }
                let t = Instant::now();
                return Ok((Client::connect_quic(target(r)).await.context("QUIC connect in 0-RTT")?, t));
            }
            Client::connect_quic(target(None)).await.context("QUIC connect")?
        } else {
            Client::connect_tcp(self.tcp).await.context("TCP connect")?
        };
        Ok((c, t))
    }

    /// NEGOTIATE, SESSION_SETUP and TREE_CONNECT, as `connect` does.
    async fn setup(&self, system: &str, mut c: Client) -> anyhow::Result<Client> {
        if system == "smbq-quic-ms" {
            c.core.offer_streams = S4_STREAMS;
        }
        let quic = system.starts_with("smbq-quic");
        c.negotiate(quic).await.context("NEGOTIATE")?;
        if system == "smbq-quic-ms" && c.streams() != usize::from(S4_STREAMS) {
            bail!("the server agreed to {} streams, not {S4_STREAMS}", c.streams());
        }
        if system == "smbq-quic-0rtt" && c.zero_rtt.accepted().is_some_and(|a| !a) {
            bail!("the server refused the 0-RTT data");
        }
        c.login(&self.user, &self.password).await.context("SESSION_SETUP")?;
        if system.ends_with("-enc") {
            if c.core.cipher.is_none() {
                bail!("the server negotiated no cipher");
            }
            c.core.encrypt = true;
        }
        let share = match system {
            "samba-tcp-enc" => "enc",
            "samba-tcp-sign" => "sign",
            _ => "share",
        };
        c.tree_connect(&format!("\\\\{}\\{share}", self.tcp.ip())).await.context("TREE_CONNECT")?;
        if quic && !c.core.transport_security {
            bail!("QUIC without transport security: SMB encryption would be on");
        }
        Ok(c)
    }
}

/// S5: the phases of reading one file on a new connection, in ms:
/// transport handshake (TCP connect; QUIC handshake and stream), SMB setup
/// (NEGOTIATE, SESSION_SETUP, TREE_CONNECT), time to first byte (CREATE
/// and a 64 KiB READ), first byte (from the start of the connection to
/// the end of that READ), transfer (the whole file in 1 MiB READs, 4
/// outstanding), close (CLOSE). smbq-quic-0rtt is a connection that
/// resumes a TLS session (docs/zero-rtt.md): its handshake phase is nil
/// (the handshake travels with the NEGOTIATE, in setup).
fn phases(link: &Link, system: &str, srv: &Server, size: u64) -> anyhow::Result<Vec<(&'static str, f64)>> {
    let remote = RemoteSmb::of(srv);
    let system = system.to_string();
    link.in_ns(link.client_ns(), move || -> anyhow::Result<Vec<(&'static str, f64)>> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async move {
            let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
            let (c, t0) = remote.transport(&system).await?;
            let handshake = ms(t0);
            let t = Instant::now();
            let mut c = remote.setup(&system, c).await?;
            let setup = ms(t);
            let t = Instant::now();
            let name = format!("s5-{size}.bin");
            let (fid, _) = c.create(&name, disposition::OPEN, 0).await?;
            let first = c.read(fid, 0, 64 << 10).await?;
            if first.is_empty() {
                bail!("{name}: empty first read");
            }
            let ttfb = ms(t);
            let first_byte = ms(t0);
            let t = Instant::now();
            let mut got = 0u64;
            c.read_pipelined(fid, size, 1 << 20, 4, |_, chunk| got += chunk.len() as u64).await?;
            if got != size {
                bail!("{name}: read {got} of {size} bytes");
            }
            let transfer = ms(t);
            let t = Instant::now();
            c.close(fid).await?;
            let close = ms(t);
            if let Some((_, conn)) = &c.quic {
                crate::debug_stats(&system, "S5", conn);
            }
            Ok(vec![("handshake_ms", handshake), ("setup_ms", setup), ("ttfb_ms", ttfb), ("first_byte_ms", first_byte), ("transfer_ms", transfer), ("close_ms", close), ("total_ms", ms(t0))])
        })
    })?
}

fn git(args: &[&str]) -> Option<String> {
    let o = std::process::Command::new("git").args(args).output().ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    Machine {
        cpu_model: cpuinfo.lines().find_map(|l| l.strip_prefix("model name")).and_then(|r| r.split(':').nth(1)).unwrap_or("unknown").trim().to_string(),
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        memory_gib: meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:")).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / (1 << 20) as f64,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
    }
}

fn versions() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("smbq".into(), format!("{} ({})", env!("CARGO_PKG_VERSION"), git(&["describe", "--always", "--dirty"]).unwrap_or_default())),
        ("smbd".into(), peers::version("smbd", &["--version"])),
        ("openssh".into(), peers::version("ssh", &["-V"])),
        ("rustc".into(), peers::version("rustc", &["--version"])),
        ("quinn".into(), "0.11 (patched: third_party/quinn)".into()),
    ])
}

/// Now, as RFC 3339 UTC, without a date crate.
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group1_has_the_papers_distribution() {
        let s = group1_sizes(100, 1);
        assert_eq!(s, group1_sizes(100, 1), "deterministic");
        let mean = s.iter().sum::<u64>() as f64 / s.len() as f64;
        let sd = (s.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / s.len() as f64).sqrt();
        assert!(s.iter().all(|&x| (177_000..=1_720_000).contains(&x)));
        assert!((mean - 658e3).abs() < 0.15 * 658e3, "mean {mean}");
        assert!((sd - 407e3).abs() < 0.25 * 407e3, "sd {sd}");
    }

    #[test]
    fn dates() {
        let d = now_rfc3339();
        assert_eq!(d.len(), 20);
        assert!(d.starts_with("20") && d.ends_with('Z'));
    }

    #[test]
    fn book_keeps_every_repetition_and_the_first_failure() {
        let mut b = Book { entries: Vec::new() };
        b.add("S1", "read", "smbq-quic", &[], &[("mb_s", 1.0)]);
        b.add("S1", "read", "smbq-quic", &[], &[("mb_s", 3.0), ("iops", f64::NAN)]);
        b.fail("S1", "read", "samba-tcp-enc", &[], "not run: smbd is not installed");
        b.fail("S1", "read", "samba-tcp-enc", &[], "second reason");
        assert_eq!(b.entries.len(), 2);
        assert_eq!(b.entries[0].figures["mb_s"].reps, vec![1.0, 3.0]);
        assert!(!b.entries[0].figures.contains_key("iops"));
        assert_eq!(b.entries[1].status, "not run: smbd is not installed");
    }
}
