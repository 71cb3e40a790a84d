//! Certificates from an ACME CA (RFC 8555), obtained and renewed while
//! serving, as Caddy does for HTTPS: Windows accepts SMB over QUIC only
//! from a server whose certificate chains to a root it trusts and names
//! the server.
//!
//! The protocol is `instant-acme`'s; this module decides when to order,
//! answers the challenge (TLS-ALPN-01, RFC 8737, on a TCP port, by default
//! 443; or HTTP-01 on a port given), keeps the files and swaps the new
//! certificate into the running [`tls::Certificates`]: new handshakes get
//! it, connections made before keep theirs.
//!
//! # Files, under `STATE_DIR/acme/` (mode 0700; every file 0600)
//!
//! - `account-<directory>.json`: the account key and URL for one ACME
//!   directory (`<directory>` is its URL with every character other than
//!   letters, digits, `.` and `-` made `_`).
//! - `key.pem`, `cert.pem`: the certificate's key and chain (leaf first).
//!   The first line of `cert.pem` names the ACME directory it came from.
//!   They change as a unit as `tls` changes its generated pair: `key.pem.new`
//!   and `cert.pem.new` are written and fsynced, the directory fsynced, then
//!   each renamed over its counterpart with the directory fsynced after
//!   each rename. A crash between the renames leaves a key that is not the
//!   certificate's: such a pair is not used, and a new certificate ordered.
//!
//! # When
//!
//! On start a stored certificate from the configured directory whose names
//! are exactly the configured domains and that is not due for renewal is served at once; otherwise the
//! configured (or generated) certificate is served until the first order
//! completes. A certificate is due when a third of its lifetime is left
//! ([`renew_at`]); a failed attempt is logged with the CA's reason and
//! retried after 10 s, doubling up to an hour ([`backoff`]), while the
//! certificate in use keeps serving.

use anyhow::{anyhow, bail, Context};
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount, NewOrder, OrderStatus,
    RetryPolicy,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use smbq_auth::state_file;
use smbq_transport::tls::{self, Identity};
use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tracing::{info, warn};

/// Let's Encrypt's production directory, the default `--acme-directory`.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// The ALPN protocol of TLS-ALPN-01 (RFC 8737 section 6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// How a challenge is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Challenge {
    /// TLS-ALPN-01 on this TCP port (the CA connects to 443).
    TlsAlpn { port: u16 },
    /// HTTP-01 on this TCP port (the CA connects to 80).
    Http { port: u16 },
}

/// What `smbq serve --acme-*` asked for.
#[derive(Clone, Debug)]
pub struct AcmeConfig {
    pub domains: Vec<String>,
    pub directory: String,
    pub email: Option<String>,
    pub ca_root: Option<PathBuf>,
    pub challenge: Challenge,
    pub state_dir: PathBuf,
}

/// `smbq serve`'s ACME options (the config file has the same keys, with `_`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct AcmeArgs {
    /// Get and renew the QUIC certificate from an ACME CA (RFC 8555) for NAME
    /// (a DNS name clients use; repeatable). Turns ACME on.
    #[arg(long = "acme-domain", value_name = "NAME")]
    pub acme_domain: Vec<String>,
    /// The CA's ACME directory (default: Let's Encrypt's, https://acme-v02.api.letsencrypt.org/directory).
    #[arg(long, value_name = "URL")]
    pub acme_directory: Option<String>,
    /// Contact address for the ACME account (expiry notices).
    #[arg(long, value_name = "ADDR")]
    pub acme_email: Option<String>,
    /// PEM root to trust (instead of the system's roots) for the ACME server's HTTPS (a private CA such as pebble).
    #[arg(long, value_name = "FILE")]
    pub acme_ca_root: Option<PathBuf>,
    /// Answer the HTTP-01 challenge on this TCP port (the CA connects to port 80).
    #[arg(long, value_name = "PORT", conflicts_with = "acme_tls_port")]
    pub acme_http_port: Option<u16>,
    /// Answer the TLS-ALPN-01 challenge on this TCP port (default 443; the CA connects to 443).
    #[arg(long, value_name = "PORT")]
    pub acme_tls_port: Option<u16>,
}

