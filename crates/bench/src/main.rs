//! `smbq-bench transport`: sequential write and read of one file over
//! smbq-QUIC (SMB encryption off, QUIC's TLS protects the data), over
//! smbq-TCP with SMB 3.1.1 encryption (AES-128-GCM) required, and a raw
//! quinn bulk transfer with the same QUIC settings (the ceiling), and that
//! raw transfer again with the server writing and reading the file through
//! the calls smbq makes (`raw-quic-file`: a file server's ceiling), and a
//! raw transfer over a second QUIC stack, s2n-quic (`raw-s2n-quic`). Server
//! and client run in this process on loopback, each on its own runtime
//! (pinned to CPU 0 and CPU 1 by default, as two hosts would be), and each
//! figure comes with the CPU seconds per GiB that either side spent;
//! every figure is the median of `--reps` runs, side by side in one run.
//! With `--veth-mtu 1500|9000` the server runs in one network namespace
//! and the client in another, joined by a veth pair of that MTU (veth.rs:
//! a LAN path with the kernel's usual offloads) instead of loopback.
//!
//! `smbq-bench random ...`: fio-like random I/O against an external server
//! (S2/S3 of BENCHMARKS.md; see `random.rs`).

// Every unsafe block says why it is sound (`// SAFETY:`).
#![deny(clippy::undocumented_unsafe_blocks)]

mod ceilings;
mod compare;
mod fairness;
mod linkem;
mod migration;
mod packets;
mod peers;
mod random;
mod report;
mod results;
mod suite;
mod veth;

use anyhow::bail;
use packets::{Packets, S2nCounts, Side};
use clap::Parser;
use smbq_auth::UserDb;
use smbq_client::{Client, QuicTarget};
use smbq_server::{EncryptPolicy, Server, ServerConfig, ShareConfig};
use smbq_transport::quic::{self, QuicOptions};
use smbq_transport::tls::{self, ClientAccess};
use smbq_wire::create::disposition;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

#[derive(Parser, Clone)]
#[command(about = "smbq over QUIC vs raw QUIC vs smbq over encrypted TCP")]
struct Args {
    /// File size in MiB.
    #[arg(long, default_value_t = 1024)]
    size_mib: usize,
    /// Request size in KiB (fio bs).
    #[arg(long, default_value_t = 1024)]
    block_kib: usize,
    /// Requests outstanding (fio iodepth).
    #[arg(long, default_value_t = 4)]
    depth: usize,
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Which systems to run (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "raw-quic,raw-quic-file,raw-s2n-quic,smbq-quic,smbq-tcp-enc")]
    systems: Vec<String>,
    /// Where the share's temporary directory goes (e.g. /dev/shm, to keep
    /// disk writeback out of the figures); default: the system's temp dir.
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Let threads run on any CPU. By default, with two CPUs or more, the
    /// server's threads run on CPU 0 and the client's on CPU 1, as on two
    /// hosts; unpinned they compete, and figures vary run to run.
    #[arg(long)]
    no_pin: bool,
    /// Largest UDP payload QUIC may use, both sides (MTU discovery's upper
    /// bound). Loopback carries 65,507; 1452 is what a 1500-byte Ethernet
    /// path carries, where QUIC does its per-packet work 45 times as often.
    /// Default: what smbq's defaults take, the client's from its route to
    /// the server, the server's from its interfaces (65,507 on loopback;
    /// 1472 and 8972 on veth pairs of 1500 and 9000 bytes).
    #[arg(long)]
    max_udp_payload: Option<u16>,
    /// Run between two network namespaces joined by a veth pair of this
    /// MTU (e.g. 1500, 9000), made and removed by the bench (needs root),
    /// instead of on loopback: the server's runtime in one, the client's in
    /// the other.
    #[arg(long)]
    veth_mtu: Option<u32>,
    /// The congestion controller, both sides: smbq (ours), cubic, bbr or newreno.
    #[arg(long, default_value = "smbq")]
    congestion: smbq_quic::Congestion,
    /// Both quinn sides send as if the kernel had no UDP GSO: a batch goes
    /// out with one sendmmsg(2) instead of one GSO sendmsg(2).
    #[arg(long)]
    no_gso: bool,
    /// Without a subcommand: the transport comparison above.
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(clap::Subcommand, Clone)]
enum Cmd {
    /// fio-like random I/O on one TCP connection to an external server.
    Random(random::RandomArgs),
    /// The scenarios of BENCHMARKS.md (S1-S6) against every peer; writes
    /// results.json, report.md and charts.
    Suite(suite::SuiteArgs),
    /// Run a command in a network namespace joined to another through a
    /// user-space link with delay, jitter, loss and a rate limit.
    Linkem(linkem::LinkemArgs),
    /// What changed between two results.json, against their noise.
    Compare(compare::CompareArgs),
    /// Write report.md and the charts again from a results.json.
    Report(report::ReportArgs),
}

