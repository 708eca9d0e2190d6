#!/usr/bin/env python3
"""Benchmark: what the silent-data-corruption guards cost, as a ratio of step time measured in the same run.

Usage: tests/bench/bench_sdc.py [--ranks N] [--steps N] [--interval K] [--checks N] [--config PATH]

Starts N ranks of the tiny model (jobs/configs/tiny.yaml; any trainer config with --config) under mpiexec, trains
--steps steps after a warm-up, and times on every rank, within each step, the fingerprint the rerun compares
(agpt.train.sdc: the local loss and the gradient shard's norm, every step) and, after each step, one canary check
(the forward of the canary micro-batch and the cross-rank comparison).  Prints the step time, each guard's time
per step and its share of the step time, and the overhead at canary interval K (the default,
train.canary_interval): fingerprint + canary / K.  With --checks N, then runs N more canary checks in a row with
the trained weights and counts the ranks any of them named (a false alarm: nothing is injected).  Medians over
the steps, the slowest rank's.  Not a timed test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))


def worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    from agpt.train.config import load_config
    from agpt.train.dist import detect
    from agpt.train.entry import SilentCorruption
    from agpt.train.trainer import Trainer

    sets = [f"train.steps={args.warmup + args.steps}", "heartbeat.enabled=false", "train.canary_interval=1",
            "train.rerun=true", "observe.tensorboard=false", "observe.prometheus=false"]  # fmt: skip
    cfg = load_config(args.config, sets)
    per_step = (
        cfg.train.micro_batch * detect().world_size
    )  # the config's global batch, rounded to fit the ranks
    cfg.train.global_batch = max(per_step, cfg.train.global_batch // per_step * per_step)
    t = Trainer(cfg, None, checkpoints=False)
    record = t.sdc.record
    spent = {"fingerprint": 0.0}

    def timed_record(*a: object) -> None:
        t0 = time.perf_counter()
        record(*a)  # type: ignore[arg-type]
        spent["fingerprint"] += time.perf_counter() - t0

    t.sdc.record = timed_record  # type: ignore[method-assign]
    steps, prints, canaries = [], [], []
    for i in range(args.warmup + args.steps):
        spent["fingerprint"] = 0.0
        t0 = time.perf_counter()
        t.train_step()
        t1 = time.perf_counter()
        t.sdc.check_canary(t)
        t2 = time.perf_counter()
        if i >= args.warmup:
            steps.append(t1 - t0)
            prints.append(spent["fingerprint"])
            canaries.append(t2 - t1)
    mine = torch.tensor([statistics.median(steps), statistics.median(prints), statistics.median(canaries)])
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    alarms = 0
    for _ in range(args.checks):
        try:
            t.sdc.check_canary(t)
        except SilentCorruption:
            alarms += 1
    if t.rank == 0:
        step, fp, canary = (float(x) for x in mine)
        k = args.interval
        print(f"sdc guards on {t.world} ranks, {args.steps} steps of the {Path(args.config).stem} model "
              f"(global batch {cfg.train.global_batch}; medians, slowest rank):")  # fmt: skip
        print(f"  step                 {step * 1e3:9.2f} ms")
        print(f"  fingerprint          {fp * 1e3:9.3f} ms/step   ratio {fp / step:.4f} of step time")
        print(f"  canary check         {canary * 1e3:9.2f} ms/check  ratio {canary / step:.4f} of step time")
        print(f"  overhead at K={k:<6d} ratio {(fp + canary / k) / step:.4f} of step time "
              f"(fingerprint every step + one canary check every {k} steps)")  # fmt: skip
        if args.checks:
            print(
                f"  {args.checks} canary checks on {t.world} ranks with nothing injected: {alarms} named a rank"
            )
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    from agpt.train.config import TrainConfig

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--interval", type=int, default=TrainConfig().canary_interval, help="canary interval K")
    ap.add_argument(
        "--checks", type=int, default=0, help="canary checks in a row afterwards, counting alarms"
    )
    ap.add_argument("--config", default=str(ROOT / "jobs" / "configs" / "tiny.yaml"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.interval < 1 or args.steps < 1 or args.ranks < 1:
        ap.error("--interval, --steps and --ranks must be positive")
    if args.worker:
        return worker(args)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONPATH": str(ROOT / "python")}  # fmt: skip
    cmd = [str(ROOT / ".venv" / "bin" / "mpiexec"), "-n", str(args.ranks), sys.executable, __file__, "--worker",
           *(argv if argv is not None else sys.argv[1:])]  # fmt: skip
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
