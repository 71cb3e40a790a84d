//! The NT security descriptor of a file, kept in the `security.NTACL`
//! extended attribute in Samba's layout (`xattr_NTACL` of Samba's
//! librpc/idl/xattr.idl, NDR little-endian), so a share moved between
//! Samba's `vfs_acl_xattr` and smbq keeps its ACLs.
//!
//! The value is a version (u16), the same number again as the union
//! switch (u16), a unique pointer (u32 referent), then per version:
//! 1. the self-relative security descriptor (MS-DTYP 2.4.6);
//! 2. a pointer, a 16-byte hash, then the descriptor;
//! 3. a pointer, a u16 hash type, a 64-byte hash, padding to 4, then the
//!    descriptor;
//! 4. as 3, then a NUL-terminated UTF-8 description, padding to 4, an
//!    NTTIME, a 64-byte hash of the POSIX ACL, padding to 4, then the
//!    descriptor.
//!
//! The descriptor's offsets count from the start of the value, not of
//! the descriptor (Samba's NDR keeps one base for the whole value). Only
//! the descriptor is taken; the hashes (with which Samba notices a
//! POSIX ACL changed behind its back) are not checked. smbq writes
//! version 1, which Samba takes as it is, without a hash (vfs_acl_common.c
//! `validate_nt_acl_blob`: "These xattr types are unilateral").

use smbq_wire::security::SecurityDescriptor;
use smbq_wire::{DecodeError, Reader};

/// The extended attribute's name.
pub const NAME: &str = "security.NTACL";

/// The largest value read: a descriptor is at most 64 KiB of ACL plus
/// its header and SIDs, the version 4 wrapper a few hundred bytes.
pub const MAX_LEN: usize = 0x2_0000;

/// The referent ID Samba's NDR gives the first pointer.
const REFERENT: u32 = 0x0002_0000;

/// Round `n` up to a multiple of 4.
fn align4(n: usize) -> Option<usize> {
    n.checked_add(3).map(|v| v & !3)
}

/// The security descriptor inside a `security.NTACL` value of version 1
/// to 4, in self-relative form (MS-DTYP 2.4.6).
pub fn decode(blob: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut r = Reader::new(blob);
    let version = r.u16()?;
    let level = r.u16()?;
    let pointer = r.u32()?;
    if version != level || pointer == 0 {
        return Err(DecodeError::Invalid);
    }
    let at = match version {
        1 => 8,
        2 => {
            r.skip(4 + 16)?;
            r.pos()
        }
        3 => {
            r.skip(4 + 2 + 64)?;
            align4(r.pos()).ok_or(DecodeError::Invalid)?
        }
        4 => {
            r.skip(4 + 2 + 64)?;
            // The description, up to and with its NUL.
            let rest = blob.get(r.pos()..).ok_or(DecodeError::Truncated)?;
            let nul = rest.iter().position(|&b| b == 0).ok_or(DecodeError::Truncated)?;
            let time = align4(r.pos() + nul + 1).ok_or(DecodeError::Invalid)?;
            align4(time + 8 + 64).ok_or(DecodeError::Invalid)?
        }
        _ => return Err(DecodeError::Invalid),
    };
    Ok(SecurityDescriptor::decode_in(blob, at)?.to_bytes())
}

