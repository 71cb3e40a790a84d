"""Reload without restart (`smbq reload`, SIGHUP): shares added, removed
and changed, users added and removed, the certificate replaced, under
running clients (smbprotocol sessions over TCP, Samba 4.24's smbclient
over QUIC); a config that does not load is refused and the old one kept.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from smbprotocol.connection import Connection
from smbprotocol.exceptions import SMBResponseException
from smbprotocol.open import CreateDisposition, CreateOptions, FilePipePrinterAccessMask, ImpersonationLevel, Open, ShareAccess
from smbprotocol.session import Session
from smbprotocol.tree import TreeConnect

import servers
from test_samba_quic import NAME, TRIXIE, _in_chroot, _quic_options

STATUS_NETWORK_NAME_DELETED = 0xC00000C9
STATUS_BAD_NETWORK_NAME = 0xC00000CC
STATUS_USER_SESSION_DELETED = 0xC0000203
STATUS_LOGON_FAILURE = 0xC000006D


def config(tmp: Path, shares: dict[str, str], cert: Path, key: Path) -> str:
    text = f'san = ["{NAME}"]\ncert = "{cert}"\nkey = "{key}"\n'
    for name, opts in shares.items():
        (tmp / name).mkdir(exist_ok=True)
        text += f'[[share]]\nname = "{name}"\npath = "{tmp / name}"\nencrypt = "off"\n{opts}'
    return text


def smbq(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(servers.smbq_bin()), *args], input=stdin, capture_output=True, text=True, timeout=60)


def cert_pair(dir: Path) -> tuple[Path, Path, str]:
    r = smbq("cert", "generate", "--state-dir", str(dir), "--san", NAME)
    assert r.returncode == 0, r.stderr
    fingerprint = re.search(r"SHA-256 ([0-9A-Fa-f:]+)", r.stdout + r.stderr)
    assert fingerprint, r.stdout + r.stderr
    return dir / "tls" / "cert.pem", dir / "tls" / "key.pem", fingerprint.group(1)


def session(server, user: str, password: str) -> tuple[Connection, Session]:
    conn = Connection(uuid.uuid4(), server.host, server.port)
    conn.connect(timeout=15)
    s = Session(conn, user, password, require_encryption=False)
    s.connect()
    return conn, s


def tree(s: Session, server, share: str) -> TreeConnect:
    t = TreeConnect(s, rf"\\{server.host}\{share}")
    t.connect()
    return t


def touch(t: TreeConnect, name: str) -> None:
    f = Open(t, name)
    f.create(ImpersonationLevel.Impersonation, FilePipePrinterAccessMask.GENERIC_WRITE | FilePipePrinterAccessMask.GENERIC_READ,
             0, ShareAccess.FILE_SHARE_READ, CreateDisposition.FILE_OVERWRITE_IF, CreateOptions.FILE_NON_DIRECTORY_FILE)
    f.write(b"hello", 0)
    f.close()


def status(fn) -> int:
    with pytest.raises(SMBResponseException) as e:
        fn()
    return e.value.status


def reload(server) -> subprocess.CompletedProcess:
    return smbq("reload", "--state-dir", str(server.workdir / "state"))


def test_shares_and_users_change_under_running_sessions(start_server, tmp_path):
    cert, key, _ = cert_pair(tmp_path / "id")
    server = start_server("smbq", "sign", config(tmp_path, {"keep": "", "gone": "", "edit": ""}, cert, key), share_opts=None)
    users = str(server.workdir / "users")
    assert smbq("user", "add", "bob", "--users", users, "--password-stdin", stdin="bobpw\n").returncode == 0
    r = reload(server)
    assert r.returncode == 0, r.stderr
    conn, tester = session(server, server.user, server.password)
    bob_conn, bob = session(server, "bob", "bobpw")
    keep, gone, edit = (tree(tester, server, n) for n in ("keep", "gone", "edit"))
    bob_keep = tree(bob, server, "keep")
    touch(keep, "before.txt")

    # Remove "gone", make "edit" read-only, add "new"; remove bob, add carol.
    (server.workdir / "smbq.toml").write_text(config(tmp_path, {"keep": "", "edit": "read_only = true\n", "new": ""}, cert, key))
    assert smbq("user", "del", "bob", "--users", users).returncode == 0
    assert smbq("user", "add", "carol", "--users", users, "--password-stdin", stdin="carolpw\n").returncode == 0
    r = reload(server)
    assert r.returncode == 0, r.stderr
    assert "added [\"new\"]" in r.stdout and "removed [\"gone\"]" in r.stdout and "changed [\"edit\"]" in r.stdout, r.stdout
    assert "users removed [\"bob\"]" in r.stdout, r.stdout

    touch(keep, "after.txt")  # the unchanged share's tree connect goes on
    assert (tmp_path / "keep" / "after.txt").read_bytes() == b"hello"
    assert status(lambda: touch(gone, "x.txt")) == STATUS_NETWORK_NAME_DELETED
    assert status(lambda: touch(edit, "x.txt")) == STATUS_NETWORK_NAME_DELETED
    assert status(lambda: tree(tester, server, "gone")) == STATUS_BAD_NETWORK_NAME
    touch(tree(tester, server, "new"), "n.txt")
    assert (tmp_path / "new" / "n.txt").exists()
    # The changed share takes new tree connects as it is now: read-only.
    assert status(lambda: touch(tree(tester, server, "edit"), "x.txt")) == 0xC0000022  # ACCESS_DENIED
    # bob's session ended; bob cannot log on again; carol can.
    assert status(lambda: touch(bob_keep, "bob.txt")) == STATUS_USER_SESSION_DELETED
    assert status(lambda: session(server, "bob", "bobpw")) == STATUS_LOGON_FAILURE
    _, carol = session(server, "carol", "carolpw")
    touch(tree(carol, server, "keep"), "carol.txt")
    # bob's ended session may still log off (which closes its opens).
    bob.disconnect(close=False)
    conn.disconnect()
    bob_conn.disconnect()


def test_a_config_that_does_not_load_is_refused(start_server, tmp_path):
    cert, key, _ = cert_pair(tmp_path / "id")
    server = start_server("smbq", "sign", config(tmp_path, {"keep": ""}, cert, key), share_opts=None)
    good = (server.workdir / "smbq.toml").read_text()
    for bad, reason in [("[[share]\nname = ", "TOML"), (good + '[[share]]\nname = "x"\npath = "/no/such/dir"\n', "/no/such/dir")]:
        (server.workdir / "smbq.toml").write_text(bad)
        r = reload(server)
        assert r.returncode != 0 and "refused" in r.stderr, r
        assert reason.lower() in r.stderr.lower(), r.stderr
        assert "reload refused" in server.log.text(4000)
    _, s = session(server, server.user, server.password)
    touch(tree(s, server, "keep"), "still.txt")
    assert status(lambda: tree(s, server, "x")) == STATUS_BAD_NETWORK_NAME
    # The users file too: one that no longer parses leaves the users as they were.
    (server.workdir / "users").write_text("this is not a users file\n")
    r = reload(server)
    assert r.returncode != 0, r
    session(server, server.user, server.password)


def test_certificate_replaced_under_a_running_quic_client(start_server, tmp_path):
    if not (TRIXIE / ".smbq-ready").exists():
        pytest.skip(f"no trixie chroot with Samba 4.24 at {TRIXIE} (scripts/install-deps)")
    old_cert, old_key, old_fp = cert_pair(tmp_path / "old")
    new_cert, new_key, new_fp = cert_pair(tmp_path / "new")
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(old_cert, live / "cert.pem")
    shutil.copy(old_key, live / "key.pem")
    server = start_server("smbq", "sign", config(tmp_path, {"share": ""}, live / "cert.pem", live / "key.pem"), share_opts=None)
    (tmp_path / "share" / "f.txt").write_text("file\n")
    jail = Path(TRIXIE / "tmp" / f"reload-{uuid.uuid4().hex[:8]}")
    jail.mkdir()
    try:
        shutil.copy(old_cert, jail / "ca.pem")
        inside = "/tmp/" + jail.name
        # Samba's smbclient keeps one QUIC connection: ls, (reload), ls.
        client = subprocess.Popen(
            _in_chroot("smbclient", f"//{NAME}/share", "-U", f"{server.user}%{server.password}", *_quic_options(server, inside)),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert client.stdin is not None
        client.stdin.write("ls\n")
        client.stdin.flush()
        # Its handshake is done (with the old certificate) once it has a session.
        deadline = time.monotonic() + 60
        while "session established" not in server.log.text(4000):
            assert time.monotonic() < deadline and client.poll() is None, "smbclient did not log on"
            time.sleep(0.05)
        shutil.copy(new_cert, live / "cert.pem")
        shutil.copy(new_key, live / "key.pem")
        r = reload(server)
        assert r.returncode == 0 and f"certificate replaced: SHA-256 {new_fp}" in r.stdout, (r.stdout, r.stderr)
        out, _ = client.communicate("ls\nq\n", timeout=60)
        assert client.returncode == 0 and out.count("f.txt") == 2, out
        assert "NT_STATUS" not in out, out
    finally:
        shutil.rmtree(jail, ignore_errors=True)
    # A new QUIC connection gets the new certificate, not the old one.
    url = f"smb://127.0.0.1:{server.quic_port}/share/"
    auth = tmp_path / "auth"
    auth.write_text(f"username = {server.user}\npassword = {server.password}\n")
    auth.chmod(0o600)
    ok = smbq("ls", "--transport", "quic", "--fingerprint", new_fp, "-A", str(auth), url)
    assert ok.returncode == 0 and "f.txt" in ok.stdout, ok.stderr
    old = smbq("ls", "--transport", "quic", "--fingerprint", old_fp, "-A", str(auth), url)
    assert old.returncode != 0
    # A pair whose key is not the certificate's is refused; the new one stays.
    shutil.copy(old_key, live / "key.pem")
    r = reload(server)
    assert r.returncode != 0 and "refused" in r.stderr, r
    assert smbq("ls", "--transport", "quic", "--fingerprint", new_fp, "-A", str(auth), url).returncode == 0
