"""A transfer survives the client's change of address over QUIC, not over TCP.

A laptop that moves from one network to another gets a new address in the
middle of a copy. Two network namespaces made here, joined by a veth pair:
`smbq serve` on its defaults (QUIC on 443, TCP on 445) in one, our client
(`smbq get` of a large file) in the other. While the file comes down, the
client's namespace gets an address in another subnet and a route to the
server through it, and loses its old address: from then on its packets
leave from the new address and nothing reaches the old one.

* QUIC: the same connection carries on (RFC 9000 section 9). The copy is
  byte-exact; the server accepted one QUIC connection in all; it logged the
  peer's move to the new address and the path's validation (PATH_CHALLENGE
  answered; `smbq_quic_migrations_total`, crates/transport/src/quic_path.rs);
  the client did not reconnect (its `--json` summary counts reconnects).
* TCP, for contrast: the connection is bound to the old address and dies
  with it, but only the client knows: the server keeps the old connection,
  and the open on it, until it gives up sending on it (60 s,
  smbq_transport::SEND_TIMEOUT) or TCP does (`limits.dead_peer_secs`,
  120 s). Here the client notices the silence after 5 s
  (`--response-timeout`, 60 s by default), connects again from the new
  address and asks for its durable handle back: refused, the open is
  still live on the old connection (our client does not name its old
  session in SESSION_SETUP's PreviousSessionId, which would have the
  server end it). So it opens the file again by name, which waits for the
  old open's batch oplock to be broken, and as nobody answers the break,
  for `limits.oplock_break_secs` (shortened to 2 s here; 35 s by default).
  Then the copy carries on and is byte-exact too, over a second TCP
  connection. On the defaults the client's 60 s and the server's 60 s run
  out together, and in `smbq-bench suite --scenarios S5m` the reclaim
  came after the server had dropped the old connection and succeeded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import servers
from netns import pair, sh, stop
from conftest import QUICK
from files import random_file, sha256_file

SRV_IP = "10.123.0.1"
OLD_IP, NEW_IP = "10.123.0.2", "10.124.0.2"
METRICS = "127.0.0.1:9464"
SIZE = (256 << 20) if QUICK else (1 << 30)
# The address changes once this share of the file has arrived.
CHANGE_AT = 0.25
# TCP: seconds of silence after which the client counts the connection as
# lost, and the server's wait for an oplock break nobody answers.
RESPONSE_TIMEOUT = 5
OPLOCK_BREAK_SECS = 2

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="needs root and iproute2 for network namespaces")


@pytest.fixture
def netns():
    """Server namespace with SRV_IP; client namespace with OLD_IP; the
    server routes NEW_IP's subnet over the same link (as a router would)."""
    with pair(SRV_IP, OLD_IP, 24, "m") as (srv, cli, vs, vc):
        sh("ip", "-n", srv, "route", "add", f"{NEW_IP.rsplit('.', 1)[0]}.0/24", "dev", vs)
        yield srv, cli, vc


def change_address(cli_ns: str, dev: str) -> None:
    """The client moves: a new address in another subnet, the server
    reached through it, the old address gone (one `ip -batch`)."""
    sh("ip", "-n", cli_ns, "-batch", "-", stdin="\n".join([
        f"addr add {NEW_IP}/24 dev {dev}",
        f"route add {SRV_IP}/32 dev {dev} src {NEW_IP}",
        f"addr del {OLD_IP}/24 dev {dev}",
    ]) + "\n")


