//! Every PosixFs and Handle operation against a real temp directory.

#![allow(clippy::unwrap_used)]

use smbq_vfs::{
    filetime, CreateAction, Disposition, FsError, Handle, Kind, OpenOptions, PosixFs, SetTimes,
};
use smbq_wire::NtStatus;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

const READONLY: u32 = 0x1;
const HIDDEN: u32 = 0x2;
const SYSTEM: u32 = 0x4;
const DIRECTORY: u32 = 0x10;
const ARCHIVE: u32 = 0x20;
const NORMAL: u32 = 0x80;

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
    Fixture {
        _dir: dir,
        share,
        fs,
    }
}

fn o(disposition: Disposition, kind: Kind, write: bool) -> OpenOptions {
    OpenOptions {
        disposition,
        kind,
        read: true,
        write,
    }
}

fn file(d: Disposition) -> OpenOptions {
    o(d, Kind::Any, true)
}

fn dir(d: Disposition) -> OpenOptions {
    o(d, Kind::Directory, false)
}

fn st(r: Result<(Handle, CreateAction), FsError>) -> NtStatus {
    r.map_or_else(|e| e.status(), |_| NtStatus::SUCCESS)
}

fn now_filetime() -> u64 {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    filetime(d.as_secs() as i64, i64::from(d.subsec_nanos()))
}

fn put(f: &Fixture, name: &str, data: &[u8]) {
    fs::write(f.share.join(name), data).unwrap();
}

#[test]
fn new_needs_an_existing_directory() {
    let f = fixture();
    let e = PosixFs::new(&f.share.join("missing"), false, false).unwrap_err();
    assert_eq!(e.status(), NtStatus::OBJECT_NAME_NOT_FOUND);
    put(&f, "file", b"");
    assert!(PosixFs::new(&f.share.join("file"), false, false).is_err());
    assert!(!f.fs.read_only());
}

#[test]
fn disposition_open() {
    let f = fixture();
    assert_eq!(
        st(f.fs.open("nope", &file(Disposition::Open))),
        NtStatus::OBJECT_NAME_NOT_FOUND
    );
    assert_eq!(
        st(f.fs.open("no\\nope", &file(Disposition::Open))),
        NtStatus::OBJECT_PATH_NOT_FOUND
    );
    put(&f, "x", b"abc");
    assert_eq!(
        st(f.fs.open("x\\y", &file(Disposition::Open))),
        NtStatus::OBJECT_PATH_NOT_FOUND
    );
    assert_eq!(
        st(f.fs.open("x\\y", &file(Disposition::OpenIf))),
        NtStatus::OBJECT_PATH_NOT_FOUND
    );
    assert_eq!(
        f.fs.stat_path("no\\nope").unwrap_err().status(),
        NtStatus::OBJECT_PATH_NOT_FOUND
    );
    assert_eq!(
        f.fs.stat_path("nope").unwrap_err().status(),
        NtStatus::OBJECT_NAME_NOT_FOUND
    );
    let (h, a) = f.fs.open("x", &file(Disposition::Open)).unwrap();
    assert_eq!(a, CreateAction::Opened);
    assert!(!h.is_dir);
    assert_eq!(h.path, "x");
    assert_eq!(h.stat().unwrap().size, 3);
}

#[test]
fn disposition_create() {
    let f = fixture();
    let (h, a) = f.fs.open("new", &file(Disposition::Create)).unwrap();
    assert_eq!(a, CreateAction::Created);
    h.write_at(b"hi", 0).unwrap();
    assert_eq!(fs::read(f.share.join("new")).unwrap(), b"hi");
    let mode = fs::metadata(f.share.join("new")).unwrap().mode() & 0o777;
    assert_eq!(mode & !0o644, 0, "at most 0644: {mode:o}");
    assert_eq!(mode & 0o600, 0o600);
    assert_eq!(
        st(f.fs.open("new", &file(Disposition::Create))),
        NtStatus::OBJECT_NAME_COLLISION
    );
    assert_eq!(
        st(f.fs.open("no\\new", &file(Disposition::Create))),
        NtStatus::OBJECT_PATH_NOT_FOUND
    );
    // A dangling symlink is a name that exists.
    symlink("gone", f.share.join("dangling")).unwrap();
    assert_eq!(
        st(f.fs.open("dangling", &file(Disposition::Create))),
        NtStatus::OBJECT_NAME_COLLISION
    );
    assert_eq!(
        st(f.fs.open("dangling", &file(Disposition::Open))),
        NtStatus::OBJECT_NAME_NOT_FOUND
    );
    assert!(!f.share.join("gone").exists());
}

#[test]
fn vectored_writes_land_in_order() {
    let f = fixture();
    let (h, _) = f.fs.open("v", &file(Disposition::Create)).unwrap();
    // Empty buffers between, more buffers than one pwritev takes (1024),
    // and a start past the end of the file.
    let parts: Vec<Vec<u8>> = (0..1500u32).map(|i| vec![(i % 251) as u8; (i % 3) as usize]).collect();
    let bufs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
    h.write_vectored_at(&bufs, 10).unwrap();
    let mut want = vec![0u8; 10];
    want.extend(parts.concat());
    assert_eq!(fs::read(f.share.join("v")).unwrap(), want);
}

