"""0-RTT reconnects over SMB over QUIC (docs/zero-rtt.md), with the smbq
binary and the client example ``durable_reconnect``
(crates/client/examples/durable_reconnect.rs), through a UDP relay in this
test between them:

- a replayed 0-RTT first flight is refused: the relay records the
  datagrams of a reconnect that went in 0-RTT and sends them again from a
  new socket once that connection is over; the server refuses the
  replay's early data (its log and ``smbq_quic_0rtt_refused_total``) and
  runs nothing from it (its NEGOTIATE count does not move), while the
  genuine connection's early data was accepted;
- a durable reconnect in 0-RTT takes one round trip less: with the relay
  delaying every datagram, the time from the start of the reconnect to the
  data read through the reclaimed handle is about one RTT shorter when the
  NEGOTIATE goes in 0-RTT than over a fresh 1-RTT connection.

The example is built by ``scripts/test`` beside the smbq binary
(``examples/durable_reconnect``); SMBQ_ZRTT_EXAMPLE names another.
"""

from __future__ import annotations

import heapq
import json
import os
import selectors
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

import servers
from test_client import fingerprint
from test_metrics import get, scrape, wait_for



def example_bin() -> Path:
    given = os.environ.get("SMBQ_ZRTT_EXAMPLE")
    path = Path(given) if given else servers.smbq_bin().parent / "examples" / "durable_reconnect"
    if not path.exists():
        pytest.fail(f"{path} does not exist: cargo build --profile ci -p smbq-client --example durable_reconnect "
                    "(scripts/test builds it)", pytrace=False)
    return path


def varint(b: bytes, i: int) -> tuple[int, int]:
    """A QUIC variable-length integer at ``b[i]`` (RFC 9000 16): (value, next index)."""
    n = 1 << (b[i] >> 6)
    v = b[i] & 0x3F
    for k in range(1, n):
        v = (v << 8) | b[i + k]
    return v, i + n


def long_packets(d: bytes) -> list[tuple[int, bytes]]:
    """The long-header packets coalesced in datagram ``d`` (RFC 9000 17.2,
    12.2) as (type: 0 Initial, 1 0-RTT, 2 Handshake; destination CID)."""
    out, i = [], 0
    try:
        while i < len(d) and d[i] & 0x80:
            kind = (d[i] & 0x30) >> 4
            dlen = d[i + 5]
            dcid = d[i + 6:i + 6 + dlen]
            j = i + 6 + dlen
            j += 1 + d[j]  # source CID
            if kind == 0:
                tlen, j = varint(d, j)
                j += tlen
            length, j = varint(d, j)
            out.append((kind, dcid))
            i = j + length
    except IndexError:
        pass
    return out


class Relay:
    """Forwards UDP between clients and ``server`` (one back socket per
    client address), each datagram ``delay`` seconds later, and records
    what clients send as (destination CIDs of 0-RTT packets, datagram)."""

    def __init__(self, server: tuple[str, int], delay: float = 0.0):
        self.server, self.delay = server, delay
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.port = self.front.getsockname()[1]
        self.backs: dict[tuple, socket.socket] = {}
        self.client_of: dict[socket.socket, tuple] = {}
        self.sent: list[tuple[list[tuple[int, bytes]], bytes]] = []
        self.queue: list[tuple[float, int, socket.socket, bytes, tuple]] = []
        self.seq = 0
        self.stopping = False
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.front, selectors.EVENT_READ)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def later(self, sock, data, addr):
        self.seq += 1
        heapq.heappush(self.queue, (time.monotonic() + self.delay, self.seq, sock, data, addr))

    def run(self):
        while not self.stopping:
            now = time.monotonic()
            while self.queue and self.queue[0][0] <= now:
                _, _, sock, data, addr = heapq.heappop(self.queue)
                sock.sendto(data, addr)
            timeout = max(0.0, self.queue[0][0] - now) if self.queue else 0.05
            for key, _ in self.sel.select(min(timeout, 0.05)):
                s = key.fileobj
                data, addr = s.recvfrom(65535)
                if s is self.front:
                    back = self.backs.get(addr)
                    if back is None:
                        back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                        back.bind(("127.0.0.1", 0))
                        self.backs[addr], self.client_of[back] = back, addr
                        self.sel.register(back, selectors.EVENT_READ)
                    self.sent.append((long_packets(data), data))
                    self.later(back, data, self.server)
                else:
                    self.later(self.front, data, self.client_of[s])

    def first_flight_of_0rtt(self) -> list[bytes]:
        """The client's datagrams of the connection that sent 0-RTT
        packets, as long as they carried its first destination CID (before
        the server's answer gave it another)."""
        cids = [cid for packets, _ in self.sent for kind, cid in packets if kind == 1]
        assert cids, "no client datagram carried a 0-RTT packet"
        assert len(set(cids)) == 1, f"0-RTT packets under several connection ids: {set(cids)}"
        return [d for packets, d in self.sent if any(cid == cids[0] and kind in (0, 1) for kind, cid in packets)]

    def close(self):
        self.stopping = True
        self.thread.join(5)
        self.sel.close()
        for s in [self.front, *self.client_of]:
            s.close()


