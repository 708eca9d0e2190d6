"""The yeet benchmarks run (small sizes); their numbers are read by people, never asserted."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, agpt_env


def test_model_prints_every_strategy_for_each_node_count() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests/bench/yeet_model.py"), "--quick", "--nodes", "8,64,4096"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.split() and line.split()[0].isdigit()]
    assert [row[0] for row in rows] == ["8", "64", "4096"]
    assert "ref-tree" in r.stdout and "yeet-mpi" in r.stdout and "calibration (measured here" in r.stdout
    assert rows[-1][2] == "751.0"  # the reference fit reproduces its published 4,096-node time


def test_local_bench_runs_and_prints_the_ratio() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests/bench/bench_yeet.py"), "--small", "--ranks", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        env=agpt_env(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ratio rsync-par/yeet-warm" in r.stdout
