//! CLOSE (MS-SMB2 2.2.15, 2.2.16; processing 3.3.5.10), and closing opens
//! when their tree, session or connection goes away.

use crate::connection::ConnState;
use crate::dispatch::{Ctx, HResult, Req};
use crate::files::WriteTime;
use crate::open::{Open, OpenKind};
use smbq_wire::close::{CloseRequest, CloseResponse, POSTQUERY_ATTRIB};
use smbq_wire::NtStatus;
use std::time::Instant;

/// Handle an SMB2 CLOSE (MS-SMB2 3.3.5.10).
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let r = CloseRequest::decode(req.msg).map_err(NtStatus::from)?;
    let fid = ctx.resolve(r.file_id)?;
    let mut resp = CloseResponse::default();
    // Closed first: what it reports includes the write time the close set.
    let o = close_open(ctx.conn, fid.volatile, ctx.now).ok_or(NtStatus::FILE_CLOSED)?;
    //= MS-SMB2 3.3.5.10
    //# If the Flags field of the request is SMB2_CLOSE_FLAG_POSTQUERY_ATTRIB,
    //# the server MUST set the CreationTime, LastAccessTime, LastWriteTime,
    //# ChangeTime, AllocationSize, EndofFile, and FileAttributes fields [...]
    //# Otherwise, the server MUST set these fields to 0.
    if r.flags & POSTQUERY_ATTRIB != 0 {
        let m = match o.handle() {
            Some(h) => {
                let mut st = h.stat().map_err(NtStatus::from)?;
                ctx.conn.server.files.show_times(&mut st, ctx.now);
                super::create::meta(&st)
            }
            None => super::create::pipe_meta(),
        };
        resp = CloseResponse {
            flags: POSTQUERY_ATTRIB,
            creation_time: m.creation_time,
            last_access_time: m.last_access_time,
            last_write_time: m.last_write_time,
            change_time: m.change_time,
            allocation_size: m.allocation_size,
            end_of_file: m.end_of_file,
            file_attributes: m.attributes,
        };
    }
    resp.encode(ctx.out);
    Ok(NtStatus::SUCCESS)
}

/// Forget an open: release it from the global file table and, when it was
/// the last open of a file marked delete-on-close, delete the file.
pub fn close_open(st: &mut ConnState, volatile: u64, now: Instant) -> Option<Open> {
    let open = st.opens.remove(&volatile)?;
    Some(release(&st.server, open, now))
}

/// Release `open` from the file table (its
/// share mode, oplock and locks), wake whoever waits on the file, and
/// delete the file if it was marked delete-on-close and this was its
/// last open. A deletion, or the close of an open that wrote, changes the
/// directory: its leases break.
pub fn release(server: &crate::server::Server, open: Open, now: Instant) -> Open {
    if open.file_key != 0 {
        let owner = open.owner();
        let files = &server.files;
        let mut entry = files.entry(open.file_key);
        let spared = entry.parent_lease(owner);
        if open.delete_on_close {
            entry.delete_pending = true;
        }
        let delete = entry.delete_pending;
        // The write time a close leaves (files::WriteTime), put on the
        // file (writes moved the file system's meanwhile): a writing
        // handle's, and the last handle's.
        let last = entry.opens.len() == 1;
        let write_time = match entry.write_time {
            Some(w) if open.written || last => {
                let t = w.at_close(now, server.now());
                if !matches!(w, WriteTime::Set(_)) {
                    entry.write_time = Some(WriteTime::Updated { time: t, dirty: false });
                }
                Some(t)
            }
            _ => None,
        };
        let base = entry.stream.as_ref().map(|(b, _)| *b);
        // Another connection may have renamed the file since this open.
        let path = if entry.path.is_empty() { open.path.clone() } else { entry.path.clone() };
        let (last, waiters) = files.remove_open(&mut entry, owner);
        drop(entry);
        // The last open of a stream of a file deleted meanwhile: the file goes now.
        let deferred = base.filter(|_| last).and_then(|b| files.deferred_delete(b));
        server.wake(&waiters);
        if let (Some(t), OpenKind::File(h)) = (write_time.filter(|_| !delete), &open.kind) {
            let times = smbq_vfs::SetTimes { last_write_time: Some(t), ..smbq_vfs::SetTimes::default() };
            if let Err(e) = h.set_times(&times) {
                tracing::debug!(path = %open.path, error = %e, "write time at close not set");
            }
        }
        let Some(fs) = open.fs() else { return open };
        let mut changed = open.written;
        let mut doomed = Vec::new();
        if let (true, true, OpenKind::File(h)) = (last, delete, &open.kind) {
            doomed.push((path.clone(), h.is_dir));
        }
        if let Some(p) = deferred {
            let is_dir = fs.stat_path(&p).is_ok_and(|st| st.is_dir);
            doomed.push((p, is_dir));
        }
        for (p, is_dir) in doomed {
            match fs.unlink(&p, is_dir) {
                Ok(()) => changed = true,
                Err(e) => tracing::debug!(path = %p, error = %e, "delete on close failed"),
            }
        }
        if changed {
            server.dir_changed(fs, &path, spared, now);
        }
    }
    open
}

/// Close every open matching `pred` (tree disconnect, logoff).
pub fn close_where(st: &mut ConnState, now: Instant, pred: impl Fn(&Open) -> bool) {
    let ids: Vec<u64> = st.opens.iter().filter(|(_, o)| pred(o)).map(|(k, _)| *k).collect();
    for v in ids {
        close_open(st, v, now);
    }
}
