"""`smbq` as a client (ls, get, put, rm, mkdir, rmdir, mv, cat, stat, shares)
against Samba's smbd (TCP, encryption required) and against smbq over QUIC
and over TCP.

Each test runs on three targets: smbd-tcp, smbq-quic (certificate pinned by
fingerprint) and smbq-tcp; the servers run on the defaults the e2e fixtures
give them (encryption required, signing mandatory).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import servers
from conftest import QUICK
from files import random_file, sha256_file

TARGETS = ["smbd-tcp", "smbq-quic", "smbq-tcp"]


class Peer:
    """A server and the arguments our client needs to reach it."""

    def __init__(self, srv: servers.Server, transport: str):
        self.srv = srv
        self.transport = transport
        port = srv.quic_port if transport == "quic" else srv.port
        self.base = f"smb://{srv.user}@{srv.host}:{port}/{srv.share}"
        self.args = ["--transport", transport]
        if transport == "quic":
            self.args += ["--fingerprint", fingerprint(srv.workdir / "state" / "tls" / "cert.pem")]
        self.env = dict(os.environ, SMBQ_PASSWORD=srv.password)
        self.env.pop("SMBQ_USER", None)

    def url(self, path: str = "") -> str:
        return f"{self.base}/{path}" if path else self.base

    def run(self, *argv: str, check: bool = True, timeout: float = 600, extra: list[str] | None = None) -> subprocess.CompletedProcess:
        cmd = [str(servers.smbq_bin()), argv[0], *self.args, *(extra or []), *argv[1:]]
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        # A password is never printed.
        assert self.srv.password not in r.stdout + r.stderr
        if check:
            assert r.returncode == 0, f"{cmd} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r


def fingerprint(pem: Path) -> str:
    import base64
    body = "".join(l for l in pem.read_text().splitlines() if l and not l.startswith("-----"))
    return hashlib.sha256(base64.b64decode(body)).hexdigest()


@pytest.fixture(params=TARGETS)
def peer(request, start_server) -> Peer:
    kind, transport = request.param.split("-")
    return Peer(start_server(kind, "enc"), transport)


def test_every_command(peer: Peer, tmp_path: Path):
    small = tmp_path / "small.txt"
    small.write_bytes(b"hello over smb\n" * 1000)
    peer.run("mkdir", peer.url("dir"), peer.url("dir/sub"))
    peer.run("put", str(small), peer.url("dir/"))
    assert (peer.srv.share_dir / "dir" / "small.txt").read_bytes() == small.read_bytes()

    listing = json.loads(peer.run("ls", "--json", peer.url("dir")).stdout)
    assert {(e["name"], e["dir"], e["size"]) for e in listing} == {("small.txt", False, 15000), ("sub", True, 0)}
    text = peer.run("ls", peer.url("dir")).stdout
    assert "small.txt" in text and "sub/" in text
    # Wildcards are matched by the server.
    assert [e["name"] for e in json.loads(peer.run("ls", "--json", peer.url("dir/*.txt")).stdout)] == ["small.txt"]

    st = json.loads(peer.run("stat", "--json", peer.url("dir/small.txt")).stdout)
    assert st[0]["size"] == 15000 and not st[0]["dir"] and st[0]["modified"] > 0
    assert peer.run("cat", peer.url("dir/small.txt")).stdout == small.read_text()

    peer.run("mv", peer.url("dir/small.txt"), peer.url("dir/sub"))
    assert (peer.srv.share_dir / "dir" / "sub" / "small.txt").exists()
    peer.run("mv", peer.url("dir/sub/small.txt"), peer.url("dir/renamed.txt"))
    got = tmp_path / "got.txt"
    peer.run("get", peer.url("dir/renamed.txt"), str(got))
    assert got.read_bytes() == small.read_bytes()

    # Errors are clear and their exit codes meaningful.
    r = peer.run("rmdir", peer.url("dir"), check=False)
    assert r.returncode == 1 and "DIRECTORY_NOT_EMPTY" in r.stderr
    r = peer.run("ls", peer.url("nothing-here"), check=False)
    assert r.returncode == 3 and "NOT_FOUND" in r.stderr
    r = peer.run("mkdir", peer.url("dir"), check=False)
    assert r.returncode == 5 and "COLLISION" in r.stderr

    peer.run("rm", peer.url("dir/renamed.txt"))
    peer.run("rmdir", peer.url("dir/sub"), peer.url("dir"))
    assert not (peer.srv.share_dir / "dir").exists()

    shares = json.loads(peer.run("shares", "--json", peer.base.rsplit("/", 1)[0]).stdout)
    names = {s["name"]: s["type"] for s in shares}
    assert names.get(peer.srv.share) == "disk", shares
    assert names.get("IPC$", "").startswith("ipc"), shares


def test_get_and_put_large_file_byte_exact(peer: Peer, tmp_path: Path):
    size = (64 << 20) if QUICK else (256 << 20)
    src = tmp_path / "big.bin"
    digest = random_file(src, size)
    summary = json.loads(peer.run("put", "--json", str(src), peer.url("big.bin")).stdout)
    assert summary["bytes"] == size and summary["transport"] == peer.transport.upper()
    # Our client offers smbq's multi-stream extension (docs/multistream.md)
    # on every transport; only smbq over QUIC agrees (smbd ignores it).
    assert summary["streams"] == (4 if peer.transport == "quic" else 1)
    check_quic_figures(summary, peer.transport, sent_at_least=size // 65507)
    assert sha256_file(peer.srv.share_dir / "big.bin") == digest
    src.unlink()
    back = tmp_path / "back.bin"
    summary = json.loads(peer.run("get", "--json", peer.url("big.bin"), str(back)).stdout)
    assert summary["bytes"] == size
    # The server sends the data now; the client, its ACKs and requests.
    check_quic_figures(summary, peer.transport, sent_at_least=10)
    assert sha256_file(back) == digest


def check_quic_figures(summary: dict, transport: str, sent_at_least: int):
    """The `quic` object of a --json summary: the connection's congestion
    control at the end of the transfer over QUIC, null over TCP."""
    if transport != "quic":
        assert summary["quic"] is None, summary
        return
    q = summary["quic"]
    assert set(q) >= {"cwnd_bytes", "pacing_rate_bps", "min_rtt_ms", "srtt_ms", "packets_sent", "packets_lost",
                      "packets_retransmitted", "mtu"}, q
    assert q["cwnd_bytes"] >= 2400, q
    # The default controller (smbq's) paces; quinn's CUBIC would give null.
    assert q["pacing_rate_bps"] is None or q["pacing_rate_bps"] > 0, q
    assert 0 < q["min_rtt_ms"] < 1000 and q["min_rtt_ms"] <= q["srtt_ms"] < 1000, q
    assert q["packets_sent"] >= sent_at_least, q
    assert 0 <= q["packets_lost"] <= q["packets_sent"] and q["packets_retransmitted"] == q["packets_lost"], q
    # Loopback: MTU discovery goes beyond Ethernet's 1452 bytes.
    assert 1452 < q["mtu"] <= 65507, q


def photo_sizes(n: int, seed: int = 1) -> list[int]:
    """Sizes like the 001 paper's photos (S4 group 1): log-normal with mean
    658 KB and sd 407 KB, within 177 KB and 1.72 MB."""
    rng = random.Random(seed)
    mean, sd = 658e3, 407e3
    s2 = math.log(1 + (sd / mean) ** 2)
    mu = math.log(mean) - s2 / 2
    return [int(min(max(rng.lognormvariate(mu, math.sqrt(s2)), 177e3), 1.72e6)) for _ in range(n)]


def test_recursive_put_and_get_of_the_photo_group(peer: Peer, tmp_path: Path):
    src = tmp_path / "photos"
    (src / "album" / "2026").mkdir(parents=True)
    digests = {}
    for i, size in enumerate(photo_sizes(100)):
        rel = Path("album" if i % 3 else "album/2026") / f"img-{i:03}.jpg"
        digests[rel] = random_file(src / rel, size)
    summary = json.loads(peer.run("put", "-r", "--json", str(src), peer.url()).stdout)
    assert summary["files"] == 100
    for rel, d in digests.items():
        assert sha256_file(peer.srv.share_dir / "photos" / rel) == d, rel
    dst = tmp_path / "back"
    dst.mkdir()
    summary = json.loads(peer.run("get", "-r", "--json", peer.url("photos"), str(dst)).stdout)
    assert summary["files"] == 100
    for rel, d in digests.items():
        assert sha256_file(dst / "photos" / rel) == d, rel


def test_continue_resumes_partial_transfers(peer: Peer, tmp_path: Path):
    src = tmp_path / "f.bin"
    digest = random_file(src, 8 << 20)
    remote = peer.srv.share_dir / "f.bin"
    # A partial upload: the first 3 MiB are there.
    with open(src, "rb") as f:
        part = f.read(3 << 20)
    peer.run("put", str(tmp_path / "f.bin"), peer.url("f.bin"))
    os.truncate(remote, 3 << 20)
    s = json.loads(peer.run("put", "--continue", "--json", str(src), peer.url("f.bin")).stdout)
    assert s["skipped_bytes"] == len(part) and s["bytes"] == (8 << 20) - len(part)
    assert sha256_file(remote) == digest
    # A partial download.
    local = tmp_path / "g.bin"
    local.write_bytes(part[: 1 << 20])
    s = json.loads(peer.run("get", "--continue", "--json", peer.url("f.bin"), str(local)).stdout)
    assert s["skipped_bytes"] == 1 << 20
    assert sha256_file(local) == digest


def test_credentials_file_and_wrong_password(peer: Peer, tmp_path: Path):
    creds = tmp_path / "creds"
    creds.write_text(f"username = {peer.srv.user}\npassword = {peer.srv.password}\n")
    creds.chmod(0o644)
    url = peer.url().replace(f"{peer.srv.user}@", "")
    env = {k: v for k, v in peer.env.items() if k != "SMBQ_PASSWORD"}
    cmd = [str(servers.smbq_bin()), "ls", *peer.args, "-A", str(creds), url]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "chmod 600" in r.stderr
    creds.chmod(0o600)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert peer.srv.password not in r.stdout + r.stderr
    bad = dict(peer.env, SMBQ_PASSWORD="not-the-password")
    r = subprocess.run([str(servers.smbq_bin()), "ls", *peer.args, peer.url()], env=bad, capture_output=True, text=True, timeout=60)
    assert r.returncode == 8 and "LOGON_FAILURE" in r.stderr, r.stderr
    assert "not-the-password" not in r.stdout + r.stderr


def test_certificate_checks(start_server, tmp_path: Path):
    srv = start_server("smbq", "enc")
    cert = srv.workdir / "state" / "tls" / "cert.pem"
    env = dict(os.environ, SMBQ_PASSWORD=srv.password)
    url = f"smb://{srv.user}@127.0.0.1:{srv.quic_port}/{srv.share}"

    def ls(*trust: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(servers.smbq_bin()), "ls", "--transport", "quic", *trust, url], env=env, capture_output=True, text=True, timeout=60)

    # Its own certificate as the CA, the name (127.0.0.1) checked.
    assert ls("--ca-file", str(cert)).returncode == 0
    assert ls("--fingerprint", fingerprint(cert).upper()).returncode == 0
    # Not in the system's roots; another pin; another CA: refused, exit code 7.
    for trust in ([], ["--fingerprint", "ab" * 32]):
        r = ls(*trust)
        assert r.returncode == 7 and "certificate" in r.stderr, r.stderr
    other = start_server("smbq", "enc")
    r = ls("--ca-file", str(other.workdir / "state" / "tls" / "cert.pem"))
    assert r.returncode == 7, r.stderr
    r = ls("--insecure")
    assert r.returncode == 0 and "warning: --insecure" in r.stderr


def test_auto_says_which_transport_it_used(start_server):
    srv = start_server("smbq", "enc")
    env = dict(os.environ, SMBQ_PASSWORD=srv.password)
    # Nothing answers QUIC on the TCP port's number: auto falls back to TCP and says so.
    r = subprocess.run([str(servers.smbq_bin()), "ls", "--transport", "auto", f"smb://{srv.user}@127.0.0.1:{srv.port}/{srv.share}"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "connected over TCP" in r.stderr, r.stderr


def qlog_records(path: Path) -> list[dict]:
    """A JSON-SEQ file's records (RFC 7464: RS, one JSON object, newline), each checked to parse."""
    out = []
    for n, line in enumerate(path.read_bytes().split(b"\n")):
        if line:
            assert line[:1] == b"\x1e", f"{path}:{n + 1}: no RS"
            out.append(json.loads(line[1:]))
    return out


