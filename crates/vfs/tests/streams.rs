//! Alternate data streams of a PosixFs (MS-FSCC 2.1.5, 2.4.43; MS-FSA
//! 2.1.5.1, 2.1.5.15.11.1) against a real temp directory, in Samba's
//! vfs_streams_xattr format.

#![allow(clippy::unwrap_used)]

use smbq_vfs::{
    parse_stream, CreateAction, Disposition, FsError, Handle, Kind, OpenOptions, PosixFs, Stream,
    MAX_STREAM_SIZE,
};
use smbq_wire::NtStatus;
use std::fs;
use std::path::{Path, PathBuf};

struct Fixture {
    _dir: tempfile::TempDir,
    share: PathBuf,
    fs: PosixFs,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let share = dir.path().join("share");
    fs::create_dir(&share).unwrap();
    let fs = PosixFs::new(&share, false, false).unwrap();
    Fixture { _dir: dir, share, fs }
}

fn rw(disposition: Disposition) -> OpenOptions {
    OpenOptions { disposition, kind: Kind::Any, read: true, write: true }
}

fn ro(disposition: Disposition) -> OpenOptions {
    OpenOptions { disposition, kind: Kind::Any, read: true, write: false }
}

fn open(f: &Fixture, path: &str, o: OpenOptions) -> Result<(Handle, CreateAction), NtStatus> {
    f.fs.open(path, &o).map_err(|e| e.status())
}

fn status<T>(r: Result<T, FsError>) -> NtStatus {
    r.map_or_else(|e| e.status(), |_| NtStatus::SUCCESS)
}

fn read_all(h: &Handle) -> Vec<u8> {
    let mut v = Vec::new();
    h.read_append(&mut v, 1 << 20, 0).unwrap();
    v
}

fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let mut v = vec![0u8; 70_000];
    match rustix::fs::getxattr(path, name, &mut v[..]) {
        Ok(n) => Some(v[..n].to_vec()),
        Err(rustix::io::Errno::NODATA) => None,
        Err(e) => panic!("getxattr {name}: {e}"),
    }
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    rustix::fs::setxattr(path, name, value, rustix::fs::XattrFlags::empty()).unwrap();
}

fn names(h: &Handle) -> Vec<(String, u64)> {
    h.streams().unwrap().into_iter().map(|s| (s.name, s.size)).collect()
}

#[test]
fn parsing_per_ms_fscc_2_1_5() {
    assert_eq!(parse_stream("a\\f").unwrap(), ("a\\f", Stream::Unnamed));
    assert_eq!(parse_stream("f::$DATA").unwrap(), ("f", Stream::Data));
    assert_eq!(parse_stream("f::$data").unwrap(), ("f", Stream::Data));
    assert_eq!(parse_stream("f:s").unwrap(), ("f", Stream::Named("s")));
    assert_eq!(parse_stream("f:Stream One:$DaTa").unwrap(), ("f", Stream::Named("Stream One")));
    assert_eq!(parse_stream("d::$INDEX_ALLOCATION").unwrap(), ("d", Stream::Index));
    assert_eq!(parse_stream("d:$I30:$index_allocation").unwrap(), ("d", Stream::Index));
    // MS-FSCC 2.1.5.3: control characters and wildcards are stream name characters.
    assert_eq!(parse_stream("f:\x05S\n*?<>|\"").unwrap(), ("f", Stream::Named("\x05S\n*?<>|\"")));
    for bad in [
        "f:", "f::", "f:s:", "f:s:$FOO", "f:s:?D*a", "f::$BITMAP", "f:s:$DATA:x", "f:a/b", "f:a\\b",
        ":s", "d:s\\f", "f:s\0",
    ] {
        assert!(matches!(parse_stream(bad), Err(FsError::InvalidName)), "{bad:?}");
    }
    assert!(parse_stream(&format!("f:{}", "x".repeat(255))).is_ok());
    assert!(parse_stream(&format!("f:{}", "x".repeat(256))).is_err());
}

