//! `smbrs-client`: an interop test client for smbq built on the `smb` crate
//! (smb-rs), an SMB2/3 client we did not write that speaks SMB over QUIC as
//! well as over TCP.
//!
//! One run: connect and authenticate (NTLM), list the share root, create a
//! file, write `--size-mib` MiB of seeded pseudo-random data in large pipelined
//! writes, reopen it and read it back (compared byte for byte and by SHA-256),
//! list again (the file must be there with the right size), delete it, list
//! (it must be gone), disconnect. Every step is timed; rates are in MB/s
//! (10^6 bytes per second). `--json` prints one JSON object instead of the
//! step lines. Exit status 1 on any failure, 2 on bad arguments. `RUST_LOG`
//! (e.g. `RUST_LOG=smb=debug`) turns on smb-rs's own log on stderr.
//!
//! `--multichannel`: one session over two connections instead, the second
//! bound to the session (MS-SMB2 3.3.5.5.2) at `--second-server`, and the
//! file read back in READs larger than 1 MiB alternating between the two
//! channels; `--second-transport quic` (or `--transport quic`) makes the
//! session span TCP and QUIC. `--multichannel-auto` (TCP) lets smb-rs find
//! its channels itself. See multichannel.rs.
//!
//! smb-rs 0.12 quirks this client works around:
//! * its directory query can hang after the last entry on tokio's
//!   multi-threaded runtime: we run on the current-thread runtime;
//! * its QUIC transport reads `CustomRootCerts` files as DER and silently
//!   skips a missing one: we check the file ourselves and convert PEM to DER;
//! * a `File` handle keeps the end-of-file it was opened with and reads
//!   nothing past it: we reopen the file before reading it back;
//! * its TCP transport leaves Nagle on and writes each frame header on its
//!   own, so TCP transfers stall on delayed ACKs (about 20 MB/s on loopback
//!   whatever the server does): use small sizes over TCP.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod data;
mod multichannel;
mod tls;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use clap::{Parser, ValueEnum};
use futures::stream::{self, StreamExt, TryStreamExt};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use smb::connection::connection_info::{ConnectionInfo, NegotiatedProperties};
use smb::transport::{QuicCertValidationOptions, QuicConfig, TransportConfig};
use smb::{
    Client, ClientConfig, Connection, ConnectionConfig, CreateOptions, DirAccessMask, Directory, File,
    FileAccessMask, FileAttributes, FileCreateArgs, FileDispositionInformation,
    FileFullDirectoryInformation, Resource, Tree, UncPath,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Transport {
    Quic,
    Tcp,
}

/// Interop test client for smbq on smb-rs: write, read back, list, delete.
#[derive(Parser, Debug)]
#[command(name = "smbrs-client")]
struct Args {
    /// SMB transport: QUIC (TLS 1.3, ALPN "smb") or Direct TCP.
    #[arg(long, value_enum)]
    transport: Transport,
    /// Server address (an IP literal or a host name; also the TLS server name).
    #[arg(long, default_value = "127.0.0.1")]
    server: String,
    /// Server port (UDP for QUIC, TCP for TCP).
    #[arg(long)]
    port: u16,
    #[arg(long, default_value = "share")]
    share: String,
    #[arg(long)]
    user: String,
    #[arg(long)]
    password: String,
    /// QUIC only (--transport quic, or --second-transport quic with
    /// --multichannel): trust this certificate (DER or PEM) instead of the
    /// system roots. Without it the platform verifier is used.
    #[arg(long)]
    root_cert: Option<PathBuf>,
    /// How much data to write and read back, in MiB.
    #[arg(long, default_value_t = 256)]
    size_mib: u64,
    /// Size of each READ/WRITE request in MiB (capped at the server's
    /// negotiated maximum).
    #[arg(long, default_value_t = 4)]
    chunk_mib: u32,
    /// Requests in flight at once during the transfer.
    #[arg(long, default_value_t = 4)]
    depth: usize,
    /// Credits the client asks the server to keep granted (large MTU).
    #[arg(long, default_value_t = 512)]
    credits: u16,
    /// Seed of the pseudo-random file content.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Name of the test file in the share root (default: unique per run).
    #[arg(long)]
    file_name: Option<String>,
    /// Start with an SMB2 NEGOTIATE instead of smb-rs's default multi-protocol
    /// (SMB1) NEGOTIATE.
    #[arg(long)]
    smb2_only_negotiate: bool,
    /// Give up on any single step after this many seconds.
    #[arg(long, default_value_t = 300)]
    step_timeout_secs: u64,
    /// Print one JSON object instead of the step lines.
    #[arg(long)]
    json: bool,
    /// Multichannel: write the file, bind the session to a second
    /// connection at --second-server, read the file back alternating between
    /// the two channels, delete it (multichannel.rs). The primary connection
    /// uses --transport and --port, the second --second-transport and
    /// --second-port.
    #[arg(long, conflicts_with = "multichannel_auto")]
    multichannel: bool,
    /// The second connection's server address in --multichannel mode (an IP
    /// literal; also its TLS server name is --server's). smb-rs keeps one
    /// connection per address.
    #[arg(long, default_value = "127.0.0.2")]
    second_server: String,
    /// The second connection's transport in --multichannel mode (default:
    /// --transport's): a session spanning TCP and QUIC, as a roaming client's.
    #[arg(long, value_enum, requires = "multichannel")]
    second_transport: Option<Transport>,
    /// The second connection's port in --multichannel mode (UDP for QUIC;
    /// default: --port, when both connections use the same transport).
    #[arg(long, requires = "multichannel")]
    second_port: Option<u16>,
    /// Like --multichannel, but with smb-rs's automatic multichannel: it binds
    /// the session to the interfaces FSCTL_QUERY_NETWORK_INTERFACE_INFO lists.
    #[arg(long)]
    multichannel_auto: bool,
}

impl Args {
    /// How long any single step may take (`--step-timeout-secs`).
    fn step_limit(&self) -> Duration {
        Duration::from_secs(self.step_timeout_secs)
    }

    /// `--size-mib` in bytes, checked along with `--depth`.
    fn size_bytes(&self) -> Result<u64> {
        let size = self.size_mib.checked_mul(1 << 20).context("--size-mib is too large")?;
        ensure!(size > 0, "--size-mib must be at least 1");
        ensure!(self.depth > 0, "--depth must be at least 1");
        Ok(size)
    }

    /// `--file-name`, or a name unique to this run: `{prefix}-{pid}-{nanos}.bin`.
    fn file_name_or_unique(&self, prefix: &str) -> String {
        self.file_name.clone().unwrap_or_else(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            format!("{prefix}-{}-{nanos}.bin", std::process::id())
        })
    }

    /// The connection's configuration: `--port`, `--credits`,
    /// `--smb2-only-negotiate`, the step limit as its timeout, and `transport`.
    fn connection_config(&self, transport: TransportConfig) -> ConnectionConfig {
        ConnectionConfig {
            port: Some(self.port),
            timeout: Some(self.step_limit()),
            transport,
            credits_backlog: Some(self.credits),
            smb2_only_negotiate: self.smb2_only_negotiate,
            ..Default::default()
        }
    }

    /// The UNC path of `--share` on `--server`.
    fn share_path(&self) -> Result<UncPath> {
        UncPath::new(&self.server).and_then(|u| u.with_share(&self.share)).map_err(smb_err("share path"))
    }
}