struct Env {
    quic: SocketAddr,
    tcp: SocketAddr,
    raw: SocketAddr,
    s2n: SocketAddr,
    /// The TCP ceilings' servers (ceilings.rs).
    raw_tcp: SocketAddr,
    tcp_tls: SocketAddr,
    /// The server certificate, PEM (for s2n-quic's client).
    cert_pem: String,
    cert: rustls::pki_types::CertificateDer<'static>,
    /// MTU discovery's upper bound of the client's endpoints (the
    /// servers' is in their options).
    client_max_udp_payload: u16,
    /// Where the client binds (s2n-quic's client needs an address).
    client_ip: IpAddr,
    congestion: smbq_quic::Congestion,
    no_gso: bool,
    /// The servers' UDP sockets (smbq-quic, raw quinn) and s2n-quic's counts.
    quic_udp: Arc<smbq_quic::Counters>,
    raw_udp: Arc<smbq_quic::Counters>,
    s2n_counts: S2nCounts,
    _dir: tempfile::TempDir,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    match a.cmd.clone() {
        Some(Cmd::Random(r)) => return random::main(r),
        Some(Cmd::Suite(s)) => return suite::main(s),
        Some(Cmd::Linkem(l)) => return linkem::main(l),
        Some(Cmd::Compare(c)) => return compare::main(c),
        Some(Cmd::Report(r)) => return report::main(r),
        None => {}
    }
    smbq_transport::keep_large_buffers_on_heap();
    let size = a.size_mib << 20;
    let reps = a.reps.max(1);
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let pinned = !a.no_pin && cpus >= 2;
    // Pinned, each side has one core, and one worker thread, as tokio would
    // start on a one-core host.
    // With a veth pair this thread joins the server's namespace before the
    // server's runtime starts its threads and binds its sockets there, then
    // the client's, before the client's runtime starts.
    let veth = a.veth_mtu.map(veth::Veth::start).transpose()?;
    let (server_ip, client_ip): (IpAddr, IpAddr) = match &veth {
        Some(v) => (v.server_addr().into(), v.client_addr().into()),
        None => (Ipv4Addr::LOCALHOST.into(), Ipv4Addr::LOCALHOST.into()),
    };
    if let Some(v) = &veth {
        veth::enter(v.server_ns())?;
    }
    let server_max = a.max_udp_payload.unwrap_or_else(|| smbq_quic::listen_mtu_upper_bound(server_ip));
    let server_rt = runtime(SERVER_THREADS, pinned.then_some(0))?;
    let mut env = server_rt.block_on(start(a.dir.as_deref(), size, server_ip, server_max, a.congestion, a.no_gso, &a.systems))?;
    if let Some(v) = &veth {
        veth::enter(v.client_ns())?;
    }
    env.client_ip = client_ip;
    env.client_max_udp_payload = a.max_udp_payload.unwrap_or_else(|| smbq_quic::mtu_upper_bound(server_ip));
    if !a.json {
        let path = a.veth_mtu.map_or("loopback".to_string(), |m| format!("a veth pair of MTU {m}"));
        eprintln!("over {path}: MTU discovery's bound {server_max} (server), {} (client)", env.client_max_udp_payload);
    }
    let env = Arc::new(env);
    if pinned {
        pin(1);
    }
    let client_rt = runtime("bench-client", pinned.then_some(1))?;
    let data = bytes::Bytes::from(pattern(size));
    // Runs interleave (each rep runs every system once) so that a slow spell
    // of this shared machine weighs on all systems alike.
    let systems: Vec<&'static str> = SYSTEMS.into_iter().filter(|n| a.systems.iter().any(|s| s == n)).collect();
    let cases: Vec<(&'static str, &'static str)> = systems.iter().flat_map(|&n| [(n, "write"), (n, "read")]).collect();
    let mut runs: Vec<Vec<Measure>> = vec![Vec::new(); cases.len()];
    let gib = size as f64 / f64::from(1u32 << 30);
    for rep in 0..reps {
        for (i, &(name, dir)) in cases.iter().enumerate() {
            let before = cpu_seconds();
            // On the client runtime's worker, where quinn's tasks run too,
            // rather than on this thread: no wake-ups across threads.
            let (env, data, args) = (env.clone(), data.clone(), a.clone());
            let (mbps, packets, mtu) = client_rt.block_on(async move { tokio::spawn(async move { run(&env, name, dir, &data, &args).await }).await })??;
            let after = cpu_seconds();
            let m = Measure {
                mbps,
                server_cpu: (after.0 - before.0) / gib,
                client_cpu: (after.1 - before.1) / gib,
                server_ns_per_packet: ns_per(after.0 - before.0, packets.server.packets),
                client_ns_per_packet: ns_per(after.1 - before.1, packets.client.packets),
                packets,
                mtu,
            };
            if !a.json {
                eprintln!(
                    "{name:>13} {dir:<5} run {}/{}: {mbps:8.1} MB/s   CPU-s/GiB server {:.2} client {:.2}",
                    rep + 1,
                    reps,
                    m.server_cpu,
                    m.client_cpu
                );
            }
            runs[i].push(m);
        }
    }
    let rows: Vec<Row> = cases
        .iter()
        .zip(runs)
        .map(|(&(name, dir), mut v)| {
            v.sort_by(|x, y| x.mbps.total_cmp(&y.mbps));
            Row { name, dir, median: v[v.len() / 2] }
        })
        .collect();
    let median = |n: &str, d: &str| rows.iter().find(|r| r.name == n && r.dir == d).map(|r| r.median);
    let mbps = |n: &str, d: &str| median(n, d).map(|m| m.mbps).unwrap_or(0.0);
    if a.json {
        let parts: Vec<String> = rows
            .iter()
            .map(|r| {
                let (m, p) = (&r.median, &r.median.packets);
                format!(
                    "\"{}-{}\":{{\"mb_s\":{:.1},\"server_cpu_s_per_gib\":{:.3},\"client_cpu_s_per_gib\":{:.3},\
                     \"server_ns_per_packet\":{:.0},\"client_ns_per_packet\":{:.0},\"server_packets\":{},\"client_packets\":{},\
                     \"server_calls\":{},\"client_calls\":{},\"acks_per_data_packet\":{:.4},\"receiver_copies_per_byte\":{},\
                     \"server_tx_packets_per_call\":{},\"server_rx_packets_per_call\":{},\"client_tx_packets_per_call\":{},\"client_rx_packets_per_call\":{},\
                     \"server_acks_per_rx_packet\":{},\"client_acks_per_rx_packet\":{},\"data_datagram_bytes\":{},\"client_path_mtu\":{},\"client_mtu_reached_ms\":{}}}",
                    r.name,
                    r.dir,
                    m.mbps,
                    m.server_cpu,
                    m.client_cpu,
                    m.server_ns_per_packet,
                    m.client_ns_per_packet,
                    p.server.packets,
                    p.client.packets,
                    p.server.calls,
                    p.client.calls,
                    p.acks_per_data_packet(r.dir),
                    p.receiver_copies(r.dir, size).map_or("null".into(), |c| format!("{c:.3}")),
                    json_num(p.server.sent_per_call()),
                    json_num(p.server.received_per_call()),
                    json_num(p.client.sent_per_call()),
                    json_num(p.client.received_per_call()),
                    json_num(p.server.acks_per_received()),
                    json_num(p.client.acks_per_received()),
                    json_num(p.data_datagram_bytes(r.dir)),
                    json_num(m.mtu.map(|x| f64::from(x.0))),
                    json_num(m.mtu.map(|x| x.1)),
                )
            })
            .collect();
        println!(
            "{{\"size_mib\":{},\"block_kib\":{},\"depth\":{},\"reps\":{},\"pinned\":{pinned},\"median\":{{{}}}}}",
            a.size_mib,
            a.block_kib,
            a.depth,
            reps,
            parts.join(",")
        );
    } else {
        println!(
            "\n{} MiB, {} KiB requests, depth {}, median of {}, {}",
            a.size_mib,
            a.block_kib,
            a.depth,
            reps,
            if pinned { "server on CPU 0, client on CPU 1" } else { "threads not pinned" }
        );
        println!("{:<14}{:>12}{:>12}   CPU-s/GiB server/client: write, read", "system", "write MB/s", "read MB/s");
        for &n in &systems {
            let cpu = |d| median(n, d).map(|m| format!("{:.2}/{:.2}", m.server_cpu, m.client_cpu)).unwrap_or_default();
            println!("{n:<14}{:>12.1}{:>12.1}   {}, {}", mbps(n, "write"), mbps(n, "read"), cpu("write"), cpu("read"));
        }
        println!(
            "\nper packet (UDP datagrams; TCP segments)  CPU ns/packet   packets/syscall (sent/received)   ACKs per data packet   receiver's copies per byte   data datagram bytes   client's path MTU (reached after)"
        );
        println!("{:<14}{:<7}{:>16}{:>24}", "system", "", "server  client", "server     client");
        for r in &rows {
            let (m, p) = (&r.median, &r.median.packets);
            println!(
                "{:<14}{:<7}{:>8.0}{:>8.0}{:>12}{:>12}{:>12.3}{:>18}{:>14}{:>22}",
                r.name,
                r.dir,
                m.server_ns_per_packet,
                m.client_ns_per_packet,
                Measure::per_call(&p.server),
                Measure::per_call(&p.client),
                p.acks_per_data_packet(r.dir),
                p.receiver_copies(r.dir, size).map_or("-".into(), |c| format!("{c:.2}")),
                p.data_datagram_bytes(r.dir).map_or("-".into(), |b| format!("{b:.0}")),
                m.mtu.map_or("-".into(), |(mtu, ms)| format!("{mtu} ({ms:.0} ms)")),
            );
        }
        for d in ["write", "read"] {
            for base in ["raw-quic", "raw-quic-file", "smbq-tcp-enc"] {
                if mbps("smbq-quic", d) > 0.0 && mbps(base, d) > 0.0 {
                    println!("{d}: smbq-quic / {base} = {:.2}", mbps("smbq-quic", d) / mbps(base, d));
                }
            }
        }
    }
    // As `smbq serve` does: exit rather than tear the server's runtime down
    // under engine threads that may still be waiting on its timers; the
    // share's temporary directory goes first (exit runs no destructors).
    drop(env);
    drop(veth);
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(0)
}

