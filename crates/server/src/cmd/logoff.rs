//! LOGOFF (MS-SMB2 2.2.7, 2.2.8; processing 3.3.5.6): closes the session's
//! opens (durable ones are kept for a reconnect, as Samba and Windows
//! keep them; smbtorture smb2.durable-open.reopen4) and trees and
//! forgets the session.

use crate::ctx::{Ctx, HResult, Req};
use smbq_wire::session_setup::encode_empty;
use smbq_wire::NtStatus;

pub fn handle(ctx: &mut Ctx<'_>, _req: &Req<'_>) -> HResult {
    let sid = ctx.session_id;
    ctx.conn.disconnect_opens(ctx.now, |o| o.session_id == sid);
    // Keep the session until its response is signed/sealed; dispatch drops it after.
    if let Some(s) = ctx.conn.sessions.get_mut(&sid) {
        s.trees.clear();
        s.state = crate::session::SessionState::LoggedOff;
    }
    encode_empty(ctx.out);
    Ok(NtStatus::SUCCESS)
}
