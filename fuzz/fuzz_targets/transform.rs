//! SMB2 TRANSFORM_HEADER opening (smbq_crypto::Sealer::open) for each
//! cipher, and message signature checking (Signer::verify) for each
//! algorithm, on arbitrary bytes: no panic. Round trip: the input sealed
//! with a known key opens to itself, and a signed input verifies.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_crypto::{transform_session_id, Cipher, Sealer, Signer, SigningAlgorithm, TRANSFORM_HEADER_LEN};
use std::sync::OnceLock;

const KEY: [u8; 32] = [0x5a; 32];

fn sealers() -> &'static [Sealer; 4] {
    static S: OnceLock<[Sealer; 4]> = OnceLock::new();
    S.get_or_init(|| {
        [Cipher::Aes128Ccm, Cipher::Aes128Gcm, Cipher::Aes256Ccm, Cipher::Aes256Gcm].map(|c| Sealer::new(c, &KEY))
    })
}

fn signers() -> &'static [Signer; 3] {
    static S: OnceLock<[Signer; 3]> = OnceLock::new();
    S.get_or_init(|| {
        [SigningAlgorithm::HmacSha256, SigningAlgorithm::AesCmac, SigningAlgorithm::AesGmac].map(|a| Signer::new(a, &KEY[..16]))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, msg)) = data.split_first() else { return };
    let sealer = &sealers()[usize::from(sel & 3)];
    let _ = transform_session_id(msg);
    let mut buf = msg.to_vec();
    let _ = sealer.open(&mut buf);

    // Seal the input as a message and open it again.
    if !msg.is_empty() && msg.len() <= 4096 {
        let mut buf = vec![0u8; TRANSFORM_HEADER_LEN];
        buf.extend_from_slice(msg);
        let nonce = [sel; 16];
        sealer.seal(0x1122_3344_5566_7788, &nonce, &mut buf);
        assert_eq!(transform_session_id(&buf), Some(0x1122_3344_5566_7788));
        let plain = sealer.open(&mut buf).expect("what we sealed opens");
        assert_eq!(&plain[..], msg);
    }

    let signer = &signers()[usize::from(sel >> 2) % 3];
    let _ = signer.verify(msg);
    if msg.len() >= 64 && msg.len() <= 4096 {
        let mut m = msg.to_vec();
        signer.sign(&mut m);
        assert!(signer.verify(&m), "a message we signed verifies");
    }
});
