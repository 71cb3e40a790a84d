//! CLOSE (MS-SMB2 2.2.15, 2.2.16; processing 3.3.5.10), and closing opens
//! when their tree, session or connection goes away.

use crate::connection::ConnState;
use crate::dispatch::{Ctx, HResult, Req};
use crate::open::{Open, OpenKind};
use smbq_wire::NtStatus;

pub fn handle(_ctx: &mut Ctx<'_>, _req: &Req<'_>) -> HResult {
    Err(NtStatus::NOT_SUPPORTED)
}

/// Forget an open: release it from the global file table and, when it was
/// the last open of a file marked delete-on-close, delete the file.
pub fn close_open(st: &mut ConnState, volatile: u64) -> Option<Open> {
    let open = st.opens.remove(&volatile)?;
    if open.file_key != 0 {
        let owner = open.owner(st.id);
        let mut files = st.server.lock_files();
        let entry = files.entry(open.file_key);
        if open.delete_on_close {
            entry.delete_pending = true;
        }
        let delete = entry.delete_pending;
        let last = files.remove_open(open.file_key, owner);
        drop(files);
        if let (true, true, Some(fs), OpenKind::File(h)) = (last, delete, open.share.fs(), &open.kind) {
            if let Err(e) = fs.unlink(&open.path, h.is_dir) {
                tracing::debug!(path = %open.path, error = %e, "delete on close failed");
            }
        }
    }
    Some(open)
}

/// Close every open matching `pred` (tree disconnect, logoff).
pub fn close_where(st: &mut ConnState, pred: impl Fn(&Open) -> bool) {
    let ids: Vec<u64> = st.opens.iter().filter(|(_, o)| pred(o)).map(|(k, _)| *k).collect();
    for v in ids {
        close_open(st, v);
    }
}