impl AcmeArgs {
    /// The ACME settings from the flags over `file`; None when no domain is given.
    pub fn config(&self, file: &crate::config::FileConfig, state_dir: &Path) -> anyhow::Result<Option<AcmeConfig>> {
        let domains = if self.acme_domain.is_empty() { file.acme_domain.clone() } else { self.acme_domain.clone() };
        if domains.is_empty() {
            return Ok(None);
        }
        for d in &domains {
            if d.is_empty() || d.parse::<std::net::IpAddr>().is_ok() || d.contains(['/', ':', ' ']) {
                bail!("--acme-domain {d:?}: give a DNS name");
            }
        }
        let http = self.acme_http_port.or(if self.acme_tls_port.is_some() { None } else { file.acme_http_port });
        let tls = self.acme_tls_port.or(file.acme_tls_port);
        let challenge = match (http, tls) {
            (Some(_), Some(_)) => bail!("give one of acme_http_port and acme_tls_port"),
            (Some(port), None) => Challenge::Http { port },
            (None, port) => Challenge::TlsAlpn { port: port.unwrap_or(443) },
        };
        Ok(Some(AcmeConfig {
            domains,
            directory: self.acme_directory.clone().or(file.acme_directory.clone()).unwrap_or_else(|| LETS_ENCRYPT.into()),
            email: self.acme_email.clone().or(file.acme_email.clone()),
            ca_root: self.acme_ca_root.clone().or(file.acme_ca_root.clone()),
            challenge,
            state_dir: state_dir.to_path_buf(),
        }))
    }
}

/// Where the ACME files live under the state directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    pub dir: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Paths {
    pub fn new(state_dir: &Path) -> Paths {
        let dir = state_dir.join("acme");
        Paths { cert: dir.join("cert.pem"), key: dir.join("key.pem"), dir }
    }

    /// The account file for the directory at `url`.
    pub fn account(&self, url: &str) -> PathBuf {
        let name: String = url
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
            .collect();
        self.dir.join(format!("account-{}.json", name.trim_matches('_')))
    }
}

/// When a certificate valid from `not_before` to `not_after` is due for
/// renewal: when a third of its lifetime is left.
pub fn renew_at(not_before: SystemTime, not_after: SystemTime) -> SystemTime {
    let lifetime = not_after.duration_since(not_before).unwrap_or_default();
    not_after.checked_sub(lifetime / 3).unwrap_or(not_before)
}

/// How long to wait after the `failures`-th failure in a row: 10 s,
/// doubling, at most an hour.
pub fn backoff(failures: u32) -> Duration {
    const FIRST: u64 = 10;
    const MAX: u64 = 3600;
    let shift = failures.saturating_sub(1).min(16);
    Duration::from_secs(FIRST.saturating_mul(1 << shift).min(MAX))
}

/// A certificate's validity period and names, read from its DER.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validity {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub names: BTreeSet<String>,
}

impl Validity {
    pub fn of(der: &[u8]) -> anyhow::Result<Validity> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| anyhow!("parsing certificate: {e}"))?;
        let v = cert.validity();
        let t = |t: &x509_parser::time::ASN1Time| {
            let secs = t.timestamp();
            if secs >= 0 {
                SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64)
            } else {
                SystemTime::UNIX_EPOCH
            }
        };
        let mut names = BTreeSet::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for n in &san.value.general_names {
                if let x509_parser::extensions::GeneralName::DNSName(d) = n {
                    names.insert(d.to_ascii_lowercase());
                }
            }
        }
        Ok(Validity { not_before: t(&v.not_before), not_after: t(&v.not_after), names })
    }

    pub fn renew_at(&self) -> SystemTime {
        renew_at(self.not_before, self.not_after)
    }

    /// Whether the certificate names exactly `domains` (any case, any order).
    pub fn covers_exactly(&self, domains: &[String]) -> bool {
        let want: BTreeSet<String> = domains.iter().map(|d| d.to_ascii_lowercase()).collect();
        want == self.names
    }
}

/// The stored ACME certificate, if there is one whose key is its own.
pub fn load_stored(paths: &Paths) -> Option<(Identity, Validity)> {
    if !paths.cert.exists() || !paths.key.exists() {
        return None;
    }
    let loaded = Identity::load(&paths.cert, &paths.key).map_err(anyhow::Error::from).and_then(|id| {
        // A key that is not the certificate's (a crash between the renames) is refused here.
        tls::Certificates::new(&id)?;
        let v = Validity::of(id.chain.first().map(|c| c.as_ref()).unwrap_or_default())?;
        Ok((id, v))
    });
    match loaded {
        Ok(x) => Some(x),
        Err(e) => {
            warn!("ACME: not using the stored certificate {}: {e:#}", paths.cert.display());
            None
        }
    }
}