#[test]
fn stored_as_samba_stores_them() {
    let f = fixture();
    let (h, a) = open(&f, "file.txt:Zone.Identifier", rw(Disposition::Create)).unwrap();
    assert_eq!(a, CreateAction::Created);
    assert_eq!(h.path, "file.txt:Zone.Identifier");
    assert!(!h.is_dir);
    // The file came with it, empty.
    assert_eq!(fs::read(f.share.join("file.txt")).unwrap(), b"");
    // An empty stream is its NUL byte.
    assert_eq!(xattr(&f.share.join("file.txt"), "user.DosStream.Zone.Identifier:$DATA").unwrap(), b"\0");
    h.write_at(b"[ZoneTransfer]", 0).unwrap();
    assert_eq!(
        xattr(&f.share.join("file.txt"), "user.DosStream.Zone.Identifier:$DATA").unwrap(),
        b"[ZoneTransfer]\0"
    );
    // Nothing but the file on disk.
    assert_eq!(fs::read_dir(&f.share).unwrap().count(), 1);

    // A stream Samba wrote (its case kept), found in any case.
    set_xattr(&f.share.join("file.txt"), "user.DosStream.From Samba:$DATA", b"samba data\0");
    let (h, a) = open(&f, "file.txt:FROM SAMBA:$data", ro(Disposition::Open)).unwrap();
    assert_eq!(a, CreateAction::Opened);
    assert_eq!(h.path, "file.txt:From Samba");
    assert_eq!(read_all(&h), b"samba data");
    assert_eq!(h.stat().unwrap().size, 10);
    // Other attributes (Samba's DOSATTRIB, ACLs) are no streams.
    set_xattr(&f.share.join("file.txt"), "user.DOSATTRIB", b"x");
    let mut listed = names(&h);
    listed.sort();
    assert_eq!(
        listed,
        [("::$DATA".to_owned(), 0), (":From Samba:$DATA".to_owned(), 10), (":Zone.Identifier:$DATA".to_owned(), 14)]
    );
}

#[test]
fn dispositions() {
    let f = fixture();
    assert_eq!(status(f.fs.open("f:s", &rw(Disposition::Open))), NtStatus::OBJECT_NAME_NOT_FOUND);
    assert!(!f.share.join("f").exists(), "OPEN creates no file");
    assert_eq!(status(f.fs.open("no\\f:s", &rw(Disposition::Create))), NtStatus::OBJECT_PATH_NOT_FOUND);
    let (h, _) = open(&f, "f:s", rw(Disposition::OpenIf)).unwrap();
    h.write_at(b"data", 0).unwrap();
    assert_eq!(status(f.fs.open("f:S", &rw(Disposition::Create))), NtStatus::OBJECT_NAME_COLLISION);
    assert_eq!(status(f.fs.open("f:t", &rw(Disposition::Overwrite))), NtStatus::OBJECT_NAME_NOT_FOUND);
    let (h, a) = open(&f, "f:s", rw(Disposition::OpenIf)).unwrap();
    assert_eq!((a, read_all(&h)), (CreateAction::Opened, b"data".to_vec()));
    let (h, a) = open(&f, "f:s", rw(Disposition::Overwrite)).unwrap();
    assert_eq!((a, read_all(&h)), (CreateAction::Overwritten, Vec::new()));
    h.write_at(b"again", 0).unwrap();
    let (h, a) = open(&f, "f:s:$DATA", rw(Disposition::Supersede)).unwrap();
    assert_eq!((a, read_all(&h)), (CreateAction::Superseded, Vec::new()));
    let (_, a) = open(&f, "f:new", rw(Disposition::OverwriteIf)).unwrap();
    assert_eq!(a, CreateAction::Created);
    // A data stream is no directory.
    let dir = OpenOptions { kind: Kind::Directory, ..rw(Disposition::OpenIf) };
    assert_eq!(status(f.fs.open("f:s", &dir)), NtStatus::NOT_A_DIRECTORY);
    assert_eq!(status(f.fs.open("f::$DATA", &dir)), NtStatus::NOT_A_DIRECTORY);
}

