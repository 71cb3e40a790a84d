"""smbq's Kerberos KDC proxy (MS-KKDCP, issue 35): `POST /KdcProxy` over
HTTPS at the QUIC port's number, with the QUIC certificate.

- test_kinit_and_kvno_through_smbq_and_the_reference_proxy: MIT `kinit`
  whose krb5.conf names `kdc = https://localhost:PORT/KdcProxy` and the
  server's certificate as `http_anchors` gets a TGT, and `kvno` a ticket
  for the test service `cifs/...` (krb5_kdc.SERVICE), through smbq's proxy
  to an MIT KDC (fixture krb5_kdc.py); the same through the reference proxy, Debian's
  python3-kdcproxy (a WSGI app, run here under wsgiref behind TLS); both
  credential caches hold the same principals.
- test_smbclient_logs_on_with_tickets_from_the_proxy: a Kerberos-enabled
  smbq (krb5_kdc.Realm) also serving the proxy; kinit and kvno through it,
  then Samba's smbclient (TCP) and our client (QUIC, at the proxy's port
  number), whose krb5.conf knows only the proxy, log on with that ticket
  and list the share as alice. (Samba 4.17's smbclient
  does not reach an HTTPS KDC by itself: it never loads MIT's k5tls
  plugin and fails with NT_STATUS_NO_LOGON_SERVERS; kvno, MIT's own
  tool, fetches the service ticket it then uses.)
- test_refused_requests_reach_no_kdc: smbq's proxy in front of a fake KDC
  that counts connections. A real request (captured from kinit through the
  proxy) is forwarded; a malformed body, an oversized one, one for another
  realm (in the message or in target-domain), a wrong path, method or
  content type each get their HTTP 4xx, a log line, and reach no KDC.
- test_acme_tls_alpn_01_on_the_proxy_port: ACME's TLS-ALPN-01 (pebble, as
  in test_acme.py) validates on the proxy's TCP port, the responder binding
  nothing of its own; the proxy then presents the ACME certificate, and
  kinit trusting only pebble's root gets a TGT through it.

Needs krb5-kdc, krb5-admin-server, krb5-user, krb5-k5tls (MIT's HTTPS
plugin) and python3-kdcproxy (scripts/install-deps).
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest

import krb5_kdc
import servers
# pebble and its HTTPS CA, as the ACME tests run them (the fixtures too).
from test_acme import REPLACED, acme_config, https_ca, pebbles  # noqa: F401
from test_kerberos import established, smbclient
from test_kerberos_client import our_client

K5TLS = Path("/usr/lib/x86_64-linux-gnu/krb5/plugins/tls/k5tls.so")
SYSTEM_PYTHON = "/usr/bin/python3"
PASSWORD = "Alice-pw-1"
PROXY_LINE = re.compile(r"kdc proxy on https://(\S+):(\d+)/KdcProxy")
MAX_REQUEST = 64 * 1024


def _why_not() -> str | None:
    why = krb5_kdc.available()
    if why:
        return why
    if not K5TLS.exists():
        return f"{K5TLS} missing: MIT's HTTPS transport (krb5-k5tls)"
    r = subprocess.run([SYSTEM_PYTHON, "-c", "import kdcproxy"], capture_output=True)
    if r.returncode != 0:
        return "python3-kdcproxy missing"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


@pytest.fixture(scope="module")
def kdc(tmp_path_factory):
    k = krb5_kdc.start_kdc(tmp_path_factory.mktemp("kdc"))
    try:
        k.add_principal("alice", PASSWORD)
        k.add_principal(krb5_kdc.SERVICE)
        yield k
    finally:
        k.stop()


def smbq_config(realm: str, kdc_port: int) -> str:
    return f"""[kerberos]
realm = "{realm}"
kdc_proxy = true
kdc = ["127.0.0.1:{kdc_port}"]
"""


def proxy_port(srv) -> int:
    """The port of the start-up line naming the proxy's URL (it follows the QUIC one)."""
    deadline = time.monotonic() + 10
    while (m := PROXY_LINE.search(srv.log.text(200))) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert m is not None, srv.log.text(200)
    port = int(m.group(2))
    assert port == srv.quic_port, "the proxy listens at the QUIC port's number"
    return port


def server_cert(srv) -> tuple[Path, Path]:
    """The certificate smbq generated in its state directory (it names localhost), and its key."""
    tls = srv.workdir / "state" / "tls"
    return tls / "cert.pem", tls / "key.pem"


