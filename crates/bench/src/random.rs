//! `smbq-bench random`: a fio-like random-I/O load against an external SMB
//! server over TCP (BENCHMARKS.md S2 and S3), e.g.
//!
//! ```text
//! smbq-bench random --addr 127.0.0.1:4445 --share share --user U --password P --encrypt \
//!     --rw randread --bs 4k --nrfiles 1 --filesize 1g --iodepth 16 --ramp 5 --runtime 20 \
//!     [--server-pid PID] [--json]
//! ```
//!
//! One connection, one session, one tree. The files (`NAME.0` .. `NAME.N-1`)
//! are opened with OPEN_IF and laid out first, written whole in 1 MiB
//! WRITEs, unless they already have the size asked for (as fio reuses its
//! files). Then `iodepth` READs or WRITEs of `bs` bytes stay outstanding on
//! the connection: each completion sends the next request. Offsets are
//! uniformly random and `bs`-aligned, from a xorshift generator seeded with
//! `--seed`; requests go to the files in turn (fio's default
//! `file_service_type=roundrobin`). Completions during the first `--ramp`
//! seconds are not counted; those of the next `--runtime` seconds are: IOPS,
//! MB/s (10^6 bytes), latency percentiles (from just before a request is
//! built, sealed and sent until its response is read and opened), and the
//! CPU seconds the server (`--server-pid` and all its descendants: smbd forks
//! one process per connection) and this client spent in that window.
//!
//! A figure-printing program, never a test: nothing here fails on a time.
//! An error status from the server stops the run with the request's command,
//! file, offset and status.

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use smbq_client::{charge, Client};
use smbq_wire::create::disposition;
use smbq_wire::{Command, FileId, Header};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone, Debug)]
pub struct RandomArgs {
    /// The server's TCP address.
    #[arg(long)]
    addr: SocketAddr,
    #[arg(long, default_value = "share")]
    share: String,
    #[arg(long)]
    user: String,
    #[arg(long)]
    password: String,
    /// Seal every request after logon (SMB 3.1.1 encryption), whatever the
    /// server asks; the run fails if no response came back sealed.
    #[arg(long)]
    encrypt: bool,
    #[arg(long, value_parser = ["read", "write", "randread", "randwrite"])]
    rw: String,
    /// Request size (k, m, g suffixes: KiB, MiB, GiB).
    #[arg(long, default_value = "4k", value_parser = parse_size)]
    bs: u64,
    #[arg(long, default_value_t = 1)]
    nrfiles: usize,
    /// Size of each file.
    #[arg(long, default_value = "1g", value_parser = parse_size)]
    filesize: u64,
    /// Requests outstanding on the connection.
    #[arg(long, default_value_t = 16)]
    iodepth: usize,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 5.0)]
    ramp: f64,
    /// Seconds measured.
    #[arg(long, default_value_t = 20.0)]
    runtime: f64,
    /// File name prefix on the share (files NAME.0, NAME.1, ...).
    #[arg(long, default_value = "smbq-bench-random")]
    name: String,
    /// Seed of the offset generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The server's process: its CPU time and its descendants' (utime +
    /// stime + cutime + cstime, /proc/PID/stat) over the measured window.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// "4k", "100k", "64m", "1g" or plain bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix("ib").or_else(|| t.strip_suffix('b')).unwrap_or(&t);
    let (num, shift) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 10),
        Some('m') => (&t[..t.len() - 1], 20),
        Some('g') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    let n: u64 = num.parse().map_err(|_| format!("not a size: {s:?} (e.g. 4k, 100k, 64m, 1g)"))?;
    n.checked_shl(shift).filter(|v| v >> shift == n).ok_or_else(|| format!("size too large: {s}"))
}

pub fn main(a: RandomArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let r = rt.block_on(run(&a))?;
    if a.json {
        println!("{}", r.json(&a));
    } else {
        r.print(&a);
    }
    Ok(())
}

