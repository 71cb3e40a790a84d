//! MS-SMB2 2.2.41 (SMB2 TRANSFORM_HEADER) and 3.1.4.3 (encrypting the
//! message); decryption as in 3.3.5.2.1.1.

use std::fmt;

use aes::{Aes128, Aes256};
use ring::aead;
use ccm::aead::generic_array::GenericArray;
use ccm::aead::AeadInPlace;
use ccm::consts::{U11, U16};
use ccm::Ccm;

use crate::CryptoError;

/// Length of the SMB2 TRANSFORM_HEADER (MS-SMB2 2.2.41).
pub const TRANSFORM_HEADER_LEN: usize = 52;

/// ProtocolId of the transform header: 0xFD 'S' 'M' 'B'.
const PROTOCOL_ID: [u8; 4] = [0xFD, b'S', b'M', b'B'];
/// Flags/EncryptionAlgorithm: 0x0001 (Encrypted / SMB2_ENCRYPTION_AES128_CCM).
const FLAGS_ENCRYPTED: u16 = 0x0001;
/// Header layout (MS-SMB2 2.2.41).
const SIGNATURE: std::ops::Range<usize> = 4..20;
const NONCE: std::ops::Range<usize> = 20..36;
const ORIGINAL_SIZE: std::ops::Range<usize> = 36..40;
const RESERVED: std::ops::Range<usize> = 40..42;
const FLAGS: std::ops::Range<usize> = 42..44;
const SESSION_ID: std::ops::Range<usize> = 44..52;
/// The authenticated data: Nonce through SessionId (MS-SMB2 3.1.4.3).
const AAD: std::ops::Range<usize> = 20..52;

/// Cipher, with the ids of MS-SMB2 2.2.3.1.2 (SMB2_ENCRYPTION_CAPABILITIES).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cipher {
    /// 0x0001: AES-128-CCM (the only cipher of 3.0 and 3.0.2).
    Aes128Ccm,
    /// 0x0002: AES-128-GCM.
    Aes128Gcm,
    /// 0x0003: AES-256-CCM.
    Aes256Ccm,
    /// 0x0004: AES-256-GCM.
    Aes256Gcm,
}

impl Cipher {
    /// The cipher for a Ciphers id, if known.
    pub fn from_id(id: u16) -> Option<Self> {
        match id {
            1 => Some(Self::Aes128Ccm),
            2 => Some(Self::Aes128Gcm),
            3 => Some(Self::Aes256Ccm),
            4 => Some(Self::Aes256Gcm),
            _ => None,
        }
    }

    /// The id of MS-SMB2 2.2.3.1.2.
    pub fn id(self) -> u16 {
        match self {
            Self::Aes128Ccm => 1,
            Self::Aes128Gcm => 2,
            Self::Aes256Ccm => 3,
            Self::Aes256Gcm => 4,
        }
    }

    /// Key length in bytes: 16 for AES-128, 32 for AES-256.
    pub fn key_len(self) -> usize {
        match self {
            Self::Aes128Ccm | Self::Aes128Gcm => 16,
            Self::Aes256Ccm | Self::Aes256Gcm => 32,
        }
    }

    /// Bytes of the 16-byte Nonce field the cipher uses (MS-SMB2 2.2.41):
    /// 11 for CCM (AES_CCM_Nonce), 12 for GCM (AES_GCM_Nonce).
    pub fn nonce_len(self) -> usize {
        match self {
            Self::Aes128Ccm | Self::Aes256Ccm => 11,
            Self::Aes128Gcm | Self::Aes256Gcm => 12,
        }
    }
}

/// The SessionId of an SMB2 TRANSFORM_HEADER (bytes 44..52), to find the
/// session whose key opens the message (MS-SMB2 3.3.5.2.1.1). `None` if
/// `buf` is shorter than the header; nothing else is checked.
pub fn transform_session_id(buf: &[u8]) -> Option<u64> {
    buf.get(SESSION_ID)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
}