#[test]
fn disposition_open_if() {
    let f = fixture();
    let (_, a) = f.fs.open("n", &file(Disposition::OpenIf)).unwrap();
    assert_eq!(a, CreateAction::Created);
    put(&f, "n", b"keep");
    let (h, a) = f.fs.open("n", &file(Disposition::OpenIf)).unwrap();
    assert_eq!(a, CreateAction::Opened);
    assert_eq!(h.stat().unwrap().size, 4);
}

#[test]
fn disposition_overwrite_truncates() {
    let f = fixture();
    assert_eq!(
        st(f.fs.open("n", &file(Disposition::Overwrite))),
        NtStatus::OBJECT_NAME_NOT_FOUND
    );
    assert!(!f.share.join("n").exists());
    put(&f, "n", b"old data");
    // Truncation happens even when the caller asked for no data access.
    let meta = OpenOptions {
        read: false,
        write: false,
        ..file(Disposition::Overwrite)
    };
    let (h, a) = f.fs.open("n", &meta).unwrap();
    assert_eq!(a, CreateAction::Overwritten);
    assert_eq!(h.stat().unwrap().size, 0);

    let (_, a) = f.fs.open("m", &file(Disposition::OverwriteIf)).unwrap();
    assert_eq!(a, CreateAction::Created);
    put(&f, "m", b"old data");
    let (_, a) = f.fs.open("m", &file(Disposition::OverwriteIf)).unwrap();
    assert_eq!(a, CreateAction::Overwritten);
    assert_eq!(fs::metadata(f.share.join("m")).unwrap().len(), 0);
}

#[test]
fn disposition_supersede() {
    let f = fixture();
    let (_, a) = f.fs.open("s", &file(Disposition::Supersede)).unwrap();
    assert_eq!(a, CreateAction::Created);
    put(&f, "s", b"old data");
    let (h, a) = f.fs.open("s", &file(Disposition::Supersede)).unwrap();
    assert_eq!(a, CreateAction::Superseded);
    assert_eq!(h.stat().unwrap().size, 0);
}

#[test]
fn directories_and_kinds() {
    let f = fixture();
    let (h, a) = f.fs.open("d", &dir(Disposition::Create)).unwrap();
    assert_eq!(a, CreateAction::Created);
    assert!(h.is_dir && h.stat().unwrap().is_dir);
    assert!(f.share.join("d").is_dir());
    let mode = fs::metadata(f.share.join("d")).unwrap().mode() & 0o777;
    assert_eq!(mode & !0o755, 0, "at most 0755: {mode:o}");
    assert_eq!(
        st(f.fs.open("d", &dir(Disposition::Create))),
        NtStatus::OBJECT_NAME_COLLISION
    );
    let (h, a) = f.fs.open("d", &dir(Disposition::OpenIf)).unwrap();
    assert_eq!(a, CreateAction::Opened);
    assert!(h.is_dir);
    let (_, a) = f.fs.open("d\\e", &dir(Disposition::OpenIf)).unwrap();
    assert_eq!(a, CreateAction::Created);
    assert!(f.share.join("d").join("e").is_dir());
    assert_eq!(
        st(f.fs.open("x\\e", &dir(Disposition::Create))),
        NtStatus::OBJECT_PATH_NOT_FOUND
    );

    // Kind::Any opens a directory as a directory.
    let (h, a) =
        f.fs.open("d", &o(Disposition::Open, Kind::Any, false))
            .unwrap();
    assert_eq!(a, CreateAction::Opened);
    assert!(h.is_dir);
    // And the root.
    let (h, _) = f.fs.open("", &dir(Disposition::Open)).unwrap();
    assert!(h.is_dir);
    assert_eq!(h.path, "");
    assert_eq!(
        st(f.fs.open("", &dir(Disposition::Create))),
        NtStatus::OBJECT_NAME_COLLISION
    );

    put(&f, "file", b"");
    assert_eq!(
        st(f.fs.open("file", &dir(Disposition::Open))),
        NtStatus::NOT_A_DIRECTORY
    );
    assert_eq!(
        st(f.fs.open("file", &dir(Disposition::OpenIf))),
        NtStatus::NOT_A_DIRECTORY
    );
    assert_eq!(
        st(f.fs.open("file", &dir(Disposition::Create))),
        NtStatus::OBJECT_NAME_COLLISION
    );
    let nondir = o(Disposition::Open, Kind::NonDirectory, false);
    assert_eq!(st(f.fs.open("d", &nondir)), NtStatus::FILE_IS_A_DIRECTORY);
    assert_eq!(st(f.fs.open("", &nondir)), NtStatus::FILE_IS_A_DIRECTORY);
    let (_, a) =
        f.fs.open("plain", &o(Disposition::Create, Kind::NonDirectory, true))
            .unwrap();
    assert_eq!(a, CreateAction::Created);
    assert!(f.share.join("plain").is_file());

    // Overwriting a directory is never possible.
    for d in [
        Disposition::Overwrite,
        Disposition::OverwriteIf,
        Disposition::Supersede,
    ] {
        assert_eq!(st(f.fs.open("d", &dir(d))), NtStatus::INVALID_PARAMETER);
        assert_eq!(st(f.fs.open("d", &file(d))), NtStatus::FILE_IS_A_DIRECTORY);
    }
}

