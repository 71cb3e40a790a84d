//! `smbq get` and `smbq put`: whole files with READs and WRITEs pipelined
//! within the credit window, directories with several files in flight
//! (one connection per worker), a progress bar on a terminal, `--json`
//! for scripts and `--continue` for a partial transfer.

use super::{url, ConnectArgs};
use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use smbq_client::connect::ConnectOptions;
use smbq_client::share::{access, Durable, Share};
use smbq_client::url::SmbUrl;
use smbq_client::ClientError;
use smbq_wire::create::{disposition, options};
use smbq_wire::{FileId, NtStatus};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(Args)]
pub struct GetArgs {
    /// smb://[user@]host[:port]/share/path
    pub url: String,
    /// Where to write (default: the file's name in the current directory; into it if a directory).
    pub local: Option<PathBuf>,
    /// Copy a directory and everything in it.
    #[arg(long, short = 'r')]
    pub recursive: bool,
    #[command(flatten)]
    pub t: TransferArgs,
}

#[derive(Args)]
pub struct PutArgs {
    pub local: PathBuf,
    /// smb://[user@]host[:port]/share/path (into it if it is a directory or ends with /)
    pub url: String,
    #[arg(long, short = 'r')]
    pub recursive: bool,
    #[command(flatten)]
    pub t: TransferArgs,
}

