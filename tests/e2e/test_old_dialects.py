"""Clients held to SMB 2.0.2 or SMB 2.1 (issue 34): impacket and smbprotocol,
each told to offer one dialect, list a directory and move a 3 MiB file both
ways, byte for byte.

SMB 2.0.2 has no multi-credit requests: its client sends CreditCharge 0 and
sizes its READs, WRITEs and QUERY_DIRECTORY buffers by the MaxReadSize,
MaxWriteSize and MaxTransactSize it was told, so the server must tell it
64 KiB (MS-SMB2 3.2.4.1.5, 3.3.5.4), as Samba does. A 2.1 client is told
SMB2_GLOBAL_CAP_LARGE_MTU and charges a credit per 64 KiB (3.3.5.2.5).
impacket reaches 2.0.2 two ways: an SMB2 NEGOTIATE naming 0x0202, and an
SMB1 NEGOTIATE naming "SMB 2.002" alone, as it begins over port 139 (and
Windows Vista always), answered by MS-SMB2 3.3.5.3.2.

No encryption: neither dialect has it (mode ``sign``).
"""

from __future__ import annotations

import io
import os
import uuid

import pytest

smbconnection = pytest.importorskip("impacket.smbconnection")
smbclient = pytest.importorskip("smbclient")
from impacket.smb3structs import SMB2_DIALECT_002, SMB2_DIALECT_21  # noqa: E402
from smbprotocol.connection import Capabilities, Connection, Dialects  # noqa: E402

SIZE = 3 * 1024 * 1024 + 17  # not a multiple of 64 KiB
NAMES = ["a.txt", "b.bin", "sub"]
# impacket's SMB1 NEGOTIATE over port 139: SMB 2.002 and no "SMB 2.???".
SMB1_ONLY_202 = "\x02NT LM 0.12\x00\x02SMB 2.002\x00"


@pytest.fixture
def mode() -> str:
    return "sign"


def _fill_dir(server) -> None:
    """A directory with two files and a subdirectory to list (made here,
    so only readable by smbd's unprivileged user: files go to the root)."""
    d = server.share_dir / "dir"
    d.mkdir()
    (d / "a.txt").write_bytes(b"a")
    (d / "b.bin").write_bytes(os.urandom(100))
    (d / "sub").mkdir()


@pytest.mark.parametrize("hello", ["2.0.2", "2.0.2-by-smb1", "2.1"])
def test_impacket(server, hello):
    _fill_dir(server)
    if hello == "2.0.2-by-smb1":
        conn = smbconnection.SMBConnection(server.host, server.host, sess_port=server.port, timeout=30,
                                           manualNegotiate=True)
        conn.negotiateSession(negoData=SMB1_ONLY_202)
    else:
        dialect = SMB2_DIALECT_002 if hello == "2.0.2" else SMB2_DIALECT_21
        conn = smbconnection.SMBConnection(server.host, server.host, sess_port=server.port, timeout=30,
                                           preferredDialect=dialect)
    try:
        told = conn._SMBConnection._Connection  # what the NEGOTIATE response said
        if hello == "2.1":
            assert conn.getDialect() == SMB2_DIALECT_21
            assert told["SupportsMultiCredit"], "2.1 with SMB2_GLOBAL_CAP_LARGE_MTU"
        else:
            assert conn.getDialect() == SMB2_DIALECT_002
            sizes = (told["MaxTransactSize"], told["MaxReadSize"], told["MaxWriteSize"])
            assert sizes == (65536, 65536, 65536), sizes
        conn.login(server.user, server.password, server.domain)

        listed = sorted(f.get_longname() for f in conn.listPath(server.share, "dir\\*"))
        assert listed == sorted([".", "..", *NAMES])

        data = os.urandom(SIZE)
        conn.putFile(server.share, "up.bin", io.BytesIO(data).read)
        assert (server.share_dir / "up.bin").read_bytes() == data
        down = os.urandom(SIZE)
        (server.share_dir / "down.bin").write_bytes(down)
        got = io.BytesIO()
        conn.getFile(server.share, "down.bin", got.write)
        assert got.getvalue() == down
    finally:
        conn.close()


@pytest.mark.parametrize("hello", ["2.0.2", "2.1"])
def test_smbprotocol(server, hello):
    _fill_dir(server)
    dialect = Dialects.SMB_2_0_2 if hello == "2.0.2" else Dialects.SMB_2_1_0
    # smbclient's pool connects offering every dialect; one connected at
    # this dialect, in a cache of this test's own, is the one it uses.
    conn = Connection(uuid.uuid4(), server.host, server.port, require_signing=True)
    cache = {f"{server.host.lower()}:{server.port}": conn}
    try:
        conn.connect(dialect=dialect, timeout=30)
        assert conn.dialect == dialect
        if hello == "2.1":
            assert conn.server_capabilities.has_flag(Capabilities.SMB2_GLOBAL_CAP_LARGE_MTU)
            assert conn.supports_multi_credit
        else:
            sizes = (conn.max_transact_size, conn.max_read_size, conn.max_write_size)
            assert sizes == (65536, 65536, 65536), sizes
        kw = {"port": server.port, "connection_cache": cache}
        smbclient.register_session(server.host, username=server.user, password=server.password, **kw)
        root = rf"\\{server.host}\{server.share}"

        assert sorted(smbclient.listdir(rf"{root}\dir", **kw)) == NAMES

        data = os.urandom(SIZE)
        with smbclient.open_file(rf"{root}\up.bin", mode="wb", **kw) as f:
            f.write(data)
        assert (server.share_dir / "up.bin").read_bytes() == data
        down = os.urandom(SIZE)
        (server.share_dir / "down.bin").write_bytes(down)
        with smbclient.open_file(rf"{root}\down.bin", mode="rb", **kw) as f:
            assert f.read() == down
    finally:
        smbclient.reset_connection_cache(connection_cache=cache)
