//! WRITE — to be implemented.

use crate::dispatch::{Ctx, HResult, Req};
use smbq_wire::NtStatus;

pub fn handle(_ctx: &mut Ctx<'_>, _req: &Req<'_>) -> HResult {
    Err(NtStatus::NOT_SUPPORTED)
}