/// What a run measured.
pub struct Report {
    pub cipher: String,
    pub encrypted: bool,
    pub laid_out: usize,
    pub layout_secs: f64,
    pub measured_secs: f64,
    pub ops: u64,
    pub bytes: u64,
    pub hist: Histogram<u64>,
    pub server_cpu: Option<f64>,
    pub client_cpu: f64,
}

impl Report {
    pub fn iops(&self) -> f64 {
        self.ops as f64 / self.measured_secs.max(1e-9)
    }

    pub fn mb_s(&self) -> f64 {
        self.bytes as f64 / self.measured_secs.max(1e-9) / 1e6
    }

    /// Latency at quantile q, in microseconds.
    pub fn lat_us(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1e3
    }

    fn json(&self, a: &RandomArgs) -> String {
        let opt = |v: Option<f64>| v.map(|x| format!("{x:.3}")).unwrap_or_else(|| "null".into());
        format!(
            concat!(
                "{{\"rw\":\"{}\",\"bs\":{},\"nrfiles\":{},\"filesize\":{},\"iodepth\":{},\"ramp_s\":{},\"runtime_s\":{},",
                "\"seed\":{},\"encrypted\":{},\"cipher\":\"{}\",\"laid_out_files\":{},\"layout_s\":{:.3},",
                "\"measured_s\":{:.3},\"ops\":{},\"bytes\":{},\"iops\":{:.1},\"mb_s\":{:.2},",
                "\"lat_us\":{{\"mean\":{:.1},\"p50\":{:.1},\"p99\":{:.1},\"p99_9\":{:.1},\"max\":{:.1}}},",
                "\"server_cpu_s\":{},\"client_cpu_s\":{:.3},\"server_cpu_us_per_op\":{},\"client_cpu_us_per_op\":{:.2}}}"
            ),
            a.rw,
            a.bs,
            a.nrfiles,
            a.filesize,
            a.iodepth,
            a.ramp,
            a.runtime,
            a.seed,
            self.encrypted,
            self.cipher,
            self.laid_out,
            self.layout_secs,
            self.measured_secs,
            self.ops,
            self.bytes,
            self.iops(),
            self.mb_s(),
            self.hist.mean() / 1e3,
            self.lat_us(0.5),
            self.lat_us(0.99),
            self.lat_us(0.999),
            self.hist.max() as f64 / 1e3,
            opt(self.server_cpu),
            self.client_cpu,
            opt(self.server_cpu.map(|s| s * 1e6 / self.ops.max(1) as f64)),
            self.client_cpu * 1e6 / self.ops.max(1) as f64,
        )
    }

    fn print(&self, a: &RandomArgs) {
        println!(
            "{} bs={} nrfiles={} filesize={} iodepth={} ramp={}s runtime={}s, {} ({}), {} file(s) laid out in {:.1} s",
            a.rw,
            a.bs,
            a.nrfiles,
            a.filesize,
            a.iodepth,
            a.ramp,
            a.runtime,
            if self.encrypted { "sealed" } else { "not sealed" },
            self.cipher,
            self.laid_out,
            self.layout_secs
        );
        println!("  IOPS {:.0}   {:.2} MB/s   {} ops in {:.2} s", self.iops(), self.mb_s(), self.ops, self.measured_secs);
        println!(
            "  latency us: mean {:.1}  p50 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
            self.hist.mean() / 1e3,
            self.lat_us(0.5),
            self.lat_us(0.99),
            self.lat_us(0.999),
            self.hist.max() as f64 / 1e3
        );
        let per_op = |s: f64| s * 1e6 / self.ops.max(1) as f64;
        match self.server_cpu {
            Some(s) => println!("  server CPU {s:.2} s ({:.1} us/op)   client CPU {:.2} s ({:.1} us/op)", per_op(s), self.client_cpu, per_op(self.client_cpu)),
            None => println!("  server CPU: no --server-pid   client CPU {:.2} s ({:.1} us/op)", self.client_cpu, per_op(self.client_cpu)),
        }
    }
}