/// One timed step of the run.
struct Step {
    name: &'static str,
    seconds: f64,
    bytes: Option<u64>,
    detail: String,
}

impl Step {
    fn mb_per_s(&self) -> Option<f64> {
        self.bytes.map(|b| mb_per_s(b, self.seconds))
    }
}

fn mb_per_s(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / 1e6 / seconds.max(1e-9)
}

/// What the run found, filled in as it goes so a failure still reports it.
#[derive(Default)]
struct Report {
    steps: Vec<Step>,
    dialect: Option<String>,
    cipher: Option<String>,
    max_read: Option<u32>,
    max_write: Option<u32>,
    chunk: Option<usize>,
    sha256_written: Option<String>,
    sha256_read: Option<String>,
    /// --multichannel / --multichannel-auto: the channels and what they carried.
    multichannel: Option<multichannel::McReport>,
    print_steps: bool,
}

impl Report {
    fn record(&mut self, name: &'static str, start: Instant, bytes: Option<u64>, detail: String) {
        let step = Step { name, seconds: start.elapsed().as_secs_f64(), bytes, detail };
        if self.print_steps {
            let rate = step.mb_per_s().map(|r| format!("{r:9.1} MB/s")).unwrap_or_default();
            println!("{:<12} {:8.3} s {:>14}  {}", step.name, step.seconds, rate, step.detail);
        }
        self.steps.push(step);
    }

