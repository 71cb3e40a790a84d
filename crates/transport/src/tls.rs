//! Certificates and TLS 1.3 configuration for SMB over QUIC.
//!
//! The server presents a PEM chain and key given by the operator, or one it
//! generated once under `STATE_DIR/tls/`: an ECDSA P-256 leaf (CA:FALSE,
//! serverAuth EKU, SANs for `localhost`, the host name and its addresses)
//! that a Windows client or rustls/webpki accepts once trusted.
//! Optionally clients must present a certificate, allowed by SHA-256
//! fingerprint or by a CA (as Windows Server 2025's SMB over QUIC client
//! access control does); others are refused during the handshake.
//!
//! # The generated pair on disk
//!
//! `tls/cert.pem` and `tls/key.pem` (both mode 0600) change as one unit: a
//! crash never leaves a certificate beside a key that is not its own, nor
//! makes the server present a fingerprint other than the one it printed.
//! An update ([`generate`]):
//!
//! 1. writes `key.pem.new`, then `cert.pem.new` (mode 0600 from creation;
//!    leftovers of an earlier crash are removed first, never reused), fsyncs
//!    each, then fsyncs the directory;
//! 2. renames `key.pem.new` over `key.pem` and fsyncs the directory;
//! 3. renames `cert.pem.new` over `cert.pem` and fsyncs the directory.
//!
//! Before it reads the pair, [`load_or_generate`] (as [`finish_update`])
//! finishes or undoes an update a crash interrupted. If `.new` files are
//! there, each standing in for its counterpart: when they make a complete
//! pair whose key is the certificate's (the update got past step 1), they
//! are fsynced and renamed as in steps 2 and 3, so the new identity is the
//! one loaded; otherwise (the crash was within step 1) they are removed and
//! the old pair stands. Then a complete pair is loaded and never replaced;
//! a key that is not the certificate's, or one file without the other, is
//! an error naming them (the identity clients trust never changes
//! silently). Only when neither file exists is a pair generated.
//! Updates and these checks hold an exclusive `flock` on the directory, so
//! concurrent `smbq serve` and `smbq cert generate` do not interleave.

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use smbq_auth::state_file;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// ALPN protocol id of SMB over QUIC (MS-SMB2 2.1).
pub const ALPN: &[u8] = b"smb";

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}: no certificate in PEM file")]
    NoCert(PathBuf),
    #[error("{0}: no private key in PEM file")]
    NoKey(PathBuf),
    #[error("{0}: {1}")]
    Pem(PathBuf, String),
    #[error("certificate generation: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client CA: {0}")]
    ClientCa(String),
    #[error("{cert} and {key} do not match (the key is not the certificate's): restore the pair, or run `smbq cert generate` for a new identity")]
    Mismatch { cert: PathBuf, key: PathBuf },
    #[error("{present} is there but {missing} is not: restore it, or run `smbq cert generate` for a new identity")]
    HalfPair { present: PathBuf, missing: PathBuf },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + '_ {
    move |source| TlsError::Io { path: path.to_path_buf(), source }
}

/// The server's certificate chain and key.
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub cert_path: PathBuf,
}

impl Identity {
    pub fn load(cert: &Path, key: &Path) -> Result<Identity, TlsError> {
        let chain = load_certs(cert)?;
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey(key.to_path_buf()),
            e => TlsError::Pem(key.to_path_buf(), e.to_string()),
        })?;
        Ok(Identity { chain, key, cert_path: cert.to_path_buf() })
    }

    /// SHA-256 fingerprint of the leaf certificate.
    pub fn fingerprint(&self) -> String {
        self.chain.first().map(|c| fingerprint(c)).unwrap_or_default()
    }
}

pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::Pem(path.to_path_buf(), e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem(path.to_path_buf(), e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::NoCert(path.to_path_buf()));
    }
    Ok(certs)
}

/// Where a generated identity lives under the state directory.
pub fn default_paths(state_dir: &Path) -> (PathBuf, PathBuf) {
    let dir = state_dir.join("tls");
    (dir.join("cert.pem"), dir.join("key.pem"))
}

