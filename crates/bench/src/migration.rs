//! S5m of `smbq-bench suite`: a transfer across an address change, and
//! the time it loses (issue 19, "migration that users notice").
//!
//! Over the link emulator (linkem.rs), `smbq get` reads one file of
//! [`SIZE`] bytes in the client namespace, twice: once as it is, once
//! with the client's address changed when [`CHANGE_AT`] of the file has
//! arrived. The change is a move to another network: the client's TUN
//! gets an address in a second subnet (10.78.X.0/24 beside the link's
//! 10.77.X.0/24, which the server namespace routes over the link, as a
//! router would), a host route to the server through it, and loses its
//! old address, all in one `ip -batch`. The emulator forwards IP packets
//! whatever their addresses, so from then on the client's packets arrive
//! from the new address and nothing reaches the old one.
//!
//! Figures per repetition: `seconds` of the plain read and `seconds_moved`
//! of the read across the change (both the `--json` summary of `smbq get`:
//! connect, logon and copy), `lost_s`, their difference, and what the
//! moved read did: `reconnects` and `reclaimed` (the client's summary) and
//! `migrations` (lines `QUIC peer address changed` in the server's log).
//! Over QUIC the connection migrates (RFC 9000 section 9); over TCP it
//! dies with the address and `smbq get` connects again once
//! `--response-timeout` (its default, [`RESPONSE_TIMEOUT_S`]) has passed
//! without an answer.
//!
//! Measured (bench/results/2026-11-27-s5m, three repetitions on the 2-core
//! test machine): smbq-quic read the file in 2.12-2.41 s, and across the
//! move in 2.71-2.86 s, losing 0.45-0.66 s (about 11-16 round trips)
//! on one connection that the server moved and validated once. That is
//! what a new path costs: RFC 9000 section 9.4 has the server start its
//! congestion window, RTT estimate and path MTU afresh on a new IP, it
//! sends at most three times what it received there until the client
//! answers the PATH_CHALLENGE, and what was in flight to the old address
//! is lost. smbq-tcp-enc took 4.23-4.29 s, and across the move 64.8 s:
//! the client waited out its 60 s response timeout, connected again and
//! reclaimed its durable handle (the server had dropped the dead
//! connection a moment earlier, its own send timeout being 60 s too).

use crate::linkem::{Link, TUN_NAME};
use crate::peers::{self, Server};
use anyhow::{bail, Context};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Size of the file read.
pub const SIZE: u64 = 256 << 20;
/// The share of the file that has arrived when the address changes.
pub const CHANGE_AT: f64 = 0.5;
/// `smbq get --response-timeout`: the client's default.
pub const RESPONSE_TIMEOUT_S: u64 = 60;

/// The file's name in the share.
pub const NAME: &str = "s5m.bin";

/// The client's address after the move: the link's, in 10.78.0.0/16.
fn moved_addr(link: &Link) -> Ipv4Addr {
    let o = link.client_addr().octets();
    Ipv4Addr::new(10, 78, o[2], o[3])
}

/// The server namespace routes the moved address's subnet over the link
/// (once per link).
pub fn prepare(link: &Link) -> anyhow::Result<()> {
    let o = moved_addr(link).octets();
    ip_batch(link.server_ns(), &[format!("route replace 10.78.{}.0/24 dev {TUN_NAME}", o[2])])
}

