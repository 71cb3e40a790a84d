//! Nothing an SMB client names may reach outside the share root.

#![allow(clippy::unwrap_used)]

use smbq_vfs::{check_name, Disposition, FsError, Kind, OpenOptions, PosixFs};
use smbq_wire::NtStatus;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// A temp dir holding `share/` (the root) and `outside/secret` next to it.
struct Fixture {
    _dir: tempfile::TempDir,
    share: PathBuf,
    outside: PathBuf,
    fs: PosixFs,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let share = dir.path().join("share");
    let outside = dir.path().join("outside");
    fs::create_dir(&share).unwrap();
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret"), b"top secret").unwrap();
    fs::create_dir(share.join("a")).unwrap();
    fs::write(share.join("a").join("f"), b"inside").unwrap();
    let fs = PosixFs::new(&share, false, false).unwrap();
    Fixture {
        _dir: dir,
        share,
        outside,
        fs,
    }
}

fn opts(disposition: Disposition) -> OpenOptions {
    OpenOptions {
        disposition,
        kind: Kind::Any,
        read: true,
        write: false,
    }
}

fn rw(disposition: Disposition) -> OpenOptions {
    OpenOptions {
        disposition,
        kind: Kind::Any,
        read: true,
        write: true,
    }
}

fn open_status(fs: &PosixFs, path: &str, o: OpenOptions) -> NtStatus {
    match fs.open(path, &o) {
        Ok(_) => NtStatus::SUCCESS,
        Err(e) => e.status(),
    }
}

/// Every way of naming `path` must fail with `want`, and so must stat.
fn assert_refused(fs: &PosixFs, path: &str, want: NtStatus) {
    for d in [
        Disposition::Open,
        Disposition::OpenIf,
        Disposition::OverwriteIf,
        Disposition::Supersede,
    ] {
        assert_eq!(open_status(fs, path, rw(d)), want, "{path} {d:?}");
    }
    assert_eq!(
        open_status(fs, path, opts(Disposition::Open)),
        want,
        "{path} read"
    );
    assert_eq!(
        fs.stat_path(path).unwrap_err().status(),
        want,
        "{path} stat"
    );
}

fn assert_untouched(f: &Fixture) {
    assert_eq!(fs::read(f.outside.join("secret")).unwrap(), b"top secret");
    let names: Vec<_> = fs::read_dir(&f.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["secret"]);
}

#[test]
fn dotdot_components_are_invalid() {
    let f = fixture();
    for p in [
        "..\\..\\etc\\passwd",
        "a\\..\\..\\x",
        "..",
        "a\\..",
        "..\\outside\\secret",
        ".",
        "a\\.\\f",
    ] {
        assert!(matches!(check_name(p), Err(FsError::InvalidName)), "{p}");
        assert_refused(&f.fs, p, NtStatus::OBJECT_NAME_INVALID);
        assert_eq!(
            f.fs.unlink(p, false).unwrap_err().status(),
            NtStatus::OBJECT_NAME_INVALID
        );
    }
    assert_untouched(&f);
}

#[test]
fn absolute_and_leading_separators_are_invalid() {
    let f = fixture();
    for p in [
        "/etc/passwd",
        "\\etc\\passwd",
        "\\\\etc\\passwd",
        "/",
        "\\",
        "a/f",
        "a\\",
        "a\\\\f",
    ] {
        assert_refused(&f.fs, p, NtStatus::OBJECT_NAME_INVALID);
    }
    assert!(!f.share.join("etc").exists());
}

#[test]
fn win32_prefixes_streams_and_wildcards_are_invalid() {
    let f = fixture();
    for p in [
        "\\\\?\\C:\\x",
        "\\?\\C:\\x",
        "\\??\\C:\\x",
        "??\\C:\\x",
        "C:\\x",
        "a\\f:stream:$FOO",
        "a\\f:st/ream",
        "a:stream\\f",
        "f*",
        "f?",
        "f<",
        "f>",
        "f\"",
        "f|",
        "f\0",
        "f\x01",
        "f\n",
    ] {
        assert_refused(&f.fs, p, NtStatus::OBJECT_NAME_INVALID);
    }
    assert_eq!(
        fs::read_dir(&f.share).unwrap().count(),
        1,
        "nothing created"
    );
}

