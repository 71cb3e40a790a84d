#!/usr/bin/env python3
"""Open N files by name in one directory (a benchmark, not a test).

Three servers, started as the end-to-end tests start them (tests/e2e/servers.py,
signing required, no encryption):

* smbq with case-insensitive names (the default),
* smbq with ``case_sensitive`` on the share,
* Samba's smbd with its default case handling (case-insensitive for SMB2).

Each share gets one directory of N files (made directly on disk). Our client
(``smbq stat``, one connection per batch of URLs) opens every file by name:
one CREATE + QUERY_INFO + CLOSE compound per file, one after the other. Then
the same with every name in lower case (the files are named ``Item-…``):
smbq finds them through its per-directory name cache, smbd by its own means
(a directory scan per name it has not seen, so only ``--wrong-case-smbd``
names are asked of it); the case-sensitive share finds none, so it is not
asked. Prints seconds and opens per second per run; ``--json`` for a record.

    scripts/bench-lookup.py [--files 100000] [--wrong-case-smbd 1000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import servers  # noqa: E402

DIR = "Many"
# argv stays well below ARG_MAX (2 MiB) with URLs of about 60 bytes.
BATCH = 10_000


def name(i: int) -> str:
    return f"Item-{i:06d}.Dat"


def populate(share: Path, n: int) -> None:
    d = share / DIR
    d.mkdir()
    for i in range(n):
        os.close(os.open(d / name(i), os.O_CREAT | os.O_WRONLY, 0o644))


def open_all(srv: servers.Server, names: list[str]) -> float:
    """Seconds `smbq stat` takes to open every name in DIR."""
    base = f"smb://{srv.user}@{srv.host}:{srv.port}/{srv.share}/{DIR}/"
    env = dict(os.environ, SMBQ_PASSWORD=srv.password)
    env.pop("SMBQ_USER", None)
    took = 0.0
    for at in range(0, len(names), BATCH):
        urls = [base + n for n in names[at:at + BATCH]]
        cmd = [str(servers.smbq_bin()), "stat", "--transport", "tcp", *urls]
        start = time.monotonic()
        r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        took += time.monotonic() - start
        if r.returncode != 0:
            raise RuntimeError(f"smbq stat against {srv.name} failed ({r.returncode}): {r.stderr[-2000:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=100_000, help="files in the directory (default 100000)")
    ap.add_argument("--wrong-case-smbd", type=int, default=1000, metavar="N",
                    help="lower-cased names asked of smbd (default 1000; 0: none)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()

    exact = [name(i) for i in range(args.files)]
    lower = [n.lower() for n in exact]
    setups = [
        ("smbq", "smbq", ""),
        ("smbq case_sensitive", "smbq", ",case_sensitive"),
        ("smbd", "smbd", ""),
    ]
    results = []
    top = Path(tempfile.mkdtemp(prefix="bench-lookup-"))
    top.chmod(0o755)  # smbd serves as an unprivileged user
    try:
        for label, kind, opts in setups:
            if kind == "smbd" and servers.smbd_available():
                print(f"skipping smbd: {servers.smbd_available()}", file=sys.stderr)
                continue
            work = top / label.replace(" ", "-")
            work.mkdir()
            srv = (servers.start_smbq(work, "sign", share_opts=opts) if kind == "smbq"
                   else servers.start_smbd(work, "sign"))
            try:
                populate(srv.share_dir, args.files)
                runs = [("exact", exact)]
                if kind == "smbq" and not opts:
                    runs.append(("lower case", lower))
                elif kind == "smbd" and args.wrong_case_smbd:
                    step = max(1, args.files // args.wrong_case_smbd)
                    runs.append(("lower case", lower[::step][:args.wrong_case_smbd]))
                for what, names in runs:
                    secs = open_all(srv, names)
                    results.append({"server": label, "names": what, "opens": len(names),
                                    "seconds": round(secs, 3), "opens_per_s": round(len(names) / secs)})
                    print(f"{label:<20} {what:<10} {len(names):>7} opens {secs:8.2f} s", file=sys.stderr)
            finally:
                problems = srv.stop()
                if problems:
                    print(srv.failure_text(problems), file=sys.stderr)
    finally:
        shutil.rmtree(top, ignore_errors=True)

    if args.json:
        print(json.dumps({"files_in_directory": args.files, "results": results}, indent=1))
    else:
        print(f"{args.files} files in one directory; CREATE+QUERY_INFO+CLOSE per name (smbq stat, TCP, signed)")
        print(f"{'server':<20} {'names':<10} {'opens':>7} {'seconds':>9} {'opens/s':>9}")
        for r in results:
            print(f"{r['server']:<20} {r['names']:<10} {r['opens']:>7} {r['seconds']:>9.2f} {r['opens_per_s']:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
