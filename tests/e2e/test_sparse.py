"""Sparse files and block cloning through smbprotocol's IOCTL requests (a
client we did not write): FSCTL_SET_SPARSE, FSCTL_SET_ZERO_DATA,
FSCTL_QUERY_ALLOCATED_RANGES and FSCTL_DUPLICATE_EXTENTS_TO_FILE (MS-FSCC
2.3), on smbq and on Samba's smbd with the same assertions.

Cloning needs a file system that shares blocks: the share of
``test_duplicate_extents_on_btrfs`` lives on a small btrfs image in a loop
device (root, mkfs.btrfs from btrfs-progs); the test is skipped, saying why,
where that cannot be made.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

smbclient = pytest.importorskip("smbclient")

import servers  # noqa: E402
import torture  # noqa: E402
from smbclient._io import SMBFileTransaction  # noqa: E402
from smbprotocol.exceptions import SMBOSError  # noqa: E402
from smbprotocol.ioctl import CtlCode, IOCTLFlags, SMB2IOCTLRequest, SMB2IOCTLResponse  # noqa: E402

K64 = 64 * 1024
FILE_ATTRIBUTE_SPARSE_FILE = 0x200
FSCTL_DUPLICATE_EXTENTS_TO_FILE = 0x00098344
STATUS_INVALID_DEVICE_REQUEST = 0xC0000010
STATUS_INVALID_PARAMETER = 0xC000000D
STATUS_NOT_SUPPORTED = 0xC00000BB


@pytest.fixture
def mode() -> str:
    return "sign"


@pytest.fixture
def session(server):
    smbclient.register_session(server.host, username=server.user, password=server.password,
                               port=server.port, connection_timeout=30)
    yield rf"\\{server.host}\{server.share}"
    smbclient.reset_connection_cache()


def fsctl(fd, code: int, data: bytes = b"", out: int = 0) -> bytes:
    """One FSCTL on the open `fd` (smbclient's ioctl_request, taking codes
    smbprotocol's CtlCode does not list); an error status raises SMBOSError."""
    req = SMB2IOCTLRequest()
    req["ctl_code"].enum_strict = False
    req["ctl_code"] = code
    req["file_id"] = fd.fd.file_id
    req["max_output_response"] = out
    req["flags"] = IOCTLFlags.SMB2_0_IOCTL_IS_FSCTL
    req["buffer"] = data

    def receive(request):
        resp = SMB2IOCTLResponse()
        resp["ctl_code"].enum_strict = False
        resp.unpack(fd.fd.connection.receive(request)["data"].get_value())
        return resp["buffer"].get_value()

    with SMBFileTransaction(fd) as t:
        t += (req, receive)
    return t.results[0]


def ranges(fd, offset: int, length: int) -> list[tuple[int, int]]:
    """FSCTL_QUERY_ALLOCATED_RANGES: (offset, length) pairs."""
    out = fsctl(fd, CtlCode.FSCTL_QUERY_ALLOCATED_RANGES, struct.pack("<qq", offset, length), 1024)
    return [struct.unpack_from("<qq", out, i) for i in range(0, len(out), 16)]


def attributes(path: str, port: int) -> int:
    return smbclient.stat(path, port=port).st_file_attributes


def test_sparse_punch_hole(server, session):
    port = server.port
    path = rf"{session}\sparse.bin"
    data = bytes(range(256)) * (4 * K64 // 256)
    with smbclient.open_file(path, mode="wb", port=port) as f:
        f.write(data)
    assert not attributes(path, port) & FILE_ATTRIBUTE_SPARSE_FILE

    with smbclient.open_file(path, mode="r+b", buffering=0, port=port) as fd:
        # Not sparse: allocated everywhere below the end of file.
        assert ranges(fd, 0, 1 << 30) == [(0, 4 * K64)]
        fsctl(fd, CtlCode.FSCTL_SET_SPARSE, b"\x01")
        assert attributes(path, port) & FILE_ATTRIBUTE_SPARSE_FILE
        # The second and third 64 KiB become a hole.
        fsctl(fd, CtlCode.FSCTL_SET_ZERO_DATA, struct.pack("<qq", K64, 3 * K64))
        assert ranges(fd, 0, 1 << 30) == [(0, K64), (3 * K64, K64)]
        assert ranges(fd, K64, 2 * K64) == []
        assert ranges(fd, K64 + 1, 2 * K64) == [(3 * K64, 1)]

    want = data[:K64] + bytes(2 * K64) + data[3 * K64:]
    with smbclient.open_file(path, mode="rb", port=port) as f:
        assert f.read() == want
    on_disk = server.share_dir / "sparse.bin"
    assert on_disk.read_bytes() == want
    # The hole is one on disk: fewer blocks than the data needs.
    assert on_disk.stat().st_blocks * 512 < 4 * K64

    # The attribute shows in a directory listing too.
    entry = next(e for e in smbclient.scandir(session, port=port) if e.name == "sparse.bin")
    assert entry.smb_info.file_attributes & FILE_ATTRIBUTE_SPARSE_FILE

    with smbclient.open_file(path, mode="r+b", buffering=0, port=port) as fd:
        # Cleared: allocated everywhere again (as Windows and smbd answer),
        # and the zeros stay.
        fsctl(fd, CtlCode.FSCTL_SET_SPARSE, b"\x00")
        assert ranges(fd, 0, 1 << 30) == [(0, 4 * K64)]
    assert not attributes(path, port) & FILE_ATTRIBUTE_SPARSE_FILE
    assert on_disk.read_bytes() == want


def test_zero_data_not_sparse(server, session):
    """A file that is not sparse is zeroed in place; the size never changes."""
    port = server.port
    path = rf"{session}\dense.bin"
    with smbclient.open_file(path, mode="wb", port=port) as f:
        f.write(b"\x55" * (2 * K64))
    with smbclient.open_file(path, mode="r+b", buffering=0, port=port) as fd:
        fsctl(fd, CtlCode.FSCTL_SET_ZERO_DATA, struct.pack("<qq", 100, K64 + 100))
        # Past the end of file: nothing happens.
        fsctl(fd, CtlCode.FSCTL_SET_ZERO_DATA, struct.pack("<qq", 4 * K64, 5 * K64))
        with pytest.raises(SMBOSError) as e:
            fsctl(fd, CtlCode.FSCTL_SET_ZERO_DATA, struct.pack("<qq", 10, 9))
        assert e.value.ntstatus == STATUS_INVALID_PARAMETER
    on_disk = (server.share_dir / "dense.bin").read_bytes()
    assert on_disk == b"\x55" * 100 + bytes(K64) + b"\x55" * (K64 - 100)


def test_duplicate_extents_unsupported(server, session):
    """ext4 and tmpfs do not clone: INVALID_DEVICE_REQUEST, and the share
    does not claim block refcounting."""
    port = server.port
    with smbclient.open_file(rf"{session}\src.bin", mode="wb", port=port) as f:
        f.write(b"\x01" * K64)
    with smbclient.open_file(rf"{session}\dst.bin", mode="wb", port=port) as f:
        f.write(b"\x02" * K64)
    with smbclient.open_file(rf"{session}\src.bin", mode="rb", buffering=0, port=port) as src, \
            smbclient.open_file(rf"{session}\dst.bin", mode="r+b", buffering=0, port=port) as dst:
        if _clones(server.share_dir):
            pytest.skip(f"{server.share_dir} is on a file system that clones blocks")
        with pytest.raises(SMBOSError) as e:
            fsctl(dst, FSCTL_DUPLICATE_EXTENTS_TO_FILE, bytes(src.fd.file_id) + struct.pack("<qqq", 0, 0, 4096))
        assert e.value.ntstatus == STATUS_INVALID_DEVICE_REQUEST


def _clones(path: Path) -> bool:
    r = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True)
    return r.stdout.strip() in ("btrfs", "xfs")


@pytest.fixture
def btrfs_dir():
    """A directory on a fresh 256 MiB btrfs in a loop device, or a skip."""
    if os.geteuid() != 0:
        pytest.skip("mounting a btrfs image needs root")
    mkfs = shutil.which("mkfs.btrfs") or ("/usr/sbin/mkfs.btrfs" if os.path.exists("/usr/sbin/mkfs.btrfs") else None)
    if mkfs is None:
        pytest.skip("mkfs.btrfs not installed (btrfs-progs)")
    top = Path(tempfile.mkdtemp(prefix="smbq-btrfs-"))
    image, mnt = top / "fs.img", top / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(256 << 20)
    mounted = False
    try:
        r = subprocess.run([mkfs, "-q", str(image)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"mkfs.btrfs failed: {r.stderr.strip()}")
        r = subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a btrfs loop image here: {r.stderr.strip()}")
        mounted = True
        yield mnt
    finally:
        if mounted:
            subprocess.run(["umount", str(mnt)], check=False)
        shutil.rmtree(top, ignore_errors=True)


def test_duplicate_extents_on_btrfs(btrfs_dir):
    """smbq on btrfs: the share reports FILE_SUPPORTS_BLOCK_REFCOUNTING and
    FSCTL_DUPLICATE_EXTENTS_TO_FILE clones (the blocks are shared: the
    file system's used space does not grow by the copy)."""
    workdir = btrfs_dir / "smbq"
    workdir.mkdir()
    srv = servers.start_smbq(workdir, "sign")
    try:
        session = rf"\\{srv.host}\{srv.share}"
        smbclient.register_session(srv.host, username=srv.user, password=srv.password, port=srv.port,
                                   connection_timeout=30)
        size = 8 << 20
        data = os.urandom(size)
        with smbclient.open_file(rf"{session}\src.bin", mode="wb", port=srv.port) as f:
            f.write(data)
        with smbclient.open_file(rf"{session}\dst.bin", mode="wb", port=srv.port) as f:
            f.truncate(size)
        os.sync()
        used = _used(btrfs_dir)
        with smbclient.open_file(rf"{session}\src.bin", mode="rb", buffering=0, port=srv.port) as src, \
                smbclient.open_file(rf"{session}\dst.bin", mode="r+b", buffering=0, port=srv.port) as dst:
            file_id = bytes(src.fd.file_id)
            fsctl(dst, FSCTL_DUPLICATE_EXTENTS_TO_FILE, file_id + struct.pack("<qqq", 0, 0, size))
            # Overlapping ranges of one file are refused (MS-FSCC 2.3.8).
            with pytest.raises(SMBOSError) as e:
                fsctl(dst, FSCTL_DUPLICATE_EXTENTS_TO_FILE, bytes(dst.fd.file_id) + struct.pack("<qqq", 0, K64, 2 * K64))
            assert e.value.ntstatus == STATUS_NOT_SUPPORTED
        assert (srv.share_dir / "dst.bin").read_bytes() == data
        os.sync()
        assert _used(btrfs_dir) - used < size // 2, "the clone shares the source's blocks"
    finally:
        smbclient.reset_connection_cache()
        problems = srv.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    assert not problems, srv.failure_text(problems)


def test_smbtorture_dup_extents_on_btrfs(btrfs_dir):
    """smbtorture's block-refcounting subtests of smb2.ioctl, which skip on
    ext4, against smbq with its share on btrfs: all pass but the two that
    need compression (skipped, as smbq has none)."""
    if shutil.which("smbtorture") is None:
        pytest.skip("smbtorture not installed (samba-testsuite)")
    workdir = btrfs_dir / "smbq"
    workdir.mkdir()
    srv = servers.start_smbq(workdir, "desired")
    try:
        r = torture.run_suite(srv, "smb2.ioctl")
    finally:
        problems = srv.stop()
    assert not problems, srv.failure_text(problems)
    dup = {t.name.rsplit(".", 1)[1]: t.outcome for t in r.subtests if ".dup_extents_" in t.name}
    compressed = {"dup_extents_compressed_src", "dup_extents_compressed_dest"}
    assert len(dup) == 14, dup
    assert {n: o for n, o in dup.items() if n not in compressed and o != "success"} == {}
    assert {dup[n] for n in compressed} == {"skip"}


def _used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize
