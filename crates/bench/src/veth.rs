//! Two network namespaces joined by a plain veth pair, with no forwarder
//! between them (`smbq-bench --veth-mtu 1500|9000`, and the suite's S1v):
//! a LAN as the kernel sees one, at the MTU given.
//!
//! Unlike the link emulator's TUNs (linkem.rs), a veth pair keeps the
//! kernel's usual offloads, as a real NIC does: TCP hands it 64 KiB TSO
//! super-packets of MSS-sized segments and the peer's stack takes them
//! whole (the GRO a NIC would do), and a UDP GSO batch crosses whole too
//! and reaches a socket with UDP_GRO as one batch. Nothing is cut into
//! MTU-sized frames on the way, and nothing counts them: the segment and
//! datagram counts of a run are those the stacks report (TCP_INFO's
//! segments of MSS size, our UDP socket's datagrams of the path's size).
//!
//! Both sides' kernel work happens on the two CPUs of this machine either
//! way: a packet sent on a veth is received by the peer's stack in a
//! softirq on the sending CPU, as on loopback; on real NICs the receiving
//! host does that work.
//!
//! Namespaces are named `smbq-PID-vN-c` and `-s`, so that the link
//! emulator's start removes any a killed run left behind; dropping the
//! `Veth` deletes both (and with them the pair).

use anyhow::{anyhow, Context};
use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Name of the veth device in each namespace.
const DEV: &str = "smbqveth0";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The two namespaces and the pair between them.
pub struct Veth {
    client_ns: String,
    server_ns: String,
    client_addr: Ipv4Addr,
    server_addr: Ipv4Addr,
}

impl Veth {
    /// Namespaces `smbq-PID-vN-c` (10.78.X.1/24) and `-s` (10.78.X.2/24),
    /// joined by a veth pair of `mtu` bytes, both ends and `lo` up.
    pub fn start(mtu: u32) -> anyhow::Result<Veth> {
        crate::linkem::remove_stale_namespaces();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let x = (n % 250 + 1) as u8;
        // Built first, so that Drop removes whatever part a failure leaves.
        let v = Veth {
            client_ns: format!("smbq-{pid}-v{n}-c"),
            server_ns: format!("smbq-{pid}-v{n}-s"),
            client_addr: Ipv4Addr::new(10, 78, x, 1),
            server_addr: Ipv4Addr::new(10, 78, x, 2),
        };
        ip(&["netns", "add", &v.client_ns])?;
        ip(&["netns", "add", &v.server_ns])?;
        ip(&["link", "add", DEV, "netns", &v.client_ns, "type", "veth", "peer", "name", DEV, "netns", &v.server_ns])?;
        let mtu = mtu.to_string();
        for (ns, addr) in [(&v.client_ns, v.client_addr), (&v.server_ns, v.server_addr)] {
            // No IPv6 link-local address: nothing but the run crosses.
            let _ = ip(&["-n", ns, "link", "set", "dev", DEV, "addrgenmode", "none"]);
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", DEV])?;
            ip(&["-n", ns, "link", "set", "dev", DEV, "mtu", &mtu, "up"])?;
            ip(&["-n", ns, "link", "set", "dev", "lo", "up"])?;
        }
        Ok(v)
    }

    pub fn client_ns(&self) -> &str {
        &self.client_ns
    }

    pub fn server_ns(&self) -> &str {
        &self.server_ns
    }

    pub fn client_addr(&self) -> Ipv4Addr {
        self.client_addr
    }

