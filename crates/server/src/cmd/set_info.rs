//! SET_INFO (MS-SMB2 2.2.39, 2.2.40; processing 3.3.5.21): times and
//! attributes, size, delete disposition and rename (MS-FSCC 2.4, with the
//! checks of MS-FSA 2.1.5.14).

use crate::meta::ea_status;
use crate::share_mode::{share_conflict, share_path};
use crate::ctx::{Ctx, HResult, Req};
use crate::open::{access, OpenKind};
use smbq_vfs::SetTimes;
use smbq_wire::create::{options, share};
use smbq_wire::fscc::{self, attr, class, BasicInfo, RenameInfo};
use smbq_wire::query_info::info_type;
use smbq_wire::set_info::{encode_response, SetInfoRequest};
use smbq_wire::{DecodeError, FileId, NtStatus};
use std::sync::Arc;

/// A buffer shorter than its structure is INFO_LENGTH_MISMATCH (MS-FSA 2.1.5.14).
fn short(e: DecodeError) -> NtStatus {
    match e {
        DecodeError::Truncated => NtStatus::INFO_LENGTH_MISMATCH,
        e => NtStatus::from(e),
    }
}

/// FILETIME 0 leaves a time alone; -1 and -2 (stop / resume automatic
/// updates, MS-FSCC 2.4.7) change nothing here either.
fn time(t: u64) -> Option<u64> {
    match t {
        0 | u64::MAX | 0xFFFF_FFFF_FFFF_FFFE => None,
        t => Some(t),
    }
}

/// Whether a SET_INFO body changes the share: everything but the classes
/// that only set the handle's own state (position, mode).
pub fn modifies(body: &[u8]) -> bool {
    let (kind, class) = (body.get(2).copied(), body.get(3).copied());
    !(kind == Some(info_type::FILE) && matches!(class, Some(class::POSITION | class::MODE)))
}

/// Handle an SMB2 SET_INFO (MS-SMB2 3.3.5.21).
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let r = SetInfoRequest::decode(req.msg).map_err(NtStatus::from)?;
    //= MS-SMB2 3.3.5.21
    //# If BufferLength is greater than Connection.MaxTransactSize, the
    //# server MUST fail the request with STATUS_INVALID_PARAMETER.
    if r.buffer.len() > ctx.max_io() as usize {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let fid = ctx.resolve(r.file_id)?;
    match r.info_type {
        info_type::FILE if r.class == class::RENAME => {
            if let Some(deadline) = rename(ctx, fid, r.buffer)? {
                return ctx.defer(req.msg, deadline);
            }
        }
        info_type::FILE => file(ctx, fid, &r)?,
        info_type::SECURITY => security(ctx, fid, &r)?,
        info_type::FILESYSTEM | info_type::QUOTA => return Err(NtStatus::NOT_SUPPORTED),
        _ => return Err(NtStatus::INVALID_PARAMETER),
    }
    encode_response(ctx.out);
    Ok(NtStatus::SUCCESS)
}

fn need(granted: u32, bits: u32) -> Result<(), NtStatus> {
    if granted & bits == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    Ok(())
}

