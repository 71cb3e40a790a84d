//! MS-SMB2 3.1.4.2 key derivation and the per-session keys of 3.3.5.5.3.

use std::fmt;

use aws_lc_rs::hmac;

use crate::Cipher;

/// MS-SMB2 3.1.4.2: the SP800-108 KDF in counter mode with HMAC-SHA256 as
/// PRF, r = 32 and L = `out_len` * 8 bits.
///
/// K(i) = HMAC-SHA256(key, [i]32 || label || 0x00 || context || [L]32), with
/// big-endian i = 1, 2, ...; the output is the first `out_len` bytes of
/// K(1) || K(2) || ...  SMB labels carry their own terminating NUL
/// (`b"SMBSigningKey\0"`), the 0x00 separator is added here.
///
/// # Panics
/// If `out_len * 8` does not fit in 32 bits (SMB only asks for 16 or 32
/// bytes, so this is a caller bug, never a consequence of network input).
pub fn kdf(key: &[u8], label: &[u8], context: &[u8], out_len: usize) -> Vec<u8> {
    let bits = out_len
        .checked_mul(8)
        .and_then(|b| u32::try_from(b).ok())
        .expect("kdf: out_len * 8 must fit in 32 bits");
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut out = Vec::with_capacity(out_len);
    let mut i: u32 = 1;
    while out.len() < out_len {
        let mut ctx = hmac::Context::with_key(&key);
        ctx.update(&i.to_be_bytes());
        ctx.update(label);
        ctx.update(&[0]);
        ctx.update(context);
        ctx.update(&bits.to_be_bytes());
        let block = ctx.sign();
        let take = (out_len - out.len()).min(block.as_ref().len());
        out.extend_from_slice(block.as_ref().get(..take).unwrap_or_default());
        i = i.wrapping_add(1);
    }
    out
}

/// The keys of one session, seen from the server (MS-SMB2 3.3.5.5.3).
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKeys {
    /// Session.SigningKey (for 2.x: Session.SessionKey, used with HMAC-SHA256).
    pub signing: Vec<u8>,
    /// Session.ApplicationKey (for 2.x: Session.SessionKey, MS-SMB2 3.3.4.5).
    pub application: Vec<u8>,
    /// ServerToClient: the key the server encrypts with (Session.EncryptionKey
    /// in the server's terms). Empty when no cipher applies.
    pub encrypt: Vec<u8>,
    /// ClientToServer: the key the server decrypts with (Session.DecryptionKey
    /// in the server's terms). Empty when no cipher applies.
    pub decrypt: Vec<u8>,
}

/// Keys are secrets: show only their lengths.
impl fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionKeys")
            .field("signing", &format_args!("<{} bytes>", self.signing.len()))
            .field(
                "application",
                &format_args!("<{} bytes>", self.application.len()),
            )
            .field("encrypt", &format_args!("<{} bytes>", self.encrypt.len()))
            .field("decrypt", &format_args!("<{} bytes>", self.decrypt.len()))
            .finish()
    }
}

/// A KDF label and context.
type LabelContext<'a> = (&'a [u8], &'a [u8]);

/// MS-SMB2 3.3.1.8: Session.SessionKey is the first 16 bytes of the
/// cryptographic key of the authenticated context, right-padded with zeros
/// if shorter.
fn session_key_16(full: &[u8]) -> [u8; 16] {
    let mut k = [0u8; 16];
    for (d, s) in k.iter_mut().zip(full) {
        *d = *s;
    }
    k
}

