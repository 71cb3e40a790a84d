//! `smbq` as a client: the options every client command shares, where
//! credentials come from, exit codes, and the connection.

pub mod commands;
pub mod mount;
pub mod posix_locks;
pub mod transfer;

use anyhow::Context;
use clap::{Args, ValueEnum};
use smbq_client::connect::{ConnectOptions, Transport, Trust};
use smbq_client::share::Share;
use smbq_client::url::SmbUrl;
use smbq_client::ClientError;
use smbq_crypto::Cipher;
use smbq_wire::NtStatus;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum TransportArg {
    Quic,
    Tcp,
    /// QUIC first (a short wait), then TCP.
    Auto,
}

/// An SMB encryption cipher (MS-SMB2 2.2.3.1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CipherArg {
    #[value(name = "aes-128-gcm")]
    Aes128Gcm,
    #[value(name = "aes-128-ccm")]
    Aes128Ccm,
    #[value(name = "aes-256-gcm")]
    Aes256Gcm,
    #[value(name = "aes-256-ccm")]
    Aes256Ccm,
}

impl CipherArg {
    fn cipher(self) -> Cipher {
        match self {
            CipherArg::Aes128Gcm => Cipher::Aes128Gcm,
            CipherArg::Aes128Ccm => Cipher::Aes128Ccm,
            CipherArg::Aes256Gcm => Cipher::Aes256Gcm,
            CipherArg::Aes256Ccm => Cipher::Aes256Ccm,
        }
    }
}

/// How to reach the server and log on (every client command takes these).
#[derive(Args, Clone, Debug)]
pub struct ConnectArgs {
    /// quic | tcp | auto (QUIC on 443 first, then TCP on 445; a port in the URL is used for both).
    #[arg(long, value_enum, default_value = "auto")]
    pub transport: TransportArg,
    /// Trust the server certificate if it chains to a CA in this PEM file (instead of the system's roots).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Trust exactly the certificate with this SHA-256 fingerprint (hex, colons allowed), as `smbq serve` prints it.
    #[arg(long, value_name = "SHA256")]
    pub fingerprint: Option<String>,
    /// Accept any server certificate (dangerous: anyone on the path can read and change the traffic).
    #[arg(long)]
    pub insecure: bool,
    /// A file with `username = NAME`, `password = SECRET` and optionally `domain = D` lines (mode 0600).
    #[arg(long, short = 'A', value_name = "FILE")]
    pub credentials: Option<PathBuf>,
    /// Log on with Kerberos from the credential cache (KRB5CCNAME, else MIT's default; kinit first): no password is asked for, the user is the ticket's principal, and the server's service principal is cifs/HOST with the URL's host.
    #[arg(long, conflicts_with = "credentials")]
    pub kerberos: bool,
    /// With --kerberos: the server's name for Kerberos (service principal cifs/NAME) when the URL gives an address or another name.
    #[arg(long, value_name = "NAME", requires = "kerberos")]
    pub kerberos_host: Option<String>,
    /// SMB encryption ciphers to offer (SMB 3.1.1), comma-separated, preferred first; the server picks one. AES-256 keys come from the whole session key (32 bytes from a Kerberos logon).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST", default_value = "aes-128-gcm,aes-128-ccm")]
    pub cipher: Vec<CipherArg>,
    /// Seal every message with SMB encryption even where the share does not require it (TCP; QUIC is already encrypted).
    #[arg(long)]
    pub encrypt: bool,
    /// Seconds to wait for the connection and logon.
    #[arg(long, default_value_t = 20)]
    pub timeout: u64,
    /// Seconds without an answer, with requests outstanding, after which the connection counts as lost (get and put then reconnect).
    #[arg(long, default_value_t = 60)]
    pub response_timeout: u64,
    /// Use the SMB3 POSIX extensions (SMB 3.1.1; smbq with a `posix` share, Samba with `smb3 unix extensions`): modes, owners, symlinks, names in their exact case. An error if the server does not offer them for the share.
    #[arg(long)]
    pub posix: bool,
    /// QUIC streams to use where the server agrees to smbq's multi-stream extension (docs/multistream.md): one per open file, large reads and writes striped over them. 1: one stream, as Windows and Samba.
    #[arg(long, default_value_t = smbq_client::connect::DEFAULT_QUIC_STREAMS, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub quic_streams: u16,
    /// Write a qlog trace of each QUIC connection into DIR (client-MILLIS-PEER-PID-N.sqlog, JSON-SEQ: packets, congestion window, RTTs, the connection's end with its figures; see smbq serve --help). Default: SMBQ_QLOG_DIR.
    #[arg(long, value_name = "DIR")]
    pub qlog_dir: Option<PathBuf>,
}

