//! The servers `smbq-bench suite` starts and stops itself, each in a
//! directory of its own, on a port of its own, as a child process whose
//! pid the suite measures and kills (and no other):
//!
//! - `smbq serve` (this build's binary, beside `smbq-bench`), on the
//!   defaults a user gets: TCP and QUIC, encryption desired;
//! - Samba's `smbd` from Debian, with a private smb.conf: share `enc`
//!   requires SMB encryption (samba-tcp-enc), share `sign` is Samba's
//!   default (signing, encryption only when asked: samba-tcp-sign), both
//!   on the same directory; signing mandatory;
//! - OpenSSH's `sshd`, with a private configuration, a host key and a
//!   client key generated for the run (scp in S4).
//!
//! A server that cannot start (not installed, no root) is an error whose
//! text the suite puts in its rows as "not run: ...".

use crate::linkem::netns_command;
use crate::random::tree_pids;
use anyhow::{bail, Context};
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    child: Child,
    pub tcp: SocketAddr,
    /// smbq's QUIC address.
    pub quic: Option<SocketAddr>,
    pub user: String,
    pub password: String,
    /// Where the share's files are.
    pub share_dir: PathBuf,
    /// smbq's certificate (DER), for the QUIC client to trust.
    pub cert: Option<rustls::pki_types::CertificateDer<'static>>,
    /// sshd: the client's private key file.
    pub ssh_key: Option<PathBuf>,
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory of the server and its descendants, MiB.
    pub fn rss_mib(&self) -> f64 {
        tree_pids(self.pid()).iter().map(|&p| rss_kib(p)).sum::<f64>() / 1024.0
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // smbd's children and sshd's sessions first: they are ours too.
        let pids = tree_pids(self.pid());
        for &p in pids.iter().rev() {
            // SAFETY: kill has no memory preconditions; these pids are our
            // child and its descendants, read just now.
            unsafe { libc::kill(p as i32, libc::SIGTERM) };
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rss_kib(pid: u32) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return 0.0 };
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok()).unwrap_or(0.0)
}

/// Where a server runs: its address, the network namespace (None: this
/// one), and the CPU it is kept on (as on a host of its own).
#[derive(Clone)]
pub struct Place {
    pub ip: IpAddr,
    pub netns: Option<String>,
    pub cpu: Option<usize>,
}

impl Place {
    fn command(&self, program: &str) -> Command {
        let mut c = match &self.netns {
            Some(ns) => netns_command(ns, program),
            None => Command::new(program),
        };
        if let Some(cpu) = self.cpu {
            use std::os::unix::process::CommandExt;
            // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: CPU_SET sets one bit of `set` through a bounds-checked
            // index (a `cpu` past CPU_SETSIZE panics, it writes nothing).
            unsafe { libc::CPU_SET(cpu, &mut set) };
            // SAFETY: the closure runs in the child between fork and exec,
            // where only async-signal-safe calls are allowed: it makes one
            // system call, sched_setaffinity, which only reads `set` (moved
            // in, made before the fork), and allocates nothing.
            unsafe {
                c.pre_exec(move || {
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                    Ok(())
                })
            };
        }
        c
    }
}

fn random_password() -> String {
    let mut b = [0u8; 12];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b));
    format!("Pw{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>())
}

/// The smbq binary built beside this one.
pub fn smbq_bin() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let p = exe.with_file_name("smbq");
    if !p.exists() {
        bail!("{} is missing: cargo build --release -p smbq", p.display());
    }
    Ok(p)
}

/// A free TCP port on `ip` in this namespace (a fresh namespace has them all).
fn free_port(p: &Place) -> anyhow::Result<u16> {
    if p.netns.is_some() {
        return Ok(4450);
    }
    Ok(std::net::TcpListener::bind((p.ip, 0))?.local_addr()?.port())
}

/// Waits until `addr` takes connections; failing, says why with the end
/// of the server's log.
fn wait_port(addr: SocketAddr, child: &mut Child, what: &str, netns: Option<&str>, log: &Path) -> anyhow::Result<()> {
    wait_port_quiet(addr, child, what, netns).map_err(|e| {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(4).collect();
        e.context(format!("{} says: {}", log.display(), tail.into_iter().rev().collect::<Vec<_>>().join(" | ")))
    })
}

