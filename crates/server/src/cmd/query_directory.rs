//! QUERY_DIRECTORY (MS-SMB2 2.2.33, 2.2.34; processing 3.3.5.18) with the
//! enumeration rules of MS-FSA 2.1.5.6.3 and the wildcard matching of
//! MS-FSA 2.1.4.4.

use crate::dispatch::{Ctx, HResult, Req};
use crate::open::{access, OpenKind};
use smbq_vfs::DirEntry;
use smbq_wire::fscc::{dir_entry, dir_entry_fixed_len};
use smbq_wire::query_directory::{begin_response, finish_response, flags, QueryDirectoryRequest};
use smbq_wire::{NtStatus, Put};

/// Enumeration state kept on a directory open: the pattern of the first
/// (or last restarting) query, a snapshot of the listing taken then, and
/// the position in it.
pub struct DirCursor {
    pattern: Vec<char>,
    entries: Vec<DirEntry>,
    pos: usize,
    /// Some entry was returned since the scan (re)started: an empty result
    /// is then NO_MORE_FILES rather than NO_SUCH_FILE.
    returned: bool,
}

/// Case-insensitive form of one character (simple uppercase mapping).
fn fold(c: char) -> char {
    let mut up = c.to_uppercase();
    match (up.next(), up.next()) {
        (Some(u), None) => u,
        _ => c,
    }
}

