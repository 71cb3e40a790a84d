//! The TOML config file; `smbq serve` flags override it.
//!
//! ```toml
//! tcp = "0.0.0.0:445"
//! quic = "0.0.0.0:443"
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
//! [[share]]
//! name = "data"
//! path = "/srv/data"
//! read_only = false
//! encrypt = "required"
//! [limits]
//! credits = 512
//! preauth_timeout_secs = 30
//! [quic_options]
//! transport_security = true    # accept SMB2_TRANSPORT_CAPABILITIES: no SMB encryption inside QUIC
//! idle_timeout_secs = 120
//! keep_alive_secs = 15         # 0 = off
//! stream_window = 67108864
//! connection_window = 134217728
//! udp_buffer = 8388608
//! require_client_cert = false
//! client_fingerprints = ["AB:CD:..."]   # SHA-256 of allowed client certificates
//! client_ca = "/etc/smbq/clients-ca.pem"
//! ```

use serde::Deserialize;
use smbq_server::{EncryptPolicy, Limits, ShareConfig};
use smbq_transport::quic::QuicOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub tcp: Option<SocketAddr>,
    pub quic: Option<SocketAddr>,
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
    #[serde(default)]
    pub share: Vec<ShareConfig>,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub quic_options: QuicSection,
}

/// `[quic_options]`: QUIC transport settings and client access control.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuicSection {
    pub transport_security: bool,
    pub idle_timeout_secs: u64,
    pub keep_alive_secs: u64,
    pub stream_window: u64,
    pub connection_window: u64,
    pub udp_buffer: usize,
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
            require_client_cert: false,
            client_fingerprints: Vec::new(),
            client_ca: None,
        }
    }
}

impl QuicSection {
    pub fn options(&self) -> QuicOptions {
        QuicOptions {
            idle_timeout: Duration::from_secs(self.idle_timeout_secs.max(1)),
            keep_alive: (self.keep_alive_secs > 0).then(|| Duration::from_secs(self.keep_alive_secs)),
            stream_window: self.stream_window,
            connection_window: self.connection_window,
            udp_buffer: self.udp_buffer,
            ..QuicOptions::default()
        }
    }
}

impl FileConfig {
    pub fn load(path: &Path) -> anyhow::Result<FileConfig> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }
}

/// `NAME=DIR[,ro][,encrypt=required|desired|off]`
pub fn parse_share(s: &str) -> Result<ShareConfig, String> {
    let (name, rest) = s.split_once('=').ok_or("expected NAME=DIR[,ro][,encrypt=...]")?;
    let mut parts = rest.split(',');
    let path = parts.next().filter(|p| !p.is_empty()).ok_or("missing DIR")?;
    let mut share = ShareConfig { name: name.to_string(), path: path.into(), read_only: false, encrypt: EncryptPolicy::default() };
    for opt in parts {
        match opt.split_once('=') {
            None if opt == "ro" => share.read_only = true,
            None if opt == "rw" => share.read_only = false,
            Some(("encrypt", v)) => share.encrypt = v.parse()?,
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
        assert!(parse_share("docs").is_err());
        assert!(parse_share("docs=/x,bogus").is_err());
        assert!(parse_share("docs=/x,encrypt=maybe").is_err());
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
        assert!(c.quic_options.require_client_cert);
        assert!(c.quic_options.transport_security, "defaults fill the rest of the table");
        assert_eq!(c.quic_options.options().keep_alive, None);
        assert!(toml::from_str::<FileConfig>("bogus = 1").is_err());
        assert!(toml::from_str::<FileConfig>("[quic_options]\nbogus = 1").is_err());
    }
}
