//! Byte ranges (MS-FSA 2.1.4.10, 2.1.5.7): which locks conflict with a
//! lock or with a read or write, and which ranges a file can have.

use crate::files::{ByteLock, OpenOwner};
use smbq_wire::FileId;

/// A blocking lock request (a single element without FAIL_IMMEDIATELY)
/// waiting for a conflicting lock to go away. Nothing is held while it
/// waits.
pub struct Blocked {
    pub(crate) file_id: FileId,
    pub(crate) owner: OpenOwner,
    pub(crate) file_key: u64,
    pub(crate) offset: u64,
    pub(crate) length: u64,
    pub(crate) exclusive: bool,
    /// Where its LockSequenceNumber goes once granted.
    pub(crate) sequence: Option<(usize, u8)>,
}

/// Whether `[a_off, a_off + a_len)` and `[b_off, b_off + b_len)` overlap,
/// computed without wrapping; with a zero length this is "strictly inside".
pub fn overlaps(a_off: u64, a_len: u64, b_off: u64, b_len: u64) -> bool {
    let (a0, b0) = (u128::from(a_off), u128::from(b_off));
    let (a1, b1) = (a0 + u128::from(a_len), b0 + u128::from(b_len));
    a0 < b1 && b0 < a1
}

/// Would a new lock by `owner` conflict with `locks`?
pub fn lock_conflict(locks: &[ByteLock], owner: OpenOwner, offset: u64, length: u64, exclusive: bool) -> bool {
    locks
        .iter()
        .any(|l| overlaps(offset, length, l.offset, l.length) && (exclusive || (l.exclusive && l.owner != owner)))
}

/// Does a READ (`write == false`) or WRITE of `length` bytes at `offset`
/// by `owner` conflict with a byte-range lock (MS-FSA 2.1.4.10)? Reads
/// are blocked by other opens' exclusive locks; writes by those and by
/// every shared lock, the writer's own included. Zero-length I/O never
/// conflicts. READ/WRITE answer STATUS_FILE_LOCK_CONFLICT when it does.
pub fn io_conflict(locks: &[ByteLock], owner: OpenOwner, offset: u64, length: u64, write: bool) -> bool {
    length != 0
        && locks.iter().any(|l| {
            overlaps(offset, length, l.offset, l.length)
                && if write { !l.exclusive || l.owner != owner } else { l.exclusive && l.owner != owner }
        })
}

/// Remove one lock of `owner` with exactly this range, an exclusive one
/// first; false if there is none.
pub fn unlock(locks: &mut Vec<ByteLock>, owner: OpenOwner, offset: u64, length: u64) -> bool {
    let exact = |l: &ByteLock| l.owner == owner && l.offset == offset && l.length == length;
    let pos = locks.iter().position(|l| exact(l) && l.exclusive).or_else(|| locks.iter().position(exact));
    match pos {
        Some(i) => {
            locks.remove(i);
            true
        }
        None => false,
    }
}

/// Whether `offset..offset + len` lies within the signed 64-bit file
/// offsets (MS-FSA 2.1.5.2 and 2.1.5.3 fail negative offsets).
pub fn in_range(offset: u64, len: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= i64::MAX as u64)
}