/// xorshift64*: deterministic, cheap, good enough for offsets.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// One outstanding request.
struct Pending {
    command: Command,
    file: usize,
    offset: u64,
    len: u32,
    sent: Instant,
}

/// Requests in flight on one connection, matched to their responses by
/// message id (a server may answer out of order).
pub struct Pipe {
    pub c: Client,
    fids: Vec<FileId>,
    inflight: HashMap<u64, Pending>,
    /// What WRITEs send: no block repeats exactly.
    pattern: bytes::Bytes,
    laid_out: usize,
    layout_secs: f64,
}

impl Pipe {
    async fn submit(&mut self, command: Command, file: usize, offset: u64, data: &[u8], len: u32) -> anyhow::Result<()> {
        let sent = Instant::now();
        let fid = self.fids[file];
        let (id, m) = if command == Command::WRITE {
            let req = smbq_wire::write::WriteRequest { offset, file_id: fid, channel: 0, remaining_bytes: 0, flags: 0, data };
            self.c.core.request_with(Command::WRITE, charge(data.len()), smbq_wire::write::HEAD_LEN + data.len().max(1), |b| req.encode(b))
        } else {
            let req = smbq_wire::read::ReadRequest { length: len, offset, file_id: fid, ..Default::default() };
            let mut b = Vec::with_capacity(64);
            req.encode(&mut b);
            self.c.core.request(Command::READ, charge(len as usize), &b)
        };
        self.c.send(m).await?;
        self.inflight.insert(id, Pending { command, file, offset, len, sent });
        Ok(())
    }

    /// Wait for one response; its request, checked.
    async fn complete(&mut self) -> anyhow::Result<Pending> {
        let r = self.c.recv().await?;
        let h = Header::decode(&r).map_err(|e| anyhow::anyhow!("bad response header: {e}"))?;
        let p = self.inflight.remove(&h.message_id).with_context(|| format!("response to message id {} that is not outstanding (command {:?}, status {:#010x})", h.message_id, Command(h.command), h.status))?;
        let what = || format!("{:?} of {} bytes at offset {} of file {}", p.command, p.len, p.offset, p.file);
        smbq_client::core::check(&r, p.command).with_context(what)?;
        let got = if p.command == Command::WRITE {
            smbq_wire::write::decode_response(&r).map_err(|e| anyhow::anyhow!("{e}")).with_context(what)?
        } else {
            smbq_wire::read::decode_response(&r).map_err(|e| anyhow::anyhow!("{e}")).with_context(what)?.len() as u32
        };
        if got != p.len {
            bail!("{}: {got} bytes done, not {}", what(), p.len);
        }
        Ok(p)
    }
}

/// A fio-like job: what `smbq-bench random` takes on its command line,
/// and what the suite runs for S1-S3 and S6.
#[derive(Clone, Debug)]
pub struct Job {
    /// read, write (sequential), randread, randwrite.
    pub rw: String,
    pub bs: u64,
    pub nrfiles: usize,
    pub filesize: u64,
    pub iodepth: usize,
    pub ramp: f64,
    pub runtime: f64,
    pub name: String,
    pub seed: u64,
    /// Whose CPU time (with its descendants') counts as the server's.
    pub server_pid: Option<u32>,
}

impl Job {
    fn check(&self) -> anyhow::Result<()> {
        if self.bs == 0 || self.filesize < self.bs || self.nrfiles == 0 || self.iodepth == 0 {
            bail!("need bs > 0, filesize >= bs, nrfiles > 0 and iodepth > 0");
        }
        if self.bs > 8 << 20 {
            bail!("bs over 8 MiB (the largest READ/WRITE smbq and Samba accept)");
        }
        if !["read", "write", "randread", "randwrite"].contains(&self.rw.as_str()) {
            bail!("rw is read, write, randread or randwrite, not {}", self.rw);
        }
        Ok(())
    }

    fn is_write(&self) -> bool {
        self.rw.ends_with("write")
    }
}

