#!/usr/bin/env python3
"""Benchmark the health sweep's probe against a cold trainer's start, on one host.

Usage: tests/bench/bench_probe.py [--repeat 3] [--config jobs/configs/tiny.yaml]

Prints, measured in the same run, best of --repeat each:
- `python -m agpt.probe` (the per-host half of the sweep: memory, /dev/shm, mounts, torch imported, the device
  and a one-rank backend initialised), and the time to its `up` line (its sign of life, before any import);
- `agpt train --steps 1` on the config (a debug model: the interpreter, the trainer's imports, the device, the
  process group, the model build, one step): what a relaunch's start costs before any checkpoint is read;
- the ratio probe / trainer's start.  The simulator charges the probe launch what its start-up stages charge a
  relaunch (agpt.sim.model.Probe.launch_s); a ratio at or under 1 is what makes that an upper bound.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def timed(argv: list[str], env: dict[str, str], mark: str = "") -> tuple[float, float]:
    """(seconds to the process's end, seconds to the first output line holding MARK; 0 without one)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    first = 0.0
    assert p.stdout is not None
    out = []
    for line in p.stdout:
        out.append(line)
        if mark and not first and mark in line:
            first = time.perf_counter() - t0
    rc = p.wait()
    total = time.perf_counter() - t0
    if rc != 0:
        sys.exit(f"bench_probe: {' '.join(argv)} failed (rc {rc}):\n{''.join(out)[-2000:]}")
    return total, first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each; the best is kept (default 3)")
    ap.add_argument("--config", default="jobs/configs/tiny.yaml", help="the debug model's config")
    a = ap.parse_args()
    if a.repeat < 1:
        sys.exit("bench_probe: --repeat must be at least 1")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    probe = [sys.executable, "-m", "agpt.probe", "--gpus", "0", "--min-free-mib", "64"]
    probes = [timed(probe, env, mark=" up") for _ in range(a.repeat)]
    starts = []
    with tempfile.TemporaryDirectory(prefix="bench_probe.") as tmp:
        for i in range(a.repeat):
            train = [sys.executable, "-m", "agpt", "train", "--config", a.config, "--steps", "1"]
            starts.append(timed([*train, "--run-dir", str(Path(tmp) / f"run{i}")], env)[0])
    p_total = min(t for t, _ in probes)
    p_up = min(u for _, u in probes)
    t_start = min(starts)
    print(f"probe (python -m agpt.probe): {p_total:.2f} s, its sign of life after {p_up:.2f} s")
    print(f"trainer's cold start to its first step ({a.config}): {t_start:.2f} s")
    print(f"ratio probe / trainer's start: {p_total / t_start:.2f}")


if __name__ == "__main__":
    main()