/// `ip -n NS -batch -` with `lines`.
fn ip_batch(ns: &str, lines: &[String]) -> anyhow::Result<()> {
    let mut child = Command::new("ip").args(["-n", ns, "-batch", "-"]).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().context("running ip (iproute2)")?;
    if let Some(mut i) = child.stdin.take() {
        std::io::Write::write_all(&mut i, (lines.join("\n") + "\n").as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("ip -n {ns} -batch ({}): {}", lines.join("; "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// The client's move; undone when dropped, so the link's next users find
/// it as it was.
struct Moved<'a> {
    link: &'a Link,
}

impl<'a> Moved<'a> {
    fn new(link: &'a Link) -> anyhow::Result<Moved<'a>> {
        let (old, new, srv) = (link.client_addr(), moved_addr(link), link.server_addr());
        ip_batch(link.client_ns(), &[format!("addr add {new}/24 dev {TUN_NAME}"), format!("route add {srv}/32 dev {TUN_NAME} src {new}"), format!("addr del {old}/24 dev {TUN_NAME}")])?;
        Ok(Moved { link })
    }
}

impl Drop for Moved<'_> {
    fn drop(&mut self) {
        let l = self.link;
        let (old, new, srv) = (l.client_addr(), moved_addr(l), l.server_addr());
        let lines = [format!("addr add {old}/24 dev {TUN_NAME}"), format!("route del {srv}/32 dev {TUN_NAME}"), format!("addr del {new}/24 dev {TUN_NAME}")];
        if let Err(e) = ip_batch(l.client_ns(), &lines) {
            eprintln!("restoring the client's address: {e:#}");
        }
    }
}

/// The `--json` summary of `smbq get`.
#[derive(serde::Deserialize)]
struct Summary {
    bytes: u64,
    seconds: f64,
    #[serde(default)]
    reconnects: u64,
    #[serde(default)]
    reclaimed: u64,
}

/// Both reads of [`NAME`] (already in `srv`'s share, [`SIZE`] bytes) by
/// `system` ("smbq-quic" or "smbq-tcp-enc"), into `local`; `server_log`
/// is the server's log. The figures of the module doc.
pub fn measure(link: &Link, system: &str, srv: &Server, server_log: &Path, local: &Path) -> anyhow::Result<Vec<(&'static str, f64)>> {
    std::fs::create_dir_all(local)?;
    let want = sha256_file(&srv.share_dir.join(NAME))?;
    let plain = get(link, system, srv, local, want, false)?;
    let migrations = || std::fs::read_to_string(server_log).map_or(0, |t| t.matches("QUIC peer address changed").count());
    let before = migrations();
    let moved = get(link, system, srv, local, want, true)?;
    let migrations = migrations() - before;
    Ok(vec![
        ("seconds", plain.seconds),
        ("seconds_moved", moved.seconds),
        ("lost_s", moved.seconds - plain.seconds),
        ("reconnects", moved.reconnects as f64),
        ("reclaimed", moved.reclaimed as f64),
        ("migrations", migrations as f64),
    ])
}

/// One `smbq get` of [`NAME`] in the client namespace, moving the client
/// when [`CHANGE_AT`] of it has arrived if `mv`; checks the copy.
fn get(link: &Link, system: &str, srv: &Server, local: &Path, want: [u8; 32], mv: bool) -> anyhow::Result<Summary> {
    let dest = local.join(NAME);
    let _ = std::fs::remove_file(&dest);
    let host = srv.tcp.ip();
    let mut cmd = link.command(link.client_ns(), &peers::smbq_bin()?.to_string_lossy());
    cmd.args(["get", "--json", "--response-timeout", &RESPONSE_TIMEOUT_S.to_string()]);
    match system {
        "smbq-quic" => {
            let quic = srv.quic.context("no QUIC address")?;
            use sha2::Digest;
            let fp: String = sha2::Sha256::digest(srv.cert.as_ref().context("no certificate")?).iter().map(|b| format!("{b:02x}")).collect();
            cmd.args(["--transport", "quic", "--fingerprint", &fp]).arg(format!("smb://{}@{host}:{}/share/{NAME}", srv.user, quic.port()));
        }
        "smbq-tcp-enc" => {
            cmd.args(["--transport", "tcp", "--encrypt"]).arg(format!("smb://{}@{host}:{}/share/{NAME}", srv.user, srv.tcp.port()));
        }
        s => bail!("{s}: no address change measured for it"),
    }
    let mut child = cmd.arg(&dest).env("SMBQ_PASSWORD", &srv.password).env_remove("SMBQ_USER").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("smbq get")?;
    let mut moved = None;
    if mv {
        let t = Instant::now();
        loop {
            if std::fs::metadata(&dest).is_ok_and(|m| m.len() as f64 >= SIZE as f64 * CHANGE_AT) {
                break;
            }
            if child.try_wait()?.is_some() || t.elapsed() > Duration::from_secs(300) {
                let _ = child.kill();
                let out = child.wait_with_output()?;
                bail!("the read ended or stalled before the address change: {}", String::from_utf8_lossy(&out.stderr).trim());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        match Moved::new(link) {
            Ok(m) => moved = Some(m),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        }
        if child.try_wait()?.is_some() {
            bail!("the read ended before the address change was done: make the file larger");
        }
    }
    let out = child.wait_with_output()?;
    drop(moved);
    if !out.status.success() {
        bail!("smbq get: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let s: Summary = serde_json::from_slice(&out.stdout).with_context(|| format!("smbq get's summary: {}", String::from_utf8_lossy(&out.stdout)))?;
    if s.bytes != SIZE || sha256_file(&dest)? != want {
        bail!("the copy differs ({} of {SIZE} bytes)", s.bytes);
    }
    let _ = std::fs::remove_file(&dest);
    Ok(s)
}

fn sha256_file(p: &Path) -> anyhow::Result<[u8; 32]> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut std::fs::File::open(p).with_context(|| format!("{}", p.display()))?, &mut h)?;
    Ok(h.finalize().into())
}
