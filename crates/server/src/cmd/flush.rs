//! FLUSH (MS-SMB2 2.2.17, 2.2.18; processing 3.3.5.11).

use crate::cmd::create::WRITE_ACCESS;
use crate::dispatch::{Ctx, HResult, Req};
use crate::open::OpenKind;
use smbq_wire::flush::{decode_request, encode_response};
use smbq_wire::NtStatus;

/// Handle an SMB2 FLUSH (MS-SMB2 3.3.5.11): write the file's data and
/// metadata to stable storage.
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let fid = decode_request(req.msg).map_err(NtStatus::from)?;
    let open = ctx.open(fid)?;
    //= MS-SMB2 3.3.5.11
    //# If Open.GrantedAccess does not include FILE_WRITE_DATA or
    //# FILE_APPEND_DATA, the server MUST fail the request with
    //# STATUS_ACCESS_DENIED.
    if open.access & WRITE_ACCESS == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    if let OpenKind::File(h) = &open.kind {
        h.sync().map_err(NtStatus::from)?;
    }
    encode_response(ctx.out);
    Ok(NtStatus::SUCCESS)
}
