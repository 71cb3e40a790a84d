"""Start and stop the SMB servers the end-to-end tests talk to.

Two kinds of server, started the same way so every test runs against both:

* ``smbq``: our server, ``target/ci/smbq serve`` (override with
  ``SMBQ_BIN``), a user created with ``smbq user add``;
* ``smbd``: Samba's server from Debian, with a private smb.conf in a temporary
  directory on a loopback port (needs root: smbd switches to the user's uid).

Three security modes:

* ``enc``: SMB3 encryption required on the share;
* ``sign``: signing required, encryption not required (Samba: available when
  the client asks for it, its default ``if_required``; smbq: ``encrypt=off``);
* ``desired``: signing required, encryption on whenever the client can.

Used by conftest.py (pytest fixtures), scripts/torture-compare and
bench/put_get.py.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
SHARE = "share"
SMBD_UNIX_USER = "smbqtest"
MODES = ("enc", "sign", "desired")
# What counts as a crash in a server's log: a Rust panic; smbd's smb_panic()
# and fault handler.
PANIC_RE = {
    "smbq": re.compile(r"panicked at"),
    "smbd": re.compile(r"PANIC|INTERNAL ERROR"),
}


# The binaries the tests run: cargo's `ci` profile (Cargo.toml), in which
# scripts/test builds the unit tests too. SMBQ_BUILD_DIR names another
# profile's directory (target/release); SMBQ_BIN etc. single binaries.
BUILD_DIR = Path(os.environ.get("SMBQ_BUILD_DIR") or ROOT / "target" / "ci")
BUILD_HINT = "cargo build --profile ci -p smbq -p smbq-bench -p smbq-interop-smbrs (scripts/test builds it)"


def smbq_bin() -> Path:
    return Path(os.environ.get("SMBQ_BIN") or BUILD_DIR / "smbq")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smbd_available() -> str | None:
    """None when smbd can run here, otherwise the reason it cannot."""
    if shutil.which("smbd") is None:
        return "smbd is not installed"
    if os.geteuid() != 0:
        return "smbd needs root here"
    return None


class LogCollector:
    """Reads a child's output on a thread into memory and a file."""

    def __init__(self, stream, path: Path, ready_re: re.Pattern | None):
        self.lines: list[str] = []
        self.path = path
        self.ready = threading.Event()
        self.ready_match: re.Match | None = None
        self._ready_re = ready_re
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self._thread.start()

    def _run(self, stream) -> None:
        with open(self.path, "w", encoding="utf-8") as out:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\n")
                with self._lock:
                    self.lines.append(line)
                out.write(line + "\n")
                out.flush()
                if self._ready_re is not None and not self.ready.is_set():
                    m = self._ready_re.search(line)
                    if m:
                        self.ready_match = m
                        self.ready.set()
        stream.close()

    def join(self, timeout: float = 5.0) -> None:
        self._thread.join(timeout)

    def text(self, last: int | None = None) -> str:
        with self._lock:
            lines = self.lines if last is None else self.lines[-last:]
            return "\n".join(lines)


def _naming(text: str) -> list[int]:
    """The processes whose command line contains `text`."""
    out: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmdline:
            out.append(int(entry))
    return out


def _children(pid: int) -> list[int]:
    """All descendants of pid, read from /proc."""
    parent_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces; fields after the closing paren.
        fields = stat[stat.rfind(")") + 2 :].split()
        parent_of[int(entry)] = int(fields[1])
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent_of.items() if pp == p]
        out.extend(kids)
        todo.extend(kids)
    return out


def proc_cpu_seconds(pid: int) -> float:
    """utime+stime of pid plus cutime+cstime (reaped children), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2 :].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of pid, its live descendants, and its reaped children."""
    total = 0.0
    for p in [pid, *_children(pid)]:
        try:
            total += proc_cpu_seconds(p)
        except (OSError, IndexError, ValueError):
            pass
    return total


