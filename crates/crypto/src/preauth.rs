//! MS-SMB2 3.2.5.2 / 3.3.5.4: the preauthentication integrity hash.

use aws_lc_rs::digest;

/// The SMB 3.1.1 preauthentication integrity hash value (SHA-512, the only
/// HashAlgorithm of MS-SMB2 2.2.3.1.1).
///
/// MS-SMB2 3.3.5.4 / 3.2.5.2: H(0) is 64 zero bytes and
/// H(i) = SHA-512(H(i-1) || message) for each NEGOTIATE and SESSION_SETUP
/// message (the whole SMB2 message, header included) in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreauthHash(pub [u8; 64]);

impl PreauthHash {
    /// H(0): 64 zero bytes (Connection.PreauthIntegrityHashValue at NEGOTIATE).
    pub fn new() -> Self {
        Self([0; 64])
    }

    /// Chain one message into the hash: H = SHA-512(H || msg).
    pub fn update(&mut self, msg: &[u8]) {
        let mut ctx = digest::Context::new(&digest::SHA512);
        ctx.update(&self.0);
        ctx.update(msg);
        self.0.copy_from_slice(ctx.finish().as_ref());
    }
}

impl Default for PreauthHash {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_is_sha512_of_previous_and_message() {
        let mut h = PreauthHash::new();
        h.update(b"abc");
        let mut input = [0u8; 67];
        input[64..].copy_from_slice(b"abc");
        assert_eq!(
            h.0.as_slice(),
            digest::digest(&digest::SHA512, &input).as_ref()
        );
        let before = h.clone();
        h.update(b"");
        assert_ne!(h, before);
        assert_eq!(
            h.0.as_slice(),
            digest::digest(&digest::SHA512, &before.0).as_ref()
        );
    }
}
