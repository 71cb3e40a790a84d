//! `smbq serve`: wire config, users, shares and listeners together.

use crate::config::{parse_share, FileConfig};
use crate::user::{load_or_new, save};
use anyhow::{bail, Context};
use clap::Args;
use rand::distributions::Alphanumeric;
use rand::Rng;
use smbq_server::{EncryptPolicy, Server, ServerConfig, ShareConfig};
use smbq_transport::{quic, tls};
use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;
use tracing::{info, warn};

#[derive(Args)]
pub struct ServeArgs {
    /// Directory to serve as share `share` when no --share is given
    /// (default ./share, created if absent).
    dir: Option<PathBuf>,
    /// TOML config file (shares, listen addresses, limits, encryption, QUIC).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Share NAME=DIR[,ro][,case_sensitive][,posix][,encrypt=required|desired|off][,users=A+B][,read_only_users=C]; repeatable.
    /// users: who may connect (default every user); read_only_users: may connect, change nothing;
    /// case_sensitive: names match only in their exact case (default: ignoring case, as on Windows);
    /// posix: offer the SMB3 POSIX extensions to Linux clients (modes, owners, symlinks, exact-case names).
    #[arg(long = "share", value_name = "NAME=DIR[,ro][,case_sensitive][,posix][,encrypt=..][,users=A+B][,read_only_users=C]", value_parser = parse_share)]
    shares: Vec<ShareConfig>,
    /// TCP listen address (default 0.0.0.0:445, or 0.0.0.0:4445 when 445 cannot be bound).
    #[arg(long, value_name = "ADDR:PORT")]
    tcp: Option<SocketAddr>,
    /// QUIC (UDP) listen address (default 0.0.0.0:443, or 0.0.0.0:8443 when 443 cannot be bound).
    #[arg(long, value_name = "ADDR:PORT")]
    quic: Option<SocketAddr>,
    /// Do not serve TCP.
    #[arg(long)]
    no_tcp: bool,
    /// Do not serve QUIC.
    #[arg(long)]
    no_quic: bool,
    /// Server certificate chain (PEM) for QUIC; default: generated once in STATE_DIR/tls.
    #[arg(long, value_name = "FILE", requires = "key")]
    cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    /// Extra name or address for a generated certificate; repeatable.
    #[arg(long, value_name = "NAME")]
    san: Vec<String>,
    /// Require QUIC clients to present a certificate allowed by
    /// --client-cert-fingerprint or --client-ca.
    #[arg(long)]
    require_client_cert: bool,
    /// SHA-256 fingerprint of an allowed client certificate; repeatable.
    #[arg(long, value_name = "HEX")]
    client_cert_fingerprint: Vec<String>,
    /// PEM file of CAs whose client certificates are allowed.
    #[arg(long, value_name = "FILE")]
    client_ca: Option<PathBuf>,
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
    /// Accept Kerberos logons with the keys in this keytab (`cifs/NAME@REALM`
    /// for each name clients use); overrides `[kerberos] keytab`.
    #[arg(long, value_name = "FILE")]
    keytab: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics (off by default):
    /// smbq_connections{transport}, smbq_connections_accepted_total{transport},
    /// smbq_sessions, smbq_opens, smbq_requests_total{command},
    /// smbq_request_duration_seconds{command}, smbq_errors_total{status},
    /// smbq_read_bytes_total, smbq_written_bytes_total,
    /// smbq_received_bytes_total{transport}, smbq_sent_bytes_total{transport},
    /// smbq_quic_rtt_seconds (smoothed), smbq_quic_min_rtt_seconds, smbq_quic_cwnd_bytes,
    /// smbq_quic_pacing_rate_bits_per_second, smbq_quic_sent_packets_total,
    /// smbq_quic_lost_packets_total, smbq_quic_lost_bytes_total, smbq_quic_congestion_events_total,
    /// smbq_quic_migrations_total, smbq_certificate_expiry_timestamp_seconds.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<SocketAddr>,
    /// Write a qlog trace of each QUIC connection into DIR (made if missing), one JSON-SEQ file
    /// per connection (server-MILLIS-PEER-PID-N.sqlog, for qvis): every packet sent, received
    /// and lost, the congestion window, pacing rate, bytes in flight and RTTs as they change,
    /// and the connection's start and end with its final figures; at most 64 MiB of packet
    /// events per file. For diagnosis: it costs a JSON record per packet.
    /// The environment variable SMBQ_QLOG_DIR=DIR does the same (for the client too).
    #[arg(long, value_name = "DIR")]
    qlog_dir: Option<PathBuf>,
    #[command(flatten)]
    acme: Box<crate::acme::AcmeArgs>,
}

