"""The cooperative checkpoint load (agpt.train.coopload): the benchmark loads the same replicated state both ways
on real gloo ranks under mpiexec, checks every tensor arrived intact, and prints the ratio; here it runs small."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from train_util import train_env


def test_bench_coopload_loads_the_same_state_with_each_item_read_once(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(ROOT / "tests/bench/bench_coopload.py"), "--ranks", "3", "--size", "0.003",
                        "--pieces", "4", "--reps", "1"], env=train_env({"TMPDIR": str(tmp_path)}),
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bytes read 3.0x" in r.stdout, r.stdout  # three ranks, each item read by one of them
    assert not list(tmp_path.glob("bench_coopload.*")), "the benchmark cleans up what it wrote"
