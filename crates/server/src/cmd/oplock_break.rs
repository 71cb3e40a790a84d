//! OPLOCK_BREAK acknowledgment (MS-SMB2 2.2.24.1, 2.2.25.1; processing
//! 3.3.5.22.1): the holder of a broken oplock says which level it keeps.

use crate::ctx::{Ctx, HResult, Req};
use crate::oplock;
use smbq_wire::oplock_break::{decode_ack, encode};
use smbq_wire::NtStatus;

/// Handle an oplock or lease break acknowledgment; opens waiting for it
/// are woken.
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    if req.body().get(..2) == Some(&smbq_wire::lease::ACK_SIZE.to_le_bytes()[..]) {
        return lease_ack(ctx, req);
    }
    let (level, fid) = decode_ack(req.msg).map_err(NtStatus::from)?;
    let open = ctx.open(fid)?;
    let (owner, key, fid) = (open.owner(), open.file_key, open.file_id);
    let server = std::sync::Arc::clone(&ctx.conn.server);
    let mut entry = server.files.get(key).ok_or(NtStatus::INVALID_OPLOCK_PROTOCOL)?;
    let result = oplock::acknowledge(&mut entry, owner, level);
    let waiters = std::mem::take(&mut entry.waiters);
    drop(entry);
    server.wake(&waiters);
    encode(ctx.out, result?, fid);
    Ok(NtStatus::SUCCESS)
}

/// A lease break acknowledgment (MS-SMB2 3.3.5.22.2): the lease is the
/// connection's client's, named by its key.
fn lease_ack(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let (key, state) = smbq_wire::lease::decode_ack(req.msg).map_err(NtStatus::from)?;
    let client = ctx.conn.client_guid();
    let id = (client, key);
    let server = std::sync::Arc::clone(&ctx.conn.server);
    let file = server.files.lease_file(&id).ok_or(NtStatus::OBJECT_NAME_NOT_FOUND)?;
    let mut entry = server.files.get(file).ok_or(NtStatus::OBJECT_NAME_NOT_FOUND)?;
    let acked = u8::try_from(state).map_err(|_| NtStatus::REQUEST_NOT_ACCEPTED)?;
    let result = oplock::acknowledge_lease(&mut entry, &id, acked);
    let waiters = std::mem::take(&mut entry.waiters);
    drop(entry);
    server.wake(&waiters);
    smbq_wire::lease::encode_ack(ctx.out, &key, u32::from(result?));
    Ok(NtStatus::SUCCESS)
}