    fn rate_of(&self, name: &str) -> Option<f64> {
        self.steps.iter().find(|s| s.name == name).and_then(Step::mb_per_s)
    }

    /// What the (primary) connection negotiated.
    fn negotiated(&mut self, neg: &NegotiatedProperties) {
        self.dialect = Some(format!("{:?}", neg.dialect_rev));
        self.cipher = neg.encryption_cipher.map(|c| format!("{c:?}"));
        self.max_read = Some(neg.max_read_size);
        self.max_write = Some(neg.max_write_size);
    }
}

/// smb-rs's configuration of `transport`, and for QUIC the guard of the
/// root certificate's DER file (`root_cert`, or the platform verifier
/// without it): keep the guard until the connection is made, it deletes a
/// converted copy. `root_cert` is ignored for TCP.
fn transport_config(transport: Transport, root_cert: Option<&Path>) -> Result<(TransportConfig, Option<tls::DerFile>)> {
    match transport {
        Transport::Tcp => Ok((TransportConfig::Tcp, None)),
        Transport::Quic => {
            let (validation, guard) = match root_cert {
                None => (QuicCertValidationOptions::PlatformVerifier, None),
                Some(path) => {
                    let der = tls::root_cert_der_file(path)?;
                    let file = der.path().to_string_lossy().into_owned();
                    (QuicCertValidationOptions::CustomRootCerts(vec![file]), Some(der))
                }
            };
            Ok((TransportConfig::Quic(QuicConfig { local_address: None, cert_validation: validation }), guard))
        }
    }
}

impl Transport {
    /// "tcp" or "quic", as on the command line and in the JSON report.
    fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Quic => "quic",
        }
    }
}

/// Runs `fut`, failing with a clear message if it takes longer than `limit`.
async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| anyhow!("{what}: timed out after {} s", limit.as_secs()))?
}

fn smb_err(what: impl std::fmt::Display) -> impl FnOnce(smb::Error) -> anyhow::Error {
    move |e| anyhow!("{what}: {e}")
}

fn into_file(res: Resource, name: &str) -> Result<File> {
    res.try_into().map_err(|(e, _): (smb::Error, Resource)| anyhow!("{name}: {e}"))
}

fn into_dir(res: Resource, name: &str) -> Result<Directory> {
    res.try_into().map_err(|(e, _): (smb::Error, Resource)| anyhow!("{name}: {e}"))
}

/// One entry of a directory listing.
struct Entry {
    name: String,
    size: u64,
    is_dir: bool,
}

/// Lists the share root (without "." and "..").
async fn list_root(client: &Client, share: &UncPath) -> Result<Vec<Entry>> {
    let access = DirAccessMask::new().with_list_directory(true).with_synchronize(true);
    let res = client
        .create_file(&share.clone().with_path(""), &FileCreateArgs::make_open_existing(access.into()))
        .await
        .map_err(smb_err("open share root"))?;
    let dir = Arc::new(into_dir(res, "share root")?);
    let entries = {
        let stream = Directory::query::<FileFullDirectoryInformation>(&dir, "*")
            .await
            .map_err(smb_err("query directory"))?;
        stream
            .map_err(|e| anyhow!("query directory entry: {e}"))
            .try_filter_map(|e| async move {
                let name = e.file_name.to_string();
                Ok((name != "." && name != "..").then(|| Entry {
                    name,
                    size: e.end_of_file,
                    is_dir: e.file_attributes.directory(),
                }))
            })
            .try_collect::<Vec<_>>()
            .await?
    };
    dir.close().await.map_err(smb_err("close share root"))?;
    Ok(entries)
}

fn describe(entries: &[Entry]) -> String {
    let names: Vec<String> = entries
        .iter()
        .take(8)
        .map(|e| if e.is_dir { format!("{}/", e.name) } else { format!("{} ({} B)", e.name, e.size) })
        .collect();
    let more = entries.len().saturating_sub(names.len());
    let tail = if more > 0 { format!(", … {more} more") } else { String::new() };
    format!("{} entries: {}{tail}", entries.len(), names.join(", "))
}

/// The (offset, length) of every request of a transfer of `size` bytes.
fn chunks(size: u64, chunk: usize) -> Vec<(u64, usize)> {
    let step = chunk as u64;
    (0..size.div_ceil(step))
        .map(|i| {
            let off = i * step;
            (off, (size - off).min(step) as usize)
        })
        .collect()
}