/// Exit codes a script can act on.
pub mod exit {
    pub const FAILURE: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const NOT_FOUND: u8 = 3;
    pub const ACCESS_DENIED: u8 = 4;
    pub const EXISTS: u8 = 5;
    pub const UNREACHABLE: u8 = 6;
    pub const CERTIFICATE: u8 = 7;
    pub const LOGON: u8 = 8;
}

/// The exit code for an error (a `ClientError` anywhere in its chain).
pub fn exit_code(e: &anyhow::Error) -> u8 {
    let Some(ce) = e.chain().find_map(|c| c.downcast_ref::<ClientError>()) else {
        return if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)) { exit::NOT_FOUND } else { exit::FAILURE };
    };
    match ce {
        ClientError::Usage(_) => exit::USAGE,
        ClientError::Certificate(_) => exit::CERTIFICATE,
        ClientError::Unreachable(_) | ClientError::Quic(_) | ClientError::Io(_) => exit::UNREACHABLE,
        ClientError::Status(cmd, _) if *cmd == smbq_wire::Command::SESSION_SETUP => exit::LOGON,
        ClientError::Credentials(_) => exit::LOGON,
        ClientError::Status(_, st) => match *st {
            NtStatus::OBJECT_NAME_NOT_FOUND | NtStatus::OBJECT_PATH_NOT_FOUND | NtStatus::NO_SUCH_FILE | NtStatus::BAD_NETWORK_NAME => exit::NOT_FOUND,
            NtStatus::ACCESS_DENIED => exit::ACCESS_DENIED,
            NtStatus::OBJECT_NAME_COLLISION => exit::EXISTS,
            _ => exit::FAILURE,
        },
        ClientError::Protocol(_) | ClientError::Unsupported(_) => exit::FAILURE,
    }
}

impl ConnectArgs {
    /// The options for `url`: trust, transport and credentials (URL user,
    /// then `SMBQ_USER`, then the credentials file; password from
    /// `SMBQ_PASSWORD`, the credentials file, or a prompt on the terminal;
    /// with `--kerberos` none of these: the credential cache).
    pub fn options(&self, url: &SmbUrl) -> anyhow::Result<ConnectOptions> {
        let trust = match (&self.fingerprint, &self.ca_file, self.insecure) {
            (Some(fp), None, false) => Trust::Fingerprint(smbq_crypto::tls::parse_fingerprint(fp).ok_or_else(|| ClientError::Usage(format!("--fingerprint {fp:?} is not a SHA-256 in hex")))?),
            (None, Some(f), false) => Trust::CaFile(f.clone()),
            (None, None, true) => {
                eprintln!("warning: --insecure: the server's certificate is not checked; anyone on the path can read and change this connection");
                Trust::Insecure
            }
            (None, None, false) => Trust::System,
            _ => return Err(ClientError::Usage("give at most one of --fingerprint, --ca-file and --insecure".into()).into()),
        };
        let ((user, password, domain), kerberos) = if self.kerberos {
            let name = self.kerberos_host.clone().unwrap_or_else(|| url.host.clone());
            if name.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok() {
                return Err(ClientError::Usage(format!("--kerberos needs the server's name, not the address {name}: give --kerberos-host NAME")).into());
            }
            (Default::default(), Some(name))
        } else {
            (self.password_logon(url)?, None)
        };
        let mut ciphers: Vec<Cipher> = Vec::new();
        for c in self.cipher.iter().map(|c| c.cipher()) {
            if !ciphers.contains(&c) {
                ciphers.push(c);
            }
        }
        if ciphers.is_empty() {
            return Err(ClientError::Usage("--cipher needs at least one cipher".into()).into());
        }
        Ok(ConnectOptions {
            transport: match self.transport {
                TransportArg::Quic => Transport::Quic,
                TransportArg::Tcp => Transport::Tcp,
                TransportArg::Auto => Transport::Auto,
            },
            trust,
            user,
            password,
            domain,
            kerberos,
            ciphers,
            timeout: Duration::from_secs(self.timeout.max(1)),
            response_timeout: Duration::from_secs(self.response_timeout.max(1)),
            encrypt: self.encrypt,
            posix: self.posix,
            quic_streams: self.quic_streams,
            qlog_dir: self.qlog_dir.clone().or_else(smbq_quictrace::qlog::dir_from_env),
            ..ConnectOptions::default()
        })
    }

