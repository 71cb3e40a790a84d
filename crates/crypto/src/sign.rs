//! MS-SMB2 3.1.4.1 (signing an outgoing message) and 3.1.5.1 (verifying an
//! incoming message).

use std::fmt;

use aes::Aes128;
use aws_lc_rs::{aead, constant_time, hmac};
use cmac::digest::KeyInit;
use cmac::{Cmac, Mac};

/// Length of the SMB2 header (MS-SMB2 2.2.1).
const HEADER_LEN: usize = 64;
/// The Signature field is the last 16 bytes of the SMB2 header.
const SIG_START: usize = 48;
const ZERO_SIG: [u8; 16] = [0; 16];
/// MS-SMB2 2.2.1.2: Flags bit SMB2_FLAGS_SERVER_TO_REDIR.
const FLAGS_SERVER_TO_REDIR: u32 = 0x0000_0001;
/// MS-SMB2 2.2.1: Command value of SMB2 CANCEL.
const COMMAND_CANCEL: u16 = 0x000C;

/// Signing algorithm, with the ids of MS-SMB2 2.2.3.1.7
/// (SMB2_SIGNING_CAPABILITIES).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SigningAlgorithm {
    /// 0x0000: HMAC-SHA256 truncated to 16 bytes (dialects 2.0.2 and 2.1).
    HmacSha256,
    /// 0x0001: AES-128-CMAC (3.0, 3.0.2, and 3.1.1 by default).
    AesCmac,
    /// 0x0002: AES-128-GMAC (3.1.1 when negotiated).
    AesGmac,
}

impl SigningAlgorithm {
    /// The algorithm for a SigningAlgorithms id, if known.
    pub fn from_id(id: u16) -> Option<Self> {
        match id {
            0 => Some(Self::HmacSha256),
            1 => Some(Self::AesCmac),
            2 => Some(Self::AesGmac),
            _ => None,
        }
    }

    /// The id of MS-SMB2 2.2.3.1.7.
    pub fn id(self) -> u16 {
        match self {
            Self::HmacSha256 => 0,
            Self::AesCmac => 1,
            Self::AesGmac => 2,
        }
    }
}

/// Signs and verifies whole SMB2 messages (64-byte header + body, including
/// any padding up to the next compound element) with one key.
///
/// The key schedule is built once here and reused for every message.
pub struct Signer {
    kind: Kind,
}

enum Kind {
    HmacSha256(Box<hmac::Key>),
    AesCmac(Box<Cmac<Aes128>>),
    AesGmac(aead::LessSafeKey),
}

/// Keys are secrets: show only the algorithm.
impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("algorithm", &self.algorithm())
            .finish_non_exhaustive()
    }
}

/// AES-128 keys are 16 bytes. SMB signing keys always are (Session.SessionKey
/// or a KDF output); any other length is cut or zero-padded to 16 like
/// Session.SessionKey (MS-SMB2 3.3.1.8) rather than panicking.
fn aes128_key(key: &[u8]) -> [u8; 16] {
    let mut k = [0u8; 16];
    for (d, s) in k.iter_mut().zip(key) {
        *d = *s;
    }
    k
}

impl Signer {
    /// A signer for `algo` with `key` (Session.SigningKey, Channel.SigningKey,
    /// or for 2.x Session.SessionKey).
    pub fn new(algo: SigningAlgorithm, key: &[u8]) -> Signer {
        let kind = match algo {
            SigningAlgorithm::HmacSha256 => {
                Kind::HmacSha256(Box::new(hmac::Key::new(hmac::HMAC_SHA256, key)))
            }
            SigningAlgorithm::AesCmac => Kind::AesCmac(Box::new(<Cmac<Aes128> as KeyInit>::new(
                &aes128_key(key).into(),
            ))),
            SigningAlgorithm::AesGmac => {
                let unbound = aead::UnboundKey::new(&aead::AES_128_GCM, &aes128_key(key))
                    .expect("AES-128-GCM accepts a 16-byte key");
                Kind::AesGmac(aead::LessSafeKey::new(unbound))
            }
        };
        Signer { kind }
    }

    /// The algorithm this signer uses.
    pub fn algorithm(&self) -> SigningAlgorithm {
        match self.kind {
            Kind::HmacSha256(_) => SigningAlgorithm::HmacSha256,
            Kind::AesCmac(_) => SigningAlgorithm::AesCmac,
            Kind::AesGmac(_) => SigningAlgorithm::AesGmac,
        }
    }