/// Reads exactly `buf.len()` bytes at `off`, issuing more reads after a short one.
async fn read_full(file: &File, buf: &mut [u8], off: u64) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let at = off + done as u64;
        let n = file
            .read_block(&mut buf[done..], at, None, false)
            .await
            .with_context(|| format!("READ at offset {at}"))?;
        ensure!(n > 0, "READ at offset {at}: end of file, {} bytes short", buf.len() - done);
        done += n;
    }
    Ok(())
}

/// Where the test file lives: the share root, reached through the `Client`
/// (one connection) or through a `Tree` (multichannel).
enum ShareRoot<'a> {
    Client { client: &'a Client, share: &'a UncPath },
    Tree(&'a Tree),
}

impl ShareRoot<'_> {
    /// Opens or creates `name` as `create` says; `what` (e.g. "open x") heads a failure.
    async fn open(&self, name: &str, create: &FileCreateArgs, what: String) -> Result<File> {
        let res = match self {
            ShareRoot::Client { client, share } => client.create_file(&(*share).clone().with_path(name), create).await,
            ShareRoot::Tree(tree) => tree.create(name, create).await,
        };
        into_file(res.map_err(smb_err(what))?, name)
    }
}

/// `Client::share_connect` (transport, negotiate, NTLM session setup, tree
/// connect), then the connection to `--server` and what it negotiated (in
/// `report` too).
async fn connect_client(
    client: &Client,
    share: &UncPath,
    args: &Args,
    report: &mut Report,
) -> Result<(Arc<Connection>, Arc<ConnectionInfo>)> {
    within(args.step_limit(), "connect", async {
        client
            .share_connect(share, &args.user, args.password.clone())
            .await
            .map_err(smb_err(format!("connect to {share} on port {}", args.port)))
    })
    .await?;
    let conn = client.get_connection(&args.server).await.map_err(smb_err("connection"))?;
    let info = conn.conn_info().context("connection has no negotiated state")?.clone();
    report.negotiated(&info.negotiation);
    Ok((conn, info))
}

/// Creates `name` and writes `size` bytes of the seeded content to it in
/// WRITEs of `chunk` bytes, `--depth` of them in flight, then closes it: the
/// steps "create" and "write", whose detail `detail` makes of the number of
/// requests and the SHA-256 written (also in `report`).
async fn write_file(
    at: &ShareRoot<'_>,
    name: &str,
    args: &Args,
    size: u64,
    chunk: usize,
    report: &mut Report,
    detail: impl FnOnce(usize, &str) -> String,
) -> Result<()> {
    let limit = args.step_limit();
    let t = Instant::now();
    let create = FileCreateArgs::make_create_new(FileAttributes::new(), CreateOptions::new());
    let file = within(limit, "create", at.open(name, &create, format!("create {name}"))).await?;
    report.record("create", t, None, name.to_string());

    let t = Instant::now();
    let parts = chunks(size, chunk);
    let mut hasher = Sha256::new();
    let file_ref = &file;
    stream::iter(parts.iter().copied())
        .map(|(off, len)| {
            let mut buf = vec![0u8; len];
            data::fill(&mut buf, args.seed, off);
            hasher.update(&buf);
            let buf: Arc<[u8]> = buf.into();
            async move {
                let n = within(limit, "WRITE", async {
                    file_ref.write_block_zc(buf, off, None).await.with_context(|| format!("WRITE at offset {off}"))
                })
                .await?;
                ensure!(n == len, "WRITE at offset {off}: server wrote {n} of {len} bytes");
                Ok(())
            }
        })
        .buffered(args.depth)
        .try_collect::<()>()
        .await?;
    within(limit, "close", async { file.close().await.map_err(smb_err("close after write")) }).await?;
    let written = hex(&hasher.finalize());
    report.sha256_written = Some(written.clone());
    report.record("write", t, Some(size), detail(parts.len(), &written));
    Ok(())
}

/// Reopens `name` to read it back (a handle reads nothing past the size it
/// was opened with) and checks that it is `size` bytes long.
async fn open_written(at: &ShareRoot<'_>, name: &str, size: u64, limit: Duration) -> Result<File> {
    let file = within(limit, "open", async {
        let access = FileAccessMask::new().with_generic_read(true);
        at.open(name, &FileCreateArgs::make_open_existing(access), format!("open {name}")).await
    })
    .await?;
    let len = smb::GetLen::get_len(&file).await.map_err(smb_err("file size"))?;
    ensure!(len == size, "{name} is {len} bytes after writing {size}");
    Ok(file)
}

