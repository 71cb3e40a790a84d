//! Known answers for what Microsoft publishes no test vector for: AES-256
//! key derivation (L = 256), AES-256-GCM and AES-256-CCM sealing, AES-GMAC
//! signing and HMAC-SHA256 (2.x) signing.
//!
//! The expected values were computed independently with OpenSSL (through
//! Python's `cryptography` and `hmac` modules) from the MS-SMB2 text:
//! 3.1.4.2 (KDF), 3.3.5.5.3 (AES-256 keys from the full session key with
//! L = 256), 3.1.4.1 (GMAC nonce = MessageId || LE32 role/cancel bits;
//! HMAC-SHA256 truncated to 16 bytes), 2.2.41 / 3.1.4.3 (transform header,
//! AAD = bytes 20..52, 11-byte CCM / 12-byte GCM nonce, 16-byte tag).
//! They catch wiring mistakes (nonce length, tag size, AAD range, key
//! length); they are not Microsoft's bytes.

use smbq_crypto::{derive_keys, Cipher, Sealer, Signer, SigningAlgorithm, TRANSFORM_HEADER_LEN};

fn h(s: &str) -> Vec<u8> {
    let compact: String = s.split_whitespace().collect();
    hex::decode(compact).expect("test vector hex")
}

/// A 32-byte "full session key" (Kerberos AES-256 session keys are 32 bytes).
const FULL_KEY: &str = "404142434445464748494A4B4C4D4E4F505152535455565758595A5B5C5D5E5F";
/// SHA-512 of "smbq preauth", standing in for a preauth hash value.
const PREAUTH: &str = "
    6543F6FEC77D0EFB35208997C3A2946E3931998E0AA1BC7AEC47C0DBCF80885D15DAED334CB3DBF2
    29D7569C0D6DCF3EF4BE53FDC98390C20CDAFBCCCA126C4A";

/// [311] A.1 final SESSION_SETUP response (server to client, MessageId 2).
const SESSION_SETUP_RESPONSE: &str = "
    FE534D4240000100000000000100800009000000000000000200000000000000FFFE000000000000
    25000000001000006B85A4519A0F3EEA35BA946DD3AFE6B80900000048001D00A11B3019A0030A01
    00A3120410010000003932A87523AB660100000000";

/// [311] A.1 WRITE request, used as plaintext.
const WRITE: &str = "
    FE534D4240000100000000000900010008000000000000000500000000000000FFFE000001000000
    25000000001000000000000000000000000000000000000031007000170000000000000000000000
    0600000004000000010000000400000000000000000000007000000000000000536D623320656E63
    72797074696F6E2074657374696E67";

fn preauth() -> [u8; 64] {
    h(PREAUTH).try_into().expect("64 bytes")
}

#[test]
fn aes256_key_derivation() {
    for cipher in [Cipher::Aes256Gcm, Cipher::Aes256Ccm] {
        let keys = derive_keys(0x0311, &h(FULL_KEY), Some(&preauth()), Some(cipher));
        assert_eq!(
            keys.encrypt,
            h("17C209794FC50EC40754702A07631945C16581A6BC27B98F4E989F2DABFB22FD")
        );
        assert_eq!(
            keys.decrypt,
            h("AEF9021EF018D9A0637D51AB36074AD3C37A2D21318BAB610579F6AA101C14A6")
        );
        // Signing uses the first 16 bytes only.
        assert_eq!(keys.signing, h("3D31673E2147993A755BC7D3202B0BF3"));
    }
}

fn seal_write(cipher: Cipher) -> Vec<u8> {
    let keys = derive_keys(0x0311, &h(FULL_KEY), Some(&preauth()), Some(cipher));
    let nonce: [u8; 16] = core::array::from_fn(|i| i as u8 + 1);
    let mut buf = vec![0u8; TRANSFORM_HEADER_LEN];
    buf.extend(h(WRITE));
    Sealer::new(cipher, &keys.encrypt).seal(0x1000_0000_0025, &nonce, &mut buf);
    buf
}

