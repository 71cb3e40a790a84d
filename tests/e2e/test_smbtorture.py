"""Samba's smbtorture SMB2 suites against smbq, two tests per suite.

test_suite fails on any subtest failure or error that
smbtorture-known-failures.txt does not list, and on a listed subtest that
passes. test_parity_with_smbd fails when smbq passes fewer than
torture.PARITY of the subtests Samba's smbd passes, smbd's count coming from
the committed baseline (baselines/smbtorture-smbd.json, re-recorded by
torture_baseline.py): smbd is not run here.

Each suite runs once per pytest run, in whichever of its two tests comes
first (in any process under pytest-xdist); the other reads its result file,
tests/out/smbtorture/smbq-<suite>.json. Either test alone runs the suite
itself, so any selection and order gives the same verdicts.
"""

from __future__ import annotations

import shutil

import pytest

import torture
from conftest import QUICK, TARGETS

SUITES = [s for s in torture.SUITES if not (QUICK and s in torture.QUICK_SKIP)]

pytestmark = pytest.mark.skipif("smbq" not in TARGETS, reason="SMBQ_E2E_TARGETS leaves out smbq")


@pytest.fixture
def smbq_result(start_server, suite) -> torture.SuiteResult:
    """This run's result of `suite` against smbq on its defaults (smbq's
    credit window is 8192, as Windows and Samba grant, which smbtorture's
    smb2.credits checks)."""
    if shutil.which("smbtorture") is None:
        pytest.fail("smbtorture is not installed (Debian package samba-testsuite)")
    return torture.shared_result("smbq", suite, lambda: start_server("smbq", torture.MODE))


def ids(suite: str) -> str:
    return f"smbq-{suite}"


@pytest.mark.parametrize("suite", SUITES, ids=ids)
def test_suite(smbq_result):
    r = smbq_result
    known = torture.load_known()
    print(f"\nsmbq {r.suite}: {len(r.by('success'))} passed, {len(r.failed)} failed "
          f"({sum(torture.match_known(t.name, known) is not None for t in r.failed)} known), "
          f"{len(r.by('skip'))} skipped in {r.seconds:.1f} s")
    problems = torture.judge(r, known)
    if problems:
        pytest.fail(f"smbtorture {r.suite} against smbq ({torture.KNOWN_FAILURES.name}):\n" + "\n".join(problems),
                    pytrace=False)


def parity_param(suite: str):
    gap = torture.PARITY_GAPS.get(suite)
    marks = [pytest.mark.xfail(reason=gap, strict=True)] if gap else []
    return pytest.param(suite, marks=marks, id=ids(suite))


@pytest.mark.parametrize("suite", [parity_param(s) for s in SUITES])
def test_parity_with_smbd(smbq_result):
    """smbq passes at least torture.PARITY as many subtests of the suite as
    smbd passed in every run of the baseline."""
    ok, line = torture.parity(smbq_result, torture.load_baseline())
    print("\n" + line)
    assert ok, line


def test_every_smb2_suite_run_or_left_out():
    """Every smb2 suite of the installed smbtorture is in torture.SUITES or
    torture.LEFT_OUT (with its reason), none in both."""
    if shutil.which("smbtorture") is None:
        pytest.fail("smbtorture is not installed (Debian package samba-testsuite)")
    listed = torture.listed_suites()
    assert not set(torture.SUITES) & set(torture.LEFT_OUT)
    assert sorted(listed - set(torture.SUITES) - set(torture.LEFT_OUT)) == [], "new suites: add to SUITES"
    assert sorted((set(torture.SUITES) | set(torture.LEFT_OUT)) - listed) == [], "not in smbtorture --list"
    assert set(torture.FILE_SEMANTICS_SUITES) <= set(torture.SUITES)
    assert set(torture.PARITY_GAPS) <= set(torture.SUITES)
    assert {".".join(n.split(".")[:2]) for n in torture.FLAPPING} <= set(torture.SUITES)


def test_baseline_covers_suites():
    """The smbd baseline has BASELINE_RUNS runs of every suite in SUITES and
    nothing else, recorded in the mode and on the share the tests say."""
    b = torture.load_baseline()
    assert b["runs"] == torture.BASELINE_RUNS
    assert b["mode"] == torture.MODE
    assert list(b["suites"]) == torture.SUITES, "re-record: tests/e2e/torture_baseline.py"
    for suite, entry in b["suites"].items():
        share = "file-semantics" if suite in torture.FILE_SEMANTICS_SUITES else "plain"
        assert entry["share"] == share, f"{suite} was recorded on another share: re-record it"
        assert len(entry["seconds"]) == b["runs"], suite


def test_known_failures_name_subtests():
    """Every entry of smbtorture-known-failures.txt names (or matches) a
    subtest smbd's baseline saw, so a typo cannot excuse nothing."""
    names = {n for e in torture.load_baseline()["suites"].values() for n in e["subtests"]}
    stale = [p for p in torture.load_known() if not any(torture.match_known(n, {p: ""}) for n in names)]
    assert stale == [], f"entries that match no subtest: {stale}"
