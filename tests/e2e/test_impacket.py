"""impacket's SMBConnection against the server (signing; impacket cannot do
SMB 3.1.1 encryption)."""

from __future__ import annotations

import io
import os

import pytest

smbconnection = pytest.importorskip("impacket.smbconnection")


@pytest.fixture
def mode() -> str:
    return "sign"


def test_shares_and_files(server):
    conn = smbconnection.SMBConnection(server.host, server.host, sess_port=server.port, timeout=30)
    try:
        conn.login(server.user, server.password, server.domain)
        names = [s["shi1_netname"][:-1] for s in conn.listShares()]
        assert server.share in names, names

        data = os.urandom(3 * 1024 * 1024 + 17)
        conn.putFile(server.share, "impacket.bin", io.BytesIO(data).read)
        assert (server.share_dir / "impacket.bin").read_bytes() == data
        got = io.BytesIO()
        conn.getFile(server.share, "impacket.bin", got.write)
        assert got.getvalue() == data
        listed = [f.get_longname() for f in conn.listPath(server.share, "*")]
        assert "impacket.bin" in listed
        conn.deleteFile(server.share, "impacket.bin")
        assert not (server.share_dir / "impacket.bin").exists()
    finally:
        conn.close()