/// The systems the bench knows, in the order it runs and prints them.
const SYSTEMS: [&str; 7] = ["raw-quic", "raw-quic-file", "raw-s2n-quic", "raw-tcp", "tcp-tls", "smbq-quic", "smbq-tcp-enc"];

/// Thread name prefix of the server's runtime (its workers and the engine
/// threads it spawns); CPU time of all other threads counts as the client's.
const SERVER_THREADS: &str = "bench-server";

#[derive(Clone, Copy)]
struct Measure {
    mbps: f64,
    /// CPU seconds per GiB.
    server_cpu: f64,
    client_cpu: f64,
    server_ns_per_packet: f64,
    client_ns_per_packet: f64,
    packets: Packets,
    /// The client's QUIC path MTU at the end, and when MTU discovery
    /// reached it (ms after the handshake).
    mtu: Option<(u16, f64)>,
}

impl Measure {
    /// Packets per system call of either side, sent/received ("-" when
    /// not counted).
    fn per_call(s: &Side) -> String {
        match (s.sent_per_call(), s.received_per_call()) {
            (Some(tx), Some(rx)) => format!("{tx:.1}/{rx:.1}"),
            _ => "-".into(),
        }
    }
}

/// A JSON number, or null.
fn json_num(v: Option<f64>) -> String {
    v.filter(|x| x.is_finite()).map_or("null".into(), |x| format!("{x:.4}"))
}