def metrics(srv_ns: str) -> str:
    code = f"import urllib.request; print(urllib.request.urlopen('http://{METRICS}/metrics', timeout=10).read().decode())"
    r = subprocess.run(["ip", "netns", "exec", srv_ns, sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def sample(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def run_across_change(netns, tmp_path: Path, transport: str, config_toml: str | None = None) -> dict:
    """Serve a SIZE-byte file, `smbq get` it from the client namespace,
    change the client's address at CHANGE_AT of the way; returns the
    client's summary and stderr, the server's metrics and log."""
    srv_ns, cli_ns, cli_dev = netns
    share, state, users = tmp_path / "share", tmp_path / "state", tmp_path / "users"
    share.mkdir()
    state.mkdir()
    digest = random_file(share / "big.bin", SIZE)
    password = servers._random_password()
    subprocess.run([str(servers.smbq_bin()), "user", "add", "tester", "--users", str(users), "--password-stdin"],
                   input=password + "\n", text=True, check=True, capture_output=True, timeout=30)
    config = []
    if config_toml is not None:
        (tmp_path / "smbq.toml").write_text(config_toml)
        config = ["--config", str(tmp_path / "smbq.toml")]
    server = subprocess.Popen(
        ["ip", "netns", "exec", srv_ns, str(servers.smbq_bin()), "serve", str(share), "--users", str(users),
         "--state-dir", str(state), "--metrics", METRICS, *config],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = servers.LogCollector(server.stderr, tmp_path / "server.log", re.compile(r"listening on quic \S+:(\d+)"))
    client = None
    result: dict = {}
    try:
        servers._wait_ready(server, log, "smbq serve")
        assert log.ready_match is not None and log.ready_match.group(1) == "443", log.text(20)
        args = ["--transport", transport]
        if transport == "quic":
            args += ["--fingerprint", servers_fingerprint(state / "tls" / "cert.pem")]
        else:
            args += ["--encrypt", "--response-timeout", str(RESPONSE_TIMEOUT)]
        got = tmp_path / "got.bin"
        env = dict(os.environ, SMBQ_PASSWORD=password)
        env.pop("SMBQ_USER", None)
        client = subprocess.Popen(
            ["ip", "netns", "exec", cli_ns, str(servers.smbq_bin()), "get", "--json", *args,
             f"smb://tester@{SRV_IP}/share/big.bin", str(got)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while not (got.exists() and got.stat().st_size >= SIZE * CHANGE_AT):
            assert client.poll() is None, f"the client ended before the change: {client.communicate()}"
            assert time.monotonic() < deadline, "the transfer did not get going"
            time.sleep(0.005)
        at = got.stat().st_size
        change_address(cli_ns, cli_dev)
        changed = time.monotonic()
        # The change came in the middle: the copy was still running after it.
        assert client.poll() is None, "the transfer ended before the address change was done; use a larger file"
        out, err = client.communicate(timeout=600)
        took = time.monotonic() - changed
        assert client.returncode == 0, f"smbq get failed ({client.returncode}):\n{err}"
        summary = json.loads(out)
        assert summary["bytes"] == SIZE and summary["transport"] == transport.upper()
        assert sha256_file(got) == digest, "the copy differs"
        text = metrics(srv_ns)
        print(f"{transport}: address changed at {at / SIZE:.0%} of {SIZE >> 20} MiB; done {took:.2f} s later, "
              f"{summary['seconds']:.2f} s in all; reconnects {summary['reconnects']}, reclaimed {summary['reclaimed']}")
        result.update(summary=summary, stderr=err, metrics=text)
        return result
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait(10)
        stop(server)
        log.join()
        result["log"] = log.text()
        (tmp_path / "share" / "big.bin").unlink(missing_ok=True)
        (tmp_path / "got.bin").unlink(missing_ok=True)


def servers_fingerprint(pem: Path) -> str:
    import base64
    import hashlib
    body = "".join(l for l in pem.read_text().splitlines() if l and not l.startswith("-----"))
    return hashlib.sha256(base64.b64decode(body)).hexdigest()


def test_quic_transfer_survives_an_address_change(netns, tmp_path: Path):
    r = run_across_change(netns, tmp_path, "quic")
    log = r["log"]
    assert "panicked" not in log
    print("\n".join(line for line in log.splitlines() if "QUIC peer" in line or "QUIC path" in line))
    # The session and its open survived: no reconnect, no second connection.
    assert r["summary"]["reconnects"] == 0, r["stderr"]
    assert "connection lost" not in r["stderr"]
    assert sample(r["metrics"], "smbq_connections_accepted_total", '{transport="quic"}') == 1
    assert sample(r["metrics"], "smbq_connections_accepted_total", '{transport="tcp"}') == 0
    # The server moved the connection to the new address, once, and the
    # new path answered its PATH_CHALLENGE.
    assert sample(r["metrics"], "smbq_quic_migrations_total") == 1, r["metrics"]
    moves = re.findall(r"QUIC peer address changed from=(\S+) to=(\S+) path_challenges_sent=(\d+)", log)
    assert len(moves) == 1, log
    (old, new, challenges), = moves
    assert old.startswith(f"{OLD_IP}:") and new.startswith(f"{NEW_IP}:"), moves
    # The same UDP socket (wildcard-bound) kept its port: only the IP moved.
    assert old.split(":")[1] == new.split(":")[1]
    assert int(challenges) >= 1
    validated = re.findall(r"QUIC path validated peer=(\S+) path_responses=(\d+)", log)
    assert validated and validated[-1][0] == new, log


def test_tcp_transfer_reconnects_after_an_address_change(netns, tmp_path: Path):
    r = run_across_change(netns, tmp_path, "tcp", f"[limits]\noplock_break_secs = {OPLOCK_BREAK_SECS}\n")
    assert "panicked" not in r["log"]
    # The TCP connection died with the old address; the client connected
    # again from the new one, could not reclaim its durable handle (the
    # server still held it on the old connection), opened the file again
    # by name and finished the copy.
    s = r["summary"]
    assert (s["reconnects"], s["reclaimed"]) == (1, 0), r["stderr"]
    assert "connection lost" in r["stderr"] and "reconnected and reopened it by name" in r["stderr"], r["stderr"]
    assert sample(r["metrics"], "smbq_connections_accepted_total", '{transport="tcp"}') == 2
    assert sample(r["metrics"], "smbq_connections_accepted_total", '{transport="quic"}') == 0
    # It lost at least the silence before the client gave up and the wait for the break.
    assert s["seconds"] > RESPONSE_TIMEOUT + OPLOCK_BREAK_SECS
