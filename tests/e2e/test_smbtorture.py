"""Samba's smbtorture SMB2 suites, one pytest test per suite and target.

A suite fails on any subtest failure or error that its target's known-failures
file does not list; known failures that now pass are only printed. Results go
to tests/out/smbtorture-<target>.json and a table at the end of the run.
"""

from __future__ import annotations

import math
import os
import shutil

import pytest

import servers
import torture
from conftest import QUICK

SUITES = [s for s in torture.SUITES if not (QUICK and s in torture.QUICK_SKIP)]


@pytest.fixture
def mode() -> str:
    # Signing required, encryption not required: smbtorture's encryption
    # tests (smb2.session.encryption-*) ask for it themselves.
    return os.environ.get("SMBQ_TORTURE_MODE", "sign")


# Both servers on their defaults (smbq's credit window is 8192, as Windows
# and Samba grant, which smbtorture's smb2.credits checks); smbd's share
# keeps ACLs, streams, DOS attributes and EAs for the file semantics suites.
@pytest.fixture
def server(start_server, target, mode, suite):
    share = servers.FILE_SEMANTICS if suite in torture.FILE_SEMANTICS_SUITES else ""
    return start_server(target, mode, smbd_share=share)


@pytest.mark.parametrize("suite", SUITES)
def test_suite(server, suite):
    if shutil.which("smbtorture") is None:
        pytest.fail("smbtorture is not installed (Debian package samba-testsuite)")
    result = torture.run_suite(server, suite, log_dir=torture.OUT_DIR / "logs")
    torture.write_json(server.kind)
    c = result.counts()
    print(f"\n{server.kind} {suite}: {c['passed']} passed, {c['failed']} failed "
          f"({c['known_failures']} known), {c['skipped']} skipped in {result.seconds:.1f} s")
    for name in result.known_now_passing():
        print(f"  known failure now passes: {name} (remove it from {torture.known_failures_file(server.kind).name})")
    unexpected = result.unexpected()
    if result.timed_out:
        pytest.fail(f"smbtorture {suite} against {server.kind} did not finish within {torture.SUITE_TIMEOUT} s; "
                    f"subtests seen: {[t.name for t in result.subtests]}", pytrace=False)
    if unexpected:
        lines = [f"{t.outcome}: {t.name}\n    " + t.detail.strip().replace("\n", "\n    ")[:800]
                 for t in unexpected]
        pytest.fail(f"{len(unexpected)} unexpected smbtorture failures against {server.kind}:\n" + "\n".join(lines),
                    pytrace=False)
    assert result.subtests, f"smbtorture {suite} reported no subtest at all"


def parity_param(suite: str):
    gap = torture.PARITY_GAPS.get(suite)
    marks = [pytest.mark.xfail(reason=gap, strict=False)] if gap else []
    return pytest.param(suite, marks=marks, id=suite)


@pytest.mark.parametrize("suite", [parity_param(s) for s in torture.PARITY_SUITES if s in SUITES])
def test_parity_with_smbd(suite):
    """smbq passes at least 90% as many subtests of `suite` as Samba's smbd
    did in this run (both targets ran it above: pytest runs the tests of a
    module in order)."""
    results = torture.RESULTS
    if "smbq" not in results or "smbd" not in results:
        pytest.skip("needs this run's results for both smbq and smbd (SMBQ_E2E_TARGETS=smbq,smbd)")
    q, d = results["smbq"].get(suite), results["smbd"].get(suite)
    if q is None or d is None:
        pytest.skip(f"{suite} did not run against both servers")
    passed_q, passed_d = q.counts()["passed"], d.counts()["passed"]
    need = math.ceil(torture.PARITY * passed_d)
    print(f"\n{suite}: smbq {passed_q} passed, smbd {passed_d}, needed {need}")
    assert passed_q >= need, f"{suite}: smbq passes {passed_q} subtests, smbd {passed_d}: at least {need} needed"