/// CPU nanoseconds per packet.
fn ns_per(cpu_seconds: f64, packets: u64) -> f64 {
    if packets == 0 {
        0.0
    } else {
        cpu_seconds * 1e9 / packets as f64
    }
}

struct Row {
    name: &'static str,
    dir: &'static str,
    median: Measure,
}

/// A file's worth of bytes that no block repeats exactly.
fn pattern(size: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(size + 8);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while v.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(size);
    v
}

/// (server, client) CPU seconds used so far by this process's threads,
/// from /proc/self/task/*/stat (utime + stime). Threads that have exited
/// are lost, so runtimes keep theirs alive for the whole run.
fn cpu_seconds() -> (f64, f64) {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let (mut server, mut client) = (0u64, 0u64);
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return (0.0, 0.0) };
    for t in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let comm = &stat[open + 1..close];
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
        // Linux truncates thread names to 15 bytes.
        if SERVER_THREADS.starts_with(comm) || comm.starts_with(SERVER_THREADS) {
            server += ticks;
        } else {
            client += ticks;
        }
    }
    (server as f64 / hz, client as f64 / hz)
}

/// The servers, on `ip`, with MTU discovery's bound `max_udp_payload`,
/// and the files of the `systems` that use one.
async fn start(parent: Option<&std::path::Path>, size: usize, ip: IpAddr, max_udp_payload: u16, congestion: smbq_quic::Congestion, no_gso: bool, systems: &[String]) -> anyhow::Result<Env> {
    let dir = match parent {
        Some(p) => tempfile::tempdir_in(p)?,
        None => tempfile::tempdir()?,
    };
    std::fs::create_dir(dir.path().join("share"))?;
    // Laid out beforehand, as fio does: the timed writes overwrite blocks in
    // place, so no run pays the file system for allocating them.
    let zeros = vec![0u8; 1 << 20];
    for name in ["raw-quic-file", "smbq-quic", "smbq-tcp-enc"].into_iter().filter(|n| systems.iter().any(|s| s == n)) {
        use std::io::Write;
        let mut f = std::fs::File::create(dir.path().join("share").join(format!("{name}.bin")))?;
        for at in (0..size).step_by(zeros.len()) {
            f.write_all(&zeros[..zeros.len().min(size - at)])?;
        }
    }
    let mut users = UserDb::new();
    users.add("bench", "bench");
    let mut config = ServerConfig::default();
    config.shares.push(ShareConfig { encrypt: EncryptPolicy::Required, ..ShareConfig::new("share", dir.path().join("share")) });
    let server = Arc::new(Server::new(config, users).map_err(anyhow::Error::msg)?);
    let (id, _) = tls::load_or_generate(dir.path(), None, &[])?;
    let cert = id.chain[0].clone();
    let opts = QuicOptions { max_udp_payload, congestion, no_gso, ..QuicOptions::default() };
    let any_port = SocketAddr::new(ip, 0);
    let ep = quic::endpoint(any_port, tls::server_config(tls::Certificates::new(&id)?, &ClientAccess::default())?, &opts)?;
    let quic_addr = ep.local_addr()?;
    tokio::spawn(quic::serve(ep, server.clone(), opts.clone(), std::future::pending()));
    let l = tokio::net::TcpListener::bind(any_port).await?;
    let tcp = l.local_addr()?;
    tokio::spawn(smbq_transport::tcp::serve(l, server, std::future::pending()));
    // The ceiling: the same QUIC settings, no SMB.
    let raw_opts = QuicOptions { udp: Arc::default(), ..opts.clone() };
    let raw_ep = quic::endpoint(any_port, tls::server_config(tls::Certificates::new(&id)?, &ClientAccess::default())?, &raw_opts)?;
    let raw = raw_ep.local_addr()?;
    let fs = Arc::new(smbq_vfs::PosixFs::new(&dir.path().join("share"), false, false).map_err(|e| anyhow::anyhow!("{e:?}"))?);
    tokio::spawn(raw_server(raw_ep, fs));
    let (cert_path, key_path) = tls::default_paths(dir.path());
    let (cert_pem, key_pem) = (std::fs::read_to_string(cert_path)?, std::fs::read_to_string(key_path)?);
    let s2n_counts = S2nCounts::default();
    let s2n = s2n_raw_server(&cert_pem, &key_pem, ip, max_udp_payload, s2n_counts.clone())?;
    let l = tokio::net::TcpListener::bind(any_port).await?;
    let raw_tcp = l.local_addr()?;
    tokio::spawn(ceilings::serve(l, None));
    let l = tokio::net::TcpListener::bind(any_port).await?;
    let tcp_tls = l.local_addr()?;
    tokio::spawn(ceilings::serve(l, Some((id.chain.clone(), id.key.clone_key()))));
    Ok(Env {
        quic: quic_addr,
        tcp,
        raw,
        s2n,
        raw_tcp,
        tcp_tls,
        cert_pem,
        cert,
        client_max_udp_payload: max_udp_payload,
        client_ip: ip,
        congestion,
        no_gso,
        quic_udp: opts.udp,
        raw_udp: raw_opts.udp,
        s2n_counts,
        _dir: dir,
    })
}

