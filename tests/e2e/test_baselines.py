"""The recorded smbd outcomes (smbd_baseline.py) match today's tests."""

from __future__ import annotations

import json

import smbd_baseline
from conftest import load_allowed_skips, skip_allowed


def test_every_test_of_both_servers_has_smbd_passing_it_on_record():
    recorded = json.loads(smbd_baseline.BASELINE.read_text())
    want = smbd_baseline.reference_ids()
    missing, stale = sorted(want - recorded.keys()), sorted(recorded.keys() - want)
    assert not missing and not stale, (
        f"baselines/{smbd_baseline.BASELINE.name} is out of date (re-record: scripts/record-smbd-baselines): "
        f"not recorded {missing[:10]} ({len(missing)}), no longer a test {stale[:10]} ({len(stale)})")
    allowed = load_allowed_skips()
    failed = {k: v for k, v in recorded.items()
              if v != "passed" and not (v == "skipped" and skip_allowed(k, allowed))}
    assert not failed, f"smbd did not pass these tests when last recorded (skips need allowed-skips.txt): {failed}"
