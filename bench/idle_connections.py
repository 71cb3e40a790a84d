#!/usr/bin/env python3
"""S6 idle connections: server memory and threads with N authenticated connections, each holding an open file.

usage: bench/idle_connections.py [--counts 100,1000] [--targets smbq,smbd] [--mode sign] [--json]

For each target and each N in --counts, on a freshly started server
(tests/e2e/servers.py): read the server's resident memory (VmRSS) and
thread count from /proc before any connection, then open N TCP connections
from this process with Python smbprotocol, each doing NEGOTIATE, NTLM
SESSION_SETUP, TREE_CONNECT and a CREATE of its own file that stays open,
and read them again with all N connected (after an ECHO on every connection,
to show each is still served). Per-connection memory = (with N - idle) / N.
Then everything is closed; the figures 2 s later, and how long until the
thread count is back to its idle value, are reported too; the server stops.

smbq is one process; smbd forks one process per connection, so for smbd
the figures are sums over its process tree: RSS (which counts the pages
the processes share once per process), PSS (shared pages divided among
them, from /proc/PID/smaps_rollup: the fairer sum) and the process count.

A benchmark, not a test: it prints figures and never fails on one. Run it
as root for smbd. Needs smbprotocol (in .venv: the script re-runs itself
with .venv/bin/python when smbprotocol is not importable).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.dont_write_bytecode = True  # keep __pycache__ out of tests/e2e
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

try:
    from smbprotocol.connection import Connection
    from smbprotocol.open import (CreateDisposition, CreateOptions, FileAttributes, FilePipePrinterAccessMask,
                                  ImpersonationLevel, Open, ShareAccess)
    from smbprotocol.session import Session
    from smbprotocol.tree import TreeConnect
except ImportError:
    venv_python = ROOT / ".venv" / "bin" / "python"
    if venv_python.exists() and Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        os.execv(str(venv_python), [str(venv_python), *sys.argv])
    raise

import servers  # noqa: E402


def status(pid: int) -> dict[str, int]:
    """VmRSS (KiB) and Threads of one process."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            out[key] = int(value.split()[0])
    return out


def pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def measure(pid: int) -> dict:
    """RSS, PSS, threads and process count of pid and its descendants."""
    rss = pss = threads = procs = 0
    for p in [pid, *servers._children(pid)]:
        try:
            s = status(p)
            rss += s.get("VmRSS", 0)
            threads += s.get("Threads", 0)
            pss += pss_kib(p)
            procs += 1
        except OSError:
            pass  # gone meanwhile
    return {"rss_kib": rss, "pss_kib": pss, "threads": threads, "processes": procs}


class Held:
    """One connection with its session, tree and open file."""

    def __init__(self, server, i: int, encrypt: bool):
        self.conn = Connection(uuid.uuid4(), server.host, server.port, require_signing=True)
        self.conn.connect(timeout=60)
        self.session = Session(self.conn, server.user, server.password, require_encryption=encrypt, auth_protocol="ntlm")
        self.session.connect()
        self.tree = TreeConnect(self.session, rf"\\{server.host}\{server.share}")
        self.tree.connect()
        self.open = Open(self.tree, f"idle-{i}.txt")
        self.open.create(ImpersonationLevel.Impersonation,
                         FilePipePrinterAccessMask.GENERIC_READ | FilePipePrinterAccessMask.GENERIC_WRITE,
                         FileAttributes.FILE_ATTRIBUTE_NORMAL,
                         ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE,
                         CreateDisposition.FILE_OVERWRITE_IF, CreateOptions.FILE_NON_DIRECTORY_FILE)

    def close(self) -> None:
        try:
            self.open.close()
        finally:
            self.conn.disconnect(close=True)