/// The names a generated certificate covers: `localhost`, the host name,
/// every local address, plus `extra`.
pub fn default_sans(extra: &[String]) -> Vec<String> {
    let mut sans = vec!["localhost".to_string()];
    if let Some(h) = hostname() {
        sans.push(h);
    }
    if let Ok(ifs) = if_addrs::get_if_addrs() {
        sans.extend(ifs.iter().map(|i| i.ip().to_string()));
    }
    for a in ["127.0.0.1", "::1"] {
        sans.push(a.to_string());
    }
    sans.extend(extra.iter().cloned());
    let mut seen = std::collections::HashSet::new();
    sans.retain(|s| seen.insert(s.clone()));
    sans
}

fn hostname() -> Option<String> {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let h = h.trim();
    (!h.is_empty()).then(|| h.to_string())
}

/// Generate an ECDSA P-256 leaf certificate for `sans` and make it and its
/// key the pair at `cert`/`key` (both mode 0600), as one unit (see the
/// module documentation).
pub fn generate(cert: &Path, key: &Path, sans: &[String]) -> Result<Identity, TlsError> {
    let dir = create_dir(cert)?;
    let _lock = lock_dir(&dir)?;
    generate_locked(cert, key, sans)
}

fn generate_locked(cert: &Path, key: &Path, sans: &[String]) -> Result<Identity, TlsError> {
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
    let kp = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::new(sans.to_vec())?;
    params.distinguished_name.push(DnType::CommonName, sans.get(1).or(sans.first()).cloned().unwrap_or_default());
    params.distinguished_name.push(DnType::OrganizationName, "smbq");
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let now = std::time::SystemTime::now();
    params.not_before = (now - std::time::Duration::from_secs(3600)).into();
    params.not_after = (now + std::time::Duration::from_secs(2 * 365 * 86400)).into();
    let c = params.self_signed(&kp)?;
    if let Some(dir) = key.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    let (cert_new, key_new) = (with_new(cert), with_new(key));
    // Step 1: no leftover may pair with the new files.
    remove_if_there(&cert_new)?;
    state_file::write_synced(&key_new, kp.serialize_pem().as_bytes(), 0o600).map_err(io_err(&key_new))?;
    state_file::write_synced(&cert_new, c.pem().as_bytes(), 0o600).map_err(io_err(&cert_new))?;
    sync_dirs(cert, key)?;
    // Steps 2 and 3.
    rename_synced(&key_new, key)?;
    rename_synced(&cert_new, cert)?;
    Identity::load(cert, key)
}

/// Finish or undo an update of the pair at `cert`/`key` that a crash
/// interrupted (see the module documentation); nothing if there was none.
pub fn finish_update(cert: &Path, key: &Path) -> Result<(), TlsError> {
    let dir = parent(cert);
    if !dir.is_dir() {
        return Ok(());
    }
    let _lock = lock_dir(dir)?;
    finish_update_locked(cert, key)
}

fn finish_update_locked(cert: &Path, key: &Path) -> Result<(), TlsError> {
    let (cert_new, key_new) = (with_new(cert), with_new(key));
    let (has_cert_new, has_key_new) = (is_there(&cert_new)?, is_there(&key_new)?);
    if !has_cert_new && !has_key_new {
        return Ok(());
    }
    let c = if has_cert_new { &cert_new } else { cert };
    let k = if has_key_new { &key_new } else { key };
    if Identity::load(c, k).is_ok_and(|id| keys_match(&id)) {
        // Past step 1: roll forward. The contents may still be only in the
        // page cache (the process died, not the machine).
        for (there, p) in [(has_key_new, &key_new), (has_cert_new, &cert_new)] {
            if there {
                std::fs::File::open(p).and_then(|f| f.sync_all()).map_err(io_err(p))?;
            }
        }
        if has_key_new {
            rename_synced(&key_new, key)?;
        }
        if has_cert_new {
            rename_synced(&cert_new, cert)?;
        }
        tracing::info!(cert = %cert.display(), "finished an update of the certificate and key interrupted by a crash");
    } else {
        // Within step 1: the old pair stands.
        remove_if_there(&cert_new)?;
        remove_if_there(&key_new)?;
        sync_dirs(cert, key)?;
        tracing::warn!(cert = %cert.display(), "removed an incomplete update of the certificate and key left by a crash");
    }
    Ok(())
}

