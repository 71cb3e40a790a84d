//! FLUSH (MS-SMB2 2.2.17, 2.2.18; processing 3.3.5.11).

use crate::share_mode::WRITE_ACCESS;
use crate::pending::AsyncWork;
use crate::ctx::{Ctx, HResult, Req};
use crate::job::Work;
use crate::open::OpenKind;
use smbq_wire::flush::{decode_request, encode_response};
use smbq_wire::NtStatus;

/// Handle an SMB2 FLUSH (MS-SMB2 3.3.5.11): write the file's data and
/// metadata to stable storage.
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let fid = decode_request(req.msg).map_err(NtStatus::from)?;
    // Where the transport runs jobs (and not in a compound), the fsync
    // goes to its pool: answered when the data is on disk.
    let offload = ctx.may_defer;
    let (file_key, granted) = ctx.open(fid).map(|o| (o.file_key, o.access))?;
    //= MS-SMB2 3.3.5.11
    //# If Open.GrantedAccess does not include FILE_WRITE_DATA or
    //# FILE_APPEND_DATA, the server MUST fail the request with
    //# STATUS_ACCESS_DENIED.
    if granted & WRITE_ACCESS == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    // A pending write time update happens now (files::WriteTime).
    let server = &ctx.conn.server;
    if let Some(mut e) = server.files.get(file_key) {
        e.flush_write_time(ctx.now, server.now());
    }
    let open = ctx.open(fid)?;
    let OpenKind::File(h) = &open.kind else {
        encode_response(ctx.out);
        return Ok(NtStatus::SUCCESS);
    };
    if offload {
        let file = h.object();
        let id = ctx.conn.job(file, Work::Sync);
        ctx.go_async = Some(AsyncWork::Job(id));
        return Ok(NtStatus::PENDING);
    }
    h.sync().map_err(NtStatus::from)?;
    encode_response(ctx.out);
    Ok(NtStatus::SUCCESS)
}