#[test]
fn default_stream_and_directories() {
    let f = fixture();
    fs::create_dir(f.share.join("d")).unwrap();
    fs::write(f.share.join("f"), b"main").unwrap();
    let (h, _) = open(&f, "f::$DATA", ro(Disposition::Open)).unwrap();
    assert_eq!((h.path.as_str(), read_all(&h)), ("f", b"main".to_vec()));
    assert_eq!(status(f.fs.open("d::$DATA", &ro(Disposition::Open))), NtStatus::FILE_IS_A_DIRECTORY);
    let (h, _) = open(&f, "d::$INDEX_ALLOCATION", ro(Disposition::Open)).unwrap();
    assert!(h.is_dir);
    assert_eq!(status(f.fs.open("f::$INDEX_ALLOCATION", &ro(Disposition::Open))), NtStatus::NOT_A_DIRECTORY);
    // A directory has no unnamed data stream, but may have named ones.
    let (d, _) = open(&f, "d", ro(Disposition::Open)).unwrap();
    assert!(d.streams().unwrap().is_empty());
    let (s, _) = open(&f, "d:meta", rw(Disposition::Create)).unwrap();
    s.write_at(b"on a dir", 0).unwrap();
    let st = s.stat().unwrap();
    assert!(!st.is_dir);
    assert_eq!(st.size, 8);
    assert_eq!(st.attributes & 0x10, 0, "no DIRECTORY attribute on a stream");
    assert_eq!(names(&d), [(":meta:$DATA".to_owned(), 8)]);
}

#[test]
fn io_at_offsets_sizes_and_ids() {
    let f = fixture();
    let (base, _) = open(&f, "f", rw(Disposition::Create)).unwrap();
    base.write_at(b"base data", 0).unwrap();
    let (h, _) = open(&f, "f:s", rw(Disposition::Create)).unwrap();
    h.write_vectored_at(&[b"01", b"23456789"], 0).unwrap();
    h.write_at(b"xy", 4).unwrap();
    h.write_at(b"END", 12).unwrap();
    assert_eq!(read_all(&h), b"0123xy6789\0\0END");
    let mut part = Vec::new();
    assert_eq!(h.read_append(&mut part, 4, 3).unwrap(), 4);
    assert_eq!(part, b"3xy6");
    assert_eq!(h.read_append(&mut part, 4, 100).unwrap(), 0);
    h.set_len(4).unwrap();
    assert_eq!(read_all(&h), b"0123");
    h.set_len(6).unwrap();
    assert_eq!(read_all(&h), b"0123\0\0");
    h.set_allocation(2).unwrap();
    assert_eq!(read_all(&h), b"01");
    h.set_allocation(4096).unwrap();
    let (st, bst) = (h.stat().unwrap(), base.stat().unwrap());
    assert_eq!(st.size, 2);
    assert_eq!(st.allocation_size, 8, "resident data, counted in 8-byte units as NTFS does");
    // The file's id, times and attributes are the stream's (Windows
    // reports the file id for its streams: smbtorture smb2.fileid).
    assert_eq!(st.file_id, bst.file_id);
    assert_eq!(st.last_write_time, bst.last_write_time);
    assert_eq!(read_all(&base), b"base data", "the unnamed stream is untouched");
    // A handle opened without write access writes nothing.
    let (r, _) = open(&f, "f:s", ro(Disposition::Open)).unwrap();
    assert_eq!(status(r.write_at(b"no", 0)), NtStatus::ACCESS_DENIED);
    assert_eq!(status(r.set_len(0)), NtStatus::ACCESS_DENIED);
}

#[test]
fn size_limit() {
    let f = fixture();
    let (h, _) = open(&f, "f:s", rw(Disposition::Create)).unwrap();
    h.write_at(&[7u8; 1000], 0).unwrap();
    // Beyond what any extended attribute holds.
    assert_eq!(status(h.write_at(b"x", MAX_STREAM_SIZE)), NtStatus::FILE_SYSTEM_LIMITATION);
    assert_eq!(status(h.set_len(MAX_STREAM_SIZE + 1)), NtStatus::FILE_SYSTEM_LIMITATION);
    assert_eq!(status(h.write_at(b"x", u64::MAX)), NtStatus::INVALID_PARAMETER);
    // Beyond what this file system holds in one attribute, if less (ext4
    // without ea_inode: one block for all of a file's attributes), the
    // write fails the same way and the stream keeps its data.
    let (h, _) = open(&f, "g:s", rw(Disposition::Create)).unwrap();
    h.write_at(b"kept", 0).unwrap();
    match h.write_at(&vec![2u8; MAX_STREAM_SIZE as usize], 0) {
        Ok(()) => assert_eq!(read_all(&h).len(), MAX_STREAM_SIZE as usize),
        Err(e) => {
            assert_eq!(e.status(), NtStatus::FILE_SYSTEM_LIMITATION);
            assert_eq!(read_all(&h), b"kept");
        }
    }
}

