#!/usr/bin/env python3
"""smbclient put and get of a large file, smbq against smbd, same machine, same run.

usage: bench/put_get.py [--size-mib 1024] [--reps 3] [--targets smbq,smbd] [--mode enc]

For each target: start the server (encryption required by default), then
`reps` times put a random file and get it back with Samba's smbclient (SMB3,
--client-protection=encrypt), timing each transfer and the server's CPU
seconds (utime+stime of the server and all its processes, including reaped
per-client smbd children). Prints medians, the smbq/smbd ratio, and writes
bench/out/put_get.json. A benchmark, not a test: it never fails on a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.dont_write_bytecode = True  # keep __pycache__ out of tests/e2e
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import servers  # noqa: E402


def smbclient(server, command: str) -> subprocess.CompletedProcess:
    protection = "encrypt" if server.mode == "enc" else "sign"
    argv = ["smbclient", server.unc, "-p", str(server.port), "-A", str(server.auth_file()), "-m", "SMB3",
            "--option=client min protocol=SMB2_02", f"--client-protection={protection}", "-c", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)


def settle(server, baseline: int) -> None:
    """Wait until smbd's per-client child is gone (so its CPU is in cutime)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(servers._children(server.proc.pid)) > baseline:
        time.sleep(0.05)


def timed(server, command: str, baseline: int) -> tuple[float, float]:
    """(wall seconds, server CPU seconds) of one smbclient command."""
    cpu0 = server.cpu_seconds()
    t0 = time.monotonic()
    r = smbclient(server, command)
    wall = time.monotonic() - t0
    if r.returncode != 0 or "NT_STATUS_" in r.stdout + r.stderr:
        raise RuntimeError(f"smbclient -c {command!r} failed:\n{r.stdout}{r.stderr}")
    settle(server, baseline)
    return wall, server.cpu_seconds() - cpu0


def bench_target(target: str, mode: str, src: Path, size: int, reps: int) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix=f"smbq-bench-{target}-"))
    server = servers.start(target, workdir, mode)
    try:
        time.sleep(0.5)
        baseline = len(servers._children(server.proc.pid))
        runs = []
        for i in range(reps):
            put_s, put_cpu = timed(server, f"put {src} big.bin", baseline)
            if (server.share_dir / "big.bin").stat().st_size != size:
                raise RuntimeError("put produced a file of the wrong size")
            get_s, get_cpu = timed(server, "get big.bin /dev/null", baseline)
            (server.share_dir / "big.bin").unlink()
            run = {"put_s": put_s, "put_cpu_s": put_cpu, "get_s": get_s, "get_cpu_s": get_cpu}
            runs.append(run)
            print(f"{target:5} rep {i + 1}: put {size / put_s / 1e6:7.1f} MB/s ({put_cpu:5.2f} cpu-s), "
                  f"get {size / get_s / 1e6:7.1f} MB/s ({get_cpu:5.2f} cpu-s)", file=sys.stderr, flush=True)
    finally:
        problems = server.stop()
        if problems:
            print(server.failure_text(problems), file=sys.stderr)
        shutil.rmtree(workdir, ignore_errors=True)
    gib = size / (1 << 30)
    out = {"runs": runs}
    for op in ("put", "get"):
        out[f"{op}_MBps_median"] = statistics.median(size / r[f"{op}_s"] / 1e6 for r in runs)
        out[f"{op}_cpu_s_per_GiB_median"] = statistics.median(r[f"{op}_cpu_s"] / gib for r in runs)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--targets", default="smbq,smbd")
    ap.add_argument("--mode", default="enc", choices=servers.MODES)
    args = ap.parse_args()
    size = args.size_mib << 20
    tmp = Path(tempfile.mkdtemp(prefix="smbq-bench-src-"))
    results: dict = {}
    try:
        src = tmp / "src.bin"
        with open(src, "wb") as f:
            for _ in range(args.size_mib):
                f.write(os.urandom(1 << 20))
        for target in args.targets.split(","):
            try:
                results[target] = bench_target(target, args.mode, src, size, args.reps)
            except RuntimeError as e:
                print(f"{target}: {e}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nsmbclient put/get of {args.size_mib} MiB, mode {args.mode}, median of {args.reps}")
    print(f"{'server':8} {'put MB/s':>9} {'get MB/s':>9} {'put cpu-s/GiB':>14} {'get cpu-s/GiB':>14}")
    for t, r in results.items():
        print(f"{t:8} {r['put_MBps_median']:9.1f} {r['get_MBps_median']:9.1f} "
              f"{r['put_cpu_s_per_GiB_median']:14.2f} {r['get_cpu_s_per_GiB_median']:14.2f}")
    ratio = {}
    if "smbq" in results and "smbd" in results:
        q, d = results["smbq"], results["smbd"]
        ratio = {k: q[k] / d[k] for k in q if k.endswith("median") and d[k]}
        print(f"{'smbq/smbd':8} {ratio['put_MBps_median']:9.2f} {ratio['get_MBps_median']:9.2f} "
              f"{ratio.get('put_cpu_s_per_GiB_median', 0):14.2f} {ratio.get('get_cpu_s_per_GiB_median', 0):14.2f}")
    out_dir = ROOT / "bench" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    smbclient_version = subprocess.run(["smbclient", "--version"], capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (out_dir / "put_get.json").write_text(json.dumps({
        "size_bytes": size, "reps": args.reps, "mode": args.mode, "client": smbclient_version,
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()}, "commit": commit or None,
        "results": results, "ratio_smbq_over_smbd": ratio,
    }, indent=2) + "\n")
    print(f"written: {out_dir / 'put_get.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
