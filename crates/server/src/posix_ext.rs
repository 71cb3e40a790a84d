//! The SMB3 POSIX extensions on the server side (smbq_wire::posix): what
//! a POSIX open shows of a file, and the mode and owner changes a POSIX
//! client makes with SET_INFO SECURITY, as Samba 4.24 answers them
//! (source3/smbd/smb2_posix.c, smb2_nttrans.c).
//!
//! A POSIX open is a CREATE with the POSIX create context, on a
//! connection that negotiated the extensions, on a share with `posix`
//! (`crate::cmd::create`); it works on the share's POSIX view
//! (smbq_vfs::PosixFs::posix_view), and only it may ask for
//! FILE_POSIX_INFORMATION (QUERY_INFO and QUERY_DIRECTORY) or change a
//! mode or owner.

use crate::meta::meta;
use smbq_vfs::{FileStat, Handle};
use smbq_wire::posix::{self as wire, CcInfo, PosixInfo};
use smbq_wire::security::{secinfo, SecurityDescriptor, Sid};
use smbq_wire::{NtStatus, Put};

/// S-1-0-0, the NULL SID: the owner of what has none to show.
fn null_sid() -> Sid {
    Sid::new(0, &[0])
}

/// The POSIX create context's answer, and the tail of FILE_POSIX_INFORMATION:
/// links, reparse tag, wire mode, and owner and group as Unix SIDs
/// (S-1-22-1-uid, S-1-22-2-gid); NULL SIDs where the file system shows none.
pub fn cc_info(st: &FileStat) -> CcInfo {
    match st.unix {
        Some(u) => CcInfo {
            nlinks: st.nlink,
            reparse_tag: u.reparse_tag,
            mode: wire::mode_to_wire(u.mode),
            owner: wire::unix_user_sid(u.uid),
            group: wire::unix_group_sid(u.gid),
        },
        None => CcInfo { nlinks: st.nlink, reparse_tag: 0, mode: 0, owner: null_sid(), group: null_sid() },
    }
}

/// The POSIX create context's data in a CREATE response for `st`.
pub fn cc_context(st: &FileStat) -> Vec<u8> {
    let mut out = Vec::new();
    cc_info(st).encode(&mut out);
    out
}

/// FILE_POSIX_INFORMATION of `st` (inode and device 0 where the file
/// system shows none, as Samba shows the share root's `..`).
pub fn info(st: &FileStat) -> PosixInfo {
    let m = meta(st);
    PosixInfo {
        creation_time: m.creation_time,
        last_access_time: m.last_access_time,
        last_write_time: m.last_write_time,
        change_time: m.change_time,
        end_of_file: m.end_of_file,
        allocation_size: m.allocation_size,
        attributes: m.attributes,
        inode: if st.unix.is_some() { st.file_id } else { 0 },
        device: st.unix.map_or(0, |u| u.dev),
        cc: cc_info(st),
    }
}

/// The least a QUERY_DIRECTORY entry of FILE_POSIX_INFORMATION takes:
/// NextEntryOffset, FileIndex, the information with two SIDs of no
/// sub-authority, the name's length.
pub const DIR_ENTRY_MIN: usize = 8 + 68 + 12 + 8 + 8 + 4;

/// Append one QUERY_DIRECTORY entry of FILE_POSIX_INFORMATION, with
/// NextEntryOffset 0 (the caller links entries) and FileIndex 0.
pub fn dir_entry(out: &mut Vec<u8>, st: &FileStat, name: &str) {
    out.u32(0);
    out.u32(0);
    info(st).encode(out);
    out.u32(smbq_wire::reader::utf16_len(name) as u32);
    smbq_wire::reader::put_utf16le(out, name);
}

/// What a POSIX client's SET_INFO SECURITY asks, if it is a mode or
/// owner change rather than a descriptor: a DACL of exactly one ACE for
/// S-1-5-88-3-mode sets the mode (Samba's `check_smb2_posix_chmod_ace`);
/// an owner S-1-22-1-uid and a group S-1-22-2-gid change the owner and
/// group. `Ok(false)` leaves the descriptor to be kept as on any open.
pub fn set_security(h: &Handle, sd: &SecurityDescriptor, info: u32) -> Result<bool, NtStatus> {
    if info & secinfo::DACL != 0 {
        let Some(aces) = sd.dacl.as_ref().map(|d| &d.aces) else { return Ok(false) };
        let [ace] = aces.as_slice() else { return Ok(false) };
        let Some(mode) = ace.sid().and_then(wire::mode_from_sid) else { return Ok(false) };
        // Samba keeps the permission bits alone (S_IRWXU|S_IRWXG|S_IRWXO).
        h.chmod(mode & 0o777).map_err(NtStatus::from)?;
        return Ok(true);
    }
    let uid = (info & secinfo::OWNER != 0).then(|| sd.owner.as_ref().and_then(|s| wire::unix_id_from_sid(s, false)));
    let gid = (info & secinfo::GROUP != 0).then(|| sd.group.as_ref().and_then(|s| wire::unix_id_from_sid(s, true)));
    match (uid, gid) {
        (None, None) | (Some(None), _) | (_, Some(None)) => Ok(false),
        (uid, gid) => {
            h.chown(uid.flatten(), gid.flatten()).map_err(NtStatus::from)?;
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smbq_vfs::UnixStat;

    #[test]
    fn unix_owner_and_null_sids() {
        let st = FileStat {
            nlink: 1,
            file_id: 42,
            unix: Some(UnixStat { mode: 0o100640, uid: 1000, gid: 100, dev: 7, reparse_tag: 0 }),
            ..FileStat::default()
        };
        let i = info(&st);
        assert_eq!((i.inode, i.device, i.cc.mode), (42, 7, 0o640));
        assert_eq!(i.cc.owner.to_string(), "S-1-22-1-1000");
        assert_eq!(i.cc.group.to_string(), "S-1-22-2-100");
        let root_parent = info(&FileStat { unix: None, ..st });
        assert_eq!((root_parent.inode, root_parent.device), (0, 0));
        assert_eq!(root_parent.cc.owner.to_string(), "S-1-0-0");
    }
}
