//! Tree connect state (MS-SMB2 3.3.1.9).

use crate::share::Share;
use std::sync::Arc;

pub struct Tree {
    pub id: u32,
    pub share: Arc<Share>,
    /// Requests on this tree must arrive encrypted.
    pub encrypt: bool,
    pub maximal_access: u32,
}
