//! Reload without restart: on SIGHUP (or `smbq reload`, which sends it)
//! `smbq serve` reads its config file, its users file and its certificate
//! files again and serves what they say from then on, without dropping a
//! connection ([`smbq_server::Server::reload`] says what happens to tree
//! connects and sessions; a replaced certificate is presented from the
//! next QUIC handshake on). A config, users file or certificate that does
//! not load is refused with the reason, and everything stays as it was.
//!
//! What a reload cannot change (listen addresses, QUIC options, limits,
//! the server-wide signing and encryption policy) is reported as needing
//! a restart. Shares given with `--share` on the command line stay those;
//! shares from the config file follow it.
//!
//! `smbq serve` keeps its pid in `STATE_DIR/smbq.pid` and the outcome of
//! the last reload in `STATE_DIR/reload.status` (a generation number,
//! `ok` or `error`, then the message), which `smbq reload` waits on.

use crate::config::FileConfig;
use anyhow::{bail, Context};
use clap::Args;
use smbq_server::{Server, ShareConfig};
use smbq_transport::tls;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{error, info, warn};

const PID_FILE: &str = "smbq.pid";
const STATUS_FILE: &str = "reload.status";
/// How long `smbq reload` waits for the server's answer.
const WAIT: Duration = Duration::from_secs(30);

/// Where the QUIC certificate comes from, to read again on a reload.
#[derive(Clone, Debug)]
pub enum CertSource {
    /// Files the operator gave (`--cert`/`--key` or `cert`/`key`).
    Files { cert: PathBuf, key: PathBuf },
    /// The pair smbq generated under the state directory.
    Generated { state_dir: PathBuf, sans: Vec<String> },
}

impl CertSource {
    pub fn load(&self) -> anyhow::Result<tls::Identity> {
        Ok(match self {
            CertSource::Files { cert, key } => tls::Identity::load(cert, key)?,
            CertSource::Generated { state_dir, sans } => tls::load_or_generate(state_dir, None, sans)?.0,
        })
    }
}

/// What `smbq serve` was started with, to read the same sources again.
pub struct Reloader {
    pub server: Arc<Server>,
    pub config: Option<PathBuf>,
    /// The file config as it was at start (what a reload cannot change is
    /// compared with it).
    pub started: FileConfig,
    /// `--share` given on the command line (they win over the file's).
    pub cli_shares: Vec<ShareConfig>,
    /// The DIR argument (the default share when none is configured).
    pub dir: Option<PathBuf>,
    pub users: PathBuf,
    pub state_dir: PathBuf,
    pub certs: Option<(Arc<tls::Certificates>, CertSource)>,
    pub generation: u64,
}

/// The shares to serve: those given on the command line, else the config
/// file's, else `dir` (default ./share, created if absent) as `share`.
pub fn shares(cli: &[ShareConfig], dir: Option<&Path>, file: &FileConfig) -> anyhow::Result<Vec<ShareConfig>> {
    if !cli.is_empty() || !file.share.is_empty() {
        if dir.is_some() {
            bail!("give either DIR or --share/[[share]], not both");
        }
        return Ok(if !cli.is_empty() { cli.to_vec() } else { file.share.clone() });
    }
    let dir = dir.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("share"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(vec![ShareConfig::new("share", dir)])
}

impl Reloader {
    /// Read everything again and apply it; the message says what changed.
    fn reload(&mut self) -> anyhow::Result<String> {
        let file = match &self.config {
            Some(p) => FileConfig::load(p)?,
            None => FileConfig::default(),
        };
        let shares = shares(&self.cli_shares, self.dir.as_deref(), &file)?;
        let users = crate::user::load_or_new(&self.users)?;
        if users.names().is_empty() {
            bail!("{}: no users (every client would be refused)", self.users.display());
        }
        // Checked before anything changes: the pair must load and match.
        let identity = match &self.certs {
            Some((_, source)) => {
                let id = source.load().context("certificate")?;
                tls::Certificates::new(&id).context("certificate")?;
                Some(id)
            }
            None => None,
        };
        let done = self.server.reload(&shares, users).map_err(anyhow::Error::msg)?;
        let mut said = vec![format!(
            "shares added {:?}, removed {:?}, changed {:?}; users removed {:?}",
            done.added, done.removed, done.changed, done.users_removed
        )];
        if let (Some((certs, _)), Some(id)) = (&self.certs, identity) {
            let before = certs.leaf().map(|c| tls::fingerprint(&c));
            certs.replace(&id)?;
            crate::metrics::certificate_in_use(&id.chain);
            if before.as_deref() != Some(id.fingerprint().as_str()) {
                said.push(format!("certificate replaced: SHA-256 {}", id.fingerprint()));
            }
        }
        let restart = self.needs_restart(&file);
        if !restart.is_empty() {
            said.push(format!("changed, but needing a restart: {}", restart.join(", ")));
        }
        Ok(said.join("; "))
    }

    /// What differs from the config at start that only a restart applies.
    fn needs_restart(&self, file: &FileConfig) -> Vec<&'static str> {
        let s = &self.started;
        let mut out = Vec::new();
        if (s.tcp, s.quic, s.no_tcp, s.no_quic) != (file.tcp, file.quic, file.no_tcp, file.no_quic) {
            out.push("listen addresses");
        }
        if (s.signing_required, s.encrypt, &s.server_name) != (file.signing_required, file.encrypt, &file.server_name) {
            out.push("signing, encryption or server name");
        }
        if format!("{:?}", (&s.limits, &s.quic_options)) != format!("{:?}", (&file.limits, &file.quic_options)) {
            out.push("limits or QUIC options");
        }
        if (&s.kerberos, &s.auth) != (&file.kerberos, &file.auth) {
            out.push("[kerberos] or [auth]");
        }
        if (&s.users, &s.state_dir) != (&file.users, &file.state_dir) {
            out.push("users file or state directory");
        }
        out
    }

    /// One reload, its outcome logged and kept for `smbq reload`.
    pub fn run_once(&mut self) {
        self.generation += 1;
        let (ok, message) = match self.reload() {
            Ok(m) => {
                info!(generation = self.generation, "reloaded: {m}");
                (true, m)
            }
            Err(e) => {
                error!(generation = self.generation, "reload refused, nothing changed: {e:#}");
                (false, format!("{e:#}"))
            }
        };
        if let Err(e) = write_status(&self.state_dir, self.generation, ok, &message) {
            warn!("could not write {}: {e}", self.state_dir.join(STATUS_FILE).display());
        }
    }
}

