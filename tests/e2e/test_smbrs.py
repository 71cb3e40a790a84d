"""smb-rs (the Rust ``smb`` crate, a client we did not write) against smbq,
over Direct TCP and over SMB over QUIC.

Runs ``target/ci/smbrs-client`` (tests/interop/smbrs; override with
``SMBRS_CLIENT``; build it with ``cargo build --profile ci -p
smbq-interop-smbrs``). One run connects, lists the share, writes a file of
seeded pseudo-random data, reads it back and compares SHA-256, lists, deletes
and lists again; it prints one JSON object. smbq only: smbd has no QUIC and
this is about smbq's transports.

Multichannel: ``--multichannel`` writes a file over one connection, binds its
session to a second connection (SESSION_SETUP with SMB2_SESSION_FLAG_BINDING)
and reads the file back in READs larger than 1 MiB alternating between the
two channels. With ``--second-transport quic`` the second connection is SMB
over QUIC: one session spanning TCP and QUIC, as a roaming client's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

import servers

CLIENT = Path(os.environ.get("SMBRS_CLIENT") or servers.BUILD_DIR / "smbrs-client")
QUICK = os.environ.get("SMBQ_TEST_QUICK") == "1"
# QUIC carries the big transfer.
QUIC_MIB = 64 if QUICK else 256
# smb-rs 0.12's own TCP transport leaves Nagle on and sends each frame's
# 4-byte header in a write of its own, so every request waits out a delayed
# ACK: about 20 MB/s on loopback whatever the server does. Keep TCP small.
TCP_MIB = 16
SEED = 20250501
# Multichannel: 4 READs of 4 MiB, two on each channel.
MC_MIB = 16
MC_READ_MIB = 4
TIMEOUT = 900


def _client() -> Path:
    if not CLIENT.exists():
        pytest.fail(f"{CLIENT} does not exist: {servers.BUILD_HINT}", pytrace=False)
    return CLIENT


def _run(server, transport: str, port: int, size_mib: int, extra: list[str] = ()) -> dict:
    argv = [
        str(_client()), "--json",
        "--transport", transport,
        "--server", server.host, "--port", str(port), "--share", server.share,
        "--user", server.user, "--password", server.password,
        "--size-mib", str(size_mib), "--seed", str(SEED),
        *extra,
    ]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    try:
        report = json.loads(r.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"smbrs-client printed no JSON (exit {r.returncode})\n"
                    f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}", pytrace=False)
    steps = ", ".join(f"{s['name']} {s['seconds']:.2f}s" for s in report["steps"])
    rates = ", ".join(f"{k} {report[k + '_mb_s']:.1f} MB/s" for k in ("write", "read")
                      if report.get(k + "_mb_s") is not None)
    print(f"\nsmb-rs {transport} {size_mib} MiB: {rates} ({steps})")
    assert report["ok"] is True and r.returncode == 0, (
        f"smbrs-client failed (exit {r.returncode}): {report['error']}\nstderr:\n{r.stderr}")
    return report


def _check(server, report: dict, size_mib: int) -> None:
    assert report["dialect"] == "Smb0311"
    assert report["size_bytes"] == size_mib << 20
    assert len(report["sha256_written"]) == 64
    assert report["sha256_read"] == report["sha256_written"]
    names = [s["name"] for s in report["steps"]]
    assert names == ["connect", "list", "create", "write", "read", "list", "delete", "list", "disconnect"]
    # The client deleted its file: the share is empty again on disk.
    assert sorted(os.listdir(server.share_dir)) == []


def _expected_sha256(seed: int, size: int) -> str:
    """SHA-256 of the client's content: little-endian SplitMix64 words."""
    mask = (1 << 64) - 1
    h = hashlib.sha256()
    out = bytearray()
    for w in range(size // 8):
        z = (seed + (w + 1) * 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out += (z ^ (z >> 31)).to_bytes(8, "little")
    h.update(out)
    return h.hexdigest()


@pytest.mark.parametrize("mode", ["enc", "sign"])
def test_smbrs_tcp(start_server, mode):
    server = start_server("smbq", mode)
    report = _run(server, "tcp", server.port, TCP_MIB)
    _check(server, report, TCP_MIB)


def test_smbrs_content_is_what_python_expects(start_server):
    """The hash the client reports is SHA-256 of the documented content."""
    server = start_server("smbq", "sign")
    report = _run(server, "tcp", server.port, 1)
    _check(server, report, 1)
    assert report["sha256_written"] == _expected_sha256(SEED, 1 << 20)


def _quic_cert(server) -> Path:
    """smbq's self-signed QUIC certificate (PEM), written at startup."""
    cert = Path(getattr(server, "state_dir", server.workdir / "state")) / "tls" / "cert.pem"
    assert cert.exists(), f"smbq did not write its self-signed certificate at {cert}"
    return cert


def _quic_port(server) -> int:
    port = getattr(server, "quic_port", None)
    if port is None:
        pytest.skip("smbq serves no QUIC here yet: servers.py exposes no quic_port "
                    "(smbq serve --quic, `listening on quic ADDR:PORT`)")
    return port


@pytest.mark.parametrize("mode", ["enc", "sign"])
def test_smbrs_quic(start_server, mode):
    server = start_server("smbq", mode)
    port = _quic_port(server)
    report = _run(server, "quic", port, QUIC_MIB, ["--root-cert", str(_quic_cert(server))])
    _check(server, report, QUIC_MIB)


def test_smbrs_quic_rejects_untrusted_certificate(start_server):
    """Without our root the platform verifier must refuse the self-signed cert."""
    server = start_server("smbq", "sign")
    port = _quic_port(server)
    argv = [str(_client()), "--json", "--transport", "quic", "--server", server.host,
            "--port", str(port), "--share", server.share, "--user", server.user,
            "--password", server.password, "--size-mib", "1", "--step-timeout-secs", "20"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    report = json.loads(r.stdout)
    assert r.returncode != 0 and report["ok"] is False
    assert report["steps"] == []


def test_smbrs_multichannel_reads_on_both_channels(start_server):
    """Two connections bind one session (multichannel) and a READ larger
    than 1 MiB is answered on each.

    The second connection goes to the same address again, as a client with
    an RSS interface does (the test server listens on loopback only; the
    client's ``--second-server`` names another address where a server
    listens on more than one). "sign": smb-rs 0.12.1
    encrypts the binding SESSION_SETUP of a session that encrypts, which a
    connection the session is not on yet cannot decrypt (MS-SMB2 3.3.5.2.1.1:
    smbq disconnects, smbd answers INVALID_PARAMETER).
    """
    second = "127.0.0.1"
    server = start_server("smbq", "sign")
    report = _run(server, "tcp", server.port, MC_MIB,
                  ["--multichannel", "--second-server", second, "--chunk-mib", str(MC_READ_MIB)])
    mc = report["multichannel"]
    chans = mc["channels"]
    print("\n".join(f"channel {c['id']} ({c['role']}, {c['address']}): {c['reads']} READs, {c['bytes']} B, "
                     f"largest {c['largest_read']} B, {c['reads_over_1mib']} over 1 MiB" for c in chans))
    print("\n".join(re.sub(r"\x1b\[[0-9;]*m", "", line)
                    for line in server.log.text().splitlines() if "channel bound" in line))

    assert report["dialect"] == "Smb0311"
    assert len(report["sha256_written"]) == 64
    assert report["sha256_read"] == report["sha256_written"] == _expected_sha256(SEED, MC_MIB << 20)
    assert [s["name"] for s in report["steps"]] == [
        "connect", "create", "write", "bind", "read", "delete", "disconnect"]
    assert mc["mode"] == "bind" and mc["second_server"] == second
    assert report["max_read_size"] > 1 << 20
    assert mc["read_size"] == MC_READ_MIB << 20

    # One session, two channels: the primary and the one bound to it.
    assert [c["role"] for c in chans] == ["primary", "bound"]
    assert len({c["id"] for c in chans}) == 2
    assert chans[0]["address"] == f"127.0.0.1:{server.port}"
    assert chans[1]["address"] == f"{second}:{server.port}"
    _check_reads_on_both_channels(server, chans)


def test_smbrs_multichannel_tcp_session_bound_over_quic(start_server):
    """A session spans transports, as a roaming client's does: logged on
    over TCP, then bound (SMB2_SESSION_FLAG_BINDING) to a second connection
    over SMB over QUIC, and a READ larger than 1 MiB answered on each.

    "sign" for the reason test_smbrs_multichannel_reads_on_both_channels
    gives. The binding check (MS-SMB2 3.3.5.5.2) compares the session's and
    the new connection's dialect, signing algorithm and cipher; smb-rs
    offers the same lists over both transports (over QUIC it also accepts
    transport-level security, which changes none of them), so the report
    must show the same three on both channels.
    """
    server = start_server("smbq", "sign")
    quic_port = _quic_port(server)
    report = _run(server, "tcp", server.port, MC_MIB,
                  ["--multichannel", "--second-server", "127.0.0.1",
                   "--second-transport", "quic", "--second-port", str(quic_port),
                   "--root-cert", str(_quic_cert(server)), "--chunk-mib", str(MC_READ_MIB)])
    mc = report["multichannel"]
    chans = mc["channels"]
    print("\n".join(f"channel {c['id']} ({c['role']}, {c['transport']} {c['address']}, {c['dialect']}, "
                     f"signing {c['signing']}, cipher {c['cipher']}): {c['reads']} READs, {c['bytes']} B, "
                     f"largest {c['largest_read']} B, {c['reads_over_1mib']} over 1 MiB" for c in chans))
    print("\n".join(re.sub(r"\x1b\[[0-9;]*m", "", line)
                    for line in server.log.text().splitlines() if "channel bound" in line))

    assert report["ok"] is True and report["transport"] == "tcp"
    assert report["dialect"] == "Smb0311"
    assert report["sha256_read"] == report["sha256_written"] == _expected_sha256(SEED, MC_MIB << 20)
    assert [s["name"] for s in report["steps"]] == [
        "connect", "create", "write", "bind", "read", "delete", "disconnect"]
    assert mc["mode"] == "bind"
    assert (mc["second_server"], mc["second_transport"], mc["second_port"]) == ("127.0.0.1", "quic", quic_port)
    assert mc["read_size"] == MC_READ_MIB << 20

    # One session, two channels with different ids: the primary over TCP,
    # the bound one over QUIC.
    assert [c["role"] for c in chans] == ["primary", "bound"]
    assert len({c["id"] for c in chans}) == 2
    assert [(c["transport"], c["address"]) for c in chans] == [
        ("tcp", f"127.0.0.1:{server.port}"), ("quic", f"127.0.0.1:{quic_port}")]
    for c in chans:
        assert c["dialect"] == "Smb0311"
        assert (c["signing"], c["cipher"]) == (chans[0]["signing"], chans[0]["cipher"])
    _check_reads_on_both_channels(server, chans)


def _check_reads_on_both_channels(server, chans: list[dict]) -> None:
    """Each channel answered a READ larger than 1 MiB and half the bytes;
    the client deleted its file."""
    for c in chans:
        assert c["max_read_size"] > 1 << 20
        assert c["reads_over_1mib"] >= 1 and c["largest_read"] > 1 << 20, (
            f"channel {c['id']} ({c['role']}, {c.get('transport')}) answered no READ larger than 1 MiB: {c}")
    assert sum(c["bytes"] for c in chans) == MC_MIB << 20
    assert chans[0]["bytes"] == chans[1]["bytes"] == MC_MIB << 19
    assert sorted(os.listdir(server.share_dir)) == []
