"""Per-share access lists, seen by real clients (smbclient, smbprotocol).

The server runs with three users and two shares, set once through the TOML
config and once through `--share` flags:

* ``data``: ``users = alice, bob``, ``read_only_users = bob``;
* ``docs``: ``read_only`` for everyone.

carol may not connect to ``data`` (ACCESS_DENIED at TREE_CONNECT) and does
not see it in her share list; bob reads ``data`` but every change he tries is
ACCESS_DENIED; alice reads and writes it; nobody writes ``docs``.
"""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest

import servers

from smbprotocol.connection import Connection  # noqa: E402
from smbprotocol.exceptions import SMBResponseException  # noqa: E402
from smbprotocol.open import CreateDisposition, CreateOptions, FilePipePrinterAccessMask, ImpersonationLevel, Open, ShareAccess  # noqa: E402
from smbprotocol.session import Session  # noqa: E402
from smbprotocol.tree import SMB2TreeConnectRequest, SMB2TreeConnectResponse, TreeConnect  # noqa: E402

USERS = ("alice", "bob", "carol")
STATUS_ACCESS_DENIED = 0xC0000022


@pytest.fixture(scope="module", params=["toml", "flags"])
def srv(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"access-{request.param}")
    data, docs, state = work / "data", work / "docs", work / "state"
    for d in (data, docs, state):
        d.mkdir()
    (data / "hello.txt").write_text("hello from data\n")
    (docs / "readme.txt").write_text("read me\n")
    users_file = work / "users"
    passwords = {}
    for user in USERS:
        passwords[user] = servers._random_password()
        subprocess.run([str(servers.smbq_bin()), "user", "add", user, "--users", str(users_file), "--password-stdin"],
                       input=passwords[user] + "\n", text=True, check=True, capture_output=True, timeout=30)
    port = servers.free_port()
    argv = [str(servers.smbq_bin()), "serve", "--tcp", f"127.0.0.1:{port}", "--no-quic",
            "--users", str(users_file), "--state-dir", str(state)]
    if request.param == "toml":
        cfg = work / "smbq.toml"
        cfg.write_text(f"""
[[share]]
name = "data"
path = "{data}"
users = ["alice", "bob"]
read_only_users = ["bob"]
[[share]]
name = "docs"
path = "{docs}"
read_only = true
""")
        argv += ["--config", str(cfg)]
    else:
        argv += ["--share", f"data={data},users=alice+bob,read_only_users=bob", "--share", f"docs={docs},ro"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = servers.LogCollector(proc.stderr, work / "server.log", re.compile(r"listening on tcp"))
    servers._wait_ready(proc, log, "smbq serve")
    server = servers.Server("smbq", "desired", "127.0.0.1", port, "data", "alice", passwords["alice"], data, work,
                            proc, log)
    server.passwords = passwords
    yield server
    problems = server.stop()
    assert not problems, server.failure_text(problems)


def smbclient(srv, user: str, share: str | None, command: str | None = None, cwd=None):
    argv = ["smbclient"]
    argv += [f"//127.0.0.1/{share}"] if share else ["-L", "//127.0.0.1"]
    argv += ["-p", str(srv.port), "-U", f"{user}%{srv.passwords[user]}", "-m", "SMB3"]
    if command:
        argv += ["-c", command]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, cwd=cwd)
    return r.returncode, r.stdout + r.stderr


def test_user_outside_the_list_is_refused_and_does_not_see_the_share(srv):
    rc, out = smbclient(srv, "carol", "data", "ls")
    assert rc != 0 and "NT_STATUS_ACCESS_DENIED" in out, out
    rc, out = smbclient(srv, "carol", "docs", "ls")
    assert rc == 0 and "readme.txt" in out, out
    rc, out = smbclient(srv, "carol", None)
    names = re.findall(r"^\s+(\S+)\s+(?:Disk|IPC)", out, re.M)
    assert "docs" in names and "data" not in names, out
    rc, out = smbclient(srv, "bob", None)
    assert "data" in re.findall(r"^\s+(\S+)\s+(?:Disk|IPC)", out, re.M), out


