"""The writers' overhead benchmark runs (a few steps); its figures are read by people, never asserted."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT
from train_util import train_env


@pytest.mark.slow
def test_bench_observe_runs_and_prints_ratios() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests/bench/bench_observe.py"), "--steps", "14", "--logs", "20"],
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.count("ratio with/without") == 2 and "in the training thread: tensorboard" in r.stdout