#[test]
fn metadata_open_without_data_access() {
    let f = fixture();
    put(&f, "x", b"abc");
    let meta = OpenOptions {
        disposition: Disposition::Open,
        kind: Kind::Any,
        read: false,
        write: false,
    };
    let (h, _) = f.fs.open("x", &meta).unwrap();
    assert_eq!(h.stat().unwrap().size, 3);
    // Not opened for writing: writes are refused by the fd.
    assert_eq!(
        h.write_at(b"z", 0).unwrap_err().status(),
        NtStatus::ACCESS_DENIED
    );
    assert_eq!(h.set_len(0).unwrap_err().status(), NtStatus::ACCESS_DENIED);
    assert_eq!(fs::read(f.share.join("x")).unwrap(), b"abc");

    // Without read permission (only meaningful when not root) the open
    // still works for metadata, and reading fails.
    fs::set_permissions(f.share.join("x"), fs::Permissions::from_mode(0o000)).unwrap();
    let (h, _) = f.fs.open("x", &meta).unwrap();
    assert_eq!(h.stat().unwrap().size, 3);
    let uid = fs::metadata(f.share.join("x")).unwrap().uid();
    if uid != 0 {
        assert_eq!(
            st(f.fs.open("x", &file(Disposition::Open))),
            NtStatus::ACCESS_DENIED
        );
        assert_eq!(
            h.read_append(&mut Vec::new(), 3, 0).unwrap_err().status(),
            NtStatus::ACCESS_DENIED
        );
    }
}

#[test]
fn special_files_are_metadata_only() {
    let f = fixture();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        f.share.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    assert_eq!(
        st(f.fs.open("fifo", &file(Disposition::Open))),
        NtStatus::ACCESS_DENIED
    );
    let readonly = o(Disposition::Open, Kind::Any, false);
    assert_eq!(st(f.fs.open("fifo", &readonly)), NtStatus::ACCESS_DENIED);
    assert_eq!(
        st(f.fs.open("fifo", &file(Disposition::OverwriteIf))),
        NtStatus::ACCESS_DENIED
    );
    let meta = OpenOptions {
        read: false,
        write: false,
        ..readonly
    };
    let (h, _) = f.fs.open("fifo", &meta).unwrap();
    assert!(!h.stat().unwrap().is_dir);
    f.fs.unlink("fifo", false).unwrap();
}

#[test]
fn read_and_write() {
    let f = fixture();
    let (h, _) = f.fs.open("data", &file(Disposition::Create)).unwrap();
    h.write_at(b"hello", 0).unwrap();
    h.write_at(b"world", 10).unwrap();
    let mut buf = b"head:".to_vec();
    assert_eq!(h.read_append(&mut buf, 32, 0).unwrap(), 15);
    assert_eq!(buf, b"head:hello\0\0\0\0\0world", "appended after what was there");
    let mut buf = Vec::with_capacity(64);
    assert_eq!(h.read_append(&mut buf, 3, 11).unwrap(), 3, "no more than asked, whatever the capacity");
    assert_eq!(buf, b"orl");
    assert_eq!(h.read_append(&mut buf, 32, 15).unwrap(), 0, "EOF");
    assert_eq!(h.read_append(&mut buf, 32, 1 << 40).unwrap(), 0, "far past EOF");
    assert_eq!(h.read_append(&mut buf, 0, 0).unwrap(), 0);
    assert_eq!(buf, b"orl");
    h.write_at(&[], 100).unwrap();
    assert_eq!(h.stat().unwrap().size, 15);
    assert_eq!(
        h.write_at(b"x", u64::MAX).unwrap_err().status(),
        NtStatus::INVALID_PARAMETER
    );

    // The 8 MiB hot path, at an unaligned offset.
    let big: Vec<u8> = (0..8 << 20).map(|i: u32| (i % 251) as u8).collect();
    h.write_at(&big, 12345).unwrap();
    let mut back = Vec::new();
    assert_eq!(h.read_append(&mut back, big.len(), 12345).unwrap(), big.len());
    assert!(back == big);
    assert_eq!(h.stat().unwrap().size, 12345 + big.len() as u64);

    // A read-only open refuses writes.
    let (r, _) =
        f.fs.open("data", &o(Disposition::Open, Kind::Any, false))
            .unwrap();
    assert_eq!(
        r.write_at(b"x", 0).unwrap_err().status(),
        NtStatus::ACCESS_DENIED
    );
    assert_eq!(r.set_len(1).unwrap_err().status(), NtStatus::ACCESS_DENIED);
    assert_eq!(
        r.set_allocation(1).unwrap_err().status(),
        NtStatus::ACCESS_DENIED
    );
    h.sync().unwrap();
    r.sync().unwrap();
}

