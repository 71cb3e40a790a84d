//! TREE_CONNECT (MS-SMB2 2.2.9, 2.2.10; processing 3.3.5.7).

use crate::config::EncryptPolicy;
use crate::ctx::{Ctx, HResult, Req};
use crate::open::access;
use crate::share::ShareKind;
use crate::tree::Tree;
use smbq_wire::tree_connect::{decode_request, encode_response, share_flags, share_name, SHARE_TYPE_DISK, SHARE_TYPE_PIPE};
use smbq_wire::NtStatus;

/// Read-only maximal access: read data/EA/attributes, execute, read control, synchronize.
const READ_ONLY_ACCESS: u32 = 0x0012_00A9;

pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let path = decode_request(req.msg).map_err(NtStatus::from)?;
    let name = share_name(&path).ok_or(NtStatus::BAD_NETWORK_NAME)?;
    let share = ctx.conn.server.share(name).ok_or(NtStatus::BAD_NETWORK_NAME)?;
    //= MS-SMB2 3.3.5.7
    //# If the user is not allowed access to the share, the server MUST
    //# fail the request with STATUS_ACCESS_DENIED (smbq: the share's
    //# `users` list); a read-only user gets the share's read-only view.
    let user = ctx.session()?.user.clone();
    // A session re-authenticated as anonymous connects to nothing new
    // (anonymous logons are refused, and so is their access).
    if user.is_empty() {
        return Err(NtStatus::ACCESS_DENIED);
    }
    let share = share.for_user(&user).ok_or(NtStatus::ACCESS_DENIED)?;
    let neg = ctx.conn.neg.as_ref().ok_or(NtStatus::INVALID_PARAMETER)?;
    let (can_encrypt, transport_security) = (neg.cipher.is_some(), neg.transport_security);
    let max_trees = ctx.conn.server.config.limits.max_trees_per_session;
    let session = ctx.session()?;
    if session.trees.len() >= max_trees {
        return Err(NtStatus::INSUFFICIENT_RESOURCES);
    }
    //= MS-SMB2 3.3.5.7
    //# If Share.EncryptData is TRUE and the client does not support
    //# encryption, the server MUST fail the request with STATUS_ACCESS_DENIED.
    let encrypt = share.encrypt == EncryptPolicy::Required && !transport_security;
    if encrypt && !can_encrypt {
        return Err(NtStatus::ACCESS_DENIED);
    }
    let (share_type, maximal_access) = match &share.kind {
        ShareKind::Disk(_) if share.read_only() => (SHARE_TYPE_DISK, READ_ONLY_ACCESS),
        ShareKind::Disk(_) => (SHARE_TYPE_DISK, access::FILE_ALL),
        ShareKind::Ipc => (SHARE_TYPE_PIPE, access::FILE_ALL),
    };
    let flags = if encrypt { share_flags::ENCRYPT_DATA } else { share_flags::MANUAL_CACHING };
    let id = session.tree_id();
    session.trees.insert(id, Tree { id, share, encrypt, maximal_access });
    ctx.tree_id = id;
    encode_response(ctx.out, share_type, flags, 0, maximal_access);
    Ok(NtStatus::SUCCESS)
}
