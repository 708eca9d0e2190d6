"""`agpt plot`: a PNG of the loss curve with the run's failures marked."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import BIN, agpt_env


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "attempts").mkdir(parents=True)
    (run / "attempts" / "7.0.log").write_text(
        "".join(f"0: step={i} loss={10 / (1 + 0.1 * i):.4f} grad_norm=0.5\n" for i in range(1, 21))
        + "srun: error: Node failure on n3\n"
    )
    (run / "attempts" / "7.1.log").write_text(
        "".join(f"step={i} loss={9 / (1 + 0.1 * i):.4f}\n" for i in range(16, 31))
    )
    events = [
        {
            "attempt": 0,
            "rc": 1,
            "class": "node",
            "bad_hosts": ["n3"],
            "swapped": ["n3"],
            "first_step": 1,
            "last_step": 20,
        },
        {"attempt": 1, "rc": 0, "class": "success", "first_step": 16, "last_step": 30},
        {"verdict": "done", "exit": 0},
    ]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def test_plot_writes_png_with_events(tmp_path: Path) -> None:
    from agpt.runplot import read_run

    run = _run_dir(tmp_path)
    curve = read_run(run)
    assert curve.loss[30] == float(f"{9 / 4:.4f}")
    assert curve.loss[16] == float(f"{9 / 2.6:.4f}")  # the resumed attempt's value wins
    out = tmp_path / "loss.png"
    res = subprocess.run(
        [str(BIN / "agpt"), "plot", str(run), "-o", str(out)], env=agpt_env(), capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_progress_is_a_clear_error(tmp_path: Path) -> None:
    run = tmp_path / "empty"
    (run / "attempts").mkdir(parents=True)
    res = subprocess.run(
        [str(BIN / "agpt"), "plot", str(run)], env=agpt_env(), capture_output=True, text=True
    )
    assert res.returncode == 2
    assert "no `step=N loss=X` lines" in res.stderr


def test_swap_labels_read_the_failover_loops_record() -> None:
    from agpt.runplot import swap_text

    assert swap_text({"out": ["n3"], "in": ["n5"], "blind": False, "returned": []}) == "swap n3->n5"
    assert swap_text({"out": ["n2"], "in": ["n6"], "blind": True}) == "blind swap n2->n6"
    assert swap_text({"out": [], "in": [], "blind": False}) == ""
    assert swap_text(["n3"]) == "swap n3"
    assert swap_text(None) == ""
