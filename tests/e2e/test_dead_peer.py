"""A client that vanishes without a FIN releases its opens within a bound.

A laptop that sleeps or leaves the network sends no FIN; the server must not
hold its share modes, locks and opens for ever. Two network namespaces made
here (the server in one, the vanishing client in the other, joined by a veth
pair with link-local addresses) let the test cut the client off: its link
goes down, nothing more reaches the server. A second client, beside the
server, then asks for the same file with a conflicting share mode: refused
with SHARING_VIOLATION while the dead peer's open is held, granted once the
server has noticed (`limits.dead_peer_secs = 4` here; default 120).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

import servers
from netns import pair, sh, stop

DEAD_PEER_SECS = 4
BOUND = 30.0  # seconds the test waits at most for the release
SRV_IP, CLI_IP = "169.254.77.1", "169.254.77.2"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="needs root and iproute2 for network namespaces")

# Both clients: log on to HOST:PORT (argv) and open held.txt for read and
# write, sharing nothing, with DISPOSITION; then the client's own part.
CLIENT = textwrap.dedent("""
    import sys, time, uuid
    from smbprotocol.connection import Connection
    from smbprotocol.exceptions import SMBResponseException
    from smbprotocol.session import Session
    from smbprotocol.tree import TreeConnect
    from smbprotocol.open import Open, CreateDisposition, CreateOptions, FilePipePrinterAccessMask, ImpersonationLevel
    host, port, user, password = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    conn = Connection(uuid.uuid4(), host, port)
    conn.connect(timeout=15)
    s = Session(conn, user, password)
    s.connect()
    t = TreeConnect(s, rf"\\\\{host}\\share")
    t.connect()
    f = Open(t, "held.txt")
    def hold(disposition):
        f.create(ImpersonationLevel.Impersonation,
                 FilePipePrinterAccessMask.GENERIC_READ | FilePipePrinterAccessMask.GENERIC_WRITE,
                 0, 0, disposition, CreateOptions.FILE_NON_DIRECTORY_FILE)
""")

# Opens the file, says so, and keeps it open.
HOLDER = CLIENT + textwrap.dedent("""
    hold(CreateDisposition.FILE_OPEN_IF)
    print("opened", flush=True)
    time.sleep(120)
""")

# Tries to open it too: "granted" or the status it got.
PROBE = CLIENT + textwrap.dedent("""
    try:
        hold(CreateDisposition.FILE_OPEN)
        print("granted")
        f.close()
    except SMBResponseException as e:
        print(f"status {e.status:#010x}")
    conn.disconnect()
""")


@pytest.fixture
def netns():
    with pair(SRV_IP, CLI_IP, 30, "d") as (srv, cli, _, vc):
        yield srv, cli, vc


def test_vanished_client_releases_its_open(netns, tmp_path):
    srv_ns, cli_ns, cli_dev = netns
    share, state, users = tmp_path / "share", tmp_path / "state", tmp_path / "users"
    share.mkdir()
    state.mkdir()
    password = servers._random_password()
    subprocess.run([str(servers.smbq_bin()), "user", "add", "tester", "--users", str(users), "--password-stdin"],
                   input=password + "\n", text=True, check=True, capture_output=True, timeout=30)
    cfg = tmp_path / "smbq.toml"
    cfg.write_text(f"[limits]\ndead_peer_secs = {DEAD_PEER_SECS}\n")
    port = 4445
    server = subprocess.Popen(
        ["ip", "netns", "exec", srv_ns, str(servers.smbq_bin()), "serve", str(share), "--tcp", f"0.0.0.0:{port}",
         "--no-quic", "--users", str(users), "--state-dir", str(state), "--config", str(cfg)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = servers.LogCollector(server.stderr, tmp_path / "server.log", re.compile(r"listening on tcp"))
    holder = None
    try:
        servers._wait_ready(server, log, "smbq serve")
        holder = subprocess.Popen(["ip", "netns", "exec", cli_ns, sys.executable, "-c", HOLDER, SRV_IP, str(port),
                                   "tester", password], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = holder.stdout.readline().strip()
        assert line == "opened", f"holder: {line!r} {holder.stderr.read() if holder.poll() is not None else ''}"

        def probe() -> str:
            r = subprocess.run(["ip", "netns", "exec", srv_ns, sys.executable, "-c", PROBE, "127.0.0.1", str(port), "tester",
                                password],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            return r.stdout.strip()

        # The open is held: a conflicting open is refused.
        assert probe() == "status 0xc0000043", "SHARING_VIOLATION expected while the holder is alive"
        # The holder's link goes down: no FIN, no RST, nothing more from it.
        sh("ip", "-n", cli_ns, "link", "set", cli_dev, "down")
        t0 = time.monotonic()
        outcome = probe()
        while outcome != "granted" and time.monotonic() - t0 < BOUND:
            assert outcome == "status 0xc0000043", outcome
            time.sleep(0.5)
            outcome = probe()
        took = time.monotonic() - t0
        assert outcome == "granted", f"the vanished client's open was still held after {took:.0f} s"
        print(f"released {took:.1f} s after the client vanished (dead_peer_secs = {DEAD_PEER_SECS})")
        assert server.poll() is None
    finally:
        if holder is not None:
            holder.kill()
            holder.wait(10)
        stop(server)
        log.join()
    assert "panicked" not in log.text()
