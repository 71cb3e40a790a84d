//! Server settings: shares, limits, encryption policy. Deserialized from the
//! TOML config by the binary; every field has a default that works.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Per-share (or global) SMB encryption policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EncryptPolicy {
    /// Unencrypted requests are refused with ACCESS_DENIED (MS-SMB2 3.3.5.2.11).
    Required,
    /// Ask capable clients to encrypt (ENCRYPT_DATA) but over a QUIC whose
    /// TLS the server trusts (`allow_transport_security`); others may still
    /// connect.
    #[default]
    Desired,
    Off,
}

impl std::str::FromStr for EncryptPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "required" => Ok(Self::Required),
            "desired" => Ok(Self::Desired),
            "off" => Ok(Self::Off),
            _ => Err(format!("encrypt must be required, desired or off, not {s:?}")),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareConfig {
    pub name: String,
    pub path: PathBuf,
    /// Read-only for everyone.
    #[serde(default)]
    pub read_only: bool,
    /// Match names exactly as the file system holds them. Default `false`:
    /// names are case-insensitive and case-preserving, as Windows clients
    /// expect (see [`smbq_vfs::PosixFs::new`]).
    #[serde(default)]
    pub case_sensitive: bool,
    /// Offer the SMB3 POSIX extensions (Samba's `smb3 unix extensions`):
    /// a client that negotiates them and sends the POSIX create context
    /// gets POSIX opens ([`smbq_vfs::PosixFs::posix_view`]): exact-case
    /// names, modes, owners, symlinks. Other opens are as on any share.
    #[serde(default)]
    pub posix: bool,
    #[serde(default)]
    pub encrypt: EncryptPolicy,
    /// Who may connect (user names, case-insensitive); `None` = every user.
    #[serde(default)]
    pub users: Option<Vec<String>>,
    /// Users who may connect but not modify anything.
    #[serde(default)]
    pub read_only_users: Vec<String>,
    /// Serve this file system instead of `path` (an embedder's, or a
    /// test's [`smbq_vfs::MemFs`]).
    #[serde(skip)]
    pub fs: Option<std::sync::Arc<dyn smbq_vfs::FileSystem>>,
}

impl ShareConfig {
    /// Whether `other` describes the same share (a reload keeps such a
    /// share as it is). One served from a given file system never is.
    pub fn same_as(&self, other: &ShareConfig) -> bool {
        self.fs.is_none()
            && other.fs.is_none()
            && self.name == other.name
            && self.path == other.path
            && self.read_only == other.read_only
            && self.case_sensitive == other.case_sensitive
            && self.posix == other.posix
            && self.encrypt == other.encrypt
            && self.users == other.users
            && self.read_only_users == other.read_only_users
    }

    /// A read-write share open to every user.
    pub fn new(name: impl Into<String>, path: impl Into<PathBuf>) -> ShareConfig {
        ShareConfig { name: name.into(), path: path.into(), ..ShareConfig::default() }
    }
}

/// `Ok` when `v` lies in `lo..=hi`; otherwise an error naming the
/// config key (`table.key`), its value and the allowed range.
pub fn check_range(table: &str, key: &str, v: u64, lo: u64, hi: u64) -> Result<(), String> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(format!("{table}.{key} = {v} is outside {lo}..={hi}"))
    }
}

