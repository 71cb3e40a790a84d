"""Fixtures for the end-to-end tests: real servers on loopback ports.

Every test that takes ``server`` runs once per target in ``SMBQ_E2E_TARGETS``
(default ``smbq,smbd``): our server and Samba's smbd, started the same way, so
the tests double as a check of themselves against a reference server. Select
one with ``-k smbq`` / ``-k smbd``.

A module picks the security mode by overriding the ``mode`` fixture (default
``enc``: encryption required; see servers.py for the others).

Environment knobs:
  SMBQ_TEST_QUICK=1     smaller transfers and fewer smbtorture suites
  SMBQ_E2E_TARGETS=..   comma-separated targets (smbq, smbd)
  SMBQ_BUILD_DIR=DIR    where the binaries are (default target/ci, the profile scripts/test builds)
  SMBQ_BIN=PATH         the smbq binary (default SMBQ_BUILD_DIR/smbq)
  SMBQ_E2E_KEEP=1       keep every server's temp dir (they are kept on failure)
  SMBQ_E2E_VERBOSE=1    start smbq with -v
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers  # noqa: E402
import torture  # noqa: E402

QUICK = os.environ.get("SMBQ_TEST_QUICK") == "1"
# smbd's own results are recorded in baselines/ (scripts/record-smbd-baselines);
# SMBQ_E2E_TARGETS=smbq,smbd runs the reference server beside smbq again.
TARGETS = [t.strip() for t in os.environ.get("SMBQ_E2E_TARGETS", "smbq").split(",") if t.strip()]
HERE = Path(__file__).resolve().parent
ALLOWED_SKIPS = HERE / "allowed-skips.txt"
SESSION_START = time.time()  # smbtorture result files written after this are this run's


def pytest_collection_modifyitems(session, config, items):
    """The smbtorture suites first, the longest first (by smbd's recorded
    seconds), so that two workers do not wait on one long suite at the end;
    their parity tests last, when the suite's result file is there to read
    (a parity test that came while its suite still ran on the other worker
    would wait for it idle). Only under pytest-xdist: a single process runs
    the tests in the order given."""
    if "PYTEST_XDIST_WORKER" not in os.environ:  # set in each worker, where collection happens
        return
    seconds = torture.baseline_seconds()

    def key(item) -> tuple[int, float]:
        params = getattr(item, "callspec", None)
        if not (params and item.module.__name__ == "test_smbtorture"):
            return (1, 0.0)
        suite = params.params.get("suite")
        return (2 if item.originalname == "test_parity_with_smbd" else 0, -seconds.get(suite, 0.0))
    items.sort(key=key)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _fds() -> dict[int, str]:
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass  # the listing's own descriptor, already closed
    return out


@pytest.fixture(autouse=True)
def no_descriptor_left_behind():
    """A test closes every socket and file it opens: descriptors it leaves
    push later ones past 1023, where select() (inside smbprotocol) fails.
    Higher-scoped fixtures are set up before and torn down after this one."""
    before = _fds()
    yield
    deadline = time.monotonic() + 3
    while True:
        gc.collect()  # sockets only an unreachable object held
        left = {fd: what for fd, what in _fds().items() if before.get(fd) != what}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # a client's reader thread still closing
    if left:
        pytest.fail(f"the test left {len(left)} descriptors open: "
                    + ", ".join(f"{fd} -> {what}" for fd, what in sorted(left.items())[:20]), pytrace=False)


def load_allowed_skips(path: Path = ALLOWED_SKIPS) -> dict[str, str]:
    """test id (fnmatch pattern) -> why it may skip, in the known-failures
    format; every entry needs a reason."""
    allowed = torture.load_known(path)
    missing = [pattern for pattern, reason in allowed.items() if not reason]
    if missing:
        raise pytest.UsageError(f"{path.name}: no '# reason' for {missing}")
    return allowed


def skip_allowed(nodeid: str, allowed: dict[str, str]) -> bool:
    return torture.match_known(nodeid, allowed) is not None


UNLISTED_SKIPS: list[tuple[str, str]] = []
# scripts/record-smbd-baselines: each test's outcome, written at the end.
RECORD_OUTCOMES = os.environ.get("SMBQ_RECORD_OUTCOMES")
OUTCOMES: dict[str, str] = {}


def pytest_runtest_logreport(report):
    """A skip fails the run unless allowed-skips.txt lists it."""
    nodeid = report.nodeid.removeprefix("tests/e2e/")
    if RECORD_OUTCOMES and (report.when == "call" or not report.passed) and OUTCOMES.get(nodeid) != "failed":
        OUTCOMES[nodeid] = report.outcome
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    if not skip_allowed(nodeid, load_allowed_skips()):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        UNLISTED_SKIPS.append((nodeid, reason))


def pytest_sessionfinish(session, exitstatus):
    if RECORD_OUTCOMES and not hasattr(session.config, "workerinput"):
        Path(RECORD_OUTCOMES).write_text(json.dumps(dict(sorted(OUTCOMES.items())), indent=1) + "\n")
    if UNLISTED_SKIPS and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _failed(item) -> bool:
    return any(getattr(getattr(item, "rep_" + w, None), "failed", False) for w in ("setup", "call"))


class ServerFactory:
    """Starts servers for one test and stops them all at its end."""

    def __init__(self, item):
        self.item = item
        self.servers: list[servers.Server] = []

    def __call__(self, kind: str, mode: str = "enc", config_toml: str | None = None,
                 share_opts: str = "", smbd_share: str = "", serve_args: tuple[str, ...] = (),
                 env: dict[str, str | None] | None = None) -> servers.Server:
        if kind == "smbd":
            reason = servers.smbd_available()
            if reason:
                pytest.skip(reason)
        workdir = Path(tempfile.mkdtemp(prefix=f"smbq-e2e-{kind}-{mode}-"))
        try:
            srv = servers.start(kind, workdir, mode, config_toml, share_opts, smbd_share, serve_args, env)
        except RuntimeError as e:
            pytest.fail(f"could not start {kind} ({mode}): {e}", pytrace=False)
        self.servers.append(srv)
        return srv

    def close(self) -> list[str]:
        failures = []
        for srv in self.servers:
            problems = srv.stop()
            if problems:
                failures.append(srv.failure_text(problems))
        keep = os.environ.get("SMBQ_E2E_KEEP") == "1" or _failed(self.item) or failures
        for srv in self.servers:
            if keep:
                _drop_big_files(srv.share_dir)
                print(f"\nkept {srv.name} files in {srv.workdir}", file=sys.stderr)
            else:
                shutil.rmtree(srv.workdir, ignore_errors=True)
        return failures


def _drop_big_files(top: Path, limit: int = 16 << 20) -> None:
    """Kept directories keep logs and small files, not gigabytes."""
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            path = Path(dirpath) / name
            try:
                if path.stat().st_size > limit:
                    path.unlink()
            except OSError:
                pass


@pytest.fixture
def start_server(request):
    """A factory: ``start_server(kind, mode, config_toml, share_opts, smbd_share, serve_args, env)`` -> servers.Server
    (``share_opts``: smbq's ``--share`` options, e.g. ``",case_sensitive"``; ``smbd_share``: lines
    for smbd's share, e.g. servers.FILE_SEMANTICS).

    At the end of the test each server gets SIGTERM (SIGKILL after 10 s); the
    test errors if a server had died, would not stop, or logged a crash.
    """
    factory = ServerFactory(request.node)
    yield factory
    failures = factory.close()
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


@pytest.fixture(scope="module")
def realm(tmp_path_factory):
    """An MIT KDC on loopback with users alice and bob and the service
    cifs/smbq.smbq.test and its keytab (krb5_kdc.Realm), one per module."""
    import krb5_kdc

    if reason := krb5_kdc.available():
        pytest.fail(reason)
    r = krb5_kdc.Realm(tmp_path_factory.mktemp("realm"))
    yield r
    r.stop()


@pytest.fixture(params=TARGETS)
def target(request) -> str:
    return request.param


@pytest.fixture
def mode() -> str:
    return "enc"


@pytest.fixture
def server(start_server, target, mode) -> servers.Server:
    """One running server of the current target and mode."""
    return start_server(target, mode)


@pytest.fixture(scope="session")
def quick() -> bool:
    return QUICK


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if UNLISTED_SKIPS:
        terminalreporter.write_sep("=", f"{len(UNLISTED_SKIPS)} skips not listed in {ALLOWED_SKIPS.name}: "
                                        "the run fails", red=True)
        for nodeid, reason in UNLISTED_SKIPS:
            terminalreporter.write_line(f"{nodeid}  # {reason}")
    table = torture.summary(SESSION_START)
    if table:
        terminalreporter.write_sep("-", "smbtorture summary (smbq; smbd from baselines/smbtorture-smbd.json)")
        terminalreporter.write_line(table)
