#!/usr/bin/env python3
"""Benchmark: the cooperative checkpoint load (agpt.train.coopload) against every rank reading, in one run.

Usage: tests/bench/bench_coopload.py [--ranks N] [--size GB] [--pieces K] [--reps R]

N ranks under mpiexec (gloo, this host) load a DCP checkpoint whose K tensors (--size GB in all) every rank needs
(replicated state: saved once, loaded by all; a reshard reads shared chunks the same way): with DCP's
FileSystemReader each rank reads all of it, with CoopReader each stored item is read by one rank and broadcast.
Before each load the files are dropped from the page cache (posix_fadvise DONTNEED), so reads come from the
device, as on a parallel filesystem they come from the servers.  Prints the median load time of each and the
bytes read from the filesystem, and the ratio every/cooperative.  Not a timed test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))


def _drop_cache(path: Path) -> None:
    for f in path.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def rank_main(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

    from agpt.train import dist as tdist
    from agpt.train.coopload import CoopReader

    info = tdist.detect()
    tdist.init(info, "gloo", "cpu", 600)
    rank, world = dist.get_rank(), dist.get_world_size()
    path = Path(args.work) / "ckpt"
    n = int(args.size * 1e9 / 4 / args.pieces)
    torch.manual_seed(0)
    state = {f"w{i}": torch.randn(n) for i in range(args.pieces)}  # the same on every rank: saved once
    dcp.save(state, storage_writer=FileSystemWriter(path))
    dist.barrier()
    times: dict[str, list[float]] = {"every rank reads": [], "cooperative": []}
    read: dict[str, int] = {}
    for _ in range(args.reps):
        for kind in times:
            if rank == 0:
                _drop_cache(path)
            dist.barrier()
            target = {k: torch.zeros(n) for k in state}
            reader = CoopReader(path) if kind == "cooperative" else FileSystemReader(path)
            t0 = time.perf_counter()
            dcp.load(target, storage_reader=reader)
            dist.barrier()
            took = torch.tensor([time.perf_counter() - t0])
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            times[kind].append(float(took))
            assert all(torch.equal(target[k], state[k]) for k in state), f"{kind}: wrong data"
            mine = torch.tensor([reader.read_bytes if kind == "cooperative" else n * 4 * args.pieces])
            dist.all_reduce(mine)
            read[kind] = int(mine)
    if rank == 0:
        med = {k: statistics.median(v) for k, v in times.items()}
        for k, v in med.items():
            print(f"{k:17s} {v * 1000:9.1f} ms  (median of {args.reps}), {read[k] / 1e9:.3f} GB read from the "
                  f"filesystem by {world} ranks")  # fmt: skip
        print(f"ratio every/cooperative: time {med['every rank reads'] / med['cooperative']:.2f}x, "
              f"bytes read {read['every rank reads'] / max(read['cooperative'], 1):.1f}x  "
              f"({world} ranks, {args.size:g} GB in {args.pieces} items)", flush=True)  # fmt: skip
    tdist.finish()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4, help="ranks under mpiexec (default 4)")
    ap.add_argument("--size", type=float, default=0.4, help="GB every rank needs (default 0.4)")
    ap.add_argument("--pieces", type=int, default=16, help="stored items (default 16)")
    ap.add_argument("--reps", type=int, default=3, help="loads of each kind (median reported)")
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank:
        rank_main(args)
        os._exit(0)  # gloo's workers can abort at interpreter exit (agpt.train.entry)
    work = Path(tempfile.mkdtemp(prefix="bench_coopload."))
    me = [sys.executable, str(Path(__file__).resolve()), *(argv if argv is not None else sys.argv[1:])]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    try:
        cmd = [
            str(ROOT / ".venv" / "bin" / "mpiexec"),
            "-n",
            str(args.ranks),
            *me,
            "--rank",
            "--work",
            str(work),
        ]
        return subprocess.run(cmd, env=env).returncode
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
