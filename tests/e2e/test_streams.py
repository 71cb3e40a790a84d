"""Alternate data streams through smbprotocol (a client we did not write), on
both servers, and a share written through one server read through the other.

smbq keeps streams as Samba's vfs_streams_xattr does: stream `s` of a file is
its extended attribute ``user.DosStream.s:$DATA`` holding the data and a NUL
byte. The cross tests check that format on disk and that each server reads
what the other wrote.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from smbprotocol.exceptions import SMBOSError, SMBResponseException


import servers

smbclient = pytest.importorskip("smbclient")
from smbclient._io import SMBFileTransaction, SMBRawIO, set_info  # noqa: E402
from smbprotocol.file_info import FileRenameInformation  # noqa: E402
from smbprotocol.open import FilePipePrinterAccessMask  # noqa: E402

# STATUS_FILE_SYSTEM_LIMITATION (smbq), STATUS_DISK_FULL and
# STATUS_ALLOTTED_SPACE_EXCEEDED (Samba, by the errno it gets).
TOO_LARGE = {0xC0000427, 0xC000007F, 0xC0000099}


@pytest.fixture
def server(start_server, target):
    """Either server; smbd keeps streams in user xattrs (servers.FILE_SEMANTICS)."""
    return start_server(target, "enc", smbd_share=servers.FILE_SEMANTICS)


@pytest.fixture
def root(server):
    smbclient.register_session(server.host, username=server.user, password=server.password,
                               port=server.port, encrypt=True, connection_timeout=30)
    yield rf"\\{server.host}\{server.share}"
    smbclient.reset_connection_cache()


def put(path: str, data: bytes, port: int) -> None:
    with smbclient.open_file(path, mode="wb", port=port) as f:
        f.write(data)


def get(path: str, port: int) -> bytes:
    with smbclient.open_file(path, mode="rb", port=port) as f:
        return f.read()


def streams(path: str, port: int) -> dict[str, tuple[int, int]]:
    return {s.name: (s.size, s.allocation_size) for s in smbclient.liststreams(path, port=port)}


def xattr(path, name: str) -> bytes:
    return os.getxattr(path, f"user.DosStream.{name}:$DATA")


def rename_stream(path: str, new: str, port: int, replace: bool = False) -> None:
    """FileRenameInformation with a ``:name`` target (MS-FSA 2.1.5.15.11.1)."""
    with SMBRawIO(path, mode="r", share_access="rwd", desired_access=FilePipePrinterAccessMask.DELETE,
                  port=port) as raw:
        with SMBFileTransaction(raw) as t:
            info = FileRenameInformation()
            info["replace_if_exists"] = replace
            info["file_name"] = new
            set_info(t, info)


def test_stream_io_listing_and_format(server, root):
    port = server.port
    put(rf"{root}\f.txt", b"main data", port)
    put(rf"{root}\f.txt:Zone.Identifier", b"[ZoneTransfer]\r\nZoneId=3\r\n", port)
    # A stream on a missing file creates the file (empty), as on NTFS.
    put(rf"{root}\new.txt:s1:$DATA", b"abc", port)

    assert get(rf"{root}\f.txt", port) == b"main data"
    assert get(rf"{root}\f.txt:Zone.Identifier", port) == b"[ZoneTransfer]\r\nZoneId=3\r\n"
    # Type and stream names are matched without regard to case.
    assert get(rf"{root}\f.txt:zone.identifier:$data", port) == b"[ZoneTransfer]\r\nZoneId=3\r\n"
    assert get(rf"{root}\f.txt::$DATA", port) == b"main data"
    assert get(rf"{root}\new.txt", port) == b""
    assert get(rf"{root}\new.txt:s1", port) == b"abc"

    listed = streams(rf"{root}\f.txt", port)
    assert set(listed) == {"::$DATA", ":Zone.Identifier:$DATA"}
    assert listed["::$DATA"][0] == 9
    assert listed[":Zone.Identifier:$DATA"][0] == 26
    assert listed[":Zone.Identifier:$DATA"][1] >= 26
    # A directory has no unnamed stream.
    smbclient.mkdir(rf"{root}\d", port=port)
    assert streams(rf"{root}\d", port) == {}
    put(rf"{root}\d:ds", b"on a directory", port)
    assert {k: v[0] for k, v in streams(rf"{root}\d", port).items()} == {":ds:$DATA": 14}
    assert get(rf"{root}\d:ds", port) == b"on a directory"

    # Samba's vfs_streams_xattr format: name with its type, data and a NUL.
    assert xattr(server.share_dir / "f.txt", "Zone.Identifier") == b"[ZoneTransfer]\r\nZoneId=3\r\n\0"
    assert xattr(server.share_dir / "d", "ds") == b"on a directory\0"
    # Streams are no files of their own.
    assert sorted(os.listdir(server.share_dir)) == ["d", "f.txt", "new.txt"]
    assert sorted(smbclient.listdir(root, port=port)) == ["d", "f.txt", "new.txt"]


def test_offsets_truncate_and_overwrite(server, root):
    port = server.port
    put(rf"{root}\f:s", b"0123456789", port)
    with smbclient.open_file(rf"{root}\f:s", mode="r+b", port=port) as f:
        f.seek(4)
        f.write(b"xy")
        f.seek(12)
        f.write(b"END")
        f.truncate(14)
    assert get(rf"{root}\f:s", port) == b"0123xy6789\0\0EN"
    assert streams(rf"{root}\f", port)[":s:$DATA"][0] == 14
    # Overwriting the file itself removes its streams, as on NTFS.
    put(rf"{root}\f", b"new", port)
    assert set(streams(rf"{root}\f", port)) == {"::$DATA"}


def test_invalid_names(server, root):
    port = server.port
    put(rf"{root}\f", b"x", port)
    for bad in [rf"{root}\f:s:$FOO", rf"{root}\f:", rf"{root}\f:s:", rf"{root}\f:a/b"]:
        with pytest.raises(SMBOSError) as err:
            get(bad, port)
        assert err.value.ntstatus in (0xC0000033, 0xC000000D), (bad, hex(err.value.ntstatus))  # NAME_INVALID
    with pytest.raises(SMBOSError) as err:
        get(rf"{root}\f:missing", port)
    assert err.value.ntstatus == 0xC0000034  # OBJECT_NAME_NOT_FOUND


def test_rename_and_delete(server, root):
    port = server.port
    put(rf"{root}\f", b"base", port)
    put(rf"{root}\f:one", b"first", port)
    put(rf"{root}\f:two", b"second", port)
    rename_stream(rf"{root}\f:one", ":renamed:$DATA", port)
    assert set(streams(rf"{root}\f", port)) == {"::$DATA", ":renamed:$DATA", ":two:$DATA"}
    assert get(rf"{root}\f:renamed", port) == b"first"
    # An existing target needs ReplaceIfExists.
    with pytest.raises(SMBOSError) as err:
        rename_stream(rf"{root}\f:renamed", ":two", port)
    assert err.value.ntstatus == 0xC0000035  # OBJECT_NAME_COLLISION

    # Deleting a stream leaves the file; deleting the file takes its streams.
    smbclient.remove(rf"{root}\f:two", port=port)
    assert set(streams(rf"{root}\f", port)) == {"::$DATA", ":renamed:$DATA"}
    assert get(rf"{root}\f", port) == b"base"
    smbclient.remove(rf"{root}\f", port=port)
    assert os.listdir(server.share_dir) == []


def test_too_large_stream(server, root):
    """A stream lives in one extended attribute: past what the file system
    holds there (one 4 KiB block on ext4, 64 KiB at most anywhere) a write
    fails with a clear status and the stream keeps its data."""
    port = server.port
    put(rf"{root}\f:small", b"fits", port)
    # smbprotocol maps only the statuses it knows to SMBOSError.
    with pytest.raises((SMBOSError, SMBResponseException)) as err:
        put(rf"{root}\f:big", os.urandom(70 * 1024), port)
    status = getattr(err.value, "ntstatus", None) or getattr(err.value, "status", None)
    assert status in TOO_LARGE, hex(status)
    assert get(rf"{root}\f:small", port) == b"fits"


@pytest.fixture
def both(start_server):
    """smbd (with vfs_streams_xattr) and smbq serving the same directory."""
    smbd = start_server("smbd", "enc", smbd_share=servers.FILE_SEMANTICS)
    workdir = Path(tempfile.mkdtemp(prefix="smbq-e2e-streams-"))
    smbq = servers.start_smbq(workdir, "enc", share_dir=smbd.share_dir)
    for s in (smbd, smbq):
        smbclient.register_session(s.host, username=s.user, password=s.password, port=s.port, encrypt=True,
                                   connection_timeout=30)
    yield smbd, smbq
    smbclient.reset_connection_cache()
    problems = smbq.stop()
    assert not problems, smbq.failure_text(problems)
    shutil.rmtree(workdir, ignore_errors=True)


def test_written_by_smbd_read_by_smbq(both):
    smbd, smbq = both
    d = rf"\\{smbd.host}\{smbd.share}"
    put(rf"{d}\doc.txt", b"body", smbd.port)
    put(rf"{d}\doc.txt:Zone.Identifier", b"[ZoneTransfer]\r\nZoneId=3\r\n", smbd.port)
    put(rf"{d}\doc.txt:Mixed Case", b"\x00\x01binary\xff", smbd.port)
    # Samba's own format, written by smbd.
    assert xattr(smbd.share_dir / "doc.txt", "Mixed Case") == b"\x00\x01binary\xff\0"

    q = rf"\\{smbq.host}\{smbq.share}"
    assert get(rf"{q}\doc.txt:Zone.Identifier", smbq.port) == b"[ZoneTransfer]\r\nZoneId=3\r\n"
    assert get(rf"{q}\doc.txt:mixed case", smbq.port) == b"\x00\x01binary\xff"
    sizes = {k: v[0] for k, v in streams(rf"{q}\doc.txt", smbq.port).items()}
    assert sizes == {"::$DATA": 4, ":Zone.Identifier:$DATA": 26, ":Mixed Case:$DATA": 9}


def test_written_by_smbq_read_by_smbd(both):
    smbd, smbq = both
    q = rf"\\{smbq.host}\{smbq.share}"
    put(rf"{q}\from-smbq.txt", b"body", smbq.port)
    put(rf"{q}\from-smbq.txt:Stream One", b"written by smbq", smbq.port)
    put(rf"{q}\from-smbq.txt:empty", b"", smbq.port)
    d = rf"\\{smbd.host}\{smbd.share}"
    assert get(rf"{d}\from-smbq.txt:Stream One", smbd.port) == b"written by smbq"
    assert get(rf"{d}\from-smbq.txt:STREAM ONE:$DATA", smbd.port) == b"written by smbq"
    sizes = {k: v[0] for k, v in streams(rf"{d}\from-smbq.txt", smbd.port).items()}
    assert sizes == {"::$DATA": 4, ":Stream One:$DATA": 15, ":empty:$DATA": 0}
