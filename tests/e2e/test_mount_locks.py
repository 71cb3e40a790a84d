"""POSIX locks on `smbq mount` become SMB2 byte-range locks (issue 36,
item 4): two mounts of one share (two `smbq mount` processes, each its own
connection) see each other's fcntl locks, and two SQLite writers, one per
mount, keep their database intact. Against smbq over QUIC and TCP and
Samba's smbd over TCP (test_mount.py's MOUNT_TARGETS).

The locks are taken by helper processes (POSIX locks belong to a process),
each speaking a line protocol on stdin/stdout (LOCKER below).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import QUICK
from test_mount import MOUNT_TARGETS, _fuse_missing, mount_share

# Commands, one a line: `lock rd|wr START LEN [wait]`, `unlock START LEN`,
# `test rd|wr START LEN`, `alarm` (the next blocking lock is interrupted
# after 1 s). Answers: `ok`, `EAGAIN`, `EINTR`, `free`, `held rd|wr START LEN PID`.
LOCKER = r"""
import errno, fcntl, os, signal, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
FMT = "hhqqi4x"
TYPES = {"rd": fcntl.F_RDLCK, "wr": fcntl.F_WRLCK}
NAMES = {fcntl.F_RDLCK: "rd", fcntl.F_WRLCK: "wr"}
class Alarm(Exception):
    pass
def ring(*_):
    raise Alarm()
signal.signal(signal.SIGALRM, ring)
print("ready", flush=True)
for line in sys.stdin:
    w = line.split()
    try:
        if w[0] == "lock":
            if len(w) > 4:
                signal.alarm(int(os.environ.get("ALARM", "0")))
            fcntl.fcntl(fd, fcntl.F_SETLKW if len(w) > 4 else fcntl.F_SETLK, struct.pack(FMT, TYPES[w[1]], 0, int(w[2]), int(w[3]), 0))
            signal.alarm(0)
            out = "ok"
        elif w[0] == "unlock":
            fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack(FMT, fcntl.F_UNLCK, 0, int(w[1]), int(w[2]), 0))
            out = "ok"
        elif w[0] == "alarm":
            os.environ["ALARM"] = "1"
            out = "ok"
        else:
            t, _, s, n, pid = struct.unpack(FMT, fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(FMT, TYPES[w[1]], 0, int(w[2]), int(w[3]), 0)))
            out = "free" if t == fcntl.F_UNLCK else f"held {NAMES[t]} {s} {n} {pid}"
    except Alarm:
        out = "EINTR"
    except OSError as e:
        out = "EAGAIN" if e.errno in (errno.EAGAIN, errno.EACCES) else f"error {e}"
    print(out, flush=True)
"""

# Each writer inserts its rows in transactions of this many.
SQLITE_WRITER = r"""
import sqlite3, sys
path, writer, rows, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
db = sqlite3.connect(path, timeout=120, isolation_level=None)
db.execute("PRAGMA journal_mode=DELETE")
for first in range(0, rows, per):
    db.execute("BEGIN IMMEDIATE")
    for i in range(first, min(first + per, rows)):
        db.execute("INSERT INTO t (writer, i, pad) VALUES (?, ?, ?)", (writer, i, "x" * 200))
    db.execute("COMMIT")
