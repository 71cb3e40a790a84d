"""File I/O that waits for the disk goes to smbq's pool and is answered
out of order (MS-SMB2 3.3.4.2; the engine issue's "concurrent I/O").

smbprotocol (a client we did not write) sends a request that must wait for
the disk, then at once an ECHO, on one connection. The ECHO's answer must
come first, and the slow request must still be answered right:

- an 8 MiB WRITE with SMB2_WRITEFLAG_WRITE_THROUGH (the data must reach the
  disk before the answer: a pwrite and an fsync on the pool);
- an 8 MiB READ of a file just dropped from the page cache
  (POSIX_FADV_DONTNEED after an fsync), which smbq's RWF_NOWAIT attempt
  cannot answer, so the READ goes to the pool.

smbprotocol's receiver thread takes answers in the order they arrive, so
"the slow request has no final answer yet when the ECHO's is in" shows the
order. smbq only: what smbd does with such requests is its own choice
(it runs reads and writes on its own thread pool too).
"""

from __future__ import annotations

import os
import uuid

import pytest

from smbprotocol.connection import Connection, SMB2Echo
from smbprotocol.header import NtStatus
from smbprotocol.open import (CreateDisposition, CreateOptions, FilePipePrinterAccessMask, ImpersonationLevel, Open,
                              ShareAccess, SMB2ReadRequest, SMB2ReadResponse, SMB2WriteRequest, SMB2WriteResponse)
from smbprotocol.session import Session
from smbprotocol.tree import TreeConnect

MIB = 1 << 20
SIZE = 8 * MIB
WRITE_THROUGH = 0x1


@pytest.fixture
def target() -> str:
    return "smbq"


def connect(server):
    conn = Connection(uuid.uuid4(), server.host, server.port)
    conn.connect(timeout=15)
    session = Session(conn, server.user, server.password)
    session.connect()
    tree = TreeConnect(session, rf"\\{server.host}\{server.share}")
    tree.connect()
    # Credits for an 8 MiB request (128) and an ECHO.
    for _ in range(8):
        if conn.sequence_window["high"] - conn.sequence_window["low"] >= 2 * 128:
            break
        conn.receive(conn.send(SMB2Echo(), sid=session.session_id, credit_request=256), timeout=15)
    return conn, session, tree


def answered_first(conn, session, tree, slow_request):
    """Send `slow_request` and then an ECHO; the ECHO is answered while
    `slow_request` still waits. Returns the slow request's answer."""
    slow = conn.send(slow_request, sid=session.session_id, tid=tree.tree_connect_id, credit_request=128)
    echo = conn.send(SMB2Echo(), sid=session.session_id, credit_request=1)
    conn.receive(echo, timeout=15)
    pending = slow.response is None or slow.response["status"].get_value() == NtStatus.STATUS_PENDING
    response = conn.receive(slow, timeout=60)
    assert pending, "the ECHO sent after the slow request was not answered first"
    assert response["status"].get_value() == NtStatus.STATUS_SUCCESS
    return response


def test_a_write_through_write_and_a_cold_read_are_answered_after_a_later_echo(server):
    name = f"pool-{uuid.uuid4().hex[:8]}.bin"
    conn, session, tree = connect(server)
    try:
        f = Open(tree, name)
        f.create(ImpersonationLevel.Impersonation,
                 FilePipePrinterAccessMask.GENERIC_READ | FilePipePrinterAccessMask.GENERIC_WRITE, 0,
                 ShareAccess.FILE_SHARE_READ, CreateDisposition.FILE_OVERWRITE_IF, CreateOptions.FILE_NON_DIRECTORY_FILE)
        data = os.urandom(SIZE)
        w = SMB2WriteRequest()
        w["offset"] = 0
        w["file_id"] = f.file_id
        w["flags"] = WRITE_THROUGH
        w["buffer"] = data
        body = SMB2WriteResponse()
        body.unpack(answered_first(conn, session, tree, w)["data"].get_value())
        assert body["count"].get_value() == SIZE
        path = server.share_dir / name
        assert path.read_bytes() == data, "the written data is the file's"

        # Drop the file from the page cache: the READ cannot be had without the disk.
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        r = SMB2ReadRequest()
        r["length"] = SIZE
        r["offset"] = 0
        r["file_id"] = f.file_id
        body = SMB2ReadResponse()
        body.unpack(answered_first(conn, session, tree, r)["data"].get_value())
        assert body["buffer"].get_value() == data, "the READ done on the pool returns the file's bytes"
        f.close()
    finally:
        conn.disconnect()