#[test]
fn directory_handles_have_no_data() {
    let f = fixture();
    let (d, _) = f.fs.open("d", &dir(Disposition::Create)).unwrap();
    assert_eq!(
        d.read_append(&mut Vec::new(), 4, 0).unwrap_err().status(),
        NtStatus::FILE_IS_A_DIRECTORY
    );
    assert_eq!(d.set_len(0).unwrap_err().status(), NtStatus::ACCESS_DENIED);
    d.sync().unwrap();
    put(&f, "x", b"");
    let (h, _) = f.fs.open("x", &file(Disposition::Open)).unwrap();
    assert_eq!(
        h.read_dir().unwrap_err().status(),
        NtStatus::INVALID_PARAMETER
    );
}

#[test]
fn set_len_and_allocation() {
    let f = fixture();
    let (h, _) = f.fs.open("x", &file(Disposition::Create)).unwrap();
    h.write_at(b"0123456789", 0).unwrap();
    h.set_len(4).unwrap();
    assert_eq!(fs::read(f.share.join("x")).unwrap(), b"0123");
    h.set_len(6).unwrap();
    assert_eq!(fs::read(f.share.join("x")).unwrap(), b"0123\0\0");

    // Growing the allocation keeps the size and reserves blocks.
    h.set_allocation(1 << 20).unwrap();
    let s = h.stat().unwrap();
    assert_eq!(s.size, 6);
    assert!(s.allocation_size >= 1 << 20, "{}", s.allocation_size);
    h.set_allocation(6).unwrap();
    assert_eq!(h.stat().unwrap().size, 6);
    // Below the end of file it truncates.
    h.set_allocation(2).unwrap();
    assert_eq!(fs::read(f.share.join("x")).unwrap(), b"01");
    h.set_allocation(0).unwrap();
    assert_eq!(h.stat().unwrap().size, 0);
}

#[test]
fn stat_attributes_times_and_ids() {
    let f = fixture();
    let before = now_filetime();
    put(&f, "x", b"12345");
    fs::create_dir(f.share.join("d")).unwrap();
    let x = f.fs.stat_path("x").unwrap();
    let d = f.fs.stat_path("d").unwrap();
    let after = now_filetime();
    assert_eq!(
        (x.size, x.is_dir, x.attributes, x.nlink),
        (5, false, ARCHIVE, 1)
    );
    assert!(d.is_dir);
    assert_eq!(d.attributes, DIRECTORY);
    for t in [
        x.creation_time,
        x.last_access_time,
        x.last_write_time,
        x.change_time,
    ] {
        // Allow for file system timestamp granularity (a few ms).
        assert!(
            t + 200_000 >= before && t <= after + 200_000,
            "{t} not in {before}..{after}"
        );
    }
    assert!(x.creation_time <= x.last_write_time);
    assert_eq!(
        x.allocation_size,
        fs::metadata(f.share.join("x")).unwrap().blocks() * 512
    );

    // Ids: stable across opens and paths, distinct per file, shared by links.
    let (h, _) = f.fs.open("x", &file(Disposition::Open)).unwrap();
    assert_eq!(h.stat().unwrap().file_id, x.file_id);
    assert_ne!(x.file_id, d.file_id);
    fs::hard_link(f.share.join("x"), f.share.join("x2")).unwrap();
    let x2 = f.fs.stat_path("x2").unwrap();
    assert_eq!((x2.file_id, x2.nlink), (x.file_id, 2));
    let again = PosixFs::new(&f.share, true, false).unwrap();
    assert_eq!(again.stat_path("x").unwrap().file_id, x.file_id);
    assert_eq!(again.stat_path("d").unwrap().file_id, d.file_id);
    // Renaming keeps the id.
    f.fs.rename("x", "y", false).unwrap();
    assert_eq!(f.fs.stat_path("y").unwrap().file_id, x.file_id);
}

#[test]
fn set_times() {
    let f = fixture();
    let (h, _) = f.fs.open("x", &file(Disposition::Create)).unwrap();
    let t0 = h.stat().unwrap();
    // 2001-09-09T01:46:40.1234567Z
    let w = filetime(1_000_000_000, 123_456_700);
    h.set_times(&SetTimes {
        creation_time: None,
        last_access_time: None,
        last_write_time: Some(w),
    })
    .unwrap();
    let t1 = h.stat().unwrap();
    assert_eq!(t1.last_write_time, w);
    assert_eq!(t1.change_time, w, "ChangeTime reads as the write time, as on Samba");
    assert_eq!(t1.last_access_time, t0.last_access_time);
    assert_eq!(
        fs::metadata(f.share.join("x")).unwrap().mtime(),
        1_000_000_000
    );
    let a = filetime(1_500_000_000, 0);
    h.set_times(&SetTimes {
        creation_time: None,
        last_access_time: Some(a),
        last_write_time: None,
    })
    .unwrap();
    let t2 = h.stat().unwrap();
    assert_eq!((t2.last_access_time, t2.last_write_time), (a, w));
    h.set_times(&SetTimes::default()).unwrap();
    assert_eq!(h.stat().unwrap().last_write_time, w);
    // Creation time is the oldest time we know (birth time, when recorded).
    assert!(t2.creation_time <= t0.change_time);
}

