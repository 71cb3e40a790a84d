//! The SMB3 POSIX extensions, as Samba publishes and implements them
//! (`librpc/idl/smb3posix.idl`, Samba's "SMB3 POSIX Extensions" page):
//! the SMB2_POSIX_EXTENSIONS_AVAILABLE negotiate context, the POSIX create
//! context, the POSIX information level (100) of QUERY_INFO and
//! QUERY_DIRECTORY, and the symlink reparse buffer (MS-FSCC 2.1.2.4) that
//! POSIX clients create and read symlinks with.

use crate::reader::{Put, Reader};
use crate::security::Sid;
use crate::DecodeError;

/// The negotiate context type a client offers and the server echoes.
pub const NEGOTIATE_CONTEXT: u16 = 0x0100;
/// The one variant defined: the negotiate context's data and the create
/// context's name (`SMB2_CREATE_TAG_POSIX`).
pub const TAG: [u8; 16] = [
    0x93, 0xAD, 0x25, 0x50, 0x9C, 0xB4, 0x11, 0xE7, 0xB4, 0x23, 0x83, 0xDE, 0x96, 0x8B, 0xCD, 0x7C,
];
/// FileInformationClass of FILE_POSIX_INFORMATION (QUERY_INFO and
/// QUERY_DIRECTORY alike).
pub const INFO_CLASS: u8 = 100;

/// IO_REPARSE_TAG_SYMLINK (MS-FSCC 2.1.2.1).
pub const REPARSE_TAG_SYMLINK: u32 = 0xA000_000C;
/// IO_REPARSE_TAG_NFS: FIFOs, sockets and devices (MS-FSCC 2.1.2.1).
pub const REPARSE_TAG_NFS: u32 = 0x8000_0014;
/// SYMLINK_FLAG_RELATIVE (MS-FSCC 2.1.2.4).
pub const SYMLINK_FLAG_RELATIVE: u32 = 1;
/// The largest reparse buffer a file may hold (MAXIMUM_REPARSE_DATA_BUFFER_SIZE).
pub const MAX_REPARSE_BUFFER: usize = 16 * 1024;

/// S-1-22-1-uid: a Unix user, as Samba names one without a domain account.
pub fn unix_user_sid(uid: u32) -> Sid {
    Sid::new(22, &[1, uid])
}

/// S-1-22-2-gid: a Unix group.
pub fn unix_group_sid(gid: u32) -> Sid {
    Sid::new(22, &[2, gid])
}

/// S-1-5-88-3-mode: the ACE trustee a POSIX client sets a file's mode with
/// (SET_INFO of a DACL holding only this ACE; MS-NFS's "NFS mode" SID).
pub fn mode_from_sid(sid: &Sid) -> Option<u32> {
    match sid.sub.as_slice() {
        [88, 3, mode] if sid.authority == 5 => Some(*mode),
        _ => None,
    }
}

/// The uid of S-1-22-1-uid, the gid of S-1-22-2-gid.
pub fn unix_id_from_sid(sid: &Sid, group: bool) -> Option<u32> {
    match sid.sub.as_slice() {
        [kind, id] if sid.authority == 22 && *kind == 1 + u32::from(group) => Some(*id),
        _ => None,
    }
}

/// The Unix file types in the order the wire numbers them (0 to 6), as
/// `S_IFMT` values.
const FILE_TYPES: [u32; 7] = [0o100000, 0o040000, 0o120000, 0o020000, 0o060000, 0o010000, 0o140000];
const TYPE_SHIFT: u32 = 12;
const TYPE_MASK: u32 = 0o070000;
/// Permission bits, setuid, setgid and sticky: the same bits on the wire as in `st_mode`.
pub const PERMISSION_BITS: u32 = 0o7777;

/// `st_mode` (type and permissions) to the wire's POSIX mode.
pub fn mode_to_wire(st_mode: u32) -> u32 {
    let kind = FILE_TYPES.iter().position(|t| *t == st_mode & 0o170000).unwrap_or(0) as u32;
    st_mode & PERMISSION_BITS | kind << TYPE_SHIFT
}

