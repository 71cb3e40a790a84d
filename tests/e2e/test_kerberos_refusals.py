"""Kerberos logons smbq refuses (issue 35), each with its NTSTATUS, and no
crash (the start_server fixture fails a test whose server logged a panic).

- a ticket under a key the keytab lacks (the service re-keyed): LOGON_FAILURE;
- a ticket for another service whose key the keytab holds (host/, also one
  relabelled cifs/ in its clear sname): LOGON_FAILURE;
- a principal that maps to no smbq user (alice/admin; bob with ``[kerberos]
  realm`` another realm), while a ``[kerberos.map]`` entry lets alice in as
  ``tester``: LOGON_FAILURE;
- an authenticator more than five minutes off: TIME_DIFFERENCE_AT_DC;
- an expired ticket, and one not yet valid (from a KDC whose clock is off,
  under faketime): LOGON_FAILURE;
- a replayed AP-REQ (the bytes of an accepted logon, again): LOGON_FAILURE;
- NTLM with ``[auth] ntlm = false``: NTLM_BLOCKED, NEGOTIATE offers only the
  Kerberos OIDs, and Kerberos still works;
- undecodable Kerberos tokens: INVALID_PARAMETER when MIT cannot tell a
  Kerberos token in it, LOGON_FAILURE for a Kerberos-framed token whose
  AP-REQ does not decode; a Kerberos token that is no AP-REQ:
  MORE_PROCESSING_REQUIRED, then LOGON_FAILURE;
- SPNEGO tokens in the Kerberos slot do not reach MIT's own SPNEGO
  mechanism (see the comment above those tests).

Clients: impacket (its kerberosLogin takes the service ticket from a
ccache that kinit and kvno filled, so it never talks to the KDC), and an
AP-REQ built here with impacket's Kerberos types and sent in a raw
SESSION_SETUP (smb2raw) where the test needs its bytes or its time.
"""

from __future__ import annotations

import datetime
import os
import random
import re
import secrets
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest
from impacket import ntlm, smb3
from impacket.krb5 import constants, crypto
from impacket.krb5.asn1 import AP_REQ, Authenticator, seq_set
from impacket.krb5.ccache import CCache
from impacket.krb5.types import KerberosTime, Principal, Ticket
from impacket.smb3structs import SMB2_DIALECT_311, SMB2_SESSION_SETUP
from impacket.smbconnection import SMBConnection, SessionError
from impacket.spnego import ASN1_AID, ASN1_OID, SPNEGO_NegTokenInit, SPNEGO_NegTokenResp, TypesMech, asn1encode
from pyasn1.codec.der import encoder
from pyasn1.type.univ import noValue

import krb5_kdc
import smb2raw

HOST = krb5_kdc.HOST
REALM = krb5_kdc.REALM
SERVICE = krb5_kdc.SERVICE
OTHER_SERVICE = f"host/{HOST}"

SUCCESS = 0
LOGON_FAILURE = 0xC000006D
TIME_DIFFERENCE_AT_DC = 0xC0000133
INVALID_PARAMETER = 0xC000000D
NTLM_BLOCKED = 0xC0000418
MORE_PROCESSING_REQUIRED = 0xC0000016

# DER of the mechanism OIDs as a NegTokenInit(2) lists them.
KRB5_OID = bytes.fromhex("06092a864886f712010202")  # 1.2.840.113554.1.2.2
MS_KRB5_OID = bytes.fromhex("06092a864882f712010202")  # 1.2.840.48018.1.2.2
NTLMSSP_OID = bytes.fromhex("060a2b0601040182370202" "0a")  # 1.3.6.1.4.1.311.2.2.10