/// Encrypts and decrypts SMB2 messages with one key (Session.EncryptionKey
/// or Session.DecryptionKey) and one cipher. The AES key schedule is built
/// once here.
pub struct Sealer {
    cipher: Cipher,
    kind: Kind,
}

enum Kind {
    Gcm(Box<aead::LessSafeKey>),
    Ccm128(Box<Ccm<Aes128, U16, U11>>),
    Ccm256(Box<Ccm<Aes256, U16, U11>>),
}

/// Keys are secrets: show only the cipher.
impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealer")
            .field("cipher", &self.cipher)
            .finish_non_exhaustive()
    }
}

/// The key cut or zero-padded to the cipher's length. Keys from
/// [`crate::derive_keys`] already have it; this only avoids a panic on a
/// caller's mistake.
fn fixed_key<const N: usize>(key: &[u8]) -> [u8; N] {
    let mut k = [0u8; N];
    for (d, s) in k.iter_mut().zip(key) {
        *d = *s;
    }
    k
}

impl Sealer {
    /// A sealer for `cipher` with `key` ([`Cipher::key_len`] bytes).
    pub fn new(cipher: Cipher, key: &[u8]) -> Sealer {
        let kind = match cipher {
            Cipher::Aes128Gcm => Kind::Gcm(Box::new(gcm_key(&aead::AES_128_GCM, &fixed_key::<16>(key)))),
            Cipher::Aes256Gcm => Kind::Gcm(Box::new(gcm_key(&aead::AES_256_GCM, &fixed_key::<32>(key)))),
            Cipher::Aes128Ccm => {
                Kind::Ccm128(Box::new(ccm::KeyInit::new(&fixed_key::<16>(key).into())))
            }
            Cipher::Aes256Ccm => {
                Kind::Ccm256(Box::new(ccm::KeyInit::new(&fixed_key::<32>(key).into())))
            }
        };
        Sealer { cipher, kind }
    }

    /// The cipher this sealer uses.
    pub fn cipher(&self) -> Cipher {
        self.cipher
    }

    /// MS-SMB2 3.1.4.3: encrypt in place.
    ///
    /// `buf` is [`TRANSFORM_HEADER_LEN`] reserved bytes followed by the
    /// plaintext SMB2 message(s). The header is filled in (ProtocolId,
    /// Signature = the AEAD tag, Nonce, OriginalMessageSize, Reserved = 0,
    /// Flags = 0x0001, SessionId) and the plaintext is replaced by the
    /// ciphertext. Only the first 11 (CCM) or 12 (GCM) bytes of `nonce` are
    /// used, the rest of the Nonce field is written as zero; the caller must
    /// never reuse a nonce with the same key (e.g. use a counter).
    ///
    /// A `buf` shorter than the header is left alone. A plaintext over
    /// `u32::MAX` bytes (OriginalMessageSize is 32 bits) cannot be sent:
    /// then the whole `buf` is zeroed rather than leave plaintext in it.
    pub fn seal(&self, session_id: u64, nonce: &[u8; 16], buf: &mut [u8]) {
        let Some((hdr, payload)) = buf.split_first_chunk_mut::<TRANSFORM_HEADER_LEN>() else {
            return;
        };
        let Ok(size) = u32::try_from(payload.len()) else {
            debug_assert!(false, "seal: plaintext over u32::MAX bytes");
            hdr.fill(0);
            payload.fill(0);
            return;
        };
        let n = self.cipher.nonce_len();
        hdr[..4].copy_from_slice(&PROTOCOL_ID);
        hdr[NONCE].fill(0);
        hdr[NONCE.start..NONCE.start + n].copy_from_slice(&nonce[..n]);
        hdr[ORIGINAL_SIZE].copy_from_slice(&size.to_le_bytes());
        hdr[RESERVED].fill(0);
        hdr[FLAGS].copy_from_slice(&FLAGS_ENCRYPTED.to_le_bytes());
        hdr[SESSION_ID].copy_from_slice(&session_id.to_le_bytes());
        let mut aad = [0u8; 32];
        aad.copy_from_slice(&hdr[AAD]);
        let nonce = &aad[..16];
        let tag: Option<[u8; 16]> = match &self.kind {
            Kind::Gcm(key) => gcm_nonce(nonce).and_then(|n| {
                key.seal_in_place_separate_tag(n, aead::Aad::from(&aad), payload)
                    .ok()
                    .and_then(|t| t.as_ref().try_into().ok())
            }),
            Kind::Ccm128(c) => ccm_seal(c.as_ref(), nonce, &aad, payload),
            Kind::Ccm256(c) => ccm_seal(c.as_ref(), nonce, &aad, payload),
        };
        match tag {
            Some(tag) => hdr[SIGNATURE].copy_from_slice(&tag),
            None => {
                // Unreachable for sizes that fit OriginalMessageSize; fail
                // closed all the same.
                debug_assert!(false, "seal: AEAD refused the input");
                hdr.fill(0);
                payload.fill(0);
            }
        }
    }

