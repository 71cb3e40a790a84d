"""Kerberos logons (issue 35) against an MIT KDC on loopback: Samba's
smbclient and python smbprotocol (pyspnego with gssapi) list, put and get
byte-exact, signed, and sealed with AES-128-GCM and AES-256-GCM. With
AES-256 the encryption keys come from the whole 32-byte Kerberos session
key while signing uses its first 16 bytes (MS-SMB2 3.3.5.5.3): a server
that got this wrong could not decrypt a single request.

The KDC gives aes256-cts session keys, so every logon here has a 32-byte
session key."""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest

import krb5_kdc
from files import random_file, sha256_file

# The size the issue names, in quick runs too: a few seconds on loopback.
SIZE = 64 << 20
HOST = krb5_kdc.HOST

# (server mode, smbclient protection, smbclient cipher option, the cipher the server logs)
CASES = {
    "signed": ("sign", "sign", None, None),
    "aes128gcm": ("enc", "encrypt", "aes-128-gcm", "Aes128Gcm"),
    "aes256gcm": ("enc", "encrypt", "aes-256-gcm", "Aes256Gcm"),
}


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "big.bin"
    return path, random_file(path, SIZE)


def smbclient(srv, env, command: str, *extra: str, protection: str = "encrypt", cipher: str | None = None):
    argv = ["smbclient", f"//{HOST}/{srv.share}", "-I", "127.0.0.1", "-p", str(srv.port), "--use-kerberos=required",
            "-m", "SMB3", f"--client-protection={protection}", *extra, "-c", command]
    if cipher:
        argv.append(f"--option=client smb3 encryption algorithms={cipher}")
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def established(srv, user: str) -> list[str]:
    return [line for line in srv.log.text().splitlines() if "session established" in line and f"user={user}" in line]


@pytest.mark.parametrize("case", CASES)
def test_smbclient_kerberos_lists_puts_and_gets(start_server, realm, big, tmp_path, case):
    mode, protection, cipher, logged = CASES[case]
    srv = krb5_kdc.start_smbq(start_server, realm, mode)
    env = realm.login("alice")
    path, digest = big
    put = smbclient(srv, env, f"put {path} big.bin", protection=protection, cipher=cipher)
    assert put.returncode == 0, put.stdout + put.stderr
    assert sha256_file(srv.share_dir / "big.bin") == digest
    ls = smbclient(srv, env, "ls", protection=protection, cipher=cipher)
    assert ls.returncode == 0 and re.search(rf"big\.bin\s+A\s+{SIZE}\b", ls.stdout), ls.stdout + ls.stderr
    out = tmp_path / "back.bin"
    get = smbclient(srv, env, f"get big.bin {out}", protection=protection, cipher=cipher)
    assert get.returncode == 0, get.stdout + get.stderr
    assert sha256_file(out) == digest
    lines = established(srv, "alice")
    assert len(lines) == 3, srv.log.text(40)
    for line in lines:
        if logged:
            assert f"cipher=Some({logged})" in line and "encrypt=true" in line, line
        else:
            assert "encrypt=false" in line, line


@pytest.mark.parametrize("cipher", ["aes128gcm", "aes256gcm"])
def test_smbprotocol_kerberos_puts_and_gets(start_server, realm, big, tmp_path, cipher, monkeypatch):
    from smbprotocol.connection import Ciphers, Connection
    from smbprotocol.open import CreateDisposition, CreateOptions, FilePipePrinterAccessMask, ImpersonationLevel, Open, ShareAccess
    from smbprotocol.session import Session
    from smbprotocol.tree import TreeConnect

    srv = krb5_kdc.start_smbq(start_server, realm, "enc")
    for k, v in realm.login("bob").items():
        if k.startswith("KRB5"):
            monkeypatch.setenv(k, v)
    algo = {"aes128gcm": Ciphers.AES_128_GCM, "aes256gcm": Ciphers.AES_256_GCM}[cipher]
    conn = Connection(uuid.uuid4(), "127.0.0.1", srv.port)
    conn.connect(preferred_encryption_algos=[algo])
    try:
        session = Session(conn, require_encryption=True, auth_protocol="kerberos", hostname_override=HOST)
        session.connect()
        tree = TreeConnect(session, rf"\\{HOST}\{srv.share}")
        tree.connect()
        path, digest = big
        data = path.read_bytes()
        f = Open(tree, "sp.bin")
        f.create(ImpersonationLevel.Impersonation, FilePipePrinterAccessMask.GENERIC_READ | FilePipePrinterAccessMask.GENERIC_WRITE,
                 0, ShareAccess.FILE_SHARE_READ, CreateDisposition.FILE_OVERWRITE_IF, CreateOptions.FILE_NON_DIRECTORY_FILE)
        chunk = min(conn.max_write_size, 1 << 20)
        for off in range(0, len(data), chunk):
            f.write(data[off:off + chunk], off)
        back = bytearray()
        chunk = min(conn.max_read_size, 1 << 20)
        while len(back) < len(data):
            back += f.read(len(back), min(chunk, len(data) - len(back)))
        f.close()
        assert bytes(back) == data
        assert sha256_file(srv.share_dir / "sp.bin") == digest
        assert len(session.session_key) == 16
    finally:
        conn.disconnect(True)
    lines = established(srv, "bob")
    want = {"aes128gcm": "Aes128Gcm", "aes256gcm": "Aes256Gcm"}[cipher]
    assert len(lines) == 1 and f"cipher=Some({want})" in lines[0], srv.log.text(40)


def test_negotiate_offers_kerberos_then_ntlm(start_server, realm):
    """The NEGOTIATE response's SPNEGO hint lists MS-KRB5, KRB5 and NTLMSSP, in that order."""
    from smbprotocol.connection import Connection

    srv = krb5_kdc.start_smbq(start_server, realm, "enc")
    conn = Connection(uuid.uuid4(), "127.0.0.1", srv.port)
    conn.connect()
    try:
        blob = bytes(conn.gss_negotiate_token)
    finally:
        conn.disconnect(True)
    ms_krb5, krb5, ntlm = (bytes.fromhex(h) for h in ("2a864882f712010202", "2a864886f712010202", "2b06010401823702020a"))
    positions = [blob.find(oid) for oid in (ms_krb5, krb5, ntlm)]
    assert all(p > 0 for p in positions) and positions == sorted(positions), blob.hex()


def test_ntlm_off_refuses_passwords_and_takes_kerberos(start_server, realm, tmp_path):
    srv = krb5_kdc.start_smbq(start_server, realm, "enc", extra_config="[auth]\nntlm = false\n")
    r = subprocess.run(["smbclient", srv.unc, "-p", str(srv.port), "-U", f"{srv.user}%{srv.password}", "--use-kerberos=off",
                        "-m", "SMB3", "--client-protection=encrypt", "-c", "ls"],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode != 0, r.stdout
    assert not established(srv, srv.user), srv.log.text(40)
    ok = smbclient(srv, realm.login("alice"), "ls")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert len(established(srv, "alice")) == 1