/// The first line of `cert.pem` (explanatory text, which PEM readers skip,
/// RFC 7468 section 5.2) names the ACME directory the certificate came from.
const FROM: &str = "Issued through the ACME directory ";

/// The ACME directory the stored certificate came from.
pub fn stored_directory(paths: &Paths) -> Option<String> {
    let text = std::fs::read_to_string(&paths.cert).ok()?;
    text.lines().next()?.strip_prefix(FROM).map(|d| d.trim().to_string())
}

/// The stored certificate if it came from `directory`, is for exactly
/// `domains` and is not yet due for renewal at `now`.
pub fn usable_at_start(paths: &Paths, directory: &str, domains: &[String], now: SystemTime) -> Option<(Identity, Validity)> {
    let (id, v) = load_stored(paths)?;
    if stored_directory(paths).as_deref() != Some(directory) {
        info!("ACME: the stored certificate is not from {directory}: ordering a new one");
        return None;
    }
    if !v.covers_exactly(domains) {
        info!("ACME: the stored certificate names {:?}, not {:?}: ordering a new one", v.names, domains);
        return None;
    }
    if now >= v.renew_at() {
        info!("ACME: the stored certificate is due for renewal: ordering a new one");
        return None;
    }
    Some((id, v))
}

fn create_dir(dir: &Path) -> anyhow::Result<()> {
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        state_file::sync_dir(dir).with_context(|| format!("syncing {}", dir.display()))?;
    }
    Ok(())
}

fn with_new(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".new");
    PathBuf::from(p)
}

/// Makes `key_pem` and `chain_pem` the stored pair, as one unit (see the
/// module documentation).
pub fn store_pair(paths: &Paths, directory: &str, key_pem: &[u8], chain_pem: &[u8]) -> anyhow::Result<()> {
    create_dir(&paths.dir)?;
    let chain_pem = [format!("{FROM}{}\n", directory.replace(['\r', '\n'], "")).as_bytes(), chain_pem].concat();
    let chain_pem = chain_pem.as_slice();
    let (key_new, cert_new) = (with_new(&paths.key), with_new(&paths.cert));
    state_file::write_synced(&key_new, key_pem, 0o600).with_context(|| format!("writing {}", key_new.display()))?;
    state_file::write_synced(&cert_new, chain_pem, 0o600).with_context(|| format!("writing {}", cert_new.display()))?;
    state_file::sync_dir(&paths.key).with_context(|| format!("syncing {}", paths.dir.display()))?;
    for (from, to) in [(&key_new, &paths.key), (&cert_new, &paths.cert)] {
        std::fs::rename(from, to).with_context(|| format!("renaming {} to {}", from.display(), to.display()))?;
        state_file::sync_dir(to).with_context(|| format!("syncing {}", paths.dir.display()))?;
    }
    Ok(())
}

