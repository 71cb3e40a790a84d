"""Run Samba's smbtorture suites against a server and judge the results.

smbtorture 4.17 prints subunit v1 text (``--format=subunit --fullname``):
``test: NAME``, then ``success: NAME``, ``failure: NAME [``, ``error: NAME [``,
``skip: NAME [``, ``xfail: NAME``, ``uxsuccess: NAME``; a ``[`` opens details
that end at a line holding ``]``.

What runs: every ``smb2.*`` suite of smbtorture (a suite is the first two
dotted components of ``smbtorture --list``) is either in SUITES or, with its
reason, in LEFT_OUT; test_smbtorture.py checks that against the installed
smbtorture.

smbq is judged by smbtorture-known-failures.txt, one ``suite.subtest  # reason``
per line (fnmatch patterns allowed): a failure it does not list fails the
test, and so does a listed subtest that passes.

Samba's smbd is not run by the tests: its results come from a baseline,
baselines/smbtorture-smbd.json, recorded by torture_baseline.py (every suite
of SUITES, BASELINE_RUNS runs each, on Debian's smbd). A subtest counts as
passed by smbd when it passed in every recorded run (the minimum over the
runs). smbq must pass at least PARITY of the number of subtests smbd passes,
per suite.
"""

from __future__ import annotations

import dataclasses
import fcntl
import fnmatch
import json
import math
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE.parent / "out"
# One file per target and suite, written by the test that ran it.
RESULT_DIR = OUT_DIR / "smbtorture"
SUITE_TIMEOUT = 300

SUITES = [
    "smb2.connect",
    "smb2.read",
    "smb2.rw",
    "smb2.create",
    "smb2.dir",
    "smb2.getinfo",
    "smb2.setinfo",
    "smb2.lock",
    "smb2.compound",
    "smb2.credits",
    "smb2.ioctl",
    "smb2.rename",
    "smb2.delete-on-close-perms",
    "smb2.session",
    "smb2.maxfid",
    "smb2.oplock",
    "smb2.lease",
    "smb2.durable-open",
    "smb2.durable-v2-open",
    "smb2.replay",
    "smb2.multichannel",
    "smb2.notify",
    "smb2.compound_async",
    "smb2.compound_find",
    "smb2.sharemode",
    "smb2.deny",
    # File semantics (issue 17).
    "smb2.streams",
    "smb2.acls",
    "smb2.ea",
    "smb2.timestamps",
    "smb2.dosmode",
    "smb2.winattr",
    "smb2.fileid",
    "smb2.charset",
    "smb2.openattr",
    "smb2.maximum_allowed",
    "smb2.sdread",
    "smb2.mkdir",
    # The rest of smbtorture's smb2 suites (issue 32).
    "smb2.acls_non_canonical",
    "smb2.async_dosmode",
    "smb2.check-sharemode",
    "smb2.create_no_streams",
    "smb2.durable-open-disconnect",
    "smb2.durable-v2-delay",
    "smb2.ioctl-on-stream",
    "smb2.kernel-oplocks",
    "smb2.mangle",
    "smb2.notify-inotify",
    "smb2.secleak",
    "smb2.session-id",
    "smb2.session-require-signing",
    "smb2.tcon",
    "smb2.timestamp_resolution",
]

