"""smbq's multi-stream extension (docs/multistream.md) end to end: our
client's `--quic-streams` against smbq with the extension on (its
default) and off (`[quic_options] max_streams = 1`), byte-exact either
way, the streams used as `--json` reports them. The wire rules (answers on
their request's stream, out-of-order completion, a stream given up in the
middle of READs) are tested in crates/transport/tests/quic.rs; Samba's
and smb-rs's QUIC clients never offer the extension and run their own
suites unchanged.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

import servers
from conftest import QUICK
from files import random_file, sha256_file
from test_client import Peer


@pytest.mark.parametrize("server_limit,offer,used", [(None, 8, 8), (None, 1, 1), (1, 4, 1), (3, 8, 3)])
def test_streams_agreed_and_transfers_byte_exact(start_server, tmp_path: Path, server_limit, offer, used):
    config = None if server_limit is None else f"[quic_options]\nmax_streams = {server_limit}\n"
    peer = Peer(start_server("smbq", "enc", config_toml=config), "quic")
    size = (24 << 20) if QUICK else (256 << 20)
    src = tmp_path / "up.bin"
    digest = random_file(src, size)
    streams = ["--quic-streams", str(offer)]
    up = json.loads(peer.run("put", "--json", str(src), peer.url("up.bin"), extra=streams).stdout)
    assert (up["bytes"], up["streams"]) == (size, used)
    assert sha256_file(peer.srv.share_dir / "up.bin") == digest
    back = tmp_path / "back.bin"
    down = json.loads(peer.run("get", "--json", peer.url("up.bin"), str(back), extra=streams).stdout)
    assert (down["bytes"], down["streams"]) == (size, used)
    assert sha256_file(back) == digest
    # cat writes in order what may come out of order (a READ per stream).
    cmd = [str(servers.smbq_bin()), "cat", *peer.args, *streams, peer.url("up.bin")]
    cat = subprocess.run(cmd, env=peer.env, capture_output=True, timeout=600)
    assert cat.returncode == 0, cat.stderr
    assert hashlib.sha256(cat.stdout).hexdigest() == digest
    # Metadata and listings on the streams too.
    listing = peer.run("ls", peer.url(), extra=streams).stdout
    assert "up.bin" in listing
