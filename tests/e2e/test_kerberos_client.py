"""Kerberos logons by clients (issue 35): our own `smbq` client with
`--kerberos` (the credential cache in KRB5CCNAME) over TCP and QUIC, and
Samba 4.24's smbclient over QUIC from the trixie chroot.

Our client reaches the server at 127.0.0.1 and names it `smbq.smbq.test`
for Kerberos (`--kerberos-host`): its ticket is for
cifs/smbq.smbq.test. The KDC gives aes256-cts session keys, so each
session key is 32 bytes: over TCP with AES-256-GCM the encryption keys
come from all of it and signing from its first 16 bytes (MS-SMB2
3.2.5.3.1), and a client that got this wrong could not read a single
response. Over QUIC our client takes transport-level security (no SMB
encryption inside QUIC), so there the key signs nothing either: that case
shows the logon itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import krb5_kdc
import servers
from files import random_file, sha256_file
from test_mount import _fuse_missing, mount_share

HOST = krb5_kdc.HOST
SIZE = 8 << 20
TRIXIE = Path(os.environ.get("SMBQ_TRIXIE_ROOT", "/var/cache/smbq/trixie"))

# (transport, --cipher, what the server logs for the session)
CASES = {
    "tcp-aes128gcm": ("tcp", "aes-128-gcm", "cipher=Some(Aes128Gcm) encrypt=true"),
    "tcp-aes256gcm": ("tcp", "aes-256-gcm", "cipher=Some(Aes256Gcm) encrypt=true"),
    "quic": ("quic", "aes-256-gcm", "transport_security=true"),
}


def fingerprint(srv) -> str:
    import base64
    pem = (srv.workdir / "state" / "tls" / "cert.pem").read_text()
    body = "".join(line for line in pem.splitlines() if line and not line.startswith("-----"))
    return hashlib.sha256(base64.b64decode(body)).hexdigest()


def our_client(srv, env, transport: str, *argv: str, cipher: str = "aes-128-gcm", timeout: float = 300):
    """`smbq COMMAND --kerberos ...` against `srv` at 127.0.0.1; an
    argument `smb:PATH` is PATH in the share."""
    port = srv.quic_port if transport == "quic" else srv.port
    base = f"smb://127.0.0.1:{port}/{srv.share}/"
    command, *rest = argv
    rest = [base + a.removeprefix("smb:") if a.startswith("smb:") else a for a in rest]
    cmd = [str(servers.smbq_bin()), command, "--kerberos", "--kerberos-host", HOST, "--transport", transport,
           "--cipher", cipher]
    if transport == "quic":
        cmd += ["--fingerprint", fingerprint(srv)]
    env = {k: v for k, v in env.items() if k not in ("SMBQ_PASSWORD", "SMBQ_USER")}
    return subprocess.run(cmd + rest, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _ok(r) -> str:
    assert r.returncode == 0, f"{r.args} -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def established(srv, user: str) -> list[str]:
    return [line for line in srv.log.text().splitlines() if "session established" in line and f"user={user}" in line]


@pytest.mark.parametrize("case", CASES)
def test_our_client_puts_and_gets_with_kerberos(start_server, realm, tmp_path, case):
    transport, cipher, logged = CASES[case]
    srv = krb5_kdc.start_smbq(start_server, realm, "enc")
    env = realm.login("alice")
    src = tmp_path / "up.bin"
    digest = random_file(src, SIZE)
    put = json.loads(_ok(our_client(srv, env, transport, "put", "--json", str(src), "smb:k.bin", cipher=cipher)))
    assert put["bytes"] == SIZE and put["transport"] == transport.upper(), put
    assert sha256_file(srv.share_dir / "k.bin") == digest
    back = tmp_path / "back.bin"
    _ok(our_client(srv, env, transport, "get", "smb:k.bin", str(back), cipher=cipher))
    assert sha256_file(back) == digest
    lines = established(srv, "alice")
    assert len(lines) >= 2, srv.log.text(40)
    for line in lines:
        assert logged in line, line
    # Nothing logged on by NTLM, nor as anyone else.
    assert len(lines) == len([line for line in srv.log.text().splitlines() if "session established" in line])


def test_without_a_ticket_our_client_says_to_run_kinit(start_server, realm, tmp_path):
    srv = krb5_kdc.start_smbq(start_server, realm, "enc")
    env = realm.kdc.client_env(tmp_path / "no-such-ccache")
    r = our_client(srv, env, "tcp", "ls", "smb:")
    assert r.returncode == 8, r.stdout + r.stderr
    assert "no Kerberos credentials: run kinit" in r.stderr, r.stderr
    # MIT's own words follow.
    assert "No Kerberos credentials available" in r.stderr or "not found" in r.stderr, r.stderr
    assert not [line for line in srv.log.text().splitlines() if "session established" in line]


def test_an_address_is_not_a_kerberos_name(realm, tmp_path):
    env = realm.login("alice")
    r = subprocess.run([str(servers.smbq_bin()), "ls", "--kerberos", "--transport", "tcp", "smb://127.0.0.1:1/share"],
                       env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "--kerberos-host" in r.stderr, r.stderr


def test_mount_with_kerberos(start_server, realm, tmp_path):
    """`smbq mount` takes the same options: a file copied into the mount
    arrives byte-exact."""
    if reason := _fuse_missing():
        pytest.fail(reason)
    srv = krb5_kdc.start_smbq(start_server, realm, "enc")
    # The URL's user name is ignored with --kerberos: the ticket's is used.
    kerberos = ("--kerberos", "--kerberos-host", HOST, "--cipher", "aes-256-gcm")
    with mount_share(srv, "tcp", tmp_path, extra=kerberos, env=realm.login("bob")) as m:
        src = tmp_path / "m.bin"
        digest = random_file(src, 2 << 20)
        shutil.copy(src, m.dir / "m.bin")
        assert sha256_file(srv.share_dir / "m.bin") == digest
        m.unmount()
    lines = established(srv, "bob")
    assert lines and all("cipher=Some(Aes256Gcm) encrypt=true" in line for line in lines), srv.log.text(40)


# --- Samba 4.24's smbclient over QUIC (the trixie chroot, test_samba_quic.py) ---

def _in_chroot(env_vars: dict[str, str], program: str, *args: str) -> list[str]:
    return ["unshare", "-m", "sh", "-c",
            'mount --bind /dev "$0/dev" && mount -t proc proc "$0/proc" && exec chroot "$0" "$@"',
            str(TRIXIE), "env", *[f"{k}={v}" for k, v in env_vars.items()], program, *args]


@pytest.mark.skipif(not (TRIXIE / ".smbq-ready").exists(),
                    reason=f"no trixie chroot with Samba 4.24 at {TRIXIE} (scripts/install-deps)")
def test_samba_4_24_smbclient_over_quic_with_kerberos(start_server, realm, tmp_path):
    """smbclient in the chroot, with the realm's krb5.conf and alice's
    credential cache copied in, reaches smbq over QUIC by the name
    smbq.smbq.test (at 127.0.0.1 through -I), verifies the certificate
    (made for that name) by name, and logs on with Kerberos."""
    config = f'san = ["{HOST}"]\n' + realm.server_config()
    srv = start_server("smbq", "enc", config_toml=config, env=realm.server_env())
    (srv.share_dir / "hello.txt").write_text("hello over QUIC with Kerberos\n")
    env = realm.login("alice")
    outside = Path(tempfile.mkdtemp(prefix="smbq-krb-", dir=TRIXIE / "tmp"))
    inside = "/tmp/" + outside.name
    try:
        shutil.copy(srv.workdir / "state" / "tls" / "cert.pem", outside / "ca.pem")
        shutil.copy(realm.kdc.krb5_conf, outside / "krb5.conf")
        shutil.copy(env["KRB5CCNAME"].removeprefix("FILE:"), outside / "ccache")
        want = random_file(outside / "up.bin", 4 << 20)
        opts = [f"tls cafile = {inside}/ca.pem", "tls verify peer = ca_and_name",
                f"client smb transports = quic:{srv.quic_port}"]
        argv = _in_chroot({"KRB5_CONFIG": f"{inside}/krb5.conf", "KRB5CCNAME": f"FILE:{inside}/ccache"},
                          "smbclient", f"//{HOST}/{srv.share}", "-I", "127.0.0.1", "--use-kerberos=required",
                          *[a for o in opts for a in ("--option", o)],
                          "-c", f"ls; put {inside}/up.bin up.bin; get up.bin {inside}/back.bin")
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        out = r.stdout + r.stderr
        assert r.returncode == 0 and "NT_STATUS_" not in out, out[-3000:]
        assert "hello.txt" in r.stdout, r.stdout
        assert sha256_file(srv.share_dir / "up.bin") == want == sha256_file(outside / "back.bin")
    finally:
        shutil.rmtree(outside, ignore_errors=True)
    lines = established(srv, "alice")
    assert len(lines) == 1, srv.log.text(40)
    # Samba encrypts inside QUIC by default (client smb encryption over quic = yes).
    assert "transport_security=false" in lines[0] and "encrypt=true" in lines[0], lines[0]