# smbtorture's smb2 suites that are not run, and why.
LEFT_OUT = {
    "smb2.hold-oplock": "interactive: opens files with batch oplocks and waits for SIGINT forever",
    "smb2.hold-sharemode": "interactive: opens files with share modes and waits for SIGINT forever",
    "smb2.bench": "a benchmark (oplock1, path-contention-shared, echo), not a conformance test",
    "smb2.aio_delay": "needs Samba's delay_inject VFS module (selftest's aio_delay_inject share; not in Debian): "
                      "aio_cancel waits for its READ to go async, which never happens against a server "
                      "answering at once, so it hangs against smbd",
    "smb2.change_notify_disabled": "tests a Samba share with 'change notify = no' (a selftest share): against "
                                   "a share with change notify its NOTIFY waits forever, smbd included",
    "smb2.samba3misc": "Samba-internal: localposixlock1 checks that smbd sees a local fcntl lock; needs "
                       "--option=torture:localdir and 'posix locking = yes', which durable handles rule out "
                       "here (smbd fails it)",
    "smb2.scan": "probes that print which opcodes and info levels answer and always succeed; scan.scan "
                 "makes smbtorture 4.17 itself panic under signing (smb2_signing.c:652, a CANCEL with "
                 "message id 0), so the suite never gets further, against smbd too",
    "smb2.set-sparse-ioctl": "a manual tool for checking a file system by hand: needs "
                             "--option=torture:filename of an existing file (smbd fails it without)",
    "smb2.zero-data-ioctl": "a manual tool for checking a file system by hand: needs "
                            "--option=torture:offset, beyond_final_zero and filename (smbd fails it without)",
    "smb2.twrp": "needs a share with snapshots and the options twrp_file and twrp_snapshot (Samba's "
                 "selftest shadow_copy2 share): skips or fails without them, against smbd too",
}

# SMBQ_TEST_QUICK: leave out the slowest suites.
QUICK_SKIP = {"smb2.create", "smb2.dir", "smb2.maxfid", "smb2.rename", "smb2.oplock", "smb2.lease", "smb2.replay",
              "smb2.notify", "smb2.secleak"}

# Issue 17's suites and those needing streams, ACLs or DOS attributes: the
# smbd baseline runs them with servers.FILE_SEMANTICS (acl_xattr,
# streams_xattr, stored DOS attributes, EAs); smbq runs on its defaults.
FILE_SEMANTICS_SUITES = ["smb2.streams", "smb2.acls", "smb2.ea", "smb2.timestamps", "smb2.dosmode", "smb2.winattr",
                         "smb2.create", "smb2.getinfo", "smb2.setinfo", "smb2.fileid", "smb2.charset",
                         "smb2.openattr", "smb2.maximum_allowed", "smb2.sdread", "smb2.delete-on-close-perms",
                         "smb2.dir", "smb2.rename", "smb2.mkdir", "smb2.ioctl",
                         "smb2.acls_non_canonical", "smb2.async_dosmode", "smb2.ioctl-on-stream",
                         "smb2.kernel-oplocks", "smb2.timestamp_resolution"]

# smbq must pass at least PARITY of the number of subtests smbd passes in
# every suite (issue 13); where it does not yet, why (the parity test is then
# a strict xfail: it fails once smbq reaches parity, to drop the entry).
PARITY = 0.9
PARITY_GAPS: dict[str, str] = {
    "smb2.create_no_streams": "tests a share without streams, which smbd's plain share is and smbq has no "
                              "option for (its shares always have streams)",
    "smb2.mangle": "smbq reports 8.3 names (FileAlternateNameInformation) but does not resolve them in paths",
    "smb2.notify-inotify": "its rename under a watched directory gets SHARING_VIOLATION from smbq's "
                           "rename-parent check",
    "smb2.session-id": "after a request with a wrong session id, the CLOSE with the right one gets "
                       "USER_SESSION_DELETED",
}

# The security mode of every run, smbq's and the baseline's: signing
# required, encryption not required (smbtorture's encryption tests ask for it
# themselves).
MODE = "sign"
# Options for every run; smbtorture's defaults otherwise.
TORTURE_OPTIONS: list[str] = []

# Subtests not run, as Samba's selftest/flapping lists its own: they race
# against themselves and hang smbd as well as smbq now and then (a hang costs
# the rest of the suite: the timeout ends it). The rest of each suite runs,
# its subtests named one by one.
FLAPPING = {
    "smb2.notify.basedir": "sends CHANGE_NOTIFY on one connection and, without waiting for its interim "
                           "answer, changes the directory through a second; a server that runs the second "
                           "connection's six requests before the first's notify has nothing to report, and the "
                           "test waits forever: with the other core busy, 7 hangs in 40 runs against smbq and "
                           "1 in 40 against Debian's smbd 4.17 (none in 20 against smbq unloaded)",
}


