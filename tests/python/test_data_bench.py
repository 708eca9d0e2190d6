"""The data benchmarks run (tiny sizes; their numbers are not checked: timing is not a test)."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, agpt_env


def test_bench_tokenize_runs() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests/bench/bench_tokenize.py"), "--mb", "0.2", "--vocab", "400", "--repeat", "1"],
        capture_output=True, text=True, env=agpt_env(), timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "ratio vs raw" in r.stdout and "--workers 2" in r.stdout


def test_bench_blend_runs() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests/bench/bench_blend.py"), "--samples", "20000", "--corpora", "3", "--files", "4", "--repeat", "1"],
        capture_output=True, text=True, env=agpt_env(), timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "baseline: " in r.stdout and "ratio (baseline time / agpt time)" in r.stdout