/// The wire's POSIX mode to `st_mode` (an unknown type reads as none).
pub fn mode_from_wire(wire: u32) -> u32 {
    let kind = ((wire & TYPE_MASK) >> TYPE_SHIFT) as usize;
    wire & PERMISSION_BITS | FILE_TYPES.get(kind).copied().unwrap_or(0)
}

/// `smb3_posix_cc_info`: the POSIX create context's response, and the
/// tail of FILE_POSIX_INFORMATION.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CcInfo {
    pub nlinks: u32,
    pub reparse_tag: u32,
    /// The wire mode ([`mode_to_wire`]).
    pub mode: u32,
    pub owner: Sid,
    pub group: Sid,
}

impl CcInfo {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u32(self.nlinks);
        out.u32(self.reparse_tag);
        out.u32(self.mode);
        self.owner.encode(out);
        self.group.encode(out);
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<CcInfo, DecodeError> {
        Ok(CcInfo { nlinks: r.u32()?, reparse_tag: r.u32()?, mode: r.u32()?, owner: Sid::decode(r)?, group: Sid::decode(r)? })
    }
}

/// The POSIX create context's request: the mode for a new file (the type
/// bits are ignored). Exactly four bytes; anything else is
/// STATUS_INVALID_PARAMETER, as Samba answers.
pub fn decode_create_request(data: &[u8]) -> Result<u32, DecodeError> {
    let bytes: [u8; 4] = data.try_into().map_err(|_| DecodeError::Invalid)?;
    Ok(u32::from_le_bytes(bytes))
}

/// FILE_POSIX_INFORMATION (`smb3_file_posix_information`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PosixInfo {
    pub creation_time: u64,
    pub last_access_time: u64,
    pub last_write_time: u64,
    pub change_time: u64,
    pub end_of_file: u64,
    pub allocation_size: u64,
    pub attributes: u32,
    pub inode: u64,
    pub device: u32,
    pub cc: CcInfo,
}

impl PosixInfo {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u64(self.creation_time);
        out.u64(self.last_access_time);
        out.u64(self.last_write_time);
        out.u64(self.change_time);
        out.u64(self.end_of_file);
        out.u64(self.allocation_size);
        out.u32(self.attributes);
        out.u64(self.inode);
        out.u32(self.device);
        out.u32(0);
        self.cc.encode(out);
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<PosixInfo, DecodeError> {
        Ok(PosixInfo {
            creation_time: r.u64()?,
            last_access_time: r.u64()?,
            last_write_time: r.u64()?,
            change_time: r.u64()?,
            end_of_file: r.u64()?,
            allocation_size: r.u64()?,
            attributes: r.u32()?,
            inode: r.u64()?,
            device: { let d = r.u32()?; r.skip(4)?; d },
            cc: CcInfo::decode(r)?,
        })
    }
}

/// One QUERY_DIRECTORY entry of class [`INFO_CLASS`]: NextEntryOffset,
/// FileIndex, the [`PosixInfo`], then FileNameLength and the name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PosixDirEntry {
    pub info: PosixInfo,
    pub name: String,
}

/// Decode a QUERY_DIRECTORY output buffer of class [`INFO_CLASS`].
pub fn decode_dir_entries(buf: &[u8]) -> Result<Vec<PosixDirEntry>, DecodeError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    loop {
        let mut r = Reader::new(buf.get(at..).ok_or(DecodeError::OutOfBounds)?);
        let next = r.u32()? as usize;
        r.skip(4)?;
        let info = PosixInfo::decode(&mut r)?;
        let len = r.u32()? as usize;
        let name = crate::reader::utf16le(r.take(len)?)?;
        out.push(PosixDirEntry { info, name });
        if next == 0 {
            return Ok(out);
        }
        at = at.checked_add(next).ok_or(DecodeError::OutOfBounds)?;
    }
}