/// Attributes and the creation time are kept in `user.DOSATTRIB` as
/// Samba writes it (version 5: valid flags, attributes, creation time),
/// not in the mode; a share without the attribute falls back to the mode.
#[test]
fn attributes_and_creation_time_in_dosattrib() {
    let f = fixture();
    let (h, _) = f.fs.open("x", &file(Disposition::Create)).unwrap();
    assert_eq!(h.stat().unwrap().attributes, ARCHIVE, "the default without the attribute");
    let born = h.stat().unwrap().creation_time;
    h.set_attributes(READONLY | HIDDEN | SYSTEM).unwrap();
    assert_eq!(h.stat().unwrap().attributes, READONLY | HIDDEN | SYSTEM);
    assert_eq!(f.fs.stat_path("x").unwrap().attributes, READONLY | HIDDEN | SYSTEM);
    let dos = xattr(&f.share.join("x"), "user.DOSATTRIB").unwrap();
    let mut want = vec![0, 0, 5, 0, 5, 0, 0, 0, 0x11, 0, 0, 0, 7, 0, 0, 0];
    want.extend_from_slice(&born.to_le_bytes());
    assert_eq!(dos, want, "Samba's layout, the birth time kept");
    assert_eq!(fs::metadata(f.share.join("x")).unwrap().mode() & 0o200, 0o200, "the mode is left alone");
    // NORMAL alone clears them all; a listing shows the same.
    h.set_attributes(NORMAL).unwrap();
    assert_eq!(h.stat().unwrap().attributes, NORMAL);
    let (root, _) = f.fs.open("", &dir(Disposition::Open)).unwrap();
    let listed = root.read_dir().unwrap().into_iter().find(|e| e.name == "x").unwrap();
    assert_eq!(listed.stat.attributes, NORMAL);
    // The creation time is settable and kept beside the attributes.
    let c = filetime(1_000_000_000, 100);
    h.set_times(&SetTimes { creation_time: Some(c), ..SetTimes::default() }).unwrap();
    assert_eq!((h.stat().unwrap().creation_time, h.stat().unwrap().attributes), (c, NORMAL));
    assert_eq!(listed_stat(&f, "x").creation_time, c);
    // Directories keep theirs too, and always show DIRECTORY.
    let (d, _) = f.fs.open("d", &dir(Disposition::Create)).unwrap();
    d.set_attributes(READONLY | HIDDEN).unwrap();
    assert_eq!(d.stat().unwrap().attributes, DIRECTORY | READONLY | HIDDEN);
    // A value written by Samba 4.17 (read off its share) is understood.
    let samba = [0, 0, 5, 0, 5, 0, 0, 0, 0x11, 0, 0, 0, 0x22, 0, 0, 0, 0xd2, 0xef, 0x14, 0xd3, 0xcd, 0x7d, 0xdd, 0x01];
    put(&f, "from-samba", b"");
    set_xattr(&f.share.join("from-samba"), "user.DOSATTRIB", &samba);
    let st = f.fs.stat_path("from-samba").unwrap();
    assert_eq!((st.attributes, st.creation_time), (ARCHIVE | HIDDEN, 0x01dd_7dcd_d314_efd2));
    // Without the attribute, the mode gives READONLY.
    put(&f, "plain", b"");
    fs::set_permissions(f.share.join("plain"), fs::Permissions::from_mode(0o444)).unwrap();
    assert_eq!(f.fs.stat_path("plain").unwrap().attributes, ARCHIVE | READONLY);
}

/// EAs are the `user.` extended attributes without the prefix, as Samba's
/// `ea support` keeps them; its and our own records are not EAs.
#[test]
fn extended_attributes() {
    let f = fixture();
    let (h, _) = f.fs.open("x", &file(Disposition::Create)).unwrap();
    assert!(h.eas().unwrap().is_empty());
    h.set_attributes(HIDDEN).unwrap();
    let ea = |name: &str, value: &[u8]| smbq_wire::ea::Ea { flags: 0, name: name.into(), value: value.to_vec() };
    h.set_eas(&[ea("EAONE", b"VALUE1"), ea("SecondEA", b"ValueTwo")]).unwrap();
    assert_eq!(h.eas().unwrap(), [ea("EAONE", b"VALUE1"), ea("SecondEA", b"ValueTwo")]);
    assert_eq!(xattr(&f.share.join("x"), "user.EAONE").unwrap(), b"VALUE1");
    // Names are case-insensitive: the EA keeps its first name.
    h.set_eas(&[ea("secondea", b"2")]).unwrap();
    assert_eq!(h.eas().unwrap(), [ea("EAONE", b"VALUE1"), ea("SecondEA", b"2")]);
    // An empty value removes; removing a missing one is no error.
    h.set_eas(&[ea("eaone", b""), ea("missing", b"")]).unwrap();
    assert_eq!(h.eas().unwrap(), [ea("SecondEA", b"2")]);
    // One set from Linux is an EA too; Samba's records are not, nor settable.
    set_xattr(&f.share.join("x"), "user.fromlinux", b"l");
    set_xattr(&f.share.join("x"), "user.DosStream.s:$DATA", b"stream\0");
    let names: Vec<String> = h.eas().unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, ["SecondEA", "fromlinux"]);
    assert_eq!(h.set_eas(&[ea("DOSATTRIB", b"x")]).unwrap_err().status(), NtStatus::ACCESS_DENIED);
    assert_eq!(f.fs.stat_path("x").unwrap().attributes, HIDDEN, "our record untouched");
    // Past what ext4 keeps per inode (one block): EA_TOO_LARGE.
    let big = vec![7u8; 60_000];
    assert_eq!(h.set_eas(&[ea("BIG", &big)]).unwrap_err().status(), NtStatus::EA_TOO_LARGE);
}

