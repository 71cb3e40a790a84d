//! DOS attributes and creation time in the `user.DOSATTRIB` extended
//! attribute, in the layout Samba's smbd writes with `store dos attributes
//! = yes` (its `xattr_DOSATTRIB`, librpc/idl/xattr.idl, marshalled as NDR
//! with the hand-written header of librpc/ndr/ndr_xattr.c), so a share
//! moved between Samba and smbq keeps them.
//!
//! The layout: an ASCII, NUL-terminated attribute string (`"0x20"` in old
//! versions, empty since version 3 without the attribute flag, and empty
//! in what Samba writes today), padding to 2, the version (u16), the union
//! level (u16, equal to the version), padding to 4, then the version's
//! fields, little-endian, 64-bit values aligned to 4. A value that is the
//! attribute string alone (Samba 3) carries the attributes in hex.
//!
//! We write version 5 (`valid_flags`, `attrib`, `create_time`), as Samba
//! 4.9 and later do, and read versions 1 to 5 and the string alone.

/// The extended attribute's name (Samba's `XATTR_DOSATTRIB_NAME_S3`).
pub const NAME: &str = "user.DOSATTRIB";

/// `xattr_DosInfoValidFlags`.
const VALID_ATTRIB: u32 = 0x01;
const VALID_CREATE_TIME: u32 = 0x10;

/// What the extended attribute holds: FILE_ATTRIBUTE_* (MS-FSCC 2.6) and
/// the creation time as a FILETIME, each when recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DosInfo {
    pub attributes: Option<u32>,
    pub creation_time: Option<u64>,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn align(&mut self, n: usize) {
        self.pos = self.pos.next_multiple_of(n);
    }
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let end = self.pos.checked_add(N)?;
        let b = self.buf.get(self.pos..end)?.try_into().ok()?;
        self.pos = end;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        self.align(2);
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.align(4);
        self.take().map(u32::from_le_bytes)
    }
    /// Samba's `udlong` and `NTTIME`: 8 bytes aligned to 4.
    fn u64(&mut self) -> Option<u64> {
        self.align(4);
        self.take().map(u64::from_le_bytes)
    }
    fn skip_u64s(&mut self, n: usize) -> Option<()> {
        (0..n).try_for_each(|_| self.u64().map(drop))
    }
}

fn flagged<T>(valid: u32, flag: u32, v: T) -> Option<T> {
    (valid & flag != 0).then_some(v)
}

/// Parse the extended attribute's value; `None` when it is not one Samba
/// or smbq would write (the caller then derives what it needs from stat).
pub fn decode(buf: &[u8]) -> Option<DosInfo> {
    let nul = buf.iter().position(|&b| b == 0)?;
    let hex = std::str::from_utf8(&buf[..nul]).ok()?;
    let mut r = Reader { buf, pos: nul + 1 };
    let hex_attrib = || {
        let digits = hex.strip_prefix("0x").or_else(|| hex.strip_prefix("0X"))?;
        u32::from_str_radix(digits, 16).ok()
    };
    if r.pos >= buf.len() {
        return Some(DosInfo { attributes: Some(hex_attrib()?), creation_time: None });
    }
    let version = r.u16()?;
    if r.u16()? != version {
        return None;
    }
    let nonzero = |t: u64| (t != 0).then_some(t);
    match version {
        // attrib, ea_size, size, alloc_size, create_time, change_time.
        1 => {
            let attrib = r.u32()?;
            r.u32()?;
            r.skip_u64s(2)?;
            Some(DosInfo { attributes: Some(attrib), creation_time: nonzero(r.u64()?) })
        }
        // flags, attrib, ea_size, size, alloc_size, create_time, ...
        2 => {
            r.u32()?;
            let attrib = r.u32()?;
            r.u32()?;
            r.skip_u64s(2)?;
            Some(DosInfo { attributes: Some(attrib), creation_time: nonzero(r.u64()?) })
        }
        // valid_flags, attrib, ea_size, size, alloc_size, create_time, change_time.
        3 => {
            let valid = r.u32()?;
            let attrib = r.u32()?;
            r.u32()?;
            r.skip_u64s(2)?;
            let create = r.u64()?;
            Some(DosInfo {
                attributes: flagged(valid, VALID_ATTRIB, attrib),
                creation_time: flagged(valid, VALID_CREATE_TIME, create),
            })
        }
        // valid_flags, attrib, itime, create_time (4); without itime (5).
        4 | 5 => {
            let valid = r.u32()?;
            let attrib = r.u32()?;
            if version == 4 {
                r.u64()?;
            }
            let create = r.u64()?;
            Some(DosInfo {
                attributes: flagged(valid, VALID_ATTRIB, attrib),
                creation_time: flagged(valid, VALID_CREATE_TIME, create),
            })
        }
        _ => None,
    }
}