def test_read_only_user_reads_and_every_change_is_denied(srv, tmp_path):
    rc, out = smbclient(srv, "bob", "data", "get hello.txt", cwd=tmp_path)
    assert rc == 0, out
    assert (tmp_path / "hello.txt").read_text() == "hello from data\n"
    (tmp_path / "new.txt").write_text("new\n")
    for command in ("put new.txt", "put new.txt hello.txt", "mkdir sub", "rm hello.txt", "rename hello.txt x.txt"):
        rc, out = smbclient(srv, "bob", "data", command, cwd=tmp_path)
        assert "NT_STATUS_ACCESS_DENIED" in out, f"{command}: {out}"
    assert sorted(p.name for p in srv.share_dir.iterdir()) == ["hello.txt"]
    assert (srv.share_dir / "hello.txt").read_text() == "hello from data\n"


def test_read_write_user_writes(srv, tmp_path):
    (tmp_path / "alice.txt").write_text("from alice\n")
    rc, out = smbclient(srv, "alice", "data", "put alice.txt", cwd=tmp_path)
    assert rc == 0 and "NT_STATUS" not in out, out
    assert (srv.share_dir / "alice.txt").read_text() == "from alice\n"
    (srv.share_dir / "alice.txt").unlink()


def test_read_only_share_is_read_only_for_everyone(srv, tmp_path):
    (tmp_path / "x.txt").write_text("x\n")
    rc, out = smbclient(srv, "alice", "docs", "put x.txt", cwd=tmp_path)
    assert "NT_STATUS_ACCESS_DENIED" in out, out
    assert not (srv.share_dir.parent / "docs" / "x.txt").exists()


def test_read_only_user_gets_read_only_maximal_access_smbprotocol(srv):
    conn = Connection(uuid.uuid4(), "127.0.0.1", srv.port)
    conn.connect(timeout=15)
    try:
        session = Session(conn, "bob", srv.passwords["bob"])
        session.connect()
        # smbprotocol keeps no MaximalAccess: read it off the response.
        connect = SMB2TreeConnectRequest()
        connect["buffer"] = r"\\127.0.0.1\data".encode("utf-16-le")
        response = conn.receive(conn.send(connect, sid=session.session_id))
        tree_response = SMB2TreeConnectResponse()
        tree_response.unpack(response["data"].get_value())
        maximal = tree_response["maximal_access"].get_value()
        write_bits = 0x0002 | 0x0004 | 0x0010 | 0x0100 | 0x10000 | 0x40000 | 0x80000
        assert maximal & write_bits == 0 and maximal & 0x1, hex(maximal)
        tree = TreeConnect(session, r"\\127.0.0.1\data")
        tree.connect()
        f = Open(tree, "hello.txt")
        with pytest.raises(SMBResponseException) as e:
            f.create(ImpersonationLevel.Impersonation, FilePipePrinterAccessMask.GENERIC_WRITE, 0,
                     ShareAccess.FILE_SHARE_READ, CreateDisposition.FILE_OPEN, CreateOptions.FILE_NON_DIRECTORY_FILE)
        assert e.value.status == STATUS_ACCESS_DENIED
        f.create(ImpersonationLevel.Impersonation, FilePipePrinterAccessMask.GENERIC_READ, 0,
                 ShareAccess.FILE_SHARE_READ, CreateDisposition.FILE_OPEN, CreateOptions.FILE_NON_DIRECTORY_FILE)
        assert f.read(0, 5) == b"hello"
        f.close()
        carol = Session(conn, "carol", srv.passwords["carol"])
        carol.connect()
        with pytest.raises(SMBResponseException) as e:
            TreeConnect(carol, r"\\127.0.0.1\data").connect()
        assert e.value.status == STATUS_ACCESS_DENIED
    finally:
        conn.disconnect(close=True)
