"""smbd's outcomes of the end-to-end tests that run against either server.

Tests that take the ``server`` fixture (or ``target``) check smbq and, with
the same code, Samba's smbd: a test that smbd fails tests the wrong thing.
smbd's half is recorded in baselines/e2e-smbd.json instead of run every
time; ``scripts/record-smbd-baselines`` runs this module to re-record it:

    .venv/bin/python tests/e2e/smbd_baseline.py     # every such test against smbd

test_baselines.py checks that the record covers exactly today's tests and
that smbd passed each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "baselines" / "e2e-smbd.json"


def collect(targets: str) -> set[str]:
    """The test ids pytest collects with SMBQ_E2E_TARGETS=targets."""
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist"], cwd=HERE,
                       env=dict(os.environ, SMBQ_E2E_TARGETS=targets), capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"pytest --collect-only failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return {line.strip() for line in r.stdout.splitlines() if "::" in line}


def reference_ids() -> set[str]:
    """The tests that exist because smbd is a target: smbq's twins of these
    run every time. smbtorture's are recorded subtest by subtest (torture_baseline.py)."""
    return {i for i in collect("smbd") - collect("smbq") if not i.startswith("test_smbtorture.py::")}


def main() -> int:
    ids = sorted(reference_ids())
    print(f"smbd_baseline: running {len(ids)} tests against smbd, outcomes to {BASELINE}", file=sys.stderr)
    BASELINE.parent.mkdir(exist_ok=True)
    env = dict(os.environ, SMBQ_E2E_TARGETS="smbd", SMBQ_RECORD_OUTCOMES=str(BASELINE))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", *ids], cwd=HERE, env=env)
    recorded = json.loads(BASELINE.read_text())
    bad = {k: v for k, v in recorded.items() if v != "passed"}
    print(f"smbd_baseline: {len(recorded) - len(bad)} passed, {len(bad)} did not: {bad}", file=sys.stderr)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