/// Obtains certificates and keeps them fresh: orders one at once unless
/// `current` (the stored certificate in use) is not yet due, then renews
/// each when due, forever. Every new certificate goes into `certs`.
pub async fn run(cfg: AcmeConfig, certs: Arc<tls::Certificates>, mut current: Option<Validity>) {
    // instant-acme's HTTPS client takes the process default (two are linked in).
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let paths = Paths::new(&cfg.state_dir);
    loop {
        if let Some(v) = &current {
            sleep_until(v.renew_at()).await;
            info!("ACME: renewing the certificate for {:?} (valid until {})", cfg.domains, rfc3339(v.not_after));
        }
        let mut failures = 0u32;
        loop {
            match obtain(&cfg, &paths).await {
                Ok((id, v)) => match certs.replace(&id) {
                    Ok(()) => {
                        crate::metrics::certificate_in_use(&id.chain);
                        info!(
                            not_after = %rfc3339(v.not_after),
                            sha256 = %id.fingerprint(),
                            "ACME: certificate replaced: new connections get the one for {:?}",
                            cfg.domains,
                        );
                        current = Some(v);
                        break;
                    }
                    Err(e) => {
                        failures += 1;
                        let wait = backoff(failures);
                        warn!("ACME: the new certificate cannot be used (retrying in {} s): {e}", wait.as_secs());
                        tokio::time::sleep(wait).await;
                    }
                },
                Err(e) => {
                    failures += 1;
                    let wait = backoff(failures);
                    warn!(
                        retry_in_secs = wait.as_secs(),
                        "ACME: obtaining a certificate for {:?} from {} failed (attempt {failures}; retrying in {} s): {e:#}",
                        cfg.domains,
                        cfg.directory,
                        wait.as_secs()
                    );
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

/// Sleeps until the wall clock reaches `when`, waking at least hourly (a
/// suspended machine's monotonic clock lags the wall clock).
async fn sleep_until(when: SystemTime) {
    loop {
        let Ok(left) = when.duration_since(SystemTime::now()) else { return };
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left.min(Duration::from_secs(3600))).await;
    }
}

/// `t` as RFC 3339 UTC, to the second.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    match x509_parser::time::ASN1Time::from_timestamp(secs) {
        Ok(t) => asn1_rfc3339(&t),
        Err(_) => format!("{secs} s after 1970"),
    }
}

/// A certificate time as RFC 3339 UTC.
pub fn asn1_rfc3339(t: &x509_parser::time::ASN1Time) -> String {
    let d = t.to_datetime();
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", d.year(), u8::from(d.month()), d.day(), d.hour(), d.minute(), d.second())
}

fn http_client(cfg: &AcmeConfig) -> anyhow::Result<instant_acme::AccountBuilder> {
    Ok(match &cfg.ca_root {
        Some(root) => Account::builder_with_root(root).with_context(|| format!("ACME CA root {}", root.display()))?,
        None => Account::builder().context("ACME HTTP client")?,
    })
}

/// The stored account for the directory, or a new one (stored).
async fn account(cfg: &AcmeConfig, paths: &Paths, fresh: bool) -> anyhow::Result<Account> {
    let file = paths.account(&cfg.directory);
    if !fresh {
        if let Ok(json) = std::fs::read(&file) {
            let creds: AccountCredentials =
                serde_json::from_slice(&json).with_context(|| format!("reading {}", file.display()))?;
            return http_client(cfg)?.from_credentials(creds).await.context("restoring the ACME account");
        }
    }
    let contact: Vec<String> = cfg.email.iter().map(|e| format!("mailto:{e}")).collect();
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let (account, creds) = http_client(cfg)?
        .create(
            &NewAccount { contact: &contact, terms_of_service_agreed: true, only_return_existing: false },
            cfg.directory.clone(),
            None,
        )
        .await
        .context("creating an ACME account")?;
    create_dir(&paths.dir)?;
    let json = serde_json::to_vec_pretty(&creds)?;
    state_file::write_atomic(&file, &json, 0o600).with_context(|| format!("writing {}", file.display()))?;
    info!("ACME: created account {} at {}", account.id(), cfg.directory);
    Ok(account)
}

fn is_problem(e: &instant_acme::Error, kind: &str) -> bool {
    matches!(e, instant_acme::Error::Api(p) if p.r#type.as_deref().is_some_and(|t| t.ends_with(kind)))
}

/// One order, start to finish: the new certificate, stored and loaded.
pub async fn obtain(cfg: &AcmeConfig, paths: &Paths) -> anyhow::Result<(Identity, Validity)> {
    let identifiers: Vec<Identifier> = cfg.domains.iter().map(|d| Identifier::Dns(d.clone())).collect();
    let mut account = account(cfg, paths, false).await?;
    let mut order = match account.new_order(&NewOrder::new(&identifiers)).await {
        // The CA forgot the account (a test CA restarted, an account removed): make a new one.
        Err(e) if is_problem(&e, ":accountDoesNotExist") || is_problem(&e, ":unauthorized") => {
            warn!("ACME: the stored account is refused ({e}); creating a new one");
            account = account_fresh(cfg, paths).await?;
            account.new_order(&NewOrder::new(&identifiers)).await.context("creating the order")?
        }
        r => r.context("creating the order")?,
    };

    // Answer the challenges while they are pending: the responder stops when dropped.
    let mut answers = Answers::default();
    if let Challenge::TlsAlpn { port } = cfg.challenge {
        answers.tls = shared_tls_port(port).unwrap_or_default();
    }
    let kind = match cfg.challenge {
        Challenge::TlsAlpn { .. } => ChallengeType::TlsAlpn01,
        Challenge::Http { .. } => ChallengeType::Http01,
    };
    let mut ready = Vec::new();
    {
        let mut authzs = order.authorizations();
        while let Some(authz) = authzs.next().await {
            let mut authz = authz.context("fetching an authorization")?;
            match authz.status {
                AuthorizationStatus::Valid => continue,
                AuthorizationStatus::Pending => {}
                s => bail!("authorization for {} is {s:?}", authz.identifier()),
            }
            let who = authz.identifier().to_string();
            let Some(challenge) = authz.challenge(kind.clone()) else {
                bail!("the CA offers no {kind:?} challenge for {who}");
            };
            let domain = challenge.identifier().to_string();
            let key_auth = challenge.key_authorization();
            match cfg.challenge {
                Challenge::TlsAlpn { .. } => answers.add_tls(&domain, key_auth.digest().as_ref())?,
                Challenge::Http { .. } => answers.add_http(&challenge.token, key_auth.as_str()),
            }
            ready.push(challenge.url.clone());
        }
    }
    let _responder = if ready.is_empty() { None } else { Some(Responder::start(&cfg.challenge, answers).await?) };
    {
        let mut authzs = order.authorizations();
        while let Some(authz) = authzs.next().await {
            let mut authz = authz.context("fetching an authorization")?;
            if let Some(mut challenge) = authz.challenge(kind.clone()) {
                if ready.contains(&challenge.url) {
                    challenge.set_ready().await.context("telling the CA the challenge is ready")?;
                }
            }
        }
    }
    let retry = RetryPolicy::new().timeout(Duration::from_secs(90));
    let status = order.poll_ready(&retry).await.context("waiting for the CA to validate")?;
    if status != OrderStatus::Ready {
        bail!("the order is {status:?}: {}", challenge_errors(&mut order).await);
    }
    let key_pem = order.finalize().await.context("finalizing the order")?;
    let chain_pem = order.poll_certificate(&retry).await.context("fetching the certificate")?;
    drop(_responder);

    let chain: Vec<CertificateDer<'static>> = {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::pem_slice_iter(chain_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow!("the CA's certificate chain: {e}"))?
    };
    let leaf = chain.first().ok_or_else(|| anyhow!("the CA sent no certificate"))?;
    let v = Validity::of(leaf)?;
    store_pair(paths, &cfg.directory, key_pem.as_bytes(), chain_pem.as_bytes())?;
    let id = Identity::load(&paths.cert, &paths.key)?;
    Ok((id, v))
}

async fn account_fresh(cfg: &AcmeConfig, paths: &Paths) -> anyhow::Result<Account> {
    account(cfg, paths, true).await
}

/// The reasons the CA gave for failed challenges, for the log.
async fn challenge_errors(order: &mut instant_acme::Order) -> String {
    let mut out = Vec::new();
    let mut authzs = order.authorizations();
    while let Some(authz) = authzs.next().await {
        let Ok(mut authz) = authz else { continue };
        let _ = authz.refresh().await;
        let who = authz.identifier().to_string();
        for c in &authz.challenges {
            if let Some(e) = &c.error {
                out.push(format!("{who}: {:?} challenge: {e}", c.r#type));
            }
        }
    }
    if out.is_empty() {
        "the CA gave no reason".into()
    } else {
        out.join("; ")
    }
}

/// TLS-ALPN-01 answers: domain -> the self-signed certificate for it.
pub type TlsAnswers = Arc<Mutex<HashMap<String, Arc<rustls::sign::CertifiedKey>>>>;

/// TCP ports on which another TLS listener answers TLS-ALPN-01 (the KDC
/// proxy, sharing its port by ALPN), with the answers in its map.
static SHARED_TLS_PORTS: Mutex<Vec<(u16, TlsAnswers)>> = Mutex::new(Vec::new());

/// Another listener serves TCP `port` and answers TLS-ALPN-01 from the
/// returned map (see [`alpn_config`]) from now on: orders put their
/// answers there instead of binding the port.
pub fn share_tls_alpn_port(port: u16) -> TlsAnswers {
    let answers = TlsAnswers::default();
    SHARED_TLS_PORTS.lock().unwrap_or_else(|p| p.into_inner()).push((port, Arc::clone(&answers)));
    answers
}

pub(crate) fn shared_tls_port(port: u16) -> Option<TlsAnswers> {
    let ports = SHARED_TLS_PORTS.lock().unwrap_or_else(|p| p.into_inner());
    ports.iter().find(|(p, _)| *p == port).map(|(_, a)| Arc::clone(a))
}

/// What the challenge responder answers with.
#[derive(Clone, Default)]
struct Answers {
    tls: TlsAnswers,
    /// HTTP-01: token -> key authorization.
    http: Arc<Mutex<HashMap<String, String>>>,
}

impl Answers {
    fn add_http(&self, token: &str, key_auth: &str) {
        self.http.lock().unwrap_or_else(|p| p.into_inner()).insert(token.to_string(), key_auth.to_string());
    }

    fn add_tls(&self, domain: &str, digest: &[u8]) -> anyhow::Result<()> {
        let ck = alpn_certificate(domain, digest)?;
        self.tls.lock().unwrap_or_else(|p| p.into_inner()).insert(domain.to_ascii_lowercase(), Arc::new(ck));
        Ok(())
    }
}

//= https://www.rfc-editor.org/rfc/rfc8737#section-3
//# The client prepares for validation by constructing a self-signed
//# certificate that MUST contain an acmeIdentifier extension and a
//# subjectAlternativeName extension [RFC5280].  The subjectAlternativeName
//# extension MUST contain a single dNSName entry where the value is the
//# domain name being validated.  The acmeIdentifier extension MUST be
//# critical and contain the SHA-256 digest computed over the key
//# authorization [RFC8555].
/// The TLS-ALPN-01 answer for `domain`.
pub fn alpn_certificate(domain: &str, digest: &[u8]) -> anyhow::Result<rustls::sign::CertifiedKey> {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = rcgen::CertificateParams::new(vec![domain.to_string()])?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&kp)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(kp.serialize_der()));
    let signing = smbq_crypto::tls_provider().key_provider.load_private_key(key)?;
    Ok(rustls::sign::CertifiedKey::new(vec![cert.der().clone()], signing))
}

/// Serves the answers on the challenge port until dropped: its own
/// listener, or (TLS-ALPN-01 on a shared port) the answers it leaves in
/// the sharing listener's map, removed when dropped.
struct Responder {
    task: Option<tokio::task::JoinHandle<()>>,
    shared: Option<(TlsAnswers, Vec<String>)>,
}

impl Drop for Responder {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
        if let Some((map, domains)) = &self.shared {
            let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
            for d in domains {
                map.remove(d);
            }
        }
    }
}

async fn bind(port: u16) -> anyhow::Result<tokio::net::TcpListener> {
    // [::] takes IPv4 too where the system allows (bindv6only=0).
    match tokio::net::TcpListener::bind(("::", port)).await {
        Ok(l) => Ok(l),
        Err(_) => tokio::net::TcpListener::bind(("0.0.0.0", port))
            .await
            .with_context(|| format!("binding the ACME challenge port tcp {port}")),
    }
}

impl Responder {
    async fn start(challenge: &Challenge, answers: Answers) -> anyhow::Result<Responder> {
        let task = match *challenge {
            Challenge::TlsAlpn { port } if shared_tls_port(port).is_some_and(|m| Arc::ptr_eq(&m, &answers.tls)) => {
                info!("ACME: answering TLS-ALPN-01 on the KDC proxy's port tcp {port}");
                let domains = answers.tls.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
                return Ok(Responder { task: None, shared: Some((answers.tls, domains)) });
            }
            Challenge::TlsAlpn { port } => {
                let listener = bind(port).await?;
                let config = alpn_config(answers.tls)?;
                tokio::spawn(serve_tls(listener, config))
            }
            Challenge::Http { port } => {
                let listener = bind(port).await?;
                tokio::spawn(serve_http(listener, answers))
            }
        };
        Ok(Responder { task: Some(task), shared: None })
    }
}

#[derive(Debug)]
struct AlpnResolver(TlsAnswers);

impl rustls::server::ResolvesServerCert for AlpnResolver {
    fn resolve(&self, hello: rustls::server::ClientHello<'_>) -> Option<Arc<rustls::sign::CertifiedKey>> {
        //= https://www.rfc-editor.org/rfc/rfc8737#section-4
        //# [...] the ACME server MUST NOT negotiate any other protocol
        // Only a client offering acme-tls/1 gets the challenge certificate.
        let offers = hello.alpn().is_some_and(|mut a| a.any(|p| p == ACME_TLS_ALPN));
        if !offers {
            return None;
        }
        let name = hello.server_name()?.to_ascii_lowercase();
        self.0.lock().unwrap_or_else(|p| p.into_inner()).get(&name).cloned()
    }
}

/// The TLS config that answers TLS-ALPN-01 (RFC 8737) from `answers`.
pub fn alpn_config(answers: TlsAnswers) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(smbq_crypto::tls_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(AlpnResolver(answers)));
    config.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
    Ok(Arc::new(config))
}