#[test]
fn rename_and_unlink() {
    let f = fixture();
    let (mut a, _) = open(&f, "f:one", rw(Disposition::Create)).unwrap();
    a.write_at(b"first", 0).unwrap();
    let (b, _) = open(&f, "f:two", rw(Disposition::Create)).unwrap();
    b.write_at(b"second", 0).unwrap();
    drop(b);
    // Another open of the same stream follows the rename.
    let (other, _) = open(&f, "f:ONE", ro(Disposition::Open)).unwrap();
    a.rename_stream(":renamed:$DATA", false).unwrap();
    assert_eq!(a.path, "f:renamed");
    assert_eq!(read_all(&other), b"first");
    assert!(xattr(&f.share.join("f"), "user.DosStream.one:$DATA").is_none());
    assert_eq!(xattr(&f.share.join("f"), "user.DosStream.renamed:$DATA").unwrap(), b"first\0");
    // MS-FSA 2.1.5.15.11.1: an existing target needs ReplaceIfExists and
    // must be empty.
    assert_eq!(status(a.rename_stream(":two", false)), NtStatus::OBJECT_NAME_COLLISION);
    assert_eq!(status(a.rename_stream(":two", true)), NtStatus::INVALID_PARAMETER);
    assert_eq!(status(a.rename_stream(":bad:$FOO", true)), NtStatus::INVALID_PARAMETER);
    assert_eq!(status(a.rename_stream("two", true)), NtStatus::INVALID_PARAMETER);
    let (e, _) = open(&f, "f:empty", rw(Disposition::Create)).unwrap();
    // ... and not open.
    assert_eq!(status(a.rename_stream(":empty", true)), NtStatus::ACCESS_DENIED);
    drop(e);
    a.rename_stream(":Empty", true).unwrap();
    assert_eq!(a.path, "f:Empty");
    // Onto the unnamed stream of an empty file: the data moves there.
    let (mut g, _) = open(&f, "g:s", rw(Disposition::Create)).unwrap();
    g.write_at(b"payload", 0).unwrap();
    g.rename_stream("::$DATA", true).unwrap();
    assert_eq!(g.path, "g");
    assert_eq!(fs::read(f.share.join("g")).unwrap(), b"payload");
    assert_eq!(read_all(&g), b"payload");

    drop((a, other, g));
    f.fs.unlink("f:two", false).unwrap();
    assert_eq!(status(f.fs.unlink("f:two", false)), NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(f.fs.stat_path("f").unwrap().size, 0, "the file stays");
    assert_eq!(status(f.fs.stat_path("f:two")), NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(f.fs.stat_path("f:empty").unwrap().size, 5);
}

#[test]
fn overwriting_the_file_removes_its_streams() {
    let f = fixture();
    open(&f, "f:s", rw(Disposition::Create)).unwrap();
    set_xattr(&f.share.join("f"), "user.DOSATTRIB", b"kept");
    let (h, a) = open(&f, "f", rw(Disposition::OverwriteIf)).unwrap();
    assert_eq!(a, CreateAction::Overwritten);
    assert_eq!(names(&h), [("::$DATA".to_owned(), 0)]);
    assert_eq!(xattr(&f.share.join("f"), "user.DOSATTRIB").unwrap(), b"kept");
}

#[test]
fn read_only_share() {
    let f = fixture();
    let (h, _) = open(&f, "f:s", rw(Disposition::Create)).unwrap();
    h.write_at(b"x", 0).unwrap();
    let ro_fs = f.fs.read_only_view();
    assert_eq!(status(ro_fs.open("f:s", &rw(Disposition::Open))), NtStatus::ACCESS_DENIED);
    assert_eq!(status(ro_fs.open("f:t", &ro(Disposition::OpenIf))), NtStatus::ACCESS_DENIED);
    assert_eq!(status(ro_fs.unlink("f:s", false)), NtStatus::ACCESS_DENIED);
    let (h, _) = ro_fs.open("f:s", &ro(Disposition::Open)).unwrap();
    assert_eq!(read_all(&h), b"x");
}
