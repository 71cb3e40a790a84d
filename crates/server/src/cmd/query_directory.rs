//! QUERY_DIRECTORY (MS-SMB2 2.2.33, 2.2.34; processing 3.3.5.18) with the
//! enumeration rules of MS-FSA 2.1.5.6.3 and the wildcard matching of
//! MS-FSA 2.1.4.4.

use crate::dir_cursor::{matches, resume_pos, DirCursor, Listing};
use crate::ctx::{Ctx, HResult, Req};
use crate::open::{access, OpenKind};
use smbq_vfs::fold;
use smbq_wire::fscc::{dir_entry, dir_entry_fixed_len};
use smbq_wire::query_directory::{begin_response, finish_response, flags, QueryDirectoryRequest};
use smbq_wire::{NtStatus, Put};

/// Longest stored search pattern, in characters.
const MAX_PATTERN_CHARS: usize = 1024;

/// Handle an SMB2 QUERY_DIRECTORY (MS-SMB2 3.3.5.18).
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let r = QueryDirectoryRequest::decode(req.msg).map_err(NtStatus::from)?;
    let posix = r.class == smbq_wire::posix::INFO_CLASS;
    let fixed = if posix { crate::posix_ext::DIR_ENTRY_MIN } else { dir_entry_fixed_len(r.class).ok_or(NtStatus::INVALID_INFO_CLASS)? };
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
    // FILE_POSIX_INFORMATION lists only for a POSIX open (crate::posix_ext).
    if posix && !open.posix {
        return Err(NtStatus::INVALID_LEVEL);
    }
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
        let listed = Listing::new(&h.stat().map_err(NtStatus::from)?, ctx.conn.server.now());
        let entries = h.read_dir().map_err(NtStatus::from)?;
        open.dir = Some(DirCursor { pattern, entries, listed, pos: 0, returned: false });
    } else if let Some(cursor) = open.dir.as_mut() {
        let st = h.stat().map_err(NtStatus::from)?;
        if !cursor.listed.current(&st) {
            let listed = Listing::new(&st, ctx.conn.server.now());
            let fresh = h.read_dir().map_err(NtStatus::from)?;
            cursor.pos = resume_pos(&cursor.entries, cursor.pos, &fresh);
            cursor.entries = fresh;
            cursor.listed = listed;
        }
    }
    let Some(cursor) = open.dir.as_mut() else { return Err(NtStatus::INTERNAL_ERROR) };
    let max = r.output_buffer_length as usize;
    let single = r.flags & flags::RETURN_SINGLE_ENTRY != 0;
    let out = &mut *ctx.out;
    let data_start = begin_response(out, ctx.header_start);
    let mut prev: Option<usize> = None;
    let mut overflow = false;
    let server = std::sync::Arc::clone(&ctx.conn.server);
    let files = &server.files;
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
        let mut st = e.stat;
        files.show_times(&mut st, ctx.now);
        if posix {
            crate::posix_ext::dir_entry(out, &st, &e.name);
        } else {
            dir_entry(out, r.class, &crate::meta::meta(&st), &e.name);
        }
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
    use smbq_vfs::DirEntry;

    fn m(pattern: &str, name: &str) -> bool {
        let p: Vec<char> = pattern.chars().map(fold).collect();
        matches(&p, name)
    }

    fn entries(names: &[&str]) -> Vec<DirEntry> {
        names.iter().map(|n| DirEntry { name: n.to_string(), stat: Default::default() }).collect()
    }

    #[test]
    fn listings_are_trusted_only_when_settled() {
        let now = 133_000_000_000_000_000;
        let old = smbq_vfs::FileStat { last_write_time: 130_000_000_000_000_000, change_time: 130_000_000_000_000_001, ..Default::default() };
        let l = Listing::new(&old, now);
        assert!(l.settled && l.current(&old));
        let touched = smbq_vfs::FileStat { change_time: old.change_time + 1, ..old };
        assert!(!l.current(&touched));
        // A directory changed "now" may change again within the same tick.
        let recent = smbq_vfs::FileStat { last_write_time: now, change_time: now, ..Default::default() };
        assert!(!Listing::new(&recent, now).current(&recent));
    }

    #[test]
    fn resuming_in_a_fresh_listing() {
        let old = entries(&[".", "..", "a", "b", "c", "d"]);
        // Nothing consumed yet: start at the beginning.
        assert_eq!(resume_pos(&old, 0, &entries(&[".", "..", "b"])), 0);
        // After "." only "..": the rest was deleted.
        assert_eq!(resume_pos(&old, 1, &entries(&[".", ".."])), 1);
        // After "b": "b" itself was deleted, "bb" appeared after it.
        assert_eq!(resume_pos(&old, 4, &entries(&[".", "..", "a", "bb", "c"])), 3);
        // After "d" (everything): nothing left.
        assert_eq!(resume_pos(&old, 6, &entries(&[".", "..", "a", "e"])), 3);
        // After "..": names sort after the dot entries whatever they are.
        assert_eq!(resume_pos(&old, 2, &entries(&[".", "..", "!", "a"])), 2);
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