    /// MS-SMB2 3.3.5.2.1.1: check and decrypt in place.
    ///
    /// `buf` is one whole encrypted message: the transform header then the
    /// ciphertext. Checks that ciphertext follows the header, ProtocolId,
    /// Flags = 0x0001 and OriginalMessageSize = `buf.len() - 52`, then
    /// verifies the tag (Signature) over the ciphertext and the header bytes
    /// 20..52 as received, and decrypts. Returns the plaintext, which is the
    /// part of `buf` after the header. After an error the contents of `buf`
    /// are unspecified and must be discarded. SessionId is not checked here:
    /// use [`transform_session_id`] to pick the key first.
    pub fn open<'a>(&self, buf: &'a mut [u8]) -> Result<&'a mut [u8], CryptoError> {
        let total = buf.len();
        let Some((hdr, payload)) = buf.split_first_chunk_mut::<TRANSFORM_HEADER_LEN>() else {
            return Err(CryptoError::TooShort(total));
        };
        if payload.is_empty() {
            return Err(CryptoError::TooShort(total));
        }
        if hdr[..4] != PROTOCOL_ID {
            return Err(CryptoError::BadProtocolId);
        }
        let flags = u16::from_le_bytes([hdr[FLAGS.start], hdr[FLAGS.start + 1]]);
        if flags != FLAGS_ENCRYPTED {
            return Err(CryptoError::BadFlags(flags));
        }
        let mut size = [0u8; 4];
        size.copy_from_slice(&hdr[ORIGINAL_SIZE]);
        let declared = u32::from_le_bytes(size);
        if usize::try_from(declared).ok() != Some(payload.len()) {
            return Err(CryptoError::BadLength {
                declared,
                actual: payload.len(),
            });
        }
        let mut aad = [0u8; 32];
        aad.copy_from_slice(&hdr[AAD]);
        let mut tag = [0u8; 16];
        tag.copy_from_slice(&hdr[SIGNATURE]);
        let nonce = &aad[..16];
        let ok = match &self.kind {
            Kind::Gcm(key) => gcm_nonce(nonce).is_some_and(|n| {
                key.open_in_place_separate_tag(n, aead::Aad::from(&aad), aead::Tag::from(tag), payload, 0..)
                    .is_ok()
            }),
            Kind::Ccm128(c) => ccm_open(c.as_ref(), nonce, &aad, &tag, payload),
            Kind::Ccm256(c) => ccm_open(c.as_ref(), nonce, &aad, &tag, payload),
        };
        if ok {
            Ok(payload)
        } else {
            Err(CryptoError::BadTag)
        }
    }
}

fn gcm_key(alg: &'static aead::Algorithm, key: &[u8]) -> aead::LessSafeKey {
    aead::LessSafeKey::new(
        aead::UnboundKey::new(alg, key).expect("AES-GCM accepts the key length it is given"),
    )
}

