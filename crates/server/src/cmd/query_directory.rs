//! QUERY_DIRECTORY — to be implemented.

use crate::dispatch::{Ctx, HResult, Req};
use smbq_wire::NtStatus;

/// Enumeration state kept on a directory open.
pub struct DirCursor {}

pub fn handle(_ctx: &mut Ctx<'_>, _req: &Req<'_>) -> HResult {
    Err(NtStatus::NOT_SUPPORTED)
}