fn listed_stat(f: &Fixture, name: &str) -> smbq_vfs::FileStat {
    let (root, _) = f.fs.open("", &dir(Disposition::Open)).unwrap();
    root.read_dir().unwrap().into_iter().find(|e| e.name == name).unwrap().stat
}

fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    let n = rustix::fs::getxattr(path, name, &mut buf[..]).ok()?;
    buf.truncate(n);
    Some(buf)
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    rustix::fs::setxattr(path, name, value, rustix::fs::XattrFlags::empty()).unwrap();
}

#[test]
fn read_dir_lists_sorted_with_dot_entries() {
    let f = fixture();
    for n in ["b", "a", "C", "é", "10", "9"] {
        put(&f, n, n.as_bytes());
    }
    fs::create_dir(f.share.join("sub")).unwrap();
    put(&f, "sub/inner", b"12");
    symlink("sub/inner", f.share.join("ln")).unwrap();
    symlink("missing", f.share.join("dangling")).unwrap();
    // Names no SMB client could open again are not listed.
    put(&f, "bad:name", b"");
    put(&f, "star*", b"");

    let (h, _) = f.fs.open("", &dir(Disposition::Open)).unwrap();
    let list = h.read_dir().unwrap();
    let names: Vec<&str> = list.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [".", "..", "10", "9", "C", "a", "b", "dangling", "ln", "sub", "é"]
    );
    let by = |n: &str| list.iter().find(|e| e.name == n).unwrap().stat;
    assert_eq!(by("a").size, 1);
    assert_eq!(by("é").size, 2);
    assert_eq!(by("a").file_id, f.fs.stat_path("a").unwrap().file_id);
    assert!(by("sub").is_dir && by(".").is_dir && by("..").is_dir);
    // A link inside the share shows its target; a dangling one itself.
    assert_eq!(
        by("ln").file_id,
        f.fs.stat_path("sub\\inner").unwrap().file_id
    );
    assert_eq!(by("ln").size, 2);
    assert_eq!(by("dangling").size, 7);

    let (s, _) = f.fs.open("sub", &dir(Disposition::Open)).unwrap();
    let list = s.read_dir().unwrap();
    let names: Vec<&str> = list.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, [".", "..", "inner"]);
    let root_id = f.fs.stat_path("").unwrap().file_id;
    assert_eq!(list[0].stat.file_id, f.fs.stat_path("sub").unwrap().file_id);
    assert_eq!(list[1].stat.file_id, root_id);

    // A relative symlink in a subdirectory resolves against it.
    symlink("../a", f.share.join("sub").join("up")).unwrap();
    let list = s.read_dir().unwrap();
    let up = list.iter().find(|e| e.name == "up").unwrap();
    assert_eq!(up.stat.file_id, f.fs.stat_path("a").unwrap().file_id);

    // An empty directory has just the dot entries.
    let (e, _) = f.fs.open("empty", &dir(Disposition::Create)).unwrap();
    assert_eq!(e.read_dir().unwrap().len(), 2);
}

#[test]
fn stat_fs_reports_the_volume() {
    let f = fixture();
    let s = f.fs.stat_fs().unwrap();
    assert!(s.block_size > 0 && s.total_blocks > 0);
    assert!(s.free_blocks <= s.total_blocks && s.avail_blocks <= s.free_blocks);
    assert_eq!(s.max_name_len, 255);
    let again = PosixFs::new(&f.share, false, false).unwrap().stat_fs().unwrap();
    assert_eq!(again.serial, s.serial);
}

#[test]
fn rename_with_and_without_replace() {
    let f = fixture();
    put(&f, "a", b"A");
    put(&f, "b", b"B");
    assert_eq!(
        f.fs.rename("a", "b", false).unwrap_err().status(),
        NtStatus::OBJECT_NAME_COLLISION
    );
    assert_eq!(fs::read(f.share.join("b")).unwrap(), b"B");
    f.fs.rename("a", "b", true).unwrap();
    assert_eq!(fs::read(f.share.join("b")).unwrap(), b"A");
    assert!(!f.share.join("a").exists());
    assert_eq!(
        f.fs.rename("a", "c", false).unwrap_err().status(),
        NtStatus::OBJECT_NAME_NOT_FOUND
    );
    assert_eq!(
        f.fs.rename("b", "no\\c", false).unwrap_err().status(),
        NtStatus::OBJECT_PATH_NOT_FOUND
    );
    assert_eq!(
        f.fs.rename("no\\b", "c", false).unwrap_err().status(),
        NtStatus::OBJECT_PATH_NOT_FOUND
    );

    // Directories move with their contents, also into subdirectories.
    fs::create_dir_all(f.share.join("d1/inner")).unwrap();
    fs::create_dir(f.share.join("d2")).unwrap();
    f.fs.rename("d1", "d2\\d1", false).unwrap();
    assert!(f.share.join("d2/d1/inner").is_dir());
    f.fs.rename("b", "d2\\d1\\inner\\b", false).unwrap();
    assert_eq!(fs::read(f.share.join("d2/d1/inner/b")).unwrap(), b"A");

    // A directory target is never replaced, empty or not.
    fs::create_dir(f.share.join("e")).unwrap();
    fs::create_dir(f.share.join("full")).unwrap();
    put(&f, "full/x", b"");
    put(&f, "g", b"");
    for target in ["e", "full"] {
        assert_eq!(
            f.fs.rename("d2", target, true).unwrap_err().status(),
            NtStatus::ACCESS_DENIED
        );
        assert_eq!(
            f.fs.rename("g", target, true).unwrap_err().status(),
            NtStatus::ACCESS_DENIED
        );
        assert_eq!(
            f.fs.rename("g", target, false).unwrap_err().status(),
            NtStatus::OBJECT_NAME_COLLISION
        );
    }
    // A directory over a file.
    assert_eq!(
        f.fs.rename("e", "g", true).unwrap_err().status(),
        NtStatus::ACCESS_DENIED
    );
    assert!(f.share.join("e").is_dir() && f.share.join("g").is_file());
    // A directory into itself.
    assert_eq!(
        f.fs.rename("d2", "d2\\d1\\x", false).unwrap_err().status(),
        NtStatus::INVALID_PARAMETER
    );
}