def proxy_krb5_conf(kdc, path: Path, port: int, anchor: Path) -> Path:
    path.write_text(krb5_kdc.client_conf(
        kdc.realm, f"https://localhost:{port}/KdcProxy", extra_realm=f"        http_anchors = FILE:{anchor}"))
    return path


def principals(kdc, ccache: Path) -> tuple[str, set[str]]:
    """`klist`: the default principal and the principals of the tickets."""
    r = subprocess.run(["klist", "-c", f"FILE:{ccache}"], capture_output=True, text=True, timeout=30,
                       env=kdc.client_env())
    assert r.returncode == 0, r.stderr
    default = re.search(r"Default principal: (\S+)", r.stdout)
    assert default is not None, r.stdout
    tickets = {line.split()[-1] for line in r.stdout.splitlines() if re.match(r"\d\d/\d\d/\d\d", line)}
    return default.group(1), tickets


def kinit_and_kvno(kdc, conf: Path, ccache: Path, trace: Path) -> tuple[str, set[str]]:
    env = dict(kdc.client_env(ccache, conf), KRB5_TRACE=str(trace))
    r = subprocess.run(["kinit", "alice"], input=PASSWORD + "\n", capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, f"kinit: {r.stdout}{r.stderr}\n{trace.read_text()}"
    r = subprocess.run(["kvno", krb5_kdc.SERVICE], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, f"kvno: {r.stdout}{r.stderr}\n{trace.read_text()}"
    return principals(kdc, ccache)


REFERENCE_PROXY = """
import ssl, sys
from wsgiref.simple_server import make_server, WSGIRequestHandler
import kdcproxy

class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass

port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
httpd = make_server("127.0.0.1", port, kdcproxy.Application(), handler_class=Quiet)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
print("ready", flush=True)
httpd.serve_forever()
"""


def start_reference_proxy(kdc, workdir: Path, cert: Path, key: Path) -> tuple[subprocess.Popen, int]:
    """Debian's python3-kdcproxy under the system python, on a free port."""
    conf = workdir / "kdcproxy.conf"
    conf.write_text(f"[global]\nuse_dns = false\n\n[{kdc.realm}]\nkerberos = kerberos+tcp://127.0.0.1:{kdc.port}\n")
    script = workdir / "reference_proxy.py"
    script.write_text(REFERENCE_PROXY)
    port = servers.free_port()
    env = dict(os.environ, KDCPROXY_CONFIG=str(conf))
    proc = subprocess.Popen([SYSTEM_PYTHON, str(script), str(port), str(cert), str(key)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError(f"the reference proxy did not start: {line}{proc.stderr.read() if proc.stderr else ''}")
    return proc, port


def test_kinit_and_kvno_through_smbq_and_the_reference_proxy(start_server, kdc, tmp_path):
    srv = start_server("smbq", "desired", config_toml=smbq_config(kdc.realm, kdc.port))
    port = proxy_port(srv)
    cert, key = server_cert(srv)

    conf = proxy_krb5_conf(kdc, tmp_path / "smbq-proxy.conf", port, cert)
    trace = tmp_path / "smbq-trace.log"
    ours = kinit_and_kvno(kdc, conf, tmp_path / "cc-smbq", trace)
    # MIT went through the proxy, over HTTPS, and nowhere else.
    text = trace.read_text()
    assert f"Sending HTTPS request to https 127.0.0.1:{port}" in text, text
    assert f"127.0.0.1:{kdc.port}" not in text

    ref, ref_port = start_reference_proxy(kdc, tmp_path, cert, key)
    try:
        conf = proxy_krb5_conf(kdc, tmp_path / "reference-proxy.conf", ref_port, cert)
        trace = tmp_path / "reference-trace.log"
        theirs = kinit_and_kvno(kdc, conf, tmp_path / "cc-reference", trace)
        assert f"Sending HTTPS request to https 127.0.0.1:{ref_port}" in trace.read_text()
    finally:
        ref.kill()
        ref.wait(10)
        for f in (ref.stdout, ref.stderr):
            if f:
                f.close()

    realm = kdc.realm
    assert ours == (f"alice@{realm}", {f"krbtgt/{realm}@{realm}", f"{krb5_kdc.SERVICE}@{realm}"})
    assert ours == theirs


def test_smbclient_logs_on_with_tickets_from_the_proxy(start_server, tmp_path):
    realm = krb5_kdc.Realm(tmp_path / "realm")
    try:
        proxy = f'kdc_proxy = true\nkdc = ["127.0.0.1:{realm.kdc.port}"]\n'
        srv = krb5_kdc.start_smbq(start_server, realm, extra_config=proxy)
        port = proxy_port(srv)
        conf = proxy_krb5_conf(realm.kdc, tmp_path / "proxy.conf", port, server_cert(srv)[0])
        ccache = tmp_path / "cc"
        trace = tmp_path / "trace.log"
        env = dict(realm.kdc.client_env(ccache, conf), KRB5_TRACE=str(trace))
        r = subprocess.run(["kinit", "alice"], input=realm.password + "\n", capture_output=True, text=True, env=env,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        r = subprocess.run(["kvno", krb5_kdc.SERVICE], capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        assert trace.read_text().count(f"Sending HTTPS request to https 127.0.0.1:{port}") >= 2, trace.read_text()
        assert principals(realm.kdc, ccache)[1] == {f"krbtgt/{realm.kdc.realm}@{realm.kdc.realm}",
                                                     f"{krb5_kdc.SERVICE}@{realm.kdc.realm}"}
        (srv.share_dir / "hello.txt").write_text("hello\n")
        ls = smbclient(srv, realm.kdc.client_env(ccache, conf), "ls")
        assert ls.returncode == 0, ls.stdout + ls.stderr
        assert "hello.txt" in ls.stdout
        ls = our_client(srv, realm.kdc.client_env(ccache, conf), "quic", "ls", "smb:")
        assert ls.returncode == 0, ls.stdout + ls.stderr
        assert "hello.txt" in ls.stdout
        assert len(established(srv, "alice")) == 2, srv.log.text(40)
    finally:
        realm.stop()


class FakeKdc:
    """Counts TCP connections; records each framed request and answers it
    with an empty KRB-ERROR ([APPLICATION 30], length prefixed)."""

    REPLY = b"\x00\x00\x00\x02\x7e\x00"

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.requests: list[bytes] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, self.lock:
                self.connections += 1
                conn.settimeout(5)
                try:
                    head = _read_exact(conn, 4)
                    body = _read_exact(conn, int.from_bytes(head, "big"))
                    self.requests.append(head + body)
                    conn.sendall(self.REPLY)
                except OSError:
                    pass

    def count(self) -> int:
        with self.lock:
            return self.connections

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


def _read_exact(conn: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise OSError("closed")
        out += chunk
    return out


def der(tag: int, contents: bytes) -> bytes:
    n = len(contents)
    if n < 0x80:
        length = bytes([n])
    else:
        b = n.to_bytes((n.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(b)]) + b
    return bytes([tag]) + length + contents


def proxy_message(framed: bytes, domain: str | None) -> bytes:
    """KDC-PROXY-MESSAGE (MS-KKDCP 2.2.2) around a length-prefixed Kerberos message."""
    fields = der(0xA0, der(0x04, framed))
    if domain is not None:
        fields += der(0xA1, der(0x1B, domain.encode()))
    return der(0x30, fields)


def post(port: int, cert: Path, body: bytes, path: str = "/KdcProxy", method: str = "POST",
         content_type: str | None = "application/kerberos", chunked: bool = False) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(cert))
    conn = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=30)
    try:
        headers = {"Content-Type": content_type} if content_type else {}
        if chunked:
            # One chunk, written at once: the proxy stops reading at its
            # bound and closes, and a client still writing would see a reset.
            conn.request(method, path, body=iter([body]), headers=headers, encode_chunked=True)
        else:
            conn.request(method, path, body=body, headers=headers)
        rsp = conn.getresponse()
        return rsp.status, rsp.read()
    finally:
        conn.close()


def test_refused_requests_reach_no_kdc(start_server, kdc, tmp_path):
    fake = FakeKdc()
    try:
        srv = start_server("smbq", "desired", config_toml=smbq_config(kdc.realm, fake.port))
        port = proxy_port(srv)
        cert, _ = server_cert(srv)

        # A real AS-REQ: kinit through the proxy; the fake KDC's empty
        # KRB-ERROR makes kinit fail, but the request is captured.
        conf = proxy_krb5_conf(kdc, tmp_path / "proxy.conf", port, cert)
        r = kdc.kinit("alice", PASSWORD, tmp_path / "cc", krb5_conf=conf)
        assert r.returncode != 0
        assert fake.count() >= 1 and fake.requests, srv.log.text(40)
        captured = fake.requests[0]
        assert captured[4] == 0x6A, "an AS-REQ"
        realm = kdc.realm.encode()
        assert realm in captured
        forwarded = fake.count()

        # Forwarded: the captured request again, as MIT wraps it; the reply comes back wrapped.
        good = proxy_message(captured, kdc.realm)
        status, body = post(port, cert, good)
        assert status == 200, body
        assert body == der(0x30, der(0xA0, der(0x04, FakeKdc.REPLY)))
        assert fake.count() == forwarded + 1
        forwarded += 1

        assert len(b"EVIL.TEST") == len(realm), "a same-length realm keeps the DER lengths"
        other = captured.replace(realm, b"EVIL.TEST")
        refused = [
            ("malformed", (b"\x30\x03\x02\x01\x00",), 400),
            ("truncated", (good[:-1],), 400),
            ("a bad length prefix", (proxy_message(b"\x00\x00\x00\x09" + captured[4:], kdc.realm),), 400),
            ("oversized", (b"\x30" + b"\x00" * (MAX_REQUEST + 1),), 413),
            ("oversized, chunked (no Content-Length)", (der(0x30, b"\x00" * MAX_REQUEST), "/KdcProxy", "POST",
                                                        "application/kerberos", True), 413),
            ("another realm", (proxy_message(other, "EVIL.TEST"),), 403),
            ("another realm in the message only", (proxy_message(other, kdc.realm),), 403),
            ("another target-domain only", (proxy_message(captured, "EVIL.TEST"),), 403),
            ("wrong path", (good, "/other"), 404),
            ("GET", (good, "/KdcProxy", "GET"), 405),
            ("wrong content type", (good, "/KdcProxy", "POST", "text/plain"), 415),
        ]
        for what, args, want in refused:
            try:
                status, body = post(port, cert, *args)
            except OSError as e:
                pytest.fail(f"{what}: no HTTP answer: {e!r}")
            assert status == want, f"{what}: HTTP {status} {body!r}"
        time.sleep(0.2)
        assert fake.count() == forwarded, "a refused request reached the KDC"
        log = srv.log.text(400)
        assert len(re.findall(r"kdc proxy: refused a request", log)) >= len(refused), log
        assert re.search(r"refused a request from 127\.0\.0\.1:\d+ \(HTTP 403\): realm \"EVIL", log), log
    finally:
        fake.close()


@pytest.mark.skipif(shutil.which("pebble") is None or shutil.which("openssl") is None,
                    reason="needs pebble and openssl (scripts/install-deps)")
def test_acme_tls_alpn_01_on_the_proxy_port(kdc, pebbles, https_ca, tmp_path):
    # The port is chosen first: pebble validates on it, smbq's QUIC and the
    # proxy listen on it (start_server's smbq takes a random QUIC port).
    port = servers.free_port()
    pebble = pebbles(servers.free_port(), servers.free_port(), tls_port=port)
    config = tmp_path / "smbq.toml"
    config.write_text(acme_config(pebble, https_ca, acme_tls_port=port) + smbq_config(kdc.realm, kdc.port))
    (tmp_path / "share").mkdir()
    argv = [str(servers.smbq_bin()), "serve", str(tmp_path / "share"), "--no-tcp", "--quic", f"127.0.0.1:{port}",
            "--state-dir", str(tmp_path / "state"), "--users", str(tmp_path / "users"), "--config", str(config)]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=dict(os.environ, RUST_BACKTRACE="1"))
    log = servers.LogCollector(proc.stderr, tmp_path / "server.log", REPLACED)
    try:
        if not log.ready.wait(90):
            pytest.fail(f"no ACME certificate within 90 s:\n{log.text(60)}")
        text = log.text()
        assert f"kdc proxy on https://localhost:{port}/KdcProxy" in text, text
        assert f"ACME: answering TLS-ALPN-01 on the KDC proxy's port tcp {port}" in text, text
        assert "ACME: answered a TLS-ALPN-01 validation from" in text, text
        assert "binding the ACME challenge port" not in text

        # The proxy presents the new certificate: pebble's root is kinit's only anchor.
        root = pebble.root(tmp_path / "pebble-root.pem")
        conf = proxy_krb5_conf(kdc, tmp_path / "proxy.conf", port, root)
        r = kdc.kinit("alice", PASSWORD, tmp_path / "cc", krb5_conf=conf)
        assert r.returncode == 0, r.stderr
        assert principals(kdc, tmp_path / "cc")[0] == f"alice@{kdc.realm}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.join()
    assert not servers.PANIC_RE["smbq"].search(log.text()), log.text(60)