/// Version 5 with an empty attribute string, byte for byte what Samba
/// writes for the same values.
pub fn encode(info: &DosInfo) -> Vec<u8> {
    let mut valid = 0;
    if info.attributes.is_some() {
        valid |= VALID_ATTRIB;
    }
    if info.creation_time.is_some() {
        valid |= VALID_CREATE_TIME;
    }
    let mut out = Vec::with_capacity(24);
    out.extend_from_slice(&[0, 0]); // "" and padding to 2
    out.extend_from_slice(&5u16.to_le_bytes());
    out.extend_from_slice(&5u16.to_le_bytes());
    out.extend_from_slice(&[0, 0]); // padding to 4
    out.extend_from_slice(&valid.to_le_bytes());
    out.extend_from_slice(&info.attributes.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&info.creation_time.unwrap_or(0).to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or(0)).collect()
    }

    /// Values Samba 4.17's smbd wrote (read off its share with getxattr
    /// after smbtorture's smb2.create and smb2.ioctl).
    #[test]
    fn samba_4_17_values() {
        let dir = hex("00000500050000001100000010000000d2ef14d3cd7ddd01");
        let info = DosInfo { attributes: Some(0x10), creation_time: Some(0x01dd_7dcd_d314_efd2) };
        assert_eq!(decode(&dir), Some(info));
        assert_eq!(encode(&info), dir, "we write what Samba writes");
        let file = hex("000005000500000011000000210000001292b5dacd7ddd01");
        assert_eq!(decode(&file).and_then(|i| i.attributes), Some(0x21));
    }

    #[test]
    fn older_versions() {
        // Samba 3: the hex string alone.
        assert_eq!(decode(b"0x22\0"), Some(DosInfo { attributes: Some(0x22), creation_time: None }));
        // Version 3 after "0x20": padding to 2, version, level, padding to 4.
        let mut v3 = b"0x20\0\0".to_vec();
        v3.extend_from_slice(&[3, 0, 3, 0, 0, 0]);
        v3.extend_from_slice(&(VALID_ATTRIB | VALID_CREATE_TIME).to_le_bytes());
        v3.extend_from_slice(&0x20u32.to_le_bytes());
        v3.extend_from_slice(&0u32.to_le_bytes()); // ea_size
        v3.extend_from_slice(&[0; 16]); // size, alloc_size
        v3.extend_from_slice(&77u64.to_le_bytes());
        v3.extend_from_slice(&[0; 8]); // change_time
        assert_eq!(decode(&v3), Some(DosInfo { attributes: Some(0x20), creation_time: Some(77) }));
        // Version 4: itime before the creation time; only the attributes valid.
        let mut v4 = vec![0, 0, 4, 0, 4, 0, 0, 0];
        v4.extend_from_slice(&VALID_ATTRIB.to_le_bytes());
        v4.extend_from_slice(&2u32.to_le_bytes());
        v4.extend_from_slice(&[9; 16]);
        assert_eq!(decode(&v4), Some(DosInfo { attributes: Some(2), creation_time: None }));
    }

    #[test]
    fn malformed_values_are_refused() {
        let good = encode(&DosInfo { attributes: Some(1), creation_time: Some(2) });
        for n in 0..good.len() {
            assert_eq!(decode(&good[..n]), None, "cut at {n}: no panic, no value");
        }
        assert_eq!(decode(b"zz\0"), None);
        assert_eq!(decode(&[0, 0, 5, 0, 4, 0, 0, 0]), None, "level differs from version");
        assert_eq!(decode(&[0, 0, 9, 0, 9, 0, 0, 0, 0, 0, 0, 0]), None, "unknown version");
        assert_eq!(decode(b"no terminator"), None);
    }
}