#[test]
fn aes256_gcm_seal_and_open() {
    let expected = h("
    FD534D4234DB7E5650E16C562FC0EC5AD867E56E0102030405060708090A0B0C0000000087000000
    00000100250000000010000022F5030557590B8E515D04445F0A2DDFCFB3C3DB1DC9462E9F6E3FB7
    D1BA07E0F0A16B41BD0BC840EB6EBB593118B6BC0C87DFF111E2D290A6FA5CD0530F33CCA5D22F37
    3A24E34985C321A7F26461DDF98DF9FB2B4F5CC9BA2A04915EDE12990283C402B13BF99C57D2E1F6
    8CFD8A6F665DE6EBBD02162193BAC5ED17F75F90728F34270E463A");
    let mut buf = seal_write(Cipher::Aes256Gcm);
    assert_eq!(buf, expected);
    let keys = derive_keys(
        0x0311,
        &h(FULL_KEY),
        Some(&preauth()),
        Some(Cipher::Aes256Gcm),
    );
    let plain = Sealer::new(Cipher::Aes256Gcm, &keys.encrypt)
        .open(&mut buf)
        .expect("opens");
    assert_eq!(plain, &h(WRITE)[..]);
}

#[test]
fn aes256_ccm_seal_and_open() {
    let expected = h("
    FD534D4234D726B919CBD4E140C10D641C0126090102030405060708090A0B000000000087000000
    0000010025000000001000006E52289162A89213B3F43ADB291A966E62A6450B9FB991DAD7E7ABB9
    9336A739C935EDDC25F570C3DAEE82656C4D5B30D5A5B4A69356857F7560DC95C84FC44DF33EE8BC
    0849D84E1DD38BB63837C83A3B115BEA0EA2DC5D0A68C30D477F563243C72F472F7B00CE37B8E5C2
    16BAC23AD73F3DFB71D05302B51C7DD4D0ED19339432C4A61DE79C");
    let mut buf = seal_write(Cipher::Aes256Ccm);
    assert_eq!(buf, expected);
    let keys = derive_keys(
        0x0311,
        &h(FULL_KEY),
        Some(&preauth()),
        Some(Cipher::Aes256Ccm),
    );
    let plain = Sealer::new(Cipher::Aes256Ccm, &keys.encrypt)
        .open(&mut buf)
        .expect("opens");
    assert_eq!(plain, &h(WRITE)[..]);
}

#[test]
fn aes_gmac_signature() {
    // Nonce 020000000000000001000000: MessageId 2, then 1 = sent by the server.
    let signer = Signer::new(
        SigningAlgorithm::AesGmac,
        &h("8765949DFEAEE105CE9118B45BE988F0"),
    );
    let mut m = h(SESSION_SETUP_RESPONSE);
    signer.sign(&mut m);
    assert_eq!(m[48..64], h("42FE89B1890DE0AADF2117AC042B355B"));
    assert!(signer.verify(&m));
}

#[test]
fn aes_gmac_signature_of_cancel() {
    // The same bytes as a client CANCEL (Command 0x000C, Flags 0): nonce
    // ends in 2 = CANCEL, role bit clear.
    let signer = Signer::new(
        SigningAlgorithm::AesGmac,
        &h("8765949DFEAEE105CE9118B45BE988F0"),
    );
    let mut m = h(SESSION_SETUP_RESPONSE);
    m[12..14].copy_from_slice(&0x000Cu16.to_le_bytes());
    m[16..20].copy_from_slice(&0u32.to_le_bytes());
    signer.sign(&mut m);
    assert_eq!(m[48..64], h("5944C68064F977CC451912AAA173A4C6"));
    assert!(signer.verify(&m));
}

#[test]
fn hmac_sha256_signature() {
    // 2.x: the key is Session.SessionKey itself.
    let keys = derive_keys(0x0210, &h("419FDDF34C1E001909D362AE7FB6AF79"), None, None);
    let signer = Signer::new(SigningAlgorithm::HmacSha256, &keys.signing);
    let mut m = h(SESSION_SETUP_RESPONSE);
    signer.sign(&mut m);
    assert_eq!(m[48..64], h("A4617EC2505E18C5BB339BABA6714EE1"));
    assert!(signer.verify(&m));
}
