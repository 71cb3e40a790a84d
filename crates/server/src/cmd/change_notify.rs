//! CHANGE_NOTIFY (MS-SMB2 2.2.35, 2.2.36; processing 3.3.5.19; MS-FSA
//! 2.1.5.10).
//!
//! The first request on a directory open starts watching it
//! ([`crate::notify`], inotify): its CompletionFilter, SMB2_WATCH_TREE
//! and OutputBufferLength hold until the open closes, and changes between
//! requests are kept for the next one, as Windows does. A request that
//! finds changes waiting completes at once; otherwise it goes async and
//! completes when a change arrives (FILE_NOTIFY_INFORMATION entries), with
//! STATUS_NOTIFY_ENUM_DIR and no data when they do not fit (or when
//! watching the directory or its tree takes more inotify watches than
//! `limits.notify_watches_per_session` or `limits.notify_watches` leave:
//! the client enumerates the directory instead), with
//! STATUS_DELETE_PENDING when the directory is being deleted, with
//! STATUS_CANCELLED on CANCEL (dispatch) and with STATUS_NOTIFY_CLEANUP
//! when its handle closes.

use crate::pending::AsyncWork;
use crate::ctx::{Ctx, HResult, Req};
use crate::notify::{self, Outcome, Waiting, Watch};
use crate::open::access;
use smbq_wire::header::HEADER_LEN;
use smbq_wire::{FileId, NtStatus, Reader};
use std::sync::Arc;

/// STATUS_NOTIFY_CLEANUP (MS-ERREF 2.3.1).
const NOTIFY_CLEANUP: NtStatus = NtStatus(0x0000_010B);
/// SMB2_WATCH_TREE (MS-SMB2 2.2.35 Flags).
const WATCH_TREE: u16 = 0x0001;

pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let mut r = Reader::new(req.body());
    r.skip(2).map_err(NtStatus::from)?; // StructureSize
    let flags = r.u16().map_err(NtStatus::from)?;
    let output_len = r.u32().map_err(NtStatus::from)?;
    let fid = FileId::decode(&mut r).map_err(NtStatus::from)?;
    let completion_filter = r.u32().map_err(NtStatus::from)?;
    if output_len > ctx.max_io() {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let conn_id = ctx.conn.id;
    let server = Arc::clone(&ctx.conn.server);
    let open = ctx.open(fid)?;
    //# If the open is not a directory, the server MUST fail the request with
    //# STATUS_INVALID_PARAMETER.
    if !open.handle().is_some_and(|h| h.is_dir) {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    if open.access & access::FILE_READ_DATA == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    let (volatile, file_key) = (open.file_id.volatile, open.file_key);
    if delete_pending(ctx, file_key) {
        return Err(NtStatus::DELETE_PENDING);
    }
    // Watches of opens this connection closed since its last request go.
    let opens = &ctx.conn.opens;
    notify::sweep(&server, conn_id, |v| opens.contains_key(&v));
    let open = ctx.conn.opens.get(&volatile).ok_or(NtStatus::FILE_CLOSED)?;
    let waiting = Arc::new(Waiting { len: output_len });
    let params = (completion_filter, flags & WATCH_TREE != 0, output_len);
    match notify::request(&server, conn_id, volatile, open, params, &waiting) {
        Outcome::Nothing => {
            wait_for_delete(ctx, file_key);
            ctx.go_async = Some(AsyncWork::Notify(Watch { volatile, file_key, waiting }));
            Ok(NtStatus::PENDING)
        }
        other => finish(ctx, other),
    }
}

/// A watch finishes when a change arrives, when its directory is being
/// deleted, or when its handle is gone.
pub fn retry(ctx: &mut Ctx<'_>, w: &mut Watch) -> Option<HResult> {
    let server = Arc::clone(&ctx.conn.server);
    if !ctx.conn.opens.contains_key(&w.volatile) {
        notify::forget(&server, w.volatile);
        return Some(Err(NOTIFY_CLEANUP));
    }
    if delete_pending(ctx, w.file_key) {
        return Some(Err(NtStatus::DELETE_PENDING));
    }
    match notify::poll(&server, ctx.conn.id, w.volatile, w.waiting.len) {
        Outcome::Nothing => {
            wait_for_delete(ctx, w.file_key);
            None
        }
        other => Some(finish(ctx, other)),
    }
}

/// The response to a request that found changes (or could not take them).
fn finish(ctx: &mut Ctx<'_>, outcome: Outcome) -> HResult {
    match outcome {
        Outcome::Changes(buf) => {
            //= MS-SMB2 2.2.36: StructureSize 9, OutputBufferOffset from the
            //= header, OutputBufferLength, the FILE_NOTIFY_INFORMATION entries.
            let offset = (ctx.offset() + 8) as u16;
            debug_assert_eq!(usize::from(offset), HEADER_LEN + 8);
            ctx.out.extend_from_slice(&9u16.to_le_bytes());
            ctx.out.extend_from_slice(&offset.to_le_bytes());
            ctx.out.extend_from_slice(&(buf.len() as u32).to_le_bytes());
            ctx.out.extend_from_slice(&buf);
            Ok(NtStatus::SUCCESS)
        }
        //= MS-SMB2 3.3.5.19: changes that do not fit complete the request
        //= with STATUS_NOTIFY_ENUM_DIR and no data.
        Outcome::EnumDir => Err(NtStatus::NOTIFY_ENUM_DIR),
        Outcome::DeletePending => Err(NtStatus::DELETE_PENDING),
        Outcome::Nothing => Err(NtStatus::INTERNAL_ERROR),
    }
}

/// Whether the watched directory is being deleted (delete-on-close set by
/// a handle that closed, or disposition set): Windows then fails the
/// request with STATUS_DELETE_PENDING (smbtorture smb2.notify.rmdir*).
fn delete_pending(ctx: &Ctx<'_>, file_key: u64) -> bool {
    file_key != 0 && ctx.conn.server.files.get(file_key).is_some_and(|e| e.delete_pending)
}

/// Be woken when an open of the directory closes (it may set delete-pending).
fn wait_for_delete(ctx: &Ctx<'_>, file_key: u64) {
    if file_key != 0 {
        if let Some(mut e) = ctx.conn.server.files.get(file_key) {
            e.wait(ctx.conn.id);
        }
    }
}