/// Raw bulk server: per stream, a 9-byte request: b'W' + length (sink that
/// many bytes, answer one byte) or b'R' + length (send that many bytes).
/// b'w' and b'r' do the same with the share's `raw-quic-file.bin`, through
/// the calls smbq's WRITE and READ make (`Handle::write_at` and
/// `Handle::read_append`, 1 MiB each): the ceiling for a file server, with
/// no SMB.
async fn raw_server(ep: quinn::Endpoint, fs: Arc<smbq_vfs::PosixFs>) {
    while let Some(inc) = ep.accept().await {
        let fs = fs.clone();
        tokio::spawn(async move {
            let Ok(conn) = inc.await else { return };
            let Ok((mut send, mut recv)) = conn.accept_bi().await else { return };
            let mut req = [0u8; 9];
            if recv.read_exact(&mut req).await.is_err() {
                return;
            }
            let mut len_bytes = [0u8; 8];
            len_bytes.copy_from_slice(&req[1..]);
            let len = u64::from_le_bytes(len_bytes) as usize;
            let file = if req[0].is_ascii_lowercase() {
                let opts = smbq_vfs::OpenOptions { disposition: smbq_vfs::Disposition::Open, kind: smbq_vfs::Kind::NonDirectory, read: true, write: true };
                match fs.open("raw-quic-file.bin", &opts) {
                    Ok((h, _)) => Some(h),
                    Err(_) => return,
                }
            } else {
                None
            };
            if req[0].eq_ignore_ascii_case(&b'W') {
                let mut got = 0;
                // With a file, chunks gather into 1 MiB blocks, each written
                // with one call, as smbq's reader and WRITE do.
                let mut block = Vec::with_capacity(1 << 20);
                while let Ok(Some(c)) = recv.read_chunk(1 << 20, true).await {
                    got += c.bytes.len();
                    if let Some(h) = &file {
                        block.extend_from_slice(&c.bytes);
                        if block.len() >= 1 << 20 || got >= len {
                            if h.write_at(&block, (got - block.len()) as u64).is_err() {
                                return;
                            }
                            block.clear();
                        }
                    }
                    if got >= len {
                        break;
                    }
                }
                let _ = send.write_all(&[1]).await;
            } else {
                let block = bytes::Bytes::from(vec![7u8; 1 << 20]);
                let mut sent = 0;
                while sent < len {
                    let n = (len - sent).min(block.len());
                    let chunk = match &file {
                        Some(h) => {
                            let mut v = Vec::new();
                            if h.read_append(&mut v, n, sent as u64).is_err() {
                                return;
                            }
                            bytes::Bytes::from(v)
                        }
                        None => block.slice(..n),
                    };
                    if send.write_chunk(chunk).await.is_err() {
                        return;
                    }
                    sent += n;
                }
            }
            let _ = send.finish();
            conn.closed().await;
        });
    }
}