    /// MS-SMB2 3.1.4.1: zero the Signature field (header bytes 48..64),
    /// compute the signature over the whole message and write it there.
    /// `msg` shorter than a 64-byte header is left alone.
    pub fn sign(&self, msg: &mut [u8]) {
        let Some(sig_field) = msg.get_mut(SIG_START..HEADER_LEN) else {
            return;
        };
        sig_field.fill(0);
        let sig = self.compute(msg);
        if let Some(sig_field) = msg.get_mut(SIG_START..HEADER_LEN) {
            sig_field.copy_from_slice(&sig);
        }
    }

    /// MS-SMB2 3.1.5.1: whether the Signature field of `msg` matches the
    /// signature computed over `msg` with that field zeroed. `msg` is not
    /// modified; the comparison is constant-time. False for `msg` shorter
    /// than 64 bytes.
    ///
    /// AES-GMAC needs the message contiguous, so for it this copies `msg`
    /// once (the other algorithms hash it in pieces).
    pub fn verify(&self, msg: &[u8]) -> bool {
        let Some(received) = msg.get(SIG_START..HEADER_LEN) else {
            return false;
        };
        let computed = match &self.kind {
            Kind::AesGmac(_) => {
                let mut copy = msg.to_vec();
                if let Some(sig) = copy.get_mut(SIG_START..HEADER_LEN) {
                    sig.fill(0);
                }
                self.compute(&copy)
            }
            _ => self.compute(msg),
        };
        constant_time::verify_slices_are_equal(received, &computed).is_ok()
    }

    /// The signature of `msg` (at least 64 bytes) as if its Signature field
    /// were zero. For AES-GMAC the field must really be zero in `msg`.
    fn compute(&self, msg: &[u8]) -> [u8; 16] {
        let (before_sig, rest) = msg.split_at(SIG_START.min(msg.len()));
        let after_sig = rest.get(ZERO_SIG.len()..).unwrap_or_default();
        let mut out = [0u8; 16];
        match &self.kind {
            Kind::HmacSha256(key) => {
                let mut ctx = hmac::Context::with_key(key.as_ref());
                ctx.update(before_sig);
                ctx.update(&ZERO_SIG);
                ctx.update(after_sig);
                let tag = ctx.sign();
                out.copy_from_slice(tag.as_ref().get(..16).unwrap_or(&ZERO_SIG));
            }
            Kind::AesCmac(mac) => {
                let mut mac = Cmac::clone(mac);
                mac.update(before_sig);
                mac.update(&ZERO_SIG);
                mac.update(after_sig);
                out.copy_from_slice(&mac.finalize().into_bytes());
            }
            Kind::AesGmac(key) => {
                let nonce = aead::Nonce::assume_unique_for_key(gmac_nonce(msg));
                // GMAC (RFC 4543) is GCM with the whole message as AAD and
                // nothing to encrypt. It fails only on inputs over 2^61 bytes.
                if let Ok(tag) =
                    key.seal_in_place_separate_tag(nonce, aead::Aad::from(msg), &mut [])
                {
                    out.copy_from_slice(tag.as_ref());
                }
            }
        }
        out
    }
}

