"""Two network namespaces joined by a veth pair, for tests that take a
link down or move a client to another address. Needs root and iproute2;
everything is removed on exit."""

from __future__ import annotations

import contextlib
import os
import subprocess
from typing import Iterator


def sh(*argv: str, stdin: str | None = None) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30, input=stdin, text=True)


@contextlib.contextmanager
def pair(srv_ip: str, cli_ip: str, prefix_len: int, name: str) -> Iterator[tuple[str, str, str, str]]:
    """(server namespace, client namespace, server's veth, client's veth),
    the server's address `srv_ip`/`prefix_len`, the client's `cli_ip`;
    `name` (a few letters) keeps the names apart from other tests'."""
    tag = f"{os.getpid() % 100000}"
    srv, cli = f"smbq{name}s{tag}", f"smbq{name}c{tag}"
    vs, vc = f"v{name}s{tag}", f"v{name}c{tag}"
    sh("ip", "netns", "add", srv)
    try:
        sh("ip", "netns", "add", cli)
        sh("ip", "link", "add", vs, "type", "veth", "peer", "name", vc)
        sh("ip", "link", "set", vs, "netns", srv)
        sh("ip", "link", "set", vc, "netns", cli)
        for ns, dev, ip in ((srv, vs, srv_ip), (cli, vc, cli_ip)):
            sh("ip", "-n", ns, "addr", "add", f"{ip}/{prefix_len}", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield srv, cli, vs, vc
    finally:
        for ns in (cli, srv):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 10 s (a server
    run with `ip netns exec`, which the Server class does not start)."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
