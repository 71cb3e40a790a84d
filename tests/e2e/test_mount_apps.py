"""`smbq mount` as applications use it (issue 36, item 4): fallocate(1)'s
punch hole, zero range and preallocation; `tar -x` keeping every mtime;
`touch -d` on a file that is open; and a name whose file is deleted while
still open made again at once. Each is checked against the same work on a
local directory, against smbq over QUIC and TCP and Samba's smbd over TCP
(test_mount.py's MOUNT_TARGETS and `mounted` fixture).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from test_mount import Mount, mount_share, mounted, run  # noqa: F401 (`mounted` is a fixture)

# More than the mount's attribute TTL (1 s): what is checked through the
# mount then comes from the server, not from what setattr answered.
ATTR_WAIT = 1.5

# (fallocate(1) options, offset, length); the file starts with START bytes.
START = 300_000
FALLOCATE_STEPS = [
    (["--punch-hole"], 4096, 65536),
    (["--punch-hole"], 100_001, 5_003),
    (["--punch-hole"], 290_000, 50_000),  # past the end: the size stays
    (["--zero-range"], 150_000, 30_000),
    (["--zero-range", "--keep-size"], 295_000, 20_000),
    (["--zero-range"], 299_000, 11_000),  # past the end: the file grows
    ([], 0, 100_000),  # inside the file: nothing changes
    ([], 320_000, 64 << 10),  # preallocation past the end: the file grows
    (["--keep-size"], 500_000, 100_000),
]


def _fallocate(opts: list[str], offset: int, length: int, path: Path) -> None:
    run(["fallocate", *opts, "-o", str(offset), "-l", str(length), str(path)])


LIBC = ctypes.CDLL(None, use_errno=True)
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 0x01, 0x02


def _punch_after_write(path: Path) -> None:
    """Write through a descriptor (the mount buffers it) and punch a hole
    in what was just written through the same one."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, b"w" * 70_000, 20_000)
        if LIBC.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, ctypes.c_long(30_000), ctypes.c_long(10_000)) != 0:
            raise OSError(ctypes.get_errno(), "fallocate")
    finally:
        os.close(fd)


def test_fallocate_as_on_a_local_file(mounted, tmp_path):
    m, server = mounted
    data = os.urandom(START)
    local, remote = tmp_path / "local.bin", m.dir / "f.bin"
    local.write_bytes(data)
    remote.write_bytes(data)
    for opts, offset, length in FALLOCATE_STEPS:
        _fallocate(opts, offset, length, local)
        _fallocate(opts, offset, length, remote)
        what = f"fallocate {' '.join(opts)} -o {offset} -l {length}"
        assert remote.stat().st_size == local.stat().st_size, what
        assert remote.read_bytes() == local.read_bytes(), what
    # Written over and read again after a hole: still the same.
    for p in (local, remote):
        with open(p, "r+b") as f:
            f.seek(10_000)
            f.write(b"after the hole")
    assert remote.read_bytes() == local.read_bytes()
    _punch_after_write(local)
    _punch_after_write(remote)
    assert remote.read_bytes() == local.read_bytes()
    time.sleep(ATTR_WAIT)
    assert remote.stat().st_size == local.stat().st_size
    assert (server.share_dir / "f.bin").read_bytes() == local.read_bytes()
    r = subprocess.run(["fallocate", "--collapse-range", "-o", "0", "-l", "4096", str(remote)], capture_output=True, text=True)
    assert r.returncode != 0 and "not supported" in r.stderr.lower(), r.stderr
    m.unmount()


def _make_tree(root: Path, count: int) -> dict[str, int]:
    """`count` files in a few directories, each with its own old mtime; name -> mtime."""
    times = {}
    for i in range(count):
        rel = f"d{i % 7}/s{i % 3}/f{i:04}.txt"
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(i * 97 % 20_000))
        t = 1_000_000_000 + i * 86_407
        os.utime(p, (t, t))
        times[rel] = t
    return times