#[derive(Args)]
pub struct TransferArgs {
    /// Resume: keep what the destination already has of each file and send only the rest.
    #[arg(long = "continue", short = 'c')]
    pub resume: bool,
    /// Files in flight at once with -r (one connection each).
    #[arg(long, short = 'j', default_value_t = 4)]
    pub jobs: usize,
    /// READ/WRITE size in MiB (1-8; the server's maximum bounds it).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub request_mib: u32,
    /// A JSON summary on stdout instead of the progress bar.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

/// One file to move: remote path in the share, local path, size.
struct Job {
    remote: String,
    local: PathBuf,
    size: u64,
}

/// What a transfer did.
#[derive(serde::Serialize, Default)]
struct Summary {
    files: u64,
    bytes: u64,
    skipped_bytes: u64,
    seconds: f64,
    transport: &'static str,
    /// QUIC streams the (first) connection used: more than 1 with smbq's multi-stream extension.
    streams: usize,
    /// Times a lost connection was replaced by a new one ([`recover`]).
    reconnects: u64,
    /// Of those, how many got their file back by reclaiming its durable
    /// handle (the rest opened it again by name).
    reclaimed: u64,
    /// Over QUIC, the (first) connection's congestion control at the end
    /// of the transfer (`smbq_quictrace::Figures::json`): `cwnd_bytes`,
    /// `ssthresh_bytes` and `pacing_rate_bps` (null when the controller
    /// has none), `min_rtt_ms`, `srtt_ms`, `packets_sent`,
    /// `packets_lost`, `packets_retransmitted` (the lost ones: quinn
    /// resends their frames), `lost_bytes`, `congestion_events`, and `mtu`,
    /// the UDP payload path MTU discovery reached. With -r and several
    /// jobs, the other connections are not in it. Null over TCP.
    quic: Option<serde_json::Value>,
}

/// What [`recover`] did in this process, for the summary: a transfer
/// command runs once per process.
static RECONNECTS: AtomicU64 = AtomicU64::new(0);
static RECLAIMED: AtomicU64 = AtomicU64::new(0);

fn bar(total: u64, json: bool) -> ProgressBar {
    let target = if json { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
    let b = ProgressBar::with_draw_target(Some(total), target);
    b.set_style(ProgressStyle::with_template("{msg:30!} {wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}").unwrap_or_else(|_| ProgressStyle::default_bar()));
    b
}

async fn connect(t: &TransferArgs, u: &SmbUrl) -> anyhow::Result<(Share, ConnectOptions)> {
    let o = t.conn.options(u)?;
    let mut s = t.conn.share(u, &o).await?;
    s.set_request_size(t.request_mib << 20);
    Ok((s, o))
}

/// Run `jobs` on up to `t.jobs` connections (the first is `first`) with a
/// progress bar, then report; `one` moves one file.
async fn run_jobs<F, Fut>(first: Share, o: &ConnectOptions, u: &SmbUrl, t: &TransferArgs, jobs: Vec<Job>, started: Instant, one: F) -> anyhow::Result<()>
where
    F: Fn(Share, Job, ProgressBar, bool) -> Fut + Send + Sync + 'static + Clone,
    Fut: std::future::Future<Output = (Share, anyhow::Result<u64>)> + Send,
{
    let n = jobs.len() as u64;
    let total: u64 = jobs.iter().map(|j| j.size).sum();
    let pb = &bar(total, t.json);
    let transport = first.transport().name();
    let streams = first.session.client.streams();
    let queue = Arc::new(std::sync::Mutex::new(jobs));
    let workers = t.jobs.clamp(1, 32).min(n.max(1) as usize);
    let mut tasks = tokio::task::JoinSet::new();
    let mut first = Some(first);
    for worker in 0..workers {
        let share = match first.take() {
            Some(s) => s,
            None => {
                let mut s = Share::connect(u, o).await?;
                s.set_request_size(t.request_mib << 20);
                s
            }
        };
        let (queue, pb, one, resume) = (queue.clone(), pb.clone(), one.clone(), t.resume);
        tasks.spawn(async move {
            let mut share = share;
            let mut skipped = 0;
            loop {
                let Some(job) = queue.lock().map_err(|_| anyhow::anyhow!("worker panicked"))?.pop() else {
                    // The figures of the connection in use at the end (a
                    // reconnect replaces it).
                    let quic = share.session.client.quic_figures();
                    return Ok::<_, anyhow::Error>((worker, skipped, quic));
                };
                let what = job.remote.clone();
                let (s, r) = one(share, job, pb.clone(), resume).await;
                share = s;
                skipped += r.with_context(|| what)?;
            }
        });
    }
    let (mut skipped, mut quic) = (0, None);
    while let Some(r) = tasks.join_next().await {
        let (worker, s, figures) = r??;
        skipped += s;
        if worker == 0 {
            quic = figures.map(|f| f.json());
        }
    }
    pb.finish_and_clear();
    let (reconnects, reclaimed) = (RECONNECTS.load(Ordering::Relaxed), RECLAIMED.load(Ordering::Relaxed));
    report(t, Summary { files: n, bytes: total - skipped, skipped_bytes: skipped, seconds: started.elapsed().as_secs_f64(), transport, streams, reconnects, reclaimed, quic })
}

pub async fn get(a: GetArgs) -> anyhow::Result<()> {
    let u = url(&a.url)?;
    let started = Instant::now();
    let (mut s, o) = connect(&a.t, &u).await?;
    let info = s.stat(&u.path).await.with_context(|| format!("{u}"))?;
    let name = if u.path.is_empty() { u.share.clone() } else { u.file_name().to_string() };
    let local = match &a.local {
        Some(l) if l.is_dir() => l.join(&name),
        Some(l) => l.clone(),
        None => PathBuf::from(&name),
    };
    let mut jobs = Vec::new();
    if info.is_dir() {
        if !a.recursive {
            anyhow::bail!(ClientError::Usage(format!("{u} is a directory: use get -r")));
        }
        walk_remote(&mut s, &u.path, &local, &mut jobs).await?;
    } else {
        jobs.push(Job { remote: u.path.clone(), local, size: info.size });
    }
    run_jobs(s, &o, &u, &a.t, jobs, started, get_one).await
}

/// Every file under remote `dir` (directories made locally as found).
async fn walk_remote(s: &mut Share, dir: &str, local: &Path, jobs: &mut Vec<Job>) -> anyhow::Result<()> {
    std::fs::create_dir_all(local).with_context(|| format!("creating {}", local.display()))?;
    let mut stack = vec![(dir.to_string(), local.to_path_buf())];
    while let Some((d, l)) = stack.pop() {
        for e in s.list(&d, "*").await.with_context(|| format!("listing {d}"))? {
            let remote = if d.is_empty() { e.name.clone() } else { format!("{d}/{}", e.name) };
            let here = l.join(&e.name);
            if e.is_dir() {
                std::fs::create_dir_all(&here).with_context(|| format!("creating {}", here.display()))?;
                stack.push((remote, here));
            } else {
                jobs.push(Job { remote, local: here, size: e.size });
            }
        }
    }
    Ok(())
}

/// Copy one remote file; returns the bytes skipped by `--continue`.
async fn get_one(mut s: Share, j: Job, pb: ProgressBar, resume: bool) -> (Share, anyhow::Result<u64>) {
    let r = async {
        pb.set_message(j.remote.clone());
        let (h, durable) = s.create_durable(&j.remote, access::READ, disposition::OPEN, options::NON_DIRECTORY_FILE).await?;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true);
        let f = opts.open(&j.local).with_context(|| format!("opening {}", j.local.display()))?;
        let have = f.metadata()?.len();
        let start = if resume && have <= h.info.size { have } else { 0 };
        f.set_len(start)?;
        let mut done = Ranges::new(start, &pb);
        let mut fid = h.fid;
        for attempt in 0.. {
            let (from, chunk, depth) = (done.prefix, s.chunk, s.depth);
            let r = s.client().read_range(fid, from, h.info.size - from, chunk, depth, |off, piece| {
                f.write_all_at(piece, off)?;
                done.add(off, piece.len() as u64);
                Ok(())
            });
            match r.await {
                Ok(()) => break,
                Err(e) if e.is_connection_lost() && attempt < MAX_RECONNECTS => {
                    done.rewind();
                    fid = recover(&mut s, &j.remote, durable, &e, &pb, access::READ).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        s.close(fid).await?;
        // Keep the server's modification time, as scp -p and rsync -t do.
        f.set_modified(smbq_client::share::system_time(h.info.written)).ok();
        Ok(start)
    }
    .await;
    (s, r)
}

/// How often one file's transfer reconnects before it gives up.
const MAX_RECONNECTS: u32 = 5;

/// After a lost connection: connect again, then reclaim the durable
/// handle (MS-SMB2 3.2.4.3.5) or, when the server granted none or lost
/// it, open the file again by name. Returns the file's id.
async fn recover(s: &mut Share, remote: &str, durable: Option<Durable>, e: &ClientError, pb: &ProgressBar, desired: u32) -> anyhow::Result<FileId> {
    let mut last = None;
    for wait_ms in [0u64, 250, 1000, 2000] {
        tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
        match s.reconnect().await {
            Ok(()) => {
                last = None;
                break;
            }
            Err(err) => last = Some(err),
        }
    }
    if let Some(err) = last {
        return Err(anyhow::Error::new(err).context(format!("reconnecting after: {e}")));
    }
    let reclaimed = match durable {
        Some(d) => s.reclaim(remote, d).await.ok(),
        None => None,
    };
    RECONNECTS.fetch_add(1, Ordering::Relaxed);
    let (fid, how) = match reclaimed {
        Some(h) => {
            RECLAIMED.fetch_add(1, Ordering::Relaxed);
            (h.fid, "reclaimed its durable handle")
        }
        None => (s.create(remote, desired, disposition::OPEN, options::NON_DIRECTORY_FILE, 0).await?.fid, "reopened it by name"),
    };
    pb.suspend(|| eprintln!("{remote}: connection lost ({e}); reconnected and {how}"));
    Ok(fid)
}

/// Which bytes of a file are done: the contiguous prefix and, past it,
/// the ranges done out of order (READ and WRITE answers come in any order).
/// Feeds the progress bar with bytes done for the first time.
struct Ranges<'a> {
    prefix: u64,
    ahead: std::collections::BTreeMap<u64, u64>,
    pb: &'a ProgressBar,
}

impl<'a> Ranges<'a> {
    fn new(start: u64, pb: &'a ProgressBar) -> Ranges<'a> {
        pb.inc(start);
        Ranges { prefix: start, ahead: Default::default(), pb }
    }

    fn add(&mut self, off: u64, len: u64) {
        self.pb.inc(len);
        if off <= self.prefix {
            self.prefix = self.prefix.max(off + len);
        } else {
            self.ahead.insert(off, off + len);
        }
        while let Some((&start, &end)) = self.ahead.first_key_value() {
            if start > self.prefix {
                break;
            }
            self.prefix = self.prefix.max(end);
            self.ahead.remove(&start);
        }
    }

    /// Forget what is done past the prefix: it will be moved again.
    fn rewind(&mut self) {
        let lost: u64 = self.ahead.iter().map(|(s, e)| e - s).sum();
        self.pb.set_position(self.pb.position().saturating_sub(lost));
        self.ahead.clear();
    }
}

pub async fn put(a: PutArgs) -> anyhow::Result<()> {
    let u = url(&a.url)?;
    let started = Instant::now();
    let (mut s, o) = connect(&a.t, &u).await?;
    let meta = std::fs::metadata(&a.local).with_context(|| format!("{}", a.local.display()))?;
    let name = a.local.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let into_dir = a.url.ends_with('/') || u.path.is_empty() || matches!(s.stat(&u.path).await, Ok(i) if i.is_dir());
    let target = if into_dir { u.join(&name).path } else { u.path.clone() };
    let mut jobs = Vec::new();
    if meta.is_dir() {
        if !a.recursive {
            anyhow::bail!(ClientError::Usage(format!("{} is a directory: use put -r", a.local.display())));
        }
        walk_local(&mut s, &a.local, &target, &mut jobs).await?;
    } else {
        jobs.push(Job { remote: target, local: a.local.clone(), size: meta.len() });
    }
    run_jobs(s, &o, &u, &a.t, jobs, started, put_one).await
}

/// Every file under local `dir`; remote directories made as found.
async fn walk_local(s: &mut Share, dir: &Path, remote: &str, jobs: &mut Vec<Job>) -> anyhow::Result<()> {
    let mut stack = vec![(dir.to_path_buf(), remote.to_string())];
    while let Some((l, r)) = stack.pop() {
        match s.mkdir(&r).await {
            Err(ClientError::Status(_, st)) if st == NtStatus::OBJECT_NAME_COLLISION => {}
            other => other.with_context(|| format!("making {r}"))?,
        }
        for e in std::fs::read_dir(&l).with_context(|| format!("{}", l.display()))? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let (here, there) = (e.path(), format!("{r}/{name}"));
            let m = std::fs::metadata(&here)?;
            if m.is_dir() {
                stack.push((here, there));
            } else {
                jobs.push(Job { remote: there, local: here, size: m.len() });
            }
        }
    }
    Ok(())
}

/// Copy one local file; returns the bytes skipped by `--continue`.
async fn put_one(mut s: Share, j: Job, pb: ProgressBar, resume: bool) -> (Share, anyhow::Result<u64>) {
    let r = async {
        pb.set_message(j.remote.clone());
        let f = std::fs::File::open(&j.local).with_context(|| format!("{}", j.local.display()))?;
        let disp = if resume { disposition::OPEN_IF } else { disposition::OVERWRITE_IF };
        let (h, durable) = s.create_durable(&j.remote, access::READ_WRITE, disp, options::NON_DIRECTORY_FILE).await?;
        let start = if resume && h.info.size <= j.size { h.info.size } else { 0 };
        if start != h.info.size {
            s.set_size(h.fid, start).await?;
        }
        let mut done = Ranges::new(start, &pb);
        let mut fid = h.fid;
        let source = |off: u64, len: usize| {
            let mut b = vec![0u8; len];
            f.read_exact_at(&mut b, off)?;
            Ok(Bytes::from(b))
        };
        for attempt in 0.. {
            let (from, chunk, depth) = (done.prefix, s.chunk as usize, s.depth);
            match s.client().write_from(fid, from, j.size - from, chunk, depth, source, |off, n| done.add(off, n)).await {
                Ok(()) => break,
                Err(e) if e.is_connection_lost() && attempt < MAX_RECONNECTS => {
                    done.rewind();
                    fid = recover(&mut s, &j.remote, durable, &e, &pb, access::READ_WRITE).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if let Ok(t) = f.metadata().and_then(|m| m.modified()) {
            s.set_basic(fid, 0, 0, smbq_client::share::filetime(t), 0).await.ok();
        }
        s.close(fid).await?;
        Ok(start)
    }
    .await;
    (s, r)
}

fn report(t: &TransferArgs, s: Summary) -> anyhow::Result<()> {
    if t.json {
        println!("{}", serde_json::to_string(&s)?);
    } else if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let mb = s.bytes as f64 / 1e6;
        eprintln!("{} file(s), {mb:.1} MB in {:.2} s ({:.1} MB/s) over {}", s.files, s.seconds, mb / s.seconds.max(1e-9), s.transport);
    }
    Ok(())
}