/// s2n-quic's path MTU bound (IP MTU): with 48,000 or more its send path
/// crashed here (segfault, or glibc's "double free"); 16,000 ran clean.
const S2N_MAX_MTU: u16 = 16_000;

/// s2n-quic with the same windows and UDP buffers as our quinn endpoints,
/// TLS 1.3 through rustls, ALPN "smb".
fn s2n_limits() -> anyhow::Result<s2n_quic::provider::limits::Limits> {
    let opts = QuicOptions::default();
    Ok(s2n_quic::provider::limits::Limits::new()
        .with_data_window(opts.connection_window)?
        .with_bidirectional_local_data_window(opts.stream_window)?
        .with_bidirectional_remote_data_window(opts.stream_window)?
        .with_max_send_buffer_size(16 << 20)?)
}

fn s2n_io(ip: IpAddr, max_udp_payload: u16) -> anyhow::Result<s2n_quic::provider::io::tokio::Provider> {
    Ok(s2n_quic::provider::io::tokio::Builder::default()
        .with_receive_address(SocketAddr::new(ip, 0))?
        .with_max_mtu(max_udp_payload.saturating_add(28).min(S2N_MAX_MTU))?
        .with_recv_buffer_size(smbq_quic::DEFAULT_BUFFER)?
        .with_send_buffer_size(smbq_quic::DEFAULT_BUFFER)?
        .build()?)
}

/// A second QUIC stack for the ceiling (ARCHITECTURE.md keeps the transport
/// open to s2n-quic): the raw server's protocol, without the file variants.
fn s2n_raw_server(cert_pem: &str, key_pem: &str, ip: IpAddr, max_udp_payload: u16, counts: S2nCounts) -> anyhow::Result<SocketAddr> {
    use bytes::Bytes;
    let tls = s2n_quic::provider::tls::rustls::Server::builder()
        .with_certificate(cert_pem, key_pem)
        .and_then(|b| b.with_application_protocols(["smb"].iter()))
        .and_then(|b| b.build())
        .map_err(|e| anyhow::anyhow!(e))?;
    let mut server = s2n_quic::Server::builder()
        .with_tls(tls)?
        .with_io(s2n_io(ip, max_udp_payload)?)?
        .with_limits(s2n_limits()?)?
        .with_event(counts)?
        .start()?;
    let addr = server.local_addr()?;
    tokio::spawn(async move {
        while let Some(mut conn) = server.accept().await {
            tokio::spawn(async move {
                let Ok(Some(stream)) = conn.accept_bidirectional_stream().await else { return };
                let (mut rx, mut tx) = stream.split();
                let mut req = Vec::new();
                while req.len() < 9 {
                    match rx.receive().await {
                        Ok(Some(c)) => req.extend_from_slice(&c),
                        _ => return,
                    }
                }
                let mut len_bytes = [0u8; 8];
                len_bytes.copy_from_slice(&req[1..9]);
                let len = u64::from_le_bytes(len_bytes) as usize;
                if req[0] == b'W' {
                    let mut got = req.len() - 9;
                    let mut chunks: [Bytes; 64] = std::array::from_fn(|_| Bytes::new());
                    while got < len {
                        let Ok((n, open)) = rx.receive_vectored(&mut chunks).await else { return };
                        got += chunks[..n].iter_mut().map(|c| std::mem::take(c).len()).sum::<usize>();
                        if !open {
                            break;
                        }
                    }
                    let _ = tx.send(Bytes::from_static(&[1])).await;
                } else {
                    let block = Bytes::from(vec![7u8; 1 << 20]);
                    let mut sent = 0;
                    while sent < len {
                        let n = (len - sent).min(block.len());
                        if tx.send(block.slice(..n)).await.is_err() {
                            return;
                        }
                        sent += n;
                    }
                }
                let _ = tx.finish();
                let _ = rx.receive().await;
            });
        }
    });
    Ok(addr)
}

