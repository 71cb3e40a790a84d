"""Python smbprotocol (high-level smbclient API) against the server, encrypted."""

from __future__ import annotations

import errno
import hashlib
import os

import pytest

smbclient = pytest.importorskip("smbclient")

SIZE = 64 * 1024 * 1024


@pytest.fixture
def session(server):
    smbclient.register_session(server.host, username=server.user, password=server.password,
                               port=server.port, encrypt=True, connection_timeout=30)
    yield rf"\\{server.host}\{server.share}"
    smbclient.reset_connection_cache()


def test_roundtrip(server, session):
    root = session
    data = os.urandom(SIZE)
    path = rf"{root}\big.bin"
    with smbclient.open_file(path, mode="wb", port=server.port) as f:
        for off in range(0, SIZE, 4 << 20):
            f.write(data[off:off + (4 << 20)])
    assert (server.share_dir / "big.bin").read_bytes() == data
    with smbclient.open_file(path, mode="rb", port=server.port) as f:
        back = f.read()
    assert hashlib.sha256(back).digest() == hashlib.sha256(data).digest()

    smbclient.mkdir(rf"{root}\dir", port=server.port)
    assert sorted(smbclient.listdir(root, port=server.port)) == ["big.bin", "dir"]
    st = smbclient.stat(path, port=server.port)
    assert st.st_size == SIZE
    assert abs(st.st_mtime - (server.share_dir / "big.bin").stat().st_mtime) < 2

    smbclient.rename(path, rf"{root}\dir\moved.bin", port=server.port)
    assert smbclient.listdir(rf"{root}\dir", port=server.port) == ["moved.bin"]
    assert (server.share_dir / "dir" / "moved.bin").stat().st_size == SIZE
    smbclient.remove(rf"{root}\dir\moved.bin", port=server.port)
    smbclient.rmdir(rf"{root}\dir", port=server.port)
    assert smbclient.listdir(root, port=server.port) == []
    assert os.listdir(server.share_dir) == []

    with pytest.raises(OSError) as err:
        smbclient.stat(rf"{root}\missing.txt", port=server.port)
    assert err.value.errno == errno.ENOENT