    /// (user, password, domain) for an NTLM logon.
    fn password_logon(&self, url: &SmbUrl) -> anyhow::Result<(String, String, String)> {
        let file = match &self.credentials {
            Some(p) => Some(read_credentials(p)?),
            None => None,
        };
        let from_file = |key: &str| file.as_ref().and_then(|f: &Vec<(String, String)>| f.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()));
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let user = url.user.clone().or_else(|| env("SMBQ_USER")).or_else(|| from_file("username")).ok_or_else(|| ClientError::Usage("no user: put it in the URL (smb://USER@host/share), SMBQ_USER or a credentials file".into()))?;
        let (domain, user) = match user.split_once(['\\', ';']) {
            Some((d, u)) => (d.to_string(), u.to_string()),
            None => (from_file("domain").unwrap_or_default(), user),
        };
        let password = match env("SMBQ_PASSWORD").or_else(|| from_file("password")) {
            Some(p) => p,
            None => rpassword::prompt_password(format!("password for {user}@{}: ", url.host)).context("reading the password (set SMBQ_PASSWORD or use --credentials when there is no terminal, or --kerberos)")?,
        };
        Ok((user, password, domain))
    }

    /// A usage error unless `--posix` was given: `command` needs the SMB3 POSIX extensions.
    pub fn require_posix(&self, command: &str) -> Result<(), ClientError> {
        if self.posix {
            return Ok(());
        }
        Err(ClientError::Usage(format!("{command} needs the SMB3 POSIX extensions: give --posix")))
    }

    /// Connect to `url`'s share (with `--posix`, one the server offers the
    /// POSIX extensions for); say on stderr which transport was used
    /// when `auto` chose (and `verbose`).
    pub async fn share(&self, url: &SmbUrl, o: &ConnectOptions) -> anyhow::Result<Share> {
        let s = Share::connect(url, o).await.with_context(|| format!("connecting to {url}"))?;
        if self.posix {
            s.need_posix()?;
        }
        tracing::info!(transport = s.transport().name(), addr = %s.session.addr, streams = s.session.client.streams(), "connected");
        if matches!(self.transport, TransportArg::Auto) {
            eprintln!("connected over {} to {}", s.transport().name(), s.session.addr);
        }
        Ok(s)
    }
}

/// `key = value` lines (smbclient's authentication file format); the file must not be readable by others.
fn read_credentials(p: &std::path::Path) -> anyhow::Result<Vec<(String, String)>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(p).with_context(|| format!("credentials file {}", p.display()))?;
    if meta.mode() & 0o077 != 0 {
        anyhow::bail!(ClientError::Usage(format!("credentials file {} is readable by others (mode {:o}); chmod 600 it", p.display(), meta.mode() & 0o777)));
    }
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    Ok(text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect())
}

/// Parse a URL argument; the error is a usage error.
pub fn url(s: &str) -> anyhow::Result<SmbUrl> {
    Ok(SmbUrl::parse(s)?)
}

/// The runtime client commands run on.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

#[derive(Args)]
pub struct MountArgs {
    /// smb://[user@]host[:port]/share
    pub url: String,
    /// An empty directory to mount on.
    pub dir: PathBuf,
    /// How long attributes and directory listings are cached, in seconds.
    #[arg(long, default_value_t = 1.0)]
    pub attr_timeout: f64,
    /// Let other users see the mount (needs user_allow_other in /etc/fuse.conf unless root).
    #[arg(long)]
    pub allow_other: bool,
    /// Permission bits (octal) files show on a share without the POSIX
    /// extensions, as cifs.ko's file_mode; read-only files without write bits.
    #[arg(long, value_name = "OCTAL", default_value = "0755", value_parser = octal_mode)]
    pub file_mode: u32,
    /// Permission bits (octal) directories show, as cifs.ko's dir_mode.
    #[arg(long, value_name = "OCTAL", default_value = "0755", value_parser = octal_mode)]
    pub dir_mode: u32,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

/// An octal mode such as `0755` or `644`, at most 0o7777.
fn octal_mode(s: &str) -> Result<u32, String> {
    match u32::from_str_radix(s, 8) {
        Ok(m) if m <= 0o7777 => Ok(m),
        _ => Err(format!("{s:?} is not an octal mode (0000 to 7777)")),
    }
}

/// `smbq mount`: connect, then serve the mount in the foreground until it is unmounted.
pub fn mount_main(a: MountArgs) -> anyhow::Result<()> {
    let u = url(&a.url)?;
    let o = a.conn.options(&u)?;
    let rt = runtime()?;
    let share = rt.block_on(a.conn.share(&u, &o))?;
    let opts = mount::MountOptions {
        attr_ttl: Duration::from_secs_f64(a.attr_timeout.clamp(0.0, 3600.0)),
        allow_other: a.allow_other,
        foreground_ready: None,
        file_mode: a.file_mode,
        dir_mode: a.dir_mode,
    };
    mount::run(share, rt, &a.dir, opts)
}
