//! Where a directory listing stands between QUERY_DIRECTORY requests
//! (MS-SMB2 3.3.5.18): the entries read, the position, and whether the
//! directory changed since; and the name patterns that select entries.

use smbq_vfs::{fold, DirEntry};

/// Enumeration state kept on a directory open: the pattern of the first
/// (or last restarting) query, a snapshot of the listing, and the position
/// in it. The snapshot is retaken when the directory may have changed
/// since (see [`Listing`]), keeping the position by name, so entries
/// deleted meanwhile are not returned and fresh ones after the position are.
pub struct DirCursor {
    pub(crate) pattern: Vec<char>,
    pub(crate) entries: Vec<DirEntry>,
    pub(crate) listed: Listing,
    pub(crate) pos: usize,
    /// Some entry was returned since the scan (re)started: an empty result
    /// is then NO_MORE_FILES rather than NO_SUCH_FILE.
    pub(crate) returned: bool,
}

/// Does `name` match `pattern` (MS-FSA 2.1.4.4, FsRtlIsNameInExpression),
/// ignoring case? `*` matches any run, `?` one character; the DOS
/// wildcards: `<` any run not taking the name's last `.`, `>` one
/// character or nothing at a `.` or the end, `"` a `.` or the end.
/// `pattern` is already folded.
pub(crate) fn matches(pattern: &[char], name: &str) -> bool {
    if pattern == ['*'] {
        return true;
    }
    let name: Vec<char> = name.chars().map(fold).collect();
    let last_dot = name.iter().rposition(|&c| c == '.');
    let n = pattern.len();
    let mut states = vec![false; n + 1];
    states[0] = true;
    for i in 0..=name.len() {
        let cur = name.get(i).copied();
        // Zero-width moves at this position.
        for p in 0..n {
            if !states[p] {
                continue;
            }
            let skip = match pattern[p] {
                '*' | '<' => true,
                '>' => cur.is_none() || cur == Some('.'),
                '"' => cur.is_none(),
                _ => false,
            };
            if skip {
                states[p + 1] = true;
            }
        }
        let Some(c) = cur else { break };
        let mut next = vec![false; n + 1];
        for p in 0..n {
            if !states[p] {
                continue;
            }
            match pattern[p] {
                '*' => next[p] = true,
                '<' => {
                    // Any character but the name's last dot.
                    if c != '.' || last_dot.is_some_and(|d| i < d) {
                        next[p] = true;
                    }
                }
                '?' => next[p + 1] = true,
                '>' => {
                    if c != '.' {
                        next[p + 1] = true;
                    }
                }
                '"' => {
                    if c == '.' {
                        next[p + 1] = true;
                    }
                }
                pc => {
                    if pc == c {
                        next[p + 1] = true;
                    }
                }
            }
        }
        states = next;
        if !states.iter().any(|&s| s) {
            return false;
        }
    }
    states[n]
}

/// Directory times tick coarsely (a kernel clock tick, a few ms): a change
/// made in the same tick as a listing leaves them unchanged. A listing is
/// only trusted while the directory keeps the times it had, and when it
/// was taken this long (20 ms, in FILETIME units) after them.
const TICK_SLACK: u64 = 200_000;

/// When a listing was taken, to tell whether the directory changed since.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Listing {
    /// (LastWriteTime, ChangeTime) of the directory.
    times: (u64, u64),
    /// The times were older than the listing by more than a tick.
    pub(crate) settled: bool,
}

impl Listing {
    /// `now`: FILETIME.
    pub(crate) fn new(st: &smbq_vfs::FileStat, now: u64) -> Listing {
        let newest = st.last_write_time.max(st.change_time);
        Listing { times: (st.last_write_time, st.change_time), settled: now > newest.saturating_add(TICK_SLACK) }
    }

    /// Whether a listing taken then still holds, the directory now being `st`.
    pub(crate) fn current(&self, st: &smbq_vfs::FileStat) -> bool {
        self.settled && self.times == (st.last_write_time, st.change_time)
    }
}

/// Where an entry sorts in a [`Handle::read_dir`](smbq_vfs::Handle::read_dir)
/// listing: `.`, `..`, then the names bytewise.
fn order_key(name: &str) -> (u8, &str) {
    match name {
        "." => (0, ""),
        ".." => (1, ""),
        n => (2, n),
    }
}

/// Continue an enumeration in a fresh listing: skip what sorts at or
/// before the last entry consumed from the old one.
pub(crate) fn resume_pos(old: &[DirEntry], pos: usize, fresh: &[DirEntry]) -> usize {
    match pos.checked_sub(1).and_then(|i| old.get(i)) {
        Some(last) => {
            let key = order_key(&last.name);
            fresh.iter().take_while(|e| order_key(&e.name) <= key).count()
        }
        None => 0,
    }
}
