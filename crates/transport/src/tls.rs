//! Certificates and TLS 1.3 configuration for SMB over QUIC.
//!
//! The server presents a PEM chain and key given by the operator, or one it
//! generated once under `STATE_DIR/tls/`: an ECDSA P-256 leaf (CA:FALSE,
//! serverAuth EKU, SANs for `localhost`, the host name and its addresses)
//! that a Windows client or rustls/webpki accepts once trusted.
//! Optionally clients must present a certificate, allowed by SHA-256
//! fingerprint or by a CA (as Windows Server 2025's SMB over QUIC client
//! access control does); others are refused during the handshake.

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
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

/// Generate an ECDSA P-256 leaf certificate for `sans` and write it to
/// `cert`/`key` (the key with mode 0600).
pub fn generate(cert: &Path, key: &Path, sans: &[String]) -> Result<Identity, TlsError> {
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
    if let Some(dir) = cert.parent() {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    write_private(key, kp.serialize_pem().as_bytes())?;
    write_private(cert, c.pem().as_bytes())?;
    Identity::load(cert, key)
}

fn write_private(path: &Path, data: &[u8]) -> Result<(), TlsError> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    f.write_all(data).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

/// `cert`/`key` if given, else the generated pair under `state_dir`
/// (created on first use). Returns whether it was generated now.
pub fn load_or_generate(
    state_dir: &Path,
    given: Option<(&Path, &Path)>,
    extra_sans: &[String],
) -> Result<(Identity, bool), TlsError> {
    if let Some((c, k)) = given {
        return Ok((Identity::load(c, k)?, false));
    }
    let (c, k) = default_paths(state_dir);
    if c.exists() && k.exists() {
        return Ok((Identity::load(&c, &k)?, false));
    }
    Ok((generate(&c, &k, &default_sans(extra_sans))?, true))
}

/// `AB:CD:...` SHA-256 of a DER certificate.
pub fn fingerprint(der: &[u8]) -> String {
    let d = Sha256::digest(der);
    d.iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":")
}

/// Parse a fingerprint written with or without colons, any case.
pub fn parse_fingerprint(s: &str) -> Option<[u8; 32]> {
    let hex: String = s.chars().filter(|c| *c != ':').collect();
    let v = hex::decode(hex).ok()?;
    v.try_into().ok()
}

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

/// TLS 1.3 server configuration with ALPN "smb".
pub fn server_config(id: &Identity, access: &ClientAccess) -> Result<rustls::ServerConfig, TlsError> {
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
    let mut cfg = builder.with_single_cert(id.chain.clone(), id.key.clone_key())?;
    cfg.alpn_protocols = vec![ALPN.to_vec()];
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
        let fp: [u8; 32] = Sha256::digest(end_entity.as_ref()).into();
        if self.fingerprints.contains(&fp) {
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

    fn fingerprint_bytes(der: &[u8]) -> [u8; 32] {
        Sha256::digest(der).into()
    }

    #[test]
    fn fingerprints_parse() {
        let fp = "ab:".repeat(31) + "ab";
        assert_eq!(parse_fingerprint(&fp), Some([0xAB; 32]));
        assert_eq!(parse_fingerprint(&"AB".repeat(32)), Some([0xAB; 32]));
        assert_eq!(parse_fingerprint("abcd"), None);
        assert_eq!(parse_fingerprint(&"zz".repeat(32)), None);
    }

    #[test]
    fn missing_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let e = Identity::load(&dir.path().join("nope.pem"), &dir.path().join("k.pem")).err().unwrap();
        assert!(e.to_string().contains("nope.pem"), "{e}");
    }
}
