"""The SMB3 POSIX extensions against Samba 4.24's own client library.

smbq with ``--share NAME=DIR,posix``, and ``posix_peer.py`` driving
``samba.samba3.libsmb_samba_internal`` (Samba's smbclient library, the one
Samba's own SMB3 POSIX tests use, python3-samba 4.24 from the trixie chroot
that scripts/install-deps builds) over TCP and over QUIC: the negotiate
context, the POSIX create context, FILE_POSIX_INFORMATION in QUERY_INFO and
QUERY_DIRECTORY, modes and owners, exact-case and reserved-character names,
symlinks and special files as reparse points. Each scenario reports what
the client saw; the assertions here compare it with the files on disk.
Our own client's POSIX commands are tested in test_client_posix.py.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess

import pytest

from test_samba_quic import CONFIG, TRIXIE, _cert, _in_chroot, _ok, jail, smbclient  # noqa: F401 (jail is a fixture)

pytestmark = pytest.mark.skipif(not (TRIXIE / ".smbq-ready").exists(),
                                reason=f"no trixie chroot with Samba 4.24 at {TRIXIE} (scripts/install-deps)")

PEER = os.path.join(os.path.dirname(__file__), "posix_peer.py")
SYMLINK = 0xA000000C
NFS = 0x80000014
REPARSE_POINT = 0x400


def run(server, jail, scenario: str, transport: str = "tcp", **extra) -> dict:
    """Run one scenario of posix_peer.py in the chroot against `server`."""
    outside, inside = jail
    shutil.copy(PEER, outside / "posix_peer.py")
    shutil.copy(_cert(server), outside / "ca.pem")
    args = {"scenario": scenario, "transport": transport, "host": "smbq-quic.test", "port": server.port,
            "quic_port": server.quic_port, "share": server.share, "user": server.user,
            "password": server.password, "cafile": f"{inside}/ca.pem", **extra}
    r = subprocess.run(_in_chroot("python3", f"{inside}/posix_peer.py", json.dumps(args)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{scenario} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def posix_server(start_server, opts: str = ",posix"):
    return start_server("smbq", "sign", CONFIG, share_opts=opts)


def test_negotiated_only_with_a_posix_share(start_server, jail):
    r = run(posix_server(start_server), jail, "negotiate")
    # The one variant Samba defines; an unknown one is ignored; a list
    # that is no multiple of 16 bytes fails the NEGOTIATE, as on Samba.
    assert r == {"posix": True, "unknown_variant": False, "bad_length": "0xC000000D"}, r
    r = run(posix_server(start_server, ""), jail, "negotiate")
    assert r["posix"] is False and r["unknown_variant"] is False, r


@pytest.mark.parametrize("transport", ["tcp", "quic"])
def test_modes_owners_and_posix_information(start_server, jail, transport):
    server = posix_server(start_server)
    r = run(server, jail, "modes", transport)
    me = f"S-1-22-1-{os.getuid()}", f"S-1-22-2-{os.getgid()}"
    for name, cc in r["created"].items():
        want = int(name[-4:], 8)
        st = os.lstat(server.share_dir / name)
        # The mode asked for, exactly: no umask, setuid/setgid/sticky kept.
        assert stat.S_IMODE(st.st_mode) == want, (name, oct(st.st_mode))
        assert cc["mode"] == st.st_mode, (name, cc)
        assert (cc["owner"], cc["group"]) == me
        assert cc["nlinks"] == st.st_nlink and cc["reparse_tag"] == 0
        listed = r["listing"][name]
        assert listed["perms"] == st.st_mode and listed["nlink"] == st.st_nlink, (name, listed)
        assert (listed["owner_sid"], listed["group_sid"]) == me
        assert listed["ino"] != 0 and listed["reparse_tag"] == 0
        major, minor = os.major(st.st_dev), os.minor(st.st_dev)
        assert listed["dev"] == minor & 0xFF | major << 8 | (minor & ~0xFF) << 12, (name, listed["dev"])
        if name.startswith("file"):
            assert listed["size"] == 4 and listed["attrib"] & 0x10 == 0
        else:
            assert stat.S_ISDIR(listed["perms"]) and listed["attrib"] & 0x10
    # The share root's `..` shows nothing of what lies above it.
    dotdot = r["listing"][".."]
    assert (dotdot["owner_sid"], dotdot["group_sid"], dotdot["ino"], dotdot["dev"]) == ("S-1-0-0", "S-1-0-0", 0, 0)
    root = os.stat(server.share_dir)
    assert r["root"]["mode"] == root.st_mode and stat.S_ISDIR(r["root"]["mode"])
    assert r["qfileinfo"] == {"perms": stat.S_IFREG | 0o640, "nlink": 1, "size": 4,
                              "owner_sid": me[0], "group_sid": me[1]}
    assert r["bad_context"] == "0xC000000D", "a POSIX context of other than 4 bytes is INVALID_PARAMETER"
    assert r["plain_qfileinfo"] == "0xC0000148", "FILE_POSIX_INFORMATION needs a POSIX open (INVALID_LEVEL)"


def test_exact_case_and_reserved_characters_on_posix_opens(start_server, jail):
    server = posix_server(start_server)
    r = run(server, jail, "names")
    on_disk = sorted(os.listdir(server.share_dir))
    assert on_disk == sorted(["xx", "a", "A", "a:b", "q?", "<x>", "t "]), on_disk
    assert [n for n in r["listing"] if n not in (".", "..")] == sorted(on_disk)
    assert r["posix_XX"] == "0xC0000034", "a POSIX open matches names exactly (OBJECT_NAME_NOT_FOUND)"
    assert r["plain_XX"] == "opened", "other opens on the same share still ignore case"


def test_symlinks_and_special_files_as_reparse_points(start_server, jail):
    server = posix_server(start_server)
    os.symlink("rel", server.share_dir / "ondisk")
    os.mkfifo(server.share_dir / "fifo")
    r = run(server, jail, "symlinks")
    # Symlinks a client makes are kept as Samba keeps them: a file with
    # the reparse buffer in user.SmbReparse and the reparse attribute.
    for name, target in (("rel", "dir/target.txt"), ("abs", "/etc/passwd")):
        st = os.lstat(server.share_dir / name)
        assert stat.S_ISREG(st.st_mode)
        assert os.getxattr(server.share_dir / name, "user.SmbReparse")[:4] == SYMLINK.to_bytes(4, "little")
        got = r[name]
        assert got["listed"]["reparse_tag"] == SYMLINK and got["listed"]["attrib"] & REPARSE_POINT, got
        # ...and shown as a symlink, as Samba shows one (its POSIX type).
        assert stat.S_ISLNK(got["listed"]["perms"]) and stat.S_ISLNK(got["cc"]["mode"]), got
        assert got["cc"]["reparse_tag"] == SYMLINK
        assert got["reparse"][0] == "IO_REPARSE_TAG_SYMLINK" and got["reparse"][1][:2] == [target, target], got
    # A symlink on disk is shown as itself, its target read by readlink.
    ondisk = r["ondisk"]
    assert stat.S_ISLNK(ondisk["listed"]["perms"]) and ondisk["listed"]["reparse_tag"] == SYMLINK, ondisk
    assert ondisk["cc"]["reparse_tag"] == SYMLINK and stat.S_ISLNK(ondisk["cc"]["mode"])
    assert ondisk["reparse"] == ["IO_REPARSE_TAG_SYMLINK", ["rel", "rel", 0, 1]], ondisk
    fifo = r["fifo"]
    assert stat.S_ISFIFO(fifo["listed"]["perms"]) and fifo["listed"]["reparse_tag"] == NFS, fifo
    assert fifo["reparse"] == ["NFS_SPECFILE_FIFO"], fifo
    made = r["madefifo"]
    assert stat.S_ISFIFO(made["listed"]["perms"]) and made["listed"]["reparse_tag"] == NFS, made
    assert made["reparse"] == ["NFS_SPECFILE_FIFO"], made
    assert stat.S_ISREG(os.lstat(server.share_dir / "madefifo").st_mode), "kept as Samba keeps it"
    assert all(a is not None and a & REPARSE_POINT for a in r["plain_attrib"].values()), r["plain_attrib"]


def test_smbclient_makes_and_reads_symlinks_over_quic(start_server, jail):
    """Samba 4.24's smbclient itself, over QUIC: its `symlink` sets a
    symlink reparse point, `readlink` reads it back, `posix` finds the
    extensions offered. (Its posix_mkdir, chmod and stat need SMB1's Unix
    extensions: over SMB2 they refuse to run, against any server.)"""
    server = posix_server(start_server)
    out = _ok(smbclient(server, jail, "posix; symlink ../up/there link; readlink link; ls"))
    assert "Server doesn't support" not in out, out
    assert "\\link -> ../up/there" in out, out
    assert os.getxattr(server.share_dir / "link", "user.SmbReparse")[:4] == SYMLINK.to_bytes(4, "little")
    plain = posix_server(start_server, "")
    out = smbclient(plain, jail, "posix").stdout
    assert "Server doesn't support UNIX CIFS extensions" in out, out


def test_chmod_and_chown(start_server, jail):
    server = posix_server(start_server)
    # Root may give the file to anyone; anyone else only to themselves.
    uid, gid = (4242, 4343) if os.getuid() == 0 else (os.getuid(), os.getgid())
    r = run(server, jail, "chmod_chown", new_uid=uid, new_gid=gid)
    assert r["after_chmod"] == stat.S_IFREG | 0o751, oct(r["after_chmod"])
    assert r["after_chown"] == {"owner_sid": f"S-1-22-1-{uid}", "group_sid": f"S-1-22-2-{gid}"}
    st = os.stat(server.share_dir / "m")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o751, uid, gid)