def one(kind: str, mode: str, n: int, log) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix=f"smbq-idle-{kind}-"))
    server = servers.start(kind, workdir, mode)
    held: list[Held] = []
    out: dict = {"target": kind, "mode": mode, "n": n}
    try:
        pid = server.proc.pid
        time.sleep(1.0)
        out["idle"] = measure(pid)
        t0 = time.monotonic()
        error = None
        for i in range(n):
            try:
                held.append(Held(server, i, mode == "enc"))
            except Exception as e:  # noqa: BLE001 - report whatever stopped the ramp
                error = f"connection {i + 1} of {n}: {type(e).__name__}: {e}"
                break
            if (i + 1) % 100 == 0:
                log(f"{kind}: {i + 1}/{n} connected, {time.monotonic() - t0:.1f} s")
        out["connect_s"] = time.monotonic() - t0
        out["connected"] = len(held)
        if error:
            out["error"] = error
            log(f"{kind}: {error}")
        # Every connection still answers.
        answered = 0
        for h in held:
            try:
                h.conn.echo(timeout=30)
                answered += 1
            except Exception:  # noqa: BLE001
                pass
        out["echo_answered"] = answered
        # Threads that served the connections' logons go back to the pool
        # and leave it after 2 s idle: measure the idle connections after.
        time.sleep(4.0)
        out["loaded"] = measure(pid)
        if held:
            out["per_connection_kib"] = {
                k: (out["loaded"][k] - out["idle"][k]) / len(held) for k in ("rss_kib", "pss_kib")}
        t0 = time.monotonic()
        for h in held:
            try:
                h.close()
            except Exception:  # noqa: BLE001
                pass
        held.clear()
        out["close_s"] = time.monotonic() - t0
        time.sleep(2.0)
        out["after_close"] = measure(pid)
        # smbq runs each connection's engine on a tokio blocking thread, which
        # the runtime keeps for a while (10 s by default) after its connection
        # ends: how long until the thread count is back to idle.
        t0 = time.monotonic()
        while measure(pid)["threads"] > out["idle"]["threads"] and time.monotonic() - t0 < 30:
            time.sleep(0.5)
        out["threads_back_to_idle_s"] = 2.0 + time.monotonic() - t0
        out["settled"] = measure(pid)
    finally:
        for h in held:
            try:
                h.conn.disconnect(close=True)
            except Exception:  # noqa: BLE001
                pass
        problems = server.stop()
        if problems:
            out["server_problems"] = server.failure_text(problems)
            log(out["server_problems"])
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="100,1000", help="connection counts, each on a fresh server")
    ap.add_argument("--targets", default="smbq,smbd")
    ap.add_argument("--mode", default="sign", choices=servers.MODES)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    targets = args.targets.split(",")
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    # A socket per connection here, and smbprotocol's thread per connection.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * max(counts) + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard) if hard != resource.RLIM_INFINITY else want, hard))

    results = []
    for kind in targets:
        if kind == "smbd" and servers.smbd_available():
            log(f"smbd skipped: {servers.smbd_available()}")
            continue
        for n in counts:
            try:
                results.append(one(kind, args.mode, n, log))
            except RuntimeError as e:
                results.append({"target": kind, "mode": args.mode, "n": n, "error": str(e)})
                log(f"{kind} n={n}: {e}")

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"benchmark": "idle_connections", "mode": args.mode, "client": "python smbprotocol, one process",
           "machine": {"cpus": os.cpu_count(), "kernel": platform.release()}, "commit": commit or None,
           "results": results}
    out_dir = ROOT / "bench" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "idle_connections.json").write_text(json.dumps(out, indent=2) + "\n")
    if args.json:
        print(json.dumps(out))
        return 0

    print(f"\nidle authenticated connections, each with one open file, mode {args.mode}")
    print(f"{'server':6} {'N':>5} {'conn':>5} {'RSS idle':>10} {'RSS N':>10} {'KiB/conn':>9} {'PSS KiB/conn':>12} "
          f"{'thr idle':>8} {'thr N':>6} {'procs N':>7} {'connect s':>9} {'RSS closed':>10} {'thr idle again':>14} {'RSS then':>9}")
    for r in results:
        if "loaded" not in r:
            print(f"{r['target']:6} {r['n']:5} error: {r.get('error')}")
            continue
        i, l, c = r["idle"], r["loaded"], r["after_close"]
        per = r.get("per_connection_kib", {})
        print(f"{r['target']:6} {r['n']:5} {r['connected']:5} {i['rss_kib'] / 1024:8.1f}Mi {l['rss_kib'] / 1024:8.1f}Mi "
              f"{per.get('rss_kib', 0):9.1f} {per.get('pss_kib', 0):12.1f} {i['threads']:8} {l['threads']:6} "
              f"{l['processes']:7} {r['connect_s']:9.1f} {c['rss_kib'] / 1024:8.1f}Mi {r['threads_back_to_idle_s']:12.1f} s {r['settled']['rss_kib'] / 1024:7.1f}Mi")
        if r.get("error"):
            print(f"       error: {r['error']}")
        if r["echo_answered"] != r["connected"]:
            print(f"       only {r['echo_answered']} of {r['connected']} connections answered an ECHO")
    print("(smbd: sums over its process tree; RSS counts shared pages once per process, PSS shares them out;\n"
          " RSS closed: 2 s after closing every connection; thr idle again: seconds after closing until the\n"
          " thread count is back to its idle value, 30 s at most; RSS then: at that moment)")
    print(f"written: {out_dir / 'idle_connections.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
