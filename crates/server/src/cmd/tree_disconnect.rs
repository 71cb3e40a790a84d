//! TREE_DISCONNECT (MS-SMB2 2.2.11, 2.2.12; processing 3.3.5.8): closes the
//! tree's opens and forgets the tree.

use crate::ctx::{Ctx, HResult, Req};
use smbq_wire::session_setup::encode_empty;
use smbq_wire::NtStatus;

pub fn handle(ctx: &mut Ctx<'_>, _req: &Req<'_>) -> HResult {
    let (sid, tid) = (ctx.session_id, ctx.tree_id);
    ctx.conn.close_where(ctx.now, |o| o.session_id == sid && o.tree_id == tid);
    ctx.session()?.trees.remove(&tid);
    encode_empty(ctx.out);
    Ok(NtStatus::SUCCESS)
}