/// `cert`/`key` if given, else the generated pair under `state_dir`
/// (created on first use, after finishing an interrupted update; see the
/// module documentation). Returns whether it was generated now.
pub fn load_or_generate(
    state_dir: &Path,
    given: Option<(&Path, &Path)>,
    extra_sans: &[String],
) -> Result<(Identity, bool), TlsError> {
    if let Some((c, k)) = given {
        return Ok((Identity::load(c, k)?, false));
    }
    let (c, k) = default_paths(state_dir);
    let dir = create_dir(&c)?;
    let _lock = lock_dir(&dir)?;
    finish_update_locked(&c, &k)?;
    match (is_there(&c)?, is_there(&k)?) {
        (true, true) => {
            let id = Identity::load(&c, &k)?;
            if !keys_match(&id) {
                return Err(TlsError::Mismatch { cert: c, key: k });
            }
            Ok((id, false))
        }
        (false, false) => Ok((generate_locked(&c, &k, &default_sans(extra_sans))?, true)),
        (true, false) => Err(TlsError::HalfPair { present: c, missing: k }),
        (false, true) => Err(TlsError::HalfPair { present: k, missing: c }),
    }
}

/// Whether the private key is the leaf certificate's (true when the
/// provider cannot tell, as rustls itself decides).
fn keys_match(id: &Identity) -> bool {
    let Some(leaf) = id.chain.first() else { return false };
    let Ok(signing) = smbq_crypto::tls_provider().key_provider.load_private_key(id.key.clone_key()) else {
        return false;
    };
    matches!(
        rustls::sign::CertifiedKey::new(vec![leaf.clone()], signing).keys_match(),
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown))
    )
}

fn with_new(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".new");
    PathBuf::from(p)
}

fn parent(path: &Path) -> &Path {
    path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Creates the directory of `path` if needed (durably); returns it.
fn create_dir(path: &Path) -> Result<PathBuf, TlsError> {
    let dir = parent(path);
    if !dir.is_dir() {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        state_file::sync_dir(dir).map_err(io_err(dir))?;
    }
    Ok(dir.to_path_buf())
}

/// An exclusive `flock` on `dir`, released when the returned file closes.
fn lock_dir(dir: &Path) -> Result<std::fs::File, TlsError> {
    let f = std::fs::File::open(dir).map_err(io_err(dir))?;
    loop {
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive) {
            Ok(()) => return Ok(f),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(io_err(dir)(e.into())),
        }
    }
}

fn is_there(path: &Path) -> Result<bool, TlsError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(path)(e)),
    }
}

fn remove_if_there(path: &Path) -> Result<(), TlsError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(path)(e)),
        _ => Ok(()),
    }
}

fn rename_synced(from: &Path, to: &Path) -> Result<(), TlsError> {
    std::fs::rename(from, to).map_err(io_err(to))?;
    state_file::sync_dir(to).map_err(io_err(parent(to)))
}

/// Fsyncs the directories of `cert` and `key` (one when they share it).
fn sync_dirs(cert: &Path, key: &Path) -> Result<(), TlsError> {
    state_file::sync_dir(cert).map_err(io_err(parent(cert)))?;
    if parent(key) != parent(cert) {
        state_file::sync_dir(key).map_err(io_err(parent(key)))?;
    }
    Ok(())
}

pub use smbq_crypto::tls::{fingerprint, fingerprint_bytes, parse_fingerprint};

/// Which clients may connect over QUIC.
#[derive(Clone, Debug, Default)]
pub struct ClientAccess {
    /// Ask for and require a client certificate.
    pub require_cert: bool,
    /// SHA-256 fingerprints of allowed client certificates.
    pub fingerprints: Vec<[u8; 32]>,
    /// PEM file of CAs whose (non-expired) leaf certificates are allowed.
    pub ca: Option<PathBuf>,
}

/// The certificate the server presents, replaceable while it runs (a
/// reload, a renewal): each handshake takes the one current when it
/// starts, so connections made before a replacement keep theirs.
#[derive(Debug)]
pub struct Certificates {
    current: std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>,
}

impl Certificates {
    pub fn new(id: &Identity) -> Result<Arc<Certificates>, TlsError> {
        Ok(Arc::new(Certificates { current: std::sync::RwLock::new(certified(id)?) }))
    }

    /// Present `id` from the next handshake on. A key that is not the
    /// leaf certificate's is refused and the current pair stays.
    pub fn replace(&self, id: &Identity) -> Result<(), TlsError> {
        let new = certified(id)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = new;
        Ok(())
    }

    /// The leaf certificate presented now.
    pub fn leaf(&self) -> Option<CertificateDer<'static>> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).cert.first().cloned()
    }
}

