#!/usr/bin/env python3
"""Record Samba's smbd results for smbtorture's suites: the baseline smbq's
parity is judged against (baselines/smbtorture-smbd.json).

usage: .venv/bin/python tests/e2e/torture_baseline.py [--runs 3] [--suites a,b] [--timeout 300]

Runs every suite of torture.SUITES BASELINE_RUNS times, one at a time, each
on a fresh smbd started as the tests start servers (servers.start, mode
torture.MODE; the share gets servers.FILE_SEMANTICS for
torture.FILE_SEMANTICS_SUITES) and records per subtest the outcome of every
run and the first failure's message. A subtest counts as passed by smbd when
it passed in every run (torture.baseline_passed). With --suites only those
suites are re-recorded and the others kept. Needs root (smbd switches to its
test user). Prints a line per suite; exits 1 if smbd could not start or
crashed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.dont_write_bytecode = True  # keep __pycache__ out of tests/e2e
sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers  # noqa: E402
import torture  # noqa: E402

DETAIL_CHARS = 400


def version(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"


def run_once(suite: str, timeout: float) -> tuple[torture.SuiteResult, list[str]]:
    workdir = Path(tempfile.mkdtemp(prefix="smbq-baseline-smbd-"))
    share = servers.FILE_SEMANTICS if suite in torture.FILE_SEMANTICS_SUITES else ""
    try:
        srv = servers.start("smbd", workdir, torture.MODE, smbd_share=share)
        try:
            result = torture.run_suite(srv, suite, timeout=timeout, log_dir=torture.OUT_DIR / "logs")
        finally:
            problems = srv.stop()
            if problems:
                problems = [srv.failure_text(problems)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return result, problems


def record(suite: str, runs: int, timeout: float) -> tuple[dict, list[str]]:
    entry: dict = {
        "share": "file-semantics" if suite in torture.FILE_SEMANTICS_SUITES else "plain",
        "seconds": [],
        "timed_out": [],
        "subtests": {},
    }
    all_problems: list[str] = []
    for n in range(runs):
        result, problems = run_once(suite, timeout)
        all_problems += problems
        entry["seconds"].append(round(result.seconds, 1))
        entry["timed_out"].append(result.timed_out)
        for t in result.subtests:
            s = entry["subtests"].setdefault(t.name, {"runs": 0, "passed": 0, "outcomes": [], "detail": ""})
            s["runs"] += 1
            s["passed"] += t.outcome == "success"
            s["outcomes"].append(t.outcome)
            if t.outcome != "success" and not s["detail"]:
                s["detail"] = t.detail.strip()[:DETAIL_CHARS]
        c = result.counts()
        print(f"  {suite} run {n + 1}/{runs}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped "
              f"in {result.seconds:.1f} s" + (" (TIMEOUT)" if result.timed_out else ""), flush=True)
    return entry, all_problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=torture.BASELINE_RUNS)
    ap.add_argument("--suites", default="", help="comma-separated; default every suite of torture.SUITES")
    ap.add_argument("--timeout", type=float, default=torture.SUITE_TIMEOUT, help="seconds per run of a suite")
    ap.add_argument("--out", type=Path, default=torture.BASELINE)
    args = ap.parse_args()
    reason = servers.smbd_available()
    if reason:
        print(f"cannot record: {reason}", file=sys.stderr)
        return 1
    suites = [s for s in args.suites.split(",") if s] or torture.SUITES
    unknown = sorted(set(suites) - set(torture.SUITES))
    if unknown:
        print(f"not in torture.SUITES: {unknown}", file=sys.stderr)
        return 1
    baseline = {"suites": {}}
    if args.suites and args.out.exists():
        baseline = torture.load_baseline(args.out)
        if baseline.get("runs") != args.runs:
            print(f"{args.out} has {baseline.get('runs')} runs per suite, not {args.runs}", file=sys.stderr)
            return 1
    baseline.update({
        "server": version(["smbd", "--version"]),
        "smbtorture": version(["smbtorture", "--version"]),
        "mode": torture.MODE,
        "runs": args.runs,
        "rule": "a subtest counts as passed by smbd when it passed in every run (passed == runs)",
        "recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "recorder": "tests/e2e/torture_baseline.py",
    })
    failed = False
    for i, suite in enumerate(suites, 1):
        entry, problems = record(suite, args.runs, args.timeout)
        baseline["suites"][suite] = entry
        passed = sum(s["passed"] == s["runs"] == args.runs for s in entry["subtests"].values())
        flaky = sum(0 < s["passed"] < args.runs for s in entry["subtests"].values())
        print(f"[{i}/{len(suites)}] {suite}: {len(entry['subtests'])} subtests, {passed} passed in all "
              f"{args.runs} runs, {flaky} in some, {sum(entry['seconds']):.0f} s", flush=True)
        for p in problems:
            failed = True
            print(f"  smbd problem: {p}", flush=True)
    baseline["suites"] = {s: baseline["suites"][s] for s in torture.SUITES if s in baseline["suites"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(baseline, indent=1, sort_keys=False) + "\n")
    tmp.replace(args.out)
    print(f"written: {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
