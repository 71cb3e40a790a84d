//! OPLOCK_BREAK acknowledgment (MS-SMB2 2.2.24.1, 2.2.25.1; processing
//! 3.3.5.22.1): the holder of a broken oplock says which level it keeps.

use crate::dispatch::{Ctx, HResult, Req};
use crate::oplock;
use smbq_wire::oplock_break::{decode_ack, encode};
use smbq_wire::NtStatus;

/// Handle an oplock break acknowledgment; opens waiting for it are woken.
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let (level, fid) = decode_ack(req.msg).map_err(NtStatus::from)?;
    let conn_id = ctx.conn.id;
    let open = ctx.open(fid)?;
    let (owner, key, fid) = (open.owner(conn_id), open.file_key, open.file_id);
    let server = std::sync::Arc::clone(&ctx.conn.server);
    let mut files = server.lock_files();
    let entry = files.files.get_mut(&key).ok_or(NtStatus::INVALID_OPLOCK_PROTOCOL)?;
    let result = oplock::acknowledge(entry, owner, level);
    let waiters = std::mem::take(&mut entry.waiters);
    drop(files);
    server.wake(&waiters);
    encode(ctx.out, result?, fid);
    Ok(NtStatus::SUCCESS)
}
