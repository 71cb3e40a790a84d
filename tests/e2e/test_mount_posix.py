"""`smbq mount --posix` against smbq's `posix` share (issue 36 item 3):
modes, owners and groups, symlinks and FIFOs show through the mount as
they are on disk, and chmod, chown, `ln -s`, mkdir and create with a mode
change the files on disk (a symlink made through the mount is kept as the
server keeps it, a reparse point, and reads back as a symlink). Over TCP
and QUIC."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from test_mount import _fuse_missing, mount_share


@pytest.fixture(params=["tcp", "quic"])
def posix_mount(request, start_server, tmp_path):
    if reason := _fuse_missing():
        pytest.skip(reason)
    server = start_server("smbq", "enc", share_opts=",posix")
    with mount_share(server, request.param, tmp_path, extra=("--posix",)) as m:
        yield m, server.share_dir


def test_modes_owners_and_types_show_as_on_disk(posix_mount):
    m, share = posix_mount
    (share / "f").write_text("x")
    os.chmod(share / "f", 0o751)
    os.chown(share / "f", 1234, 2345)
    (share / "d").mkdir(mode=0o700)
    os.chmod(share / "d", 0o700)
    os.symlink("f", share / "ln")
    os.mkfifo(share / "fifo", 0o620)
    for name in ("f", "d", "ln", "fifo"):
        disk, mounted = os.lstat(share / name), os.lstat(m.dir / name)
        assert stat.filemode(mounted.st_mode) == stat.filemode(disk.st_mode), name
        assert (mounted.st_uid, mounted.st_gid) == (disk.st_uid, disk.st_gid), name
    assert os.readlink(m.dir / "ln") == "f"
    assert (m.dir / "ln").read_text() == "x"
    m.unmount()


def test_chmod_chown_symlink_mkdir_and_create_change_the_disk(posix_mount):
    m, share = posix_mount
    fd = os.open(m.dir / "new", os.O_CREAT | os.O_WRONLY, 0o640)
    os.close(fd)
    assert stat.S_IMODE(os.lstat(share / "new").st_mode) == 0o640 & ~current_umask()
    os.chmod(m.dir / "new", 0o604)
    assert stat.S_IMODE(os.lstat(share / "new").st_mode) == 0o604
    assert stat.S_IMODE(os.lstat(m.dir / "new").st_mode) == 0o604
    os.chown(m.dir / "new", 4321, 5432)
    assert (os.lstat(share / "new").st_uid, os.lstat(share / "new").st_gid) == (4321, 5432)
    os.mkdir(m.dir / "sub", 0o750)
    assert stat.S_IMODE(os.lstat(share / "sub").st_mode) == 0o750 & ~current_umask()
    # The server keeps a client's symlink as Samba does, a reparse point
    # (smbq_vfs::Handle::set_reparse_point), which it lists as a symlink.
    subprocess.run(["ln", "-s", "new", str(m.dir / "link")], check=True, timeout=30)
    assert os.readlink(m.dir / "link") == "new"
    assert stat.S_ISLNK(os.lstat(m.dir / "link").st_mode)
    assert "link -> new" in subprocess.run(["ls", "-l", str(m.dir)], capture_output=True, text=True, check=True).stdout
    m.unmount()


def current_umask() -> int:
    u = os.umask(0)
    os.umask(u)
    return u
