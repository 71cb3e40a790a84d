"""smbq's certificates from ACME (issue 18), against Let's Encrypt's test CA
`pebble` (Debian package `pebble`) on loopback.

The name is `localhost`: pebble's validator resolves it to 127.0.0.1 from
/etc/hosts, and our client reaches smbq's QUIC port by it. Each test runs
its own pebble with a config the test writes (`PEBBLE_VA_NOSLEEP=1`,
`PEBBLE_WFE_NONCEREJECT=0`) and an HTTPS certificate for pebble made here
with openssl (the package has no test certificates); smbq trusts that CA
with `acme_ca_root`. The ACME options go through smbq's config file
(the same keys as the `--acme-*` flags).

- test_certificate_from_pebble_verifies_over_quic: TLS-ALPN-01; a QUIC client
  trusting only pebble's root (from its management interface) connects by
  name; the leaf's name, issuer and fingerprint; the files and their modes.
- test_renewal_during_a_quic_transfer: HTTP-01 and a 30 s certificate
  lifetime: the renewal (at 20 s) replaces the certificate while a `cat` over
  QUIC runs (throttled until then); the data arrives byte-exact, and a new
  connection sees the new leaf.
- test_stored_certificate_is_used_at_start: a restart with the same state
  directory serves the stored certificate at once and orders nothing.
- test_failed_challenge_is_reported_and_retried: pebble validates against a
  port nobody answers; smbq logs the CA's reason and keeps serving its
  generated certificate; pebble restarted with the right port (it forgets
  the account: smbq makes a new one) and the certificate arrives.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

import servers

NAME = "localhost"

pytestmark = pytest.mark.skipif(
    shutil.which("pebble") is None or shutil.which("openssl") is None,
    reason="needs pebble and openssl (scripts/install-deps)",
)

REPLACED = re.compile(r"ACME: certificate replaced.*sha256=([0-9A-F:]{95})")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def https_ca(tmp_path_factory) -> Path:
    """A CA and a certificate for 127.0.0.1 signed by it: pebble's HTTPS identity."""
    d = tmp_path_factory.mktemp("pebble-https")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=smbq test minica",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign", cwd=d)
    _openssl("req", *ec, "-keyout", "key.pem", "-out", "req.csr", "-subj", "/CN=localhost", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                               "extendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "req.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "cert.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)
    return d


class Pebble:
    """One pebble process; `validate_port` is where it connects for the challenge."""

    def __init__(self, workdir: Path, https: Path, port: int, mgmt: int, *, tls_port: int = 0, http_port: int = 0,
                 validity_secs: int = 0):
        self.port, self.mgmt, self.https = port, mgmt, https
        conf = {
            "listenAddress": f"127.0.0.1:{port}",
            "managementListenAddress": f"127.0.0.1:{mgmt}",
            "certificate": str(https / "cert.pem"),
            "privateKey": str(https / "key.pem"),
            "httpPort": http_port or servers.free_port(),
            "tlsPort": tls_port or servers.free_port(),
            "ocspResponderURL": "",
            "externalAccountBindingRequired": False,
        }
        if validity_secs:
            conf["certificateValidityPeriod"] = validity_secs
        workdir.mkdir(parents=True, exist_ok=True)
        cfg = workdir / f"pebble-{time.monotonic_ns()}.json"
        cfg.write_text(json.dumps({"pebble": conf}))
        env = dict(os.environ, PEBBLE_VA_NOSLEEP="1", PEBBLE_WFE_NONCEREJECT="0")
        self.proc = subprocess.Popen(["pebble", "-config", str(cfg)], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        self.log = servers.LogCollector(self.proc.stdout, workdir / f"{cfg.stem}.log",
                                        re.compile(r"ACME directory available"))
        if not self.log.ready.wait(30):
            self.stop()
            pytest.fail(f"pebble did not start:\n{self.log.text()}")

    @property
    def directory(self) -> str:
        return f"https://127.0.0.1:{self.port}/dir"

    def root(self, dest: Path) -> Path:
        """pebble's issuing root (it makes a new one each start)."""
        ctx = ssl.create_default_context(cafile=str(self.https / "ca.pem"))
        with urllib.request.urlopen(f"https://127.0.0.1:{self.mgmt}/roots/0", context=ctx, timeout=10) as r:
            dest.write_bytes(r.read())
        return dest

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def pebbles(tmp_path, https_ca):
    started: list[Pebble] = []

    def start(*args, **kw) -> Pebble:
        p = Pebble(tmp_path / "pebble", https_ca, *args, **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


def acme_config(pebble: Pebble, https: Path, **ports: int) -> str:
    lines = [f'acme_domain = ["{NAME}"]', f'acme_directory = "{pebble.directory}"',
             f'acme_ca_root = "{https / "ca.pem"}"', 'acme_email = "admin@example.org"']
    lines += [f"{k} = {v}" for k, v in ports.items()]
    return "\n".join(lines) + "\n"


def wait_log(srv, pattern: re.Pattern, count: int = 1, timeout: float = 60) -> list[re.Match]:
    deadline = time.monotonic() + timeout
    while True:
        found = list(pattern.finditer(srv.log.text()))
        if len(found) >= count:
            return found
        if time.monotonic() > deadline or not srv.alive():
            pytest.fail(f"no {count} x {pattern.pattern!r} in smbq's log within {timeout} s:\n{srv.log.text(60)}")
        time.sleep(0.2)


def smbq(*args: str, srv, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, SMBQ_PASSWORD=srv.password)
    return subprocess.run([str(servers.smbq_bin()), *args], env=env, capture_output=True, timeout=timeout, **kw)


def url(srv, host: str = NAME, path: str = "") -> str:
    return f"smb://{srv.user}@{host}:{srv.quic_port}/{srv.share}/{path}"


def cert_show(srv) -> dict:
    r = smbq("cert", "show", "--state-dir", str(srv.workdir / "state"), "--json", srv=srv)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_certificate_from_pebble_verifies_over_quic(start_server, pebbles, https_ca, tmp_path):
    tls_port = servers.free_port()
    pebble = pebbles(servers.free_port(), servers.free_port(), tls_port=tls_port)
    t0 = time.monotonic()
    srv = start_server("smbq", "enc", config_toml=acme_config(pebble, https_ca, acme_tls_port=tls_port))
    (m,) = wait_log(srv, REPLACED)
    print(f"certificate from pebble {time.monotonic() - t0:.1f} s after start")
    root = pebble.root(tmp_path / "pebble-root.pem")

    # Only pebble's root trusted, the server reached by name: verified.
    r = smbq("ls", "--transport", "quic", "--ca-file", str(root), url(srv), srv=srv)
    assert r.returncode == 0, r.stderr
    # The leaf the QUIC listener presents is the one logged.
    r = smbq("ls", "--transport", "quic", "--fingerprint", m.group(1), url(srv), srv=srv)
    assert r.returncode == 0, r.stderr
    # The test CA of pebble's HTTPS is no root of the issued certificate.
    r = smbq("ls", "--transport", "quic", "--ca-file", str(https_ca / "ca.pem"), url(srv), srv=srv)
    assert r.returncode == 7, r.stderr

    shown = cert_show(srv)
    assert shown["path"].endswith("acme/cert.pem")
    assert shown["sans"] == [NAME]
    assert shown["sha256"] == m.group(1)
    assert shown["chain"][0]["issuer"].startswith("CN=Pebble Intermediate CA")
    assert shown["chain"][-1]["issuer"].startswith("CN=Pebble Root CA")

    acme = srv.workdir / "state" / "acme"
    assert oct(acme.stat().st_mode & 0o777) == "0o700"
    assert (acme / "cert.pem").read_text().startswith(f"Issued through the ACME directory {pebble.directory}\n")
    names = sorted(p.name for p in acme.iterdir())
    assert names == [f"account-127.0.0.1_{pebble.port}_dir.json", "cert.pem", "key.pem"], names
    for p in acme.iterdir():
        assert oct(p.stat().st_mode & 0o777) == "0o600", p


def test_renewal_during_a_quic_transfer(start_server, pebbles, https_ca, tmp_path):
    http_port = servers.free_port()
    # 30 s certificates: renewed 20 s after notBefore.
    pebble = pebbles(servers.free_port(), servers.free_port(), http_port=http_port, validity_secs=30)
    srv = start_server("smbq", "enc", config_toml=acme_config(pebble, https_ca, acme_http_port=http_port))
    (first,) = wait_log(srv, REPLACED)
    root = pebble.root(tmp_path / "pebble-root.pem")

    # 256 MiB, sparse (no disk), with random blocks spread through it: read at
    # 2 MB/s until the renewal, it spans it.
    big = srv.share_dir / "big.bin"
    size = 256 << 20
    want = hashlib.sha256()
    with open(big, "wb") as f:
        f.truncate(size)
        blocks = {off: os.urandom(1 << 20) for off in range(0, size, 16 << 20)}
        for off, data in blocks.items():
            f.seek(off)
            f.write(data)
    with open(big, "rb") as f:
        while chunk := f.read(8 << 20):
            want.update(chunk)

    env = dict(os.environ, SMBQ_PASSWORD=srv.password)
    cat = subprocess.Popen([str(servers.smbq_bin()), "cat", "--transport", "quic", "--ca-file", str(root),
                            url(srv, path="big.bin")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got, n, t0 = hashlib.sha256(), 0, time.monotonic()
    renewed_at = None
    assert cat.stdout is not None
    # Read slowly (about 2 MB/s: the client cannot get far ahead) until the
    # renewal, then at full speed.
    while chunk := cat.stdout.read(64 << 10):
        got.update(chunk)
        n += len(chunk)
        if renewed_at is None:
            if len(REPLACED.findall(srv.log.text())) >= 2:
                renewed_at = n
            else:
                time.sleep(0.03)
                assert time.monotonic() - t0 < 120, "no renewal within 120 s"
    cat.wait(60)
    err = cat.stderr.read().decode() if cat.stderr else ""
    print(f"renewed after {renewed_at} of {size} bytes; {time.monotonic() - t0:.1f} s in all")
    assert cat.returncode == 0, err
    assert renewed_at is not None and renewed_at < size // 2, "the transfer did not span the renewal"
    assert n == size and got.hexdigest() == want.hexdigest()

    second = list(REPLACED.finditer(srv.log.text()))[1]
    assert second.group(1) != first.group(1)
    # A new connection gets the new leaf; the old one is no longer presented.
    r = smbq("ls", "--transport", "quic", "--fingerprint", second.group(1), url(srv), srv=srv)
    assert r.returncode == 0, r.stderr
    r = smbq("ls", "--transport", "quic", "--fingerprint", first.group(1), url(srv), srv=srv)
    assert r.returncode == 7, r.stderr
    assert "renewing the certificate" in srv.log.text()
    big.unlink()


def test_failed_challenge_is_reported_and_retried(start_server, pebbles, https_ca, tmp_path):
    tls_port = servers.free_port()
    port, mgmt = servers.free_port(), servers.free_port()
    # pebble validates against a port where nothing listens.
    wrong = pebbles(port, mgmt, tls_port=servers.free_port())
    srv = start_server("smbq", "enc", config_toml=acme_config(wrong, https_ca, acme_tls_port=tls_port))
    failed = re.compile(r"WARN.*ACME: obtaining a certificate for \[\"localhost\"\] from \S+ failed "
                        r"\(attempt 1; retrying in 10 s\): .*challenge")
    (m,) = wait_log(srv, failed)
    print("smbq logged:", m.group(0))
    # The CA's reason (pebble: "Failed to connect to 127.0.0.1:PORT for the tls-alpn-01 challenge").
    assert "tls-alpn-01 challenge" in m.group(0)
    # Meanwhile the generated certificate serves.
    generated = srv.workdir / "state" / "tls" / "cert.pem"
    r = smbq("ls", "--transport", "quic", "--ca-file", str(generated), url(srv), srv=srv)
    assert r.returncode == 0, r.stderr
    assert "ACME: certificate replaced" not in srv.log.text()
    shown = cert_show(srv)
    assert shown["path"].endswith("tls/cert.pem")

    # The CA fixed (a new pebble: new roots, the account forgotten).
    wrong.stop()
    t0 = time.monotonic()
    right = pebbles(port, mgmt, tls_port=tls_port)
    wait_log(srv, REPLACED, timeout=90)
    print(f"certificate {time.monotonic() - t0:.1f} s after the CA was fixed")
    assert "creating a new one" in srv.log.text()
    root = right.root(tmp_path / "pebble-root.pem")
    r = smbq("ls", "--transport", "quic", "--ca-file", str(root), url(srv), srv=srv)
    assert r.returncode == 0, r.stderr
    assert cert_show(srv)["path"].endswith("acme/cert.pem")


def test_stored_certificate_is_used_at_start(start_server, pebbles, https_ca, tmp_path):
    tls_port = servers.free_port()
    pebble = pebbles(servers.free_port(), servers.free_port(), tls_port=tls_port)
    cfg = acme_config(pebble, https_ca, acme_tls_port=tls_port)
    srv = start_server("smbq", "enc", config_toml=cfg)
    (m,) = wait_log(srv, REPLACED)
    assert srv.stop() == []
    # The same state directory again: the certificate serves from the start, nothing ordered.
    state, quic = srv.workdir / "state", servers.free_port()
    (tmp_path / "smbq.toml").write_text(cfg)
    proc = subprocess.Popen([str(servers.smbq_bin()), "serve", "--share", f"{srv.share}={srv.share_dir}",
                             "--no-tcp", "--quic", f"127.0.0.1:{quic}", "--users", str(srv.workdir / "users"),
                             "--state-dir", str(state), "--config", str(tmp_path / "smbq.toml")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        log = servers.LogCollector(proc.stderr, tmp_path / "again.log", re.compile(r"listening on quic"))
        assert log.ready.wait(30), log.text()
        assert "using ACME certificate" in log.text(), log.text()
        env = dict(os.environ, SMBQ_PASSWORD=srv.password)
        r = subprocess.run([str(servers.smbq_bin()), "ls", "--transport", "quic", "--fingerprint", m.group(1),
                            f"smb://{srv.user}@{NAME}:{quic}/{srv.share}/"], env=env, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        time.sleep(1)
        assert "ACME: created account" not in log.text() and "ACME: certificate replaced" not in log.text(), log.text()
    finally:
        proc.terminate()
        proc.wait(10)
