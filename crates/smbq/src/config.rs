//! The TOML config file; `smbq serve` flags override it.
//!
//! ```toml
//! tcp = "0.0.0.0:445"
//! quic = "0.0.0.0:443"
//! metrics = "127.0.0.1:9445"   # Prometheus /metrics (off when absent)
//! no_tcp = false
//! no_quic = false
//! users = "/var/lib/smbq/users"
//! state_dir = "/var/lib/smbq"
//! server_name = "SMBQ"
//! signing_required = false
//! encrypt = "desired"          # required | desired | off
//! cert = "/etc/smbq/cert.pem"  # PEM chain; default: generated in STATE_DIR/tls
//! key = "/etc/smbq/key.pem"
//! san = ["files.example.org"]  # extra names for a generated certificate
//! acme_domain = ["files.example.org"]  # get and renew the certificate from an ACME CA
//! acme_directory = "https://acme-v02.api.letsencrypt.org/directory"
//! acme_email = "admin@example.org"
//! acme_ca_root = "/etc/smbq/acme-ca.pem"  # trust this root (only) for the ACME server's HTTPS
//! acme_tls_port = 443          # TLS-ALPN-01 on this TCP port (default); or:
//! acme_http_port = 80          # HTTP-01 on this TCP port
//! [[share]]
//! name = "data"
//! path = "/srv/data"
//! read_only = false
//! case_sensitive = false       # true: names match only in their exact case
//! posix = false                # true: offer the SMB3 POSIX extensions (modes, owners, symlinks)
//! encrypt = "required"
//! users = ["alice", "bob"]     # who may connect; absent = every user
//! read_only_users = ["bob"]    # may connect, may change nothing
//! [limits]                     # every key: smbq_server::Limits; bounds: Limits::check
//! credits = 8192
//! preauth_timeout_secs = 30
//! dead_peer_secs = 120         # a peer gone without a FIN is dropped by then
//! memory_budget = 1073741824   # unhandled request bytes of all connections
//! [quic_options]
//! transport_security = true    # trust QUIC's TLS: no SMB encryption inside QUIC (SMB2_TRANSPORT_CAPABILITIES; encrypt = desired)
//! idle_timeout_secs = 120
//! keep_alive_secs = 15         # 0 = off
//! stream_window = 67108864
//! connection_window = 134217728
//! udp_buffer = 8388608
//! congestion = "smbq"          # or quinn's "cubic", "bbr", "newreno"
//! endpoints = 2                # QUIC endpoints on the port (SO_REUSEPORT, steered by connection ID); default: cores, at most 8
//! max_udp_payload = 0          # MTU discovery's upper bound; 0: 65507 on loopback, else the largest interface MTU less IP and UDP headers (8972 on 9000-byte jumbo frames, 1472 at 1500), 1452 if unread
//! max_streams = 16             # streams per connection with smbq's multi-stream extension (docs/multistream.md); 1 = off
//! require_client_cert = false
//! client_fingerprints = ["AB:CD:..."]   # SHA-256 of allowed client certificates
//! client_ca = "/etc/smbq/clients-ca.pem"
//! [auth]
//! ntlm = true                  # false: Kerberos only (NTLM logons get STATUS_NTLM_BLOCKED)
//! [kerberos]                   # README "Kerberos"
//! keytab = "/etc/smbq/smbq.keytab"   # keys of cifs/NAME@REALM (--keytab); absent: no Kerberos
//! realm = "EXAMPLE.COM"        # alice@EXAMPLE.COM is smbq user alice
//! kdc_proxy = false            # serve https://NAME:QUIC-PORT/KdcProxy (MS-KKDCP)
//! kdc = ["dc1.example.com:88"] # where the proxy forwards
//! [kerberos.map]               # other principals, each to an smbq user
//! "bob@PARTNER.ORG" = "bob"
//! ```