def _wrong_mtimes(root: Path, times: dict[str, int]) -> list[str]:
    return [f"{rel}: {root.joinpath(rel).stat().st_mtime_ns // 10**9} != {t}" for rel, t in times.items() if root.joinpath(rel).stat().st_mtime_ns // 10**9 != t]


def test_tar_keeps_mtimes(mounted, tmp_path):
    """tar sets each time through the file it has open (futimens) and
    then closes it; smbd stamps the write time at that close unless the
    time was set through that very handle (issue 36: 9,813 of 10,404
    files lost theirs). SMBQ_TAR_FILES sets how many files (200)."""
    m, server = mounted
    src = tmp_path / "src"
    times = _make_tree(src, int(os.environ.get("SMBQ_TAR_FILES", "200")))
    archive = tmp_path / "tree.tar"
    run(["tar", "-cf", str(archive), "-C", str(src), "."])
    with tarfile.open(archive) as t:
        assert {i.name.removeprefix("./"): int(i.mtime) for i in t if i.isfile()} == times
    local, dest = tmp_path / "local", m.dir / "x"
    for d in (local, dest):
        d.mkdir()
        run(["tar", "-xf", str(archive), "-C", str(d)])
    assert _wrong_mtimes(local, times) == []
    time.sleep(ATTR_WAIT)
    for where in (dest, server.share_dir / "x"):
        wrong = _wrong_mtimes(where, times)
        assert wrong == [], f"{where}: {len(wrong)} of {len(times)} mtimes lost: {wrong[:5]}"
    run(["diff", "-r", str(local), str(dest)])
    m.unmount()


TOUCHED = "2001-02-03 04:05:06 UTC"
TOUCHED_S = 981_173_106
FUTIMENS_S = 1_234_567_890


def _set_times_on_open_files(d: Path) -> None:
    # A write after touch(1) moves the time on, as it should.
    p = d / "moved.txt"
    with open(p, "wb") as f:
        f.write(b"x" * 100_000)
        f.flush()
        run(["touch", "-d", TOUCHED, str(p)])
        f.write(b"y")
    # touch(1) by name while another process has the file open, written.
    p = d / "touched.txt"
    with open(p, "wb") as f:
        f.write(b"z" * 100_000)
        f.flush()
        run(["touch", "-d", TOUCHED, str(p)])
    # futimens(2) on the handle that wrote.
    with open(d / "futimens.txt", "wb") as f:
        f.write(b"q" * 50_000)
        f.flush()
        os.utime(f.fileno(), (FUTIMENS_S, FUTIMENS_S))


def _times(d: Path) -> list[bool | int]:
    return [int((d / "moved.txt").stat().st_mtime) != TOUCHED_S, int((d / "touched.txt").stat().st_mtime), int((d / "futimens.txt").stat().st_mtime)]


def test_times_set_on_an_open_file_survive_its_close(mounted, tmp_path):
    m, server = mounted
    _set_times_on_open_files(tmp_path)
    _set_times_on_open_files(m.dir)
    assert _times(tmp_path) == [True, TOUCHED_S, FUTIMENS_S]
    time.sleep(ATTR_WAIT)
    assert _times(m.dir) == _times(tmp_path)
    assert _times(server.share_dir) == _times(tmp_path)
    m.unmount()


def _transport(m: Mount) -> str:
    argv = list(m.proc.args)
    return argv[argv.index("--transport") + 1]


def _delete_while_open(where: Path, other: Path) -> list[str]:
    """Open where/j, remove it through `other` (the same directory, maybe
    through another mount) from another process, make j again there and
    through `where`: what each step gave."""
    seen = []
    j = where / "j"
    j.write_bytes(b"old")
    with open(j, "r+b") as held:
        r = subprocess.run(["rm", str(other / "j")], capture_output=True, text=True)
        seen.append(f"rm: {r.returncode} {r.stderr.strip()}")
        seen.append(f"exists after rm: {(other / 'j').exists()}")
        r = subprocess.run(["sh", "-c", 'echo new > "$1"', "sh", str(other / "j")], capture_output=True, text=True)
        seen.append(f"create again: {r.returncode} {r.stderr.strip()}")
        seen.append(f"reads: {(other / 'j').read_bytes()!r}")
        # The file still open is the old one, still readable and writable.
        held.seek(0)
        seen.append(f"held: {held.read()!r}")
        held.write(b"+more")
        held.flush()
        # O_EXCL of the name, once it is made again and removed again.
        os.unlink(where / "j")
        fd = os.open(where / "j", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        os.close(fd)
        seen.append(f"O_EXCL: {(other / 'j').exists()}")
    return seen


def _names(d: Path, settle: float = 5.0) -> list[str]:
    """The names in d, once no hidden name of a deleted file is left
    (FUSE's RELEASE comes after close(2) returns)."""
    deadline = time.monotonic() + settle
    while True:
        names = sorted(os.listdir(d))
        if not any(n.startswith(".smbq-deleted-") for n in names) or time.monotonic() > deadline:
            return names
        time.sleep(0.1)


def test_delete_while_open_then_create_again(mounted, start_server, tmp_path):
    """A file unlinked while open frees its name at once, as on a local
    file system: through the same mount, and through a second mount of the
    share (SQLite's journal: issue 36, STATUS_DELETE_PENDING became ENOENT)."""
    m, server = mounted
    local = tmp_path / "local"
    local.mkdir()
    expected = _delete_while_open(local, local)
    assert expected[0].startswith("rm: 0") and expected[2].startswith("create again: 0"), expected
    assert _delete_while_open(m.dir, m.dir) == expected
    assert _names(m.dir) == ["j"]
    os.unlink(m.dir / "j")

    with mount_share(server, _transport(m), tmp_path, "2") as m2:
        assert _delete_while_open(m.dir, m2.dir) == expected
        assert _names(m.dir) == ["j"] and _names(m2.dir) == ["j"]
        m2.unmount()
    m.unmount()


def test_create_waits_for_a_delete_pending_name(mounted):
    """Another client deletes a file that it still holds open, so its name
    is delete-pending on the server (MS-FSA 2.1.5.4): a create of that
    name through the mount waits (about a second) for the holder to close
    instead of failing at once, and if the holder does not close, fails
    with EBUSY rather than ENOENT."""
    import errno
    import threading
    import uuid

    from smbprotocol.connection import Connection
    from smbprotocol.file_info import FileDispositionInformation, FileInformationClass
    from smbprotocol.open import CreateDisposition, CreateOptions, FileAttributes, ImpersonationLevel, Open, ShareAccess, SMB2SetInfoRequest
    from smbprotocol.session import Session
    from smbprotocol.tree import TreeConnect

    m, server = mounted
    conn = Connection(uuid.uuid4(), server.host, server.port)
    conn.connect(timeout=30)
    try:
        session = Session(conn, server.user, server.password, require_encryption=True)
        session.connect()
        tree = TreeConnect(session, rf"\\{server.host}\{server.share}")
        tree.connect()
        share_all = ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE | ShareAccess.FILE_SHARE_DELETE

        def delete_pending(name: str) -> Open:
            """Open `name` and mark it deleted through that open: its name stays until it closes."""
            fh = Open(tree, name)
            fh.create(ImpersonationLevel.Impersonation, 0x00010081, FileAttributes.FILE_ATTRIBUTE_NORMAL, share_all, CreateDisposition.FILE_OPEN, CreateOptions.FILE_NON_DIRECTORY_FILE)
            req = SMB2SetInfoRequest()
            req["info_type"] = 1
            req["file_info_class"] = FileInformationClass.FILE_DISPOSITION_INFORMATION
            req["file_id"] = fh.file_id
            info = FileDispositionInformation()
            info["delete_pending"] = True
            req["buffer"] = info
            conn.receive(conn.send(req, sid=session.session_id, tid=tree.tree_connect_id))
            return fh

        for name in ("held", "closed-soon"):
            (m.dir / name).write_bytes(b"old")
        held, closed_soon = delete_pending("held"), delete_pending("closed-soon")
        # The kernel's entries for the old files expire first.
        time.sleep(ATTR_WAIT)

        start = time.monotonic()
        with pytest.raises(OSError) as e:
            (m.dir / "held").write_bytes(b"new")
        assert e.value.errno == errno.EBUSY and time.monotonic() - start >= 0.9

        threading.Timer(0.3, closed_soon.close).start()
        start = time.monotonic()
        (m.dir / "closed-soon").write_bytes(b"new")
        assert time.monotonic() - start < 1.5
        assert (m.dir / "closed-soon").read_bytes() == b"new"
        held.close()
    finally:
        conn.disconnect(True)
    m.unmount()
