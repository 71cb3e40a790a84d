//! `smbq-bench transport`: sequential write and read of one file over
//! smbq-QUIC (SMB encryption off, QUIC's TLS protects the data), over
//! smbq-TCP with SMB 3.1.1 encryption (AES-128-GCM) required, and a raw
//! quinn bulk transfer with the same QUIC settings (the ceiling). Server
//! and client run in this process on loopback, each on its own runtime;
//! every figure is the median of `--reps` runs, side by side in one run.

use anyhow::bail;
use clap::Parser;
use smbq_auth::UserDb;
use smbq_client::{Client, QuicTarget};
use smbq_server::{EncryptPolicy, Server, ServerConfig, ShareConfig};
use smbq_transport::quic::{self, QuicOptions};
use smbq_transport::tls::{self, ClientAccess};
use smbq_wire::create::disposition;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

#[derive(Parser)]
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
    #[arg(long, value_delimiter = ',', default_value = "raw-quic,smbq-quic,smbq-tcp-enc")]
    systems: Vec<String>,
}

struct Env {
    quic: SocketAddr,
    tcp: SocketAddr,
    raw: SocketAddr,
    cert: rustls::pki_types::CertificateDer<'static>,
    _dir: tempfile::TempDir,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let size = a.size_mib << 20;
    let server_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let env = server_rt.block_on(start())?;
    let client_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let data: Arc<Vec<u8>> = Arc::new((0..size).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3]).collect());
    let mut rows: Vec<(&str, &str, Vec<f64>)> = Vec::new();
    for (name, dir) in [("raw-quic", "write"), ("raw-quic", "read"), ("smbq-quic", "write"), ("smbq-quic", "read"), ("smbq-tcp-enc", "write"), ("smbq-tcp-enc", "read")] {
        if !a.systems.iter().any(|s| s == name) {
            continue;
        }
        let mut v = Vec::new();
        for rep in 0..a.reps {
            let mbps = client_rt.block_on(run(&env, name, dir, &data, &a))?;
            if !a.json {
                eprintln!("{name:>13} {dir:<5} run {}/{}: {mbps:8.1} MB/s", rep + 1, a.reps);
            }
            v.push(mbps);
        }
        v.sort_by(|x, y| x.total_cmp(y));
        rows.push((name, dir, v));
    }
    let median = |n: &str, d: &str| rows.iter().find(|r| r.0 == n && r.1 == d).map(|r| r.2[r.2.len() / 2]).unwrap_or(0.0);
    if a.json {
        let mut s = format!("{{\"size_mib\":{},\"block_kib\":{},\"depth\":{},\"reps\":{},\"median_mb_s\":{{", a.size_mib, a.block_kib, a.depth, a.reps);
        let parts: Vec<String> = rows.iter().map(|r| format!("\"{}-{}\":{:.1}", r.0, r.1, r.2[r.2.len() / 2])).collect();
        s += &parts.join(",");
        s += "}}";
        println!("{s}");
    } else {
        println!("\n{} MiB, {} KiB requests, depth {}, median of {}", a.size_mib, a.block_kib, a.depth, a.reps);
        println!("{:<14}{:>12}{:>12}", "system", "write MB/s", "read MB/s");
        for n in ["raw-quic", "smbq-quic", "smbq-tcp-enc"].into_iter().filter(|n| a.systems.iter().any(|s| s == n)) {
            println!("{n:<14}{:>12.1}{:>12.1}", median(n, "write"), median(n, "read"));
        }
        for d in ["write", "read"] {
            for base in ["raw-quic", "smbq-tcp-enc"] {
                if median("smbq-quic", d) > 0.0 && median(base, d) > 0.0 {
                    println!("{d}: smbq-quic / {base} = {:.2}", median("smbq-quic", d) / median(base, d));
                }
            }
        }
    }
    server_rt.shutdown_background();
    Ok(())
}

