"""An Active Directory ticket's PAC decides access (issue 35): with a Samba
AD DC provisioned by the test (samba_dc.py), a file whose NT ACL grants
only the group ``readers`` is read by a domain user in that group and
refused to one outside it. smbq knows neither user: alice is allowed only
because her ticket's PAC lists the group's SID."""

from __future__ import annotations

import subprocess

import pytest

import samba_dc
from test_acls import GENERIC_READ, READ_CONTROL, WRITE_DAC, AccessAllowedAce, Client, CreateDisposition, ace, descriptor

HOST = "smbq.smbq.test"
OWNER, DACL = 0x1, 0x4


@pytest.fixture(scope="module")
def dc(tmp_path_factory):
    if why := samba_dc.available():
        pytest.fail(why)
    dc = samba_dc.start_dc(tmp_path_factory.mktemp("samba-dc"))
    yield dc
    dc.stop()


def test_pac_groups_grant_and_deny(start_server, dc, tmp_path):
    dc.add_user("alice", "alice-Pass1")
    dc.add_user("bob", "bob-Pass1")
    dc.add_group("readers")
    dc.add_member("readers", "alice")
    dc.add_service("svc-smbq", f"cifs/{HOST}")
    keytab = dc.export_keytab(f"cifs/{HOST}", tmp_path / "smbq.keytab")
    rcache = tmp_path / "rcache"
    rcache.mkdir()
    srv = start_server("smbq", "sign", config_toml=f'[kerberos]\nrealm = "{dc.realm}"\nkeytab = "{keytab}"\n',
                       env={"KRB5_CONFIG": str(dc.krb5_conf), "KRB5RCACHEDIR": str(rcache)})

    # The smbq user `tester` (NTLM) makes the file and grants the group read.
    (srv.share_dir / "report.txt").write_text("for readers only\n")
    owner = Client(srv)
    try:
        fh = owner.open("report.txt", READ_CONTROL | WRITE_DAC, CreateDisposition.FILE_OPEN)
        readers = dc.group_sid("readers")
        owner.set_sd(fh, DACL, descriptor([ace(AccessAllowedAce, readers, GENERIC_READ)]))
        fh.close()
    finally:
        owner.close()

    def get(user: str, password: str) -> subprocess.CompletedProcess:
        ccache = tmp_path / f"{user}.ccache"
        dc.kinit(user, password, ccache)
        out = tmp_path / f"{user}.txt"
        return subprocess.run(["smbclient", f"//{HOST}/{srv.share}", "-I", "127.0.0.1", "-p", str(srv.port),
                               "--use-kerberos=required", "-m", "SMB3", "--client-protection=sign",
                               "-c", f"get report.txt {out}"],
                              env=dc.env(ccache), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)

    alice = get("alice", "alice-Pass1")
    assert alice.returncode == 0, alice.stdout + alice.stderr
    assert (tmp_path / "alice.txt").read_text() == "for readers only\n"
    bob = get("bob", "bob-Pass1")
    assert bob.returncode != 0 and "NT_STATUS_ACCESS_DENIED" in bob.stdout + bob.stderr, bob.stdout + bob.stderr
    log = srv.log.text()
    assert "session established" in log and "user=alice" in log and "user=bob" in log, log[-3000:]
