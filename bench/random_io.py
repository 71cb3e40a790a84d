#!/usr/bin/env python3
"""S2/S3 random 4 KiB I/O (BENCHMARKS.md), smbq against Samba's smbd, both over encrypted TCP.

usage: bench/random_io.py [--filesize 1g] [--ramp 5] [--runtime 20] [--reps 3]
                          [--targets smbq,smbd] [--scenarios S2,S3] [--mode enc] [--full] [--json]

Starts `smbq serve` and smbd through tests/e2e/servers.py (encryption
required by default), then runs `smbq-bench random` (our client, one TCP
connection, SMB 3.1.1 sealed with AES-128-GCM) against each:

  S2: randread and randwrite, bs 4k, 1 file of --filesize (default 1 GiB), iodepth 16
  S3: randread and randwrite, bs 4k, 16 files of 100 KiB, iodepth 4

Runs interleave (each repetition runs every scenario on every server in
turn) so a slow spell of the machine weighs on both alike; the files are
laid out once per server, before their first run's ramp. Prints the median
over --reps of IOPS, MB/s, latency p50/p99/p99.9 and the server's CPU
seconds in the measured window (smbd: its whole process tree), and the
smbq/smbd IOPS ratio per scenario. --json prints one JSON object instead;
both write bench/out/random_io.json. --full uses the thesis's ramp 15 s and
runtime 120 s. Build first: cargo build --release -p smbq -p smbq-bench.
Run as root (smbd needs it). A benchmark: it never fails on a figure.
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

BENCH = Path(os.environ.get("SMBQ_BENCH_BIN") or ROOT / "target" / "release" / "smbq-bench")
# name -> (file name prefix, bs, nrfiles, filesize or None for --filesize, iodepth)
SCENARIOS = {
    "S2": ("s2", "4k", 1, None, 16),
    "S3": ("s3", "4k", 16, "100k", 4),
}
RWS = ("randread", "randwrite")


def run_one(server, scenario: str, rw: str, args) -> dict:
    prefix, bs, nrfiles, filesize, iodepth = SCENARIOS[scenario]
    argv = [str(BENCH), "random", "--addr", f"{server.host}:{server.port}", "--share", server.share,
            "--user", server.user, "--password", server.password, "--rw", rw, "--bs", bs,
            "--nrfiles", str(nrfiles), "--filesize", filesize or args.filesize, "--iodepth", str(iodepth),
            "--ramp", str(args.ramp), "--runtime", str(args.runtime), "--name", prefix,
            "--server-pid", str(server.proc.pid), "--json"]
    if server.mode == "enc":
        argv.append("--encrypt")
    timeout = 600 + args.ramp + args.runtime
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        shown = [a if a != server.password else "***" for a in argv]
        raise RuntimeError(f"{' '.join(shown)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def median_of(runs: list[dict]) -> dict:
    return {
        "iops": statistics.median(r["iops"] for r in runs),
        "mb_s": statistics.median(r["mb_s"] for r in runs),
        "p50_us": statistics.median(r["lat_us"]["p50"] for r in runs),
        "p99_us": statistics.median(r["lat_us"]["p99"] for r in runs),
        "p99_9_us": statistics.median(r["lat_us"]["p99_9"] for r in runs),
        "server_cpu_s": statistics.median(r["server_cpu_s"] for r in runs) if all(
            r["server_cpu_s"] is not None for r in runs) else None,
        "client_cpu_s": statistics.median(r["client_cpu_s"] for r in runs),
        "server_cpu_us_per_op": statistics.median(r["server_cpu_us_per_op"] for r in runs) if all(
            r["server_cpu_us_per_op"] is not None for r in runs) else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filesize", default="1g", help="S2's file size (fio size=1g); smaller for quick runs")
    ap.add_argument("--ramp", type=float, default=5.0)
    ap.add_argument("--runtime", type=float, default=20.0)
    ap.add_argument("--full", action="store_true", help="the thesis's ramp 15 s and runtime 120 s")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--targets", default="smbq,smbd")
    ap.add_argument("--scenarios", default="S2,S3")
    ap.add_argument("--mode", default="enc", choices=servers.MODES)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()
    if args.full:
        args.ramp, args.runtime = 15.0, 120.0
    targets = args.targets.split(",")
    scenarios = args.scenarios.split(",")
    for t in targets:
        if t not in ("smbq", "smbd"):
            ap.error(f"unknown target {t}")
    for s in scenarios:
        if s not in SCENARIOS:
            ap.error(f"unknown scenario {s}")
    if not BENCH.exists():
        print(f"{BENCH} does not exist: cargo build --release -p smbq -p smbq-bench", file=sys.stderr)
        return 2
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))

    started: dict = {}
    runs: dict = {(t, s, rw): [] for t in targets for s in scenarios for rw in RWS}
    errors: list[str] = []
    try:
        for t in targets:
            workdir = Path(tempfile.mkdtemp(prefix=f"smbq-random-{t}-"))
            try:
                started[t] = (servers.start(t, workdir, args.mode), workdir)
            except RuntimeError as e:
                errors.append(f"{t}: cannot start: {e}")
                log(errors[-1])
                shutil.rmtree(workdir, ignore_errors=True)
        time.sleep(0.5)
        for rep in range(args.reps):
            for s in scenarios:
                for rw in RWS:
                    for t, (server, _) in started.items():
                        if not server.alive():
                            continue
                        try:
                            r = run_one(server, s, rw, args)
                        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                            errors.append(f"{t} {s} {rw} rep {rep + 1}: {e}")
                            log(errors[-1])
                            continue
                        runs[(t, s, rw)].append(r)
                        laid = f", {r['laid_out_files']} file(s) laid out in {r['layout_s']:.1f} s" if r["laid_out_files"] else ""
                        cpu = f"{r['server_cpu_s']:.2f}" if r["server_cpu_s"] is not None else "?"
                        log(f"rep {rep + 1}/{args.reps} {t:4} {s} {rw:9}: {r['iops']:8.0f} IOPS  "
                            f"p50 {r['lat_us']['p50']:7.1f} us  p99 {r['lat_us']['p99']:8.1f} us  "
                            f"server CPU {cpu} s{laid}")
    finally:
        for t, (server, workdir) in started.items():
            problems = server.stop()
            if problems:
                errors.append(f"{t}: {server.failure_text(problems)}")
                log(errors[-1])
            shutil.rmtree(workdir, ignore_errors=True)

    medians = {f"{t}/{s}-{rw}": median_of(v) for (t, s, rw), v in runs.items() if v}
    ratios = {}
    for s in scenarios:
        for rw in RWS:
            q, d = medians.get(f"smbq/{s}-{rw}"), medians.get(f"smbd/{s}-{rw}")
            if q and d and d["iops"]:
                ratios[f"{s}-{rw}"] = q["iops"] / d["iops"]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    smbd_version = subprocess.run(["smbd", "--version"], capture_output=True, text=True).stdout.strip() if shutil.which("smbd") else None
    out = {
        "benchmark": "random_io", "mode": args.mode, "reps": args.reps, "ramp_s": args.ramp, "runtime_s": args.runtime,
        "scenarios": {s: dict(zip(("prefix", "bs", "nrfiles", "filesize", "iodepth"), SCENARIOS[s])) | (
            {"filesize": args.filesize} if SCENARIOS[s][3] is None else {}) for s in scenarios},
        "client": "smbq-bench random (smbq_client, one TCP connection)", "smbd": smbd_version,
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()}, "commit": commit or None,
        "median": medians, "iops_ratio_smbq_over_smbd": ratios, "runs": {f"{t}/{s}-{rw}": v for (t, s, rw), v in runs.items()},
        "errors": errors,
    }
    out_dir = ROOT / "bench" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "random_io.json").write_text(json.dumps(out, indent=2) + "\n")
    if args.json:
        print(json.dumps(out))
        return 0

    print(f"\nrandom 4 KiB I/O, mode {args.mode}, ramp {args.ramp:g} s, runtime {args.runtime:g} s, "
          f"S2 filesize {args.filesize}, median of {args.reps}")
    print(f"{'system':7} {'scenario':15} {'IOPS':>9} {'MB/s':>7} {'p50 us':>8} {'p99 us':>8} {'p99.9 us':>9} "
          f"{'srv CPU-s':>9} {'srv us/op':>9}")
    for s in scenarios:
        for rw in RWS:
            for t in targets:
                m = medians.get(f"{t}/{s}-{rw}")
                if not m:
                    continue
                cpu = f"{m['server_cpu_s']:9.2f}" if m["server_cpu_s"] is not None else f"{'?':>9}"
                per_op = f"{m['server_cpu_us_per_op']:9.1f}" if m["server_cpu_us_per_op"] is not None else f"{'?':>9}"
                print(f"{t:7} {s + '-' + rw:15} {m['iops']:9.0f} {m['mb_s']:7.1f} {m['p50_us']:8.1f} {m['p99_us']:8.1f} "
                      f"{m['p99_9_us']:9.1f} {cpu} {per_op}")
    for k, v in ratios.items():
        print(f"IOPS smbq/smbd {k}: {v:.2f}")
    for e in errors:
        print(f"error: {e.splitlines()[0]}")
    print(f"written: {out_dir / 'random_io.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