def test_qlog_traces_on_request(start_server, tmp_path: Path):
    """SMBQ_QLOG_DIR for the client, --qlog-dir for the server: one qlog
    file per QUIC connection at each end, quinn-proto's events (packets,
    recovery:metrics_updated) between our start and end events."""
    server_dir, client_dir = tmp_path / "server-qlog", tmp_path / "client-qlog"
    srv = start_server("smbq", "enc", serve_args=("--qlog-dir", str(server_dir)))
    peer = Peer(srv, "quic")
    peer.env["SMBQ_QLOG_DIR"] = str(client_dir)
    src = tmp_path / "traced.bin"
    random_file(src, 8 << 20)
    summary = json.loads(peer.run("put", "--json", str(src), peer.url("traced.bin")).stdout)
    [client_file] = list(client_dir.glob("client-*.sqlog"))
    client = qlog_records(client_file)

    def check(records: list[dict], role: str) -> dict:
        assert records[0]["qlog_format"] == "JSON-SEQ" and records[0]["title"] == f"smbq {role}", records[0]
        names = [r.get("name") for r in records]
        [start] = [r for r in records if r.get("name") == "connectivity:connection_started"]
        assert start["data"]["alpn"] == "smb" and start["data"]["dst_port"] == srv.quic_port, start
        assert names.count("transport:packet_sent") > 10 and "transport:packet_received" in names
        metrics = [r["data"] for r in records if r.get("name") == "recovery:metrics_updated"]
        assert any(m.get("congestion_window", 0) > 0 for m in metrics), metrics[:3]
        assert any("smoothed_rtt" in m and "min_rtt" in m for m in metrics)
        [end] = [r for r in records if r.get("name") == "connectivity:connection_closed"]
        assert end["time"] >= start["time"]
        f = end["data"]["figures"]
        assert f["cwnd_bytes"] > 0 and f["packets_sent"] > 10 and f["srtt_ms"] > 0, f
        return end

    end = check(client, "client")
    # The end event's figures are the ones --json reported (taken a moment earlier).
    assert end["data"]["figures"]["packets_sent"] >= summary["quic"]["packets_sent"]
    assert end["data"]["udp_tx"]["bytes"] > 8 << 20
    # The server's trace ends when the client's connection does.
    deadline = time.monotonic() + 30
    while True:
        files = list(server_dir.glob("server-*.sqlog"))
        server = qlog_records(files[0]) if len(files) == 1 else []
        if any(r.get("name") == "connectivity:connection_closed" for r in server):
            break
        assert time.monotonic() < deadline, f"no end in the server's trace: {files}"
        time.sleep(0.1)
    end = check(server, "server")
    assert end["data"]["udp_rx"]["bytes"] > 8 << 20


