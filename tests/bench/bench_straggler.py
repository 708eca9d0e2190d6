#!/usr/bin/env python3
"""Benchmark: stragglers named by compute time, on healthy nodes (false alarms) and with one node slowed.

Usage: tests/bench/bench_straggler.py [--nodes N] [--ranks-per-node R] [--steps S] [--interval S] [--slow FACTOR]
                                     [--agpt CMD]

Runs `agpt train` on the tiny model as N nodes of R ranks each on this host (each node's first rank publishes its
heartbeat record every --interval seconds; FAILOVER_STRAGGLER=report), twice: all nodes healthy, then the second
node's forward passes made --slow times as long (AGPT_FAULT_SLOW_HOST, a sleep before its backward's
collectives).  Prints, for each run, the nodes the straggler monitor named and, per node, the compute time per
step its ranks recorded (agpt.train.compute: the forward passes without FSDP's all-gathers) and the wait; the
ratio of the slowed node's compute to its peers' median.  On a machine whose cores the ranks share, healthy nodes
take turns being a little slower: what the monitor must not name.  Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ATTEMPT = "bench.1"


def run(
    args: argparse.Namespace, tmp: Path, slow: str | None
) -> tuple[list[str], dict[str, float], dict[str, float]]:
    """One run: the hosts named, and per host the median compute and wait its ranks recorded last."""
    run_dir = tmp / ("slow" if slow else "healthy")
    hosts = [f"n{i + 1}" for i in range(args.nodes)]
    agpt = [*shlex.split(args.agpt), "train", "--config", str(ROOT / "jobs/configs/tiny.yaml"), "--run-dir",
            str(run_dir), "--steps", str(args.steps), "--ckpt-interval", "0", "--set",
            f"train.global_batch={2 * args.nodes * args.ranks_per_node}", "--set", "train.canary_interval=0"]  # fmt: skip
    cmd = [str(ROOT / ".venv" / "bin" / "mpiexec")]
    for i, host in enumerate(hosts):
        for j in range(args.ranks_per_node):
            cmd += [":"] * bool(i or j) + ["-n", "1", "-env", "AGPT_HEARTBEAT_HOST", host, "-env",
                                           "PALS_LOCAL_RANKID", str(j), "-env", "PALS_LOCAL_SIZE",
                                           str(args.ranks_per_node), *agpt]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AGPT_ATTEMPT_ID": ATTEMPT, "FAILOVER_STRAGGLER": "report",
           "AGPT_HEARTBEAT_INTERVAL_S": str(args.interval), "SITE_LOCAL_CKPT_DIR": str(tmp / "shm"),
           **({"AGPT_FAULT_SLOW_HOST": slow} if slow else {})}  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        sys.exit(f"bench_straggler: agpt train exited {out.returncode}: {out.stderr[-2000:]}")
    events = run_dir / "events.jsonl"
    named = (
        [json.loads(x)["host"] for x in events.read_text().splitlines() if '"straggler"' in x]
        if events.exists()
        else []
    )
    compute, wait = {}, {}
    for p in sorted((run_dir / "heartbeat").glob("n*.json")):
        ranks = json.loads(p.read_text())["ranks"]
        compute[p.stem] = statistics.median(float(r["compute_s"]) for r in ranks)
        wait[p.stem] = statistics.median(float(r["wait_s"]) for r in ranks)
    return named, compute, wait


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--ranks-per-node", type=int, default=2)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--interval", type=float, default=0.5, help="heartbeat publish interval, seconds")
    ap.add_argument("--slow", type=float, default=3.0, help="the slowed node's forward-time factor")
    ap.add_argument(
        "--agpt", default=str(ROOT / "bin" / "agpt"), help="the command that starts one rank of agpt"
    )
    args = ap.parse_args(argv)
    if (
        args.nodes < 3
        or args.ranks_per_node < 1
        or args.steps < 1
        or not args.interval > 0
        or not args.slow > 1
    ):
        ap.error(
            "--nodes >= 3 (a straggler needs two peers), --ranks-per-node, --steps, --interval > 0, --slow > 1"
        )
    tmp = Path(tempfile.mkdtemp(prefix="bench-straggler-"))
    try:
        (tmp / "shm").mkdir()
        print(f"stragglers on {args.nodes} nodes x {args.ranks_per_node} ranks of the tiny model, {args.steps} "
              f"steps, heartbeats every {args.interval:g} s, {os.cpu_count()} cores")  # fmt: skip
        for slow in (None, f"n2:{args.slow:g}"):
            named, compute, wait = run(args, tmp, slow)
            what = f"n2's forward {args.slow:g}x slower" if slow else "all healthy"
            print(f"  {what}: named {', '.join(named) or 'nobody'}")
            for h in compute:
                print(
                    f"    {h}  compute {compute[h] * 1e3:8.2f} ms/step  wait in all-gathers {wait[h] * 1e3:8.2f} ms/step"
                )
            if slow and compute:
                peers = statistics.median(v for h, v in compute.items() if h != "n2")
                print(f"    ratio {compute['n2'] / peers:.2f} n2's compute to its peers' median")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
