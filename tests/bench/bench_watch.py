#!/usr/bin/env python3
"""Benchmark `agpt watch`: pass-through throughput and CPU used while the child is quiet.

Usage: tests/bench/bench_watch.py [--size 1G] [--sleep 30] [--repeat 3]

Prints, measured in the same run:
- throughput of SIZE bytes through `agpt watch -- cat FILE` vs plain `cat FILE > /dev/null` (goal: ratio >= 0.8),
  and vs `cat FILE | cat > /dev/null`, the floor for anything that sees the bytes through a pipe;
- CPU seconds (user + system, all processes) of `agpt watch -- sleep S` minus those of `sleep S` (goal < 0.05 s):
  a quiet child must cost nothing but start-up.
The file is page-cached before timing, so the disk is out of the picture.  Best of --repeat runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WATCH = [str(ROOT / "bin" / "agpt-watch")]


def watch_python() -> str:
    """The interpreter bin/agpt-watch picks ($AGPT_PYTHON, else the checkout's venv, else python3)."""
    venv = ROOT / ".venv" / "bin" / "python"
    return os.environ.get("AGPT_PYTHON") or (str(venv) if venv.exists() else "python3")


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B").rstrip("I")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def best_of(cmd: list[str], repeat: int) -> tuple[float, float]:
    """(wall, cpu) seconds, each the best of `repeat` runs: the machine may be shared, so keep the least noisy."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        c, w = cpu_of(cmd)
        wall, cpu = min(wall, w), min(cpu, c)
    return wall, cpu


def cpu_of(cmd: list[str]) -> tuple[float, float]:
    """(cpu seconds, wall seconds) of cmd and all its descendants."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1G", help="bytes to pass through (K/M/G suffixes; default 1G)")
    ap.add_argument("--sleep", type=float, default=30.0, help="seconds the quiet child sleeps (default 30)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per command, best kept (default 3)")
    args = ap.parse_args()
    size = parse_size(args.size)
    python = watch_python()

    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        path = Path(tmp) / "data.bin"
        block = os.urandom(min(size, 16 << 20))
        with open(path, "wb") as f:
            left = size
            while left > 0:
                f.write(block[:left])
                left -= len(block)
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # page-cache it

        t_cat, c_cat = best_of(["cat", str(path)], args.repeat)
        t_pipe, c_pipe = best_of(["sh", "-c", 'cat "$0" | cat', str(path)], args.repeat)
        t_watch, c_watch = best_of([*WATCH, "--", "cat", str(path)], args.repeat)

    mib = size / (1 << 20)
    print(f"bench_watch: {mib:.0f} MiB, best of {args.repeat}, python {python}")
    print(f"  cat FILE > /dev/null               {t_cat:7.3f} s {mib / t_cat:8.0f} MiB/s  cpu {c_cat:6.3f} s")
    print(
        f"  cat FILE | cat > /dev/null         {t_pipe:7.3f} s {mib / t_pipe:8.0f} MiB/s  cpu {c_pipe:6.3f} s"
    )
    print(
        f"  agpt watch -- cat FILE > /dev/null {t_watch:7.3f} s {mib / t_watch:8.0f} MiB/s  cpu {c_watch:6.3f} s"
    )
    print(f"throughput ratio watch/cat: {t_cat / t_watch:.2f} (goal >= 0.8)")
    print(f"throughput ratio watch/(cat | cat): {t_pipe / t_watch:.2f}")
    print(f"cpu ratio (cat | cat)/watch: {c_pipe / c_watch:.2f}")

    t_start, c_start = best_of([*WATCH, "--", "true"], max(args.repeat, 5))
    t_py, c_py = best_of([python, "-c", "pass"], max(args.repeat, 5))
    print(f"start-up: agpt watch -- true {t_start * 1000:.0f} ms wall, {c_start * 1000:.0f} ms cpu", end="")
    print(f" (bare python: {t_py * 1000:.0f} ms wall, {c_py * 1000:.0f} ms cpu; goal < 100 ms)")

    sleep = f"{args.sleep:g}"
    cpu_sleep, _ = cpu_of(["sleep", sleep])
    cpu_watch, wall = cpu_of([*WATCH, "--", "sleep", sleep])
    print(
        f"  sleep {sleep}: {cpu_sleep:.3f} cpu s; agpt watch -- sleep {sleep}: {cpu_watch:.3f} cpu s, {wall:.1f} s wall"
    )
    print(f"cpu seconds of agpt watch around sleep {sleep}: {cpu_watch - cpu_sleep:.3f} (goal < 0.05)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
