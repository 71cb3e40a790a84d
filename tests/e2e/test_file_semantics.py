"""A share moved between Samba and smbq keeps its file semantics (issue 17).

A directory tree is written through one server by Python smbprotocol, copied
with its extended attributes (``cp -a``, as an administrator moves a share)
into the other server's share, and read back through that one: DOS
attributes and creation times (``user.DOSATTRIB`` in Samba's layout) and
extended attributes (``user.`` xattrs) must read the same. Samba's smbd runs with servers.FILE_SEMANTICS (``store dos
attributes``, ``ea support``, ``vfs objects = acl_xattr streams_xattr``).
"""

from __future__ import annotations

import os
import subprocess

import pytest

import servers

smbclient = pytest.importorskip("smbclient")
from smbclient._os import _set_basic_information  # noqa: E402  (after the importorskip)

READONLY, HIDDEN, SYSTEM, DIRECTORY, ARCHIVE, NORMAL = 0x1, 0x2, 0x4, 0x10, 0x20, 0x80
# FILETIMEs (100 ns since 1601): 2012-12-15 and 2004-01-10.
CREATED = 130_000_000_000_000_000
DIR_CREATED = 127_000_000_000_000_000

# What the writer sets: path (relative to the tree) -> (attributes, creation time).
TREE = {
    "docs": (DIRECTORY | HIDDEN, DIR_CREATED),
    r"docs\secret.txt": (HIDDEN | SYSTEM | READONLY | ARCHIVE, CREATED),
    r"docs\plain.txt": (NORMAL, CREATED + 10_000_000),
    "top.txt": (ARCHIVE | HIDDEN, None),
}


def _unc(srv: servers.Server, rel: str = "") -> str:
    return rf"\\{srv.host}\{srv.share}\tree" + (rf"\{rel}" if rel else "")


def _register(srv: servers.Server) -> None:
    smbclient.register_session(srv.host, username=srv.user, password=srv.password, port=srv.port,
                               encrypt=True, connection_timeout=30)


def _write(srv: servers.Server) -> None:
    _register(srv)
    smbclient.mkdir(_unc(srv), port=srv.port)
    smbclient.mkdir(_unc(srv, "docs"), port=srv.port)
    for rel in TREE:
        if rel != "docs":
            with smbclient.open_file(_unc(srv, rel), mode="w", port=srv.port) as f:
                f.write(f"contents of {rel}\n")
    # Files first: a read-only directory is only a flag, but set it last anyway.
    smbclient.setxattr(_unc(srv, "top.txt"), b"Author", b"someone", port=srv.port)
    for rel, (attrs, created) in sorted(TREE.items(), key=lambda kv: kv[0] == "docs"):
        _set_basic_information(_unc(srv, rel), creation_time=created or 0, file_attributes=attrs, port=srv.port)


def _read(srv: servers.Server) -> dict[str, tuple]:
    _register(srv)
    out = {}
    for rel in TREE:
        st = smbclient.stat(_unc(srv, rel), port=srv.port)
        out[rel] = (st.st_file_attributes, st.st_ctime_ns)
    out["EAs of top.txt"] = {n: smbclient.getxattr(_unc(srv, "top.txt"), n, port=srv.port)
                             for n in smbclient.listxattr(_unc(srv, "top.txt"), port=srv.port)}
    # A listing says the same as a stat.
    for e in smbclient.scandir(_unc(srv, "docs"), port=srv.port):
        info = e.smb_info
        created = info.creation_time.timestamp()
        attrs, created_ns = out[rf"docs\{e.name}"]
        assert info.file_attributes == attrs, e.name
        assert abs(created - created_ns / 1e9) < 1e-5, e.name
    return out


def _ns(filetime: int) -> int:
    return (filetime - 116_444_736_000_000_000) * 100


@pytest.mark.parametrize("writer,reader", [("smbd", "smbq"), ("smbq", "smbd")], ids=["samba-to-smbq", "smbq-to-samba"])
def test_dos_attributes_and_creation_time_move_with_the_share(start_server, writer, reader):
    w = start_server(writer, "sign", smbd_share=servers.FILE_SEMANTICS)
    try:
        _write(w)
        written = _read(w)
    finally:
        smbclient.reset_connection_cache()
    assert written["EAs of top.txt"] == {b"Author": b"someone"}
    for rel, (attrs, created) in TREE.items():
        assert written[rel][0] == attrs, f"{writer} keeps {rel}'s attributes"
        if created is not None:
            assert written[rel][1] == _ns(created), f"{writer} keeps {rel}'s creation time"
    r = start_server(reader, "sign", smbd_share=servers.FILE_SEMANTICS)
    # As an administrator moves a share: with its extended attributes, owned
    # by the user the reading server serves as.
    subprocess.run(["cp", "-a", str(w.share_dir / "tree"), str(r.share_dir)], check=True)
    owner = servers.SMBD_UNIX_USER if reader == "smbd" else "root"
    subprocess.run(["chown", "-R", owner, str(r.share_dir / "tree")], check=True)
    try:
        read = _read(r)
    finally:
        smbclient.reset_connection_cache()
    assert read == written, f"{reader} shows what {writer} stored"


def test_extended_attributes(start_server, target):
    """smbprotocol's setxattr/getxattr/listxattr/removexattr (SET_INFO and
    QUERY_INFO FileFullEaInformation, the latter with an EA name list)."""
    server = start_server(target, "enc", smbd_share=servers.FILE_SEMANTICS)
    smbclient.register_session(server.host, username=server.user, password=server.password, port=server.port,
                               encrypt=True, connection_timeout=30)
    try:
        path = rf"\\{server.host}\{server.share}\eas.txt"
        with smbclient.open_file(path, mode="w", port=server.port) as f:
            f.write("x")
        assert smbclient.listxattr(path, port=server.port) == []
        smbclient.setxattr(path, b"ONE", b"1", port=server.port)
        smbclient.setxattr(path, b"Two", b"second value", port=server.port)
        assert sorted(smbclient.listxattr(path, port=server.port)) == [b"ONE", b"Two"]
        assert smbclient.getxattr(path, b"Two", port=server.port) == b"second value"
        # Names are case-insensitive: setting "one" replaces "ONE".
        smbclient.setxattr(path, b"one", b"uno", port=server.port)
        assert smbclient.getxattr(path, b"ONE", port=server.port) == b"uno"
        smbclient.removexattr(path, b"ONE", port=server.port)
        assert smbclient.listxattr(path, port=server.port) == [b"Two"]
        with pytest.raises(OSError):
            smbclient.getxattr(path, b"ONE", port=server.port)
        if server.kind == "smbq":
            assert os.getxattr(server.share_dir / "eas.txt", "user.Two") == b"second value"
    finally:
        smbclient.reset_connection_cache()