/// `[kerberos]` with `--keytab` over it, its keytab checked now: a keytab
/// MIT cannot read is an error at start, not a refusal at each logon.
fn kerberos_config(args: &ServeArgs, file: &FileConfig) -> anyhow::Result<smbq_server::config::KerberosConfig> {
    let mut k = file.kerberos.clone();
    if let Some(path) = &args.keytab {
        k.keytab = Some(path.clone());
    }
    if let Some(path) = &k.keytab {
        smbq_auth::check_keytab(path).map_err(|e| anyhow::anyhow!("keytab {}: {e}", path.display()))?;
        if k.realm.is_none() && k.map.is_empty() {
            bail!("a keytab needs [kerberos] realm (or [kerberos.map]): which principals are smbq users");
        }
        eprintln!("kerberos logons with keytab {}{}", path.display(), k.realm.as_ref().map(|r| format!(", users of realm {r}")).unwrap_or_default());
    } else if !file.auth.ntlm {
        bail!("[auth] ntlm = false needs a keytab for Kerberos: no logon could succeed");
    }
    Ok(k)
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    raise_fd_limit();
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

    let shares = crate::reload::shares(&args.shares, args.dir.as_deref(), &file)?;
    let serve_tcp = !(args.no_tcp || file.no_tcp.unwrap_or(false));
    let serve_quic = !(args.no_quic || file.no_quic.unwrap_or(false));
    if !serve_tcp && !serve_quic {
        bail!("--no-tcp and --no-quic leave nothing to serve");
    }
    let qs = &file.quic_options;
    let mut quic_opts = qs.options().map_err(anyhow::Error::msg)?;
    if qs.max_udp_payload == 0 {
        // From the interfaces: the default listens on all addresses, and
        // the bound is then the largest non-loopback MTU less the headers
        // (smbq_quic::listen_mtu_upper_bound says why not per peer).
        let ip = args.quic.or(file.quic).map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |a| a.ip());
        quic_opts.max_udp_payload = smbq_quic::listen_mtu_upper_bound(ip);
    }
    quic_opts.qlog = args.qlog_dir.clone().or_else(smbq_quictrace::qlog::dir_from_env).map(quic::Qlog::new);
    if let Some(q) = &quic_opts.qlog {
        eprintln!("qlog traces of QUIC connections in {}", q.dir.display());
    }
    let metrics = args.metrics.or(file.metrics);
    if let Some(addr) = metrics {
        crate::metrics::install(addr)?;
        eprintln!("metrics on http://{addr}/metrics");
    }
    let config = ServerConfig {
        shares,
        limits: file.limits.clone(),
        server_name: file.server_name.clone().unwrap_or_else(|| "SMBQ".into()),
        signing_required: args.signing_required || file.signing_required.unwrap_or(false),
        encrypt: args.encrypt.or(file.encrypt).unwrap_or_default(),
        allow_transport_security: qs.transport_security,
        // Where multichannel clients may open further channels: the TCP
        // listener's addresses (the default listens on all of them).
        interfaces: smbq_transport::interfaces::reachable(
            args.tcp.or(file.tcp).map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |a| a.ip()),
        ),
        metrics: metrics.is_some(),
        ntlm: file.auth.ntlm,
        kerberos: kerberos_config(&args, &file)?,
        ..ServerConfig::default()
    };
    let server = Arc::new(Server::new(config, users).map_err(anyhow::Error::msg)?);

    let mut kdc_proxy = kdc_proxy_config(&server, serve_quic)?;
    let mut kdc_certs = None;
    let mut cert_source = None;
    let mut acme_task = None;
    let tls_config = if serve_quic {
        let cert = args.cert.clone().or(file.cert.clone());
        let key = args.key.clone().or(file.key.clone());
        let given = match (&cert, &key) {
            (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
            (None, None) => None,
            _ => bail!("give both a certificate and its key"),
        };
        let sans: Vec<String> = file.san.iter().chain(&args.san).cloned().collect();
        let (mut id, fresh) = tls::load_or_generate(&state_dir, given, &sans)?;
        // ACME: a stored certificate still good is used at once; otherwise
        // this one serves until the first order completes.
        let (mut acme, mut acme_stored) = (None, None);
        if let Some(cfg) = args.acme.config(&file, &state_dir)? {
            let stored = crate::acme::usable_at_start(&crate::acme::Paths::new(&state_dir), &cfg.directory, &cfg.domains, std::time::SystemTime::now());
            if let Some((stored_id, v)) = stored {
                eprintln!("using ACME certificate {} valid until {}", stored_id.cert_path.display(), crate::acme::rfc3339(v.not_after));
                id = stored_id;
                acme_stored = Some(v);
            }
            acme = Some((cfg, acme_stored));
        }
        let source = match given {
            Some((c, k)) => crate::reload::CertSource::Files { cert: c.to_path_buf(), key: k.to_path_buf() },
            None => crate::reload::CertSource::Generated { state_dir: state_dir.clone(), sans },
        };
        eprintln!(
            "{} certificate {} SHA-256 {}",
            if fresh && acme.as_ref().is_none_or(|a| a.1.is_none()) { "generated" } else { "using" },
            id.cert_path.display(),
            id.fingerprint()
        );
        crate::metrics::certificate_in_use(&id.chain);
        let mut fingerprints = Vec::new();
        for f in qs.client_fingerprints.iter().chain(&args.client_cert_fingerprint) {
            fingerprints.push(tls::parse_fingerprint(f).with_context(|| format!("bad client certificate fingerprint {f:?}"))?);
        }
        let access = tls::ClientAccess {
            require_cert: args.require_client_cert || qs.require_client_cert,
            fingerprints,
            ca: args.client_ca.clone().or(qs.client_ca.clone()),
        };
        if access.require_cert && access.fingerprints.is_empty() && access.ca.is_none() {
            bail!("--require-client-cert needs --client-cert-fingerprint or --client-ca");
        }
        let certs = tls::Certificates::new(&id)?;
        if kdc_proxy.is_some() {
            kdc_certs = Some(Arc::clone(&certs));
        }
        match acme {
            Some((cfg, current)) => acme_task = Some((cfg, certs.clone(), current)),
            // Without ACME a reload reads the certificate files again.
            None => cert_source = Some((Arc::clone(&certs), source)),
        }
        Some(tls::server_config(certs, &access)?)
    } else {
        None
    };
    let mut reloader = crate::reload::Reloader {
        server: Arc::clone(&server),
        config: args.config.clone(),
        started: file.clone(),
        cli_shares: args.shares.clone(),
        dir: args.dir.clone(),
        users: users_path.clone(),
        state_dir: state_dir.clone(),
        certs: cert_source,
        generation: 0,
    };
    if !serve_quic && args.acme.config(&file, &state_dir)?.is_some() {
        warn!("ACME certificates are for QUIC, which is off: not ordering any");
    }

    // Busy connections work on blocking threads, as many as
    // smbq-transport says they need; an idle pool thread goes after 2 s,
    // so the threads follow the load.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(smbq_transport::max_blocking_threads(server.config.limits.max_connections))
        .thread_keep_alive(std::time::Duration::from_secs(2))
        .build()?;
    rt.block_on(async move {
        // Signals are ours before anyone learns the pid or a port.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        crate::reload::started(&state_dir)?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let mut addrs = Vec::new();
        if serve_tcp {
            let listener = bind_tcp(args.tcp.or(file.tcp)).await?;
            let addr = listener.local_addr()?;
            eprintln!("listening on tcp {addr}");
            addrs.push(("tcp", addr));
            tasks.push(tokio::spawn(smbq_transport::tcp::serve(listener, server.clone(), stopped(stop_rx.clone()))));
        }
        if let Some(tls) = tls_config {
            let endpoints = bind_quic(args.quic.or(file.quic), tls, &quic_opts)?;
            let addr = endpoints[0].local_addr()?;
            eprintln!("listening on quic {addr} ({} endpoints)", endpoints.len());
            addrs.push(("quic", addr));
            for endpoint in endpoints {
                tasks.push(tokio::spawn(quic::serve(endpoint, server.clone(), quic_opts.clone(), stopped(stop_rx.clone()))));
            }
            // The KDC proxy: TCP at the QUIC address and port, the QUIC certificate.
            if let (Some(config), Some(certs)) = (kdc_proxy.take(), kdc_certs.take()) {
                let domains = args.acme.config(&file, &state_dir)?.map(|c| c.domains).unwrap_or_default();
                let name = crate::kdcproxy::url_name(&domains, &certs);
                let (realm, kdcs) = (config.realm.clone(), config.kdcs.join(", "));
                let proxy = crate::kdcproxy::KdcProxy::bind(addr, certs, config).await?;
                let port = proxy.local_addr()?.port();
                eprintln!("kdc proxy on https://{name}:{port}{} (realm {realm}, forwarding to {kdcs})", crate::kdcproxy::PATH);
                tasks.push(tokio::spawn(proxy.serve(stopped(stop_rx.clone()))));
            }
        }
        print_hints(&server, &addrs, &users_path, first_user.as_ref());
        if let Some((cfg, certs, current)) = acme_task {
            tokio::spawn(crate::acme::run(cfg, certs, current));
        }
        // Ready only once SIGTERM is ours: systemd may stop us right after.
        let listening: Vec<String> = addrs.iter().map(|(kind, addr)| format!("{kind} {addr}")).collect();
        let status = format!("listening on {}", listening.join(", "));
        crate::notify::ready(&status);
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = term.recv() => break,
                // Reading files and opening share roots: off the runtime's workers.
                _ = hup.recv() => {
                    crate::notify::reloading();
                    reloader = tokio::task::spawn_blocking(move || {
                        reloader.run_once();
                        reloader
                    })
                    .await?;
                    crate::notify::ready(&status);
                }
            }
        }
        crate::notify::stopping();
        crate::reload::stopped(&state_dir);
        info!("shutting down: closing listeners");
        let _ = stop_tx.send(true);
        for t in tasks {
            let _ = t.await;
        }
        anyhow::Ok(())
    })?;
    // The listeners are closed. Connections still open end with the
    // process: tearing the runtime down under their engine threads (which
    // wait on its timers) would only trade a clean exit for a panic.
    info!("listeners closed; exiting");
    std::process::exit(0);
}

