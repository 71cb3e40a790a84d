//! ECHO (MS-SMB2 2.2.28, 2.2.29; processing 3.3.5.18).

use crate::ctx::{Ctx, HResult, Req};
use smbq_wire::session_setup::encode_empty;
use smbq_wire::NtStatus;

pub fn handle(ctx: &mut Ctx<'_>, _req: &Req<'_>) -> HResult {
    encode_empty(ctx.out);
    Ok(NtStatus::SUCCESS)
}
