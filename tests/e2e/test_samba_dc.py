"""The Samba AD DC fixture (samba_dc.py) works: its KDC issues a service
ticket whose PAC names the user's groups, and MIT's GSSAPI, accepting that
ticket with the exported keytab, hands the PAC out as verified.

``SMBQ_SAVE_PAC=FILE`` writes the PAC's hex to FILE (how the Samba PAC in
crates/auth/src/pac.rs's tests was captured).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import samba_dc

# Accept our own ticket in one process: initiator from the ccache,
# acceptor from the keytab (KRB5_KTNAME); print what the acceptor sees.
ACCEPT = r"""
import sys, gssapi, gssapi.raw as raw
name = gssapi.Name("cifs@localhost", gssapi.NameType.hostbased_service)
ini = gssapi.SecurityContext(name=name, usage="initiate", mech=gssapi.MechType.kerberos)
acc = gssapi.SecurityContext(usage="accept", creds=gssapi.Credentials(usage="accept"))
out = acc.step(ini.step())
if out:
    ini.step(out)
assert acc.complete and ini.complete
pac = raw.get_name_attribute(acc.initiator_name, b"urn:mspac:")
print(str(acc.initiator_name))
print(int(pac.authenticated))
print(pac.values[0].hex())
"""


def sid_bytes(sid: str) -> bytes:
    """A SID's binary form (MS-DTYP 2.4.2.2)."""
    parts = sid.split("-")
    subs = [int(x) for x in parts[3:]]
    return bytes([1, len(subs)]) + int(parts[2]).to_bytes(6, "big") + struct.pack(f"<{len(subs)}I", *subs)


@pytest.fixture(scope="module")
def dc(tmp_path_factory):
    why = samba_dc.available()
    if why:
        pytest.skip(why)
    t0 = time.monotonic()
    dc = samba_dc.start_dc(tmp_path_factory.mktemp("samba-dc"))
    print(f"Samba AD DC at {dc.kdc_addr} ready in {time.monotonic() - t0:.1f} s")
    yield dc
    dc.stop()


def test_dc_issues_a_ticket_with_a_pac(dc, tmp_path):
    pytest.importorskip("gssapi", reason="python gssapi in .venv (scripts/install-deps)")
    dc.add_user("alice", "alice-pass")
    dc.add_group("readers")
    dc.add_member("readers", "alice")
    dc.add_user("bob", "bob-pass")
    dc.add_service("svc-smbq", "cifs/localhost")
    keytab = dc.export_keytab("cifs/localhost", tmp_path / "cifs.keytab")
    listing = subprocess.run(["klist", "-ke", str(keytab)], capture_output=True, text=True, check=True).stdout
    assert f"cifs/localhost@{dc.realm} (aes256-cts-hmac-sha1-96)" in listing, listing

    ccache = tmp_path / "alice.ccache"
    dc.kinit("alice", "alice-pass", ccache)
    kvno = subprocess.run(["kvno", f"cifs/localhost@{dc.realm}"], env=dc.env(ccache), capture_output=True, text=True)
    assert kvno.returncode == 0, kvno.stderr
    tickets = subprocess.run(["klist", "-e"], env=dc.env(ccache), capture_output=True, text=True, check=True).stdout
    assert "aes256-cts-hmac-sha1-96, aes256-cts-hmac-sha1-96" in tickets.split(f"cifs/localhost@{dc.realm}")[1]

    r = subprocess.run([sys.executable, "-c", ACCEPT], env=dc.env(ccache, keytab), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    principal, authenticated, pac_hex = r.stdout.split()
    assert principal == f"alice@{dc.realm}"
    assert authenticated == "1", "MIT marks the PAC verified (server checksum checked with the keytab key)"
    pac = bytes.fromhex(pac_hex)
    if os.environ.get("SMBQ_SAVE_PAC"):
        Path(os.environ["SMBQ_SAVE_PAC"]).write_text(pac_hex + "\n")

    # The logon info names the domain (LogonDomainId), alice's RID
    # (UserId) and readers' RID in GroupIds as (RelativeId, Attributes 7);
    # bob's RID is nowhere.
    domain = dc.domain_sid()
    assert sid_bytes(domain) in pac
    for sid in (dc.user_sid("alice"), dc.group_sid("readers")):
        assert sid.startswith(domain + "-")
    readers_rid = int(dc.group_sid("readers").rsplit("-", 1)[1])
    alice_rid = int(dc.user_sid("alice").rsplit("-", 1)[1])
    bob_rid = int(dc.user_sid("bob").rsplit("-", 1)[1])
    assert struct.pack("<II", readers_rid, 7) in pac
    assert struct.pack("<I", alice_rid) in pac
    assert struct.pack("<II", bob_rid, 7) not in pac
    assert "alice".encode("utf-16-le") in pac
