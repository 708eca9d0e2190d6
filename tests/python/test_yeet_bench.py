"""The yeet benchmarks run (small sizes); their numbers are read by people, never asserted."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, agpt_env


def bench(script: str, *args: str, timeout: int) -> subprocess.CompletedProcess[str]:
    """tests/bench/SCRIPT ARGS under this interpreter, as a person runs it from the checkout."""
    cmd = [sys.executable, str(ROOT / "tests/bench" / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=agpt_env())


def test_model_prints_every_strategy_for_each_node_count() -> None:
    r = bench("yeet_model.py", "--quick", "--nodes", "8,64,4096", timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.split() and line.split()[0].isdigit()]
    assert [row[0] for row in rows] == ["8", "64", "4096"]
    assert "ref-tree" in r.stdout and "yeet-mpi" in r.stdout and "calibration (measured here" in r.stdout
    assert rows[-1][2] == "751.0"  # the reference fit reproduces its published 4,096-node time


def test_local_bench_runs_and_prints_the_ratio() -> None:
    r = bench("bench_yeet.py", "--small", "--ranks", "2", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ratio rsync-par/yeet-warm" in r.stdout