fn wait_port_quiet(addr: SocketAddr, child: &mut Child, what: &str, netns: Option<&str>) -> anyhow::Result<()> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(30) {
        if let Some(st) = child.try_wait()? {
            bail!("{what} exited at start: {st}");
        }
        let up = match netns {
            // Probed from inside its namespace, with bash's /dev/tcp.
            Some(ns) => netns_command(ns, "bash")
                .args(["-c", &format!("exec 3<>/dev/tcp/{}/{}", addr.ip(), addr.port())])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
            None => std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok(),
        };
        if up {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("{what} did not listen on {addr} within 30 s")
}

/// `smbq serve` on its defaults, or with `config` (a TOML file).
pub fn start_smbq(work: &Path, at: &Place, config: Option<&Path>) -> anyhow::Result<Server> {
    let bin = smbq_bin()?;
    let (share, state, users) = (work.join("share"), work.join("state"), work.join("users"));
    std::fs::create_dir_all(&share)?;
    std::fs::create_dir_all(&state)?;
    let password = random_password();
    let mut add = Command::new(&bin).args(["user", "add", "bench", "--users"]).arg(&users).arg("--password-stdin").stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
    if let Some(mut i) = add.stdin.take() {
        std::io::Write::write_all(&mut i, format!("{password}\n").as_bytes())?;
    }
    let out = add.wait_with_output()?;
    if !out.status.success() {
        bail!("smbq user add: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut cmd = at.command(&bin.to_string_lossy());
    cmd.arg("serve").arg(&share).arg("--tcp").arg(format!("{}:0", at.ip)).arg("--quic").arg(format!("{}:0", at.ip));
    cmd.arg("--users").arg(&users).arg("--state-dir").arg(&state);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().context("smbq serve")?;
    let err = child.stderr.take().context("smbq's stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    let log = work.join("server.log");
    std::thread::spawn(move || {
        let mut f = std::fs::File::create(log).ok();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if let Some(f) = f.as_mut() {
                let _ = std::io::Write::write_all(f, format!("{line}\n").as_bytes());
            }
            let _ = tx.send(line);
        }
    });
    let (mut tcp, mut quic) = (None, None);
    let t = Instant::now();
    while quic.is_none() {
        let left = Duration::from_secs(30).saturating_sub(t.elapsed());
        let line = rx.recv_timeout(left).map_err(|_| anyhow::anyhow!("smbq serve did not say it listens (see {})", work.join("server.log").display()))?;
        let addr = |l: &str, p: &str| l.strip_prefix(p).and_then(|r| r.split_whitespace().next()).and_then(|a| a.parse::<SocketAddr>().ok());
        tcp = tcp.or(addr(&line, "listening on tcp "));
        quic = quic.or(addr(&line, "listening on quic "));
    }
    let pem = std::fs::read(state.join("tls").join("cert.pem"))?;
    use rustls::pki_types::pem::PemObject;
    let cert = rustls::pki_types::CertificateDer::from_pem_slice(&pem).map_err(|e| anyhow::anyhow!("smbq's certificate: {e:?}"))?;
    let tcp = tcp.context("no TCP address")?;
    Ok(Server { child, tcp, quic, user: "bench".into(), password, share_dir: share, cert: Some(cert), ssh_key: None })
}

const SMBD_USER: &str = "smbqbench";

pub fn start_smbd(work: &Path, at: &Place) -> anyhow::Result<Server> {
    if which("smbd").is_none() {
        bail!("smbd is not installed (Debian: samba)");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("smbd needs root here");
    }
    let share = work.join("share");
    for d in ["share", "private", "lock", "state", "pid", "cache", "ncalrpc", "log"] {
        std::fs::create_dir_all(work.join(d))?;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(work, std::fs::Permissions::from_mode(0o755))?;
    std::fs::set_permissions(&share, std::fs::Permissions::from_mode(0o777))?;
    let port = free_port(at)?;
    let w = work.display();
    let conf = work.join("smb.conf");
    std::fs::write(
        &conf,
        format!(
            "[global]
  smb ports = {port}
  {bind}
  private dir = {w}/private
  lock directory = {w}/lock
  state directory = {w}/state
  pid directory = {w}/pid
  cache directory = {w}/cache
  ncalrpc dir = {w}/ncalrpc
  log file = {w}/log/log.%m
  server role = standalone server
  passdb backend = tdbsam
  map to guest = never
  server min protocol = SMB2_02
  disable netbios = yes
  load printers = no
  printing = bsd
  printcap name = /dev/null
  disable spoolss = yes
  server signing = mandatory
[enc]
  path = {s}
  read only = no
  server smb encrypt = required
[sign]
  path = {s}
  read only = no
  server smb encrypt = if_required
",
            // In a namespace of its own (the link's), all addresses: Samba
            // skips the TUN device (no broadcast) when it matches interfaces.
            bind = if at.netns.is_some() { "bind interfaces only = no".to_string() } else { format!("bind interfaces only = yes\n  interfaces = {}/32 lo", at.ip) },
            s = share.display()
        ),
    )?;
    if !Command::new("id").arg(SMBD_USER).stdout(Stdio::null()).stderr(Stdio::null()).status()?.success() {
        let st = Command::new("useradd").args(["--no-create-home", "--shell", "/usr/sbin/nologin", SMBD_USER]).status()?;
        if !st.success() {
            bail!("useradd {SMBD_USER} failed");
        }
    }
    let password = random_password();
    let mut p = Command::new("smbpasswd").arg("-c").arg(&conf).args(["-a", "-s", SMBD_USER]).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
    if let Some(mut i) = p.stdin.take() {
        std::io::Write::write_all(&mut i, format!("{password}\n{password}\n").as_bytes())?;
    }
    let out = p.wait_with_output()?;
    if !out.status.success() {
        bail!("smbpasswd: {}", String::from_utf8_lossy(&out.stderr));
    }
    let log = std::fs::File::create(work.join("server.log"))?;
    let mut cmd = at.command("smbd");
    cmd.args(["--foreground", "--no-process-group", "--debug-stdout", "-s"]).arg(&conf);
    cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    // smbd's parent signals its whole process group when it exits.
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let mut child = cmd.spawn().context("smbd")?;
    let tcp = SocketAddr::new(at.ip, port);
    wait_port(tcp, &mut child, "smbd", at.netns.as_deref(), &work.join("server.log"))?;
    Ok(Server { child, tcp, quic: None, user: SMBD_USER.into(), password, share_dir: share, cert: None, ssh_key: None })
}

pub fn start_sshd(work: &Path, at: &Place) -> anyhow::Result<Server> {
    let sshd = Path::new("/usr/sbin/sshd");
    if !sshd.exists() {
        bail!("sshd is not installed (Debian: openssh-server)");
    }
    if which("scp").is_none() {
        bail!("scp is not installed (Debian: openssh-client)");
    }
    std::fs::create_dir_all(work)?;
    // The privilege separation directory sshd insists on.
    std::fs::create_dir_all("/run/sshd")?;
    let (host, client) = (work.join("host_key"), work.join("client_key"));
    for k in [&host, &client] {
        let st = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(k).stdout(Stdio::null()).status()?;
        if !st.success() {
            bail!("ssh-keygen failed");
        }
    }
    std::fs::copy(work.join("client_key.pub"), work.join("authorized_keys"))?;
    let share = work.join("share");
    std::fs::create_dir_all(&share)?;
    let port = free_port(at)? + 1;
    let w = work.display();
    let conf = work.join("sshd_config");
    std::fs::write(
        &conf,
        format!(
            "Port {port}\nListenAddress {ip}\nHostKey {w}/host_key\nAuthorizedKeysFile {w}/authorized_keys\nPidFile {w}/sshd.pid\n\
             UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nSubsystem sftp internal-sftp\nLogLevel ERROR\n",
            ip = at.ip
        ),
    )?;
    let log = std::fs::File::create(work.join("server.log"))?;
    let mut cmd = at.command("/usr/sbin/sshd");
    cmd.args(["-D", "-e", "-f"]).arg(&conf).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    let mut child = cmd.spawn().context("sshd")?;
    let tcp = SocketAddr::new(at.ip, port);
    wait_port(tcp, &mut child, "sshd", at.netns.as_deref(), &work.join("server.log"))?;
    Ok(Server { child, tcp, quic: None, user: "root".into(), password: String::new(), share_dir: share, cert: None, ssh_key: Some(client) })
}

pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(program)).find(|f| f.is_file()))
}

/// `program --version`-like output's first line, or "missing".
pub fn version(program: &str, args: &[&str]) -> String {
    match Command::new(program).args(args).output() {
        Ok(o) => {
            let text = if o.stdout.is_empty() { o.stderr } else { o.stdout };
            String::from_utf8_lossy(&text).lines().next().unwrap_or("").trim().to_string()
        }
        Err(_) => "missing".into(),
    }
}