/// Keep the pid (for `smbq reload`) and a first status.
pub fn started(state_dir: &Path) -> anyhow::Result<()> {
    let pid = state_dir.join(PID_FILE);
    std::fs::write(&pid, format!("{}\n", std::process::id())).with_context(|| format!("writing {}", pid.display()))?;
    write_status(state_dir, 0, true, "serving")
}

/// Forget the pid at exit.
pub fn stopped(state_dir: &Path) {
    let _ = std::fs::remove_file(state_dir.join(PID_FILE));
}

fn write_status(state_dir: &Path, generation: u64, ok: bool, message: &str) -> anyhow::Result<()> {
    let path = state_dir.join(STATUS_FILE);
    let tmp = state_dir.join(format!("{STATUS_FILE}.new"));
    std::fs::write(&tmp, format!("{generation} {}\n{message}\n", if ok { "ok" } else { "error" }))?;
    std::fs::rename(&tmp, &path)?;
    Ok(())
}

/// The generation, outcome and message of the last reload.
fn read_status(state_dir: &Path) -> Option<(u64, bool, String)> {
    let text = std::fs::read_to_string(state_dir.join(STATUS_FILE)).ok()?;
    let (head, message) = text.split_once('\n')?;
    let (generation, outcome) = head.split_once(' ')?;
    Some((generation.parse().ok()?, outcome == "ok", message.trim_end().to_owned()))
}

#[derive(Args)]
pub struct ReloadArgs {
    /// The state directory of the `smbq serve` to reload (default ~/.local/state/smbq).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

/// `smbq reload`: SIGHUP to the server whose pid the state directory
/// keeps, then wait for its answer; an error if the reload was refused.
pub fn run(args: ReloadArgs) -> anyhow::Result<()> {
    let state_dir = args.state_dir.unwrap_or_else(crate::default_state_dir);
    let pid_file = state_dir.join(PID_FILE);
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .with_context(|| format!("{}: is smbq serve running with this state directory?", pid_file.display()))?
        .trim()
        .parse()
        .with_context(|| format!("{}: not a pid", pid_file.display()))?;
    let before = read_status(&state_dir).map_or(0, |s| s.0);
    // SAFETY: kill(2) with a pid read from our own pid file and SIGHUP.
    if unsafe { libc::kill(pid, libc::SIGHUP) } != 0 {
        bail!("signalling smbq serve (pid {pid}): {}", std::io::Error::last_os_error());
    }
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        match read_status(&state_dir) {
            Some((g, true, message)) if g > before => {
                println!("reloaded: {message}");
                return Ok(());
            }
            Some((g, false, message)) if g > before => bail!("reload refused, the server keeps its old configuration: {message}"),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    bail!("smbq serve (pid {pid}) did not answer within {} s", WAIT.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_status(dir.path()), None);
        write_status(dir.path(), 3, false, "share x: no such directory").unwrap();
        assert_eq!(read_status(dir.path()), Some((3, false, "share x: no such directory".into())));
        write_status(dir.path(), 4, true, "ok").unwrap();
        assert_eq!(read_status(dir.path()), Some((4, true, "ok".into())));
    }

    #[test]
    fn shares_from_the_command_line_win() {
        let file = FileConfig { share: vec![ShareConfig::new("f", "/srv/f")], ..FileConfig::default() };
        let cli = vec![ShareConfig::new("c", "/srv/c")];
        assert_eq!(shares(&cli, None, &file).unwrap()[0].name, "c");
        assert_eq!(shares(&[], None, &file).unwrap()[0].name, "f");
        assert!(shares(&cli, Some(Path::new("/x")), &file).is_err());
    }
}