async fn run(a: &RandomArgs) -> anyhow::Result<Report> {
    let mut c = Client::connect_tcp(a.addr).await.with_context(|| format!("connect to {}", a.addr))?;
    c.negotiate(false).await.context("NEGOTIATE")?;
    c.login(&a.user, &a.password).await.context("SESSION_SETUP")?;
    if a.encrypt {
        if c.core.cipher.is_none() {
            bail!("--encrypt: the server negotiated no cipher");
        }
        c.core.encrypt = true;
    }
    c.tree_connect(&format!("\\\\{}\\{}", a.addr.ip(), a.share)).await.context("TREE_CONNECT")?;
    let job = Job {
        rw: a.rw.clone(),
        bs: a.bs,
        nrfiles: a.nrfiles,
        filesize: a.filesize,
        iodepth: a.iodepth,
        ramp: a.ramp,
        runtime: a.runtime,
        name: a.name.clone(),
        seed: a.seed,
        server_pid: a.server_pid,
    };
    let mut pipe = Pipe::new(c);
    pipe.layout(&job).await?;
    let r = pipe.measure(&job).await?;
    pipe.close_all().await?;
    if a.encrypt && !r.encrypted {
        bail!("--encrypt, but no response came back sealed");
    }
    Ok(r)
}

impl Pipe {
    /// A pipe on a client that has connected a tree.
    pub fn new(c: Client) -> Pipe {
        Pipe { c, fids: Vec::new(), inflight: HashMap::new(), pattern: bytes::Bytes::from(super::pattern((1 << 20) + (8 << 20))), laid_out: 0, layout_secs: 0.0 }
    }

    /// Opens the job's files (OPEN_IF) and writes every one whole that does
    /// not have the job's size yet.
    pub async fn layout(&mut self, job: &Job) -> anyhow::Result<()> {
        job.check()?;
        // Every file whole, in WRITEs of the block size, as fio lays files out
        // (`extend_file` writes max_bs[DDIR_WRITE] at a time), `iodepth` outstanding. The
        // write size matters on Linux 6.16+: ext4 caches a file written in 1 MiB requests
        // in large folios, and every 4 KiB write into one then walks all the folio's
        // buffer heads (40% of a server's CPU time in S2 randwrite, on smbq and smbd alike).
        let t = Instant::now();
        let pattern = self.pattern.clone();
        for i in 0..job.nrfiles {
            let name = format!("{}.{i}", job.name);
            let (fid, r) = self.c.create(&name, disposition::OPEN_IF, 0).await.with_context(|| format!("CREATE {name}"))?;
            self.fids.push(fid);
            if r.end_of_file == job.filesize {
                continue;
            }
            self.laid_out += 1;
            let chunk = job.bs;
            let mut off = 0;
            while off < job.filesize || !self.inflight.is_empty() {
                while off < job.filesize && self.inflight.len() < job.iodepth {
                    let n = (job.filesize - off).min(chunk) as usize;
                    self.submit(Command::WRITE, i, off, &pattern[..n], n as u32).await?;
                    off += n as u64;
                }
                self.complete().await.context("laying the files out")?;
            }
            // A file that was larger keeps its size; reads past filesize never happen.
        }
        self.layout_secs = t.elapsed().as_secs_f64();
        Ok(())
    }

