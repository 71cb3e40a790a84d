"""Memory an unauthenticated peer can pin is bounded.

Before a session exists NEGOTIATE and SESSION_SETUP are all a client needs:
a frame announcing more than `limits.preauth_max_frame()` (the 64 KiB
security blob plus headers) closes the connection at once, before its bytes
are read or buffered. The test opens 1,000 connections that send nothing
and 1,000 that each announce a 16 MiB frame, and reports the server's
resident memory for both (also in the closing note of issue 12).
"""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import struct
import time
from pathlib import Path

import pytest

import smb2raw as raw

N = 1000


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def smbq(start_server):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * N + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * N), hard))
    return start_server("smbq", "desired")


def connect_all(stack: contextlib.ExitStack, server, n: int) -> list[socket.socket]:
    """n connections, each closed when ``stack`` closes (also when the test fails)."""
    return [stack.enter_context(socket.create_connection((server.host, server.port), timeout=10))
            for _ in range(n)]


def wait_closed(socks: list[socket.socket], bound: float) -> int:
    """How many of socks the server closed within `bound` seconds."""
    closed = 0
    deadline = time.monotonic() + bound
    # epoll, not select(): descriptors past 1023 are fine.
    with selectors.DefaultSelector() as sel:
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        while closed < len(socks) and time.monotonic() < deadline:
            for key, _ in sel.select(0.5):
                try:
                    data = key.fileobj.recv(4096)
                except OSError:
                    data = b""
                if data == b"":
                    closed += 1
                    sel.unregister(key.fileobj)
    return closed


def test_idle_and_oversized_preauth_connections(smbq):
    pid = smbq.proc.pid
    base = rss_mib(pid)
    with contextlib.ExitStack() as stack:
        idle = connect_all(stack, smbq, N)
        time.sleep(2)
        with_idle = rss_mib(pid)
        # Every idle connection is still served: a NEGOTIATE on the last one works.
        idle[-1].sendall(raw.frame(raw.negotiate_request()))
        idle[-1].settimeout(10)
        assert idle[-1].recv(4)[:1] == b"\x00", "the 1,000th idle connection is served"
    time.sleep(1)

    with contextlib.ExitStack() as stack:
        big = connect_all(stack, smbq, N)
        for s in big:
            s.sendall(struct.pack(">I", 0xFFFFFF) + b"\0" * 60)  # 16 MiB announced, a header's worth sent
        time.sleep(1)
        with_big = rss_mib(pid)
        closed = wait_closed(big, 30)
    print(f"\nsmbq RSS: {base:.1f} MiB at rest; {with_idle:.1f} MiB with {N} idle connections "
          f"({(with_idle - base) * 1024 / N:.1f} KiB each); {with_big:.1f} MiB with {N} that announced 16 MiB "
          f"({(with_big - base) * 1024 / N:.1f} KiB each); {closed} of those closed")
    assert closed == N, f"only {closed} of {N} connections announcing a 16 MiB frame before logon were closed"
    # Bounded: far below what 1,000 buffered 16 MiB frames (16 GiB) or even
    # 1,000 64 KiB read buffers would take.
    assert with_idle - base < 64, f"{N} idle connections cost {with_idle - base:.0f} MiB"
    assert with_big - base < 64, f"{N} oversized announcements cost {with_big - base:.0f} MiB"


def test_frame_over_the_preauth_limit_closes(smbq):
    """100 KiB is under the post-logon frame limit but over the pre-logon one."""
    with socket.create_connection((smbq.host, smbq.port), timeout=10) as s:
        s.sendall(struct.pack(">I", 100 * 1024) + b"\0" * 64)
        assert wait_closed([s], 10) == 1