@dataclasses.dataclass
class Server:
    kind: str
    mode: str
    host: str
    port: int
    share: str
    user: str
    password: str
    share_dir: Path
    workdir: Path
    proc: subprocess.Popen
    log: LogCollector
    domain: str = "WORKGROUP"
    stopped: bool = False
    # UDP port of SMB over QUIC (smbq only).
    quic_port: int | None = None

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.mode}"

    @property
    def unc(self) -> str:
        return f"//{self.host}/{self.share}"

    @property
    def encrypt_required(self) -> bool:
        return self.mode == "enc"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def auth_file(self) -> Path:
        """A credentials file for smbclient/smbtorture ``-A``."""
        path = self.workdir / "auth.txt"
        if not path.exists():
            path.write_text(
                f"username = {self.user}\npassword = {self.password}\ndomain = {self.domain}\n"
            )
            path.chmod(0o600)
        return path

    def cpu_seconds(self) -> float:
        """CPU used so far by the server and every process it forked."""
        return tree_cpu_seconds(self.proc.pid)

    def stop(self) -> list[str]:
        """SIGTERM, SIGKILL after STOP_TIMEOUT; returns what went wrong."""
        if self.stopped:
            return []
        self.stopped = True
        problems: list[str] = []
        kids = _children(self.proc.pid)
        if self.proc.poll() is not None:
            problems.append(f"{self.name} had already exited with status {self.proc.returncode}")
        else:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                problems.append(f"{self.name} did not stop within {STOP_TIMEOUT:.0f} s of SIGTERM")
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        # smbd forks one process per client; make sure none outlives the test.
        # Its RPC helpers (samba-dcerpcd and its rpcd_* workers) detach into
        # a session of their own: they are found by this server's private
        # smb.conf on their command line.
        for pid in kids + _naming(str(self.workdir / "smb.conf")):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.log.join()
        if PANIC_RE[self.kind].search(self.log.text()):
            problems.append(f"{self.name} log shows a crash")
        if self.kind == "smbq" and self.proc.returncode not in (0, -signal.SIGTERM) and not problems:
            problems.append(f"{self.name} exited with status {self.proc.returncode}")
        return problems

    def failure_text(self, problems: list[str]) -> str:
        return "; ".join(problems) + f"\n--- last server log lines ({self.log.path}) ---\n" + self.log.text(60)


def _wait_ready(proc: subprocess.Popen, log: LogCollector, what: str, probe=None) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.join()
            raise RuntimeError(f"{what} exited with status {proc.returncode} before it was ready:\n{log.text(80)}")
        if probe is None:
            if log.ready.wait(0.1):
                return
        else:
            if probe():
                return
            time.sleep(0.1)
    proc.kill()
    proc.wait()
    log.join()
    raise RuntimeError(f"{what} not ready within {READY_TIMEOUT:.0f} s:\n{log.text(80)}")


def _random_password() -> str:
    # Letters and digits only, so it survives every command line and file format.
    return "Pw" + secrets.token_hex(12)


def start_smbq(workdir: Path, mode: str, config_toml: str | None = None, verbose: bool = False,
               share_opts: str | None = "", share_dir: Path | None = None,
               env: dict[str, str | None] | None = None, serve_args: tuple[str, ...] = ()) -> Server:
    """``share_opts``: appended to the ``--share`` flag (e.g. ``",case_sensitive"``);
    ``None``: no ``--share`` flag, the shares are ``config_toml``'s;
    ``share_dir``: serve that existing directory (another server's share)
    instead of a new one in ``workdir``; ``env``: variables to set for the
    server (None: unset); ``serve_args``: more ``smbq serve`` flags."""
    binary = smbq_bin()
    if not binary.exists():
        raise RuntimeError(f"{binary} does not exist: {BUILD_HINT}")
    if share_dir is None:
        share_dir = workdir / "share"
        share_dir.mkdir()
    state_dir = workdir / "state"
    state_dir.mkdir()
    users = workdir / "users"
    user = "tester"
    password = _random_password()
    r = subprocess.run(
        [str(binary), "user", "add", user, "--users", str(users), "--password-stdin"],
        input=password + "\n", capture_output=True, text=True, timeout=30,
    )
    if r.returncode != 0:
        raise RuntimeError(f"smbq user add failed ({r.returncode}): {r.stderr}")
    port = free_port()
    encrypt = {"enc": "required", "sign": "off", "desired": "desired"}[mode]
    argv = [
        str(binary), "serve",
        *(["--share", f"{SHARE}={share_dir},encrypt={encrypt}{share_opts}"] if share_opts is not None else []),
        "--tcp", f"127.0.0.1:{port}",
        # Port 0: the kernel picks a free UDP port; the log line tells which.
        "--quic", "127.0.0.1:0",
        "--users", str(users),
        "--state-dir", str(state_dir),
        # Server-wide policy too, so "sign" does not ask clients to encrypt.
        "--encrypt", encrypt,
        "--signing-required",
    ]
    if config_toml is not None:
        cfg = workdir / "smbq.toml"
        cfg.write_text(config_toml)
        argv += ["--config", str(cfg)]
    argv += serve_args
    if verbose or os.environ.get("SMBQ_E2E_VERBOSE"):
        argv.append("-v")
    env_vars = dict(os.environ, RUST_BACKTRACE="1")
    for k, v in (env or {}).items():
        if v is None:
            env_vars.pop(k, None)
        else:
            env_vars[k] = v
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env_vars)
    # The QUIC line comes after the TCP one: when it is there, both listen.
    log = LogCollector(proc.stderr, workdir / "server.log", re.compile(r"listening on quic (\S+):(\d+)"))
    _wait_ready(proc, log, "smbq serve")
    assert log.ready_match is not None
    quic_port = int(log.ready_match.group(2))
    tcp = re.search(r"listening on tcp (\S+):(\d+)", log.text(200))
    assert tcp is not None, log.text(200)
    return Server("smbq", mode, "127.0.0.1", int(tcp.group(2)), SHARE, user, password, share_dir, workdir, proc, log,
                  quic_port=quic_port)