#[test]
fn default_data_stream_suffix_names_the_file() {
    let f = fixture();
    let (h, _) = f.fs.open("a\\f::$DATA", &opts(Disposition::Open)).unwrap();
    assert_eq!(h.path, "a\\f");
    let mut buf = Vec::new();
    assert_eq!(h.read_append(&mut buf, 16, 0).unwrap(), 6);
    assert_eq!(buf, b"inside");
    assert_eq!(f.fs.stat_path("a\\f::$data").unwrap().size, 6);
    // Only after a name, and only with a type after the second colon.
    assert_refused(&f.fs, "::$DATA", NtStatus::OBJECT_NAME_INVALID);
    assert_refused(&f.fs, "a\\f:", NtStatus::OBJECT_NAME_INVALID);
    assert_refused(&f.fs, "a\\f::", NtStatus::OBJECT_NAME_INVALID);
}

#[test]
fn overlong_names_are_invalid() {
    let f = fixture();
    assert_refused(&f.fs, &"x".repeat(256), NtStatus::OBJECT_NAME_INVALID);
    let long_path = vec!["d"; 2049].join("\\");
    assert!(long_path.len() > 4096);
    assert_refused(&f.fs, &long_path, NtStatus::OBJECT_NAME_INVALID);
    // 255 bytes is fine.
    let (_, a) =
        f.fs.open(&"y".repeat(255), &rw(Disposition::Create))
            .unwrap();
    assert_eq!(a, smbq_vfs::CreateAction::Created);
}

#[test]
fn symlink_to_root_dir_is_refused() {
    let f = fixture();
    symlink("/", f.share.join("root")).unwrap();
    assert_refused(&f.fs, "root", NtStatus::ACCESS_DENIED);
    assert_refused(&f.fs, "root\\etc\\passwd", NtStatus::ACCESS_DENIED);
    assert_refused(&f.fs, "root\\tmp\\new", NtStatus::ACCESS_DENIED);
    assert_eq!(
        f.fs.open(
            "root\\tmp\\x",
            &OpenOptions {
                kind: Kind::Directory,
                ..rw(Disposition::Create)
            }
        )
        .unwrap_err()
        .status(),
        NtStatus::ACCESS_DENIED
    );
}

#[test]
fn symlink_to_outside_file_is_refused() {
    let f = fixture();
    symlink(f.outside.join("secret"), f.share.join("abs")).unwrap();
    symlink("/etc/hostname", f.share.join("host")).unwrap();
    symlink("../outside/secret", f.share.join("rel")).unwrap();
    symlink("../../outside/secret", f.share.join("a").join("rel2")).unwrap();
    for p in ["abs", "host", "rel", "a\\rel2"] {
        assert_refused(&f.fs, p, NtStatus::ACCESS_DENIED);
    }
    assert_untouched(&f);
}

#[test]
fn symlink_to_outside_dir_does_not_reach_children() {
    let f = fixture();
    symlink(&f.outside, f.share.join("out")).unwrap();
    symlink("../outside", f.share.join("relout")).unwrap();
    for p in ["out\\secret", "relout\\secret", "out\\new", "relout\\new"] {
        assert_refused(&f.fs, p, NtStatus::ACCESS_DENIED);
        let dir = OpenOptions {
            kind: Kind::Directory,
            ..rw(Disposition::Create)
        };
        assert_eq!(open_status(&f.fs, p, dir), NtStatus::ACCESS_DENIED);
        assert_eq!(
            f.fs.unlink(p, false).unwrap_err().status(),
            NtStatus::ACCESS_DENIED
        );
        assert_eq!(
            f.fs.rename("a\\f", p, true).unwrap_err().status(),
            NtStatus::ACCESS_DENIED
        );
        assert_eq!(
            f.fs.rename(p, "stolen", true).unwrap_err().status(),
            NtStatus::ACCESS_DENIED
        );
    }
    assert_untouched(&f);
    assert!(f.share.join("a").join("f").exists());
    assert!(!f.share.join("stolen").exists());
}