    /// The timed part: `iodepth` requests outstanding through the ramp and
    /// the measured window, then until the last one completes.
    pub async fn measure(&mut self, job: &Job) -> anyhow::Result<Report> {
        let command = if job.is_write() { Command::WRITE } else { Command::READ };
        let sequential = !job.rw.starts_with("rand");
        let blocks = job.filesize / job.bs;
        let bs = job.bs as usize;
        let pattern = self.pattern.clone();
        let mut rng = Rng::new(job.seed);
        let mut cursor = vec![0u64; job.nrfiles];
        let mut hist = Histogram::<u64>::new_with_bounds(1, 120_000_000_000, 3)?;
        let start = Instant::now();
        let ramp_end = start + Duration::from_secs_f64(job.ramp.max(0.0));
        let end = ramp_end + Duration::from_secs_f64(job.runtime.max(0.0));
        let mut window: Option<(Instant, Option<f64>, f64)> = None;
        let mut closed: Option<(f64, Option<f64>, f64)> = None;
        let (mut ops, mut bytes, mut n) = (0u64, 0u64, 0u64);
        loop {
            while closed.is_none() && self.inflight.len() < job.iodepth {
                let file = (n % job.nrfiles as u64) as usize;
                let block = if sequential {
                    let b = cursor[file];
                    cursor[file] = (b + 1) % blocks;
                    b
                } else {
                    rng.next() % blocks
                };
                let at = ((n as usize) * bs) % (pattern.len() - bs + 1);
                self.submit(command, file, block * job.bs, &pattern[at..at + bs], bs as u32).await?;
                n += 1;
            }
            if self.inflight.is_empty() {
                break;
            }
            let p = self.complete().await?;
            let done = Instant::now();
            if closed.is_some() {
                continue;
            }
            if window.is_none() && done >= ramp_end {
                window = Some((done, job.server_pid.and_then(tree_cpu_seconds), self_cpu_seconds()));
            }
            if let Some((t0, s0, c0)) = window {
                if done >= end {
                    let s1 = job.server_pid.and_then(tree_cpu_seconds);
                    let secs = done.duration_since(t0).as_secs_f64();
                    closed = Some((secs, s0.zip(s1).map(|(a, b)| b - a), self_cpu_seconds() - c0));
                } else {
                    record(&mut hist, &mut ops, &mut bytes, &p, done)?;
                }
            }
        }
        let Some((measured_secs, server_cpu, client_cpu)) = closed else { bail!("the run ended before its window") };
        let cipher = match (self.c.core.encrypt, self.c.core.cipher) {
            (true, Some(x)) => format!("{x:?}"),
            _ => "none".into(),
        };
        let encrypted = self.c.core.transforms_received > 0;
        Ok(Report { cipher, encrypted, laid_out: self.laid_out, layout_secs: self.layout_secs, measured_secs, ops, bytes, hist, server_cpu, client_cpu })
    }

    pub async fn close_all(&mut self) -> anyhow::Result<()> {
        for fid in std::mem::take(&mut self.fids) {
            self.c.close(fid).await.context("CLOSE")?;
        }
        Ok(())
    }
}

