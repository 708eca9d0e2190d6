#!/usr/bin/env python3
"""Benchmark: `agpt failover classify` on a big synthetic log vs reading the same file line by line.

Why: the classifier runs between attempts on logs that can reach gigabytes (NCCL_DEBUG=INFO on hundreds of
nodes); every second it takes is a second the allocation idles.  The baseline is the least any line-based
scraper pays: a Python loop over the file's lines, decoding each one.  Printed: MB/s of both, the ratio, and
the classifier's peak RSS (it streams, so the RSS must not grow with the log).  Not a timed test.

Each side is timed --repeat times and its fastest run counts (the machine's other load only ever adds time).

Usage: tests/bench/bench_classify.py [--mb N] [--nccl-every K] [--repeat R]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from agpt.failover import classify as cl

HOSTS = [f"nid00{1230 + i}" for i in range(4)]


def make_log(path: Path, mb: int, nccl_every: int) -> int:
    lines = []
    for i in range(20000):
        lines.append(
            f"{i % 8}: step={i} loss=2.{i % 97:04d} grad_norm=0.41 lr=2.9e-04 tps=5120.3 stall_ms=0.0\n"
        )
        if nccl_every and i % nccl_every == 0:
            lines.append(
                f"{i % 8}: {HOSTS[i % 4]}:81234:81234 [0] NCCL INFO Channel 00/02 : 0[0] -> 1[1] via P2P\n"
            )
        if i % 1000 == 0:
            lines.append(
                f"{i % 8}: /site-packages/torch/utils/data.py:123: UserWarning: num_workers is large\n"
            )
    block = "".join(lines).encode()
    with path.open("wb") as f:
        written = 0
        while written < mb << 20:
            f.write(block)
            written += len(block)
        f.write(f"srun: error: Node failure on {HOSTS[2]}\n".encode())
    return path.stat().st_size


def baseline(path: Path) -> float:
    t = time.perf_counter()
    n = 0
    with path.open("rb") as f:
        for raw in f:
            n += len(raw.decode("utf-8", "replace"))
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200, help="log size in MiB (default 200)")
    ap.add_argument(
        "--nccl-every", type=int, default=10, help="one NCCL INFO line per K progress lines (0: none)"
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side; the fastest counts (default 3)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "attempt.log"
        size = make_log(log, args.mb, args.nccl_every)
        base = took = float("inf")
        for _ in range(max(1, args.repeat)):  # interleaved, so both sides see the same load
            base = min(base, baseline(log))
            t = time.perf_counter()
            r = cl.classify(log, 1, HOSTS)
            took = min(took, time.perf_counter() - t)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    mb = size / (1 << 20)
    assert r.cls == "node" and r.bad_hosts == [HOSTS[2]], r
    print(f"log: {mb:.0f} MiB, {r.lines} lines")
    print(f"baseline (read+decode lines): {base:.2f} s, {mb / base:.0f} MiB/s")
    print(f"classify:                     {took:.2f} s, {mb / took:.0f} MiB/s")
    print(
        f"ratio classify/baseline: {took / base:.2f}x (best of {max(1, args.repeat)}); peak RSS {rss / 1024:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