/// `id` as rustls presents it; a key that is not the leaf's is an error.
fn certified(id: &Identity) -> Result<Arc<rustls::sign::CertifiedKey>, TlsError> {
    if !keys_match(id) {
        return Err(TlsError::Mismatch { cert: id.cert_path.clone(), key: id.cert_path.with_extension("key") });
    }
    let key = smbq_crypto::tls_provider().key_provider.load_private_key(id.key.clone_key())?;
    Ok(Arc::new(rustls::sign::CertifiedKey::new(id.chain.clone(), key)))
}

impl rustls::server::ResolvesServerCert for Certificates {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner())))
    }
}

/// TLS 1.3 server configuration with ALPN "smb", presenting what `certs`
/// holds at each handshake.
pub fn server_config(certs: Arc<Certificates>, access: &ClientAccess) -> Result<rustls::ServerConfig, TlsError> {
    let provider = Arc::new(smbq_crypto::tls_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let builder = if access.require_cert {
        let ca = match &access.ca {
            Some(path) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in load_certs(path)? {
                    roots.add(c).map_err(|e| TlsError::ClientCa(e.to_string()))?;
                }
                Some(
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| TlsError::ClientCa(e.to_string()))?,
                )
            }
            None => None,
        };
        builder.with_client_cert_verifier(Arc::new(AllowList { fingerprints: access.fingerprints.clone(), ca, provider }))
    } else {
        builder.with_no_client_auth()
    };
    let mut cfg = builder.with_cert_resolver(certs);
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    // No TLS 1.3 session tickets (RFC 8446 4.6.1) by default: Samba
    // 4.23+'s QUIC client (ngtcp2 over GnuTLS) frees its TLS state once
    // the handshake is done, so a ticket that arrives later in a 1-RTT
    // CRYPTO frame fails it (GnuTLS "Epoch ... out of range", alert
    // internal_error, ngtcp2 ERR_CRYPTO): see the README. Clients that ask
    // get tickets (`quic::zero_rtt::TicketsOnRequest`, docs/zero-rtt.md).
    cfg.send_tls13_tickets = 0;
    // Resumption is stateful, so tickets are single use (rustls `take`s
    // the session: `attempt_tls13_ticket_decryption` in rustls 0.23
    // server/tls13.rs) and a replayed ClientHello's early data is
    // refused (RFC 8446 8.1); rustls allows early data only so. The
    // builder's ticketer (none: `NeverProducesTickets`) stays.
    cfg.session_storage = rustls::server::ServerSessionMemoryCache::new(crate::quic::zero_rtt::SESSIONS);
    // 0-RTT for resumed sessions: QUIC takes no limit but u32::MAX
    // (RFC 9001 4.6.1: max_early_data_size must be 0xffffffff).
    cfg.max_early_data_size = u32::MAX;
    Ok(cfg)
}

/// Client certificates allowed by fingerprint or by CA.
#[derive(Debug)]
struct AllowList {
    fingerprints: Vec<[u8; 32]>,
    ca: Option<Arc<dyn ClientCertVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for AllowList {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.ca.as_ref().map(|c| c.root_hint_subjects()).unwrap_or(&[])
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if self.fingerprints.contains(&fingerprint_bytes(end_entity)) {
            return Ok(ClientCertVerified::assertion());
        }
        if let Some(ca) = &self.ca {
            if ca.verify_client_cert(end_entity, intermediates, now).is_ok() {
                return Ok(ClientCertVerified::assertion());
            }
        }
        tracing::warn!(fingerprint = %fingerprint(end_entity), "QUIC client certificate refused: not allowed");
        Err(rustls::Error::InvalidCertificate(rustls::CertificateError::ApplicationVerificationFailure))
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::PeerIncompatible(rustls::PeerIncompatible::Tls12NotOffered))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Microsoft's requirements for an SMB over QUIC server certificate
    /// ("SMB over QUIC", Windows Server docs): Server Authentication EKU,
    /// digital signature key usage, a subject, a DNS SAN for each name
    /// clients use, an ECDSA P-256 (or RSA 2048+) key, a SHA-256 signature.
    #[test]
    fn generated_certificate_meets_microsofts_smb_over_quic_checklist() {
        use x509_parser::oid_registry::{OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_SIG_ECDSA_WITH_SHA256};
        use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = default_paths(dir.path());
        let id = generate(&c, &k, &default_sans(&["files.example".into()])).unwrap();
        let (_, cert) = X509Certificate::from_der(&id.chain[0]).unwrap();
        let eku = cert.extended_key_usage().unwrap().expect("an EKU extension");
        assert!(eku.value.server_auth, "serverAuth EKU");
        let ku = cert.key_usage().unwrap().expect("a key usage extension");
        assert!(ku.value.digital_signature(), "digitalSignature key usage");
        assert!(cert.subject().iter_common_name().next().is_some(), "a subject CN");
        let san = cert.subject_alternative_name().unwrap().expect("a SAN extension");
        let dns: Vec<&str> = san
            .value
            .general_names
            .iter()
            .filter_map(|n| if let GeneralName::DNSName(d) = n { Some(*d) } else { None })
            .collect();
        assert!(dns.contains(&"localhost") && dns.contains(&"files.example"), "DNS SANs: {dns:?}");
        let key = &cert.public_key().algorithm;
        assert_eq!(key.algorithm, OID_KEY_TYPE_EC_PUBLIC_KEY, "an EC key");
        let curve = key.parameters.as_ref().and_then(|p| p.as_oid().ok());
        assert_eq!(curve, Some(OID_EC_P256), "on P-256");
        assert_eq!(cert.signature_algorithm.algorithm, OID_SIG_ECDSA_WITH_SHA256, "signed with SHA-256");
    }

