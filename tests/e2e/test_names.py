"""Case-insensitive, case-preserving names through smbprotocol (a client we
did not write): against smbq and, as reference, smbd; and exact names on an
smbq share started with ``case_sensitive``."""

from __future__ import annotations

import os

import pytest

smbclient = pytest.importorskip("smbclient")
from smbprotocol.exceptions import SMBOSError  # noqa: E402
from smbprotocol.header import NtStatus  # noqa: E402


def _register(srv) -> str:
    smbclient.register_session(srv.host, username=srv.user, password=srv.password,
                               port=srv.port, encrypt=True, connection_timeout=30)
    return rf"\\{srv.host}\{srv.share}"


@pytest.fixture
def session(server):
    yield _register(server)
    smbclient.reset_connection_cache()


def _write(srv, path: str, data: bytes, mode: str = "wb") -> None:
    with smbclient.open_file(path, mode=mode, port=srv.port) as f:
        f.write(data)


def _read(srv, path: str) -> bytes:
    with smbclient.open_file(path, mode="rb", port=srv.port) as f:
        return f.read()


def _status(call) -> int:
    with pytest.raises(SMBOSError) as err:
        call()
    return err.value.ntstatus


def test_names_match_ignoring_case_and_keep_their_case(server, session):
    root, port = session, server.port
    _write(server, rf"{root}\Mixed.TXT", b"mixed")
    assert _read(server, rf"{root}\mixed.txt") == b"mixed"
    assert _read(server, rf"{root}\MIXED.TXT") == b"mixed"
    assert smbclient.listdir(root, port=port) == ["Mixed.TXT"]
    # FILE_CREATE of a case variant: the existing file is in the way.
    status = _status(lambda: _write(server, rf"{root}\MIXED.txt", b"x", mode="xb"))
    assert status == NtStatus.STATUS_OBJECT_NAME_COLLISION
    # FILE_OVERWRITE_IF of a case variant writes the existing file.
    _write(server, rf"{root}\mixed.TXT", b"again")
    assert os.listdir(server.share_dir) == ["Mixed.TXT"]
    assert (server.share_dir / "Mixed.TXT").read_bytes() == b"again"


def test_a_rename_can_change_only_the_case(server, session):
    root, port = session, server.port
    _write(server, rf"{root}\report.doc", b"r")
    smbclient.rename(rf"{root}\report.doc", rf"{root}\Report.DOC", port=port)
    assert os.listdir(server.share_dir) == ["Report.DOC"]
    assert smbclient.listdir(root, port=port) == ["Report.DOC"]
    # Onto a case variant of another file: a collision, nothing changes.
    _write(server, rf"{root}\Other.doc", b"o")
    status = _status(lambda: smbclient.rename(rf"{root}\REPORT.doc", rf"{root}\other.DOC", port=port))
    assert status == NtStatus.STATUS_OBJECT_NAME_COLLISION
    assert sorted(os.listdir(server.share_dir)) == ["Other.doc", "Report.DOC"]


def test_directories_in_a_path_match_ignoring_case(server, session):
    root, port = session, server.port
    smbclient.makedirs(rf"{root}\Projects\Alpha", port=port)
    _write(server, rf"{root}\PROJECTS\alpha\Notes.txt", b"notes")
    assert (server.share_dir / "Projects" / "Alpha" / "Notes.txt").read_bytes() == b"notes"
    assert smbclient.listdir(rf"{root}\projects\ALPHA", port=port) == ["Notes.txt"]
    assert smbclient.stat(rf"{root}\projects\alpha\NOTES.TXT", port=port).st_size == 5
    smbclient.remove(rf"{root}\pRoJeCtS\aLpHa\nOtEs.TxT", port=port)
    assert os.listdir(server.share_dir / "Projects" / "Alpha") == []
    # A file the server did not make is found too.
    (server.share_dir / "Projects" / "Outside.txt").write_bytes(b"outside")
    assert _read(server, rf"{root}\projects\OUTSIDE.TXT") == b"outside"


def test_a_case_sensitive_share_keeps_names_apart(start_server):
    srv = start_server("smbq", share_opts=",case_sensitive")
    root = _register(srv)
    try:
        _write(srv, rf"{root}\Mixed.TXT", b"one")
        assert _status(lambda: _read(srv, rf"{root}\mixed.txt")) == NtStatus.STATUS_OBJECT_NAME_NOT_FOUND
        _write(srv, rf"{root}\MIXED.txt", b"two", mode="xb")
        assert sorted(smbclient.listdir(root, port=srv.port)) == ["MIXED.txt", "Mixed.TXT"]
        assert _read(srv, rf"{root}\Mixed.TXT") == b"one"
        assert _read(srv, rf"{root}\MIXED.txt") == b"two"
    finally:
        smbclient.reset_connection_cache()