/// Checks data read back, in order, against the seeded content: its SHA-256
/// and the first byte that differs.
struct ReadCheck {
    seed: u64,
    hasher: Sha256,
    mismatch: Option<u64>,
    expected: Vec<u8>,
}

/// What a read back found: the SHA-256 of the data and where it first
/// differed from the seeded content.
struct ReadBack {
    sha256: String,
    mismatch: Option<u64>,
}

impl ReadCheck {
    fn new(seed: u64) -> Self {
        ReadCheck { seed, hasher: Sha256::new(), mismatch: None, expected: Vec::new() }
    }

    /// The `buf` read at `off`.
    fn update(&mut self, off: u64, buf: &[u8]) {
        self.hasher.update(buf);
        if self.mismatch.is_none() {
            self.expected.resize(buf.len(), 0);
            data::fill(&mut self.expected, self.seed, off);
            // Slice equality is a memcmp: cheap even in a debug build.
            if buf != self.expected {
                let i = buf.iter().zip(&self.expected).position(|(a, b)| a != b).unwrap_or(0);
                self.mismatch = Some(off + i as u64);
            }
        }
    }

    /// Closes `file`, the file read back, and puts the SHA-256 read in `report`.
    async fn finish(self, file: File, limit: Duration, report: &mut Report) -> Result<ReadBack> {
        within(limit, "close", async { file.close().await.map_err(smb_err("close after read")) }).await?;
        let sha256 = hex(&self.hasher.finalize());
        report.sha256_read = Some(sha256.clone());
        Ok(ReadBack { sha256, mismatch: self.mismatch })
    }
}

impl ReadBack {
    /// Fails unless the data read back is the data written.
    fn verdict(&self, report: &Report) -> Result<()> {
        if let Some(at) = self.mismatch {
            bail!("data read back differs from data written, first at byte {at}");
        }
        let (read, written) = (&self.sha256, report.sha256_written.clone().unwrap_or_default());
        ensure!(*read == written, "sha256 of data read back {read} != written {written}");
        Ok(())
    }
}

/// Deletes `name` (delete-on-close through FileDispositionInformation).
async fn delete_file(at: &ShareRoot<'_>, name: &str, limit: Duration, report: &mut Report) -> Result<()> {
    let t = Instant::now();
    within(limit, "delete", async {
        let access = FileAccessMask::new().with_delete(true);
        let f = at.open(name, &FileCreateArgs::make_open_existing(access), format!("open {name} for delete")).await?;
        f.set_info(FileDispositionInformation { delete_pending: true.into() })
            .await
            .map_err(smb_err("set delete disposition"))?;
        f.close().await.map_err(smb_err("close after delete"))
    })
    .await?;
    report.record("delete", t, None, name.to_string());
    Ok(())
}

