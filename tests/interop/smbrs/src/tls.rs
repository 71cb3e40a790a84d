//! The QUIC trust anchor: smb-rs's `CustomRootCerts` takes paths of DER
//! files, ignores a missing one without a word, and reads PEM as garbage.
//! We check the file ourselves and hand it a DER file.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

/// A DER certificate file: the user's own, or a converted temporary copy
/// (deleted when this is dropped).
pub enum DerFile {
    Given(PathBuf),
    Converted(tempfile::TempPath),
}

impl DerFile {
    pub fn path(&self) -> &Path {
        match self {
            DerFile::Given(p) => p,
            DerFile::Converted(p) => p,
        }
    }
}

/// The first certificate of `path` (PEM or DER) as a DER file.
pub fn root_cert_der_file(path: &Path) -> Result<DerFile> {
    let bytes = std::fs::read(path).with_context(|| format!("--root-cert {}", path.display()))?;
    let Some(der) = pem_to_der(&bytes).with_context(|| format!("--root-cert {}", path.display()))? else {
        return Ok(DerFile::Given(path.to_path_buf()));
    };
    let mut tmp = tempfile::Builder::new()
        .prefix("smbrs-client-root-")
        .suffix(".der")
        .tempfile()
        .context("temporary file for the DER root certificate")?;
    std::io::Write::write_all(&mut tmp, &der).context("writing the DER root certificate")?;
    Ok(DerFile::Converted(tmp.into_temp_path()))
}

/// `Some(der)` of the first certificate when `bytes` is PEM, `None` when it
/// is not PEM (taken to be DER already).
fn pem_to_der(bytes: &[u8]) -> Result<Option<Vec<u8>>> {
    if !bytes.trim_ascii_start().starts_with(b"-----BEGIN") {
        return Ok(None);
    }
    match CertificateDer::pem_slice_iter(bytes).next() {
        Some(Ok(cert)) => Ok(Some(cert.as_ref().to_vec())),
        Some(Err(e)) => bail!("bad PEM: {e}"),
        None => bail!("PEM file holds no CERTIFICATE block"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nAQIDBAU=\n-----END CERTIFICATE-----\n";

    #[test]
    fn pem_is_decoded_der_is_passed_through() {
        assert_eq!(pem_to_der(PEM.as_bytes()).unwrap(), Some(vec![1, 2, 3, 4, 5]));
        assert_eq!(pem_to_der(&[0x30, 0x82, 0x01]).unwrap(), None);
        assert!(pem_to_der(b"-----BEGIN PRIVATE KEY-----\nAQID\n-----END PRIVATE KEY-----\n").is_err());
    }

    #[test]
    fn converted_file_holds_der_and_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("cert.pem");
        std::fs::write(&pem, PEM).unwrap();
        let der = root_cert_der_file(&pem).unwrap();
        let path = der.path().to_path_buf();
        assert_eq!(std::fs::read(&path).unwrap(), vec![1, 2, 3, 4, 5]);
        drop(der);
        assert!(!path.exists());
        let raw = dir.path().join("cert.der");
        std::fs::write(&raw, [0x30u8, 0x03, 1, 2, 3]).unwrap();
        assert_eq!(root_cert_der_file(&raw).unwrap().path(), raw.as_path());
        assert!(root_cert_der_file(&dir.path().join("missing.pem")).is_err());
    }
}