async fn serve_tls(listener: tokio::net::TcpListener, config: Arc<rustls::ServerConfig>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    loop {
        let Ok((stream, peer)) = listener.accept().await else { continue };
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            // The validator only needs the handshake; then it closes.
            match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                Ok(Ok(_)) => info!("ACME: answered a TLS-ALPN-01 validation from {peer}"),
                Ok(Err(e)) => info!("ACME: TLS-ALPN-01 handshake from {peer} failed: {e}"),
                Err(_) => {}
            }
        });
    }
}

async fn serve_http(listener: tokio::net::TcpListener, answers: Answers) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else { continue };
        let answers = answers.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(10), answer_http(stream, peer, answers)).await;
        });
    }
}

/// The path of an HTTP-01 request: `GET PATH HTTP/1.x`.
fn request_path(head: &[u8]) -> Option<&str> {
    let line = head.split(|b| *b == b'\r' || *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("GET"), Some(path), Some(v)) if v.starts_with("HTTP/1.") => Some(path),
        _ => None,
    }
}

const HTTP_PREFIX: &str = "/.well-known/acme-challenge/";

/// The response to an HTTP-01 request whose head is `head`.
fn http_response(head: &[u8], answers: &HashMap<String, String>) -> Vec<u8> {
    let body = request_path(head)
        .and_then(|p| p.strip_prefix(HTTP_PREFIX))
        .and_then(|token| answers.get(token));
    match body {
        Some(b) => format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
            b.len()
        )
        .into_bytes(),
        None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
    }
}