async fn s2n_raw_client(env: &Env, dir: &str, data: &bytes::Bytes, block: usize) -> anyhow::Result<(f64, Side)> {
    use bytes::Bytes;
    let size = data.len();
    let tls = s2n_quic::provider::tls::rustls::Client::builder()
        .with_certificate(env.cert_pem.as_str())
        .map_err(|e| anyhow::anyhow!(e))?
        .with_application_protocols(["smb"].iter())?
        .build()
        .map_err(|e| anyhow::anyhow!(e))?;
    let counts = S2nCounts::default();
    let client = s2n_quic::Client::builder()
        .with_tls(tls)?
        .with_io(s2n_io(env.client_ip, env.client_max_udp_payload)?)?
        .with_limits(s2n_limits()?)?
        .with_event(counts.clone())?
        .start()?;
    let mut conn = client.connect(s2n_quic::client::Connect::new(env.s2n).with_server_name("localhost")).await?;
    let (mut rx, mut tx) = conn.open_bidirectional_stream().await?.split();
    let mut req = vec![if dir == "write" { b'W' } else { b'R' }];
    req.extend_from_slice(&(size as u64).to_le_bytes());
    let t = Instant::now();
    tx.send(Bytes::from(req)).await?;
    if dir == "write" {
        let mut off = 0;
        while off < size {
            let n = (size - off).min(block);
            tx.send(data.slice(off..off + n)).await?;
            off += n;
        }
        if rx.receive().await?.is_none() {
            bail!("s2n raw write got no answer");
        }
    } else {
        let mut got = 0;
        let mut chunks: [Bytes; 64] = std::array::from_fn(|_| Bytes::new());
        while got < size {
            let (n, open) = rx.receive_vectored(&mut chunks).await?;
            got += chunks[..n].iter_mut().map(|c| std::mem::take(c).len()).sum::<usize>();
            if !open && got < size {
                bail!("s2n raw read ended at {got}");
            }
        }
    }
    let secs = t.elapsed().as_secs_f64();
    conn.close(0u32.into());
    Ok((size as f64 / secs / 1e6, counts.side()))
}

fn target(env: &Env, addr: SocketAddr) -> QuicTarget<'static> {
    let mut roots = rustls::RootCertStore::empty();
    let _ = roots.add(env.cert.clone());
    QuicTarget { max_udp_payload: env.client_max_udp_payload, congestion: env.congestion, no_gso: env.no_gso, ..QuicTarget::new(addr, "localhost", roots) }
}

