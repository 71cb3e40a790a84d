#!/usr/bin/env python3
"""Our client against Samba's smbclient, and the FUSE mount against our
client, on the same private smbd (loopback, encryption required), same run.

    .venv/bin/python scripts/bench-client.py [--size-mib 1024] [--reps 3] [--json]

Moves a file of --size-mib (random content, in /dev/shm) with
`smbq put`/`smbq get` (TCP), `smbclient -c put/get` and `dd bs=1M` through
`smbq mount`; prints the median seconds and MB/s of each, and the ratios
the client issue asks for (ours / smbclient, FUSE dd / ours). Every copy is
checked byte-exact. A benchmark, not a test: nothing fails on a time.
Needs root (smbd, FUSE), target/release/smbq, smbd and smbclient.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import servers  # noqa: E402
from files import random_file, sha256_file  # noqa: E402


def timed(argv: list[str], env: dict | None = None) -> float:
    t = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"{argv[0]} {argv[1]} failed ({r.returncode}): {r.stdout}{r.stderr}")
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-mount", action="store_true", help="leave out the FUSE rows")
    a = ap.parse_args()

    # Both ends in memory: the disk is not what is measured.
    work = Path(tempfile.mkdtemp(prefix="smbq-bench-client-", dir="/dev/shm"))
    shm = Path(tempfile.mkdtemp(prefix="smbq-bench-client-", dir="/dev/shm"))
    work.chmod(0o755)
    (work / "smbd").mkdir()
    srv = servers.start("smbd", work / "smbd", "enc")
    smbq = str(servers.smbq_bin())
    env = dict(os.environ, SMBQ_PASSWORD=srv.password)
    url = f"smb://{srv.user}@127.0.0.1:{srv.port}/{srv.share}"
    client = ["smbclient", f"//127.0.0.1/{srv.share}", "-p", str(srv.port), "-A", str(srv.auth_file()), "-m", "SMB3"]
    src = shm / "src.bin"
    digest = random_file(src, a.size_mib << 20)
    back = shm / "back.bin"
    mnt = work / "mnt"
    mnt.mkdir()
    mount = None
    rows: dict[str, list[float]] = {}

    try:
        if not a.no_mount:
            mount = subprocess.Popen([smbq, "mount", "--transport", "tcp", url, str(mnt)], env=env, stderr=subprocess.PIPE, text=True)
            for _ in range(100):
                if os.path.ismount(mnt):
                    break
                time.sleep(0.1)
            else:
                raise SystemExit(f"smbq mount did not mount: {mount.stderr.read() if mount.poll() is not None else ''}")
        remote = srv.share_dir / "f.bin"
        # A first round that is not counted: the first transfers of a fresh
        # smbd (and of a new file in /dev/shm) are slower than the rest.
        for rep in range(-1, a.reps):
            print(f"rep {rep + 1}/{a.reps}" if rep >= 0 else "warm-up round", file=sys.stderr)
            steps = [
                ("smbq put", [smbq, "put", "--transport", "tcp", str(src), f"{url}/f.bin"], remote),
                ("smbq get", [smbq, "get", "--transport", "tcp", f"{url}/f.bin", str(back)], back),
                ("smbclient put", client + ["-c", f"put {src} f.bin"], remote),
                ("smbclient get", client + ["-c", f"get f.bin {back}"], back),
            ]
            if mount is not None:
                steps += [
                    ("mount dd write", ["dd", f"if={src}", f"of={mnt}/f.bin", "bs=1M", "conv=fsync"], remote),
                    ("mount dd read", ["dd", f"if={mnt}/f.bin", f"of={back}", "bs=1M"], back),
                ]
            for name, argv, out in steps:
                # Each write makes the file anew; each read reads the file in place.
                reads = name.endswith(("get", "read"))
                if reads and not remote.exists():
                    shutil.copyfile(src, remote)
                if not reads and remote.exists():
                    remote.unlink()
                took = timed(argv, env)
                if rep >= 0:
                    rows.setdefault(name, []).append(took)
                if sha256_file(out) != digest:
                    raise SystemExit(f"{name}: the copy differs")
                if reads:
                    out.unlink()
    finally:
        if mount is not None:
            subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
            mount.wait(30)
        srv.stop()
        shutil.rmtree(shm, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)

    mb = (a.size_mib << 20) / 1e6
    med = {k: statistics.median(v) for k, v in rows.items()}
    ratios = {
        "get: smbq / smbclient (speed)": med["smbclient get"] / med["smbq get"],
        "put: smbq / smbclient (speed)": med["smbclient put"] / med["smbq put"],
    }
    if "mount dd read" in med:
        ratios["read: mount dd / smbq get (speed)"] = med["smbq get"] / med["mount dd read"]
        ratios["write: mount dd / smbq put (speed)"] = med["smbq put"] / med["mount dd write"]
    out = {"size_mib": a.size_mib, "reps": a.reps, "seconds": rows, "median_mb_s": {k: mb / v for k, v in med.items()}, "ratios": ratios}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{a.size_mib} MiB against smbd (TCP, encryption required), medians of {a.reps}:")
    for k, v in med.items():
        print(f"  {k:<16} {v:7.2f} s  {mb / v:8.1f} MB/s")
    for k, v in ratios.items():
        print(f"  {k:<36} {v:5.2f}")


if __name__ == "__main__":
    main()
