"""A SIGKILLed smbq loses nothing that a FLUSH reply acknowledged.

smbq is started as a user would start it: `smbq serve DIR` with its defaults
(encryption desired, signing not required, users file and certificate created
on the first run in the state directory, here $XDG_STATE_HOME/smbq of a
temporary HOME), only the listen addresses are pinned to loopback ports.

Eight smbprotocol clients each append deterministic data to their own file,
sending a FLUSH after every WRITE and recording how far each FLUSH reply
acknowledged the file. After a few seconds the server gets SIGKILL; it is
started again on the same share and state directory, and then

* every byte a FLUSH reply acknowledged is in the file, byte-exact, read both
  through the restarted server over SMB and directly from the share directory
  (bytes written after the last acknowledged FLUSH may be there too, but then
  they are the right bytes);
* the restarted server has the same user (the password printed on the first
  run still logs on) and the same certificate fingerprint.

SIGKILL ends the process, not the machine: what this checks is that smbq
has handed the data to the kernel before it answers FLUSH (no buffering in
the process), not that the disk has it (fsync), which needs a power cut.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

import servers

pytest.importorskip("smbprotocol")
from smbprotocol.connection import Connection  # noqa: E402
from smbprotocol.open import (  # noqa: E402
    CreateDisposition, CreateOptions, FileAttributes, FilePipePrinterAccessMask, ImpersonationLevel, Open, ShareAccess,
)
from smbprotocol.session import Session  # noqa: E402
from smbprotocol.tree import TreeConnect  # noqa: E402

CLIENTS = 8
WRITE_SECONDS = 4.0          # how long the clients write before the kill
MAX_ITERATIONS = 20000       # per client: a bound even if the clock misbehaves
PATTERN_LEN = 1_000_003      # a prime, so writes never line up with the pattern
START_TIMEOUT = 30.0

CREATED_USER_RE = re.compile(r"created user (\S+) with password (\S+) ")
USERS_RE = re.compile(r"users from (\S+): (.+)$", re.M)
CERT_RE = re.compile(r"(generated|using) certificate (\S+) SHA-256 (\S+)")
TCP_RE = re.compile(r"listening on tcp (\S+):(\d+)")


def pattern(client: int) -> bytes:
    return random.Random(f"crash-safety-{client}").randbytes(PATTERN_LEN)


def expected(client: int, start: int, length: int) -> bytes:
    """The bytes client `client` writes at [start, start+length)."""
    pat = pattern(client)
    out = bytearray()
    pos = start
    while len(out) < length:
        i = pos % PATTERN_LEN
        take = min(PATTERN_LEN - i, length - len(out))
        out += pat[i:i + take]
        pos += take
    return bytes(out)


def write_sizes(client: int):
    """Deterministic WRITE sizes: small and odd ones, and up to 192 KiB."""
    rng = random.Random(f"sizes-{client}")
    while True:
        yield rng.choice((1, 511, 4096, 4097, 65536, 65537, rng.randrange(1, 196608)))


class SmbqProcess:
    """One run of `smbq serve` on a share and a HOME that outlive it."""

    def __init__(self, home: Path, share: Path, tcp_port: int, run: int):
        self.home = home
        self.share = share
        self.tcp_port = tcp_port
        binary = servers.smbq_bin()
        if not binary.exists():
            pytest.fail(f"{binary} does not exist: {servers.BUILD_HINT}", pytrace=False)
        env = dict(os.environ, HOME=str(home), XDG_STATE_HOME=str(home / ".local" / "state"), RUST_BACKTRACE="1")
        argv = [str(binary), "serve", str(share), "--tcp", f"127.0.0.1:{tcp_port}", "--quic", "127.0.0.1:0"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env, cwd=home)
        self.log = servers.LogCollector(self.proc.stderr, home / f"server-{run}.log",
                                        re.compile(r"listening on quic (\S+):(\d+)"))
        deadline = time.monotonic() + START_TIMEOUT
        while not self.log.ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"smbq serve (run {run}) did not start:\n{self.log.text(60)}", pytrace=False)
        # The hints (user, URL) are printed right after the listeners.
        deadline = time.monotonic() + 5
        while not re.search(r"\bsmb://", self.log.text()) and time.monotonic() < deadline:
            time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL this process (by its pid: nothing else) and reap it."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.log.join()

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 10 s; the exit status."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.join()
        return self.proc.returncode

    def fingerprint(self) -> tuple[str, str]:
        m = CERT_RE.search(self.log.text())
        assert m, f"no certificate line in the log:\n{self.log.text(40)}"
        return m.group(1), m.group(3)


class Client:
    def __init__(self, port: int, user: str, password: str):
        self.conn = Connection(uuid.uuid4(), "127.0.0.1", port, require_signing=False)
        self.conn.connect(timeout=15)
        self.session = Session(self.conn, user, password)
        self.session.connect()
        self.tree = TreeConnect(self.session, rf"\\127.0.0.1\share")
        self.tree.connect()

    def open(self, name: str, create: bool) -> Open:
        fh = Open(self.tree, name)
        fh.create(ImpersonationLevel.Impersonation,
                  FilePipePrinterAccessMask.GENERIC_READ | FilePipePrinterAccessMask.GENERIC_WRITE,
                  FileAttributes.FILE_ATTRIBUTE_NORMAL, ShareAccess.FILE_SHARE_READ,
                  CreateDisposition.FILE_OVERWRITE_IF if create else CreateDisposition.FILE_OPEN,
                  CreateOptions.FILE_NON_DIRECTORY_FILE)
        return fh

    def close(self) -> None:
        try:
            self.conn.disconnect(True)
        except Exception:  # noqa: BLE001  (the server may be gone)
            pass


class Writer(threading.Thread):
    """Appends to crash-N.bin, WRITE then FLUSH, until stopped or the server dies."""

    def __init__(self, n: int, client: Client, stop: threading.Event):
        super().__init__(name=f"writer-{n}", daemon=True)
        self.n = n
        self.name_on_share = f"crash-{n}.bin"
        self.client = client
        self.stop = stop
        self.fh = client.open(self.name_on_share, create=True)
        self.acked = 0          # bytes [0, acked) acknowledged by a FLUSH reply
        self.sent = 0           # bytes of every WRITE sent, acknowledged or not
        self.flushes = 0
        self.ended_by: str = ""

    def run(self) -> None:
        sizes = write_sizes(self.n)
        offset = 0
        try:
            for _ in range(MAX_ITERATIONS):
                if self.stop.is_set():
                    self.ended_by = "stopped"
                    return
                size = next(sizes)
                data = expected(self.n, offset, size)
                self.sent = offset + size
                written = self.fh.write(data, offset)
                assert written == size, f"short WRITE: {written} of {size}"
                offset += size
                self.fh.flush()
                # The FLUSH reply is in: everything up to offset is acknowledged.
                self.acked = offset
                self.flushes += 1
            self.ended_by = "iterations"
        except Exception as e:  # noqa: BLE001  (the kill ends every client this way)
            self.ended_by = f"{type(e).__name__}: {e}"[:200]


def check_file(what: str, data: bytes, n: int, acked: int, sent: int) -> None:
    if len(data) < acked:
        pytest.fail(f"{what}: {len(data)} bytes, but a FLUSH reply acknowledged {acked}", pytrace=False)
    want = expected(n, 0, acked)
    if data[:acked] != want:
        bad = next(i for i in range(acked) if data[i] != want[i])
        pytest.fail(f"{what}: byte {bad} of {acked} acknowledged bytes differs "
                    f"(got {data[bad:bad + 16].hex()}, want {want[bad:bad + 16].hex()})", pytrace=False)
    # Bytes past the acknowledged end come from a WRITE in flight at the kill:
    # they may be missing, but what is there must be what was written.
    if len(data) > sent:
        pytest.fail(f"{what}: {len(data)} bytes, more than the {sent} ever written", pytrace=False)
    if data[acked:] != expected(n, acked, len(data) - acked):
        pytest.fail(f"{what}: the {len(data) - acked} bytes past the acknowledged {acked} are not the written ones",
                    pytrace=False)


class Run:
    """What a test started: every smbq process and client, ended at teardown."""

    def __init__(self, home: Path):
        self.home = home
        self.procs: list[SmbqProcess] = []
        self.clients: list[Client] = []


@pytest.fixture
def run(request):
    r = Run(Path(tempfile.mkdtemp(prefix="smbq-e2e-crash-")))
    yield r
    for c in r.clients:
        c.close()
    problems = []
    for i, p in enumerate(r.procs):
        status = p.stop()
        # The first run is the one the test kills; later ones must stop cleanly.
        if i > 0 and status not in (0, -signal.SIGTERM):
            problems.append(f"smbq run {i + 1} exited with status {status}")
        if servers.PANIC_RE["smbq"].search(p.log.text()):
            problems.append(f"smbq run {i + 1} log shows a crash:\n{p.log.text(40)}")
    failed = getattr(request.node, "rep_call", None)
    if problems or (failed is not None and failed.failed) or os.environ.get("SMBQ_E2E_KEEP") == "1":
        print(f"\nkept {r.home}")
    else:
        shutil.rmtree(r.home, ignore_errors=True)
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)


def test_flushed_writes_survive_sigkill(run):
    home = run.home
    procs, clients = run.procs, run.clients
    share = home / "share"
    share.mkdir()
    port = servers.free_port()
    first = SmbqProcess(home, share, port, 1)
    procs.append(first)
    m = CREATED_USER_RE.search(first.log.text())
    assert m, f"first run printed no new user:\n{first.log.text(40)}"
    user, password = m.group(1), m.group(2)
    kind, fp1 = first.fingerprint()
    assert kind == "generated", f"first run should generate its certificate, log says {kind!r}"
    state = home / ".local" / "state" / "smbq"
    assert (state / "users").is_file(), f"no users file in {state}"

    stop = threading.Event()
    writers = []
    for n in range(CLIENTS):
        c = Client(port, user, password)
        clients.append(c)
        writers.append(Writer(n, c, stop))
    t0 = time.monotonic()
    for w in writers:
        w.start()
    time.sleep(WRITE_SECONDS)
    assert first.alive(), f"smbq died before the kill:\n{first.log.text(40)}"
    acked_before_kill = {w.n: w.acked for w in writers}
    first.kill()
    killed_after = time.monotonic() - t0
    stop.set()
    for w in writers:
        w.join(30)
        assert not w.is_alive(), f"{w.name} still running 30 s after the kill"
    for c in clients:
        c.close()
    clients.clear()
    assert first.proc.returncode == -signal.SIGKILL, first.proc.returncode
    assert not servers.PANIC_RE["smbq"].search(first.log.text()), first.log.text(60)

    total = sum(w.acked for w in writers)
    flushes = sum(w.flushes for w in writers)
    print(f"\n{CLIENTS} clients, {flushes} WRITE+FLUSH pairs, {total} bytes acknowledged "
          f"in {killed_after:.1f} s before SIGKILL")
    for w in writers:
        # acked can only have grown after the snapshot, by a FLUSH reply
        # that raced the kill: still acknowledged, so still checked.
        assert w.acked >= acked_before_kill[w.n]
        assert w.flushes > 0, f"{w.name} got no FLUSH reply in {WRITE_SECONDS} s ({w.ended_by})"
        assert w.ended_by != "iterations", f"{w.name} ran out of iterations before the kill"

    # Straight from the share directory, before any server touches it.
    for w in writers:
        data = (share / w.name_on_share).read_bytes()
        check_file(f"{w.name_on_share} on disk", data, w.n, w.acked, w.sent)

    second = SmbqProcess(home, share, port, 2)
    procs.append(second)
    log2 = second.log.text()
    assert not CREATED_USER_RE.search(log2), f"restart created a new user:\n{log2}"
    users = USERS_RE.search(log2)
    assert users and users.group(2).split(", ") == [user], f"restart lost the user {user}:\n{log2}"
    kind2, fp2 = second.fingerprint()
    assert kind2 == "using", f"restart generated a new certificate:\n{log2}"
    assert fp2 == fp1, f"certificate fingerprint changed across the kill: {fp1} -> {fp2}"

    # Through the restarted server, with the password of the first run.
    c = Client(port, user, password)
    clients.append(c)
    for w in writers:
        fh = c.open(w.name_on_share, create=False)
        size = (share / w.name_on_share).stat().st_size
        data = b""
        while len(data) < size:
            chunk = fh.read(len(data), min(size - len(data), 1 << 16))
            assert chunk, f"short READ at {len(data)} of {size}"
            data += chunk
        fh.close()
        check_file(f"{w.name_on_share} over SMB", data, w.n, w.acked, w.sent)