/// Limits that bound what peers can make the server hold.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    pub max_connections: usize,
    pub max_sessions_per_connection: usize,
    pub max_sessions: usize,
    pub max_opens_per_connection: usize,
    pub max_trees_per_session: usize,
    /// Credits a client may hold (the command sequence window).
    pub credits: u16,
    /// Largest READ/WRITE/transact payload (MaxReadSize etc.).
    pub max_io: u32,
    /// Seconds a connection may take from accept to an authenticated session.
    pub preauth_timeout_secs: u64,
    /// Seconds an authenticated connection may stay idle with no opens.
    pub idle_timeout_secs: u64,
    /// Delay before a failed logon is answered, in milliseconds.
    pub failed_logon_delay_ms: u64,
    /// Largest SESSION_SETUP security blob.
    pub max_security_blob: usize,
    /// Requests in flight per connection (queued plus async).
    pub max_outstanding: usize,
    /// Seconds after which a peer that stopped answering (no FIN: a
    /// vanished laptop, a cut cable) is dropped and its opens, share modes
    /// and locks released: TCP keepalive probes and TCP_USER_TIMEOUT.
    pub dead_peer_secs: u64,
    /// Bytes of received requests all connections together may hold
    /// before the engine has handled them; readers wait when it is spent.
    pub memory_budget: usize,
    /// Seconds an open waits for the holder of an oplock to acknowledge
    /// its break before the server takes the oplock away (MS-SMB2 3.3.2.1;
    /// Windows waits 35 s).
    pub oplock_break_secs: u64,
    /// inotify watches the CHANGE_NOTIFY requests of one session may hold
    /// (one per directory watched; a tree watch one per subdirectory).
    /// Past it a request completes with STATUS_NOTIFY_ENUM_DIR and the
    /// directories beyond go unwatched (crate::notify).
    pub notify_watches_per_session: usize,
    /// inotify watches all sessions together may hold; at most half of
    /// the kernel's per-user `fs.inotify.max_user_watches` is used, so
    /// that the server's other work and the user's other processes keep
    /// some.
    pub notify_watches: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            max_sessions_per_connection: 16,
            max_sessions: 4096,
            max_opens_per_connection: 16384,
            max_trees_per_session: 64,
            // What Windows and Samba grant (smbtorture smb2.credits checks it).
            credits: 8192,
            max_io: 8 * 1024 * 1024,
            preauth_timeout_secs: 30,
            idle_timeout_secs: 900,
            failed_logon_delay_ms: 500,
            max_security_blob: 64 * 1024,
            max_outstanding: 1024,
            dead_peer_secs: 120,
            memory_budget: 1 << 30,
            oplock_break_secs: 35,
            notify_watches_per_session: 1024,
            notify_watches: 4096,
        }
    }
}

impl Limits {
    /// Refuse values outside what the protocol and this server can honour,
    /// naming the key (checked at start, before anything is served).
    pub fn check(&self) -> Result<(), String> {
        let range = |key: &str, v: u64, lo: u64, hi: u64| check_range("limits", key, v, lo, hi);
        range("max_connections", self.max_connections as u64, 1, 1 << 20)?;
        range("max_sessions_per_connection", self.max_sessions_per_connection as u64, 1, 1 << 16)?;
        range("max_sessions", self.max_sessions as u64, 1, 1 << 24)?;
        range("max_opens_per_connection", self.max_opens_per_connection as u64, 1, 1 << 24)?;
        range("max_trees_per_session", self.max_trees_per_session as u64, 1, 1 << 16)?;
        // MS-SMB2 3.3.1.2: the window must let at least one request through;
        // Windows and Samba grant up to 8192 and never more than the field holds.
        range("credits", u64::from(self.credits), 1, u64::from(u16::MAX))?;
        // 64 KiB is the smallest MaxReadSize a 2.1+ client expects; a READ
        // response must fit the 24-bit Direct TCP length with its headers.
        range("max_io", u64::from(self.max_io), 65536, 8 << 20)?;
        range("preauth_timeout_secs", self.preauth_timeout_secs, 1, 3600)?;
        range("idle_timeout_secs", self.idle_timeout_secs, 1, 7 * 24 * 3600)?;
        range("dead_peer_secs", self.dead_peer_secs, 2, 24 * 3600)?;
        range("failed_logon_delay_ms", self.failed_logon_delay_ms, 0, 60_000)?;
        range("max_security_blob", self.max_security_blob as u64, 1024, 1 << 20)?;
        range("max_outstanding", self.max_outstanding as u64, 1, 1 << 16)?;
        range("oplock_break_secs", self.oplock_break_secs, 1, 3600)?;
        range("notify_watches_per_session", self.notify_watches_per_session as u64, 1, 1 << 20)?;
        range("notify_watches", self.notify_watches as u64, 1, 1 << 22)?;
        range("memory_budget", self.memory_budget as u64, self.max_frame() as u64, 1 << 40)?;
        Ok(())
    }

    /// Largest frame a peer may send before it has a session: NEGOTIATE
    /// and SESSION_SETUP are small (the security blob plus headers).
    pub fn preauth_max_frame(&self) -> usize {
        self.max_security_blob + 4096
    }