use serde::Deserialize;
use smbq_server::{check_range, EncryptPolicy, Limits, ShareConfig};
use smbq_transport::quic::QuicOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub tcp: Option<SocketAddr>,
    pub quic: Option<SocketAddr>,
    /// `metrics = "ADDR:PORT"`: serve Prometheus metrics there (--metrics).
    pub metrics: Option<SocketAddr>,
    pub no_tcp: Option<bool>,
    pub no_quic: Option<bool>,
    pub users: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub server_name: Option<String>,
    pub signing_required: Option<bool>,
    pub encrypt: Option<EncryptPolicy>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    #[serde(default)]
    pub san: Vec<String>,
    /// ACME (see `smbq serve --help`): the names to get a certificate for.
    #[serde(default)]
    pub acme_domain: Vec<String>,
    pub acme_directory: Option<String>,
    pub acme_email: Option<String>,
    pub acme_ca_root: Option<PathBuf>,
    pub acme_http_port: Option<u16>,
    pub acme_tls_port: Option<u16>,
    #[serde(default)]
    pub share: Vec<ShareConfig>,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub quic_options: QuicSection,
    #[serde(default)]
    pub kerberos: smbq_server::config::KerberosConfig,
    #[serde(default)]
    pub auth: AuthSection,
}

/// `[auth]`: which logons the server takes.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSection {
    /// NTLMv2 (false: Kerberos only; NTLM logons get STATUS_NTLM_BLOCKED).
    pub ntlm: bool,
}

impl Default for AuthSection {
    fn default() -> Self {
        AuthSection { ntlm: true }
    }
}

/// `[quic_options]`: QUIC transport settings and client access control.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuicSection {
    pub transport_security: bool,
    pub idle_timeout_secs: u64,
    pub keep_alive_secs: u64,
    pub stream_window: u64,
    pub connection_window: u64,
    pub udp_buffer: usize,
    pub congestion: String,
    pub endpoints: usize,
    /// Upper bound of path MTU discovery, UDP payload bytes; 0: 65,507 when
    /// QUIC listens on loopback, else from the interfaces' MTUs
    /// (smbq_quic::listen_mtu_upper_bound).
    pub max_udp_payload: u16,
    /// Streams per connection under smbq's multi-stream extension; 1: off.
    pub max_streams: u16,
    pub require_client_cert: bool,
    pub client_fingerprints: Vec<String>,
    pub client_ca: Option<PathBuf>,
}

impl Default for QuicSection {
    fn default() -> Self {
        let d = QuicOptions::default();
        QuicSection {
            transport_security: true,
            idle_timeout_secs: d.idle_timeout.as_secs(),
            keep_alive_secs: d.keep_alive.map(|k| k.as_secs()).unwrap_or(0),
            stream_window: d.stream_window,
            connection_window: d.connection_window,
            udp_buffer: d.udp_buffer,
            congestion: "smbq".into(),
            endpoints: d.endpoints,
            max_udp_payload: 0,
            max_streams: d.max_streams,
            require_client_cert: false,
            client_fingerprints: Vec::new(),
            client_ca: None,
        }
    }
}

impl QuicSection {
    /// The transport's options; values outside what QUIC (RFC 9000 18.2:
    /// windows are varints) and this server can honour are refused, naming
    /// the key.
    pub fn options(&self) -> Result<QuicOptions, String> {
        let range = |key: &str, v: u64, lo: u64, hi: u64| check_range("quic_options", key, v, lo, hi);
        range("idle_timeout_secs", self.idle_timeout_secs, 1, 24 * 3600)?;
        range("keep_alive_secs", self.keep_alive_secs, 0, self.idle_timeout_secs.saturating_sub(1))?;
        range("stream_window", self.stream_window, 65536, 1 << 32)?;
        range("connection_window", self.connection_window, self.stream_window, 1 << 33)?;
        range("udp_buffer", self.udp_buffer as u64, 65536, 1 << 30)?;
        range("endpoints", self.endpoints as u64, 1, smbq_transport::quic::MAX_ENDPOINTS as u64)?;
        if self.max_udp_payload != 0 {
            range("max_udp_payload", self.max_udp_payload.into(), 1200, smbq_quic::MAX_DATAGRAM.into())?;
        }
        range("max_streams", self.max_streams.into(), 1, smbq_transport::quic::MAX_STREAMS.into())?;
        let congestion = self.congestion.parse().map_err(|e| format!("[quic_options] congestion: {e}"))?;
        Ok(QuicOptions {
            max_streams: self.max_streams,
            congestion,
            idle_timeout: Duration::from_secs(self.idle_timeout_secs),
            keep_alive: (self.keep_alive_secs > 0).then(|| Duration::from_secs(self.keep_alive_secs)),
            stream_window: self.stream_window,
            connection_window: self.connection_window,
            udp_buffer: self.udp_buffer,
            endpoints: self.endpoints,
            max_udp_payload: if self.max_udp_payload == 0 { QuicOptions::default().max_udp_payload } else { self.max_udp_payload },
            ..QuicOptions::default()
        })
    }
}

