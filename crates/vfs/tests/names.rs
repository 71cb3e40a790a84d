//! Case-insensitive, case-preserving names (MS-FSA 2.1.5.1, IsCaseInsensitive) on a
//! PosixFs share, and the exact names of a `case_sensitive` one.

#![allow(clippy::unwrap_used)]

use smbq_vfs::{CreateAction, Disposition, FsError, Handle, Kind, OpenOptions, PosixFs};
use smbq_wire::NtStatus;
use std::fs;
use std::path::PathBuf;

struct Fixture {
    _dir: tempfile::TempDir,
    share: PathBuf,
    fs: PosixFs,
}

fn fixture(case_sensitive: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let share = dir.path().join("share");
    fs::create_dir(&share).unwrap();
    let fs = PosixFs::new(&share, false, case_sensitive).unwrap();
    Fixture { _dir: dir, share, fs }
}

fn opts(disposition: Disposition, kind: Kind) -> OpenOptions {
    OpenOptions { disposition, kind, read: true, write: true }
}

fn open(f: &Fixture, path: &str, d: Disposition) -> Result<(Handle, CreateAction), FsError> {
    f.fs.open(path, &opts(d, Kind::Any))
}

fn status<T>(r: Result<T, FsError>) -> NtStatus {
    r.map_or_else(|e| e.status(), |_| NtStatus::SUCCESS)
}

fn read_all(h: &Handle) -> Vec<u8> {
    let mut out = Vec::new();
    h.read_append(&mut out, 1 << 16, 0).unwrap();
    out
}

