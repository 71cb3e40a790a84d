//! SMB 2.x/3.x cryptography, sans-IO: everything here works on byte slices.
//!
//! * [`PreauthHash`]: the SMB 3.1.1 preauthentication integrity hash
//!   (MS-SMB2 3.2.5.2, 3.3.5.4), SHA-512 chained over NEGOTIATE and
//!   SESSION_SETUP messages.
//! * [`kdf`] and [`derive_keys`]: the SP800-108 counter-mode KDF
//!   (MS-SMB2 3.1.4.2) and the per-session key schedule (MS-SMB2 3.3.5.5.3).
//! * [`Signer`]: message signing and verification (MS-SMB2 3.1.4.1, 3.1.5.1)
//!   with HMAC-SHA256 (2.x), AES-128-CMAC (3.x) or AES-128-GMAC (3.1.1).
//! * [`Sealer`]: the SMB2 TRANSFORM_HEADER (MS-SMB2 2.2.41) and message
//!   encryption (MS-SMB2 3.1.4.3) with AES-128/256-CCM/GCM, in place.
//!
//! Key schedules are built once in `new`; signing, sealing and opening
//! allocate nothing, except [`Signer::verify`] with AES-GMAC on a message
//! whose signature field is not zero (one copy of the message, see there).
//!
//! * [`tls_provider`]: the rustls provider for SMB over QUIC.
//!
//! Primitives: AES-GCM comes from `ring`, AES-GMAC, SHA-512 and HMAC-SHA256
//! from `aws-lc-rs`, AES-CCM (`ccm` + `aes`) and AES-CMAC (`cmac`) from
//! RustCrypto. The split is measured (1 MiB messages, one core of an AMD
//! EPYC with VAES and AVX2 but no AVX-512): ring's AES-128-GCM encrypts at
//! 7.9 GB/s against aws-lc's 4.2 (aws-lc 1.19 has VAES code only for
//! AVX-512), while its GHASH over additional data alone, which is what GMAC
//! is, runs at 1.2 GB/s against aws-lc's 7.7.

#![forbid(unsafe_code)]

mod kdf;
mod preauth;
mod seal;
mod sign;
pub mod tls;

pub use kdf::{derive_keys, kdf, SessionKeys};
pub use preauth::PreauthHash;
pub use seal::{transform_session_id, Cipher, Sealer, TRANSFORM_HEADER_LEN};
pub use sign::{Signer, SigningAlgorithm};
pub use tls::tls_provider;

/// Why an encrypted message (MS-SMB2 2.2.41) was rejected by [`Sealer::open`].
///
/// MS-SMB2 3.3.5.2.1.1: on any of these the server disconnects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// The message is not longer than the 52-byte transform header.
    #[error("encrypted message too short: {0} bytes")]
    TooShort(usize),
    /// ProtocolId is not 0xFD 'S' 'M' 'B'.
    #[error("transform header ProtocolId is not 0xFD 'SMB'")]
    BadProtocolId,
    /// Flags/EncryptionAlgorithm is not 0x0001.
    #[error("transform header Flags is {0:#06x}, not 0x0001")]
    BadFlags(u16),
    /// OriginalMessageSize does not match the bytes that follow the header.
    #[error("OriginalMessageSize {declared} but {actual} bytes follow the header")]
    BadLength {
        /// OriginalMessageSize from the header.
        declared: u32,
        /// Bytes actually following the transform header.
        actual: usize,
    },
    /// The authentication tag did not verify (wrong key, nonce, or tampering).
    #[error("encrypted message failed authentication")]
    BadTag,
}
