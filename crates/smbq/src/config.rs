//! The TOML config file; `smbq serve` flags override it.
//!
//! ```toml
//! tcp = "0.0.0.0:445"
//! users = "/var/lib/smbq/users"
//! state_dir = "/var/lib/smbq"
//! server_name = "SMBQ"
//! signing_required = false
//! encrypt = "desired"          # required | desired | off
//! [[share]]
//! name = "data"
//! path = "/srv/data"
//! read_only = false
//! encrypt = "required"
//! [limits]
//! credits = 512
//! preauth_timeout_secs = 30
//! ```

use serde::Deserialize;
use smbq_server::{EncryptPolicy, Limits, ShareConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub tcp: Option<SocketAddr>,
    pub users: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub server_name: Option<String>,
    pub signing_required: Option<bool>,
    pub encrypt: Option<EncryptPolicy>,
    #[serde(default)]
    pub share: Vec<ShareConfig>,
    #[serde(default)]
    pub limits: Limits,
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
            "tcp = \"127.0.0.1:4445\"\nencrypt = \"required\"\n[[share]]\nname = \"a\"\npath = \"/tmp\"\n[limits]\ncredits = 64\npreauth_timeout_secs = 2\n",
        )
        .unwrap();
        assert_eq!(c.share.len(), 1);
        assert_eq!(c.limits.credits, 64);
        assert_eq!(c.limits.preauth_timeout_secs, 2);
        assert_eq!(c.limits.max_io, Limits::default().max_io);
        assert!(toml::from_str::<FileConfig>("bogus = 1").is_err());
    }
}
