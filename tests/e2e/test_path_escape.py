"""Path escapes through a real client (impacket, which sends names exactly as
given): nothing outside the share may be read, written, listed or created.

Each test plants a secret file and a canary directory beside the share (not
inside it) and asserts that the attempt fails or stays inside the share, and
that the outside is unchanged afterwards.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

smbconnection = pytest.importorskip("impacket.smbconnection")
from impacket.smb3structs import FILE_READ_DATA, FILE_WRITE_DATA, FILE_OPEN, FILE_CREATE, FILE_OVERWRITE_IF  # noqa: E402

SECRET = b"outside-the-share-secret\n"


@pytest.fixture
def mode() -> str:
    return "sign"


@pytest.fixture
def env(server):
    outside = server.workdir / "outside"
    outside.mkdir(exist_ok=True)
    os.chmod(server.workdir, 0o755)
    os.chmod(outside, 0o777)
    (outside / "secret.txt").write_bytes(SECRET)
    os.chmod(outside / "secret.txt", 0o666)
    conn = smbconnection.SMBConnection(server.host, server.host, sess_port=server.port, timeout=30)
    conn.login(server.user, server.password, server.domain)
    tid = conn.connectTree(server.share)
    before = snapshot(outside)
    yield conn, tid, server.share_dir, outside
    conn.close()
    assert snapshot(outside) == before, "something outside the share changed"
    assert Path("/etc/passwd").exists()


def snapshot(d: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def read_via(conn, tid, name: str) -> bytes | None:
    """The bytes read through `name`, or None if the server refused."""
    try:
        fid = conn.openFile(tid, name, desiredAccess=FILE_READ_DATA, creationDisposition=FILE_OPEN)
    except smbconnection.SessionError:
        return None
    try:
        return conn.readFile(tid, fid, 0, 4096)
    except smbconnection.SessionError:
        return None
    finally:
        conn.closeFile(tid, fid)


def create_via(conn, tid, name: str) -> bool:
    try:
        fid = conn.createFile(tid, name, desiredAccess=FILE_READ_DATA | FILE_WRITE_DATA,
                              creationDisposition=FILE_OVERWRITE_IF)
    except smbconnection.SessionError:
        return False
    try:
        conn.writeFile(tid, fid, b"written", 0)
    except smbconnection.SessionError:
        pass
    conn.closeFile(tid, fid)
    return True


def assert_no_leak(data: bytes | None):
    assert data is None or (SECRET not in data and b"root:" not in data), data


@pytest.mark.parametrize("name", [
    "..\\outside\\secret.txt",
    "..\\..\\..\\..\\..\\..\\etc\\passwd",
    "a\\..\\..\\outside\\secret.txt",
    "..",
])
def test_dotdot(env, name):
    conn, tid, share, outside = env
    assert_no_leak(read_via(conn, tid, name))
    assert not create_via(conn, tid, name.replace("secret.txt", "new.txt").replace("passwd", "new"))


@pytest.mark.parametrize("name", ["\\etc\\passwd", "/etc/passwd", "C:\\etc\\passwd", "\\\\localhost\\c$\\etc\\passwd"])
def test_absolute_paths(env, name):
    conn, tid, share, outside = env
    assert_no_leak(read_via(conn, tid, name))


@pytest.mark.parametrize("name", ["\\\\?\\C:\\etc\\passwd", "\\??\\C:\\etc\\passwd", "\\\\?\\UNC\\localhost\\etc\\passwd"])
def test_win32_prefixes(env, name):
    conn, tid, share, outside = env
    assert_no_leak(read_via(conn, tid, name))
    assert not create_via(conn, tid, name + "x")


def test_symlink_to_root(env):
    conn, tid, share, outside = env
    os.symlink("/", share / "rootlink")
    assert_no_leak(read_via(conn, tid, "rootlink\\etc\\passwd"))
    with pytest.raises(smbconnection.SessionError):
        conn.listPath("share", "rootlink\\etc\\*")
    assert not create_via(conn, tid, "rootlink\\tmp\\smbq-escape")
    assert not Path("/tmp/smbq-escape").exists()


@pytest.mark.parametrize("link", ["abs", "rel"])
def test_symlink_to_outside_file(env, link):
    conn, tid, share, outside = env
    dest = str(outside / "secret.txt") if link == "abs" else "../outside/secret.txt"
    os.symlink(dest, share / "secretlink")
    assert_no_leak(read_via(conn, tid, "secretlink"))
    create_via(conn, tid, "secretlink")  # may succeed only by replacing the link inside the share
    assert (outside / "secret.txt").read_bytes() == SECRET


def test_symlink_to_outside_dir(env):
    conn, tid, share, outside = env
    os.symlink(str(outside), share / "dirlink")
    assert_no_leak(read_via(conn, tid, "dirlink\\secret.txt"))
    assert not create_via(conn, tid, "dirlink\\planted.txt")
    assert not (outside / "planted.txt").exists()


@pytest.mark.parametrize("dest", ["..\\outside\\moved.txt", "\\..\\outside\\moved.txt", "..\\moved.txt"])
def test_rename_outside(env, dest):
    conn, tid, share, outside = env
    (share / "victim.txt").write_bytes(b"inside")
    with pytest.raises(smbconnection.SessionError):
        conn.rename("share", "victim.txt", dest)
    assert (share / "victim.txt").read_bytes() == b"inside"
    assert not (outside / "moved.txt").exists()
    assert not (share.parent / "moved.txt").exists()


def test_rename_through_symlinked_dir(env):
    conn, tid, share, outside = env
    (share / "victim.txt").write_bytes(b"inside")
    os.symlink(str(outside), share / "dirlink")
    with pytest.raises(smbconnection.SessionError):
        conn.rename("share", "victim.txt", "dirlink\\moved.txt")
    assert not (outside / "moved.txt").exists()


@pytest.mark.parametrize("name", ["file.txt:evil", "file.txt:evil:$DATA", "dir:x\\y"])
def test_stream_names(env, name):
    conn, tid, share, outside = env
    (share / "file.txt").write_bytes(b"plain")
    create_via(conn, tid, name)
    # Whatever the server answered, no stream or oddly named file appeared on disk outside the share,
    # and the base file's data is untouched (a stream lives in an extended attribute of the file).
    assert (share / "file.txt").read_bytes() in (b"plain", b"written")
    assert not any(":" in p.name for p in outside.iterdir())


@pytest.mark.parametrize("name", ["CON", "NUL", "aux.txt", "COM1", "LPT1.txt"])
def test_device_names_stay_inside(env, name):
    conn, tid, share, outside = env
    if create_via(conn, tid, name):
        # On Linux these are ordinary names: the file must be inside the share.
        assert (share / name).is_file()
        assert (share / name).read_bytes() == b"written"
