#!/usr/bin/env python3
"""Benchmark: the local checkpoint tier against the global one, side by side in one run.

Usage: tests/bench/bench_localckpt.py [--size GB] [--reps N] [--part stall|restore|all]

stall    (one process, on the accelerator when there is one) the training thread's stall per save for the same
         state (fp32 tensors of --size GB per rank): a local save (its staging copy into the shard's pinned host
         buffer) against today's async global save (Checkpointer), and the copy floor under both.
restore  (two ranks on this host as two nodes, nA and nB, each with its own node-local folder, under mpiexec)
         restoring the same saved state from the local tier (own memory; then, nB's folder gone, nB's shard
         from nA's copy) against loading it from the global checkpoint; and the steps a failure loses with each:
         --steps steps of --step-s seconds, a local save every --local-every steps and a global one every
         --global-every, a failure at --failures seeded random moments: the newest step each tier holds complete
         then (an async save still being written does not count).
Printed as ratios against the global tier measured in the same run.  Not a timed test.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch

from agpt import ckptdir, localtier
from agpt.train import checkpoint as ck
from agpt.train import dist as tdist
from agpt.train.config import CheckpointConfig
from agpt.train.localckpt import LocalTier, Staged

ROOT = Path(__file__).resolve().parents[2]
PARTNER = "local, partner's copy"


def make_state(gb: float, device: str, pieces: int = 32) -> dict[str, object]:
    n = int(gb * 2**30 / 4 / pieces)
    g = torch.Generator().manual_seed(0)
    model = {f"layer{i}.weight": torch.randn(n, generator=g).to(device) for i in range(pieces)}
    return {"model": model, "trainer": {"step": torch.tensor(0, dtype=torch.int64)}}


def sync_device() -> None:
    if torch.accelerator.is_available():
        torch.accelerator.synchronize()


def stall(args: argparse.Namespace) -> None:
    """The training thread's stall: a local save's staging against an async global save's snapshot."""
    info = tdist.detect()
    device, backend = tdist.pick_device("auto", info.local_rank)
    tdist.init(info, backend, device, 600)
    root = Path(tempfile.mkdtemp(prefix="bench_localckpt."))
    state = make_state(args.size, device)
    pin = not device.startswith("cpu")
    nbytes = sum(t.numel() * t.element_size() for t in state["model"].values())  # type: ignore[union-attr]
    print(f"bench_localckpt stall: {nbytes / 2**30:.2f} GiB per rank on {device}")
    floor_bufs = {k: torch.empty(v.shape, dtype=v.dtype, pin_memory=pin) for k, v in state["model"].items()}  # type: ignore[union-attr]

    def copy_floor() -> float:
        sync_device()
        t0 = time.perf_counter()
        for k, v in state["model"].items():  # type: ignore[union-attr]
            floor_bufs[k].copy_(v, non_blocking=pin)
        sync_device()
        return time.perf_counter() - t0

    glob = ck.Checkpointer(
        root / "ckpt", CheckpointConfig(interval=1, keep=1), rank=0, world=1, pin_memory=pin
    )
    staged = Staged(state, {"rank": 0}, pin_memory=pin)
    copy_floor()
    glob.save(0, lambda: state)  # the first async save allocates its buffers: not timed
    glob.wait()
    staged.fill(state, 0)
    floor, asyn, local = [], [], []
    for step in range(1, args.reps + 1):
        floor.append(copy_floor())
        asyn.append(glob.save(step, lambda: state))
        glob.wait()  # not part of the stall: training runs on meanwhile
        t0 = time.perf_counter()
        staged.fill(state, step)  # what LocalTier.save does on the training thread
        local.append(time.perf_counter() - t0)
    f, a, lo = (statistics.median(x) for x in (floor, asyn, local))
    print(f"copy floor          {f * 1e3:9.1f} ms  ({nbytes / 2**30 / f:.2f} GiB/s)")
    print(f"async global stall  {a * 1e3:9.1f} ms")
    print(f"local save stall    {lo * 1e3:9.1f} ms  ({nbytes / 2**30 / lo:.2f} GiB/s)")
    print(f"ratios: local/async={lo / a:.2f}x  local/copy_floor={lo / f:.2f}x")
    shutil.rmtree(root, ignore_errors=True)
    sys.stdout.flush()
    tdist.finish()


def _spawn_restore(me: list[str]) -> int:
    """Run ME as two ranks on two pretend nodes (mpiexec MPMD, each block its own node name)."""
    mpiexec = ROOT / ".venv" / "bin" / "mpiexec"
    work = Path(tempfile.mkdtemp(prefix="bench_localckpt."))
    me = [*me, "--work", str(work)]
    cmd = [str(mpiexec)]
    for i, host in enumerate(("nA", "nB")):
        cmd += [":"] * bool(i) + ["-n", "1", "-env", "AGPT_HEARTBEAT_HOST", host, *me]
    env = {**os.environ, "SITE_LOCAL_CKPT_DIR": str(work / "shm"), "OMP_NUM_THREADS": "1"}
    (work / "shm").mkdir()
    try:
        return subprocess.run(cmd, env=env).returncode
    finally:
        shutil.rmtree(work, ignore_errors=True)


