//! CLOSE (MS-SMB2 2.2.15, 2.2.16; processing 3.3.5.10), and closing opens
//! when their tree, session or connection goes away.

use crate::ctx::{Ctx, HResult, Req};
use smbq_wire::close::{CloseRequest, CloseResponse, POSTQUERY_ATTRIB};
use smbq_wire::NtStatus;

/// Handle an SMB2 CLOSE (MS-SMB2 3.3.5.10).
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let r = CloseRequest::decode(req.msg).map_err(NtStatus::from)?;
    let fid = ctx.resolve(r.file_id)?;
    let mut resp = CloseResponse::default();
    // Closed first: what it reports includes the write time the close set.
    let o = ctx.conn.close_open(fid.volatile, ctx.now).ok_or(NtStatus::FILE_CLOSED)?;
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
                crate::meta::meta(&st)
            }
            None => crate::meta::pipe_meta(),
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