/// MS-SMB2 3.1.4.1, AES-GMAC nonce (12 bytes): MessageId (header bytes
/// 24..32, little-endian, copied as is), then a 32-bit little-endian value
/// whose least significant bit is set when the sender is the server
/// (SMB2_FLAGS_SERVER_TO_REDIR in the header) and whose next bit is set for
/// an SMB2 CANCEL request; the remaining 30 bits are zero.
fn gmac_nonce(msg: &[u8]) -> [u8; 12] {
    let mut nonce = [0u8; 12];
    if let Some(message_id) = msg.get(24..32) {
        nonce[..8].copy_from_slice(message_id);
    }
    let flags = msg
        .get(16..20)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes);
    let command = msg
        .get(12..14)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u16::from_le_bytes);
    let mut role: u32 = 0;
    if flags & FLAGS_SERVER_TO_REDIR != 0 {
        role |= 1;
    }
    if command == COMMAND_CANCEL {
        role |= 2;
    }
    nonce[8..].copy_from_slice(&role.to_le_bytes());
    nonce
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [SigningAlgorithm; 3] = [
        SigningAlgorithm::HmacSha256,
        SigningAlgorithm::AesCmac,
        SigningAlgorithm::AesGmac,
    ];

    fn message(len: usize) -> Vec<u8> {
        let mut m: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        m[..4].copy_from_slice(b"\xfeSMB");
        m
    }

    #[test]
    fn ids_round_trip() {
        for a in ALL {
            assert_eq!(SigningAlgorithm::from_id(a.id()), Some(a));
        }
        assert_eq!(SigningAlgorithm::from_id(3), None);
        assert_eq!(SigningAlgorithm::AesGmac.id(), 2);
    }

    #[test]
    fn sign_then_verify_every_algorithm() {
        for a in ALL {
            let s = Signer::new(a, &[0x42; 16]);
            assert_eq!(s.algorithm(), a);
            for len in [64, 65, 100, 4096] {
                let mut m = message(len);
                let orig = m.clone();
                s.sign(&mut m);
                assert_ne!(m[48..64], orig[48..64], "{a:?}");
                assert_eq!(m[..48], orig[..48]);
                assert_eq!(m[64..], orig[64..]);
                assert!(s.verify(&m), "{a:?} len {len}");
                // Signing again gives the same signature (the old one is zeroed first).
                let again = {
                    let mut c = m.clone();
                    s.sign(&mut c);
                    c
                };
                assert_eq!(again, m);
            }
        }
    }

    #[test]
    fn any_flipped_bit_fails_verify() {
        for a in ALL {
            let s = Signer::new(a, &[0x42; 16]);
            let mut m = message(80);
            s.sign(&mut m);
            for byte in [0, 12, 24, 47, 48, 63, 64, 79] {
                let mut t = m.clone();
                t[byte] ^= 0x01;
                assert!(!s.verify(&t), "{a:?} byte {byte}");
            }
            // Appended bytes (e.g. compound padding) are covered too.
            let mut longer = m.clone();
            longer.push(0);
            assert!(!s.verify(&longer), "{a:?}");
        }
    }

    #[test]
    fn wrong_key_fails_verify() {
        for a in ALL {
            let mut m = message(70);
            Signer::new(a, &[1; 16]).sign(&mut m);
            assert!(!Signer::new(a, &[2; 16]).verify(&m), "{a:?}");
        }
    }

    #[test]
    fn short_messages() {
        for a in ALL {
            let s = Signer::new(a, &[0x42; 16]);
            let mut m = message(63);
            let orig = m.clone();
            s.sign(&mut m);
            assert_eq!(m, orig);
            assert!(!s.verify(&m));
            assert!(!s.verify(&[]));
        }
    }

    #[test]
    fn hmac_sha256_is_truncated_hmac() {
        let key = b"0123456789abcdef";
        let mut m = message(90);
        Signer::new(SigningAlgorithm::HmacSha256, key).sign(&mut m);
        let mut zeroed = m.clone();
        zeroed[48..64].fill(0);
        let full = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), &zeroed);
        assert_eq!(m[48..64], full.as_ref()[..16]);
    }

    #[test]
    fn gmac_nonce_layout() {
        let mut m = message(64);
        m[24..32].copy_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
        m[16..20].copy_from_slice(&0u32.to_le_bytes());
        m[12..14].copy_from_slice(&0x0009u16.to_le_bytes());
        assert_eq!(gmac_nonce(&m), [8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0]);
        // A server response (other flag bits do not matter).
        m[16..20].copy_from_slice(&0x1000_0009u32.to_le_bytes());
        assert_eq!(gmac_nonce(&m)[8..], [1, 0, 0, 0]);
        // A CANCEL request from the client.
        m[16..20].copy_from_slice(&0u32.to_le_bytes());
        m[12..14].copy_from_slice(&COMMAND_CANCEL.to_le_bytes());
        assert_eq!(gmac_nonce(&m)[8..], [2, 0, 0, 0]);
    }

    #[test]
    fn gmac_covers_the_direction_bit() {
        // Same bytes except the role: the signature must differ, so a
        // request cannot be reflected as a response.
        let s = Signer::new(SigningAlgorithm::AesGmac, &[9; 16]);
        let mut req = message(64);
        req[16..20].copy_from_slice(&0u32.to_le_bytes());
        let mut resp = req.clone();
        resp[16..20].copy_from_slice(&1u32.to_le_bytes());
        s.sign(&mut req);
        s.sign(&mut resp);
        assert_ne!(req[48..64], resp[48..64]);
    }

    #[test]
    fn gmac_is_gcm_tag_over_message_as_aad() {
        // Cross-check against aws-lc-rs GCM used directly with the documented
        // nonce: MessageId 5, client, not CANCEL.
        let key = [0x33u8; 16];
        let mut m = message(120);
        m[12..14].copy_from_slice(&0x0008u16.to_le_bytes());
        m[16..20].copy_from_slice(&0u32.to_le_bytes());
        m[24..32].copy_from_slice(&5u64.to_le_bytes());
        Signer::new(SigningAlgorithm::AesGmac, &key).sign(&mut m);
        let mut zeroed = m.clone();
        zeroed[48..64].fill(0);
        let k =
            aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_128_GCM, &key).expect("key"));
        let nonce = [5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let tag = k
            .seal_in_place_separate_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(&zeroed),
                &mut [],
            )
            .expect("gcm");
        assert_eq!(m[48..64], *tag.as_ref());
    }
}
