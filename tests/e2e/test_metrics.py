"""`smbq serve --metrics ADDR:PORT`: Prometheus text at /metrics, scraped during and after a transfer with a
known number of bytes (smbprotocol over TCP), a failed open, and QUIC
connections of our own client (a listing, then a transfer)."""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest

import servers
from test_client import fingerprint

pytest.importorskip("smbprotocol")
from smbprotocol.exceptions import SMBResponseException  # noqa: E402
from smbprotocol.open import CreateDisposition  # noqa: E402
from test_acls import FILE_ALL, Client  # noqa: E402

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        assert m, line
        out[(m.group(1), frozenset(LABEL.findall(m.group(2) or "")))] = float(m.group(3))
    return out


def get(metrics: dict, name: str, **labels: str) -> float:
    """The series' value; 0 for one not there yet (a counter never incremented)."""
    return metrics.get((name, frozenset(labels.items())), 0.0)


def wait_for(port: int, cond, what: str, timeout: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(port)
        if cond(m):
            return m
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not so after {timeout} s:\n" + "\n".join(f"{k[0]}{dict(k[1])} {v}" for k, v in sorted(m.items(), key=str) if k[0].startswith("smbq_")))
        time.sleep(0.1)


def test_metrics_count_a_transfer_errors_and_quic(start_server, tmp_path: Path):
    mport = servers.free_port()
    srv = start_server("smbq", "desired", serve_args=("--metrics", f"127.0.0.1:{mport}"))
    before = scrape(mport)
    assert get(before, "smbq_connections", transport="tcp") == 0
    assert get(before, "smbq_sessions") == 0 and get(before, "smbq_opens") == 0

    # The certificate's notAfter, as openssl reads it.
    cert = srv.workdir / "state" / "tls" / "cert.pem"
    end = subprocess.run(["openssl", "x509", "-enddate", "-noout", "-in", str(cert)], capture_output=True, text=True, check=True).stdout
    not_after = datetime.strptime(end.strip().split("=", 1)[1], "%b %d %H:%M:%S %Y %Z").replace(tzinfo=timezone.utc)
    assert get(before, "smbq_certificate_expiry_timestamp_seconds") == not_after.timestamp()

    chunk = 1 << 20
    written = 3 * chunk + 12345
    data = os.urandom(written)
    client = Client(srv)
    fh = client.open("metrics.bin", FILE_ALL, CreateDisposition.FILE_OVERWRITE_IF)
    writes = 0
    for off in range(0, written, chunk):
        fh.write(data[off:off + chunk], off)
        writes += 1
        if writes == 2:
            # Mid-transfer: what has been written so far, exactly.
            mid = scrape(mport)
            assert get(mid, "smbq_written_bytes_total") - get(before, "smbq_written_bytes_total") == 2 * chunk
            assert get(mid, "smbq_opens") >= 1
    reads, read = 0, 0
    for off, n in ((100, chunk), (100 + chunk, 777)):
        assert fh.read(off, n) == data[off:off + n]
        reads, read = reads + 1, read + n

    during = scrape(mport)
    assert get(during, "smbq_written_bytes_total") - get(before, "smbq_written_bytes_total") == written
    assert get(during, "smbq_read_bytes_total") - get(before, "smbq_read_bytes_total") == read
    assert get(during, "smbq_connections", transport="tcp") >= 1
    assert get(during, "smbq_connections_accepted_total", transport="tcp") >= 1
    assert get(during, "smbq_sessions") >= 1
    assert get(during, "smbq_opens") >= 1
    assert get(during, "smbq_requests_total", command="WRITE") >= writes
    assert get(during, "smbq_requests_total", command="READ") >= reads
    assert get(during, "smbq_request_duration_seconds_count", command="WRITE") >= writes
    assert get(during, "smbq_received_bytes_total", transport="tcp") > written
    assert get(during, "smbq_sent_bytes_total", transport="tcp") > read

    # A failed open counts its status.
    with pytest.raises(SMBResponseException) as e:
        client.open("no-such-file", FILE_ALL)
    assert e.value.status == 0xC0000034
    failed = scrape(mport)
    nf = "STATUS_OBJECT_NAME_NOT_FOUND"
    assert get(failed, "smbq_errors_total", status=nf) - get(during, "smbq_errors_total", status=nf) == 1

    fh.close()
    client.tree.disconnect()
    client.session.disconnect()
    client.conn.disconnect()
    after = wait_for(mport, lambda m: get(m, "smbq_connections", transport="tcp") == 0 and get(m, "smbq_sessions") == 0
                     and get(m, "smbq_opens") == 0, "tcp connection, session and opens gone")
    assert get(after, "smbq_written_bytes_total") - get(before, "smbq_written_bytes_total") == written
    assert get(after, "smbq_read_bytes_total") - get(before, "smbq_read_bytes_total") == read

    # Our client over QUIC: an RTT sample, and the connection counted.
    env = dict(os.environ, SMBQ_PASSWORD=srv.password)
    env.pop("SMBQ_USER", None)
    url = f"smb://{srv.user}@127.0.0.1:{srv.quic_port}/{srv.share}"
    r = subprocess.run([str(servers.smbq_bin()), "ls", "--transport", "quic", "--fingerprint", fingerprint(cert), url],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "metrics.bin" in r.stdout
    # Sampled when the connection starts, every 10 s and when it ends (our
    # client may exit without closing it: the server then waits for the
    # idle timeout, so its end is not awaited here).
    quic = wait_for(mport, lambda m: get(m, "smbq_quic_rtt_seconds_count") >= 1, "a QUIC RTT sample")
    assert get(quic, "smbq_connections_accepted_total", transport="quic") == 1
    assert 0 < get(quic, "smbq_quic_rtt_seconds_sum") < 1
    assert get(quic, "smbq_received_bytes_total", transport="quic") > 0
    assert get(quic, "smbq_requests_total", command="QUERY_DIRECTORY") >= 1

    # A QUIC transfer by our client: the path and congestion control
    # figures, sampled per connection at its start, every 10 s and at its
    # end, as histograms (no connection label) and counters.
    src = tmp_path / "up.bin"
    src.write_bytes(os.urandom(4 << 20))
    r = subprocess.run([str(servers.smbq_bin()), "put", "--json", "--transport", "quic", "--fingerprint", fingerprint(cert),
                        str(src), f"{url}/up.bin"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # (A connection's sample goes into one series after another: wait for all.)
    histograms = ("smbq_quic_rtt_seconds", "smbq_quic_min_rtt_seconds", "smbq_quic_cwnd_bytes",
                  # The default controller (smbq's) gives a pacing rate.
                  "smbq_quic_pacing_rate_bits_per_second")
    up = wait_for(mport, lambda m: all(get(m, f"{h}_count") >= 2 for h in histograms), "samples of both QUIC connections")
    assert get(up, "smbq_connections_accepted_total", transport="quic") == 2
    samples = get(up, "smbq_quic_cwnd_bytes_count")
    # Every sample has a window of at least the minimum (2 packets of 1200 bytes).
    assert get(up, "smbq_quic_cwnd_bytes_sum") >= samples * 2400
    assert get(up, "smbq_quic_cwnd_bytes_bucket", le="+Inf") == samples
    assert 0 < get(up, "smbq_quic_min_rtt_seconds_sum") < 1
    assert get(up, "smbq_quic_pacing_rate_bits_per_second_sum") > 0
    assert get(up, "smbq_quic_sent_packets_total") >= 2 * 3, "at least a handshake's packets per connection"
    for counter in ("smbq_quic_lost_packets_total", "smbq_quic_lost_bytes_total", "smbq_quic_congestion_events_total"):
        assert (counter, frozenset()) in up, counter
    print(f"written {written} read {read} writes {writes} reads {reads}; "
          f"quic rtt samples {get(up, 'smbq_quic_rtt_seconds_count')} sum {get(up, 'smbq_quic_rtt_seconds_sum')}; "
          f"cwnd sum {get(up, 'smbq_quic_cwnd_bytes_sum')}; sent {get(up, 'smbq_quic_sent_packets_total')}; "
          f"lost {get(up, 'smbq_quic_lost_packets_total')}; not_after {int(not_after.timestamp())}")
