#!/usr/bin/env python3
"""Benchmark: training-thread stall per checkpoint save, sync vs async, against the in-memory copy floor.

Usage: tests/bench/bench_ckpt.py [--size GB] [--reps N] [--dir DIR] [--max-writers N]
       (also under a launcher: mpiexec -n 2 tests/bench/bench_ckpt.py --size 1)

The state (fp32 tensors totalling --size GB per rank, on the accelerator when there is one) is saved
through the trainer's own Checkpointer.  Three figures, measured in this run:
  copy floor  copying the same state into preallocated host buffers (the least any snapshot costs)
  sync stall  a blocking save: the training thread waits for the whole write and fsync
  async stall an async save: the training thread waits only for the host snapshot
Printed as ratios; goals: async <= 1.5x the copy floor, sync >= 10x async.  Not a timed test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch

from agpt.train import dist as tdist
from agpt.train.checkpoint import Checkpointer
from agpt.train.config import CheckpointConfig


def make_state(gb: float, device: str, pieces: int = 32) -> dict[str, torch.Tensor]:
    n = int(gb * 2**30 / 4 / pieces)
    g = torch.Generator().manual_seed(0)
    return {f"layer{i}.weight": torch.randn(n, generator=g).to(device) for i in range(pieces)}


def sync_device() -> None:
    if torch.accelerator.is_available():
        torch.accelerator.synchronize()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=float, default=1.0, help="GB of state per rank (default 1.0)")
    ap.add_argument("--reps", type=int, default=3, help="timed saves of each kind (median reported)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    ap.add_argument("--max-writers", type=int, default=64)
    args = ap.parse_args(argv)

    info = tdist.detect()
    device, backend = tdist.pick_device("auto", info.local_rank)
    tdist.init(info, backend, device, 600)
    root = Path(args.dir or tempfile.mkdtemp(prefix="bench_ckpt."))
    state = make_state(args.size, device)
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    pin = not device.startswith("cpu")
    say = print if info.rank == 0 else (lambda *a, **k: None)
    say(f"bench_ckpt: {nbytes / 2**30:.2f} GiB per rank x {info.world_size} ranks on {device}, dir {root}")

    # Copy floor: the same bytes into preallocated (pinned on accelerators) host buffers.  Measured
    # right before each async save, so both see the same machine load (a shared node is noisy).
    bufs = {k: torch.empty(v.shape, dtype=v.dtype, pin_memory=pin) for k, v in state.items()}

    def copy_floor() -> float:
        sync_device()
        t0 = time.perf_counter()
        for k, v in state.items():
            bufs[k].copy_(v, non_blocking=pin)
        sync_device()
        return time.perf_counter() - t0

    def checkpointer(async_save: bool) -> Checkpointer:
        cfg = CheckpointConfig(interval=1, keep=1, async_save=async_save, max_writers=args.max_writers)
        sub = root / ("async" if async_save else "sync")
        return Checkpointer(sub, cfg, rank=info.rank, world=info.world_size, pin_memory=pin)

    def get_state() -> dict[str, object]:
        return {"model": state}

    sync_ck, async_ck = checkpointer(False), checkpointer(True)
    floor, sync, asyn, ratio, write = [], [], [], [], []
    copy_floor()  # first touch of the buffers
    async_ck.save(0, get_state)  # the first async save allocates its host buffers: not timed
    async_ck.wait()
    for step in range(1, args.reps + 1):
        sync.append(sync_ck.save(step, get_state, block=True))
        f = copy_floor()
        t0 = time.perf_counter()
        a = async_ck.save(step, get_state)
        async_ck.wait()  # not part of the stall: training runs on meanwhile
        write.append(time.perf_counter() - t0)
        floor.append(f)
        asyn.append(a)
        ratio.append(a / f)
    floor_s, sync_s, async_s = (statistics.median(x) for x in (floor, sync, asyn))
    async_total = statistics.median(write)
    say(f"copy floor   {floor_s * 1e3:9.1f} ms  ({nbytes / 2**30 / floor_s:.2f} GiB/s)")
    say(f"sync stall   {sync_s * 1e3:9.1f} ms  ({nbytes / 2**30 / sync_s:.2f} GiB/s written)")
    say(
        f"async stall  {async_s * 1e3:9.1f} ms  (background write then took {async_total * 1e3:.0f} ms in all)"
    )
    r_floor = statistics.median(ratio)
    r_sync = sync_s / async_s
    say(
        f"ratios: async/copy_floor={r_floor:.2f}x (goal <= 1.5x: {'met' if r_floor <= 1.5 else 'missed'})  "
        f"sync/async={r_sync:.1f}x (goal >= 10x: {'met' if r_sync >= 10 else 'missed'})"
    )
    if info.rank == 0 and args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    sys.stdout.flush()
    tdist.finish()
    os._exit(0)


if __name__ == "__main__":
    main()
