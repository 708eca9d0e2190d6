"""Progress on the long helpers (agpt.progress): a tqdm bar with rate and ETA on a terminal, plain lines with
the same figures every AGPT_PROGRESS_SECONDS in a job's log."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

from agpt.progress import Progress
from agpt.sim import sweep
from conftest import BIN, agpt_env
from observe_util import on_a_terminal


def _tree(tmp: Path) -> Path:
    src = tmp / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(os.urandom(3_000_000))
    for i in range(50):
        (src / "sub" / f"f{i}.txt").write_text(f"file {i}\n")
    return src


def test_yeet_draws_bars_with_rate_and_etaon_a_terminal(tmp_path: Path) -> None:
    src = _tree(tmp_path)
    out = on_a_terminal([str(BIN / "agpt"), "yeet", str(src), "--transport", "local", "--dest",
                          str(tmp_path / "dest")], agpt_env())  # fmt: skip
    for bar in ("yeet: pack:", "yeet: extract:"):
        frames = [f for f in out.split("\r") if f.startswith(bar)]
        assert frames and "100%|" in frames[-1] and "3.00M/3.00M" in frames[-1], out
        assert "B/s]" in frames[-1] and "<" in frames[-1]  # tqdm's [elapsed<remaining, rate]


def test_yeet_prints_plain_lines_in_a_log(tmp_path: Path) -> None:
    src = _tree(tmp_path)
    r = subprocess.run([str(BIN / "agpt"), "yeet", str(src), "--transport", "local", "--dest", str(tmp_path / "d")],
                       env=agpt_env({"AGPT_PROGRESS_SECONDS": "0"}), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr
    pack = [line for line in r.stderr.splitlines() if line.startswith("yeet: pack: ")]
    assert pack and " of 3.0 MB (" in pack[0] and "B/s" in pack[0] and "done in" in pack[-1], r.stderr
    assert any(line.startswith("yeet: extract: 3.0 MB of 3.0 MB (100%)") for line in r.stderr.splitlines())


def test_sim_table_reports_each_run_and_its_progress(tmp_path: Path) -> None:
    r = subprocess.run([str(BIN / "agpt"), "sim", "table", "--model", "chaos", "--nodes", "4", "--days", "0.02",
                        "--out", str(tmp_path)], env=agpt_env({"AGPT_PROGRESS_SECONDS": "0"}),
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    n = len(sweep.VARIANTS)  # one run per variant at the one node count
    assert lines[-1].startswith(f"sim table: {n} of {n} runs (100%)") and "runs/s, done in" in lines[-1], (
        lines
    )
    assert any(line.startswith("4 nodes, sync saves, seed 1: effective ratio") for line in lines)


def test_plain_line_every_so_often_with_rate_and_eta() -> None:
    out = io.StringIO()
    p = Progress(1000, "blend: per-file indices", unit="files", every=3600, stream=out)
    p.update(10)
    assert out.getvalue() == ""  # not yet: the next line comes after `every` seconds
    p.t0 -= 10  # ten seconds in
    p.last -= 3600
    p.update(240)
    assert out.getvalue().startswith("blend: per-file indices: 250 of 1,000 files (25%), ")
    assert "files/s, ETA 30s" in out.getvalue()
    p.update(750)
    p.close()
    assert out.getvalue().splitlines()[-1].startswith("blend: per-file indices: 1,000 of 1,000 files (100%)")
    assert "done in" in out.getvalue().splitlines()[-1]