/// Does `name` match `pattern` (MS-FSA 2.1.4.4, FsRtlIsNameInExpression),
/// ignoring case? `*` matches any run, `?` one character; the DOS
/// wildcards: `<` any run not taking the name's last `.`, `>` one
/// character or nothing at a `.` or the end, `"` a `.` or the end.
/// `pattern` is already folded.
fn matches(pattern: &[char], name: &str) -> bool {
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

/// Longest stored search pattern, in characters.
const MAX_PATTERN_CHARS: usize = 1024;

/// Handle an SMB2 QUERY_DIRECTORY (MS-SMB2 3.3.5.18).
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let r = QueryDirectoryRequest::decode(req.msg).map_err(NtStatus::from)?;
    let fixed = dir_entry_fixed_len(r.class).ok_or(NtStatus::INVALID_INFO_CLASS)?;
    //= MS-SMB2 3.3.5.18
    //# If OutputBufferLength is greater than Connection.MaxTransactSize,
    //# the server MUST fail the request with STATUS_INVALID_PARAMETER.
    if r.output_buffer_length > ctx.max_io() {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    ctx.check_charge(r.output_buffer_length)?;
    if (r.output_buffer_length as usize) < fixed {
        return Err(NtStatus::INFO_LENGTH_MISMATCH);
    }
    if r.pattern.chars().count() > MAX_PATTERN_CHARS {
        return Err(NtStatus::OBJECT_NAME_INVALID);
    }
    let fid = ctx.resolve(r.file_id)?;
    let open = ctx.conn.opens.get_mut(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
    let h = match &open.kind {
        OpenKind::File(h) if h.is_dir => h,
        _ => return Err(NtStatus::INVALID_PARAMETER),
    };
    //= MS-SMB2 3.3.5.18
    //# If Open.GrantedAccess does not include FILE_LIST_DIRECTORY, the
    //# server MUST fail the request with STATUS_ACCESS_DENIED.
    if open.access & access::FILE_READ_DATA == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    // MS-FSA 2.1.5.6.3: a (re)started scan takes the new pattern ("*" when
    // none was ever given) and a fresh listing. Entries carry FileIndex 0,
    // as on NTFS, so INDEX_SPECIFIED has no position to resume from.
    if r.flags & (flags::RESTART_SCANS | flags::REOPEN) != 0 || open.dir.is_none() {
        let pattern: Vec<char> = match (&open.dir, r.pattern.is_empty()) {
            (_, false) => r.pattern.chars().map(fold).collect(),
            (Some(c), true) => c.pattern.clone(),
            (None, true) => vec!['*'],
        };
        let entries = h.read_dir().map_err(NtStatus::from)?;
        open.dir = Some(DirCursor { pattern, entries, pos: 0, returned: false });
    }
    let Some(cursor) = open.dir.as_mut() else { return Err(NtStatus::INTERNAL_ERROR) };
    let max = r.output_buffer_length as usize;
    let single = r.flags & flags::RETURN_SINGLE_ENTRY != 0;
    let out = &mut *ctx.out;
    let data_start = begin_response(out, ctx.header_start);
    let mut prev: Option<usize> = None;
    let mut overflow = false;
    while let Some(e) = cursor.entries.get(cursor.pos) {
        if !matches(&cursor.pattern, &e.name) {
            cursor.pos += 1;
            continue;
        }
        let before = out.len();
        if prev.is_some() {
            let pad = (8 - (out.len() - data_start) % 8) % 8;
            out.zeros(pad);
        }
        let start = out.len();
        dir_entry(out, r.class, &super::create::meta(&e.stat), &e.name);
        if out.len() - data_start > max {
            if prev.is_none() {
                // Not even the first entry fits: return what does, as
                // NtQueryDirectoryFile does, and keep the position.
                out.truncate(data_start + max);
                overflow = true;
            } else {
                out.truncate(before);
            }
            break;
        }
        if let Some(p) = prev {
            out.set_u32(p, (start - p) as u32);
        }
        prev = Some(start);
        cursor.pos += 1;
        if single {
            break;
        }
    }
    if prev.is_none() && !overflow {
        //= MS-SMB2 3.3.5.18
        //# If no entries were found, the server MUST fail the request with
        //# STATUS_NO_SUCH_FILE [on the first query, else STATUS_NO_MORE_FILES].
        return Err(if cursor.returned { NtStatus::NO_MORE_FILES } else { NtStatus::NO_SUCH_FILE });
    }
    cursor.returned = true;
    finish_response(out, data_start);
    Ok(if overflow { NtStatus::BUFFER_OVERFLOW } else { NtStatus::SUCCESS })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, name: &str) -> bool {
        let p: Vec<char> = pattern.chars().map(fold).collect();
        matches(&p, name)
    }

    #[test]
    fn star_and_question_mark() {
        assert!(m("*", "anything.txt"));
        assert!(m("*", ""));
        assert!(m("*.txt", "a.txt"));
        assert!(m("*.txt", ".txt"));
        assert!(!m("*.txt", "a.txt.bak"));
        assert!(m("*.*", "a.b"));
        assert!(!m("*.*", "noext"));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(!m("a*b*c", "aXXbYY"));
        assert!(m("?", "x"));
        assert!(!m("?", ""));
        assert!(!m("?", "xy"));
        assert!(m("f??.dat", "foo.dat"));
        assert!(!m("f??.dat", "fo.dat"));
        assert!(m("exact", "exact"));
        assert!(!m("exact", "exactly"));
        assert!(!m("", "a"));
    }

    #[test]
    fn case_insensitive() {
        assert!(m("README.TXT", "readme.txt"));
        assert!(m("*.TxT", "A.tXt"));
        assert!(m("\u{c9}T\u{c9}", "\u{e9}t\u{e9}"));
        assert!(!m("a", "b"));
    }

    #[test]
    fn dos_wildcards() {
        // `<` (DOS_STAR): up to the last dot. `<.txt` is what "*.txt" becomes
        // in DOS semantics; `<` alone matches names without dots too.
        assert!(m("<", "abc"));
        assert!(!m("<", "a.b.c"));
        assert!(m("<.<", "a.bc"));
        assert!(m("<.<", "a.b.c"));
        assert!(m("<.c", "a.b.c"));
        assert!(!m("<.b", "a.b.c"));
        assert!(m("<\"<", "a.b"));
        // `"` (DOS_DOT): a dot, or nothing at the end: "foo\"*" ≈ "foo.*" matching "foo".
        assert!(m("foo\"<", "foo"));
        assert!(m("foo\"<", "foo.txt"));
        assert!(m("foo\"", "foo"));
        assert!(m("foo\"", "foo."));
        assert!(!m("foo\"", "foox"));
        // `>` (DOS_QM): one non-dot character, or nothing before a dot / the end.
        assert!(m("a>>", "a"));
        assert!(m("a>>", "ab"));
        assert!(m("a>>", "abc"));
        assert!(!m("a>>", "abcd"));
        assert!(m("a>>.txt", "a.txt"));
        assert!(m("a>>.txt", "ab.txt"));
        assert!(!m("a>.txt", "abc.txt"));
        assert!(m(">>>>>>>>\">>>", "file.txt"));
        assert!(!m(">>>>>>>>\">>>", "longername.txt"));
    }
}
