"""One session cannot act as another (MS-SMB2 3.3.5.2.1.1, 3.3.5.2.9).

On one connection with two sessions A and B, both encrypted, a request
sealed with A's keys whose SMB2 header names B must fail with
STATUS_ACCESS_DENIED, and B must stay logged on. Samba's smbd is the
reference: it answers exactly that.
"""

from __future__ import annotations

import uuid

import pytest

from smbprotocol.connection import Connection
from smbprotocol.exceptions import SMBResponseException
from smbprotocol.session import SMB2Logoff, Session
from smbprotocol.tree import TreeConnect

STATUS_ACCESS_DENIED = 0xC0000022


@pytest.fixture
def mode() -> str:
    return "enc"


def sealed_with(conn: Connection, keys_of: Session):
    """Make conn seal the next request with `keys_of`'s keys, whatever
    session its header names; returns the undo."""
    original = conn._encrypt
    conn._encrypt = lambda data, _session: original(data, keys_of)
    return lambda: setattr(conn, "_encrypt", original)


def test_sealed_request_naming_another_session_is_refused(server):
    conn = Connection(uuid.uuid4(), server.host, server.port)
    conn.connect(timeout=15)
    try:
        a = Session(conn, server.user, server.password, require_encryption=True)
        a.connect()
        b = Session(conn, server.user, server.password, require_encryption=True)
        b.connect()
        assert a.session_id != b.session_id
        undo = sealed_with(conn, a)
        try:
            request = conn.send(SMB2Logoff(), sid=b.session_id)
        finally:
            undo()
        with pytest.raises(SMBResponseException) as e:
            conn.receive(request, timeout=15)
        assert e.value.status == STATUS_ACCESS_DENIED, f"{server.name}: status {e.value.status:#010x}"
        # B is still logged on and works with its own keys.
        tree = TreeConnect(b, rf"\\{server.host}\{server.share}")
        tree.connect()
        tree.disconnect()
        # A too.
        tree = TreeConnect(a, rf"\\{server.host}\{server.share}")
        tree.connect()
        tree.disconnect()
    finally:
        conn.disconnect(close=True)
