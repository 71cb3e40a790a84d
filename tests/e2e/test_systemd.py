"""smbq as a systemd service (issue 18): the unit file, sd_notify readiness
and logging to the journal.

* the unit in packaging/systemd passes ``systemd-analyze verify`` (with
  ExecStart pointed at the built binary, which verify requires to exist);
* ``smbq serve`` under ``NOTIFY_SOCKET`` (a socket this test binds, as
  systemd does for ``Type=notify``) sends READY=1 once its TCP and QUIC
  ports are bound, with a STATUS naming them, and STOPPING=1 on SIGTERM,
  then exits 0;
* without a ``JOURNAL_STREAM`` naming its stderr it logs to stderr as
  before; with one, its events reach the journal's socket (a fake journald
  in a private mount namespace) as structured entries.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

import servers

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "packaging" / "systemd" / "smbq.service"
TIMEOUT = servers.READY_TIMEOUT


@pytest.fixture
def workdir():
    # Short paths: a Unix socket's path is limited to 108 bytes.
    d = Path(tempfile.mkdtemp(prefix="smbq-sd-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _analyze_verify(unit: Path) -> tuple[int, str]:
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def _unit_keys(text: str) -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        k, _, v = line.partition("=")
        keys.setdefault(k.strip(), []).append(v.strip())
    return keys


def test_unit_file_verifies(workdir):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (scripts/install-deps installs Debian's systemd)")
    binary = servers.smbq_bin()
    if not binary.exists():
        pytest.fail(f"{binary} does not exist: {servers.BUILD_HINT}")
    text = UNIT.read_text()
    keys = _unit_keys(text)
    assert keys["Type"] == ["notify"]
    assert keys["ExecStart"][0].startswith("/usr/local/bin/smbq serve ")
    assert keys["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert keys["CapabilityBoundingSet"] == ["CAP_NET_BIND_SERVICE"]
    assert keys["AmbientCapabilities"] == ["CAP_NET_BIND_SERVICE"]
    for k, v in {"ProtectSystem": "strict", "NoNewPrivileges": "yes", "ProtectHome": "yes",
                 "PrivateTmp": "yes", "StateDirectory": "smbq", "UMask": "0077", "User": "smbq"}.items():
        assert keys.get(k) == [v], k
    # verify warns and still exits 0 on a bad line: a clean run says nothing
    # about the unit. The corrupted copy shows that this check can fail.
    unit = workdir / "smbq.service"
    unit.write_text(text.replace("/usr/local/bin/smbq", str(binary)))
    rc, out = _analyze_verify(unit)
    assert rc == 0 and str(unit) not in out, out
    bad = workdir / "bad" / "smbq.service"
    bad.parent.mkdir()
    bad.write_text(unit.read_text().replace("Type=notify", "Type=notifyy"))
    rc, out = _analyze_verify(bad)
    assert str(bad) in out, out


def _udp_bound(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
        return False


def _notify_socket(workdir: Path) -> tuple[socket.socket, str]:
    path = str(workdir / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(TIMEOUT)
    return sock, path


def _fields(msg: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in msg.splitlines() if "=" in line)


def test_ready_once_listening_then_stopping(workdir):
    sock, path = _notify_socket(workdir)
    seen: dict = {}

    def watch() -> None:
        # Probe the ports the moment READY arrives, while smbq goes on.
        try:
            msg = sock.recv(4096).decode()
        except OSError as e:
            seen["error"] = e
            return
        seen["ready"] = msg
        m = re.search(r"tcp 127\.0\.0\.1:(\d+), quic 127\.0\.0\.1:(\d+)", _fields(msg).get("STATUS", ""))
        if m:
            seen["ports"] = (int(m.group(1)), int(m.group(2)))
            seen["tcp_accepts"] = servers._port_open(int(m.group(1)))
            seen["udp_bound"] = _udp_bound(int(m.group(2)))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    srv = servers.start_smbq(workdir, "desired", env={"NOTIFY_SOCKET": path, "JOURNAL_STREAM": None})
    try:
        watcher.join(TIMEOUT)
        assert "ready" in seen, f"no READY=1 from smbq: {seen.get('error')}\n{srv.log.text(40)}"
        fields = _fields(seen["ready"])
        assert fields.get("READY") == "1", seen["ready"]
        assert seen.get("ports") == (srv.port, srv.quic_port), seen["ready"]
        assert seen["tcp_accepts"], "READY before the TCP port accepts connections"
        assert seen["udp_bound"], "READY before the QUIC (UDP) port is bound"

        problems = srv.stop()
        assert problems == [], srv.failure_text(problems)
        assert srv.proc.returncode == 0, srv.log.text(40)
        sock.settimeout(5)
        assert _fields(sock.recv(4096).decode()).get("STOPPING") == "1"
        # JOURNAL_STREAM unset: the log is on stderr, as it always was.
        assert re.search(r"INFO .*shutting down: closing listeners", srv.log.text()), srv.log.text(40)
    finally:
        srv.stop()
        sock.close()


def test_logs_to_stderr_when_journal_stream_is_not_stderr(workdir):
    # systemd's variable, inherited by a process whose stderr went elsewhere.
    sock, path = _notify_socket(workdir)
    srv = servers.start_smbq(workdir, "desired", env={"JOURNAL_STREAM": "8:123456789", "NOTIFY_SOCKET": path})
    try:
        # Stopped before READY, smbq may not handle SIGTERM yet: wait for it.
        assert _fields(sock.recv(4096).decode()).get("READY") == "1"
        problems = srv.stop()
        assert problems == [], srv.failure_text(problems)
        assert srv.proc.returncode == 0, srv.log.text(40)
        assert re.search(r"INFO .*shutting down: closing listeners", srv.log.text()), srv.log.text(40)
    finally:
        srv.stop()
        sock.close()


def test_reload_is_announced_as_type_notify_reload_wants(workdir):
    """SIGHUP (ExecReload): RELOADING=1 with MONOTONIC_USEC, then READY=1
    once the reload is done (test_reload.py tests the reload itself)."""
    sock, path = _notify_socket(workdir)
    srv = servers.start_smbq(workdir, "desired", env={"NOTIFY_SOCKET": path, "JOURNAL_STREAM": None})
    try:
        assert _fields(sock.recv(4096).decode()).get("READY") == "1"
        srv.proc.send_signal(signal.SIGHUP)
        reloading = _fields(sock.recv(4096).decode())
        assert reloading.get("RELOADING") == "1" and int(reloading.get("MONOTONIC_USEC", "0")) > 0, reloading
        assert _fields(sock.recv(4096).decode()).get("READY") == "1"
        assert srv.alive(), srv.log.text(40)
        assert "reloaded" in srv.log.text(400)
    finally:
        srv.stop()
        sock.close()


def _namespaces_usable() -> str | None:
    if os.geteuid() != 0:
        return "needs root for a private mount namespace"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    r = subprocess.run(["unshare", "--mount", "sh", "-c", "mount -t tmpfs tmpfs /run"], capture_output=True, timeout=30)
    if r.returncode != 0:
        return f"cannot mount in a private mount namespace: {r.stderr.decode(errors='replace').strip()}"
    return None


def _journal_entry(data: bytes) -> dict[str, str]:
    """One datagram of the journal's native protocol (systemd.journal-fields)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(data):
        nl = data.index(b"\n", i)
        line = data[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            i = nl + 1
        else:
            n = int.from_bytes(data[nl + 1 : nl + 9], "little")
            k, v = line, data[nl + 9 : nl + 9 + n]
            i = nl + 9 + n + 1
        out[k.decode()] = v.decode("utf-8", "replace")
    return out


def test_logs_to_the_journal_when_stderr_is_its_stream(workdir, monkeypatch):
    reason = _namespaces_usable()
    if reason:
        pytest.skip(reason)
    # A fake journald: the socket smbq finds at /run/systemd/journal/socket
    # inside its own mount namespace, where a wrapper also sets
    # JOURNAL_STREAM to its stderr's device and inode, as systemd does.
    jdir = workdir / "journal"
    jdir.mkdir()
    journal = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    journal.bind(str(jdir / "socket"))
    wrapper = workdir / "smbq-under-systemd"
    wrapper.write_text(f"""#!/bin/sh
exec unshare --mount sh -c '
  mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal &&
  mount --bind "$0" /run/systemd/journal &&
  JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) && export JOURNAL_STREAM &&
  exec "$@"' {jdir} {servers.smbq_bin()} "$@"
""")
    wrapper.chmod(0o755)
    monkeypatch.setenv("SMBQ_BIN", str(wrapper))
    # Read as journald does, all along: a sender blocks once 10 datagrams
    # (net.unix.max_dgram_qlen) wait unread.
    entries: list[dict[str, str]] = []
    done = threading.Event()

    def read() -> None:
        journal.settimeout(0.2)
        while True:
            try:
                data = journal.recv(1 << 20)
            except TimeoutError:
                if done.is_set():  # and all read
                    return
                continue
            if data:
                entries.append(_journal_entry(data))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # A notify socket that is not there: smbq warns, with fields, and goes on.
    missing = str(workdir / "no-such-notify.sock")
    srv = servers.start_smbq(workdir, "desired", env={"NOTIFY_SOCKET": missing})
    try:
        # The warning comes when smbq would be READY, SIGTERM handled.
        deadline = time.monotonic() + TIMEOUT
        while not any(e.get("MESSAGE") == "cannot notify systemd" for e in entries):
            assert time.monotonic() < deadline, f"no warning in the journal: {entries}"
            time.sleep(0.05)
        problems = srv.stop()
        assert problems == [], srv.failure_text(problems)
        assert srv.proc.returncode == 0, srv.log.text(40)
    finally:
        srv.stop()
        done.set()
        reader.join(5)
        journal.close()
    warn = [e for e in entries if e.get("MESSAGE") == "cannot notify systemd"]
    assert warn, entries
    assert warn[0].get("PRIORITY") == "4"  # warning
    assert warn[0].get("SYSLOG_IDENTIFIER") == "smbq"
    assert warn[0].get("F_SOCKET", "").strip('"') == missing, warn[0]
    assert warn[0].get("F_ERROR"), warn[0]
    assert warn[0].get("TARGET") == "smbq::notify", warn[0]
    stop = [e for e in entries if e.get("MESSAGE") == "shutting down: closing listeners"]
    assert stop and stop[0].get("PRIORITY") == "6", entries  # info
    # ... and not on stderr, where the journal would have it twice.
    assert "shutting down: closing listeners" not in srv.log.text(), srv.log.text(40)
    assert "listening on tcp" in srv.log.text()
