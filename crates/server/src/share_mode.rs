//! Share modes (MS-FSA 2.1.5.1.2): which access an open takes and which it
//! lets others take, and how a request's name becomes a share path.

use crate::files::OpenRef;
use crate::open::access;
use smbq_wire::create::share;

/// Access that reads data / writes data: what share modes govern, with DELETE.
pub const READ_ACCESS: u32 = access::FILE_READ_DATA | access::FILE_EXECUTE;

pub const WRITE_ACCESS: u32 = access::FILE_WRITE_DATA | access::FILE_APPEND_DATA;

/// Whether a new open with `access`/`share_access` conflicts with the
/// existing opens of the file (the share-mode check of MS-FSA 2.1.5.1.2,
/// IoCheckShareAccess): only read/execute, write/append and delete access
/// take part, on both sides.
pub fn share_conflict(existing: &[OpenRef], access: u32, share_access: u32) -> bool {
    let governed = |a: u32| a & (READ_ACCESS | WRITE_ACCESS | access::DELETE) != 0;
    if !governed(access) {
        return false;
    }
    existing.iter().filter(|o| governed(o.access)).any(|o| {
        let denies = |a: u32, shares: u32| {
            (a & READ_ACCESS != 0 && shares & share::READ == 0)
                || (a & WRITE_ACCESS != 0 && shares & share::WRITE == 0)
                || (a & access::DELETE != 0 && shares & share::DELETE == 0)
        };
        denies(access, o.share_access) || denies(o.access, share_access)
    })
}

/// A share-relative SMB path without its one leading separator.
pub fn share_path(name: &str) -> &str {
    name.strip_prefix('\\').unwrap_or(name)
}