db.close()
"""
ROWS = 200 if QUICK else 500
PER_TRANSACTION = 5


class Locker:
    """A process holding one descriptor of `path`, locking on command."""

    def __init__(self, path: Path):
        self.proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.read() == "ready"

    def read(self) -> str:
        line = self.proc.stdout.readline().strip()
        assert line, f"the locker died ({self.proc.poll()})"
        return line

    def send(self, cmd: str) -> None:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def __call__(self, cmd: str) -> str:
        self.send(cmd)
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(params=MOUNT_TARGETS, ids=[t[0] for t in MOUNT_TARGETS])
def two_mounts(request, start_server, tmp_path):
    """One share of the target mounted twice: (Mount, Mount, server)."""
    reason = _fuse_missing()
    if reason:
        pytest.skip(reason)
    _name, kind, transport = request.param
    server = start_server(kind, "enc")
    with mount_share(server, transport, tmp_path, "1") as m1, mount_share(server, transport, tmp_path, "2") as m2:
        yield m1, m2, server


def test_fcntl_locks_conflict_across_mounts(two_mounts):
    m1, m2, _server = two_mounts
    (m1.dir / "f").write_bytes(b"x" * 200)
    a, b = Locker(m1.dir / "f"), Locker(m2.dir / "f")
    try:
        # A's write lock on bytes 0-99 stops B's on 50-60, and B's read lock.
        assert a("lock wr 0 100") == "ok"
        assert b("lock wr 50 11") == "EAGAIN"
        assert b("lock rd 50 11") == "EAGAIN"
        assert b("test wr 50 11").startswith("held wr ")
        assert b("test rd 50 11").startswith("held wr ")
        assert b("lock wr 100 50") == "ok", "the bytes past A's lock are free"
        assert a("test wr 0 100") == "free", "A's own lock does not stop A"
        assert a("test wr 100 1").startswith("held wr ")
        assert b("unlock 100 50") == "ok"
        # A unlocks the middle only: B gets it, not the rest.
        assert a("unlock 40 30") == "ok"
        assert b("lock wr 50 11") == "ok"
        assert b("lock wr 30 11") == "EAGAIN"
        assert b("unlock 0 0") == "ok"
        assert a("unlock 0 0") == "ok"
        assert b("lock wr 50 11") == "ok"
        assert b("test wr 0 0") == "free"
        assert b("unlock 50 11") == "ok"
        # Read locks from both mounts coexist; a write lock waits for both.
        assert a("lock rd 0 100") == "ok"
        assert b("lock rd 50 11") == "ok"
        assert a("lock wr 0 100") == "EAGAIN", "no upgrade past B's read lock"
        assert a("test rd 0 100") == "free"
        assert b("test wr 0 1").startswith("held wr ")
        assert b("unlock 50 11") == "ok"
        assert a("lock wr 0 100") == "ok", "A upgrades once B is gone"
        # F_SETLKW waits for A without holding up mount 2, then gets it.
        b.send("lock wr 50 11 wait")
        time.sleep(1.0)
        assert b.proc.stdout is not None and b.proc.poll() is None
        assert os.listdir(m2.dir) == ["f"], "mount 2 serves others while B waits"
        assert (m2.dir / "f").stat().st_size == 200
        (m2.dir / "g").write_bytes(b"written while B waits")
        t0 = time.monotonic()
        assert a("unlock 0 100") == "ok"
        assert b.read() == "ok"
        assert time.monotonic() - t0 < 5
        # A waiting lock is interrupted by a signal (EINTR).
        assert a("alarm") == "ok"
        t0 = time.monotonic()
        assert a("lock wr 0 100 wait") == "EINTR"
        assert time.monotonic() - t0 < 5
        assert b("unlock 50 11") == "ok"
        assert a("lock wr 0 100") == "ok"
    finally:
        a.close()
        b.close()
    # Closing the descriptor dropped A's lock.
    c = Locker(m2.dir / "f")
    try:
        assert c("lock wr 0 100") == "ok"
    finally:
        c.close()
    m1.unmount()
    m2.unmount()


def test_sqlite_writers_on_two_mounts(two_mounts):
    import sqlite3

    m1, m2, server = two_mounts
    db = sqlite3.connect(m1.dir / "t.db")
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, writer INTEGER, i INTEGER, pad TEXT)")
    db.commit()
    db.close()
    t0 = time.monotonic()
    writers = [subprocess.Popen([sys.executable, "-c", SQLITE_WRITER, str(m.dir / "t.db"), str(n), str(ROWS), str(PER_TRANSACTION)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for n, m in ((1, m1), (2, m2))]
    outs = [w.communicate(timeout=600)[0] for w in writers]
    took = time.monotonic() - t0
    for w, out in zip(writers, outs):
        assert w.returncode == 0, f"a writer failed after {took:.1f} s:\n{out}\n{m1.log_text()}\n{m2.log_text()}"
    print(f"{2 * ROWS} rows by two writers in {took:.1f} s")
    for m in (m1, m2):
        db = sqlite3.connect(m.dir / "t.db")
        check = db.execute("PRAGMA integrity_check").fetchall()
        rows = db.execute("SELECT writer, count(*), count(DISTINCT i) FROM t GROUP BY writer ORDER BY writer").fetchall()
        db.close()
        assert check == [("ok",)], f"through {m.dir.name}: {check[:10]}"
        assert rows == [(1, ROWS, ROWS), (2, ROWS, ROWS)], f"through {m.dir.name}"
    m1.unmount()
    m2.unmount()
    # And on the server's own disk.
    db = sqlite3.connect(server.share_dir / "t.db")
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert db.execute("SELECT count(*) FROM t").fetchone() == (2 * ROWS,)
    db.close()
