//! `smbq serve`: wire config, users, shares and listeners together.

use crate::config::{parse_share, FileConfig};
use crate::user::{load_or_new, save};
use anyhow::{bail, Context};
use clap::Args;
use rand::distributions::Alphanumeric;
use rand::Rng;
use smbq_server::{EncryptPolicy, Server, ServerConfig, ShareConfig};
use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tracing::{info, warn};

#[derive(Args)]
pub struct ServeArgs {
    /// Directory to serve as share `share` when no --share is given
    /// (default ./share, created if absent).
    dir: Option<PathBuf>,
    /// TOML config file (shares, listen addresses, limits, encryption).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Share NAME=DIR[,ro][,encrypt=required|desired|off]; repeatable.
    #[arg(long = "share", value_name = "NAME=DIR[,ro][,encrypt=..]", value_parser = parse_share)]
    shares: Vec<ShareConfig>,
    /// TCP listen address (default 0.0.0.0:445, or 0.0.0.0:4445 when 445 cannot be bound).
    #[arg(long, value_name = "ADDR:PORT")]
    tcp: Option<SocketAddr>,
    /// Users file (default STATE_DIR/users).
    #[arg(long, value_name = "FILE")]
    users: Option<PathBuf>,
    /// State directory (default ~/.local/state/smbq).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Server-wide SMB encryption policy: required, desired (default) or off.
    #[arg(long, value_name = "POLICY")]
    encrypt: Option<EncryptPolicy>,
    /// Require SMB signing on every session.
    #[arg(long)]
    signing_required: bool,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let file = match &args.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    let state_dir = args.state_dir.clone().or(file.state_dir.clone()).unwrap_or_else(crate::default_state_dir);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&state_dir)
        .with_context(|| format!("creating state directory {}", state_dir.display()))?;
    let users_path = args.users.clone().or(file.users.clone()).unwrap_or_else(|| state_dir.join("users"));
    let (users, first_user) = ensure_user(&users_path)?;

    let mut shares = if !args.shares.is_empty() { args.shares.clone() } else { file.share.clone() };
    if shares.is_empty() {
        let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from("share"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        shares.push(ShareConfig { name: "share".into(), path: dir, read_only: false, encrypt: EncryptPolicy::default() });
    } else if args.dir.is_some() {
        bail!("give either DIR or --share/[[share]], not both");
    }
    let config = ServerConfig {
        shares,
        limits: file.limits.clone(),
        server_name: file.server_name.clone().unwrap_or_else(|| "SMBQ".into()),
        signing_required: args.signing_required || file.signing_required.unwrap_or(false),
        encrypt: args.encrypt.or(file.encrypt).unwrap_or_default(),
        ..ServerConfig::default()
    };
    let server = Arc::new(Server::new(config, users).map_err(anyhow::Error::msg)?);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(server.config.limits.max_connections + 16)
        .build()?;
    rt.block_on(async move {
        let listener = bind_tcp(args.tcp.or(file.tcp)).await?;
        let addr = listener.local_addr()?;
        eprintln!("listening on tcp {addr}");
        print_hints(&server, addr, &users_path, first_user.as_ref());
        let shutdown = async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("installing a SIGTERM handler at start-up");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            info!("shutting down");
        };
        smbq_transport::tcp::serve(listener, server, shutdown).await;
        anyhow::Ok(())
    })?;
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(())
}

async fn bind_tcp(addr: Option<SocketAddr>) -> anyhow::Result<tokio::net::TcpListener> {
    if let Some(a) = addr {
        return tokio::net::TcpListener::bind(a).await.with_context(|| format!("binding tcp {a}"));
    }
    match tokio::net::TcpListener::bind("0.0.0.0:445").await {
        Ok(l) => Ok(l),
        Err(e) => {
            warn!("cannot bind tcp port 445 ({e}); using 4445");
            tokio::net::TcpListener::bind("0.0.0.0:4445").await.context("binding tcp 0.0.0.0:4445")
        }
    }
}

/// The users file, created with one user and a random password on first run.
fn ensure_user(path: &Path) -> anyhow::Result<(smbq_auth::UserDb, Option<(String, String)>)> {
    let mut db = load_or_new(path)?;
    if !db.names().is_empty() {
        return Ok((db, None));
    }
    let user = "smbq".to_string();
    let password: String = rand::thread_rng().sample_iter(&Alphanumeric).take(20).map(char::from).collect();
    db.add(&user, &password);
    save(&db, path)?;
    Ok((db, Some((user, password))))
}

fn print_hints(server: &Server, addr: SocketAddr, users: &Path, first: Option<&(String, String)>) {
    let host = if addr.ip().is_unspecified() { "127.0.0.1".to_string() } else { addr.ip().to_string() };
    let port = if addr.port() == 445 { String::new() } else { format!(" -p {}", addr.port()) };
    let (user, pass) = match first {
        Some((u, p)) => {
            eprintln!("created user {u} with password {p} (stored as an NT hash in {})", users.display());
            (u.clone(), p.clone())
        }
        None => ("USER".into(), "PASSWORD".into()),
    };
    for s in server.config.shares.iter() {
        eprintln!("share {} -> {}", s.name, s.path.display());
        eprintln!("  smb://{host}:{}/{}", addr.port(), s.name);
        eprintln!("  smbclient //{host}/{}{port} -U '{user}%{pass}' -m SMB3", s.name);
    }
}