/// One run: its rate (MB/s) and both sides' packet counts.
async fn run(env: &Env, name: &str, dir: &str, data: &bytes::Bytes, a: &Args) -> anyhow::Result<(f64, Packets, Option<(u16, f64)>)> {
    let size = data.len();
    let block = a.block_kib << 10;
    if name == "raw-s2n-quic" {
        let before = env.s2n_counts.side();
        let (mbps, client) = s2n_raw_client(env, dir, data, block).await?;
        let after = env.s2n_counts.side();
        let server = Side {
            packets: after.packets - before.packets,
            calls: after.calls - before.calls,
            acks_sent: after.acks_sent - before.acks_sent,
            sent: after.sent - before.sent,
            sent_calls: after.sent_calls - before.sent_calls,
            sent_bytes: 0,
            copied: None,
        };
        return Ok((mbps, Packets { server, client }, None));
    }
    if name == "raw-tcp" || name == "tcp-tls" {
        let (addr, tls) = if name == "raw-tcp" { (env.raw_tcp, None) } else { (env.tcp_tls, Some(env.cert.clone())) };
        return Ok((ceilings::run(addr, tls, dir, data).await?, Packets::default(), None));
    }
    let server_udp = if name == "smbq-quic" { &env.quic_udp } else { &env.raw_udp };
    let before = server_udp.get();
    // The client's view of a quinn connection, and the server's socket.
    let quinn_packets = |client: &smbq_quic::Counters, conn: &quinn::Connection| {
        let st = conn.stats();
        Packets {
            server: Side::from_udp(server_udp.get() - before, st.frame_rx.acks),
            client: Side::from_udp(client.get(), st.frame_tx.acks),
        }
    };
    if name.starts_with("raw-quic") {
        let tgt = target(env, env.raw);
        let ep = smbq_client::quic_endpoint(&tgt)?;
        let conn = ep.connect(env.raw, "localhost")?.await?;
        let watch = MtuWatch::start(conn.clone(), tgt.max_udp_payload);
        let (mut send, mut recv) = conn.open_bi().await?;
        let mut req = vec![if dir == "write" { b'W' } else { b'R' }];
        if name == "raw-quic-file" {
            req[0] = req[0].to_ascii_lowercase();
        }
        req.extend_from_slice(&(size as u64).to_le_bytes());
        let t = Instant::now();
        send.write_all(&req).await?;
        if dir == "write" {
            let mut off = 0;
            while off < size {
                let n = (size - off).min(block);
                send.write_chunk(data.slice(off..off + n)).await?;
                off += n;
            }
            let mut ack = [0u8; 1];
            recv.read_exact(&mut ack).await?;
        } else {
            let mut got = 0;
            while got < size {
                match recv.read_chunk(1 << 20, true).await? {
                    Some(c) => got += c.bytes.len(),
                    None => bail!("raw read ended at {got}"),
                }
            }
        }
        let secs = t.elapsed().as_secs_f64();
        debug_stats(name, dir, &conn);
        let p = quinn_packets(&tgt.udp, &conn);
        let mtu = watch.finish();
        conn.close(0u32.into(), b"");
        ep.wait_idle().await;
        return Ok((size as f64 / secs / 1e6, p, Some(mtu)));
    }
    let t = target(env, env.quic);
    let client_udp = t.udp.clone();
    let mut c = if name == "smbq-quic" {
        Client::connect_quic(t).await?
    } else {
        Client::connect_tcp(env.tcp).await?
    };
    let watch = c.quic.as_ref().map(|(_, conn)| MtuWatch::start(conn.clone(), env.client_max_udp_payload));
    c.negotiate(name == "smbq-quic").await?;
    c.login("bench", "bench").await?;
    c.tree_connect("\\\\localhost\\share").await?;
    if name == "smbq-quic" && (c.core.transforms_sent > 0 || !c.core.transport_security) {
        bail!("QUIC run is SMB-encrypted");
    }
    let start;
    if dir == "write" {
        let (fid, _) = c.create(&format!("{name}.bin"), disposition::OPEN, 0).await?;
        start = Instant::now();
        c.write_pipelined(fid, data, block, a.depth).await?;
        c.close(fid).await?;
    } else {
        let (fid, r) = c.create(&format!("{name}.bin"), disposition::OPEN, 0).await?;
        if r.end_of_file as usize != size {
            bail!("{name}.bin has {} bytes, wanted {size}", r.end_of_file);
        }
        let mut ok = true;
        start = Instant::now();
        c.read_pipelined(fid, size as u64, block as u32, a.depth, |off, chunk| {
            let o = off as usize;
            ok &= data.get(o..o + chunk.len()) == Some(chunk);
        })
        .await?;
        c.close(fid).await?;
        if !ok {
            bail!("{name}: data read back differs");
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let p = match &c.quic {
        Some((_, conn)) => {
            debug_stats(name, dir, conn);
            quinn_packets(&client_udp, conn)
        }
        None => c.tcp_fd().map(packets::tcp_packets).unwrap_or_default(),
    };
    if name == "smbq-tcp-enc" && c.core.transforms_received == 0 {
        bail!("TCP run was not encrypted");
    }
    Ok((size as f64 / secs / 1e6, p, watch.map(MtuWatch::finish)))
}

/// What a quinn connection's MTU discovery reaches: the client's path MTU
/// (the size of the datagrams it sends), sampled every millisecond from
/// the end of the handshake until it comes within quinn's search step (20
/// bytes) of `bound`, for at most 5 s.
struct MtuWatch {
    /// The largest MTU seen, and when it was first seen.
    seen: Arc<std::sync::Mutex<(u16, std::time::Duration)>>,
    task: tokio::task::JoinHandle<()>,
}

impl MtuWatch {
    fn start(conn: quinn::Connection, bound: u16) -> MtuWatch {
        let t = Instant::now();
        let seen = Arc::new(std::sync::Mutex::new((conn.stats().path.current_mtu, std::time::Duration::ZERO)));
        let s = seen.clone();
        let task = tokio::spawn(async move {
            while t.elapsed() < std::time::Duration::from_secs(5) && conn.close_reason().is_none() {
                let mtu = conn.stats().path.current_mtu;
                if let Ok(mut g) = s.lock() {
                    if mtu > g.0 {
                        *g = (mtu, t.elapsed());
                    }
                }
                if mtu.saturating_add(20) >= bound {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        });
        MtuWatch { seen, task }
    }

    /// The largest MTU seen and when (ms), and the watch stopped.
    fn finish(self) -> (u16, f64) {
        self.task.abort();
        self.seen.lock().map(|g| (g.0, g.1.as_secs_f64() * 1e3)).unwrap_or((0, f64::NAN))
    }
}

/// With SMBQ_BENCH_DEBUG set, the client's view of a QUIC connection:
/// datagram sizes, batching and loss.
fn debug_stats(name: &str, dir: &str, conn: &quinn::Connection) {
    if std::env::var_os("SMBQ_BENCH_DEBUG").is_none() {
        return;
    }
    let st = conn.stats();
    // quinn 0.11 counts udp_rx.ios per packet, not per receive call, so
    // only the send side's calls are shown.
    eprintln!(
        "{name} {dir}: mtu {}, sent {} datagrams in {} sends, received {} datagrams, cwnd {}, lost {} packets",
        st.path.current_mtu, st.udp_tx.datagrams, st.udp_tx.ios, st.udp_rx.datagrams, st.path.cwnd, st.path.lost_packets
    );
}

/// A runtime whose threads are named `name`; with `cpu`, they all run on
/// that CPU, with one worker.
fn runtime(name: &str, cpu: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(if cpu.is_some() { 1 } else { 2 })
        .thread_name(name)
        .on_thread_start(move || cpu.into_iter().for_each(pin))
        .enable_all()
        .build()
}

/// Keep the calling thread on CPU `cpu`.
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET sets one bit
    // of it through a bounds-checked index; sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}
