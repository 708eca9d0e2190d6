#!/usr/bin/env python3
"""Benchmark: heartbeat writes to the run directory per node per minute, against every rank writing its own.

Usage: tests/bench/bench_heartbeat.py [--hosts N] [--ranks-per-node N] [--interval S] [--seconds S]

Runs N x R real rank processes (agpt.heartbeat.writer, each stepping every 0.1 s) for --seconds, and counts, per
process, every file it replaces (a temporary file + one rename: one atomic write) in the shared run directory and
in its node-local folder.  With strace on the PATH, the renames into the run directory are also counted from the
kernel's side (rename/renameat syscalls) as a cross-check.  Prints shared writes per node per minute and the
ratio to the baseline of every rank publishing its own record every tick (what the node-local records cost, had
they gone to the shared file system).  Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WORKER = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from agpt.heartbeat import writer as heartbeat
counts = {"shared": 0, "local": 0}
real = heartbeat.write_atomic
run_dir = os.environ["AGPT_RUN_DIR"]
def counting(path, text):
    counts["shared" if str(path).startswith(run_dir) else "local"] += 1
    real(path, text)
heartbeat.write_atomic = counting
hb = heartbeat.start(run_dir)
end = time.monotonic() + float(sys.argv[2])
step = 0
while time.monotonic() < end:
    hb.phase("forward"); time.sleep(0.05); hb.phase("collective"); time.sleep(0.05)
    step += 1; hb.step(step, 0.05)
hb._stop.set(); hb._thread.join()
print(json.dumps(counts))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--ranks-per-node", type=int, default=4)
    ap.add_argument(
        "--interval", type=float, default=2.0, help="heartbeat.interval_s (default 2; 15 in jobs)"
    )
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="agpt-bench-hb-"))
    run = tmp / "run"
    strace = shutil.which("strace")
    procs = []
    try:
        for h in range(args.hosts):
            for lr in range(args.ranks_per_node):
                r = h * args.ranks_per_node + lr
                env = {**os.environ, "AGPT_RUN_DIR": str(run), "RANK": str(r), "LOCAL_RANK": str(lr),
                       "LOCAL_WORLD_SIZE": str(args.ranks_per_node), "AGPT_HEARTBEAT_HOST": f"h{h}",
                       "AGPT_HEARTBEAT_INTERVAL_S": str(args.interval), "AGPT_ATTEMPT_ID": "bench.1",
                       "AGPT_HEARTBEAT_LOCAL_DIR": str(tmp / "shm"), "AGPT_HEARTBEAT_DUMP_S": "0"}  # fmt: skip
                cmd = [sys.executable, "-c", WORKER, str(ROOT / "python"), str(args.seconds)]
                if strace:
                    cmd = [strace, "-f", "-qq", "-e", "trace=rename,renameat,renameat2", "-o",
                           str(tmp / f"strace.{r}"), *cmd]  # fmt: skip
                procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
        t0 = time.monotonic()
        shared = local = 0
        for p in procs:
            out, _ = p.communicate(timeout=args.seconds + 60)
            c = json.loads(out.strip().splitlines()[-1])
            shared += c["shared"]
            local += c["local"]
        minutes = args.seconds / 60
        per_node = shared / args.hosts / minutes
        baseline = local / args.hosts / minutes  # every rank, every tick
        print(f"heartbeat: {args.hosts} nodes x {args.ranks_per_node} ranks, interval {args.interval:g} s, "
              f"{args.seconds:g} s ({time.monotonic() - t0:.0f} s to collect)")  # fmt: skip
        print(f"  run-directory writes per node per minute: {per_node:.1f} (expected 60/interval = "
              f"{60 / args.interval:.1f}; 4.0 at the default 15 s)")  # fmt: skip
        print(f"  baseline, every rank writing its record each tick: {baseline:.1f} per node per minute")
        print(f"  ratio: {baseline / per_node if per_node else float('inf'):.1f}x fewer shared writes")
        if strace:
            renames = 0
            for f in tmp.glob("strace.*"):
                renames += sum(
                    1 for line in f.read_text().splitlines() if re.search(re.escape(str(run)), line)
                )
            print(f"  strace cross-check: {renames / args.hosts / minutes:.1f} renames into the run directory "
                  "per node per minute")  # fmt: skip
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
