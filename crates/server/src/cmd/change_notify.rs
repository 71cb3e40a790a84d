//! CHANGE_NOTIFY (MS-SMB2 2.2.35, 2.2.36; processing 3.3.5.19).
//!
//! A valid request goes async and stays pending: this server reports no
//! change events yet, so a watch ends only by CANCEL (STATUS_CANCELLED) or
//! when its directory handle closes (STATUS_NOTIFY_CLEANUP), which is what
//! clients such as Windows Explorer and smbtorture's compound tests expect
//! of the protocol flow.

use crate::dispatch::{AsyncWork, Ctx, HResult, Req};
use crate::open::access;
use smbq_wire::{FileId, NtStatus, Reader};

/// STATUS_NOTIFY_CLEANUP (MS-ERREF 2.3.1).
const NOTIFY_CLEANUP: NtStatus = NtStatus(0x0000_010B);

/// A pending watch on a directory open.
pub struct Watch {
    volatile: u64,
}

pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let mut r = Reader::new(req.body());
    r.skip(4).map_err(NtStatus::from)?; // StructureSize, Flags
    let output_len = r.u32().map_err(NtStatus::from)?;
    let fid = FileId::decode(&mut r).map_err(NtStatus::from)?;
    if output_len > ctx.max_io() {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let open = ctx.open(fid)?;
    //# If the open is not a directory, the server MUST fail the request with
    //# STATUS_INVALID_PARAMETER.
    if !open.handle().is_some_and(|h| h.is_dir) {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    if open.access & access::FILE_READ_DATA == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    let volatile = open.file_id.volatile;
    ctx.go_async = Some(AsyncWork::Notify(Watch { volatile }));
    Ok(NtStatus::PENDING)
}

/// A watch finishes when its handle is gone.
pub fn retry(ctx: &mut Ctx<'_>, w: &mut Watch) -> Option<HResult> {
    if ctx.conn.opens.contains_key(&w.volatile) {
        None
    } else {
        Some(Err(NOTIFY_CLEANUP))
    }
}
