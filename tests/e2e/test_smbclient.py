"""Samba's smbclient against the server: SMB3 with encryption, and signing only.

Each smbclient run carries one command, because smbclient's exit status only
reflects the last command of a ``-c`` list.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import QUICK
from files import random_file, sha256_file

BIG = (64 if QUICK else 256) * 1024 * 1024


@pytest.fixture(params=["enc", "sign"])
def mode(request) -> str:
    return request.param


def smbclient(server, command: str | None = None, *extra: str, timeout: float = 60, list_shares: bool = False):
    protection = "encrypt" if server.mode == "enc" else "sign"
    argv = ["smbclient"]
    argv += ["-L", f"//{server.host}"] if list_shares else [server.unc]
    argv += ["-p", str(server.port), "-A", str(server.auth_file()), "-m", "SMB3",
             "--option=client min protocol=SMB2_02", f"--client-protection={protection}", *extra]
    if command is not None:
        argv += ["-c", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def ok(server, command: str, timeout: float = 60, allow: str | None = None) -> str:
    """Run one smbclient command that must succeed; `allow` excuses error lines containing it."""
    r = smbclient(server, command, timeout=timeout)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"smbclient -c {command!r} exited {r.returncode}:\n{out}"
    errors = [line for line in out.splitlines() if "NT_STATUS_" in line and not (allow and allow in line)]
    assert not errors, f"smbclient -c {command!r} reported an error:\n{out}"
    return out


@pytest.fixture(scope="session")
def big_file(tmp_path_factory):
    """A random file of BIG bytes and its SHA-256, made once per run."""
    path = tmp_path_factory.mktemp("big") / "big.bin"
    yield path, random_file(path, BIG)
    path.unlink()


def test_file_operations(server, tmp_path):
    share = server.share_dir
    out = ok(server, "ls")
    assert re.search(r"^\s+\.\s+D\s", out, re.M), out

    local = tmp_path / "hello.txt"
    local.write_bytes(b"hello from smbclient\n")
    ok(server, f"put {local} hello.txt")
    assert (share / "hello.txt").read_bytes() == b"hello from smbclient\n"

    ok(server, "mkdir d1")
    assert (share / "d1").is_dir()

    ok(server, r"rename hello.txt d1\moved.txt")
    assert not (share / "hello.txt").exists()
    assert (share / "d1" / "moved.txt").read_bytes() == b"hello from smbclient\n"

    out = ok(server, r"ls d1\*")
    assert re.search(r"^\s+moved\.txt\s+A?\s*21\s", out, re.M), out

    # A server without 8.3 names may refuse FileAlternateNameInformation
    # (Windows does); smbclient then still prints the rest, checked below.
    out = ok(server, r"allinfo d1\moved.txt", allow="getting alt name")
    assert re.search(r"^write_time:\s+\S", out, re.M), out
    assert re.search(r"stream: \[::\$DATA\], 21 bytes", out), out

    back = tmp_path / "back.txt"
    ok(server, rf"get d1\moved.txt {back}")
    assert back.read_bytes() == b"hello from smbclient\n"

    ok(server, r"del d1\moved.txt")
    assert not (share / "d1" / "moved.txt").exists()
    ok(server, "rmdir d1")
    assert not (share / "d1").exists()

    r = smbclient(server, f"get nonexistent.txt {tmp_path / 'x'}")
    assert r.returncode != 0
    assert "NT_STATUS_OBJECT_NAME_NOT_FOUND" in r.stdout + r.stderr
    assert sorted(os.listdir(share)) == []


def test_put_get_big(server, big_file, tmp_path):
    path, digest = big_file
    ok(server, f"put {path} big.bin", timeout=600)
    on_disk = server.share_dir / "big.bin"
    assert on_disk.stat().st_size == BIG
    assert sha256_file(on_disk) == digest, "file on the share differs from what was put"
    back = tmp_path / "back.bin"
    ok(server, f"get big.bin {back}", timeout=600)
    assert back.stat().st_size == BIG
    assert sha256_file(back) == digest, "file got back differs from what was put"
    back.unlink()
    on_disk.unlink()


def test_list_shares(server):
    r = smbclient(server, list_shares=True)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert re.search(rf"^\s+{server.share}\s+Disk", out, re.M), out