    pub fn preauth_timeout(&self) -> Duration {
        Duration::from_secs(self.preauth_timeout_secs)
    }
    /// Largest frame a peer may send: max I/O plus headers and a compound's worth of slack.
    pub fn max_frame(&self) -> usize {
        (self.max_io as usize + 64 * 1024).min(smbq_wire::framing::MAX_FRAME)
    }
}

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub shares: Vec<ShareConfig>,
    pub limits: Limits,
    /// NetBIOS-style name reported in NTLM target info.
    pub server_name: String,
    pub domain: String,
    /// Require signing on every session (encryption implies integrity anyway).
    pub signing_required: bool,
    /// Global policy applied to sessions (shares can only tighten it).
    pub encrypt: EncryptPolicy,
    /// Trust QUIC's TLS in place of SMB encryption: accept
    /// SMB2_TRANSPORT_CAPABILITIES' ACCEPT_TRANSPORT_LEVEL_SECURITY on QUIC,
    /// and do not ask clients over QUIC for the encryption `encrypt =
    /// desired` asks for (cmd::session_setup::session_encrypts).
    pub allow_transport_security: bool,
    /// The addresses clients may open further channels to, as
    /// FSCTL_QUERY_NETWORK_INTERFACE_INFO lists them (the transport finds
    /// them; empty: the connection's own address only).
    pub interfaces: Vec<NetInterface>,
    /// Count connections, requests and bytes through the `metrics` facade
    /// (crate::metrics); the binary installs the recorder first.
    pub metrics: bool,
    /// Offer and accept NTLMSSP (`[auth] ntlm`); off, NEGOTIATE offers
    /// Kerberos only and NTLM tokens get STATUS_NTLM_BLOCKED.
    pub ntlm: bool,
    pub kerberos: KerberosConfig,
}

/// `[kerberos]`: Kerberos logons (MS-KILE) with the keys of a keytab, and
/// the KDC proxy (MS-KKDCP) that smbq serves beside QUIC.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KerberosConfig {
    /// The keytab with the keys of `cifs/NAME@REALM` for each name the
    /// server answers to (`smbq serve --keytab`); none: no Kerberos.
    pub keytab: Option<PathBuf>,
    /// The realm whose principals are smbq users by name: `alice@REALM`
    /// logs on as `alice`.
    pub realm: Option<String>,
    /// Other principals and the smbq user each is (`"bob@OTHER.ORG" =
    /// "robert"`); a principal neither in the realm nor here is refused.
    pub map: BTreeMap<String, String>,
    /// Serve `POST /KdcProxy` over HTTPS on TCP at the QUIC port.
    pub kdc_proxy: bool,
    /// The KDCs the proxy forwards to, `host:port` (port 88 if left out).
    pub kdc: Vec<String>,
}

impl KerberosConfig {
    /// The smbq user `principal` logs on as, if it may (issue 35 item 2):
    /// the explicit map first, then the configured realm's names.
    pub fn user_of(&self, principal: &str) -> Option<String> {
        if let Some(user) = self.map.iter().find(|(p, _)| p.eq_ignore_ascii_case(principal)).map(|(_, u)| u) {
            return Some(user.clone());
        }
        let (name, realm) = principal.rsplit_once('@')?;
        let ours = self.realm.as_deref()?;
        // A name with an instance (host/x, alice/admin) is not a user.
        (realm.eq_ignore_ascii_case(ours) && !name.is_empty() && !name.contains('/')).then(|| name.to_string())
    }
}

/// One address of a network interface (MS-SMB2 2.2.32.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetInterface {
    pub index: u32,
    pub addr: std::net::IpAddr,
    /// Bits per second.
    pub link_speed: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            shares: Vec::new(),
            limits: Limits::default(),
            server_name: "SMBQ".into(),
            domain: "WORKGROUP".into(),
            signing_required: false,
            encrypt: EncryptPolicy::Desired,
            allow_transport_security: true,
            interfaces: Vec::new(),
            metrics: false,
            ntlm: true,
            kerberos: KerberosConfig::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kerberos_principals_map_to_users() {
        let k = KerberosConfig {
            realm: Some("EXAMPLE.COM".into()),
            map: BTreeMap::from([("bob@OTHER.ORG".to_string(), "robert".to_string())]),
            ..KerberosConfig::default()
        };
        assert_eq!(k.user_of("alice@EXAMPLE.COM").as_deref(), Some("alice"));
        assert_eq!(k.user_of("alice@example.com").as_deref(), Some("alice"));
        assert_eq!(k.user_of("bob@OTHER.ORG").as_deref(), Some("robert"));
        for refused in ["carol@OTHER.ORG", "host/x@EXAMPLE.COM", "alice", "@EXAMPLE.COM", "alice@EXAMPLE.COM.EVIL"] {
            assert_eq!(k.user_of(refused), None, "{refused}");
        }
        assert_eq!(KerberosConfig::default().user_of("alice@EXAMPLE.COM"), None);
    }
}