/// A symlink reparse buffer (MS-FSCC 2.1.2.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symlink {
    pub substitute: String,
    pub print: String,
    pub flags: u32,
}

impl Symlink {
    /// A Unix symlink's target as POSIX clients and Samba give it: the
    /// same text in both names, relative unless it starts with `/`.
    pub fn from_target(target: &str) -> Symlink {
        let flags = if target.starts_with('/') { 0 } else { SYMLINK_FLAG_RELATIVE };
        Symlink { substitute: target.into(), print: target.into(), flags }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let (sub, print) = (crate::reader::utf16_len(&self.substitute), crate::reader::utf16_len(&self.print));
        out.u32(REPARSE_TAG_SYMLINK);
        out.u16((12 + sub + print) as u16);
        out.u16(0);
        out.u16(0);
        out.u16(sub as u16);
        out.u16(sub as u16);
        out.u16(print as u16);
        out.u32(self.flags);
        crate::reader::put_utf16le(out, &self.substitute);
        crate::reader::put_utf16le(out, &self.print);
    }

    /// Decode a whole reparse buffer holding a symlink.
    pub fn decode(buf: &[u8]) -> Result<Symlink, DecodeError> {
        let (tag, data) = split_reparse_buffer(buf)?;
        if tag != REPARSE_TAG_SYMLINK {
            return Err(DecodeError::Invalid);
        }
        let mut r = Reader::new(data);
        let (sub_off, sub_len) = (r.u16()? as usize, r.u16()? as usize);
        let (print_off, print_len) = (r.u16()? as usize, r.u16()? as usize);
        let flags = r.u32()?;
        let path = r.rest();
        let name = |off: usize, len: usize| {
            let end = off.checked_add(len).ok_or(DecodeError::OutOfBounds)?;
            crate::reader::utf16le(path.get(off..end).ok_or(DecodeError::OutOfBounds)?)
        };
        Ok(Symlink { substitute: name(sub_off, sub_len)?, print: name(print_off, print_len)?, flags })
    }
}

