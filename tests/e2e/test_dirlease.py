"""Directory leases (MS-SMB2 3.3.5.9.11, SMB2_GLOBAL_CAP_DIRECTORY_LEASING),
shown with Samba's smbtorture, a client we did not write:

- smb2.lease.v2_request: a directory open with a version 2 lease asking
  RHW is granted RH; a file created in it under the directory's lease key
  as its ParentLeaseKey breaks nothing; a file created without it breaks
  the directory lease to none (acknowledged, epoch counted); a reopen of
  the directory gets RH again; writing a file in it breaks nothing until
  that file is closed, which breaks the directory lease again.
- smb2.lease.v2_request_parent: a file's lease v2 naming a parent lease
  key comes back with SMB2_LEASE_FLAG_PARENT_LEASE_KEY_SET and the key.

Both skip against a server without directory leasing (Samba 4.17's smbd),
so they run against smbq alone, and a skip fails here.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

import torture


@pytest.fixture
def target() -> str:
    return "smbq"


@pytest.mark.parametrize("test", ["smb2.lease.v2_request", "smb2.lease.v2_request_parent"])
def test_smbtorture_directory_lease(server, test):
    if shutil.which("smbtorture") is None:
        pytest.fail("smbtorture is not installed (Debian package samba-testsuite)")
    proc = subprocess.run(torture.command(server, test), stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=120)
    text = (proc.stdout + proc.stderr).decode("utf-8", "replace")
    outcomes = {t.name: t.outcome for t in torture.parse(text)}
    assert outcomes.get(test) == "success", f"{test}: {outcomes}\n{text[-3000:]}"
