"""Run Samba's smbtorture suites against a server and judge the results.

smbtorture 4.17 prints subunit v1 text (``--format=subunit --fullname``):
``test: NAME``, then ``success: NAME``, ``failure: NAME [``, ``error: NAME [``,
``skip: NAME [``, ``xfail: NAME``, ``uxsuccess: NAME``; a ``[`` opens details
that end at a line holding ``]``.

Known failures live in one file per target (smbtorture-known-failures.txt for
smbq, smbtorture-known-failures-smbd.txt for Samba's own smbd with our plain
config), one ``suite.subtest  # reason`` per line; fnmatch patterns allowed.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE.parent / "out"
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
]
# SMBQ_TEST_QUICK: leave out the slowest suites.
QUICK_SKIP = {"smb2.create", "smb2.dir", "smb2.maxfid", "smb2.rename", "smb2.oplock", "smb2.lease", "smb2.replay",
              "smb2.notify"}

# Issue 17's suites: smbd runs them with servers.FILE_SEMANTICS (acl_xattr,
# streams_xattr, stored DOS attributes, EAs); smbq on its defaults.
FILE_SEMANTICS_SUITES = ["smb2.streams", "smb2.acls", "smb2.ea", "smb2.timestamps", "smb2.dosmode", "smb2.winattr",
                         "smb2.create", "smb2.getinfo", "smb2.setinfo", "smb2.fileid", "smb2.charset",
                         "smb2.openattr", "smb2.maximum_allowed", "smb2.sdread", "smb2.delete-on-close-perms",
                         "smb2.dir", "smb2.rename", "smb2.mkdir", "smb2.ioctl"]

# The suites in which smbq must pass at least PARITY of the subtests
# Samba's smbd passes on the same machine in the same run (issue 13), and
# where it does not yet, why.
PARITY = 0.9
PARITY_SUITES = ["smb2.oplock", "smb2.lease", "smb2.durable-open", "smb2.durable-v2-open", "smb2.replay",
                 "smb2.multichannel", "smb2.session", "smb2.notify", "smb2.compound_async", "smb2.compound_find",
                 "smb2.sharemode", "smb2.deny", "smb2.lock", "smb2.credits", "smb2.connect",
                 *FILE_SEMANTICS_SUITES]
PARITY_GAPS: dict[str, str] = {
}

# Options for every run; smbtorture's defaults otherwise.
TORTURE_OPTIONS: list[str] = []

RESULT_RE = re.compile(r"^(success|successful|failure|fail|error|skip|xfail|uxsuccess): (.+?)(?: \[( multipart)?)?\s*$")
KINDS = {"success": "success", "successful": "success", "failure": "failure", "fail": "failure",
         "error": "error", "skip": "skip", "xfail": "xfail", "uxsuccess": "uxsuccess"}

# target -> suite -> SuiteResult, filled by run_suite's callers for reports.
RESULTS: dict[str, dict[str, "SuiteResult"]] = {}


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
    known: dict[str, str] = dataclasses.field(default_factory=dict)

    def by(self, *outcomes: str) -> list[Subtest]:
        return [t for t in self.subtests if t.outcome in outcomes]

    @property
    def failed(self) -> list[Subtest]:
        return self.by("failure", "error", "uxsuccess")

    def unexpected(self) -> list[Subtest]:
        """Failures that the known-failures list does not excuse."""
        return [t for t in self.failed if match_known(t.name, self.known) is None]

    def known_now_passing(self) -> list[str]:
        passed = {t.name for t in self.by("success")}
        return sorted(n for n in passed if match_known(n, self.known) is not None)

    def counts(self) -> dict[str, int]:
        return {
            "passed": len(self.by("success")),
            "failed": len(self.failed),
            "skipped": len(self.by("skip")),
            "xfail": len(self.by("xfail")),
            "known_failures": len(self.failed) - len(self.unexpected()),
            "unexpected_failures": len(self.unexpected()),
        }

    def to_json(self) -> dict:
        return {
            **self.counts(),
            "seconds": round(self.seconds, 2),
            "mode": self.mode,
            "returncode": self.returncode,
            "timed_out": self.timed_out,
            "failures": {t.name: t.detail.strip()[:500] for t in self.failed},
            "unexpected": [t.name for t in self.unexpected()],
            "skips": [t.name for t in self.by("skip")],
            "known_now_passing": self.known_now_passing(),
        }


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


def load_known(path: Path) -> dict[str, str]:
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


def known_failures_file(target: str) -> Path:
    if target == "smbq":
        return HERE / "smbtorture-known-failures.txt"
    return HERE / f"smbtorture-known-failures-{target}.txt"


def match_known(name: str, known: dict[str, str]) -> str | None:
    for pattern in known:
        if pattern == name or fnmatch.fnmatchcase(name, pattern):
            return pattern
    return None


def command(server, suite: str) -> list[str]:
    return [
        "smbtorture", "--format=subunit", "--fullname",
        f"//{server.host}/{server.share}", "-p", str(server.port),
        "-U", f"{server.user}%{server.password}",
        *TORTURE_OPTIONS, suite,
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
    result = SuiteResult(suite, server.kind, server.mode, seconds, rc, subtests, timed_out,
                         load_known(known_failures_file(server.kind)))
    RESULTS.setdefault(server.kind, {})[suite] = result
    return result


def json_path(target: str) -> Path:
    return OUT_DIR / f"smbtorture-{target}.json"


def write_json(target: str) -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = json_path(target)
    suites = RESULTS.get(target, {})
    path.write_text(json.dumps({"target": target, "suites": {s: r.to_json() for s, r in suites.items()}},
                               indent=2) + "\n")
    return path


def format_table(results: dict[str, dict[str, SuiteResult]]) -> str:
    """One row per suite, one column group per target: pass/fail/skip, known, seconds."""
    targets = list(results)
    suites = [s for s in SUITES if any(s in results[t] for t in targets)]
    suites += sorted({s for t in targets for s in results[t]} - set(suites))
    head = f"{'suite':28}" + "".join(f" | {t + ' pass/fail/skip (known) s':>34}" for t in targets)
    rows = [head, "-" * len(head)]
    totals = {t: [0, 0, 0, 0, 0.0] for t in targets}
    for s in suites:
        row = f"{s:28}"
        for t in targets:
            r = results[t].get(s)
            if r is None:
                row += f" | {'-':>34}"
                continue
            c = r.counts()
            cell = f"{c['passed']}/{c['failed']}/{c['skipped']} ({c['known_failures']}) {r.seconds:6.1f}"
            if r.timed_out:
                cell = "TIMEOUT " + cell
            row += f" | {cell:>34}"
            for k, v in enumerate((c["passed"], c["failed"], c["skipped"], c["known_failures"], r.seconds)):
                totals[t][k] += v
        rows.append(row)
    row = f"{'total':28}"
    for t in targets:
        p, f, sk, k, sec = totals[t]
        row += f" | {f'{p}/{f}/{sk} ({k}) {sec:6.1f}':>34}"
    rows.append("-" * len(head))
    rows.append(row)
    return "\n".join(rows)