#[test]
fn rename_cannot_target_outside() {
    let f = fixture();
    for to in ["..\\outside\\x", "\\x", "/tmp/x", "a\\..\\..\\x"] {
        assert_eq!(
            f.fs.rename("a\\f", to, true).unwrap_err().status(),
            NtStatus::OBJECT_NAME_INVALID
        );
    }
    assert_eq!(
        f.fs.rename("..\\outside\\secret", "x", true)
            .unwrap_err()
            .status(),
        NtStatus::OBJECT_NAME_INVALID
    );
    assert!(f.share.join("a").join("f").exists());
    assert_untouched(&f);
}

#[test]
fn symlink_inside_share_is_followed() {
    let f = fixture();
    symlink("a/f", f.share.join("ln")).unwrap();
    symlink("../a", f.share.join("a").join("up")).unwrap();
    let (h, _) = f.fs.open("ln", &opts(Disposition::Open)).unwrap();
    let mut buf = Vec::new();
    assert_eq!(h.read_append(&mut buf, 6, 0).unwrap(), 6);
    assert_eq!(buf, b"inside");
    assert_eq!(f.fs.stat_path("a\\up\\f").unwrap().size, 6);
}

#[test]
fn unlink_and_rename_act_on_the_link_itself() {
    let f = fixture();
    symlink(&f.outside, f.share.join("out")).unwrap();
    symlink(f.outside.join("secret"), f.share.join("sec")).unwrap();
    f.fs.rename("sec", "sec2", false).unwrap();
    assert!(fs::symlink_metadata(f.share.join("sec2"))
        .unwrap()
        .file_type()
        .is_symlink());
    f.fs.unlink("sec2", false).unwrap();
    f.fs.unlink("out", true).unwrap();
    assert!(!f.share.join("out").exists());
    assert_untouched(&f);
}

#[test]
fn device_names_are_ordinary_files_inside() {
    let f = fixture();
    for name in ["CON", "NUL", "PRN", "AUX", "COM1", "LPT1", "nul.txt"] {
        let (h, a) = f.fs.open(name, &rw(Disposition::Create)).unwrap();
        assert_eq!(a, smbq_vfs::CreateAction::Created);
        h.write_at(b"data", 0).unwrap();
        assert_eq!(fs::read(f.share.join(name)).unwrap(), b"data", "{name}");
    }
}

#[test]
fn read_only_share_refuses_changes() {
    let f = fixture();
    let ro = PosixFs::new(&f.share, true, false).unwrap();
    assert!(ro.read_only());
    let wp = NtStatus::ACCESS_DENIED;
    for d in [
        Disposition::Create,
        Disposition::Supersede,
        Disposition::Overwrite,
        Disposition::OverwriteIf,
    ] {
        assert_eq!(open_status(&ro, "a\\f", opts(d)), wp, "{d:?}");
        assert_eq!(open_status(&ro, "new", opts(d)), wp, "{d:?}");
    }
    assert_eq!(open_status(&ro, "a\\f", rw(Disposition::Open)), wp);
    assert_eq!(open_status(&ro, "new", opts(Disposition::OpenIf)), wp);
    let dir = OpenOptions {
        kind: Kind::Directory,
        ..opts(Disposition::OpenIf)
    };
    assert_eq!(open_status(&ro, "newdir", dir), wp);
    assert_eq!(ro.unlink("a\\f", false).unwrap_err().status(), wp);
    assert_eq!(ro.rename("a\\f", "g", true).unwrap_err().status(), wp);

    // Reading works; a handle refuses every change.
    let (h, a) = ro.open("a\\f", &opts(Disposition::OpenIf)).unwrap();
    assert_eq!(a, smbq_vfs::CreateAction::Opened);
    assert_eq!(h.read_append(&mut Vec::new(), 6, 0).unwrap(), 6);
    assert_eq!(h.write_at(b"x", 0).unwrap_err().status(), wp);
    assert_eq!(h.set_len(0).unwrap_err().status(), wp);
    assert_eq!(h.set_allocation(0).unwrap_err().status(), wp);
    assert_eq!(h.set_attributes(0x01).unwrap_err().status(), wp);
    let t = smbq_vfs::SetTimes {
        creation_time: None,
        last_access_time: Some(1),
        last_write_time: None,
    };
    assert_eq!(h.set_times(&t).unwrap_err().status(), wp);
    assert_eq!(fs::read(f.share.join("a").join("f")).unwrap(), b"inside");
    assert!(!f.share.join("new").exists() && !f.share.join("newdir").exists());
}