impl FileConfig {
    pub fn load(path: &Path) -> anyhow::Result<FileConfig> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }
}

/// `NAME=DIR[,ro][,case_sensitive][,posix][,encrypt=required|desired|off][,users=A+B][,read_only_users=C+D]`
pub fn parse_share(s: &str) -> Result<ShareConfig, String> {
    let (name, rest) = s
        .split_once('=')
        .ok_or("expected NAME=DIR[,ro][,case_sensitive][,posix][,encrypt=...][,users=A+B][,read_only_users=C]")?;
    let names = |v: &str| -> Result<Vec<String>, String> {
        let list: Vec<String> = v.split('+').map(str::to_string).collect();
        if list.iter().any(String::is_empty) {
            return Err(format!("empty user name in {v:?}"));
        }
        Ok(list)
    };
    let mut parts = rest.split(',');
    let path = parts.next().filter(|p| !p.is_empty()).ok_or("missing DIR")?;
    let mut share = ShareConfig::new(name, path);
    for opt in parts {
        match opt.split_once('=') {
            None if opt == "ro" => share.read_only = true,
            None if opt == "rw" => share.read_only = false,
            None if opt == "case_sensitive" => share.case_sensitive = true,
            None if opt == "posix" => share.posix = true,
            Some(("encrypt", v)) => share.encrypt = v.parse()?,
            Some(("users", v)) => share.users = Some(names(v)?),
            Some(("read_only_users", v)) => share.read_only_users = names(v)?,
            _ => return Err(format!("unknown share option {opt:?}")),
        }
    }
    if name.is_empty() {
        return Err("empty share name".into());
    }
    Ok(share)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_flags() {
        let s = parse_share("docs=/srv/d,ro,encrypt=required").unwrap();
        assert_eq!((s.name.as_str(), s.read_only, s.encrypt), ("docs", true, EncryptPolicy::Required));
        assert!(!s.case_sensitive, "names are case-insensitive unless asked");
        assert!(parse_share("docs=/srv/d,case_sensitive").unwrap().case_sensitive);
        assert!(!s.posix, "no POSIX extensions unless asked");
        assert!(parse_share("home=/srv/h,posix").unwrap().posix);
        assert!(parse_share("docs").is_err());
        assert!(parse_share("docs=/x,bogus").is_err());
        assert!(parse_share("docs=/x,encrypt=maybe").is_err());
        let s = parse_share("docs=/srv/d,users=alice+bob,read_only_users=bob").unwrap();
        assert_eq!(s.users, Some(vec!["alice".to_string(), "bob".to_string()]));
        assert_eq!(s.read_only_users, vec!["bob".to_string()]);
        assert!(parse_share("docs=/x,users=alice+").is_err());
    }

    /// A misspelled key anywhere is an error that names it, never a
    /// silently ignored setting (`readonly` would leave a share writable).
    #[test]
    fn unknown_keys_are_refused_by_name() {
        for (text, key) in [
            ("[[share]]\nname = \"a\"\npath = \"/tmp\"\nreadonly = true\n", "readonly"),
            ("[limits]\nmax_iosize = 1\n", "max_iosize"),
            ("[quic_options]\nidle_timeout = 5\n", "idle_timeout"),
            ("encryption = \"required\"\n", "encryption"),
        ] {
            let e = toml::from_str::<FileConfig>(text).expect_err(text).to_string();
            assert!(e.contains(key), "{e}");
        }
        let c: FileConfig = toml::from_str("[[share]]\nname = \"a\"\npath = \"/tmp\"\nusers = [\"alice\"]\nread_only_users = [\"bob\"]\ncase_sensitive = true\n").unwrap();
        assert!(c.share[0].case_sensitive);
        assert_eq!(c.share[0].users.as_deref(), Some(&["alice".to_string()][..]));
        assert_eq!(c.share[0].read_only_users, vec!["bob".to_string()]);
    }

    /// Numeric limits outside the protocol's bounds are refused at start.
    #[test]
    fn limits_out_of_bounds_are_refused() {
        assert!(Limits::default().check().is_ok());
        for text in [
            "[limits]\nmax_io = 16777216\n",
            "[limits]\nmax_io = 1024\n",
            "[limits]\ncredits = 0\n",
            "[limits]\npreauth_timeout_secs = 0\n",
            "[limits]\nidle_timeout_secs = 0\n",
            "[limits]\ndead_peer_secs = 0\n",
            "[limits]\nmemory_budget = 1024\n",
        ] {
            let c: FileConfig = toml::from_str(text).unwrap();
            let e = c.limits.check().expect_err(text);
            let key = text.split('\n').nth(1).unwrap().split(' ').next().unwrap();
            assert!(e.contains(key), "{e}");
        }
        assert!(toml::from_str::<FileConfig>("[limits]\ncredits = 70000\n").is_err(), "credits is 16 bits");
    }

    #[test]
    fn toml_config() {
        let c: FileConfig = toml::from_str(
            "tcp = \"127.0.0.1:4445\"\nquic = \"127.0.0.1:8443\"\nencrypt = \"required\"\n[[share]]\nname = \"a\"\npath = \"/tmp\"\n\
             [limits]\ncredits = 64\npreauth_timeout_secs = 2\n[quic_options]\nkeep_alive_secs = 0\nrequire_client_cert = true\n",
        )
        .unwrap();
        assert_eq!(c.share.len(), 1);
        assert_eq!(c.limits.credits, 64);
        assert_eq!(c.limits.preauth_timeout_secs, 2);
        assert_eq!(c.limits.max_io, Limits::default().max_io);
        assert_eq!(c.quic.unwrap().port(), 8443);
        assert_eq!(c.metrics, None, "no metrics unless asked");
        let m: FileConfig = toml::from_str("metrics = \"127.0.0.1:9445\"\n").expect("metrics parses");
        assert_eq!(m.metrics, Some(([127, 0, 0, 1], 9445).into()));
        assert!(c.quic_options.require_client_cert);
        assert!(c.quic_options.transport_security, "defaults fill the rest of the table");
        assert_eq!(c.quic_options.options().unwrap().keep_alive, None);
        assert_eq!(c.quic_options.options().map(|o| o.congestion), Ok(smbq_transport::quic::Congestion::Smbq));
        let bbr: FileConfig = toml::from_str("[quic_options]\ncongestion = \"bbr\"\n").expect("bbr parses");
        assert_eq!(bbr.quic_options.options().map(|o| o.congestion), Ok(smbq_transport::quic::Congestion::Bbr));
        let udp: FileConfig = toml::from_str("[quic_options]\nmax_udp_payload = 8972\n").expect("parses");
        assert_eq!(udp.quic_options.options().map(|o| o.max_udp_payload), Ok(8972));
        for bad in ["idle_timeout_secs = 0", "keep_alive_secs = 500", "stream_window = 10", "udp_buffer = 1", "congestion = \"reno\"", "endpoints = 0", "endpoints = 257", "max_streams = 0", "max_streams = 257", "max_udp_payload = 1000", "max_udp_payload = 65508"] {
            let c: FileConfig = toml::from_str(&format!("[quic_options]\n{bad}\n")).unwrap();
            let e = c.quic_options.options().expect_err(bad);
            assert!(e.contains(bad.split(' ').next().unwrap()), "{e}");
        }
        assert!(toml::from_str::<FileConfig>("bogus = 1").is_err());
        assert!(toml::from_str::<FileConfig>("[quic_options]\nbogus = 1").is_err());
    }
}