@pytest.fixture
def relay_factory():
    made = []

    def make(server, delay=0.0):
        r = Relay(server, delay)
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


def reconnect(srv, port: int, *extra: str) -> dict:
    """Run the example through ``port``; its JSON line."""
    cert = srv.workdir / "state" / "tls" / "cert.pem"
    env = dict(os.environ, SMBQ_PASSWORD=srv.password)
    url = f"smb://{srv.user}@127.0.0.1:{port}/{srv.share}"
    r = subprocess.run([str(example_bin()), url, "--fingerprint", fingerprint(cert), *extra],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"durable_reconnect failed: {r.stderr}\n--- server ---\n{srv.log.text(40)}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_replayed_0rtt_first_flight_is_refused(start_server, relay_factory, tmp_path: Path):
    mport = servers.free_port()
    srv = start_server("smbq", "desired", serve_args=("--metrics", f"127.0.0.1:{mport}"))
    relay = relay_factory(("127.0.0.1", srv.quic_port))
    out = reconnect(srv, relay.port, "--name", "replay.bin")
    assert out["zero_rtt"] is True, out
    flight = relay.first_flight_of_0rtt()
    genuine = wait_for(mport, lambda m: get(m, "smbq_quic_0rtt_accepted_total") == 1, "the genuine 0-RTT accepted")
    assert get(genuine, "smbq_quic_0rtt_refused_total") == 0
    negotiates = get(genuine, "smbq_requests_total", command="NEGOTIATE")
    assert negotiates == 2, "the first connection's NEGOTIATE and the reconnect's"

    # The genuine connection was closed; once the server has forgotten it,
    # an attacker sends its recorded first flight from elsewhere.
    time.sleep(1.5)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
        attacker.bind(("127.0.0.1", 0))
        for d in flight:
            attacker.sendto(d, ("127.0.0.1", srv.quic_port))
        replayed = wait_for(mport, lambda m: get(m, "smbq_quic_0rtt_refused_total") == 1,
                            "the replay's early data refused")
        # The server answers the replayed ClientHello with a full handshake
        # the attacker cannot finish; give it time to run anything it would.
        attacker.settimeout(2)
        answers = 0
        try:
            while True:
                attacker.recvfrom(65535)
                answers += 1
        except socket.timeout:
            pass
    after = scrape(mport)
    assert get(after, "smbq_quic_0rtt_accepted_total") == 1
    assert get(after, "smbq_requests_total", command="NEGOTIATE") == negotiates, "the replayed NEGOTIATE ran"
    assert "QUIC 0-RTT data refused" in srv.log.text(), srv.log.text(40)
    print(f"replayed {len(flight)} datagrams ({sum(map(len, flight))} bytes); server answered with {answers} datagrams; "
          f"refused {get(replayed, 'smbq_quic_0rtt_refused_total')}, accepted {get(after, 'smbq_quic_0rtt_accepted_total')}")


ONE_WAY = 0.040
# The fastest of a few runs each: other load on the machine only adds time.
RUNS = 5


def test_a_durable_reconnect_in_0rtt_takes_one_round_trip_less(start_server, relay_factory):
    srv = start_server("smbq", "desired")
    relay = relay_factory(("127.0.0.1", srv.quic_port), delay=ONE_WAY)
    rtt = 2 * ONE_WAY
    zero, fresh = [], []
    for i in range(RUNS):
        a = reconnect(srv, relay.port, "--name", f"z{i}.bin", "--size", "4096")
        b = reconnect(srv, relay.port, "--name", f"f{i}.bin", "--size", "4096", "--fresh")
        assert a["zero_rtt"] is True and b["zero_rtt"] is None, (a, b)
        zero.append(a["reconnect_ms"])
        fresh.append(b["reconnect_ms"])
    z, f = min(zero), min(fresh)
    saved = (f - z) / 1e3
    print(f"RTT {rtt * 1e3:.0f} ms: reconnect to reclaimed data in 0-RTT {sorted(zero)} ms, "
          f"fresh 1-RTT {sorted(fresh)} ms; fastest {z:.1f} vs {f:.1f} ms, saved {saved * 1e3:.1f} ms "
          f"= {saved / rtt:.2f} RTT; fresh = {f / 1e3 / rtt:.2f} RTT")
    assert 0.5 * rtt < saved < 1.5 * rtt, f"0-RTT saved {saved * 1e3:.1f} ms, not about one RTT ({rtt * 1e3:.0f} ms)"
