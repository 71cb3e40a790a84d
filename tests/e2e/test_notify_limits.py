"""No client can take the inotify watches all share.

CHANGE_NOTIFY watches a directory with one inotify watch, and a tree
(SMB2_WATCH_TREE) with one per subdirectory; the kernel's quota
(fs.inotify.max_user_watches) is per user, so one client watching a deep
tree could leave none for anyone else. smbq bounds the watches of each
session (`limits.notify_watches_per_session`) and of all sessions
(`limits.notify_watches`); a request past the bound completes with
STATUS_NOTIFY_ENUM_DIR, as Windows answers an overflow, and the client
enumerates the directory instead (MS-SMB2 3.3.5.19, MS-FSA 2.1.5.10).

Two smbprotocol clients, each its own connection and session, on a server
allowing 4 watches a session and 6 in all: the first holds its 4 with a
tree watch on 11 directories and is told to enumerate; the second's notify
still reports a change; watches closed go back to whoever asks next.
smbq only: smbd has no such limits to configure.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import pytest

pytest.importorskip("smbprotocol")

from smbprotocol.change_notify import (  # noqa: E402
    ChangeNotifyFlags,
    CompletionFilter,
    FileNotifyInformation,
    SMB2ChangeNotifyRequest,
    SMB2ChangeNotifyResponse,
)
from smbprotocol.connection import Connection  # noqa: E402
from smbprotocol.exceptions import SMBResponseException  # noqa: E402
from smbprotocol.header import NtStatus  # noqa: E402
from smbprotocol.open import (  # noqa: E402
    CreateDisposition,
    CreateOptions,
    DirectoryAccessMask,
    FileAttributes,
    ImpersonationLevel,
    Open,
    ShareAccess,
)
from smbprotocol.session import Session  # noqa: E402
from smbprotocol.tree import TreeConnect  # noqa: E402

PER_SESSION = 4
TOTAL = 6
LIMITS = f"[limits]\nnotify_watches_per_session = {PER_SESSION}\nnotify_watches = {TOTAL}\n"
NAMES = CompletionFilter.FILE_NOTIFY_CHANGE_FILE_NAME | CompletionFilter.FILE_NOTIFY_CHANGE_DIR_NAME
SUCCESS = NtStatus.STATUS_SUCCESS
ENUM_DIR = NtStatus.STATUS_NOTIFY_ENUM_DIR


class Client:
    """One connection with one session and one tree connect."""

    def __init__(self, server, stack: contextlib.ExitStack):
        self.conn = Connection(uuid.uuid4(), server.host, server.port)
        self.conn.connect(timeout=15)
        stack.callback(self.conn.disconnect, True)
        self.session = Session(self.conn, server.user, server.password, require_encryption=True)
        self.session.connect()
        self.tree = TreeConnect(self.session, rf"\\{server.host}\{server.share}")
        self.tree.connect()

    def open_dir(self, name: str) -> Open:
        d = Open(self.tree, name)
        d.create(ImpersonationLevel.Impersonation,
                 DirectoryAccessMask.FILE_LIST_DIRECTORY | DirectoryAccessMask.FILE_READ_ATTRIBUTES
                 | DirectoryAccessMask.SYNCHRONIZE,
                 FileAttributes.FILE_ATTRIBUTE_DIRECTORY,
                 ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE | ShareAccess.FILE_SHARE_DELETE,
                 CreateDisposition.FILE_OPEN, CreateOptions.FILE_DIRECTORY_FILE)
        return d

    def notify(self, d: Open, tree: bool):
        """Send CHANGE_NOTIFY on `d`; the request, for `pending` and `outcome`."""
        req = SMB2ChangeNotifyRequest()
        req["flags"] = ChangeNotifyFlags.SMB2_WATCH_TREE if tree else 0
        req["output_buffer_length"] = 4096
        req["file_id"] = d.file_id
        req["completion_filter"] = NAMES
        return self.conn.send(req, self.session.session_id, self.tree.tree_connect_id)

    def pending(self, request) -> bool:
        """Whether the request went async (STATUS_PENDING) rather than
        completing at once (`outcome` reads the answer either way). Not
        `receive(wait=False)`: smbprotocol then forgets the request and its
        reader thread dies on the final answer."""
        assert request.response_event.wait(15), "an answer within 15 s"
        with request.response_event_lock:
            return request.response["status"].get_value() == NtStatus.STATUS_PENDING

    def outcome(self, request) -> tuple[int, list[str]]:
        """The final response: its status and the names it reports."""
        try:
            response = self.conn.receive(request, timeout=15)
        except SMBResponseException as e:
            return e.status, []
        body = SMB2ChangeNotifyResponse()
        body.unpack(response["data"].get_value())
        buf = body["buffer"].get_value()
        names, at = [], 0
        while True:
            info = FileNotifyInformation()
            info.unpack(buf[at:])
            names.append(info["file_name"].get_value())
            step = info["next_entry_offset"].get_value()
            if not step:
                return SUCCESS, names
            at += step

    def notify_now(self, d: Open, tree: bool) -> tuple[int, list[str]]:
        """CHANGE_NOTIFY expected to complete at once."""
        request = self.notify(d, tree)
        assert not self.pending(request), "completes at once"
        return self.outcome(request)

    def change_seen(self, d: Open, tree: bool, make: Path) -> tuple[int, list[str]]:
        """CHANGE_NOTIFY that waits; create `make` on the server's disk;
        what the request reports."""
        request = self.notify(d, tree)
        assert self.pending(request), "waits for a change"
        make.write_bytes(b"")
        return self.outcome(request)


def test_a_session_at_its_bound_leaves_another_its_notify(start_server):
    server = start_server("smbq", "enc", LIMITS)
    root: Path = server.share_dir
    deep = root / "deep"
    deep.joinpath(*[f"d{i}" for i in range(10)]).mkdir(parents=True)  # 11 directories
    (root / "mine").mkdir()
    three = root / "three"
    (three / "a" / "b").mkdir(parents=True)  # 3 directories

    with contextlib.ExitStack() as stack:
        one = Client(server, stack)
        two = Client(server, stack)

        # Client 1 watches the deep tree: its 4 watches do not reach the
        # bottom, so it is told to enumerate, once; then it waits, and
        # hears of changes where it has watches (deep, d0, d1, d2).
        tree1 = one.open_dir("deep")
        assert one.notify_now(tree1, tree=True) == (ENUM_DIR, [])
        assert one.change_seen(tree1, True, deep / "d0" / "seen.txt") == (SUCCESS, ["d0\\seen.txt"])
        # It holds its maximum: not one more, even for a single directory.
        mine1 = one.open_dir("mine")
        assert one.notify_now(mine1, tree=False) == (ENUM_DIR, [])

        # Client 2's notify still works.
        mine2 = two.open_dir("mine")
        assert two.change_seen(mine2, False, root / "mine" / "new.txt") == (SUCCESS, ["new.txt"])
        # 5 of the 6 watches are held: a tree of 3 directories gets one
        # and is told to enumerate.
        tree2 = two.open_dir("three")
        assert two.notify_now(tree2, tree=True) == (ENUM_DIR, [])

        # Client 1 closes its tree watch and its watches go back: its next
        # request (which forgets the handles it closed) watches the
        # directory it was refused, says to enumerate what went unseen,
        # then waits and reports.
        tree1.close()
        assert one.notify_now(mine1, tree=False) == (ENUM_DIR, [])
        assert one.change_seen(mine1, False, root / "mine" / "late.txt") == (SUCCESS, ["late.txt"])
        # Client 2's tree watch gets what it lacked the same way.
        assert two.notify_now(tree2, tree=True) == (ENUM_DIR, [])
        assert two.change_seen(tree2, True, three / "a" / "b" / "bottom.txt") == (SUCCESS, ["a\\b\\bottom.txt"])