/// A REPARSE_DATA_BUFFER's tag and data (MS-FSCC 2.1.2.2), its
/// ReparseDataLength checked against the buffer, as FSCTL_SET_REPARSE_POINT
/// requires (MS-FSA 2.1.5.10.37).
pub fn split_reparse_buffer(buf: &[u8]) -> Result<(u32, &[u8]), DecodeError> {
    if buf.len() > MAX_REPARSE_BUFFER {
        return Err(DecodeError::TooLong);
    }
    let mut r = Reader::new(buf);
    let tag = r.u32()?;
    let len = r.u16()? as usize;
    r.skip(2)?;
    let data = r.rest();
    if data.len() != len {
        return Err(DecodeError::Invalid);
    }
    Ok((tag, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_as_samba_maps_them() {
        // libsmb.unix_mode_to_wire(S_IFDIR | 0o755) == 0o10755 (type 1 << 12).
        assert_eq!(mode_to_wire(0o040755), 0o010755);
        assert_eq!(mode_to_wire(0o100644), 0o000644);
        assert_eq!(mode_to_wire(0o120777), 0o020777);
        assert_eq!(mode_to_wire(0o010600), 0o050600);
        assert_eq!(mode_to_wire(0o104755), 0o004755);
        for m in [0o040755, 0o100644, 0o120777, 0o020600, 0o060600, 0o010600, 0o140755, 0o107777] {
            assert_eq!(mode_from_wire(mode_to_wire(m)), m);
        }
        assert_eq!(mode_from_wire(0o070644), 0o644, "an unknown type is dropped");
    }

    #[test]
    fn cc_info_layout() {
        let cc = CcInfo { nlinks: 1, reparse_tag: 0, mode: 0o600, owner: unix_user_sid(1000), group: unix_group_sid(100) };
        let mut out = Vec::new();
        cc.encode(&mut out);
        // NDR_NOALIGN: 3 u32s, then two 16-byte SIDs back to back.
        assert_eq!(out.len(), 12 + 16 + 16);
        assert_eq!(&out[12..20], &[1, 2, 0, 0, 0, 0, 0, 22]);
        assert_eq!(&out[20..28], &[1, 0, 0, 0, 0xe8, 3, 0, 0]);
        assert_eq!(CcInfo::decode(&mut Reader::new(&out)).unwrap(), cc);
    }

    #[test]
    fn sids_for_modes_and_ids() {
        assert_eq!(mode_from_sid(&Sid::new(5, &[88, 3, 0o640])), Some(0o640));
        assert_eq!(mode_from_sid(&Sid::new(5, &[88, 1, 0o640])), None);
        assert_eq!(unix_id_from_sid(&unix_user_sid(7), false), Some(7));
        assert_eq!(unix_id_from_sid(&unix_group_sid(7), true), Some(7));
        assert_eq!(unix_id_from_sid(&unix_group_sid(7), false), None);
        assert_eq!(unix_user_sid(0).to_string(), "S-1-22-1-0");
    }

    #[test]
    fn create_request_is_four_bytes() {
        assert_eq!(decode_create_request(b"\xa4\x01\0\0").unwrap(), 0o644);
        assert!(decode_create_request(b"00000").is_err());
        assert!(decode_create_request(b"").is_err());
    }

    #[test]
    fn posix_info_and_dir_entries_round_trip() {
        let info = PosixInfo {
            creation_time: 1,
            last_access_time: 2,
            last_write_time: 3,
            change_time: 4,
            end_of_file: 5,
            allocation_size: 4096,
            attributes: 0x20,
            inode: 77,
            device: 9,
            cc: CcInfo { nlinks: 1, reparse_tag: 0, mode: 0o644, owner: unix_user_sid(0), group: unix_group_sid(0) },
        };
        let mut one = Vec::new();
        info.encode(&mut one);
        assert_eq!(one.len(), 68 + 44);
        assert_eq!(PosixInfo::decode(&mut Reader::new(&one)).unwrap(), info);
        // Two directory entries, the first padded to 8 bytes.
        let mut buf = Vec::new();
        for (i, name) in ["a", "bb"].iter().enumerate() {
            let start = buf.len();
            buf.u32(0);
            buf.u32(0);
            info.encode(&mut buf);
            buf.u32(crate::reader::utf16_len(name) as u32);
            crate::reader::put_utf16le(&mut buf, name);
            if i == 0 {
                while buf.len() % 8 != 0 {
                    buf.push(0);
                }
                let next = (buf.len() - start) as u32;
                buf[start..start + 4].copy_from_slice(&next.to_le_bytes());
            }
        }
        let entries = decode_dir_entries(&buf).unwrap();
        assert_eq!(entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["a", "bb"]);
        assert!(decode_dir_entries(&buf[..40]).is_err());
    }

    #[test]
    fn symlink_buffers() {
        // MS-FSCC 2.1.2.4, built as Samba's reparse_symlink.put(tag, 0, b"asdf")
        // would lay it out for a relative target "dir/x".
        let link = Symlink::from_target("dir/x");
        let mut out = Vec::new();
        link.encode(&mut out);
        assert_eq!(&out[..4], &0xA000_000Cu32.to_le_bytes());
        assert_eq!(u16::from_le_bytes([out[4], out[5]]) as usize, out.len() - 8);
        assert_eq!(Symlink::decode(&out).unwrap(), link);
        assert_eq!(link.flags, SYMLINK_FLAG_RELATIVE);
        assert_eq!(Symlink::from_target("/etc").flags, 0);
        // A length that disagrees with the buffer, a name past its end.
        let mut bad = out.clone();
        bad[4] ^= 1;
        assert!(Symlink::decode(&bad).is_err());
        let mut bad = out.clone();
        bad[10] = 200;
        assert!(Symlink::decode(&bad).is_err());
        assert!(split_reparse_buffer(&vec![0; MAX_REPARSE_BUFFER + 1]).is_err());
    }
}
