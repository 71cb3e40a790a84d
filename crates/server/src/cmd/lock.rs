//! LOCK — to be implemented.

use crate::connection::ConnState;
use crate::dispatch::{Ctx, HResult, Req};
use smbq_wire::NtStatus;

/// A blocking lock request waiting for a conflicting lock to go away.
pub struct Blocked {}

pub fn handle(_ctx: &mut Ctx<'_>, _req: &Req<'_>) -> HResult {
    Err(NtStatus::NOT_SUPPORTED)
}

/// Try a blocked lock again; `Some` when it finished (granted or failed).
pub fn retry(_ctx: &mut Ctx<'_>, _b: &mut Blocked) -> Option<HResult> {
    None
}

/// The request was cancelled: drop whatever it holds.
pub fn cancel(_st: &mut ConnState, _b: &Blocked) {}