/// Every open file is an fd: take the hard limit of RLIMIT_NOFILE, so the
/// per-connection open limit (16384 by default) is what clients meet.
fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                warn!("could not raise the open-file limit");
            }
        }
    }
}

/// `[kerberos] kdc_proxy`: what the proxy forwards; it needs QUIC (its
/// port and certificate).
fn kdc_proxy_config(server: &Server, serve_quic: bool) -> anyhow::Result<Option<crate::kdcproxy::KdcProxyConfig>> {
    let k = &server.config.kerberos;
    if !k.kdc_proxy {
        return Ok(None);
    }
    if !serve_quic {
        bail!("[kerberos] kdc_proxy is served at the QUIC port with the QUIC certificate: QUIC is off");
    }
    let config = crate::kdcproxy::KdcProxyConfig { realm: k.realm.clone().unwrap_or_default(), kdcs: k.kdc.clone() };
    config.check()?;
    Ok(Some(config))
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
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

fn bind_quic(addr: Option<SocketAddr>, tls: rustls::ServerConfig, opts: &quic::QuicOptions) -> anyhow::Result<Vec<quinn::Endpoint>> {
    if let Some(a) = addr {
        return quic::endpoints(a, tls, opts).with_context(|| format!("binding quic (udp) {a}"));
    }
    let default: SocketAddr = ([0, 0, 0, 0], 443).into();
    match quic::endpoints(default, tls.clone(), opts) {
        Ok(e) => Ok(e),
        Err(e) => {
            warn!("cannot bind udp port 443 ({e}); using 8443");
            quic::endpoints(([0, 0, 0, 0], 8443).into(), tls, opts).context("binding quic (udp) 0.0.0.0:8443")
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

fn print_hints(server: &Server, addrs: &[(&str, SocketAddr)], users: &Path, first: Option<&(String, String)>) {
    let (user, pass) = match first {
        Some((u, p)) => {
            eprintln!("created user {u} with password {p} (stored as an NT hash in {})", users.display());
            (u.clone(), p.clone())
        }
        None => {
            let names = server.users.read().map(|u| u.names()).unwrap_or_default();
            eprintln!("users from {}: {}", users.display(), names.join(", "));
            (names.first().cloned().unwrap_or_else(|| "USER".into()), "PASSWORD".into())
        }
    };
    for s in server.config.shares.iter() {
        eprintln!("share {} -> {}", s.name, s.path.display());
        for (kind, addr) in addrs {
            let host = if addr.ip().is_unspecified() { "127.0.0.1".to_string() } else { addr.ip().to_string() };
            match *kind {
                "tcp" => {
                    let port = if addr.port() == 445 { String::new() } else { format!(" -p {}", addr.port()) };
                    eprintln!("  smb://{host}:{}/{}", addr.port(), s.name);
                    eprintln!("  smbclient //{host}/{}{port} -U '{user}%{pass}' -m SMB3", s.name);
                }
                _ => eprintln!("  SMB over QUIC: \\\\{host}\\{} on udp port {} (Windows: New-SmbMapping -TransportType QUIC)", s.name, addr.port()),
            }
        }
    }
}
