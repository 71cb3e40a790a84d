//! The rustls provider for SMB over QUIC (MS-SMB2 2.1: QUIC with TLS 1.3).
//!
//! Key exchange, signatures and randomness come from aws-lc-rs (its default
//! includes the post-quantum X25519MLKEM768 group); the TLS 1.3 cipher
//! suites, and so QUIC's packet protection (RFC 9001 5.3), come from ring,
//! whose AES-GCM is the one SMB encryption uses too ([`crate::Sealer`]).

use rustls::crypto::{aws_lc_rs, ring, CryptoProvider};

/// TLS 1.3 suites from ring, everything else from aws-lc-rs.
pub fn tls_provider() -> CryptoProvider {
    CryptoProvider {
        cipher_suites: vec![
            ring::cipher_suite::TLS13_AES_128_GCM_SHA256,
            ring::cipher_suite::TLS13_AES_256_GCM_SHA384,
            ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        ],
        ..aws_lc_rs::default_provider()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_are_tls13_only_and_groups_keep_post_quantum() {
        let p = tls_provider();
        assert!(p.cipher_suites.iter().all(|s| s.version() == &rustls::version::TLS13));
        assert!(p.kx_groups.iter().any(|g| g.name() == rustls::NamedGroup::X25519MLKEM768));
        assert!(p.cipher_suites.iter().all(|s| s.tls13().and_then(|t| t.quic_suite()).is_some()));
    }
}

/// The SHA-256 of a DER certificate: what pins compare.
pub fn fingerprint_bytes(der: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(der).into()
}

/// `AB:CD:...` SHA-256 of a DER certificate (how `smbq cert show` prints it).
pub fn fingerprint(der: &[u8]) -> String {
    fingerprint_bytes(der).iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":")
}

/// Parse a SHA-256 fingerprint written with or without colons, any case.
pub fn parse_fingerprint(s: &str) -> Option<[u8; 32]> {
    let digits: Vec<u8> = s.bytes().filter(|c| *c != b':').collect();
    if digits.len() != 64 {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(digits.chunks(2)) {
        *o = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}