#[test]
fn unlink_files_and_directories() {
    let f = fixture();
    put(&f, "x", b"");
    fs::create_dir(f.share.join("d")).unwrap();
    put(&f, "d/y", b"");
    assert_eq!(
        f.fs.unlink("d", true).unwrap_err().status(),
        NtStatus::DIRECTORY_NOT_EMPTY
    );
    assert_eq!(
        f.fs.unlink("d", false).unwrap_err().status(),
        NtStatus::FILE_IS_A_DIRECTORY
    );
    assert_eq!(
        f.fs.unlink("x", true).unwrap_err().status(),
        NtStatus::NOT_A_DIRECTORY
    );
    f.fs.unlink("d\\y", false).unwrap();
    f.fs.unlink("d", true).unwrap();
    f.fs.unlink("x", false).unwrap();
    assert_eq!(fs::read_dir(&f.share).unwrap().count(), 0);
    assert_eq!(
        f.fs.unlink("x", false).unwrap_err().status(),
        NtStatus::OBJECT_NAME_NOT_FOUND
    );
    assert_eq!(
        f.fs.unlink("no\\x", false).unwrap_err().status(),
        NtStatus::OBJECT_PATH_NOT_FOUND
    );

    // An open file can be unlinked (delete-on-close) and stays readable.
    let (h, _) = f.fs.open("z", &file(Disposition::Create)).unwrap();
    h.write_at(b"zz", 0).unwrap();
    f.fs.unlink(&h.path, h.is_dir).unwrap();
    assert_eq!(h.read_append(&mut Vec::new(), 2, 0).unwrap(), 2);
}

/// A security descriptor is kept in `security.NTACL` (version 1, offsets
/// from the start of the value), read back with the owner and mode, and
/// found by path too. Only root may write `security.*`: anyone else gets
/// ACCESS_DENIED, and nothing is kept.
#[test]
fn security_descriptor_in_ntacl() {
    use smbq_wire::security::{ace_type, Ace, Acl, SecurityDescriptor, Sid};
    let f = fixture();
    let (h, _) = f.fs.open("acl.txt", &o(Disposition::Create, Kind::NonDirectory, true)).unwrap();
    let before = h.security().unwrap();
    assert_eq!(before.descriptor, None);
    let unix = before.unix.unwrap();
    assert_eq!(unix.uid, fs::metadata(f.share.join("acl.txt")).unwrap().uid());
    assert_eq!(unix.mode, fs::metadata(f.share.join("acl.txt")).unwrap().permissions().mode() & 0o7777);
    let sd = SecurityDescriptor {
        owner: Some(Sid::everyone()),
        dacl: Some(Acl::new(vec![Ace::new(ace_type::ACCESS_DENIED, 0, 2, Sid::everyone())])),
        ..Default::default()
    }
    .to_bytes();
    match h.set_security(&sd) {
        Ok(()) => {
            assert_eq!(h.security().unwrap().descriptor.as_deref(), Some(&sd[..]));
            assert_eq!(smbq_vfs::FileSystem::security(&f.fs, "acl.txt").unwrap().descriptor.as_deref(), Some(&sd[..]));
            let kept = xattr(&f.share.join("acl.txt"), "security.NTACL").unwrap();
            assert_eq!(&kept[..8], &[1, 0, 1, 0, 0, 0, 2, 0]);
            assert_eq!(&kept[12..16], &28u32.to_le_bytes()); // the owner, 8 + 20 bytes in
        }
        Err(e) => {
            assert_eq!(e.status(), NtStatus::ACCESS_DENIED);
            assert_eq!(h.security().unwrap().descriptor, None);
        }
    }
    // Not a descriptor: refused before anything is written.
    assert_eq!(h.set_security(&[1, 2, 3]).unwrap_err().status(), NtStatus::INVALID_PARAMETER);
}

