"""`smbq mount`: a share through FUSE, used as a local directory by cp, ls,
mv, rm, mkdir, git and fio, against smbq over QUIC, smbq over TCP and
Samba's smbd (TCP, encryption required).

Each test starts `smbq mount` in the background, waits until the directory
is a mount point, works in it, and checks on the server's side; then
`fusermount3 -u` must end the mount process with status 0. One test checks
that SIGINT unmounts cleanly too. A mount left behind by a failure is
detached lazily and its process killed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import servers
from conftest import QUICK
from files import random_file, sha256_file

MOUNT_TIMEOUT = 30.0
EXIT_TIMEOUT = 20.0
BIG = (6 if QUICK else 48) << 20
CERT_RE = re.compile(r"(?:generated|using) certificate \S+ SHA-256 (\S+)")


def _fuse_missing() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse here"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed"
    return None


class Mount:
    """One `smbq mount` process and its mount point."""

    def __init__(self, server: servers.Server, transport: str, dirpath: Path, logpath: Path, extra: tuple[str, ...] = (),
                 env: dict[str, str] | None = None):
        self.server = server
        self.dir = dirpath
        self.logpath = logpath
        if transport == "quic":
            m = CERT_RE.search(server.log.text())
            assert m, f"no certificate line in the server log:\n{server.log.text(40)}"
            port, trust = server.quic_port, ["--fingerprint", m.group(1)]
        else:
            port, trust = server.port, []
        url = f"smb://{server.user}@{server.host}:{port}/{server.share}"
        argv = [str(servers.smbq_bin()), "mount", url, str(dirpath), "--transport", transport, *trust, *extra]
        env = dict(env or os.environ, SMBQ_PASSWORD=server.password, RUST_BACKTRACE="1")
        self.log = open(logpath, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def log_text(self) -> str:
        self.log.flush()
        return self.logpath.read_text(errors="replace")[-6000:]

    def wait_mounted(self) -> None:
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"smbq mount exited with {self.proc.returncode} before mounting:\n{self.log_text()}", pytrace=False)
            if os.path.ismount(self.dir):
                return
            time.sleep(0.1)
        pytest.fail(f"{self.dir} not mounted within {MOUNT_TIMEOUT:.0f} s:\n{self.log_text()}", pytrace=False)

    def wait_exit(self) -> int:
        try:
            return self.proc.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"smbq mount still running {EXIT_TIMEOUT:.0f} s after the unmount:\n{self.log_text()}", pytrace=False)

    def unmount(self) -> None:
        """`fusermount3 -u`, and the process must exit 0."""
        r = subprocess.run(["fusermount3", "-u", str(self.dir)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"fusermount3 -u: {r.stderr}\n{self.log_text()}"
        code = self.wait_exit()
        assert code == 0, f"smbq mount exited with {code}:\n{self.log_text()}"
        assert not os.path.ismount(self.dir)

    def cleanup(self) -> None:
        """Whatever a failure left: the mount detached, the process gone."""
        if os.path.ismount(self.dir):
            subprocess.run(["fusermount3", "-u", "-z", str(self.dir)], capture_output=True, timeout=30)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


# (name, server kind, transport)
MOUNT_TARGETS = [("smbq-quic", "smbq", "quic"), ("smbq-tcp", "smbq", "tcp"), ("samba", "smbd", "tcp")]


@contextlib.contextmanager
def mount_share(server: servers.Server, transport: str, tmp_path: Path, n: str = "", extra: tuple[str, ...] = (),
                env: dict[str, str] | None = None):
    """`server`'s share mounted on tmp_path/mnt{n} (log: mount{n}.log;
    `env`: the mount's environment instead of ours), detached and its
    process gone at the end, whatever happened."""
    mnt = tmp_path / f"mnt{n}"
    mnt.mkdir()
    m = Mount(server, transport, mnt, tmp_path / f"mount{n}.log", extra, env)
    try:
        m.wait_mounted()
        yield m
    finally:
        m.cleanup()


@pytest.fixture(params=MOUNT_TARGETS, ids=[t[0] for t in MOUNT_TARGETS])
def mounted(request, start_server, tmp_path):
    """A share of the target, mounted on tmp_path/mnt: (Mount, server).
    A module may parametrize it indirectly with other targets."""
    reason = _fuse_missing()
    if reason:
        pytest.skip(reason)
    _name, kind, transport = request.param
    server = start_server(kind, "enc")
    with mount_share(server, transport, tmp_path) as m:
        yield m, server


def run(argv: list[str], cwd: Path | None = None, timeout: float = 120) -> str:
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def ls_sizes(d: Path) -> dict[str, int]:
    """Name -> size as `ls -l` shows them."""
    out = run(["ls", "-l", "--time-style=+%s", str(d)])
    sizes = {}
    for line in out.splitlines()[1:]:  # "total N" first
        perm, _links, _user, _group, size, _time, name = line.split(None, 6)
        assert perm[0] in "-d", line
        sizes[name] = int(size)
    return sizes


def test_copy_list_move_remove(mounted, tmp_path):
    m, server = mounted
    mnt, share = m.dir, server.share_dir
    src = tmp_path / "big.bin"
    digest = random_file(src, BIG)
    run(["cp", str(src), str(mnt / "big.bin")])
    (mnt / "small.txt").write_bytes(b"hello through FUSE\n")
    assert sha256_file(share / "big.bin") == digest, "the server holds what was copied in"
    back = tmp_path / "back.bin"
    run(["cp", str(mnt / "big.bin"), str(back)])
    assert sha256_file(back) == digest, "what is copied out is what was copied in"
    assert run(["sha256sum", str(mnt / "big.bin")]).split()[0] == digest

    assert ls_sizes(mnt) == {"big.bin": BIG, "small.txt": 19}

    run(["mkdir", str(mnt / "d1")])
    run(["mv", str(mnt / "small.txt"), str(mnt / "d1" / "moved.txt")])
    assert not (share / "small.txt").exists()
    assert (share / "d1" / "moved.txt").read_bytes() == b"hello through FUSE\n"
    assert (mnt / "d1" / "moved.txt").read_bytes() == b"hello through FUSE\n"
    assert ls_sizes(mnt / "d1") == {"moved.txt": 19}
    # mv over an existing file replaces it.
    (mnt / "other.txt").write_bytes(b"x")
    run(["mv", str(mnt / "other.txt"), str(mnt / "d1" / "moved.txt")])
    assert (share / "d1" / "moved.txt").read_bytes() == b"x"
    # A directory with something in it moves whole.
    run(["mv", str(mnt / "d1"), str(mnt / "d2")])
    assert (mnt / "d2" / "moved.txt").read_bytes() == b"x"

    r = subprocess.run(["rmdir", str(mnt / "d2")], capture_output=True, text=True)
    assert r.returncode != 0 and "not empty" in r.stderr.lower(), r.stderr
    run(["rm", str(mnt / "d2" / "moved.txt")])
    run(["rmdir", str(mnt / "d2")])
    run(["rm", str(mnt / "big.bin")])
    assert not (share / "d2").exists() and not (share / "big.bin").exists()
    assert ls_sizes(mnt) == {}
    assert not (mnt / "nothing").exists()

    # Overwrite in place and truncate: what is read back is what was written.
    p = mnt / "t.bin"
    p.write_bytes(b"a" * 300_000)
    with open(p, "r+b") as f:
        f.seek(100_000)
        f.write(b"b" * 10)
        f.truncate(200_000)
    data = p.read_bytes()
    assert len(data) == 200_000 and data[100_000:100_010] == b"b" * 10 and data[:100_000] == b"a" * 100_000
    assert (share / "t.bin").read_bytes() == data
    os.utime(p, (1_600_000_000, 1_600_000_000))
    assert int(p.stat().st_mtime) == 1_600_000_000
    m.unmount()


def test_git(mounted):
    m, _server = mounted
    repo = m.dir / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=smbq test", "-c", "user.email=test@example.org", "-c", "init.defaultBranch=main"]
    run([*git, "init", "-q"], cwd=repo)
    (repo / "a.txt").write_text("one\n")
    (repo / "sub").mkdir()
    (repo / "sub" / "b.txt").write_text("two\n" * 1000)
    run([*git, "add", "."], cwd=repo)
    run([*git, "commit", "-q", "-m", "first"], cwd=repo)
    (repo / "a.txt").write_text("one changed\n")
    run([*git, "commit", "-q", "-am", "second"], cwd=repo)
    assert run([*git, "log", "--format=%s"], cwd=repo).split() == ["second", "first"]
    assert run([*git, "status", "--porcelain"], cwd=repo) == ""
    run([*git, "fsck", "--strict"], cwd=repo)
    m.unmount()


HELLO_C = "#include <stdio.h>\nint main(void) { puts(\"built on the mount\"); return 0; }\n"


def test_built_program_runs(mounted):
    """Without POSIX extensions, files show 0755 as on cifs.ko's defaults,
    so a program built on the mount runs (issue 36: "Permission denied"
    with 0644)."""
    m, _server = mounted
    src = m.dir / "hello.c"
    src.write_text(HELLO_C)
    (m.dir / "d").mkdir()
    assert src.stat().st_mode & 0o777 == 0o755 and (m.dir / "d").stat().st_mode & 0o777 == 0o755
    run(["cc", "-o", str(m.dir / "hello"), str(src)])
    assert run([str(m.dir / "hello")]) == "built on the mount\n"
    m.unmount()


def test_file_and_dir_modes_are_options(start_server, tmp_path):
    if reason := _fuse_missing():
        pytest.skip(reason)
    server = start_server("smbq", "enc")
    (server.share_dir / "f.txt").write_text("x")
    (server.share_dir / "d").mkdir()
    with mount_share(server, "tcp", tmp_path, extra=("--file-mode", "0640", "--dir-mode", "0750")) as m:
        assert (m.dir / "f.txt").stat().st_mode & 0o7777 == 0o640
        assert (m.dir / "d").stat().st_mode & 0o7777 == 0o750
        m.unmount()


def test_hard_links(mounted):
    """`ln` through the mount is FileLinkInformation: Samba makes the link
    (two names, one file); smbq makes none, and link(2) says EPERM."""
    m, server = mounted
    (m.dir / "a.txt").write_text("one file\n")
    if server.kind == "smbd":
        os.link(m.dir / "a.txt", m.dir / "b.txt")
        assert (m.dir / "b.txt").read_text() == "one file\n"
        assert os.stat(server.share_dir / "a.txt").st_ino == os.stat(server.share_dir / "b.txt").st_ino
        assert (m.dir / "b.txt").stat().st_nlink == 2
    else:
        with pytest.raises(OSError) as e:
            os.link(m.dir / "a.txt", m.dir / "b.txt")
        assert e.value.errno == errno.EPERM
        assert not (m.dir / "b.txt").exists()
    m.unmount()


def test_fio_verifies(mounted, tmp_path):
    if shutil.which("fio") is None:
        pytest.skip("fio is not installed")
    m, _server = mounted
    # No verify state file left in the working directory.
    out = run(["fio", "--name=t", f"--directory={m.dir}", "--rw=randrw", "--bs=64k", "--size=16m",
               "--ioengine=psync", "--verify=crc32c", "--do_verify=1", "--verify_state_save=0",
               "--fallocate=none", "--end_fsync=1", "--runtime=30", "--output-format=terse",
               "--terse-version=3"], cwd=tmp_path, timeout=300)
    fields = out.strip().splitlines()[-1].split(";")
    assert fields[4] == "0", f"fio reported error {fields[4]}:\n{out}"
    m.unmount()


def test_sigint_unmounts(start_server, tmp_path):
    reason = _fuse_missing()
    if reason:
        pytest.skip(reason)
    server = start_server("smbq", "enc")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(server, "quic", mnt, tmp_path / "mount.log")
    try:
        m.wait_mounted()
        (mnt / "f.txt").write_bytes(b"before the signal\n")
        m.proc.send_signal(signal.SIGINT)
        code = m.wait_exit()
        assert code == 0, f"smbq mount exited with {code} on SIGINT:\n{m.log_text()}"
        assert not os.path.ismount(mnt), "SIGINT left the mount behind"
        assert (server.share_dir / "f.txt").read_bytes() == b"before the signal\n"
    finally:
        m.cleanup()