def _ensure_unix_user(name: str) -> None:
    if subprocess.run(["id", name], capture_output=True).returncode == 0:
        return
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


# The share options of issue 17's comparisons: what Windows clients expect
# of a share, kept as smbq keeps it (NT ACLs in security.NTACL, streams, DOS
# attributes and EAs in user xattrs).
FILE_SEMANTICS = """  vfs objects = acl_xattr streams_xattr
  store dos attributes = yes
  ea support = yes
"""


def start_smbd(workdir: Path, mode: str, share_options: str = "") -> Server:
    """smbd on a private config; `share_options` are added to the share
    (e.g. FILE_SEMANTICS)."""
    reason = smbd_available()
    if reason:
        raise RuntimeError(reason)
    # smbd serves as the unix user: it needs to reach and write the share.
    workdir.chmod(0o755)
    share_dir = workdir / "share"
    share_dir.mkdir()
    share_dir.chmod(0o777)
    for d in ("private", "lock", "state", "pid", "cache", "ncalrpc", "log"):
        (workdir / d).mkdir()
    port = free_port()
    security = {
        "enc": "server smb encrypt = required\n  server signing = mandatory",
        # Samba's default: encryption available when a client asks for it.
        "sign": "server smb encrypt = if_required\n  server signing = mandatory",
        "desired": "server smb encrypt = desired\n  server signing = mandatory",
    }[mode]
    conf = workdir / "smb.conf"
    conf.write_text(f"""[global]
  smb ports = {port}
  bind interfaces only = yes
  interfaces = 127.0.0.1/8
  private dir = {workdir}/private
  lock directory = {workdir}/lock
  state directory = {workdir}/state
  pid directory = {workdir}/pid
  cache directory = {workdir}/cache
  ncalrpc dir = {workdir}/ncalrpc
  log file = {workdir}/log/log.%m
  server role = standalone server
  passdb backend = tdbsam
  map to guest = never
  server min protocol = SMB2_02
  disable netbios = yes
  load printers = no
  printing = bsd
  printcap name = /dev/null
  disable spoolss = yes
  # What Samba's durable handles need (smbd refuses them otherwise).
  kernel oplocks = no
  kernel share modes = no
  posix locking = no
  {security}
[{SHARE}]
  path = {share_dir}
  read only = no
{share_options}""")
    _ensure_unix_user(SMBD_UNIX_USER)
    password = _random_password()
    r = subprocess.run(["smbpasswd", "-c", str(conf), "-a", "-s", SMBD_UNIX_USER],
                       input=f"{password}\n{password}\n", capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"smbpasswd failed ({r.returncode}): {r.stdout}{r.stderr}")
    proc = subprocess.Popen(
        ["smbd", "--foreground", "--no-process-group", "--debug-stdout", "-s", str(conf)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        # smbd's parent signals its whole process group when it exits: give it
        # a group of its own so that is not us.
        start_new_session=True,
    )
    log = LogCollector(proc.stdout, workdir / "server.log", None)
    _wait_ready(proc, log, "smbd", probe=lambda: _port_open(port))
    return Server("smbd", mode, "127.0.0.1", port, SHARE, SMBD_UNIX_USER, password, share_dir, workdir, proc, log)


def start(kind: str, workdir: Path, mode: str, config_toml: str | None = None, share_opts: str | None = "",
          smbd_share: str = "", serve_args: tuple[str, ...] = (), env: dict[str, str | None] | None = None) -> Server:
    """`config_toml`, `share_opts` (`--share` options), `serve_args` (more
    `smbq serve` flags) and `env` (variables for the server) configure
    smbq, `smbd_share` smbd's share."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode}")
    if kind == "smbq":
        return start_smbq(workdir, mode, config_toml, share_opts=share_opts, serve_args=serve_args, env=env)
    if kind == "smbd":
        return start_smbd(workdir, mode, smbd_share)
    raise ValueError(f"unknown server kind {kind}")