async fn answer_http(mut stream: tokio::net::TcpStream, peer: std::net::SocketAddr, answers: Answers) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    // The request head, at most 8 KiB.
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(buf.get(..n).unwrap_or_default()),
        }
    }
    let rsp = {
        let map = answers.http.lock().unwrap_or_else(|p| p.into_inner());
        http_response(&head, &map)
    };
    info!("ACME: answered an HTTP-01 request from {peer}: {:?}", request_path(&head).unwrap_or("?"));
    let _ = stream.write_all(&rsp).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86400;

    #[test]
    fn renewal_when_a_third_of_the_lifetime_is_left() {
        let nb = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        // Let's Encrypt: 90 days, renewed with 30 left.
        assert_eq!(renew_at(nb, nb + Duration::from_secs(90 * DAY)), nb + Duration::from_secs(60 * DAY));
        assert_eq!(renew_at(nb, nb + Duration::from_secs(30)), nb + Duration::from_secs(20));
        // A certificate that ends before it starts is due at once.
        assert_eq!(renew_at(nb, nb - Duration::from_secs(5)), nb - Duration::from_secs(5));
    }

    #[test]
    fn backoff_doubles_from_ten_seconds_to_an_hour() {
        let secs: Vec<u64> = (1..=11).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600]);
        assert_eq!(backoff(0).as_secs(), 10);
        assert_eq!(backoff(u32::MAX).as_secs(), 3600);
    }

    #[test]
    fn times_print_as_rfc3339() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)), "2027-01-15T08:00:00Z");
    }

    #[test]
    fn file_layout() {
        let p = Paths::new(Path::new("/var/lib/smbq"));
        assert_eq!(p.cert, Path::new("/var/lib/smbq/acme/cert.pem"));
        assert_eq!(p.key, Path::new("/var/lib/smbq/acme/key.pem"));
        assert_eq!(
            p.account(LETS_ENCRYPT),
            Path::new("/var/lib/smbq/acme/account-acme-v02.api.letsencrypt.org_directory.json")
        );
        assert_eq!(p.account("https://127.0.0.1:14000/dir"), Path::new("/var/lib/smbq/acme/account-127.0.0.1_14000_dir.json"));
    }

    #[test]
    fn stored_pair_is_private_and_replaced_whole() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let paths = Paths::new(tmp.path());
        for n in ["a", "b"] {
            let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
            let cert = rcgen::CertificateParams::new(vec![format!("{n}.example")])
                .expect("params")
                .self_signed(&kp)
                .expect("cert");
            store_pair(&paths, LETS_ENCRYPT, kp.serialize_pem().as_bytes(), cert.pem().as_bytes()).expect("store");
            let (_, v) = load_stored(&paths).expect("stored pair");
            assert!(v.covers_exactly(&[format!("{}.EXAMPLE", n)]));
            assert!(!v.covers_exactly(&[format!("{n}.example"), "other.example".into()]));
        }
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(&paths.dir), 0o700);
        assert_eq!(mode(&paths.cert), 0o600);
        assert_eq!(mode(&paths.key), 0o600);
        let mut names: Vec<String> =
            std::fs::read_dir(&paths.dir).expect("dir").map(|e| e.expect("entry").file_name().to_string_lossy().into()).collect();
        names.sort();
        assert_eq!(names, ["cert.pem", "key.pem"]);
        // A key that is not the certificate's (a crash between the renames) is not used.
        let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        std::fs::write(&paths.key, other.serialize_pem()).expect("write");
        assert!(load_stored(&paths).is_none());
    }

    #[test]
    fn stored_certificate_used_at_start_only_for_the_same_names_and_before_renewal() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let paths = Paths::new(tmp.path());
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        let mut params = rcgen::CertificateParams::new(vec!["smb.example".into()]).expect("params");
        let now = SystemTime::now();
        params.not_before = (now - Duration::from_secs(10 * DAY)).into();
        params.not_after = (now + Duration::from_secs(80 * DAY)).into();
        let cert = params.self_signed(&kp).expect("cert");
        store_pair(&paths, LETS_ENCRYPT, kp.serialize_pem().as_bytes(), cert.pem().as_bytes()).expect("store");
        let domains = vec!["smb.example".to_string()];
        assert!(usable_at_start(&paths, LETS_ENCRYPT, &domains, now).is_some());
        assert_eq!(stored_directory(&paths).as_deref(), Some(LETS_ENCRYPT));
        // From another CA (say, a staging one): ordered again.
        assert!(usable_at_start(&paths, "https://acme-staging-v02.api.letsencrypt.org/directory", &domains, now).is_none());
        assert!(usable_at_start(&paths, LETS_ENCRYPT, &["other.example".to_string()], now).is_none());
        // 60 of 90 days gone: due.
        assert!(usable_at_start(&paths, LETS_ENCRYPT, &domains, now + Duration::from_secs(51 * DAY)).is_none());
    }

    #[test]
    fn http_01_answers_only_known_tokens() {
        let answers: HashMap<String, String> = [("tok".to_string(), "tok.thumb".to_string())].into();
        let ok = http_response(b"GET /.well-known/acme-challenge/tok HTTP/1.1\r\nHost: a\r\n\r\n", &answers);
        assert!(ok.starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert!(ok.ends_with(b"\r\n\r\ntok.thumb"));
        for bad in [
            &b"GET /.well-known/acme-challenge/other HTTP/1.1\r\n\r\n"[..],
            b"GET /tok HTTP/1.1\r\n\r\n",
            b"POST /.well-known/acme-challenge/tok HTTP/1.1\r\n\r\n",
            b"\xff\xfe",
            b"",
        ] {
            assert!(http_response(bad, &answers).starts_with(b"HTTP/1.1 404"));
        }
    }

    #[test]
    fn tls_alpn_01_certificate_has_the_critical_acme_identifier() {
        let digest = [7u8; 32];
        let ck = alpn_certificate("smb.example", &digest).expect("certificate");
        let der = ck.cert.first().expect("leaf");
        let (_, cert) = x509_parser::parse_x509_certificate(der).expect("parse");
        // id-pe-acmeIdentifier 1.3.6.1.5.5.7.1.31
        let ext = cert
            .extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31")
            .expect("acmeIdentifier extension");
        assert!(ext.critical);
        // An OCTET STRING of the 32-byte digest.
        assert_eq!(ext.value, [&[0x04, 0x20][..], &digest[..]].concat());
        assert_eq!(Validity::of(der).expect("validity").names, BTreeSet::from(["smb.example".to_string()]));
    }
}