class CuttingProxy:
    """Forwards TCP connections to `port`; connection number k (from 1) is
    cut (both sockets closed, as a dead link or a NAT timeout would) once
    `cuts[k]` bytes have gone through it in either direction. Others go
    through."""

    def __init__(self, port: int, cuts: dict[int, int]):
        import socket
        import threading
        self.port, self.cuts = port, cuts
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listen_port = self.listener.getsockname()[1]
        self.connections = 0
        self.sockets: list[socket.socket] = []  # every forwarded connection's, closed by close()
        self.cut = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        import socket
        import threading
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.port))
            self.sockets += [down, up]
            self.connections += 1
            limit = self.cuts.get(self.connections)
            moved = [0]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b, moved, limit, (down, up)), daemon=True).start()

    def _pump(self, src, dst, moved, limit, both) -> None:
        import socket
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
                moved[0] += len(data)
                if limit is not None and moved[0] >= limit:
                    self.cut.set()
                    for s in both:
                        try:
                            s.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                        s.close()
                    return
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """Stops accepting and closes every socket it made (a blocked
        accept() wakes on shutdown, not on close)."""
        import socket
        for s in [self.listener, *self.sockets]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(5)
        for s in [self.listener, *self.sockets]:
            s.close()


@pytest.mark.parametrize("kind", ["smbd", "smbq"])
def test_reconnect_after_a_lost_connection_reclaims_the_durable_handle(kind: str, start_server, tmp_path: Path):
    srv = start_server(kind, "enc")
    env = dict(os.environ, SMBQ_PASSWORD=srv.password)
    src = tmp_path / "f.bin"
    size = 48 << 20
    digest = random_file(src, size)
    for direction in ("put", "get"):
        proxy = CuttingProxy(srv.port, {1: 16 << 20})
        url = f"smb://{srv.user}@127.0.0.1:{proxy.listen_port}/{srv.share}/f.bin"
        local = src if direction == "put" else tmp_path / "back.bin"
        argv = [str(local), url] if direction == "put" else [url, str(local)]
        try:
            r = subprocess.run([str(servers.smbq_bin()), direction, "--transport", "tcp", *argv], env=env, capture_output=True, text=True, timeout=300)
        finally:
            proxy.close()
        assert r.returncode == 0, r.stderr
        assert proxy.cut.is_set() and proxy.connections >= 2
        assert "reconnected and reclaimed its durable handle" in r.stderr, r.stderr
        assert sha256_file(srv.share_dir / "f.bin" if direction == "put" else local) == digest