/// A version 1 `security.NTACL` value holding the self-relative
/// `descriptor`.
pub fn encode(descriptor: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let sd = SecurityDescriptor::decode(descriptor)?;
    let mut v = Vec::with_capacity(8 + descriptor.len());
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&REFERENT.to_le_bytes());
    sd.encode_in(&mut v);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SD: [u8; 20] = [1, 0, 4, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

    #[test]
    fn version_1_round_trip() {
        let v = encode(&SD).unwrap();
        assert_eq!(&v[..8], &[1, 0, 1, 0, 0, 0, 2, 0]);
        assert_eq!(decode(&v), Ok(SD.to_vec()));
        // With parts, their offsets count from the start of the value.
        let sd = SecurityDescriptor::decode(&hex(SAMBA_SD)).unwrap().to_bytes();
        let v = encode(&sd).unwrap();
        assert_eq!(&v[12..16], &28u32.to_le_bytes());
        assert_eq!(decode(&v), Ok(sd));
    }

    #[test]
    fn versions_2_to_4() {
        // Version 2: pointer, 16-byte hash.
        let mut v2 = vec![2, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0];
        v2.extend_from_slice(&[0xAA; 16]);
        v2.extend_from_slice(&SD);
        assert_eq!(decode(&v2), Ok(SD.to_vec()));
        // Version 3: pointer, hash type, 64-byte hash, 2 bytes of padding.
        let mut v3 = vec![3, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 1, 0];
        v3.extend_from_slice(&[0xBB; 64]);
        v3.extend_from_slice(&[0, 0]);
        v3.extend_from_slice(&SD);
        assert_eq!(decode(&v3), Ok(SD.to_vec()));
        // Version 4 as Samba 4.17 writes it: description "posix_acl"
        // (ends at 88, padded to 88), NTTIME, sys ACL hash, descriptor.
        let mut v4 = vec![4, 0, 4, 0, 0, 0, 2, 0, 0, 0, 2, 0, 1, 0];
        v4.extend_from_slice(&[0xCC; 64]);
        v4.extend_from_slice(b"posix_acl\0");
        assert_eq!(v4.len(), 88);
        v4.extend_from_slice(&[0x11; 8]);
        v4.extend_from_slice(&[0xDD; 64]);
        v4.extend_from_slice(&SD);
        assert_eq!(decode(&v4), Ok(SD.to_vec()));
        // A description needing padding.
        let mut v4b = vec![4, 0, 4, 0, 0, 0, 2, 0, 0, 0, 2, 0, 1, 0];
        v4b.extend_from_slice(&[0xCC; 64]);
        v4b.extend_from_slice(b"ab\0\0\0\0");
        v4b.extend_from_slice(&[0x11; 8]);
        v4b.extend_from_slice(&[0xDD; 64]);
        v4b.extend_from_slice(&SD);
        assert_eq!(decode(&v4b), Ok(SD.to_vec()));
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// What Samba 4.17's smbd stored for a DACL set through it: deny
    /// BUILTIN\Guests write, allow Everyone everything.
    const SAMBA_V4: &str = concat!(
        "0400040000000200040002000100bb137ee349834951ea55fb9689b7ab31caaff65e8aed69f7188439cfe8b19eb9",
        "0000000000000000000000000000000000000000000000000000000000000000706f7369785f61636c00604460b0",
        "e37ddd01edc9879cc4e10067092da7a477c5565e5ef2bca5b24c4d27bf57bcdf05433a5b00000000000000000000",
        "0000000000000000000000000000000000000000000001000480b4000000d000000000000000ec00000001050000",
        "00000005150000004abf8a0444a7019ecc60bbc0e80300000105000000000005150000004abf8a0444a7019ecc60",
        "bbc001020000020034000200000001001800020000000102000000000005200000002202000000001400ff011f00",
        "010100000000000100000000"
    );
    /// Its descriptor, self-relative.
    const SAMBA_SD: &str = concat!(
        "01000480140000003000000000000000",
        "4c0000000105000000000005150000004abf8a0444a7019ecc60bbc0e80300000105000000000005150000004abf",
        "8a0444a7019ecc60bbc001020000020034000200000001001800020000000102000000000005200000002202000000",
        "001400ff011f00010100000000000100000000"
    );

    #[test]
    fn samba_version_4() {
        let sd = decode(&hex(SAMBA_V4)).unwrap();
        assert_eq!(sd, hex(SAMBA_SD));
        let sd = SecurityDescriptor::decode(&sd).unwrap();
        assert_eq!(sd.owner.unwrap().to_string(), "S-1-5-21-76201802-2650908484-3233505484-1000");
        let aces = sd.dacl.unwrap().aces;
        assert_eq!(aces[0].sid().unwrap().to_string(), "S-1-5-32-546");
        assert_eq!((aces[0].ace_type, aces[0].mask), (1, 2));
    }

    #[test]
    fn bad_values() {
        assert!(decode(&[1, 0, 2, 0, 0, 0, 2, 0, 1]).is_err());
        assert!(decode(&[5, 0, 5, 0, 0, 0, 2, 0, 1]).is_err());
        assert!(decode(&[1, 0, 1, 0, 0, 0, 0, 0, 1]).is_err());
        assert!(decode(&[1, 0, 1, 0, 0, 0, 2, 0]).is_err());
        assert!(decode(&[3, 0, 3, 0, 0, 0, 2, 0, 0, 0]).is_err());
        // Version 4 without the NUL of its description.
        let mut v4 = vec![4, 0, 4, 0, 0, 0, 2, 0, 0, 0, 2, 0, 1, 0];
        v4.extend_from_slice(&[0xCC; 64]);
        v4.extend_from_slice(b"abc");
        assert!(decode(&v4).is_err());
    }
}