/// Counts one completed request in the window.
fn record(hist: &mut Histogram<u64>, ops: &mut u64, bytes: &mut u64, p: &Pending, done: Instant) -> anyhow::Result<()> {
    let ns = done.duration_since(p.sent).as_nanos().clamp(1, 120_000_000_000) as u64;
    hist.record(ns)?;
    *ops += 1;
    *bytes += u64::from(p.len);
    Ok(())
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// (ppid, utime + stime + cutime + cstime in ticks) from /proc/PID/stat.
fn stat_of(pid: u32) -> Option<(u32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let ticks = [11, 12, 13, 14].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    Some((ppid, ticks))
}

/// `pid` and its live descendants, parents first.
pub fn tree_pids(pid: u32) -> Vec<u32> {
    let mut all: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            if let Some((ppid, _)) = stat_of(p) {
                all.push((p, ppid));
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(all.iter().filter(|&&(p, pp)| pp == parent && p != pid).map(|&(p, _)| p));
        i += 1;
    }
    out
}

/// CPU seconds of `pid` and every live descendant, each with its reaped
/// children; None when `pid` is gone.
pub fn tree_cpu_seconds(pid: u32) -> Option<f64> {
    let (_, own) = stat_of(pid)?;
    let children: u64 = tree_pids(pid)[1..].iter().filter_map(|&p| stat_of(p)).map(|(_, ticks)| ticks).sum();
    Some((own + children) as f64 / clock_ticks())
}

/// This process's CPU seconds (all threads).
fn self_cpu_seconds() -> f64 {
    stat_of(std::process::id()).map(|(_, t)| t as f64 / clock_ticks()).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our server in this process on loopback TCP; a client with its tree
    /// connected, and the share's directory.
    async fn served() -> (Client, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut users = smbq_auth::UserDb::new();
        users.add("u", "p");
        let mut config = smbq_server::ServerConfig::default();
        config.shares.push(smbq_server::ShareConfig::new("share", dir.path().to_path_buf()));
        let server = std::sync::Arc::new(smbq_server::Server::new(config, users).expect("server"));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(smbq_transport::tcp::serve(l, server, std::future::pending()));
        let mut c = Client::connect_tcp(addr).await.expect("connect");
        c.negotiate(false).await.expect("negotiate");
        c.login("u", "p").await.expect("login");
        c.tree_connect("\\\\127.0.0.1\\share").await.expect("tree");
        (c, dir)
    }

    fn job(rw: &str, nrfiles: usize) -> Job {
        Job { rw: rw.into(), bs: 4096, nrfiles, filesize: 64 << 10, iodepth: 4, ramp: 0.1, runtime: 0.4, name: "acct".into(), seed: 7, server_pid: Some(std::process::id()) }
    }

    #[tokio::test]
    async fn the_engine_counts_what_completed_in_the_window() {
        let (c, dir) = served().await;
        let mut pipe = Pipe::new(c);
        for rw in ["randwrite", "randread", "write", "read"] {
            let j = job(rw, 3);
            pipe.layout(&j).await.expect("layout");
            let r = pipe.measure(&j).await.expect("measure");
            assert!(r.ops > 0, "{rw}: nothing completed");
            assert_eq!(r.bytes, r.ops * j.bs, "{rw}: bytes are whole requests");
            assert_eq!(r.hist.len(), r.ops, "{rw}: one latency per counted request");
            // From the first completion after the ramp to the first at or
            // after its end: the runtime, give or take a request.
            assert!(r.measured_secs > 0.5 * j.runtime && r.measured_secs < j.runtime + 5.0, "{rw}: window {}", r.measured_secs);
            assert!((r.iops() - r.ops as f64 / r.measured_secs).abs() < 1e-6);
            assert!((r.mb_s() - r.bytes as f64 / r.measured_secs / 1e6).abs() < 1e-6);
            assert!(r.lat_us(0.5) <= r.lat_us(0.99) && r.lat_us(0.99) <= r.lat_us(0.999), "{rw}: percentiles in order");
            assert!(r.lat_us(0.5) > 0.0);
            assert!(r.server_cpu.is_some(), "{rw}: the server's CPU time was read");
            pipe.close_all().await.expect("close");
        }
        // Laid out once, by the first job; every request stayed inside
        // the files.
        for i in 0..3 {
            let len = std::fs::metadata(dir.path().join(format!("acct.{i}"))).expect("file").len();
            assert_eq!(len, 64 << 10);
        }
    }

    #[tokio::test]
    async fn files_of_the_right_size_are_not_laid_out_again() {
        let (c, _dir) = served().await;
        let mut pipe = Pipe::new(c);
        let j = job("randread", 2);
        pipe.layout(&j).await.expect("layout");
        assert_eq!(pipe.laid_out, 2);
        pipe.close_all().await.expect("close");
        let mut again = Pipe::new(pipe.c);
        again.layout(&j).await.expect("layout");
        assert_eq!(again.laid_out, 0);
    }

    #[test]
    fn jobs_are_checked() {
        assert!(job("randread", 1).check().is_ok());
        assert!(job("randrw", 1).check().is_err());
        assert!(Job { bs: 0, ..job("read", 1) }.check().is_err());
        assert!(Job { filesize: 100, ..job("read", 1) }.check().is_err());
        assert!(Job { bs: 16 << 20, filesize: 32 << 20, ..job("read", 1) }.check().is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("100K"), Ok(102_400));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("x").is_err());
    }
}