/// MS-SMB2 3.3.5.5.3 (server side): derive a session's keys.
///
/// * `dialect`: the SMB2 dialect revision (0x0202, 0x0210, 0x0300, 0x0302,
///   0x0311). Below 0x0300 is treated as 2.x; 0x0300 and 0x0302 as 3.0.x;
///   anything else as 3.1.1.
/// * `session_key`: the full cryptographic key from GSS/NTLM (any length).
///   Session.SessionKey (first 16 bytes, zero-padded) keys the KDF, except
///   for AES-256 ciphers whose keys come from the full key
///   (Session.FullSessionKey) with L = 256.
/// * `preauth`: Session.PreauthIntegrityHashValue, the KDF context for 3.1.1
///   (a `None` there is a caller bug and gives an empty context).
/// * `cipher`: Connection.CipherId; `None` means no encryption keys (empty).
///
/// 2.x: signing and application keys are Session.SessionKey; no encryption.
/// 3.0/3.0.2: labels/contexts "SMB2AESCMAC"/"SmbSign", "SMB2APP"/"SmbRpc",
/// "SMB2AESCCM" with "ServerIn " (client to server) and "ServerOut" (server
/// to client). 3.1.1: "SMBSigningKey", "SMBAppKey", "SMBC2SCipherKey",
/// "SMBS2CCipherKey", all with the preauth hash as context.
pub fn derive_keys(
    dialect: u16,
    session_key: &[u8],
    preauth: Option<&[u8; 64]>,
    cipher: Option<Cipher>,
) -> SessionKeys {
    let key16 = session_key_16(session_key);
    if dialect < 0x0300 {
        return SessionKeys {
            signing: key16.to_vec(),
            application: key16.to_vec(),
            encrypt: Vec::new(),
            decrypt: Vec::new(),
        };
    }
    debug_assert!(
        dialect < 0x0311 || preauth.is_some(),
        "3.1.1 needs the preauth hash"
    );
    let is_30 = matches!(dialect, 0x0300 | 0x0302);
    let preauth: &[u8] = preauth.map_or(&[], |p| p.as_slice());
    let (sign_label, sign_ctx, app_label, app_ctx): (&[u8], &[u8], &[u8], &[u8]) = if is_30 {
        (b"SMB2AESCMAC\0", b"SmbSign\0", b"SMB2APP\0", b"SmbRpc\0")
    } else {
        (b"SMBSigningKey\0", preauth, b"SMBAppKey\0", preauth)
    };
    // (label, context) for client-to-server and server-to-client cipher keys.
    let (c2s, s2c): (LabelContext<'_>, LabelContext<'_>) = if is_30 {
        (
            (b"SMB2AESCCM\0", b"ServerIn \0"),
            (b"SMB2AESCCM\0", b"ServerOut\0"),
        )
    } else {
        (
            (b"SMBC2SCipherKey\0", preauth),
            (b"SMBS2CCipherKey\0", preauth),
        )
    };
    let (encrypt, decrypt) = match cipher {
        None => (Vec::new(), Vec::new()),
        Some(c) => {
            let len = c.key_len();
            let ki: &[u8] = if len == 32 { session_key } else { &key16 };
            (kdf(ki, s2c.0, s2c.1, len), kdf(ki, c2s.0, c2s.1, len))
        }
    };
    SessionKeys {
        signing: kdf(&key16, sign_label, sign_ctx, 16),
        application: kdf(&key16, app_label, app_ctx, 16),
        encrypt,
        decrypt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kdf_lengths_and_prefix() {
        let k = [7u8; 16];
        assert_eq!(kdf(&k, b"l\0", b"c", 16).len(), 16);
        assert_eq!(kdf(&k, b"l\0", b"c", 32).len(), 32);
        assert_eq!(kdf(&k, b"l\0", b"c", 0).len(), 0);
        // L is part of the PRF input, so a 32-byte output does not start with
        // the 16-byte one.
        assert_ne!(
            kdf(&k, b"l\0", b"c", 32)[..16],
            kdf(&k, b"l\0", b"c", 16)[..]
        );
        // 48 bytes = K(1) || first half of K(2).
        assert_eq!(kdf(&k, b"l\0", b"c", 48).len(), 48);
    }

    #[test]
    fn session_key_is_truncated_or_padded() {
        assert_eq!(
            session_key_16(&[1, 2]),
            [1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(session_key_16(&[9u8; 32]), [9u8; 16]);
    }

    #[test]
    fn dialect_2x_uses_the_session_key() {
        let long = [0x11u8; 20];
        for d in [0x0202, 0x0210] {
            let k = derive_keys(d, &long, None, Some(Cipher::Aes128Gcm));
            assert_eq!(k.signing, [0x11u8; 16]);
            assert_eq!(k.application, [0x11u8; 16]);
            assert!(k.encrypt.is_empty() && k.decrypt.is_empty());
        }
    }

    #[test]
    fn no_cipher_no_encryption_keys() {
        let k = derive_keys(0x0311, &[1u8; 16], Some(&[2u8; 64]), None);
        assert_eq!(k.signing.len(), 16);
        assert!(k.encrypt.is_empty() && k.decrypt.is_empty());
    }

    #[test]
    fn aes256_keys_come_from_the_full_session_key() {
        let full = [0x5au8; 32];
        let pre = [3u8; 64];
        let k = derive_keys(0x0311, &full, Some(&pre), Some(Cipher::Aes256Gcm));
        assert_eq!(k.encrypt, kdf(&full, b"SMBS2CCipherKey\0", &pre, 32));
        assert_eq!(k.decrypt, kdf(&full, b"SMBC2SCipherKey\0", &pre, 32));
        // Signing still uses the 16-byte Session.SessionKey.
        assert_eq!(k.signing, kdf(&full[..16], b"SMBSigningKey\0", &pre, 16));
        let ccm = derive_keys(0x0311, &full, Some(&pre), Some(Cipher::Aes256Ccm));
        assert_eq!(ccm.encrypt, k.encrypt);
    }

    #[test]
    fn debug_hides_keys() {
        let k = derive_keys(0x0300, &[0xabu8; 16], None, Some(Cipher::Aes128Ccm));
        assert_eq!(
            format!("{k:?}"),
            "SessionKeys { signing: <16 bytes>, application: <16 bytes>, \
             encrypt: <16 bytes>, decrypt: <16 bytes> }"
        );
    }
}