@pytest.mark.parametrize("kind", ["smbd", "smbq"])
def test_mount_survives_lost_connections(kind: str, start_server, tmp_path: Path):
    """A copy into the mount loses its connection at 16 MiB, a read back
    loses the next one: the mount reconnects, opens its files again and
    goes on; both copies byte-exact."""
    import time
    if not (os.path.exists("/dev/fuse") and shutil.which("fusermount3")):
        pytest.skip("no /dev/fuse or fusermount3")
    srv = start_server(kind, "enc")
    env = dict(os.environ, SMBQ_PASSWORD=srv.password)
    src = tmp_path / "f.bin"
    digest = random_file(src, 48 << 20)
    proxy = CuttingProxy(srv.port, {1: 16 << 20, 2: 64 << 20})
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = subprocess.Popen([str(servers.smbq_bin()), "mount", "--transport", "tcp", f"smb://{srv.user}@127.0.0.1:{proxy.listen_port}/{srv.share}", str(mnt)],
                         env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not os.path.ismount(mnt):
            assert m.poll() is None and time.monotonic() < deadline, "the mount did not come up"
            time.sleep(0.1)
        shutil.copyfile(src, mnt / "f.bin")
        assert sha256_file(srv.share_dir / "f.bin") == digest
        assert sha256_file(mnt / "f.bin") == digest
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        try:
            m.wait(30)
        except subprocess.TimeoutExpired:
            m.kill()
        proxy.close()
    log = m.stderr.read()
    assert proxy.connections >= 3, (proxy.connections, log)
    assert log.count("reconnected to") >= 2, log


def test_auto_prefers_quic(tmp_path: Path):
    """A server with QUIC and TCP on the same port number: auto uses QUIC and says so."""
    work = tmp_path / "srv"
    (work / "share").mkdir(parents=True)
    users = work / "users"
    password = "auto-test-password-1"
    subprocess.run([str(servers.smbq_bin()), "user", "add", "tester", "--users", str(users), "--password-stdin"],
                   input=password + "\n", text=True, check=True, capture_output=True, timeout=30)
    port = servers.free_port()
    srv = subprocess.Popen([str(servers.smbq_bin()), "serve", str(work / "share"), "--tcp", f"127.0.0.1:{port}", "--quic", f"127.0.0.1:{port}",
                            "--users", str(users), "--state-dir", str(work / "state")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        import time
        deadline = time.monotonic() + 30
        cert = work / "state" / "tls" / "cert.pem"
        while not (cert.exists() and servers._port_open(port)):
            assert srv.poll() is None and time.monotonic() < deadline, "smbq serve did not start"
            time.sleep(0.1)
        time.sleep(0.5)
        env = dict(os.environ, SMBQ_PASSWORD=password)
        r = subprocess.run([str(servers.smbq_bin()), "ls", "--fingerprint", fingerprint(cert), f"smb://tester@127.0.0.1:{port}/share"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "connected over QUIC" in r.stderr, r.stderr
    finally:
        srv.terminate()
        srv.wait(15)