#[test]
fn root_cannot_be_deleted_or_renamed() {
    let f = fixture();
    assert_eq!(
        f.fs.unlink("", true).unwrap_err().status(),
        NtStatus::ACCESS_DENIED
    );
    assert_eq!(
        f.fs.rename("", "x", false).unwrap_err().status(),
        NtStatus::ACCESS_DENIED
    );
    assert_eq!(
        f.fs.rename("a", "", true).unwrap_err().status(),
        NtStatus::ACCESS_DENIED
    );
    assert!(Path::new(&f.share).is_dir());
}

#[test]
fn read_dir_of_root_never_looks_outside() {
    let f = fixture();
    symlink(&f.outside, f.share.join("out")).unwrap();
    symlink(f.outside.join("secret"), f.share.join("sec")).unwrap();
    let (h, _) = f.fs.open("", &opts(Disposition::Open)).unwrap();
    let list = h.read_dir().unwrap();
    let root = f.fs.stat_path("").unwrap();
    assert_eq!(list[1].name, "..");
    // (Compare ids: listing the directory just updated its atime.)
    assert_eq!(list[1].stat.file_id, root.file_id, "root's .. is the root");
    // The escaping links show as links: not a directory, the link's size.
    let sec = list.iter().find(|e| e.name == "sec").unwrap();
    assert!(!sec.stat.is_dir);
    assert_ne!(sec.stat.size, 10);
    let out = list.iter().find(|e| e.name == "out").unwrap();
    assert!(!out.stat.is_dir);

    // The root reached through a link inside the share: `..` is still the root.
    symlink("..", f.share.join("a").join("top")).unwrap();
    let (h, _) = f.fs.open("a\\top", &opts(Disposition::Open)).unwrap();
    assert!(h.is_dir);
    let list = h.read_dir().unwrap();
    assert_eq!(
        (list[0].stat.file_id, list[1].stat.file_id),
        (root.file_id, root.file_id)
    );
}

#[test]
fn symlink_loops_are_not_found() {
    let f = fixture();
    symlink("loop2", f.share.join("loop1")).unwrap();
    symlink("loop1", f.share.join("loop2")).unwrap();
    assert_refused(&f.fs, "loop1", NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_refused(&f.fs, "loop1\\x", NtStatus::OBJECT_NAME_NOT_FOUND);
}

#[test]
fn magic_links_are_not_followed() {
    // A share that contains /proc magic links (RESOLVE_NO_MAGICLINKS).
    let fs = PosixFs::new(Path::new("/proc/self"), true, false).unwrap();
    for p in ["root\\etc\\passwd", "cwd", "exe", "fd\\0"] {
        let s = open_status(&fs, p, opts(Disposition::Open));
        assert!(
            s == NtStatus::OBJECT_NAME_NOT_FOUND || s == NtStatus::ACCESS_DENIED,
            "{p}: {s:?}"
        );
    }
}

#[test]
fn creating_through_an_inside_symlink_stays_inside() {
    let f = fixture();
    symlink("a", f.share.join("ln")).unwrap();
    let (h, _) = f.fs.open("ln\\new", &rw(Disposition::Create)).unwrap();
    h.write_at(b"n", 0).unwrap();
    assert_eq!(fs::read(f.share.join("a").join("new")).unwrap(), b"n");
    let dir = OpenOptions {
        kind: Kind::Directory,
        ..rw(Disposition::Create)
    };
    f.fs.open("ln\\sub", &dir).unwrap();
    assert!(f.share.join("a").join("sub").is_dir());
}

#[test]
fn shares_and_handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<PosixFs>();
    send_sync::<smbq_vfs::Handle>();
}
