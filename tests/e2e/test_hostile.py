"""Malformed and abusive traffic: the server answers with an error or closes
the connection (MS-SMB2 3.3.5.2), never hangs or crashes, and keeps serving.

After every test a fresh, normal client (smbprotocol) must still connect and
list the share, and the server process must be alive; the fixture then checks
its log for a crash when it stops it.
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import struct
import threading
import time
import uuid

import pytest

import smb2raw as raw

smbclient = pytest.importorskip("smbclient")
from smbprotocol.connection import Connection, SMB2Echo  # noqa: E402
from smbprotocol.exceptions import SMBException, SMBResponseException  # noqa: E402
from smbprotocol.open import CreateDisposition, CreateOptions, FileAttributes, ImpersonationLevel, Open, ShareAccess  # noqa: E402
from smbprotocol.session import Session  # noqa: E402
from smbprotocol.tree import TreeConnect  # noqa: E402

REJECTED = ("closed", raw.STATUS_INVALID_PARAMETER)


def assert_serves(server) -> None:
    assert server.alive(), f"{server.name} died:\n{server.log.text(40)}"
    try:
        smbclient.register_session(server.host, username=server.user, password=server.password, port=server.port,
                                   encrypt=server.mode == "enc", connection_timeout=15)
        names = smbclient.listdir(rf"\\{server.host}\{server.share}", port=server.port)
        assert isinstance(names, list)
    finally:
        smbclient.reset_connection_cache()
    assert server.alive(), f"{server.name} died:\n{server.log.text(40)}"


@pytest.fixture(autouse=True)
def still_serving(server):
    yield
    assert_serves(server)


def conn(server, timeout: float = 10.0) -> raw.Conn:
    return raw.Conn(server.host, server.port, timeout)


def fmt(outcome) -> str:
    return outcome if isinstance(outcome, str) else f"status {outcome:#010x}"


# --- pre-authentication framing and NEGOTIATE -------------------------------

def test_truncated_header(server):
    with conn(server) as c:
        c.send(raw.PROTOCOL_ID + struct.pack("<HH", 64, 0) + b"\0" * 12)  # 20 of 64 bytes
        assert c.closes(), "server neither closed nor dropped a truncated header"


def test_negotiate_dialect_count_past_end(server):
    with conn(server) as c:
        c.send(raw.negotiate_request(dialects=(0x0202, 0x0311), dialect_count=200))
        out = c.outcome()
        assert out in REJECTED, fmt(out)


def test_negotiate_context_offset_outside(server):
    with conn(server) as c:
        c.send(raw.negotiate_request(context_offset=0x10000))
        out = c.outcome()
        assert out in REJECTED, fmt(out)


def test_negotiate_context_count_huge(server):
    with conn(server) as c:
        c.send(raw.negotiate_request(context_count=0xFFFF))
        out = c.outcome()
        assert out in REJECTED, fmt(out)


def _echo(mid: int, next_command: int = 0, flags: int = 0) -> bytes:
    return raw.header(raw.ECHO, mid, next_command=next_command, flags=flags) + raw.echo_body()


@pytest.mark.parametrize("case", ["inside_header", "backwards", "absolute", "past_end", "misaligned"])
def test_compound_bad_next_command(server, case):
    first_len = 72  # 64-byte header + 4-byte ECHO body, padded to 8
    first_next = {"inside_header": 32, "past_end": 0x1000, "misaligned": 68}.get(case, first_len)
    # The second element points back at the first (as a signed offset), or
    # at itself if NextCommand were wrongly taken from the message start.
    second_next = {"backwards": (-first_len) & 0xFFFFFFFF, "absolute": first_len}.get(case, 0)
    first = _echo(1, next_command=first_next)
    first += b"\0" * (first_len - len(first))
    second = _echo(2, next_command=second_next)
    bound = 10.0
    with conn(server) as c:
        # Credits for message ids 1..8, so no outcome is down to the window.
        c.negotiate(credit_request=8)
        c.send(first + second)
        # A server may answer the well-formed first element; the bad link
        # must then give an error or a closed connection within the bound.
        deadline = time.monotonic() + bound
        answers: list[tuple[int, int]] = []  # (MessageId, Status) of each answered element
        while True:
            try:
                message = c.recv(timeout=max(deadline - time.monotonic(), 0.01))
            except raw.Closed:
                return  # closed: the server gave up on the connection
            except TimeoutError:
                pytest.fail(f"neither an error nor a close within {bound:.0f} s; answers: "
                            f"{[(m, fmt(st)) for m, st in answers]}", pytrace=False)
            for element in raw.split_compound(message):
                h = raw.parse_header(element)
                if h.status != raw.STATUS_PENDING:
                    answers.append((h.message_id, h.status))
            if any(st != raw.STATUS_SUCCESS for _, st in answers):
                break
            assert not {1, 2} <= {m for m, _ in answers}, f"every element succeeded: {answers}"
        # An error answer: the connection must go on answering (any status)
        # or close, not hang.
        try:
            c.send(_echo(3))
            c.outcome(timeout=bound)
        except raw.Closed:
            pass
        except TimeoutError:
            pytest.fail(f"after {[(m, fmt(st)) for m, st in answers]} an ECHO got neither an answer nor a close "
                        f"within {bound:.0f} s", pytrace=False)


def test_unknown_command(server):
    with conn(server) as c:
        c.negotiate()
        c.send(raw.header(0x0042, 1) + struct.pack("<HH", 4, 0))
        out = c.outcome()
        assert out in REJECTED, fmt(out)


def test_frame_too_long(server):
    if server.kind == "smbd":
        pytest.skip("Samba-specific: smbd reads a frame up to the 24-bit maximum before judging it")
    with conn(server) as c:
        c.send_raw(b"\x00\xff\xff\xff" + raw.negotiate_request())
        assert c.closes(timeout=10), "server kept a connection that announced a 16 MiB frame"


def test_frame_bad_type_byte(server):
    with conn(server) as c:
        # The first byte of a Direct TCP frame must be zero (MS-SMB2 2.1).
        c.send_raw(b"\xff\x00\x00\x40" + raw.negotiate_request())
        assert c.closes(timeout=10), "server kept a connection with a bad frame type"


SMB1_GARBAGE = {
    "random": random.Random("smb1-garbage").randbytes(60),
    "unterminated": b"\x02NT LM 0.12\x02SMB 2.00",  # dialect strings without their NUL
    "empty": b"",
    "not_dialects": b"\x07" * 60,  # BufferFormat must be 0x02
}


@pytest.mark.parametrize("case", sorted(SMB1_GARBAGE))
def test_smb1_negotiate_garbage(server, case):
    bound = 10.0
    dialects = SMB1_GARBAGE[case]
    with conn(server) as c:
        c.send(raw.smb1_negotiate(dialects))
        # An answer (an SMB1 NEGOTIATE response, or SMB2's) or a closed connection; no hang.
        try:
            msg = c.recv(timeout=bound)
        except raw.Closed:
            return
        except TimeoutError:
            pytest.fail(f"no answer and no close within {bound:.0f} s for SMB1 dialects {dialects.hex()}",
                        pytrace=False)
        if msg[:4] == raw.SMB1_ID:
            # MS-CIFS 2.2.3.1: Command, then Status, then Flags with the reply bit.
            assert len(msg) >= 33 and msg[4] == 0x72 and msg[9] & 0x80, f"not an SMB1 NEGOTIATE response: {msg.hex()}"
            # No dialect it could take: an error, or success with DialectIndex 0xFFFF (MS-CIFS 2.2.4.52.2).
            status = struct.unpack_from("<I", msg, 5)[0]
            if status == 0:
                assert len(msg) >= 35 and msg[32] >= 1 and msg[33:35] == b"\xff\xff", \
                    f"SMB1 NEGOTIATE accepted a garbage dialect list: {msg.hex()}"
        else:
            h = raw.parse_header(msg)
            assert h.command == raw.NEGOTIATE and h.flags & raw.FLAGS_SERVER_TO_REDIR, h
            # No SMB 2.002 / SMB 2.??? dialect was offered: nothing to negotiate.
            assert h.status != raw.STATUS_SUCCESS, f"SMB2 NEGOTIATE succeeded for SMB1 dialects {dialects.hex()}"


def test_garbage_protocol_id(server):
    with conn(server) as c:
        c.send(b"\x00BAD" + os.urandom(100))
        assert c.closes(), "server kept a connection sending garbage"


def test_transform_unknown_session(server):
    with conn(server) as c:
        c.negotiate()
        inner = _echo(1)
        c.send(raw.transform_header(0x1234_5678_9ABC_DEF0, len(inner)) + os.urandom(len(inner)))
        assert c.closes(), "server kept a connection after a TRANSFORM for an unknown session"


# --- with a real session (smbprotocol's low-level API) -----------------------

class SessionHelper:
    def __init__(self, server, encrypt: bool):
        self.conn = Connection(uuid.uuid4(), server.host, server.port, require_signing=True)
        self.conn.connect(timeout=15)
        self.session = Session(self.conn, server.user, server.password, require_encryption=encrypt)
        self.session.connect()
        self.share_path = rf"\\{server.host}\{server.share}"
        self.tree = TreeConnect(self.session, self.share_path)
        self.tree.connect()

    def tree_connect_outcome(self):
        return self.outcome(lambda: TreeConnect(self.session, self.share_path).connect())

    def echo_outcome(self):
        req = self.conn.send(SMB2Echo(), sid=self.session.session_id)
        return self.outcome(lambda: self.conn.receive(req, timeout=10))

    @staticmethod
    def outcome(fn):
        try:
            fn()
            return raw.STATUS_SUCCESS
        except SMBResponseException as e:
            return e.status
        except (SMBException, OSError, TimeoutError) as e:
            if "timeout" in str(e).lower() or isinstance(e, TimeoutError):
                return "timeout"
            return "closed"

    def close(self):
        try:
            self.conn.disconnect(True)
        except Exception:  # noqa: BLE001  (the server may have closed it)
            pass


@pytest.mark.parametrize("mode", ["sign"])
def test_wrong_signature(server):
    s = SessionHelper(server, encrypt=False)
    try:
        assert s.echo_outcome() == raw.STATUS_SUCCESS
        real = s.conn._generate_signature

        def corrupt(b_header, key, message_id, response, command):
            sig = real(b_header, key, message_id, response, command)
            return sig if response else bytes(b ^ 0x5A for b in sig)

        s.conn._generate_signature = corrupt
        # TREE_CONNECT: a command that needs the session, hence its signature
        # (MS-SMB2 3.3.5.2.4: verification fails -> STATUS_ACCESS_DENIED).
        out = s.tree_connect_outcome()
        assert out in ("closed", raw.STATUS_ACCESS_DENIED), fmt(out)
    finally:
        s.close()


@pytest.mark.parametrize("mode", ["enc"])
def test_transform_bad_tag(server):
    s = SessionHelper(server, encrypt=True)
    try:
        assert s.echo_outcome() == raw.STATUS_SUCCESS
        real = s.conn._encrypt

        def corrupt(data, session):
            msg = real(data, session)
            tag = msg["signature"].get_value()
            msg["signature"] = bytes([tag[0] ^ 1]) + tag[1:]
            return msg

        s.conn._encrypt = corrupt
        out = s.echo_outcome()
        # MS-SMB2 3.3.5.2.1.1: a message that fails to decrypt disconnects.
        assert out == "closed", fmt(out)
    finally:
        s.close()


@pytest.mark.parametrize("mode", ["sign"])
@pytest.mark.parametrize("charge", [0, 0xFFFF])
def test_credit_charge_on_large_read(server, charge):
    (server.share_dir / "data.bin").write_bytes(os.urandom(2 << 20))
    s = SessionHelper(server, encrypt=False)
    try:
        fh = Open(s.tree, "data.bin")
        fh.create(ImpersonationLevel.Impersonation, 0x80000000 | 0x80, FileAttributes.FILE_ATTRIBUTE_NORMAL,
                  ShareAccess.FILE_SHARE_READ, CreateDisposition.FILE_OPEN, CreateOptions.FILE_NON_DIRECTORY_FILE)
        s.conn._calculate_credit_charge = lambda message: charge
        if charge > 1:
            with s.conn.sequence_lock:  # let smbprotocol send what it thinks it may not
                s.conn.sequence_window["high"] += charge
        out = s.outcome(lambda: fh.read(0, 1 << 20))
        # MS-SMB2 3.3.5.2.5: charge 0 on a >64 KiB read is INVALID_PARAMETER;
        # a charge beyond the granted credits leaves the sequence window
        # (3.3.5.2.3), where the server may also drop the connection.
        assert out in REJECTED, fmt(out)
    finally:
        s.close()


# --- resource abuse ------------------------------------------------------------

def test_idle_connection_closed(start_server, target):
    if target == "smbd":
        pytest.skip("Samba-specific: smbd has no pre-authentication timeout setting")
    server = start_server(target, "enc", config_toml="[limits]\npreauth_timeout_secs = 2\n")
    with conn(server, timeout=15) as c:
        t0 = time.monotonic()
        assert c.closes(timeout=15), "idle unauthenticated connection still open after 15 s"
        waited = time.monotonic() - t0
        # 2 s configured; the engine may check its deadline a little late.
        assert 1.5 < waited < 6, f"closed after {waited:.1f} s, preauth_timeout_secs is 2"
    assert_serves(server)


def test_slowloris_negotiate(server):
    msg = raw.frame(raw.negotiate_request())
    delay = min(0.03, 5.0 / len(msg))
    result: dict = {}

    def drip():
        try:
            with conn(server, timeout=15) as c:
                for i in range(len(msg)):
                    c.send_raw(msg[i:i + 1])
                    time.sleep(delay)
                result["outcome"] = c.outcome(timeout=10)
        except (raw.Closed, OSError, TimeoutError) as e:
            result["outcome"] = f"closed ({e})"

    t = threading.Thread(target=drip)
    t.start()
    time.sleep(0.5)
    assert_serves(server)  # served while the slow client dribbles
    t.join(30)
    assert not t.is_alive(), "slow client still hanging"
    out = result.get("outcome")
    if server.kind == "smbq":
        # Byte by byte, each 30 ms apart (longer than a busy engine waits
        # before it goes idle), well within the logon timeout: answered.
        assert out == raw.STATUS_SUCCESS, out
    else:
        assert out == raw.STATUS_SUCCESS or str(out).startswith("closed"), out


PARALLEL = 300
PARALLEL_BOUND = 120.0  # seconds for each phase, on a loaded 2-core machine


def test_many_parallel_connections(server):
    """300 clients at once, each served: NEGOTIATE on 300 raw connections
    opened before any is answered, then 300 full logons (NTLM, tree connect)
    held open together, each answering an ECHO."""
    t0 = time.monotonic()
    conns: list[raw.Conn] = []
    try:
        for _ in range(PARALLEL):
            c = conn(server, timeout=30)
            conns.append(c)
            c.send(raw.negotiate_request())
        deadline = t0 + PARALLEL_BOUND
        unserved = []
        for i, c in enumerate(conns):
            try:
                h = raw.parse_header(c.recv(timeout=max(deadline - time.monotonic(), 0.01)))
                if h.command != raw.NEGOTIATE or h.status != raw.STATUS_SUCCESS:
                    unserved.append((i, f"command {h.command:#x} {fmt(h.status)}"))
            except (raw.Closed, TimeoutError, ValueError, OSError) as e:
                unserved.append((i, f"{type(e).__name__}: {e}"))
        negotiated = time.monotonic() - t0
        assert not unserved, f"{len(unserved)} of {PARALLEL} connections not negotiated: {unserved[:10]}"
    finally:
        for c in conns:
            c.close()

    t1 = time.monotonic()
    sessions: list[SessionHelper | None] = [None] * PARALLEL
    errors: list[str] = []

    def logon(i: int) -> None:
        try:
            sessions[i] = SessionHelper(server, encrypt=server.encrypt_required)
        except Exception as e:  # noqa: BLE001  (each failure is reported below)
            errors.append(f"{i}: {type(e).__name__}: {e}"[:200])

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(logon, range(PARALLEL), timeout=PARALLEL_BOUND))
        logged_on = time.monotonic() - t1
        assert not errors, f"{len(errors)} of {PARALLEL} logons failed: {errors[:10]}"
        # All 300 sessions are open at once now: each must still answer.
        bad = [(i, fmt(out)) for i, s in enumerate(sessions) if (out := s.echo_outcome()) != raw.STATUS_SUCCESS]
        assert not bad, f"{len(bad)} of {PARALLEL} open sessions did not answer an ECHO: {bad[:10]}"
        echoed = time.monotonic() - t1 - logged_on
        print(f"\n{server.name}: {PARALLEL} NEGOTIATEs in {negotiated:.2f} s; {PARALLEL} logons in {logged_on:.2f} s; "
              f"{PARALLEL} ECHOs on the open sessions in {echoed:.2f} s")
        assert time.monotonic() - t1 < PARALLEL_BOUND, f"logons and ECHOs took {time.monotonic() - t1:.0f} s"
        assert_serves(server)
    finally:
        for s in sessions:
            if s is not None:
                s.close()