def restore(args: argparse.Namespace) -> None:
    """The same state restored from each tier; the steps a failure loses with each."""
    info = tdist.detect()
    tdist.init(info, "gloo", "cpu", 600)
    rank, world = info.rank, info.world_size
    run = Path(args.work) / "run"
    state = make_state(args.size, "cpu")
    cfg = CheckpointConfig(interval=args.global_every, keep=2, local_interval=args.local_every)
    glob = ck.Checkpointer(run / "ckpt", cfg, rank=rank, world=world, pin_memory=False)
    nbytes = sum(t.numel() * t.element_size() for t in state["model"].values())  # type: ignore[union-attr]

    def tier(host: str | None = None) -> LocalTier:
        env = {**os.environ, **({"AGPT_HEARTBEAT_HOST": host} if host else {})}
        return LocalTier(cfg, run, rank=rank, world=world, layout="bench", state=lambda: make_state(args.size, "cpu"),
                         state_bytes=nbytes, env=env)  # fmt: skip

    local = tier()
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"bench_localckpt restore: {nbytes / 2**30:.3f} GiB per rank x {world} ranks on 2 nodes (cpu)")
    # Steps lost per failure: a local save every L steps, a global one every G, failures at random moments.
    rng = random.Random(1)
    fail_at = set(rng.sample(range(args.global_every, args.steps), args.failures))
    lost_local, lost_global = [], []
    for step in range(1, args.steps + 1):
        time.sleep(args.step_s)
        state["trainer"]["step"].fill_(step)  # type: ignore[index]
        if step % args.global_every == 0:
            glob.save(step, lambda: state)
        if local.due(step, step % args.global_every == 0):
            local.save(step)
        if step in fail_at:  # what each tier holds complete at this moment
            held = localtier.inventory(local.folder, local.host, local.pins).steps
            done = [s for s in held if len(held[s]) == world]
            done_g = [d.step for d in ckptdir.complete(run / "ckpt")]
            lost_local.append(step - max(done + done_g, default=0))
            lost_global.append(step - max(done_g, default=0))
    local.wait()
    glob.wait()
    torch.distributed.barrier()
    # The same state (the last step, held by both tiers) restored from each.
    times: dict[str, float] = {}
    newest = ckptdir.complete(run / "ckpt")[-1]
    sd = make_state(args.size, "cpu")
    t0 = time.perf_counter()
    ck.load(newest.path, sd, glob.group)
    times["global"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = local.restore(newest.step)
    times["local, own memory"] = time.perf_counter() - t0
    assert got is not None and got[1].step == newest.step, "the local tier did not restore the newest step"
    torch.distributed.barrier()
    if local.host == "nB":
        shutil.rmtree(local.folder)  # nB is lost with its memory; a spare takes its place
    torch.distributed.barrier()
    spare = tier("nC" if rank == 1 else None)  # nC, a spare, runs rank 1: its shard comes from nA's copy
    t0 = time.perf_counter()
    got = spare.restore(newest.step)
    times[PARTNER] = time.perf_counter() - t0
    assert got is not None and got[1].from_partner == [1], "nB's shard did not come from nA's copy"
    slow = {k: max(x for x in _gather(v)) for k, v in times.items()}  # the slowest rank sets the stage
    say(f"restore of step {newest.step}: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in slow.items()))
    say(f"ratios: global/local={slow['global'] / slow['local, own memory']:.1f}x  "
        f"global/local partner's copy={slow['global'] / slow[PARTNER]:.1f}x")  # fmt: skip
    say(f"steps lost per failure ({len(lost_local)} failures, a local save every {args.local_every} steps, a global "
        f"one every {args.global_every}): local tier {statistics.mean(lost_local):.1f} (max {max(lost_local)}), "
        f"global tier alone {statistics.mean(lost_global):.1f} (max {max(lost_global)}); "
        f"ratio global/local={statistics.mean(lost_global) / max(statistics.mean(lost_local), 1e-9):.1f}x")  # fmt: skip
    sys.stdout.flush()
    tdist.finish()


def _gather(v: float) -> list[float]:
    out: list[float] = [0.0] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, v)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=float, default=0.25, help="GB of state per rank (default 0.25)")
    ap.add_argument("--reps", type=int, default=5, help="timed saves of each kind (median reported)")
    ap.add_argument("--part", default="all", choices=("stall", "restore", "all"))
    ap.add_argument("--steps", type=int, default=200, help="steps of the failure part (default 200)")
    ap.add_argument("--step-s", type=float, default=0.02, help="seconds per step there (default 0.02)")
    ap.add_argument("--local-every", type=int, default=5, help="a local save every N steps (default 5)")
    ap.add_argument("--global-every", type=int, default=50, help="a global save every N steps (default 50)")
    ap.add_argument("--failures", type=int, default=20, help="failure moments drawn (seed 1; default 20)")
    ap.add_argument("--rank-of", choices=("stall", "restore"), help=argparse.SUPPRESS)  # a spawned process
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank_of:
        (stall if args.rank_of == "stall" else restore)(args)
        os._exit(0)  # gloo's workers can abort at interpreter exit (agpt.train.entry)
    me = [sys.executable, str(Path(__file__).resolve()), *(argv if argv is not None else sys.argv[1:])]
    rc = 0
    if args.part in ("stall", "all"):
        rc = subprocess.run([*me, "--rank-of", "stall"]).returncode
    if args.part in ("restore", "all") and rc == 0:
        rc = _spawn_restore([*me, "--rank-of", "restore"])
    return rc


if __name__ == "__main__":
    sys.exit(main())