    pub fn server_addr(&self) -> Ipv4Addr {
        self.server_addr
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        for ns in [&self.client_ns, &self.server_ns] {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// Moves the calling thread into network namespace `ns`: sockets it makes
/// from now on live there, and so do threads it starts (a tokio
/// runtime's workers, started when the runtime is built).
pub fn enter(ns: &str) -> anyhow::Result<()> {
    let path = format!("/var/run/netns/{ns}");
    let file = File::open(&path).with_context(|| format!("opening {path}"))?;
    // SAFETY: setns on an open namespace fd; it moves this thread alone.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("setns {path}"));
    }
    Ok(())
}

/// `ip ARGS`, failing with its stderr.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().context("running ip (iproute2)")?;
    if !out.status.success() {
        return Err(anyhow!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use smbq_transport::quic::{self, QuicOptions};
    use smbq_transport::tls::{self, ClientAccess};
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    fn root() -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            eprintln!("skipped: network namespaces need root");
        }
        root
    }

    /// On a 9000-byte veth pair, a QUIC connection on smbq's defaults
    /// (the client's bound from its route, the server's from its
    /// interfaces) reaches 8972-byte datagrams (9000 less IPv4's and UDP's
    /// headers) by MTU discovery, both ways; the time it took is printed
    /// (the bound checked here is generous: a test does not time).
    #[test]
    fn jumbo_veth_pair_reaches_jumbo_datagrams() {
        if !root() {
            return;
        }
        let v = Veth::start(9000).expect("veth pair");
        let dir = tempfile::tempdir().expect("tempdir");
        let server_ip = std::net::IpAddr::V4(v.server_addr());
        let (sns, cns, path) = (v.server_ns().to_string(), v.client_ns().to_string(), dir.path().to_path_buf());
        // The server: its own thread and runtime in the server namespace.
        let (tx, rx) = std::sync::mpsc::channel();
        let server = std::thread::spawn(move || {
            enter(&sns).expect("server namespace");
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
            rt.block_on(async move {
                let (id, _) = tls::load_or_generate(&path, None, &[]).expect("certificate");
                let opts = QuicOptions { max_udp_payload: smbq_quic::listen_mtu_upper_bound(server_ip), ..QuicOptions::default() };
                let tls = tls::server_config(tls::Certificates::new(&id).expect("certs"), &ClientAccess::default()).expect("tls");
                let ep = quic::endpoint(SocketAddr::new(server_ip, 0), tls, &opts).expect("endpoint");
                tx.send((ep.local_addr().expect("addr"), id.chain[0].clone(), opts.max_udp_payload)).expect("send");
                let conn = ep.accept().await.expect("incoming").await.expect("connection");
                let got = reach_jumbo(&conn).await;
                conn.close(0u32.into(), b"");
                // The close reaches the client before the runtime goes.
                ep.wait_idle().await;
                got
            })
        });
        let (addr, cert, server_bound) = rx.recv().expect("server started");
        assert_eq!(server_bound, 8972);
        let (client_bound, (mtu, took)) = std::thread::spawn(move || {
            enter(&cns).expect("client namespace");
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                let mut roots = rustls::RootCertStore::empty();
                roots.add(cert).expect("root");
                let t = smbq_client::QuicTarget::new(addr, "localhost", roots);
                let ep = smbq_client::quic_endpoint(&t).expect("client endpoint");
                let conn = ep.connect(addr, "localhost").expect("connect").await.expect("handshake");
                let got = reach_jumbo(&conn).await;
                // Until the server has seen its side too.
                let _ = tokio::time::timeout(Duration::from_secs(15), conn.closed()).await;
                (t.max_udp_payload, got)
            })
        })
        .join()
        .expect("client");
        let (server_mtu, server_took) = server.join().expect("server");
        eprintln!("client (bound {client_bound}) sends {mtu}-byte datagrams after {took:?}, the server {server_mtu} after {server_took:?}");
        assert_eq!(client_bound, 8972);
        assert!(mtu >= 8900, "client reached {mtu} bytes in {took:?}");
        assert!(server_mtu >= 8900, "server reached {server_mtu} bytes in {server_took:?}");
    }

    /// The path MTU `conn` reaches, polled each millisecond, once past
    /// 8900 bytes or after 10 s, and when.
    async fn reach_jumbo(conn: &quinn::Connection) -> (u16, Duration) {
        let start = Instant::now();
        while conn.stats().path.current_mtu < 8900 && start.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        (conn.stats().path.current_mtu, start.elapsed())
    }
}