/// The POSIX view (SMB3 POSIX extensions): exact-case names, any
/// character but `/` and NUL, symlinks and special files as themselves,
/// reparse points kept as Samba keeps them, chmod and chown.
#[test]
fn posix_view() {
    let f = fixture();
    let view = f.fs.posix_view();
    put(&f, "Mixed", b"m");
    // Exact case only, where the Windows view ignores case.
    assert!(f.fs.stat_path("mixed").is_ok());
    assert_eq!(view.stat_path("mixed").unwrap_err().status(), NtStatus::OBJECT_NAME_NOT_FOUND);
    // `:` names a file, not a stream; `/` and NUL never do.
    let (h, action) = view.open("a:b", &file(Disposition::Create)).unwrap();
    assert_eq!((action, h.path.as_str()), (CreateAction::Created, "a:b"));
    assert!(f.share.join("a:b").is_file());
    assert!(matches!(view.open("a/b", &file(Disposition::Create)), Err(FsError::InvalidName)));
    assert!(f.fs.open("q?", &file(Disposition::Create)).is_err());
    view.open("q?", &file(Disposition::Create)).unwrap();
    // Mode, owner and type in the metadata; chmod exactly, no umask.
    h.chmod(0o4751).unwrap();
    let u = h.stat().unwrap().unix.unwrap();
    assert_eq!(u.mode, 0o104751);
    let md = fs::metadata(f.share.join("a:b")).unwrap();
    assert_eq!((u.uid, u.gid, md.mode() & 0o7777), (md.uid(), md.gid(), 0o4751));
    h.chown(Some(md.uid()), None).unwrap();
    assert!(matches!(h.chown(Some(u32::MAX), None), Err(FsError::Status(NtStatus::INVALID_PARAMETER))));
    // A symlink: followed by the Windows view, itself in the POSIX view.
    put(&f, "target", b"0123456789");
    symlink("target", f.share.join("link")).unwrap();
    assert_eq!(f.fs.stat_path("link").unwrap().size, 10);
    let st = view.stat_path("link").unwrap();
    let u = st.unix.unwrap();
    assert_eq!((u.mode & 0o170000, u.reparse_tag, st.attributes & 0x400), (0o120000, 0xA000_000C, 0x400));
    let (link, _) = view.open("link", &OpenOptions { read: false, ..o(Disposition::Open, Kind::Any, false) }).unwrap();
    let buf = link.reparse_point().unwrap();
    assert_eq!(smbq_wire::posix::Symlink::decode(&buf).unwrap(), smbq_wire::posix::Symlink::from_target("target"));
    assert!(view.open("link", &file(Disposition::Open)).is_err(), "a symlink has no data to open");
    let names: Vec<_> = view.open("", &dir(Disposition::Open)).unwrap().0.read_dir().unwrap().into_iter().map(|e| (e.name, e.stat)).collect();
    let listed = &names.iter().find(|(n, _)| n == "link").unwrap().1;
    assert_eq!(listed.unix.unwrap().reparse_tag, 0xA000_000C);
    let dotdot = &names.iter().find(|(n, _)| n == "..").unwrap().1;
    assert_eq!((dotdot.unix, dotdot.file_id), (None, 0), "the root's .. shows nothing above it");
    // A reparse point a client sets on a regular file: kept in
    // user.SmbReparse with the attribute, shown as what it stands for.
    let mut sym = Vec::new();
    smbq_wire::posix::Symlink::from_target("../x").encode(&mut sym);
    h.set_reparse_point(&sym).unwrap();
    assert_eq!(h.reparse_point().unwrap(), sym);
    let st = h.stat().unwrap();
    assert_eq!((st.attributes & 0x400, st.unix.unwrap().reparse_tag, st.unix.unwrap().mode & 0o170000), (0x400, 0xA000_000C, 0o120000));
    let other = [0x14, 0, 0, 0x80, 8, 0, 0, 0, 0x46, 0x49, 0x46, 0x4F, 0, 0, 0, 0];
    assert!(matches!(h.set_reparse_point(&other), Err(FsError::Status(NtStatus::IO_REPARSE_TAG_MISMATCH))));
    assert!(matches!(h.set_reparse_point(&sym[..sym.len() - 1]), Err(FsError::Status(NtStatus::IO_REPARSE_DATA_INVALID))));
    // SET_INFO basic keeps the reparse point; deleting it needs its tag.
    h.set_attributes(HIDDEN).unwrap();
    assert_eq!(h.stat().unwrap().attributes & (0x400 | HIDDEN), 0x400 | HIDDEN);
    assert!(matches!(h.delete_reparse_point(0x8000_0014), Err(FsError::Status(NtStatus::IO_REPARSE_TAG_MISMATCH))));
    h.delete_reparse_point(0xA000_000C).unwrap();
    let st = h.stat().unwrap();
    assert_eq!((st.attributes & 0x400, st.unix.unwrap().reparse_tag), (0, 0));
    assert!(matches!(h.reparse_point(), Err(FsError::Status(NtStatus::NOT_A_REPARSE_POINT))));
    assert!(matches!(link.set_reparse_point(&sym), Err(FsError::Status(NtStatus::ACCESS_DENIED))), "only regular files");
}