async fn start() -> anyhow::Result<Env> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("share"))?;
    let mut users = UserDb::new();
    users.add("bench", "bench");
    let mut config = ServerConfig::default();
    config.shares.push(ShareConfig { name: "share".into(), path: dir.path().join("share"), read_only: false, encrypt: EncryptPolicy::Required });
    let server = Arc::new(Server::new(config, users).map_err(anyhow::Error::msg)?);
    let (id, _) = tls::load_or_generate(dir.path(), None, &[])?;
    let cert = id.chain[0].clone();
    let opts = QuicOptions::default();
    let ep = quic::endpoint("127.0.0.1:0".parse()?, tls::server_config(&id, &ClientAccess::default())?, &opts)?;
    let quic_addr = ep.local_addr()?;
    tokio::spawn(quic::serve(ep, server.clone(), opts.clone(), std::future::pending()));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let tcp = l.local_addr()?;
    tokio::spawn(smbq_transport::tcp::serve(l, server, std::future::pending()));
    // The ceiling: the same QUIC settings, no SMB.
    let raw_ep = quic::endpoint("127.0.0.1:0".parse()?, tls::server_config(&id, &ClientAccess::default())?, &opts)?;
    let raw = raw_ep.local_addr()?;
    tokio::spawn(raw_server(raw_ep));
    Ok(Env { quic: quic_addr, tcp, raw, cert, _dir: dir })
}

/// Raw bulk server: per stream, a 9-byte request: b'W' + length (sink that
/// many bytes, answer one byte) or b'R' + length (send that many bytes).
async fn raw_server(ep: quinn::Endpoint) {
    while let Some(inc) = ep.accept().await {
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
            if req[0] == b'W' {
                let mut got = 0;
                while let Ok(Some(c)) = recv.read_chunk(1 << 20, true).await {
                    got += c.bytes.len();
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
                    if send.write_chunk(block.slice(..n)).await.is_err() {
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

fn target(env: &Env, addr: SocketAddr) -> QuicTarget<'static> {
    let mut roots = rustls::RootCertStore::empty();
    let _ = roots.add(env.cert.clone());
    QuicTarget::new(addr, "localhost", roots)
}

async fn run(env: &Env, name: &str, dir: &str, data: &Arc<Vec<u8>>, a: &Args) -> anyhow::Result<f64> {
    let size = data.len();
    let block = a.block_kib << 10;
    if name == "raw-quic" {
        let ep = smbq_client::quic_endpoint(&target(env, env.raw))?;
        let conn = ep.connect(env.raw, "localhost")?.await?;
        let (mut send, mut recv) = conn.open_bi().await?;
        let mut req = vec![if dir == "write" { b'W' } else { b'R' }];
        req.extend_from_slice(&(size as u64).to_le_bytes());
        let t = Instant::now();
        send.write_all(&req).await?;
        if dir == "write" {
            let d = bytes::Bytes::from(data.as_ref().clone());
            let mut off = 0;
            while off < size {
                let n = (size - off).min(block);
                send.write_chunk(d.slice(off..off + n)).await?;
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
        let st = conn.stats();
        if std::env::var_os("SMBQ_BENCH_DEBUG").is_some() {
            eprintln!("raw {dir}: mtu {} tx datagrams {} in {} ios, rx datagrams {} in {} ios, cwnd {}, lost {}", st.path.current_mtu, st.udp_tx.datagrams, st.udp_tx.ios, st.udp_rx.datagrams, st.udp_rx.ios, st.path.cwnd, st.path.lost_packets);
        }
        conn.close(0u32.into(), b"");
        ep.wait_idle().await;
        return Ok(size as f64 / secs / 1e6);
    }
    let mut c = if name == "smbq-quic" {
        Client::connect_quic(target(env, env.quic)).await?
    } else {
        Client::connect_tcp(env.tcp).await?
    };
    c.negotiate(name == "smbq-quic").await?;
    c.login("bench", "bench").await?;
    c.tree_connect("\\\\localhost\\share").await?;
    if name == "smbq-quic" && (c.core.transforms_sent > 0 || !c.core.transport_security) {
        bail!("QUIC run is SMB-encrypted");
    }
    let t;
    if dir == "write" {
        let (fid, _) = c.create(&format!("{name}.bin"), disposition::OVERWRITE_IF, 0).await?;
        t = Instant::now();
        c.write_pipelined(fid, data, block, a.depth).await?;
        c.close(fid).await?;
    } else {
        let (fid, r) = c.create(&format!("{name}.bin"), disposition::OPEN, 0).await?;
        if r.end_of_file as usize != size {
            bail!("{name}.bin has {} bytes, wanted {size}", r.end_of_file);
        }
        let mut ok = true;
        t = Instant::now();
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
    let secs = t.elapsed().as_secs_f64();
    if name == "smbq-tcp-enc" && c.core.transforms_received == 0 {
        bail!("TCP run was not encrypted");
    }
    Ok(size as f64 / secs / 1e6)
}
