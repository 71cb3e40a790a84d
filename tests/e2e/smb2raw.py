"""Just enough SMB2 to hand-craft (mal)formed messages for test_hostile.py.

MS-SMB2 2.1 (Direct TCP framing), 2.2.1.2 (SYNC header), 2.2.3 (NEGOTIATE
request with 3.1.1 negotiate contexts), 2.2.28 (ECHO), 2.2.41 (TRANSFORM).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import struct
import time

PROTOCOL_ID = b"\xfeSMB"
TRANSFORM_ID = b"\xfdSMB"
SMB1_ID = b"\xffSMB"
HEADER_SIZE = 64

NEGOTIATE = 0x0000
SESSION_SETUP = 0x0001
READ = 0x0008
ECHO = 0x000D

FLAGS_SERVER_TO_REDIR = 0x00000001
FLAGS_RELATED = 0x00000004
FLAGS_SIGNED = 0x00000008

STATUS_SUCCESS = 0x00000000
STATUS_PENDING = 0x00000103
STATUS_INVALID_PARAMETER = 0xC000000D
STATUS_ACCESS_DENIED = 0xC0000022
STATUS_NOT_SUPPORTED = 0xC00000BB
STATUS_USER_SESSION_DELETED = 0xC0000203

DIALECTS = (0x0202, 0x0210, 0x0300, 0x0302, 0x0311)
PREAUTH_INTEGRITY_CAPABILITIES = 0x0001
ENCRYPTION_CAPABILITIES = 0x0002
SHA_512 = 0x0001
AES_128_CCM, AES_128_GCM = 0x0001, 0x0002


def frame(message: bytes) -> bytes:
    """MS-SMB2 2.1: a zero byte and a 24-bit big-endian length."""
    if len(message) > 0xFFFFFF:
        raise ValueError("message too long for Direct TCP framing")
    return struct.pack(">I", len(message)) + message


def header(command: int, message_id: int, *, credit_charge: int = 1, credit_request: int = 1, flags: int = 0,
           next_command: int = 0, session_id: int = 0, tree_id: int = 0, status: int = 0,
           signature: bytes = b"\0" * 16) -> bytes:
    """MS-SMB2 2.2.1.2: the 64-byte SYNC header."""
    return (PROTOCOL_ID + struct.pack("<HHIHHIIQIIQ", HEADER_SIZE, credit_charge, status, command, credit_request,
                                      flags, next_command, message_id, 0, tree_id, session_id) + signature)


@dataclasses.dataclass
class Header:
    credit_charge: int
    status: int
    command: int
    credits: int
    flags: int
    next_command: int
    message_id: int
    tree_id: int
    session_id: int
    signature: bytes


def parse_header(message: bytes) -> Header:
    if len(message) < HEADER_SIZE or message[:4] != PROTOCOL_ID:
        raise ValueError(f"not an SMB2 header: {message[:8].hex()}")
    (size, charge, status, command, credits, flags, next_command, message_id, _pid, tree_id,
     session_id) = struct.unpack_from("<HHIHHIIQIIQ", message, 4)
    if size != HEADER_SIZE:
        raise ValueError(f"header StructureSize {size}")
    return Header(charge, status, command, credits, flags, next_command, message_id, tree_id, session_id,
                  message[48:64])


def _context(ctype: int, data: bytes) -> bytes:
    return struct.pack("<HHI", ctype, len(data), 0) + data


def _pad8(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 8)


def negotiate_body(dialects=DIALECTS, *, dialect_count: int | None = None, context_offset: int | None = None,
                   context_count: int | None = None, security_mode: int = 0x0001) -> bytes:
    """MS-SMB2 2.2.3 NEGOTIATE request body (after the 64-byte header).

    Offers SHA-512 preauth integrity and AES-GCM/CCM when 3.1.1 is offered.
    The keyword arguments override fields with wrong values on purpose.
    """
    fixed_len = 36
    dialect_bytes = b"".join(struct.pack("<H", d) for d in dialects)
    contexts = b""
    n_contexts = 0
    offset = 0
    if 0x0311 in dialects:
        preauth = struct.pack("<HHH", 1, 32, SHA_512) + os.urandom(32)
        enc = struct.pack("<HHH", 2, AES_128_GCM, AES_128_CCM)
        contexts = _pad8(_context(PREAUTH_INTEGRITY_CAPABILITIES, preauth)) + _context(ENCRYPTION_CAPABILITIES, enc)
        n_contexts = 2
        offset = HEADER_SIZE + len(_pad8(b"\0" * fixed_len + dialect_bytes))
    body = struct.pack(
        "<HHHHI16sIHH",
        fixed_len,
        len(dialects) if dialect_count is None else dialect_count,
        security_mode,
        0,
        0x7F,  # capabilities: everything up to encryption
        os.urandom(16),
        offset if context_offset is None else context_offset,
        n_contexts if context_count is None else context_count,
        0,
    ) + dialect_bytes
    if contexts:
        # The header is 64 bytes, so 8-byte alignment of the body suffices.
        body = _pad8(body) + contexts
    return body


def negotiate_request(message_id: int = 0, *, credit_request: int = 1, **kwargs) -> bytes:
    return header(NEGOTIATE, message_id, credit_charge=0, credit_request=credit_request) + negotiate_body(**kwargs)


def split_compound(message: bytes) -> list[bytes]:
    """The elements of a (possibly compounded) SMB2 message, by NextCommand (MS-SMB2 3.2.5.1.9)."""
    out = []
    while True:
        h = parse_header(message)
        if h.next_command == 0:
            out.append(message)
            return out
        if h.next_command < HEADER_SIZE or h.next_command > len(message):
            raise ValueError(f"bad NextCommand {h.next_command} in a {len(message)}-byte response")
        out.append(message[:h.next_command])
        message = message[h.next_command:]


def echo_body() -> bytes:
    """MS-SMB2 2.2.28: StructureSize 4, Reserved."""
    return struct.pack("<HH", 4, 0)


def smb1_negotiate(dialect_bytes: bytes) -> bytes:
    """An SMB1 NEGOTIATE (MS-CIFS 2.2.4.52.1) carrying dialect_bytes."""
    hdr = SMB1_ID + bytes([0x72]) + b"\0" * 4 + bytes([0x18]) + struct.pack("<H", 0xC853) + b"\0" * 12
    hdr += struct.pack("<HHHH", 0, 0xFEFF, 0, 0)
    return hdr + b"\0" + struct.pack("<H", len(dialect_bytes)) + dialect_bytes


def transform_header(session_id: int, original_size: int, *, nonce: bytes | None = None,
                     signature: bytes | None = None) -> bytes:
    """MS-SMB2 2.2.41: the 52-byte TRANSFORM header (Flags = Encrypted)."""
    return (TRANSFORM_ID + (signature or os.urandom(16)) + (nonce or os.urandom(16))
            + struct.pack("<IHHQ", original_size, 0, 0x0001, session_id))


class Closed(Exception):
    """The server closed the connection."""


class Conn:
    """A raw TCP connection speaking Direct TCP framing, with bounded waits."""

    def __init__(self, host: str, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Conn":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise Closed(str(e)) from e

    def send(self, message: bytes) -> None:
        self.send_raw(frame(message))

    def _recv_exact(self, n: int, deadline: float, timeout: float) -> bytes:
        buf = b""
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete answer within {timeout:.1f} s")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError as e:
                raise Closed(str(e)) from e
            except socket.timeout as e:
                raise TimeoutError(f"no complete answer within {timeout:.1f} s") from e
            if not chunk:
                raise Closed("EOF")
            buf += chunk
        return buf

    def recv(self, timeout: float | None = None) -> bytes:
        """One framed message; Closed on EOF/reset, TimeoutError on silence."""
        timeout = timeout or self.timeout
        deadline = time.monotonic() + timeout
        length = struct.unpack(">I", self._recv_exact(4, deadline, timeout))[0]
        if length >> 24:
            raise ValueError(f"bad frame header {length:#x}")
        return self._recv_exact(length, deadline, timeout)

    def negotiate(self, credit_request: int = 1) -> Header:
        self.send(negotiate_request(0, credit_request=credit_request))
        resp = self.recv()
        h = parse_header(resp)
        if h.status != STATUS_SUCCESS:
            raise ValueError(f"negotiate failed: {h.status:#x}")
        return h

    def outcome(self, timeout: float | None = None) -> str | int:
        """'closed', or the status of the next answer (interim STATUS_PENDING skipped)."""
        try:
            while True:
                h = parse_header(self.recv(timeout))
                if h.status != STATUS_PENDING:
                    return h.status
        except Closed:
            return "closed"

    def closes(self, timeout: float | None = None) -> bool:
        """True when the server closes the connection (answers are drained)."""
        try:
            while True:
                self.recv(timeout)
        except Closed:
            return True
        except TimeoutError:
            return False