async fn run(args: &Args, report: &mut Report) -> Result<()> {
    let limit = args.step_limit();
    let size = args.size_bytes()?;
    ensure!(args.chunk_mib > 0, "--chunk-mib must be at least 1");

    ensure!(
        args.root_cert.is_none() || args.transport == Transport::Quic,
        "--root-cert only applies to --transport quic"
    );
    let (transport, _der_guard) = transport_config(args.transport, args.root_cert.as_deref())?;

    let connection = args.connection_config(transport);
    let client = Client::new(ClientConfig { dfs: false, connection, ..Default::default() });
    let share = args.share_path()?;

    // Connect: transport, negotiate, NTLM session setup, tree connect.
    let t = Instant::now();
    let (conn, info) = connect_client(&client, &share, args, report).await?;
    let neg = &info.negotiation;
    let chunk = (args.chunk_mib as usize * (1 << 20))
        .min(neg.max_read_size as usize)
        .min(neg.max_write_size as usize);
    ensure!(chunk > 0, "server negotiated a zero maximum read or write size");
    report.chunk = Some(chunk);
    report.record(
        "connect",
        t,
        None,
        format!(
            "{:?} to {}:{}, dialect {:?}, cipher {:?}, max read/write {}/{} B, {} B per request",
            args.transport, args.server, args.port, neg.dialect_rev, neg.encryption_cipher,
            neg.max_read_size, neg.max_write_size, chunk
        ),
    );

    let t = Instant::now();
    let before = within(limit, "list", list_root(&client, &share)).await?;
    report.record("list", t, None, describe(&before));

    let name = args.file_name_or_unique("smbrs");
    ensure!(
        !before.iter().any(|e| e.name.eq_ignore_ascii_case(&name)),
        "{name} already exists in the share"
    );
    let at = ShareRoot::Client { client: &client, share: &share };

    // Create and write.
    write_file(&at, &name, args, size, chunk, report, |n, sha256| format!("{n} requests, sha256 {sha256}")).await?;

    // Reopen (a handle reads nothing past the size it was opened with) and read back.
    let t = Instant::now();
    let file = open_written(&at, &name, size, limit).await?;
    let mut check = ReadCheck::new(args.seed);
    let file_ref = &file;
    let mut reads = stream::iter(chunks(size, chunk))
        .map(|(off, len)| async move {
            let mut buf = vec![0u8; len];
            within(limit, "READ", read_full(file_ref, &mut buf, off)).await?;
            Ok::<_, anyhow::Error>((off, buf))
        })
        .buffered(args.depth);
    while let Some(r) = reads.next().await {
        let (off, buf) = r?;
        check.update(off, &buf);
    }
    drop(reads);
    let read = check.finish(file, limit, report).await?;
    report.record("read", t, Some(size), format!("sha256 {}", read.sha256));
    read.verdict(report)?;

    let t = Instant::now();
    let after = within(limit, "list", list_root(&client, &share)).await?;
    report.record("list", t, None, describe(&after));
    let entry = after
        .iter()
        .find(|e| e.name == name)
        .with_context(|| format!("{name} is missing from the listing after writing it"))?;
    ensure!(entry.size == size, "listing shows {name} with {} bytes, expected {size}", entry.size);

    delete_file(&at, &name, limit, report).await?;

    let t = Instant::now();
    let last = within(limit, "list", list_root(&client, &share)).await?;
    report.record("list", t, None, describe(&last));
    ensure!(!last.iter().any(|e| e.name == name), "{name} is still listed after deleting it");

    let t = Instant::now();
    drop(conn);
    within(limit, "disconnect", async { client.close().await.map_err(smb_err("disconnect")) }).await?;
    report.record("disconnect", t, None, String::new());
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn json_report(args: &Args, report: &Report, result: &Result<()>) -> Value {
    let steps: Vec<Value> = report
        .steps
        .iter()
        .map(|s| json!({"name": s.name, "seconds": s.seconds, "bytes": s.bytes, "mb_s": s.mb_per_s(), "detail": s.detail}))
        .collect();
    let mut out = json!({
        "ok": result.is_ok(),
        "error": result.as_ref().err().map(|e| format!("{e:#}")),
        "transport": args.transport.name(),
        "server": args.server,
        "port": args.port,
        "share": args.share,
        "size_bytes": args.size_mib.saturating_mul(1 << 20),
        "chunk_bytes": report.chunk,
        "depth": args.depth,
        "dialect": report.dialect,
        "cipher": report.cipher,
        "max_read_size": report.max_read,
        "max_write_size": report.max_write,
        "sha256_written": report.sha256_written,
        "sha256_read": report.sha256_read,
        "write_mb_s": report.rate_of("write"),
        "read_mb_s": report.rate_of("read"),
        "steps": steps,
    });
    if let (Some(mc), Some(map)) = (&report.multichannel, out.as_object_mut()) {
        map.insert("multichannel".into(), mc.to_json());
    }
    out
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("off")).init();
    // Current-thread runtime: smb-rs's directory query can hang on the
    // multi-threaded one.
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("smbrs-client: cannot start the tokio runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut report = Report { print_steps: !args.json, ..Default::default() };
    let result = if args.multichannel || args.multichannel_auto {
        runtime.block_on(multichannel::run(&args, &mut report))
    } else {
        runtime.block_on(run(&args, &mut report))
    };
    if args.json {
        println!("{}", json_report(&args, &report, &result));
    }
    match result {
        Ok(()) => {
            if !args.json {
                println!("ok");
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("smbrs-client: FAILED: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_file_exactly() {
        assert_eq!(chunks(10, 4), vec![(0, 4), (4, 4), (8, 2)]);
        assert_eq!(chunks(8, 4), vec![(0, 4), (4, 4)]);
        assert_eq!(chunks(3 << 20, 1 << 20).len(), 3);
    }

    #[test]
    fn rates_are_decimal_megabytes() {
        assert_eq!(mb_per_s(2_000_000, 2.0), 1.0);
    }

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0x00, 0xab, 0x10]), "00ab10");
        // SHA-256 of the empty string (FIPS 180-2 example).
        assert_eq!(
            hex(&Sha256::digest(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