def tickets(realm: krb5_kdc.Realm, where: Path, user: str, *services: str, prefix: tuple[str, ...] = ()) -> Path:
    """A ccache of its own with ``user``'s TGT and service tickets for
    ``services`` (kinit, kvno; both run under ``prefix``)."""
    ccache = where / f"ccache-{user.replace('/', '_')}-{secrets.token_hex(4)}"
    env = realm.kdc.client_env(ccache)

    def run(argv: list[str], stdin: str | None = None) -> None:
        r = subprocess.run(argv, input=stdin, env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"{' '.join(argv)}: {r.stdout}{r.stderr}"

    run([*prefix, "kinit", user], realm.password + "\n")
    if services:
        run([*prefix, "kvno", *services])
    return ccache


def credential(ccache: Path, service: str):
    cred = CCache.loadFile(str(ccache)).getCredential(f"{service}@{REALM}", anySPN=False)
    assert cred is not None, f"no ticket for {service} in {ccache}"
    return cred


def ap_req(ccache: Path, service: str, *, skew: datetime.timedelta = datetime.timedelta(0),
           sname: str | None = None) -> bytes:
    """An RFC 4121 InitialContextToken with an AP-REQ for ``service`` from
    ``ccache``: the authenticator's time is now + ``skew``; ``sname``
    rewrites the ticket's (unencrypted) service name."""
    cred = credential(ccache, service)
    ticket = Ticket().from_asn1(cred.ticket["data"])
    if sname is not None:
        ticket.service_principal = Principal(f"{sname}@{REALM}", type=ticket.service_principal.type)
    cipher = crypto._enctype_table[int(cred["key"]["keytype"])]()
    key = crypto.Key(cipher.enctype, cred["key"]["keyvalue"])
    client = cred["client"].toPrincipal()

    req = AP_REQ()
    req["pvno"] = 5
    req["msg-type"] = int(constants.ApplicationTagNumbers.AP_REQ.value)
    req["ap-options"] = constants.encodeFlags([])
    seq_set(req, "ticket", ticket.to_asn1)
    auth = Authenticator()
    auth["authenticator-vno"] = 5
    auth["crealm"] = client.realm
    seq_set(auth, "cname", client.components_to_asn1)
    when = datetime.datetime.now(datetime.timezone.utc) + skew
    auth["cusec"] = when.microsecond
    auth["ctime"] = KerberosTime.to_asn1(when)
    req["authenticator"] = noValue
    req["authenticator"]["etype"] = cipher.enctype
    # RFC 4120 7.5.1 key usage 11: AP-REQ authenticator.
    req["authenticator"]["cipher"] = cipher.encrypt(key, 11, encoder.encode(auth), None)
    return gss_token(KRB5_OID, b"\x01\x00" + encoder.encode(req))  # TOK_ID KRB_AP_REQ


def gss_token(oid_der: bytes, inner: bytes) -> bytes:
    """RFC 2743 3.1: [APPLICATION 0] { thisMech, innerToken }."""
    assert oid_der[0] == ASN1_OID
    return bytes([ASN1_AID]) + asn1encode(oid_der + inner)


def neg_token_init(mech_token: bytes) -> bytes:
    """SPNEGO NegTokenInit naming MS-KRB5 then KRB5, as Windows sends,
    with ``mech_token`` as the optimistic token."""
    init = SPNEGO_NegTokenInit()
    init["MechTypes"] = [TypesMech["MS KRB5 - Microsoft Kerberos 5"], TypesMech["KRB5 - Kerberos 5"]]
    init["MechToken"] = mech_token
    return init.getData()


def session_setup_request(blob: bytes, message_id: int = 1, session_id: int = 0) -> bytes:
    """MS-SMB2 2.2.5, signing enabled, the blob right after the fixed part."""
    body = struct.pack("<HBBIIHHQ", 25, 0, 0x01, 0, 0, smb2raw.HEADER_SIZE + 24, len(blob), 0) + blob
    return smb2raw.header(smb2raw.SESSION_SETUP, message_id, session_id=session_id) + body


def raw_logon(port: int, blob: bytes) -> int:
    """The status of a first SESSION_SETUP carrying ``blob`` on a new connection."""
    with smb2raw.Conn("127.0.0.1", port) as c:
        c.negotiate()
        c.send(session_setup_request(blob))
        status = c.outcome()
    assert status != "closed", "the server closed the connection"
    return status


def negotiate_blob(port: int) -> bytes:
    """The security buffer of the server's NEGOTIATE response (MS-SMB2 2.2.4)."""
    with smb2raw.Conn("127.0.0.1", port) as c:
        c.send(smb2raw.negotiate_request(0))
        resp = c.recv()
    assert smb2raw.parse_header(resp).status == SUCCESS
    offset, length = struct.unpack_from("<HH", resp, smb2raw.HEADER_SIZE + 56)
    return resp[offset:offset + length]


def impacket_kerberos(port: int, ccache: Path, user: str = "alice") -> int:
    """impacket's Kerberos logon with the service ticket from ``ccache``: 0
    or the NTSTATUS it failed with."""
    old = os.environ.get("KRB5CCNAME")
    os.environ["KRB5CCNAME"] = str(ccache)  # impacket wants a path, not FILE:path
    conn = SMBConnection(remoteName=HOST, remoteHost="127.0.0.1", sess_port=port, preferredDialect=SMB2_DIALECT_311,
                         timeout=10)
    try:
        conn.kerberosLogin(user, "", domain=REALM, kdcHost="127.0.0.1", useCache=True)
        return SUCCESS
    except SessionError as e:
        return e.getErrorCode()
    finally:
        conn.close()
        if old is None:
            os.environ.pop("KRB5CCNAME", None)
        else:
            os.environ["KRB5CCNAME"] = old


def smbclient(srv, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["smbclient", f"//{HOST}/{srv.share}", "-I", "127.0.0.1", "-p", str(srv.port), *args,
                           "-c", "ls"], env=env, capture_output=True, text=True, timeout=60)


def log_has(srv, pattern: str, times: int = 1, timeout: float = 5.0) -> bool:
    """Whether the server's log shows ``pattern``, ``times`` times or more
    (waiting: the log is read on a thread)."""
    deadline = time.monotonic() + timeout
    while True:
        if len(re.findall(pattern, srv.log.text())) >= times:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def established(srv, user: str, at_least: int = 0) -> int:
    """How many sessions the log shows ``user`` got (waiting up to 5 s for
    ``at_least``: the log is read on a thread)."""
    deadline = time.monotonic() + 5
    while True:
        n = len(re.findall(rf"session established .*user={re.escape(user)}(?=\s|$)", srv.log.text()))
        if n >= at_least or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


def test_ticket_under_a_key_the_keytab_lacks(start_server, realm, tmp_path):
    srv = krb5_kdc.start_smbq(start_server, realm, "sign")
    old = tickets(realm, tmp_path, "alice", SERVICE)
    assert impacket_kerberos(srv.port, old) == SUCCESS

    try:
        realm.kdc.kadmin(f"cpw -randkey {SERVICE}")  # a new key, kvno + 1, that the keytab lacks
        new = tickets(realm, tmp_path, "alice", SERVICE)
        old_kvno = Ticket().from_asn1(credential(old, SERVICE).ticket["data"]).encrypted_part.kvno
        new_kvno = Ticket().from_asn1(credential(new, SERVICE).ticket["data"]).encrypted_part.kvno
        assert new_kvno == old_kvno + 1
        assert impacket_kerberos(srv.port, new) == LOGON_FAILURE
        refusal = rf"AP-REQ refused: .*{SERVICE}@{REALM} kvno {new_kvno} not found in keytab"
        assert log_has(srv, refusal), srv.log.text(10)
        # The old key is still in the keytab: its tickets still log on.
        assert impacket_kerberos(srv.port, old) == SUCCESS
    finally:
        realm.kdc.keytab([SERVICE], realm.keytab)  # the new key too (-norandkey), for the other tests
    # MIT reads the keytab file at each logon: the same ticket now logs on.
    assert impacket_kerberos(srv.port, new) == SUCCESS
    assert established(srv, "alice", 3) == 3


def test_ticket_for_another_service(start_server, realm, tmp_path):
    realm.kdc.add_principal(OTHER_SERVICE)
    keytab = tmp_path / "cifs-and-host.keytab"
    shutil.copy(realm.keytab, keytab)
    realm.kdc.keytab([OTHER_SERVICE], keytab)
    # MIT could decrypt either ticket with this keytab; smbq takes cifs/ only.
    srv = start_server("smbq", "sign", config_toml=realm.server_config(), serve_args=("--keytab", str(keytab)),
                       env=realm.server_env())
    cc = tickets(realm, tmp_path, "alice", SERVICE, OTHER_SERVICE)

    assert raw_logon(srv.port, neg_token_init(ap_req(cc, SERVICE))) == SUCCESS
    assert raw_logon(srv.port, neg_token_init(ap_req(cc, OTHER_SERVICE))) == LOGON_FAILURE
    refusal = rf"refused a ticket for {re.escape(OTHER_SERVICE)}@{REALM}, not a cifs/ service"
    assert log_has(srv, refusal), srv.log.text(10)
    # The sname outside the ticket's encryption says cifs/, its key is
    # host/'s: what counts is the key that decrypted it.
    relabelled = ap_req(cc, OTHER_SERVICE, sname=SERVICE)
    assert raw_logon(srv.port, neg_token_init(relabelled)) == LOGON_FAILURE
    assert log_has(srv, refusal, 2), srv.log.text(10)
    assert established(srv, "alice", 1) == 1


def test_principal_with_an_instance_is_no_user(start_server, realm, tmp_path):
    realm.kdc.add_principal("alice/admin", realm.password)
    srv = krb5_kdc.start_smbq(start_server, realm, "sign")
    cc = tickets(realm, tmp_path, "alice/admin", SERVICE)
    assert raw_logon(srv.port, neg_token_init(ap_req(cc, SERVICE))) == LOGON_FAILURE
    assert log_has(srv, rf"not an smbq user .*principal=alice/admin@{REALM}"), srv.log.text(10)
    assert established(srv, "alice") == 0
    cc = tickets(realm, tmp_path, "alice", SERVICE)
    assert raw_logon(srv.port, neg_token_init(ap_req(cc, SERVICE))) == SUCCESS
    assert established(srv, "alice", 1) == 1


def test_kerberos_map_across_realms(start_server, realm, tmp_path):
    """``[kerberos] realm`` names another realm: only the principals
    ``[kerberos.map]`` names are users, as the user it maps them to."""
    config = (f'[kerberos]\nrealm = "OTHER.TEST"\nkeytab = "{realm.keytab}"\n\n'
              f'[kerberos.map]\n"alice@{REALM}" = "tester"\n')
    srv = start_server("smbq", "sign", config_toml=config, env=realm.server_env())

    bob = tickets(realm, tmp_path, "bob", SERVICE)
    assert impacket_kerberos(srv.port, bob, "bob") == LOGON_FAILURE
    assert log_has(srv, rf"not an smbq user .*principal=bob@{REALM}"), srv.log.text(10)

    alice = tickets(realm, tmp_path, "alice", SERVICE)
    assert impacket_kerberos(srv.port, alice) == SUCCESS
    r = smbclient(srv, realm.kdc.client_env(alice), "--use-kerberos=required")
    assert r.returncode == 0, r.stdout + r.stderr
    assert established(srv, "tester", 2) == 2
    assert established(srv, "alice") == established(srv, "bob") == 0


def test_clock_skew(start_server, realm, tmp_path):
    """MIT's allowed skew is five minutes (krb5.conf clockskew): beyond
    it either way, KRB_AP_ERR_SKEW, TIME_DIFFERENCE_AT_DC (issue 35)."""
    srv = krb5_kdc.start_smbq(start_server, realm, "sign")
    cc = tickets(realm, tmp_path, "alice", SERVICE)
    for minutes in (6, -6):
        token = ap_req(cc, SERVICE, skew=datetime.timedelta(minutes=minutes))
        assert raw_logon(srv.port, neg_token_init(token)) == TIME_DIFFERENCE_AT_DC, minutes
    assert log_has(srv, "AP-REQ refused: .*Clock skew too great", 2), srv.log.text(10)
    assert established(srv, "alice") == 0
    token = ap_req(cc, SERVICE, skew=datetime.timedelta(minutes=4))
    assert raw_logon(srv.port, neg_token_init(token)) == SUCCESS
    assert established(srv, "alice", 1) == 1


# A KDC whose clock is off (faketime), and what MIT says of its tickets:
# 11 hours behind, its 10-hour tickets ended an hour ago; an hour ahead,
# they start in an hour.
KDC_CLOCKS = {
    "expired": ("-11h", "Ticket expired"),
    "not yet valid": ("+1h", "Ticket not yet valid"),
}


@pytest.mark.parametrize("case", list(KDC_CLOCKS))
def test_ticket_outside_its_lifetime(start_server, tmp_path, case):
    """The ticket comes from a KDC whose clock is off; the authenticator
    (impacket's, with the real clock) is on time."""
    if shutil.which("faketime") is None:
        pytest.fail("faketime missing (Debian package faketime)")
    offset, words = KDC_CLOCKS[case]
    faketime = ("faketime", "-f", offset)
    realm = krb5_kdc.Realm(tmp_path / "realm", kdc_prefix=faketime)
    try:
        srv = krb5_kdc.start_smbq(start_server, realm, "sign")
        cc = tickets(realm, tmp_path, "alice", SERVICE, prefix=faketime)
        times = credential(cc, SERVICE)["time"]
        if case == "expired":
            assert times["endtime"] < time.time() - 30 * 60, "the service ticket has not ended"
        else:
            assert times["starttime"] > time.time() + 30 * 60, "the service ticket has started"
        assert impacket_kerberos(srv.port, cc) == LOGON_FAILURE
        assert log_has(srv, f"AP-REQ refused: .*{words}"), srv.log.text(10)
        assert established(srv, "alice") == 0
    finally:
        realm.stop()


def test_replayed_ap_req(start_server, realm, tmp_path, monkeypatch):
    srv = krb5_kdc.start_smbq(start_server, realm, "sign")
    cc = tickets(realm, tmp_path, "alice", SERVICE)
    sent: list[bytes] = []
    send = smb3.SMB3.sendSMB

    def spy(self, packet):
        if packet["Command"] == SMB2_SESSION_SETUP:
            sent.append(packet["Data"]["Buffer"])
        return send(self, packet)

    monkeypatch.setattr(smb3.SMB3, "sendSMB", spy)
    assert impacket_kerberos(srv.port, cc) == SUCCESS
    assert len(sent) == 1 and established(srv, "alice", 1) == 1
    # The same bytes on a new connection: the replay cache has seen them.
    assert raw_logon(srv.port, sent[0]) == LOGON_FAILURE
    assert log_has(srv, "AP-REQ refused: .*Request is a replay"), srv.log.text(10)
    assert established(srv, "alice", 1) == 1


def test_ntlm_blocked(start_server, realm):
    srv = krb5_kdc.start_smbq(start_server, realm, "sign", "[auth]\nntlm = false\n")

    # NEGOTIATE's NegTokenInit2 lists both Kerberos OIDs and no NTLMSSP;
    # the same server with NTLM on lists all three.
    blob = negotiate_blob(srv.port)
    assert KRB5_OID in blob and MS_KRB5_OID in blob and NTLMSSP_OID not in blob, blob.hex()
    both = krb5_kdc.start_smbq(start_server, realm, "sign")
    blob = negotiate_blob(both.port)
    assert KRB5_OID in blob and MS_KRB5_OID in blob and NTLMSSP_OID in blob, blob.hex()

    # impacket's NTLM logon (SPNEGO with NTLMSSP), and raw NTLMSSP.
    conn = SMBConnection(HOST, "127.0.0.1", sess_port=srv.port, preferredDialect=SMB2_DIALECT_311, timeout=10)
    try:
        with pytest.raises(SessionError) as e:
            conn.login(srv.user, srv.password, srv.domain)
        assert e.value.getErrorCode() == NTLM_BLOCKED
    finally:
        conn.close()
    assert raw_logon(srv.port, ntlm.getNTLMSSPType1().getData()) == NTLM_BLOCKED

    # smbclient with the right password and no Kerberos.
    r = smbclient(srv, realm.kdc.client_env(), "-U", f"{srv.user}%{srv.password}", "--use-kerberos=off")
    assert r.returncode != 0
    assert "NT_STATUS_NTLM_BLOCKED" in r.stdout + r.stderr, r.stdout + r.stderr
    assert established(srv, srv.user) == 0
    assert log_has(srv, "session setup failed .*status=STATUS_NTLM_BLOCKED", 3), srv.log.text(10)

    # Kerberos still works.
    r = smbclient(srv, realm.login("alice"), "--use-kerberos=required")
    assert r.returncode == 0, r.stdout + r.stderr
    assert established(srv, "alice", 1) == 1


# Not a Kerberos token MIT recognises (GSS_S_DEFECTIVE_TOKEN, BAD_MECH):
# INVALID_PARAMETER. A token framed as Kerberos whose AP-REQ does not
# decode is a GSS_S_FAILURE: LOGON_FAILURE.
# (The garbage is fixed: MIT takes an unframed token starting 0x6E for a
# raw AP-REQ, so random bytes could change the answer.)
GARBAGE = random.Random(35).randbytes(48)
MALFORMED = {
    "text": (b"this is no Kerberos token, nor any other", INVALID_PARAMETER),
    "truncated GSS header": (b"\x60\x82\x10\x00\x06\x09", INVALID_PARAMETER),
    "another mechanism's OID": (gss_token(bytes.fromhex("06092a864886f712010203"), b"\x01\x00" + GARBAGE),
                                INVALID_PARAMETER),
    "Kerberos AP-REQ of garbage": (gss_token(KRB5_OID, b"\x01\x00" + GARBAGE), LOGON_FAILURE),
    "unframed AP-REQ of garbage": (b"\x6e\x30" + GARBAGE, LOGON_FAILURE),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_kerberos_token(start_server, realm, tmp_path, case):
    srv = krb5_kdc.start_smbq(start_server, realm, "sign")
    token, status = MALFORMED[case]
    assert raw_logon(srv.port, neg_token_init(token)) == status
    assert log_has(srv, "AP-REQ refused"), srv.log.text(10)
    # The server goes on taking logons.
    cc = tickets(realm, tmp_path, "alice", SERVICE)
    assert raw_logon(srv.port, neg_token_init(ap_req(cc, SERVICE))) == SUCCESS


def session_setup_reply(c: smb2raw.Conn, blob: bytes, message_id: int, session_id: int = 0):
    """Sends a SESSION_SETUP on ``c``: the answer's header and security buffer."""
    c.send(session_setup_request(blob, message_id, session_id))
    resp = c.recv()
    offset, length = struct.unpack_from("<HH", resp, smb2raw.HEADER_SIZE + 4)
    return smb2raw.parse_header(resp), resp[offset:offset + length]


def test_kerberos_token_that_is_no_ap_req(start_server, realm):
    """A Kerberos token with another TOK_ID (02 00, an AP-REP's): MIT asks
    for a further token (GSS_S_CONTINUE_NEEDED, passed on as
    MORE_PROCESSING_REQUIRED, as Samba's gse.c does); garbage next ends
    the exchange."""
    srv = krb5_kdc.start_smbq(start_server, realm, "sign")
    with smb2raw.Conn("127.0.0.1", srv.port) as c:
        c.negotiate(credit_request=8)
        h, _ = session_setup_reply(c, neg_token_init(gss_token(KRB5_OID, b"\x02\x00" + GARBAGE)), 1)
        assert h.status == MORE_PROCESSING_REQUIRED
        resp = SPNEGO_NegTokenResp()
        resp["ResponseToken"] = GARBAGE
        h, _ = session_setup_reply(c, resp.getData(), 2, h.session_id)
        assert h.status == LOGON_FAILURE
    assert log_has(srv, "AP-REQ refused: No context has been established"), srv.log.text(10)


# MIT's mechglue picks a mechanism by the token itself: an acceptor
# credential acquired for every mechanism (no desired_mechs) let a SPNEGO
# token in the Kerberos slot reach MIT's own SPNEGO mechanism (an empty
# token got MIT SPNEGO's NegTokenInit2 hint back, and a NegTokenInit nested
# in the Kerberos slot logged on; with gss-ntlmssp installed, the same path
# would lead to NTLM whatever [auth] ntlm says). smbq acquires its keytab
# credential for Kerberos alone, as Samba's gse.c does.
SPNEGO_OID = bytes.fromhex("06062b0601050502")  # 1.3.6.1.5.5.2


def test_empty_kerberos_token_does_not_reach_mits_spnego(start_server, realm):
    srv = krb5_kdc.start_smbq(start_server, realm, "sign")
    with smb2raw.Conn("127.0.0.1", srv.port) as c:
        c.negotiate()
        h, blob = session_setup_reply(c, neg_token_init(b""), 1)
    assert h.status in (INVALID_PARAMETER, LOGON_FAILURE, MORE_PROCESSING_REQUIRED), hex(h.status)
    assert SPNEGO_OID not in blob, f"MIT's SPNEGO answered: {blob.hex()}"


def test_spnego_nested_in_the_kerberos_slot_is_refused(start_server, realm, tmp_path):
    srv = krb5_kdc.start_smbq(start_server, realm, "sign")
    cc = tickets(realm, tmp_path, "alice", SERVICE)
    nested = SPNEGO_NegTokenInit()
    nested["MechTypes"] = [TypesMech["KRB5 - Kerberos 5"]]
    nested["MechToken"] = ap_req(cc, SERVICE)
    status = raw_logon(srv.port, neg_token_init(nested.getData()))
    assert status in (INVALID_PARAMETER, LOGON_FAILURE), hex(status)
