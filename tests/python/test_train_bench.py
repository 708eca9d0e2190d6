"""The checkpoint benchmark runs (tiny size); its figures are read by people, never asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from train_util import train_env


def test_bench_ckpt_runs_and_prints_ratios(tmp_path: Path) -> None:
    tmp = tmp_path / "t"
    tmp.mkdir()
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests/bench/bench_ckpt.py"), "--size", "0.01", "--reps", "1"],
        env=train_env({"TMPDIR": str(tmp)}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "async/copy_floor=" in r.stdout and "sync/async=" in r.stdout
    assert not any(tmp.iterdir()), "the benchmark cleans up what it wrote"


def test_bench_localckpt_runs_and_prints_ratios(tmp_path: Path) -> None:
    """The local tier's benchmark, both parts (two ranks under mpiexec for the restore), at a tiny size."""
    tmp = tmp_path / "t"
    tmp.mkdir()
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests/bench/bench_localckpt.py"), "--size", "0.01", "--reps", "1",
         "--steps", "40", "--step-s", "0", "--local-every", "2", "--global-every", "10", "--failures", "5"],
        env=train_env({"TMPDIR": str(tmp)}),
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "local/async=" in r.stdout and "global/local=" in r.stdout, r.stdout
    assert "global/local partner's copy=" in r.stdout and "steps lost per failure" in r.stdout, r.stdout
    assert not any(tmp.iterdir()), "the benchmark cleans up what it wrote"