    #[test]
    fn generated_certificate_verifies_for_localhost() {
        use rustls::client::danger::ServerCertVerifier;
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = default_paths(dir.path());
        let id = generate(&c, &k, &default_sans(&["files.example".into()])).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&k).unwrap().permissions().mode() & 0o777, 0o600);
        // A client trusting exactly this certificate accepts it for the names it covers.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(id.chain[0].clone()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
        )
        .build()
        .unwrap();
        let now = UnixTime::now();
        for name in ["localhost", "files.example", "127.0.0.1"] {
            let sn = rustls::pki_types::ServerName::try_from(name).unwrap();
            verifier.verify_server_cert(&id.chain[0], &[], &sn, &[], now).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let other = rustls::pki_types::ServerName::try_from("elsewhere.example").unwrap();
        assert!(verifier.verify_server_cert(&id.chain[0], &[], &other, &[], now).is_err());
        // Loading it again gives the same fingerprint.
        let (again, fresh) = load_or_generate(dir.path(), None, &[]).unwrap();
        assert!(!fresh);
        assert_eq!(again.fingerprint(), id.fingerprint());
        assert_eq!(parse_fingerprint(&id.fingerprint()).map(|f| fingerprint_bytes(&id.chain[0]) == f), Some(true));
    }

    #[test]
    fn fingerprints_parse() {
        let fp = "ab:".repeat(31) + "ab";
        assert_eq!(parse_fingerprint(&fp), Some([0xAB; 32]));
        assert_eq!(parse_fingerprint(&"AB".repeat(32)), Some([0xAB; 32]));
        assert_eq!(parse_fingerprint("abcd"), None);
        assert_eq!(parse_fingerprint(&"zz".repeat(32)), None);
    }

    /// A state directory holding an old generated pair, and the files of a
    /// second pair, to lay out as an update interrupted at some point.
    struct Update {
        dir: tempfile::TempDir,
        cert: PathBuf,
        key: PathBuf,
        old: String,
        new_cert: Vec<u8>,
        new_key: Vec<u8>,
        new: String,
    }

    fn update() -> Update {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = default_paths(dir.path());
        let old = generate(&cert, &key, &["localhost".into()]).unwrap().fingerprint();
        let other = tempfile::tempdir().unwrap();
        let (c2, k2) = default_paths(other.path());
        let new = generate(&c2, &k2, &["localhost".into()]).unwrap().fingerprint();
        assert_ne!(old, new);
        Update { new_cert: std::fs::read(c2).unwrap(), new_key: std::fs::read(k2).unwrap(), dir, cert, key, old, new }
    }

    fn tls_file(u: &Update, name: &str) -> PathBuf {
        u.dir.path().join("tls").join(name)
    }

    fn tls_files(u: &Update) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(u.dir.path().join("tls"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn assert_key_matches(id: &Identity) {
        let key = rustls::crypto::aws_lc_rs::default_provider().key_provider.load_private_key(id.key.clone_key()).unwrap();
        rustls::sign::CertifiedKey::new(id.chain.clone(), key).keys_match().unwrap();
    }

    /// Loads the state directory twice: the first load finishes the update,
    /// the second sees the same identity; neither generates one.
    fn load_twice(u: &Update) -> Identity {
        let (id, fresh) = load_or_generate(u.dir.path(), None, &[]).unwrap();
        assert!(!fresh, "generated a new identity");
        assert_key_matches(&id);
        let (again, fresh) = load_or_generate(u.dir.path(), None, &[]).unwrap();
        assert!(!fresh);
        assert_eq!(again.fingerprint(), id.fingerprint());
        assert_eq!(tls_files(u), ["cert.pem", "key.pem"]);
        id
    }

    #[test]
    fn crash_between_the_renames_rolls_forward_to_the_new_pair() {
        // The key was renamed into place, the certificate not yet.
        let u = update();
        std::fs::write(&u.key, &u.new_key).unwrap();
        std::fs::write(tls_file(&u, "cert.pem.new"), &u.new_cert).unwrap();
        assert_eq!(load_twice(&u).fingerprint(), u.new);
    }

    #[test]
    fn crash_between_the_renames_of_the_first_generation_keeps_that_identity() {
        let u = update();
        std::fs::remove_file(&u.cert).unwrap();
        std::fs::write(&u.key, &u.new_key).unwrap();
        std::fs::write(tls_file(&u, "cert.pem.new"), &u.new_cert).unwrap();
        assert_eq!(load_twice(&u).fingerprint(), u.new);
    }

    #[test]
    fn crash_before_the_renames_rolls_a_complete_new_pair_forward() {
        let u = update();
        std::fs::write(tls_file(&u, "key.pem.new"), &u.new_key).unwrap();
        std::fs::write(tls_file(&u, "cert.pem.new"), &u.new_cert).unwrap();
        assert_eq!(load_twice(&u).fingerprint(), u.new);
    }

    #[test]
    fn crash_while_writing_the_new_pair_keeps_the_old_one() {
        let u = update();
        std::fs::write(tls_file(&u, "key.pem.new"), &u.new_key).unwrap();
        std::fs::write(tls_file(&u, "cert.pem.new"), &u.new_cert[..u.new_cert.len() / 2]).unwrap();
        assert_eq!(load_twice(&u).fingerprint(), u.old);
        // Only the new key was written.
        std::fs::write(tls_file(&u, "key.pem.new"), &u.new_key).unwrap();
        assert_eq!(load_twice(&u).fingerprint(), u.old);
    }

    #[test]
    fn mismatched_pair_is_an_error_not_a_new_identity() {
        let u = update();
        std::fs::write(&u.key, &u.new_key).unwrap();
        let e = load_or_generate(u.dir.path(), None, &[]).err().expect("a key that is not the certificate's loaded");
        assert!(e.to_string().contains("do not match"), "{e}");
        assert_eq!(std::fs::read(&u.key).unwrap(), u.new_key);
        assert_eq!(tls_files(&u), ["cert.pem", "key.pem"]);
    }

    #[test]
    fn half_a_pair_is_an_error_not_a_new_identity() {
        let u = update();
        let key = std::fs::read(&u.key).unwrap();
        std::fs::remove_file(&u.cert).unwrap();
        let e = load_or_generate(u.dir.path(), None, &[]).err().expect("generated a new identity beside a key");
        assert!(e.to_string().contains("cert.pem"), "{e}");
        assert_eq!(std::fs::read(&u.key).unwrap(), key);
        assert_eq!(tls_files(&u), ["key.pem"]);
    }

    #[test]
    fn generate_replaces_the_pair_and_leaves_no_other_file() {
        let u = update();
        // Leftovers of an update that crashed: a stale new key, world-readable.
        std::fs::write(tls_file(&u, "key.pem.new"), &u.new_key).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tls_file(&u, "key.pem.new"), std::fs::Permissions::from_mode(0o644)).unwrap();
        let id = generate(&u.cert, &u.key, &["localhost".into()]).unwrap();
        assert_key_matches(&id);
        assert_ne!(id.fingerprint(), u.old);
        assert_ne!(id.fingerprint(), u.new);
        assert_eq!(std::fs::metadata(&u.key).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(tls_files(&u), ["cert.pem", "key.pem"]);
        assert_eq!(load_twice(&u).fingerprint(), id.fingerprint());
    }

    #[test]
    fn missing_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let e = Identity::load(&dir.path().join("nope.pem"), &dir.path().join("k.pem")).err().unwrap();
        assert!(e.to_string().contains("nope.pem"), "{e}");
    }
}