def suite_subtests(suite: str) -> list[str]:
    """`suite` as smbtorture's arguments: the suite's name, or its subtests
    but the FLAPPING ones when it has any."""
    if not any(name.startswith(suite + ".") for name in FLAPPING):
        return [suite]
    out = subprocess.run(["smbtorture", "--list"], capture_output=True, text=True, timeout=60).stdout
    # `--list` names a subtest twice over: smb2.notify.dir.dir.
    names = [".".join(line.split(".")[:3]) for line in out.split() if line.startswith(suite + ".")]
    return [n for n in dict.fromkeys(names) if n not in FLAPPING]  # in smbtorture's order

BASELINE = HERE / "baselines" / "smbtorture-smbd.json"
BASELINE_RUNS = 3
KNOWN_FAILURES = HERE / "smbtorture-known-failures.txt"

RESULT_RE = re.compile(r"^(success|successful|failure|fail|error|skip|xfail|uxsuccess): (.+?)(?: \[( multipart)?)?\s*$")
KINDS = {"success": "success", "successful": "success", "failure": "failure", "fail": "failure",
         "error": "error", "skip": "skip", "xfail": "xfail", "uxsuccess": "uxsuccess"}
FAILED = ("failure", "error", "uxsuccess")


@dataclasses.dataclass
class Subtest:
    name: str
    outcome: str  # success, failure, error, skip, xfail, uxsuccess
    detail: str = ""


@dataclasses.dataclass
class SuiteResult:
    suite: str
    target: str
    mode: str
    seconds: float
    returncode: int | None
    subtests: list[Subtest]
    timed_out: bool = False

    def by(self, *outcomes: str) -> list[Subtest]:
        return [t for t in self.subtests if t.outcome in outcomes]

    @property
    def failed(self) -> list[Subtest]:
        return self.by(*FAILED)

    def counts(self) -> dict[str, int]:
        return {"passed": len(self.by("success")), "failed": len(self.failed), "skipped": len(self.by("skip"))}

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "seconds": round(self.seconds, 2)}

    @classmethod
    def from_json(cls, d: dict) -> "SuiteResult":
        d = dict(d)
        d["subtests"] = [Subtest(**t) for t in d["subtests"]]
        return cls(**d)


def parse(text: str) -> list[Subtest]:
    """Subtest results from smbtorture's subunit v1 output, in order."""
    results: list[Subtest] = []
    started: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("test: "):
            started.append(line[6:].strip())
            continue
        m = RESULT_RE.match(line)
        if not m:
            continue
        detail: list[str] = []
        if line.rstrip().endswith("["):
            while i < len(lines) and lines[i].strip() != "]":
                detail.append(lines[i])
                i += 1
            i += 1
        results.append(Subtest(m.group(2), KINDS[m.group(1)], "\n".join(detail)))
    finished = {r.name for r in results}
    for name in started:
        if name not in finished:
            results.append(Subtest(name, "error", "started but no result (smbtorture died or was killed?)"))
            finished.add(name)
    return results


def listed_suites() -> set[str]:
    """The smb2 suites of the installed smbtorture."""
    out = subprocess.run(["smbtorture", "--list"], capture_output=True, text=True, timeout=60).stdout
    return {".".join(line.split(".")[:2]) for line in out.split() if line.startswith("smb2.")}


def command(server, suite: str) -> list[str]:
    return [
        "smbtorture", "--format=subunit", "--fullname",
        f"//{server.host}/{server.share}", "-p", str(server.port),
        "-U", f"{server.user}%{server.password}",
        *TORTURE_OPTIONS, *suite_subtests(suite),
    ]