/// SMB2_0_INFO_FILE classes (MS-SMB2 3.3.5.21.1).
fn file(ctx: &mut Ctx<'_>, fid: FileId, r: &SetInfoRequest<'_>) -> Result<(), NtStatus> {
    let open = ctx.conn.opens.get_mut(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
    let h = match &open.kind {
        OpenKind::File(h) => h,
        OpenKind::Pipe(_) if r.class == class::PIPE => return Ok(()),
        OpenKind::Pipe(_) => return Err(NtStatus::NOT_SUPPORTED),
    };
    let read_only_share = open.share.read_only();
    let writable = || if read_only_share { Err(NtStatus::ACCESS_DENIED) } else { Ok(()) };
    let buf = r.buffer;
    match r.class {
        class::BASIC => {
            let b = BasicInfo::decode(buf).map_err(short)?;
            need(open.access, access::FILE_WRITE_ATTRIBUTES)?;
            writable()?;
            // MS-FSA 2.1.5.15.2: DIRECTORY on a data stream and TEMPORARY on
            // a directory are INVALID_PARAMETER.
            let wrong_kind = if h.is_dir { attr::TEMPORARY } else { attr::DIRECTORY };
            if b.attributes & !attr::VALID_SET != 0 || b.attributes & wrong_kind != 0 {
                return Err(NtStatus::INVALID_PARAMETER);
            }
            let t = SetTimes {
                creation_time: time(b.creation_time),
                last_access_time: time(b.last_access_time),
                last_write_time: time(b.last_write_time),
            };
            if t.creation_time.is_some() || t.last_access_time.is_some() || t.last_write_time.is_some() {
                h.set_times(&t).map_err(NtStatus::from)?;
            }
            // Any FileBasicInformation, even with no time in it, makes a
            // pending write time update happen; a time set stays.
            let server = &ctx.conn.server;
            if let Some(mut e) = server.files.get(open.file_key) {
                match t.last_write_time {
                    Some(w) => e.write_time = Some(crate::files::WriteTime::Set(w)),
                    None => e.flush_write_time(ctx.now, server.now()),
                }
            }
            //= MS-FSA 2.1.5.14.2
            //# If InputBuffer.FileAttributes != 0 [...] Open.File.FileAttributes
            //# is set to InputBuffer.FileAttributes (NORMAL alone clears
            //# them; DIRECTORY is implied by the object).
            // Watchers hear of it from inotify (IN_ATTRIB: the
            // extended attribute or the mode changed).
            //# FILE_ATTRIBUTE_SPARSE_FILE is not changed this way (only by
            //# FSCTL_SET_SPARSE): it keeps its current value.
            if b.attributes != 0 {
                let sparse = h.stat().map_err(NtStatus::from)?.attributes & attr::SPARSE_FILE;
                h.set_attributes(b.attributes & !attr::SPARSE_FILE | sparse).map_err(NtStatus::from)?;
            }
            Ok(())
        }
        class::END_OF_FILE | class::ALLOCATION => {
            let len = fscc::decode_u64(buf).map_err(short)?;
            need(open.access, access::FILE_WRITE_DATA)?;
            writable()?;
            if h.is_dir {
                return Err(NtStatus::INVALID_PARAMETER);
            }
            if len > i64::MAX as u64 {
                return Err(NtStatus::INVALID_PARAMETER);
            }
            // A size change breaks level II oplocks, as a write does.
            let owner = open.owner();
            let server = &ctx.conn.server;
            if let Some(mut e) = server.files.get(open.file_key) {
                server.send_breaks(&crate::oplock::contend_level2(&mut e, owner, ctx.now, server.break_timeout()));
                e.flush_write_time(ctx.now, server.now());
            }
            if r.class == class::END_OF_FILE {
                h.set_len(len).map_err(NtStatus::from)
            } else {
                h.set_allocation(len).map_err(NtStatus::from)
            }
        }
        class::DISPOSITION => {
            let delete = fscc::decode_disposition(buf).map_err(short)?;
            //= MS-FSA 2.1.5.14.3
            //# If Open.GrantedAccess does not contain DELETE, the operation
            //# MUST be failed with STATUS_ACCESS_DENIED.
            need(open.access, access::DELETE)?;
            if delete {
                writable()?;
                if open.path.is_empty() {
                    return Err(NtStatus::CANNOT_DELETE);
                }
                let st = h.stat().map_err(NtStatus::from)?;
                if st.is_dir {
                    if h.read_dir().map_err(NtStatus::from)?.len() > 2 {
                        return Err(NtStatus::DIRECTORY_NOT_EMPTY);
                    }
                } else if st.attributes & attr::READONLY != 0 {
                    return Err(NtStatus::CANNOT_DELETE);
                }
            }
            open.delete_on_close = delete;
            ctx.conn.server.files.entry(open.file_key).delete_pending = delete;
            Ok(())
        }
        class::POSITION => {
            open.position = fscc::decode_u64(buf).map_err(short)?;
            Ok(())
        }
        // FileModeInformation (MS-FSCC 2.4.26): as Samba, only
        // FILE_WRITE_THROUGH and FILE_SEQUENTIAL_ONLY can be changed (the
        // synchronous-I/O and buffering modes are fixed at open); the new
        // mode takes effect for WRITE and is what queries report.
        class::MODE => {
            const SETTABLE: u32 = options::WRITE_THROUGH | options::SEQUENTIAL_ONLY;
            let mode = fscc::decode_u32(buf).map_err(short)?;
            if mode & !SETTABLE != 0 {
                return Err(NtStatus::INVALID_PARAMETER);
            }
            open.create_options = (open.create_options & !SETTABLE) | mode;
            Ok(())
        }
        class::LINK | class::SHORT_NAME => Err(NtStatus::NOT_SUPPORTED),
        //= MS-FSA 2.1.5.14.4
        //# FileFullEaInformation: set each EA of the list; an empty value
        //# removes it.
        class::FULL_EA => {
            need(open.access, access::FILE_WRITE_EA)?;
            writable()?;
            let eas = smbq_wire::ea::decode_full(buf).map_err(ea_status)?;
            h.set_eas(&eas).map_err(NtStatus::from)
        }
        _ => Err(NtStatus::INVALID_INFO_CLASS),
    }
}

/// SMB2_0_INFO_SECURITY (MS-SMB2 3.3.5.21.3, MS-FSA 2.1.5.16): the parts
/// of the descriptor AdditionalInformation selects replace those kept.
/// Owner and group need WRITE_OWNER, the DACL WRITE_DAC, a SACL
/// ACCESS_SYSTEM_SECURITY (never granted here).
fn security(ctx: &mut Ctx<'_>, fid: FileId, r: &SetInfoRequest<'_>) -> Result<(), NtStatus> {
    use smbq_wire::security::{secinfo, SecurityDescriptor};
    let open = ctx.conn.opens.get(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
    let OpenKind::File(h) = &open.kind else { return Err(NtStatus::NOT_SUPPORTED) };
    let info = r.additional_information;
    let new = crate::access::as_set(SecurityDescriptor::decode(r.buffer).map_err(|_| NtStatus::INVALID_PARAMETER)?);
    //= MS-FSA 2.1.5.16
    //# If SecurityInformation contains OWNER_SECURITY_INFORMATION or
    //# GROUP_SECURITY_INFORMATION and Open.GrantedAccess does not contain
    //# WRITE_OWNER, the operation MUST be failed with STATUS_ACCESS_DENIED.
    if info & (secinfo::OWNER | secinfo::GROUP) != 0 {
        need(open.access, access::WRITE_OWNER)?;
    }
    if info & secinfo::DACL != 0 {
        need(open.access, access::WRITE_DAC)?;
    }
    if info & secinfo::SACL != 0 {
        need(open.access, access::ACCESS_SYSTEM_SECURITY)?;
    }
    if open.share.read_only() {
        return Err(NtStatus::ACCESS_DENIED);
    }
    if open.posix && crate::posix_ext::set_security(h, &new, info)? {
        return Ok(());
    }
    let old = crate::access::descriptor(&h.security().map_err(NtStatus::from)?, h.is_dir);
    h.set_security(&old.merge(&new, info).to_bytes()).map_err(NtStatus::from)
}

/// FileRenameInformation (MS-FSCC 2.4.37.2, MS-FSA 2.1.5.14.11).
///
/// A rename takes the handle caching of the file's other leases, and waits
/// for their holders to acknowledge that (or for the break timeout) before
/// it renames, as Samba does (smbtorture smb2.lease.rename_wait): `Some`
/// of when it stops waiting.
fn rename(ctx: &mut Ctx<'_>, fid: FileId, buf: &[u8]) -> Result<Option<std::time::Instant>, NtStatus> {
    let ri = RenameInfo::decode(buf).map_err(short)?;
    let conn = &mut *ctx.conn;
    let open = conn.opens.get(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
    //= MS-SMB2 3.3.5.21.1
    //# the RootDirectory field MUST be zero [for SMB2]
    if ri.root_directory != 0 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    need(open.access, access::DELETE)?;
    let share = Arc::clone(&open.share);
    let fs = open.fs().ok_or(NtStatus::INVALID_PARAMETER)?;
    if fs.read_only() {
        return Err(NtStatus::ACCESS_DENIED);
    }
    if ri.name.starts_with(':') {
        return rename_stream(ctx, fid, &ri.name, ri.replace_if_exists).map(|()| None);
    }
    // A named stream moves only within its file (a target naming a file
    // is refused as Windows refuses it: smbtorture smb2.streams.rename2).
    if !open.posix && smbq_vfs::named_stream(&open.path).is_some() {
        return Err(NtStatus::SHARING_VIOLATION);
    }
    let target = share_path(&ri.name);
    if !open.posix {
        smbq_vfs::check_name(target).map_err(NtStatus::from)?;
    }
    let from = open.path.clone();
    if from.is_empty() || target.is_empty() {
        return Err(NtStatus::ACCESS_DENIED);
    }
    if from == target {
        return Ok(None);
    }
    // Windows renames through an open of the parent directory asking for
    // DELETE and sharing read and write: it fails while another open of
    // the source or target parent holds DELETE, or data access without
    // sharing delete (smbtorture smb2.rename.*delete_access).
    let parent = |p: &str| p.rsplit_once('\\').map_or(String::new(), |(d, _)| d.to_string());
    {
        let mut parents = vec![parent(&from)];
        if parent(target) != parents[0] {
            parents.push(parent(target));
        }
        for p in &parents {
            let Ok(st) = fs.stat_path(p) else { continue };
            if conn.server.files.get(st.file_id).is_some_and(|e| share_conflict(&e.opens, access::DELETE, share::READ | share::WRITE)) {
                return Err(NtStatus::SHARING_VIOLATION);
            }
        }
    }
    let (key, is_dir) = (open.file_key, open.handle().is_some_and(|h| h.is_dir));
    // A file with open streams keeps its name (smbtorture
    // smb2.streams.basefile-rename-with-open-stream, as Windows answers).
    if !conn.server.files.open_streams(key).is_empty() {
        return Err(NtStatus::ACCESS_DENIED);
    }
    let child_prefix = format!("{from}\\");
    let same_share = |o: &crate::open::Open| Arc::ptr_eq(&o.share, &share);
    // MS-FSA 2.1.5.14.11: a directory with open files below it cannot move.
    if is_dir && conn.opens.values().any(|o| same_share(o) && o.path.starts_with(&child_prefix)) {
        return Err(NtStatus::ACCESS_DENIED);
    }
    if let Ok(t) = fs.stat_path(target) {
        if t.file_id != key {
            if !ri.replace_if_exists {
                return Err(NtStatus::OBJECT_NAME_COLLISION);
            }
            // Replacing a file someone has open is refused, as Windows does.
            if conn.server.files.get(t.file_id).is_some_and(|e| !e.opens.is_empty()) {
                return Err(NtStatus::ACCESS_DENIED);
            }
        }
    }
    let own_lease = open.lease.map(|k| (conn.client_guid(), k));
    let owner = open.owner();
    {
        // Other leases lose their handle caching (their handles' name
        // changes under them; smbtorture smb2.lease.v2_rename); the rename
        // waits for the acknowledgments.
        let server = &conn.server;
        let mut entry = server.files.entry(key);
        let breaks = crate::oplock::break_leases(&mut entry, own_lease.as_ref(), crate::oplock::HANDLE, ctx.now, server.break_timeout());
        server.send_breaks(&breaks);
        let others = entry.leases.iter().filter(|l| Some(&l.id) != own_lease.as_ref());
        let wait = others.filter_map(|l| l.breaking.filter(|b| b.to & crate::oplock::HANDLE == 0)).map(|b| b.deadline).min();
        if let Some(deadline) = wait.filter(|d| ctx.now < *d) {
            entry.wait(conn.id);
            return Ok(Some(deadline));
        }
    }
    fs.rename(&from, target, ri.replace_if_exists).map_err(NtStatus::from)?;
    {
        // Every connection's opens of the moved file now name it by `target`.
        let server = &conn.server;
        let spared = {
            let mut entry = server.files.entry(key);
            entry.path = target.to_string();
            entry.parent_lease(owner)
        };
        // Both directories changed.
        server.dir_changed(fs, &from, spared, ctx.now);
        if parent(&from) != parent(target) {
            server.dir_changed(fs, target, spared, ctx.now);
        }
    }
    // Keep the paths of this connection's opens of the moved object current.
    for o in conn.opens.values_mut().filter(|o| Arc::ptr_eq(&o.share, &share)) {
        let new = if o.file_key == key && o.path == from {
            Some(target.to_string())
        } else {
            o.path.strip_prefix(&child_prefix).map(|rest| format!("{target}\\{rest}"))
        };
        if let Some(p) = new {
            if let OpenKind::File(h) = &mut o.kind {
                h.path = p.clone();
            }
            o.path = p;
        }
    }
    Ok(None)
}

/// FileRenameInformation with a target of the form `:name[:$DATA]` or
/// `::$DATA`: rename the stream the handle is open on within its file
/// (MS-FSA 2.1.5.15.11.1, done by the file system). Its opens, here and
/// elsewhere, follow the new name; so does its file-table entry.
fn rename_stream(ctx: &mut Ctx<'_>, fid: FileId, target: &str, replace: bool) -> Result<(), NtStatus> {
    let conn = &mut *ctx.conn;
    let open = conn.opens.get_mut(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
    if open.share.read_only() {
        return Err(NtStatus::ACCESS_DENIED);
    }
    let OpenKind::File(h) = &mut open.kind else { return Err(NtStatus::INVALID_PARAMETER) };
    h.rename_stream(target, replace).map_err(NtStatus::from)?;
    let path = h.path.clone();
    open.path = path.clone();
    let key = open.file_key;
    let files = &conn.server.files;
    let mut entry = files.entry(key);
    if let Some(name) = smbq_vfs::named_stream(&path) {
        files.rename_stream(&mut entry, name);
    }
    entry.path = path;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_times_change_nothing() {
        assert_eq!(time(0), None);
        assert_eq!(time(u64::MAX), None);
        assert_eq!(time(u64::MAX - 1), None);
        assert_eq!(time(132_000_000_000_000_000), Some(132_000_000_000_000_000));
    }

    #[test]
    fn short_buffers() {
        assert_eq!(short(DecodeError::Truncated), NtStatus::INFO_LENGTH_MISMATCH);
        assert_eq!(short(DecodeError::BadString), NtStatus::OBJECT_NAME_INVALID);
        assert_eq!(short(DecodeError::TooLong), NtStatus::INVALID_PARAMETER);
    }
}
