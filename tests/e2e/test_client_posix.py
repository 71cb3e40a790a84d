"""`smbq --posix`: our client with the SMB3 POSIX extensions against smbq
serving a share with the `posix` option (`--share share=DIR,posix`).

Checked against the files in the share directory: `ls -l --posix` shows the
modes, link counts, owners and groups os.lstat gives; `chmod` and `chown`
change them on disk; `ln -s` makes a symlink `readlink` and `ls -l` show
with its target, and a symlink made on disk is listed as one; names match
in their exact case with `--posix` and ignoring it without; and a share
without `posix` makes every `--posix` command say that the server does not
offer the extensions. Without `--posix`, the POSIX commands are usage
errors and `ls` prints what it always printed.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from test_client import Peer

POSIX = ["--posix"]


@pytest.fixture(params=["tcp", "quic"])
def posix_peer(request, start_server) -> Peer:
    return Peer(start_server("smbq", "enc", share_opts=",posix"), request.param)


@pytest.fixture
def tcp_peer(start_server) -> Peer:
    return Peer(start_server("smbq", "enc", share_opts=",posix"), "tcp")


def posix(peer: Peer, *argv: str, check: bool = True):
    return peer.run(*argv, check=check, extra=POSIX)


def ls_long(peer: Peer, path: str = "") -> dict[str, dict]:
    """`ls -l --posix` lines by name: mode string, links, uid, gid, size, target."""
    out = {}
    for line in posix(peer, "ls", "-l", peer.url(path)).stdout.splitlines():
        mode, links, uid, gid, size, _date, _time, rest = line.split(None, 7)
        name, _, target = rest.partition(" -> ")
        out[name] = {"mode": mode, "links": int(links), "uid": int(uid), "gid": int(gid), "size": int(size),
                     "target": target or None}
    return out


def assert_listed_as_on_disk(entry: dict, path: Path) -> None:
    st = os.lstat(path)
    assert entry["mode"] == stat.filemode(st.st_mode), (path, entry)
    assert (entry["links"], entry["uid"], entry["gid"]) == (st.st_nlink, st.st_uid, st.st_gid), (path, entry)
    if stat.S_ISREG(st.st_mode):
        assert entry["size"] == st.st_size, (path, entry)


def test_modes_and_owners_are_listed_as_on_disk(posix_peer: Peer, tmp_path: Path):
    peer, share = posix_peer, posix_peer.srv.share_dir
    local = tmp_path / "f.txt"
    local.write_bytes(b"posix\n" * 100)
    posix(peer, "mkdir", peer.url("dir"))
    posix(peer, "put", str(local), peer.url("dir/f.txt"))
    # New files get the client's default modes (the context carries them).
    assert stat.S_IMODE(os.stat(share / "dir").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(share / "dir" / "f.txt").st_mode) == 0o644
    os.chmod(share / "dir" / "f.txt", 0o640)

    listed = ls_long(peer, "dir")
    assert set(listed) == {"f.txt"}
    assert_listed_as_on_disk(listed["f.txt"], share / "dir" / "f.txt")
    assert listed["f.txt"]["mode"] == "-rw-r-----"
    root = ls_long(peer)
    assert_listed_as_on_disk(root["dir"], share / "dir")
    assert root["dir"]["mode"].startswith("d")

    st = os.stat(share / "dir" / "f.txt")
    entries = json.loads(posix(peer, "ls", "--json", peer.url("dir")).stdout)
    assert [(e["name"], e["type"], e["mode"], e["uid"], e["gid"], e["links"], e["size"]) for e in entries] == [
        ("f.txt", "file", 0o640, st.st_uid, st.st_gid, st.st_nlink, st.st_size)]
    assert entries[0]["owner"] == f"S-1-22-1-{st.st_uid}" and entries[0]["group"] == f"S-1-22-2-{st.st_gid}"

    text = posix(peer, "stat", peer.url("dir/f.txt"), peer.url("dir")).stdout
    assert "  mode: 0640 (-rw-r-----)" in text and f"  uid: {st.st_uid}" in text and f"  gid: {st.st_gid}" in text
    assert "  type: file" in text and "  type: directory" in text
    assert f"  links: {st.st_nlink}" in text
    [one] = json.loads(posix(peer, "stat", "--json", peer.url("dir")).stdout)
    assert (one["type"], one["mode"]) == ("directory", 0o755)


def test_chmod_changes_the_mode_on_disk(tcp_peer: Peer, tmp_path: Path):
    peer, share = tcp_peer, tcp_peer.srv.share_dir
    local = tmp_path / "x"
    local.write_text("x")
    posix(peer, "put", str(local), peer.url("x"))
    posix(peer, "mkdir", peer.url("d"))
    posix(peer, "chmod", "600", peer.url("x"))
    assert stat.S_IMODE(os.stat(share / "x").st_mode) == 0o600
    posix(peer, "chmod", "0751", peer.url("d"), peer.url("x"))
    assert stat.S_IMODE(os.stat(share / "d").st_mode) == 0o751
    assert stat.S_IMODE(os.stat(share / "x").st_mode) == 0o751
    assert ls_long(peer)["d"]["mode"] == "drwxr-x--x"

    r = posix(peer, "chmod", "u+x", peer.url("x"), check=False)
    assert r.returncode == 2 and "octal" in r.stderr
    r = posix(peer, "chmod", "644", peer.url("missing"), check=False)
    assert r.returncode == 3, r.stderr


def test_chown(tcp_peer: Peer, tmp_path: Path):
    peer, share = tcp_peer, tcp_peer.srv.share_dir
    local = tmp_path / "owned"
    local.write_text("mine")
    posix(peer, "put", str(local), peer.url("owned"))
    before = os.stat(share / "owned")
    posix(peer, "chown", f"{before.st_uid}:{before.st_gid}", peer.url("owned"))
    posix(peer, "chown", str(before.st_uid), peer.url("owned"))
    posix(peer, "chown", f":{before.st_gid}", peer.url("owned"))
    after = os.stat(share / "owned")
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    if os.geteuid() == 0:
        posix(peer, "chown", "12345:23456", peer.url("owned"))
        st = os.stat(share / "owned")
        assert (st.st_uid, st.st_gid) == (12345, 23456)
        entry = ls_long(peer)["owned"]
        assert (entry["uid"], entry["gid"]) == (12345, 23456)
    r = posix(peer, "chown", "root", peer.url("owned"), check=False)
    assert r.returncode == 2 and "numbers" in r.stderr


def test_symlinks(tcp_peer: Peer, tmp_path: Path):
    peer, share = tcp_peer, tcp_peer.srv.share_dir
    local = tmp_path / "file.txt"
    local.write_text("pointed at\n")
    posix(peer, "mkdir", peer.url("dir"))
    posix(peer, "put", str(local), peer.url("dir/file.txt"))

    posix(peer, "ln", "-s", "file.txt", peer.url("dir/link"))
    assert posix(peer, "readlink", peer.url("dir/link")).stdout == "file.txt\n"
    posix(peer, "ln", "-s", "../dir/file.txt", peer.url("dir/up"))
    [got] = json.loads(posix(peer, "readlink", "--json", peer.url("dir/up")).stdout)
    assert got["target"] == "../dir/file.txt"

    os.symlink("file.txt", share / "dir" / "ondisk")
    os.symlink("/nowhere/at/all", share / "dir" / "dangling")
    listed = ls_long(peer, "dir")
    assert set(listed) == {"file.txt", "link", "up", "ondisk", "dangling"}
    for name, target in [("link", "file.txt"), ("up", "../dir/file.txt"), ("ondisk", "file.txt"), ("dangling", "/nowhere/at/all")]:
        assert listed[name]["mode"].startswith("l"), (name, listed[name])
        assert listed[name]["target"] == target, (name, listed[name])
    assert listed["file.txt"]["target"] is None and listed["file.txt"]["mode"].startswith("-")
    assert_listed_as_on_disk(listed["ondisk"], share / "dir" / "ondisk")
    assert posix(peer, "readlink", peer.url("dir/ondisk")).stdout == "file.txt\n"

    entries = {e["name"]: e for e in json.loads(posix(peer, "ls", "--json", peer.url("dir")).stdout)}
    assert (entries["link"]["type"], entries["link"]["target"]) == ("symlink", "file.txt")
    assert "target" not in entries["file.txt"]
    # A symlink is itself, not what it points at.
    text = posix(peer, "stat", peer.url("dir/dangling")).stdout
    assert "  type: symlink" in text and "  target: /nowhere/at/all" in text
    line = posix(peer, "ls", "-l", peer.url("dir/link")).stdout
    assert line.startswith("l") and line.rstrip().endswith("link -> file.txt"), line

    r = posix(peer, "ln", "-s", "file.txt", peer.url("dir/link"), check=False)
    assert r.returncode == 5, r.stderr
    r = posix(peer, "readlink", peer.url("dir/file.txt"), check=False)
    assert r.returncode != 0
    r = posix(peer, "ln", "file.txt", peer.url("dir/hard"), check=False)
    assert r.returncode == 2 and "-s" in r.stderr


def test_names_match_in_their_case_only_with_posix(tcp_peer: Peer, tmp_path: Path):
    peer, share = tcp_peer, tcp_peer.srv.share_dir
    small, big, b = tmp_path / "small", tmp_path / "big", tmp_path / "b"
    small.write_text("a\n")
    big.write_text("A\n")
    b.write_text("b\n")
    posix(peer, "put", str(small), peer.url("a"))
    posix(peer, "put", str(big), peer.url("A"))
    assert (share / "a").read_text() == "a\n" and (share / "A").read_text() == "A\n"
    assert {"a", "A"} <= set(ls_long(peer))
    assert posix(peer, "cat", peer.url("A")).stdout == "A\n"

    posix(peer, "put", str(b), peer.url("b"))
    r = posix(peer, "cat", peer.url("B"), check=False)
    assert r.returncode == 3, r.stderr
    # Without --posix the same share matches names ignoring case.
    assert peer.run("cat", peer.url("B")).stdout == "b\n"


def test_without_posix(tcp_peer: Peer, start_server, tmp_path: Path):
    # The POSIX commands need --posix ...
    for argv in (["chmod", "644", tcp_peer.url("x")], ["chown", "0", tcp_peer.url("x")],
                 ["ln", "-s", "t", tcp_peer.url("l")], ["readlink", tcp_peer.url("l")]):
        r = tcp_peer.run(*argv, check=False)
        assert r.returncode == 2 and "--posix" in r.stderr, (argv, r.stderr)
    # ... and without it ls prints what it always did.
    local = tmp_path / "f"
    local.write_text("f")
    tcp_peer.run("put", str(local), tcp_peer.url("f"))
    tcp_peer.run("mkdir", tcp_peer.url("d"))
    lines = tcp_peer.run("ls", tcp_peer.url()).stdout.splitlines()
    assert len(lines) == 2 and all(re.match(r"^[-d] +\d+  \d{4}-\d\d-\d\d \d\d:\d\d  ", l) for l in lines), lines
    assert lines == tcp_peer.run("ls", "-l", tcp_peer.url()).stdout.splitlines()
    entries = json.loads(tcp_peer.run("ls", "--json", tcp_peer.url()).stdout)
    assert all("mode" not in e and "type" not in e for e in entries)

    # A share without `posix`: the server does not offer the extensions.
    plain = Peer(start_server("smbq", "enc"), "tcp")
    plain.run("put", str(local), plain.url("f"))
    for argv in (["ls", "-l", plain.url()], ["stat", plain.url("f")], ["chmod", "644", plain.url("f")],
                 ["chown", "0", plain.url("f")], ["ln", "-s", "f", plain.url("l")], ["readlink", plain.url("f")]):
        r = posix(plain, *argv, check=False)
        assert r.returncode == 1 and "POSIX extensions" in r.stderr and "does not offer" in r.stderr, (argv, r.stderr)
    assert not (plain.srv.share_dir / "l").exists()