def run_suite(server, suite: str, timeout: float = SUITE_TIMEOUT, log_dir: Path | None = None) -> SuiteResult:
    """Run one suite; never raises on a failing or hanging smbtorture."""
    start = time.monotonic()
    timed_out = False
    try:
        proc = subprocess.run(command(server, suite), stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout)
        out, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        timed_out = True
        out, rc = (e.stdout or b"") + (e.stderr or b""), None
    seconds = time.monotonic() - start
    text = out.decode("utf-8", "replace")
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / f"smbtorture-{server.kind}-{suite}.log").write_text(text)
    subtests = parse(text)
    if timed_out:
        subtests.append(Subtest(suite, "error", f"smbtorture {suite} did not finish within {timeout:.0f} s"))
    elif rc != 0 and not any(t.outcome in ("failure", "error") for t in subtests):
        subtests.append(Subtest(suite, "error", f"smbtorture exited with status {rc}:\n{text[-2000:]}"))
    result = SuiteResult(suite, server.kind, server.mode, seconds, rc, subtests, timed_out)
    RESULTS.setdefault(server.kind, {})[suite] = result
    return result


# target -> suite -> SuiteResult of this process's run_suite calls, for
# scripts/torture-compare's table (write_json, format_table). Tests never read
# it: one test's results reach another only through shared_result's files.
RESULTS: dict[str, dict[str, SuiteResult]] = {}


def json_path(target: str) -> Path:
    return OUT_DIR / f"smbtorture-{target}.json"


def write_json(target: str) -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = json_path(target)
    suites = RESULTS.get(target, {})
    path.write_text(json.dumps({"target": target, "suites": {s: r.to_json() for s, r in suites.items()}},
                               indent=1) + "\n")
    return path


def format_table(results: dict[str, dict[str, SuiteResult]]) -> str:
    """One row per suite, one column group per target: pass/fail/skip, seconds."""
    targets = list(results)
    suites = [s for s in SUITES if any(s in results[t] for t in targets)]
    suites += sorted({s for t in targets for s in results[t]} - set(suites))
    head = f"{'suite':30}" + "".join(f" | {t + ' pass/fail/skip s':>28}" for t in targets)
    rows = [head, "-" * len(head)]
    for s in suites:
        row = f"{s:30}"
        for t in targets:
            r = results[t].get(s)
            c = r and r.counts()
            cell = "-" if r is None else (("TIMEOUT " if r.timed_out else "")
                                          + f"{c['passed']}/{c['failed']}/{c['skipped']} {r.seconds:6.1f}")
            row += f" | {cell:>28}"
        rows.append(row)
    return "\n".join(rows)


# --- smbq's results, shared by the tests of one pytest run -------------------

def run_id() -> str:
    """This pytest run: pytest-xdist gives its workers one id; a run without
    xdist is one process."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or _PROCESS_RUN_ID


_PROCESS_RUN_ID = uuid.uuid4().hex


def result_path(target: str, suite: str) -> Path:
    return RESULT_DIR / f"{target}-{suite}.json"


def shared_result(target: str, suite: str, start) -> SuiteResult:
    """`suite`'s result against `target` in this pytest run: the first test
    to ask (whichever, in any process of the run) starts a server with
    `start()` and runs the suite; the others wait for it and read its file."""
    RESULT_DIR.mkdir(parents=True, exist_ok=True)
    path = result_path(target, suite)
    with open(RESULT_DIR / f".{target}-{suite}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            saved = json.loads(path.read_text())
            if saved.get("run_id") == run_id():
                return SuiteResult.from_json(saved["result"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        result = run_suite(start(), suite, log_dir=OUT_DIR / "logs")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"run_id": run_id(), "written": time.time(), "result": result.to_json()},
                                  indent=1) + "\n")
        tmp.replace(path)
        return result


# --- known failures -----------------------------------------------------------

def load_known(path: Path = KNOWN_FAILURES) -> dict[str, str]:
    """name-or-pattern -> reason."""
    known: dict[str, str] = {}
    if not path.exists():
        return known
    for raw in path.read_text().splitlines():
        name, _, reason = raw.partition("#")
        name = name.strip()
        if name:
            known[name] = reason.strip()
    return known


def match_known(name: str, known: dict[str, str]) -> str | None:
    for pattern in known:
        if pattern == name or fnmatch.fnmatchcase(name, pattern):
            return pattern
    return None


def judge(result: SuiteResult, known: dict[str, str]) -> list[str]:
    """What is wrong with smbq's result: failures the list does not name,
    listed subtests that passed, a timeout."""
    problems: list[str] = []
    if result.timed_out:
        problems.append(f"smbtorture {result.suite} did not finish within {SUITE_TIMEOUT} s; "
                        f"subtests seen: {[t.name for t in result.subtests]}")
    for t in result.failed:
        if match_known(t.name, known) is None:
            problems.append(f"unexpected {t.outcome}: {t.name}\n    "
                            + t.detail.strip().replace("\n", "\n    ")[:800])
    for t in result.by("success"):
        pattern = match_known(t.name, known)
        if pattern is not None:
            problems.append(f"known failure passes: {t.name} (remove '{pattern}' from {KNOWN_FAILURES.name})")
    if not result.subtests:
        problems.append(f"smbtorture {result.suite} reported no subtest at all")
    return problems


# --- the smbd baseline ----------------------------------------------------------

def load_baseline(path: Path = BASELINE) -> dict:
    return json.loads(path.read_text())


def baseline_seconds(path: Path = BASELINE) -> dict[str, float]:
    """suite -> smbd's mean seconds in the baseline (none if it is missing)."""
    try:
        suites = load_baseline(path)["suites"]
    except (OSError, ValueError, KeyError):
        return {}
    return {s: sum(e["seconds"]) / max(len(e["seconds"]), 1) for s, e in suites.items()}