/// AES_GCM_Nonce: the first 12 bytes of the Nonce field.
fn gcm_nonce(field: &[u8]) -> Option<aead::Nonce> {
    let n: [u8; 12] = field.get(..12)?.try_into().ok()?;
    Some(aead::Nonce::assume_unique_for_key(n))
}

/// AES-CCM with a 16-byte tag and the 11-byte AES_CCM_Nonce (the first 11
/// bytes of the Nonce field).
fn ccm_seal<C: AeadInPlace<NonceSize = U11, TagSize = U16>>(
    c: &C,
    field: &[u8],
    aad: &[u8],
    payload: &mut [u8],
) -> Option<[u8; 16]> {
    let nonce = GenericArray::from_slice(field.get(..11)?);
    let tag = c.encrypt_in_place_detached(nonce, aad, payload).ok()?;
    Some(tag.into())
}

fn ccm_open<C: AeadInPlace<NonceSize = U11, TagSize = U16>>(
    c: &C,
    field: &[u8],
    aad: &[u8],
    tag: &[u8; 16],
    payload: &mut [u8],
) -> bool {
    let Some(n) = field.get(..11) else {
        return false;
    };
    c.decrypt_in_place_detached(GenericArray::from_slice(n), aad, payload, tag.into())
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Cipher; 4] = [
        Cipher::Aes128Ccm,
        Cipher::Aes128Gcm,
        Cipher::Aes256Ccm,
        Cipher::Aes256Gcm,
    ];

    fn key(c: Cipher) -> Vec<u8> {
        (0..c.key_len() as u8).map(|i| i.wrapping_mul(13)).collect()
    }

    fn plaintext(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 + 1) as u8).collect()
    }

    fn sealed(c: Cipher, pt: &[u8]) -> Vec<u8> {
        let mut buf = vec![0xEEu8; TRANSFORM_HEADER_LEN];
        buf.extend_from_slice(pt);
        let nonce: [u8; 16] = core::array::from_fn(|i| 0xA0 + i as u8);
        Sealer::new(c, &key(c)).seal(0x1122_3344_5566_7788, &nonce, &mut buf);
        buf
    }

    #[test]
    fn ids_and_lengths() {
        for c in ALL {
            assert_eq!(Cipher::from_id(c.id()), Some(c));
        }
        assert_eq!(Cipher::from_id(0), None);
        assert_eq!(Cipher::from_id(5), None);
        assert_eq!(Cipher::Aes128Ccm.id(), 1);
        assert_eq!(Cipher::Aes256Gcm.id(), 4);
        assert_eq!(Cipher::Aes128Gcm.key_len(), 16);
        assert_eq!(Cipher::Aes256Ccm.key_len(), 32);
    }

    #[test]
    fn header_layout() {
        for c in ALL {
            let buf = sealed(c, &plaintext(100));
            assert_eq!(buf[..4], PROTOCOL_ID);
            let n = c.nonce_len();
            let expect_nonce: Vec<u8> = (0..16)
                .map(|i| if i < n { 0xA0 + i as u8 } else { 0 })
                .collect();
            assert_eq!(buf[NONCE], expect_nonce[..], "{c:?}");
            assert_eq!(buf[ORIGINAL_SIZE], 100u32.to_le_bytes());
            assert_eq!(buf[RESERVED], [0, 0]);
            assert_eq!(buf[FLAGS], [1, 0]);
            assert_eq!(buf[SESSION_ID], 0x1122_3344_5566_7788u64.to_le_bytes());
            assert_eq!(transform_session_id(&buf), Some(0x1122_3344_5566_7788));
            assert_ne!(buf[52..], plaintext(100)[..]);
        }
    }

    #[test]
    fn round_trip_every_cipher() {
        for c in ALL {
            for len in [1, 15, 16, 17, 64, 1000, 65536 + 3] {
                let pt = plaintext(len);
                let mut buf = sealed(c, &pt);
                let s = Sealer::new(c, &key(c));
                assert_eq!(s.cipher(), c);
                let opened = s
                    .open(&mut buf)
                    .unwrap_or_else(|e| panic!("{c:?} {len}: {e}"));
                assert_eq!(opened, &pt[..]);
            }
        }
    }

    #[test]
    fn tampering_fails() {
        for c in ALL {
            let good = sealed(c, &plaintext(200));
            // Signature, every AAD field, first/last ciphertext byte.
            for byte in [4, 19, 20, 35, 38, 40, 41, 44, 51, 52, good.len() - 1] {
                let mut t = good.clone();
                t[byte] ^= 0x01;
                let r = Sealer::new(c, &key(c)).open(&mut t);
                let expected = if byte == 38 {
                    CryptoError::BadLength {
                        declared: 200 + (1 << 16),
                        actual: 200,
                    }
                } else {
                    CryptoError::BadTag
                };
                assert_eq!(r.map(|_| ()), Err(expected), "{c:?} byte {byte}");
            }
        }
    }

    #[test]
    fn wrong_key_or_cipher_fails() {
        for c in ALL {
            let mut t = sealed(c, &plaintext(50));
            let mut other = key(c);
            other[0] ^= 0x80;
            assert_eq!(
                Sealer::new(c, &other).open(&mut t).map(|_| ()),
                Err(CryptoError::BadTag)
            );
        }
        let mut t = sealed(Cipher::Aes128Ccm, &plaintext(50));
        let s = Sealer::new(Cipher::Aes128Gcm, &key(Cipher::Aes128Gcm));
        assert_eq!(s.open(&mut t).map(|_| ()), Err(CryptoError::BadTag));
    }

    #[test]
    fn header_checks() {
        let c = Cipher::Aes128Gcm;
        let s = Sealer::new(c, &key(c));
        let good = sealed(c, &plaintext(30));

        let mut t = good.clone();
        t[0] = 0xFE;
        assert_eq!(s.open(&mut t).map(|_| ()), Err(CryptoError::BadProtocolId));

        let mut t = good.clone();
        t[FLAGS].copy_from_slice(&2u16.to_le_bytes());
        assert_eq!(s.open(&mut t).map(|_| ()), Err(CryptoError::BadFlags(2)));

        let mut t = good.clone();
        t[ORIGINAL_SIZE].copy_from_slice(&29u32.to_le_bytes());
        assert_eq!(
            s.open(&mut t).map(|_| ()),
            Err(CryptoError::BadLength {
                declared: 29,
                actual: 30
            })
        );

        // Truncated anywhere: never a panic, always an error.
        for cut in 0..good.len() {
            let mut t = good[..cut].to_vec();
            let r = s.open(&mut t).map(|_| ());
            let expected = if cut <= TRANSFORM_HEADER_LEN {
                CryptoError::TooShort(cut)
            } else {
                CryptoError::BadLength {
                    declared: 30,
                    actual: cut - TRANSFORM_HEADER_LEN,
                }
            };
            assert_eq!(r, Err(expected), "cut {cut}");
        }
        assert_eq!(transform_session_id(&good[..51]), None);
    }

    #[test]
    fn seal_short_buffer_is_ignored() {
        let s = Sealer::new(Cipher::Aes128Ccm, &[1; 16]);
        let mut buf = vec![7u8; 51];
        s.seal(1, &[0; 16], &mut buf);
        assert_eq!(buf, vec![7u8; 51]);
        // An empty message is sealable (the tag still authenticates the header).
        let mut buf = vec![0u8; 52];
        s.seal(1, &[0; 16], &mut buf);
        assert_eq!(buf[ORIGINAL_SIZE], [0; 4]);
        assert_ne!(buf[SIGNATURE], [0; 16]);
    }

    #[test]
    fn debug_hides_key() {
        let s = Sealer::new(Cipher::Aes256Gcm, &[0x61; 32]);
        assert_eq!(format!("{s:?}"), "Sealer { cipher: Aes256Gcm, .. }");
    }
}