/// The names in a directory of the share, sorted.
fn names(f: &Fixture, dir: &str) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(f.share.join(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn a_name_in_another_case_opens_the_file() {
    let f = fixture(false);
    fs::write(f.share.join("Mixed.TXT"), b"hello").unwrap();
    for name in ["mixed.txt", "MIXED.TXT", "mIxEd.TxT", "Mixed.TXT"] {
        let (h, action) = open(&f, name, Disposition::Open).unwrap();
        assert_eq!(action, CreateAction::Opened);
        assert_eq!(read_all(&h), b"hello", "{name}");
        // The handle names the file as it is on disk.
        assert_eq!(h.path, "Mixed.TXT");
        assert_eq!(f.fs.stat_path(name).unwrap().size, 5);
    }
    assert_eq!(status(f.fs.stat_path("mixed.txt2")), NtStatus::OBJECT_NAME_NOT_FOUND);
}

#[test]
fn creating_a_case_variant_meets_the_existing_file() {
    let f = fixture(false);
    let (h, action) = open(&f, "Mixed.TXT", Disposition::Create).unwrap();
    assert_eq!(action, CreateAction::Created);
    h.write_at(b"first", 0).unwrap();
    assert_eq!(status(open(&f, "MIXED.txt", Disposition::Create)), NtStatus::OBJECT_NAME_COLLISION);
    let (h, action) = open(&f, "mixed.TXT", Disposition::OpenIf).unwrap();
    assert_eq!((action, h.path.as_str()), (CreateAction::Opened, "Mixed.TXT"));
    assert_eq!(read_all(&h), b"first");
    let (_, action) = open(&f, "MIXED.TXT", Disposition::OverwriteIf).unwrap();
    assert_eq!(action, CreateAction::Overwritten);
    // A directory too, with FILE_CREATE or FILE_OPEN_IF.
    f.fs.open("Docs", &opts(Disposition::Create, Kind::Directory)).unwrap();
    let dir = |d| f.fs.open("DOCS", &opts(d, Kind::Directory));
    assert_eq!(status(dir(Disposition::Create)), NtStatus::OBJECT_NAME_COLLISION);
    assert_eq!(dir(Disposition::OpenIf).unwrap().1, CreateAction::Opened);
    // Never a second entry differing in case; names keep their case.
    assert_eq!(names(&f, ""), ["Docs", "Mixed.TXT"]);
    assert_eq!(fs::read(f.share.join("Mixed.TXT")).unwrap(), b"");
}

#[test]
fn a_rename_changes_only_the_case() {
    let f = fixture(false);
    fs::write(f.share.join("a.txt"), b"a").unwrap();
    f.fs.rename("a.txt", "A.TXT", false).unwrap();
    assert_eq!(names(&f, ""), ["A.TXT"]);
    // The source named in another case, the target in yet another.
    f.fs.rename("a.TXT", "a.Txt", false).unwrap();
    assert_eq!(names(&f, ""), ["a.Txt"]);
    assert_eq!(open(&f, "A.TXT", Disposition::Open).unwrap().0.path, "a.Txt");
    // A directory too.
    fs::create_dir(f.share.join("dir")).unwrap();
    f.fs.rename("DIR", "Dir", false).unwrap();
    assert_eq!(names(&f, ""), ["Dir", "a.Txt"]);
    // Onto its own name, its directory named in another case: nothing
    // changes, no collision.
    fs::write(f.share.join("Dir/in"), b"in").unwrap();
    f.fs.rename("Dir\\in", "DIR\\in", false).unwrap();
    assert_eq!(names(&f, "Dir"), ["in"]);
}

#[test]
fn a_rename_onto_a_case_variant_of_another_file_collides() {
    let f = fixture(false);
    fs::write(f.share.join("x"), b"x").unwrap();
    fs::write(f.share.join("y"), b"y").unwrap();
    assert_eq!(status(f.fs.rename("x", "Y", false)), NtStatus::OBJECT_NAME_COLLISION);
    assert_eq!(names(&f, ""), ["x", "y"]);
    // With ReplaceIfExists the existing file is replaced (its entry keeps
    // its name), not joined by a second one.
    f.fs.rename("X", "Y", true).unwrap();
    assert_eq!(names(&f, ""), ["y"]);
    assert_eq!(fs::read(f.share.join("y")).unwrap(), b"x");
    // Onto a directory in another case: ACCESS_DENIED, as for the exact name.
    fs::create_dir(f.share.join("d")).unwrap();
    assert_eq!(status(f.fs.rename("y", "D", true)), NtStatus::ACCESS_DENIED);
}

#[test]
fn every_component_of_a_path_matches_ignoring_case() {
    let f = fixture(false);
    fs::create_dir_all(f.share.join("Top/Mid")).unwrap();
    fs::write(f.share.join("Top/Mid/Leaf.txt"), b"leaf").unwrap();
    let (h, _) = open(&f, "TOP\\mid\\LEAF.TXT", Disposition::Open).unwrap();
    assert_eq!((h.path.as_str(), read_all(&h)), ("Top\\Mid\\Leaf.txt", b"leaf".to_vec()));
    let (h, _) = f.fs.open("top\\MID", &opts(Disposition::Open, Kind::Directory)).unwrap();
    assert_eq!(h.path, "Top\\Mid");
    // A new file lands in the existing directories, with the case given.
    let (h, action) = open(&f, "tOP\\mId\\New.txt", Disposition::Create).unwrap();
    assert_eq!((action, h.path.as_str()), (CreateAction::Created, "Top\\Mid\\New.txt"));
    assert_eq!(names(&f, "Top/Mid"), ["Leaf.txt", "New.txt"]);
    f.fs.open("TOP\\MID\\Sub", &opts(Disposition::Create, Kind::Directory)).unwrap();
    assert!(f.share.join("Top/Mid/Sub").is_dir());
    f.fs.rename("top\\mid\\new.TXT", "TOP\\mid\\SUB\\moved.txt", false).unwrap();
    assert_eq!(names(&f, "Top/Mid/Sub"), ["moved.txt"]);
    f.fs.unlink("TOP\\MID\\SUB\\MOVED.TXT", false).unwrap();
    f.fs.unlink("top\\mid\\sub", true).unwrap();
    assert_eq!(names(&f, "Top/Mid"), ["Leaf.txt"]);
    // Missing in every case: the usual statuses.
    assert_eq!(status(open(&f, "top\\nope\\x", Disposition::OpenIf)), NtStatus::OBJECT_PATH_NOT_FOUND);
    assert_eq!(status(open(&f, "TOP\\MID\\nope", Disposition::Open)), NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(status(open(&f, "TOP\\MID\\LEAF.TXT\\x", Disposition::Open)), NtStatus::OBJECT_PATH_NOT_FOUND);
}

#[test]
fn changes_made_outside_are_seen() {
    let f = fixture(false);
    fs::write(f.share.join("First"), b"1").unwrap();
    // The directory's names are now cached.
    open(&f, "FIRST", Disposition::Open).unwrap();
    fs::write(f.share.join("Late.txt"), b"late").unwrap();
    let (h, _) = open(&f, "late.TXT", Disposition::Open).unwrap();
    assert_eq!(h.path, "Late.txt");
    fs::remove_file(f.share.join("Late.txt")).unwrap();
    assert_eq!(status(open(&f, "LATE.txt", Disposition::Open)), NtStatus::OBJECT_NAME_NOT_FOUND);
    let (h, action) = open(&f, "LATE.txt", Disposition::Create).unwrap();
    assert_eq!((action, h.path.as_str()), (CreateAction::Created, "LATE.txt"));
    // Renamed outside: the old name is gone in every case, the new one found.
    fs::rename(f.share.join("First"), f.share.join("Second")).unwrap();
    assert_eq!(status(f.fs.stat_path("first")), NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(f.fs.stat_path("SECOND").unwrap().size, 1);
    // A directory made outside, then a file in it.
    fs::create_dir(f.share.join("Sub")).unwrap();
    fs::write(f.share.join("Sub/In"), b"in").unwrap();
    assert_eq!(open(&f, "sub\\IN", Disposition::Open).unwrap().0.path, "Sub\\In");
}

#[test]
fn changes_made_through_the_share_keep_the_names_current() {
    let f = fixture(false);
    for i in 0..50 {
        open(&f, &format!("File{i}"), Disposition::Create).unwrap();
    }
    for i in 0..50 {
        assert_eq!(open(&f, &format!("FILE{i}"), Disposition::Open).unwrap().0.path, format!("File{i}"));
    }
    f.fs.unlink("file7", false).unwrap();
    assert_eq!(status(open(&f, "FILE7", Disposition::Open)), NtStatus::OBJECT_NAME_NOT_FOUND);
    f.fs.rename("file8", "Eight", false).unwrap();
    assert_eq!(status(open(&f, "FILE8", Disposition::Open)), NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(open(&f, "EIGHT", Disposition::Open).unwrap().0.path, "Eight");
    assert_eq!(names(&f, "").len(), 49);
}

#[test]
fn unicode_names_fold_as_on_windows() {
    let f = fixture(false);
    for (created, other) in [
        ("Ärger", "äRGER"),
        // Fullwidth A and a (smbtorture smb2.charset wide-a).
        ("\u{ff21}", "\u{ff41}"),
        ("ΣΟΦΙΑ", "σοφια"),
    ] {
        open(&f, created, Disposition::Create).unwrap();
        assert_eq!(status(open(&f, other, Disposition::Create)), NtStatus::OBJECT_NAME_COLLISION, "{other}");
        assert_eq!(open(&f, other, Disposition::Open).unwrap().0.path, created);
    }
    // ß has no single-character uppercase: it is not SS.
    open(&f, "Straße", Disposition::Create).unwrap();
    assert_eq!(open(&f, "STRASSE", Disposition::Create).unwrap().1, CreateAction::Created);
}

#[test]
fn a_case_sensitive_share_keeps_names_distinct() {
    let f = fixture(true);
    fs::write(f.share.join("Mixed.TXT"), b"hello").unwrap();
    assert_eq!(status(open(&f, "mixed.txt", Disposition::Open)), NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(status(f.fs.stat_path("MIXED.TXT")), NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(open(&f, "MIXED.txt", Disposition::Create).unwrap().1, CreateAction::Created);
    assert_eq!(names(&f, ""), ["MIXED.txt", "Mixed.TXT"]);
    assert_eq!(status(f.fs.rename("mixed.txt", "other", false)), NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(status(f.fs.unlink("mixed.TXT", false)), NtStatus::OBJECT_NAME_NOT_FOUND);
    fs::create_dir(f.share.join("Dir")).unwrap();
    assert_eq!(status(open(&f, "DIR\\x", Disposition::Create)), NtStatus::OBJECT_PATH_NOT_FOUND);
    assert_eq!(read_all(&open(&f, "Mixed.TXT", Disposition::Open).unwrap().0), b"hello");
}