def baseline_passed(baseline: dict, suite: str) -> list[str]:
    """The subtests of `suite` smbd passed in every recorded run."""
    subtests = baseline["suites"][suite]["subtests"]
    return sorted(n for n, s in subtests.items()
                  if s["passed"] == s["runs"] == baseline["runs"] and n not in FLAPPING)


def parity(result: SuiteResult, baseline: dict) -> tuple[bool, str]:
    """(smbq passes at least PARITY of smbd's count, a line saying so)."""
    passed_d = len(baseline_passed(baseline, result.suite))
    passed_q = len(result.by("success"))
    need = math.ceil(PARITY * passed_d)
    return passed_q >= need, (f"{result.suite}: smbq passes {passed_q} subtests, smbd {passed_d} "
                              f"(baseline, in all {baseline['runs']} runs): at least {need} needed")


def summary(since: float) -> str | None:
    """A table of the smbq results written since `since` (time.time()), with
    smbd's baseline counts; None when there are none."""
    rows = []
    baseline = load_baseline() if BASELINE.exists() else {"suites": {}, "runs": BASELINE_RUNS}
    known = load_known()
    for path in sorted(RESULT_DIR.glob("smbq-*.json")):
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if saved.get("written", 0) < since:
            continue
        r = SuiteResult.from_json(saved["result"])
        d = len(baseline_passed(baseline, r.suite)) if r.suite in baseline["suites"] else None
        failed = len(r.failed)
        unexpected = sum(match_known(t.name, known) is None for t in r.failed)
        rows.append((r.suite, len(r.by("success")), failed, unexpected, len(r.by("skip")), r.seconds,
                     "-" if d is None else str(d), r.timed_out))
    if not rows:
        return None
    head = f"{'suite':30} {'smbq pass':>9} {'fail':>5} {'unexp':>5} {'skip':>5} {'s':>7} {'smbd pass':>9}"
    lines = [head, "-" * len(head)]
    for suite, p, f, u, sk, sec, d, to in rows:
        lines.append(f"{suite:30} {p:9} {f:5} {u:5} {sk:5} {sec:7.1f} {d:>9}" + ("  TIMEOUT" if to else ""))
    lines.append("-" * len(head))
    lines.append(f"{'total':30} {sum(r[1] for r in rows):9} {sum(r[2] for r in rows):5} "
                 f"{sum(r[3] for r in rows):5} {sum(r[4] for r in rows):5} {sum(r[5] for r in rows):7.1f}")
    lines.append(f"(smbd pass: subtests passed in all runs of {BASELINE.relative_to(HERE.parent.parent)})")
    return "\n".join(lines)
