"""One rule for "this checkpoint is complete" (agpt.ckptdir): the trainer, `agpt check --run-dir`, `agpt failover
report`, the chain, the planner and the simulator name the same resume step for the same run directory.

Before the rule had one home they disagreed: the chain, the planner and the report took any `.complete`, so a
directory whose marker names another step (a copy made by hand) was their resume step while the trainer skipped
it; `agpt check` refused a marker that does not parse, which the trainer resumes from (data checked by size).
The trainer's own run on such a directory is in test_ckpt_digest.py (it needs a trained checkpoint).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from agpt import ckptdir
from agpt.failover import plan
from agpt.sim import engine
from agpt.sim import model as sim_model
from agpt.train import checkpoint as ck
from conftest import ROOT
from data_util import run_agpt

T0 = 1_715_076_000


def marker(run: Path, step: int, text: str) -> Path:
    d = run / "ckpt" / f"step-{step}"
    d.mkdir(parents=True, exist_ok=True)
    (d / ".complete").write_text(text)
    return d


def saved(run: Path, step: int, *, names: int | None = None) -> Path:
    """A step directory with the trainer's marker (naming `names` instead of `step` when given)."""
    rec = {"step": step if names is None else names, "time": T0 + step, "world_size": 4}
    return marker(run, step, json.dumps(rec))


def agpt(*args: str) -> subprocess.CompletedProcess[str]:
    return run_agpt(*args, cwd=ROOT, timeout=300)


def with_an_attempt(run: Path) -> Path:
    """The events.jsonl `agpt failover report` needs: one finished attempt."""
    ev = {"event": "attempt", "jobid": "1", "attempt": 1, "rc": 0, "class": "success", "started": T0,
          "ended": T0 + 60, "first_step": 1, "last_step": 30}  # fmt: skip
    (run / "events.jsonl").write_text(json.dumps(ev) + "\n")
    return run


def resume_steps(run: Path) -> dict[str, int | None]:
    """The resume step each tool names for RUN."""
    report = agpt("failover", "report", "--json", str(run))
    assert report.returncode == 0, report.stderr
    text = agpt("failover", "report", str(run))
    chain = agpt("chain", "step", str(run))
    assert chain.returncode == 0, chain.stderr
    check = agpt("check", "jobs/configs/tiny.yaml", "--site", "generic", "--run-dir", str(run))
    said = [w for line in check.stdout.splitlines() if "resumes from step" in line
            for w in [line.split("resumes from step ")[1].split()[0]]]  # fmt: skip
    trainer = ck.complete_steps(run / "ckpt", warn_unreadable=False)
    in_text = [
        ln.split("step ")[1].split()[0] for ln in text.stdout.splitlines() if ln.startswith("resumes from:")
    ]
    return {
        "trainer": trainer[-1][0] if trainer else None,
        "check": int(said[0]) if said else None,
        "report": json.loads(report.stdout)["totals"]["resume_step"],
        "report text": int(in_text[0]) if in_text else None,
        "chain": int(chain.stdout),
        "planner": plan.latest_checkpoint(run),
    }


def test_a_newest_marker_naming_another_step_gives_one_resume_step_everywhere(tmp_path: Path) -> None:
    run = tmp_path / "run"
    saved(run, 10)
    saved(run, 20)
    saved(run, 30, names=20)  # step-20 copied by hand into step-30: it holds step 20's state
    with_an_attempt(run)
    assert set(resume_steps(run).values()) == {20}
    # `agpt check` still asks a person to move the copy aside: the trainer overwrites it at step 30.
    check = agpt("check", "jobs/configs/tiny.yaml", "--site", "generic", "--run-dir", str(run))
    assert check.returncode == 2
    assert (
        f"{run}/ckpt/step-30/.complete: step 20 in a directory named step-30; move it aside" in check.stderr
    )


def test_a_newest_marker_that_does_not_parse_is_the_resume_step_everywhere(tmp_path: Path) -> None:
    run = tmp_path / "run"
    saved(run, 10)
    saved(run, 20)
    marker(run, 30, "\x00garbage{")
    with_an_attempt(run)
    assert set(resume_steps(run).values()) == {30}
    # Was a failure (exit 2, "move that directory aside"): now the row the trainer's own warning matches.
    check = agpt("check", "jobs/configs/tiny.yaml", "--site", "generic", "--run-dir", str(run))
    assert check.returncode == 0, check.stderr
    assert (
        "step-30/.complete: unreadable; the trainer tries step 30 with its data checked by size"
        in check.stdout
    )


def test_the_report_dates_only_complete_checkpoints(tmp_path: Path) -> None:
    """A marker naming another step no longer dates that other step (it used to overwrite step 20's time)."""
    from agpt.failover import report

    run = tmp_path / "run"
    saved(run, 20)
    saved(run, 30, names=20)
    (run / "ckpt" / "step-40").mkdir()  # an interrupted save: no marker
    assert report.checkpoint_times(run) == {20: T0 + 20}


def test_directory_names_outside_the_rule_are_not_checkpoints(tmp_path: Path) -> None:
    run = tmp_path / "run"
    saved(run, 10)
    for name in ("step-\u00b2", "step-", "step-1x", "step-" + "9" * 19, "Step-50"):
        marker(run, 0, "{}").rename(run / "ckpt" / name)
    assert [d.step for d in ckptdir.complete(run / "ckpt")] == [10]
    assert ckptdir.resume_step(run) == 10 and ckptdir.resume_step(tmp_path / "none") is None


def test_the_simulator_writes_markers_the_rule_reads(tmp_path: Path) -> None:
    m = sim_model.override(sim_model.load("chaos"), horizon_days=0.01)
    res = engine.simulate(m, seed=1, workdir=tmp_path)
    done = ckptdir.complete(tmp_path / "run" / "ckpt")
    assert done and done[-1].step == res.steps and len(done) <= m.train.checkpoint_keep
    assert all(not d.unreadable and d.time is not None for d in done)


def test_ckpt_info_names_a_marker_that_says_another_step(tmp_path: Path) -> None:
    """`agpt ckpt info` used to call a copy complete; its marker is a problem now, as it is to resume."""
    from agpt.ckpt.info import marker_problems

    run = tmp_path / "run"
    copy = saved(run, 30, names=20)
    assert marker_problems(ckptdir.read_step_dir(copy)) == [
        f"{copy}/.complete: says step 20, the directory is step-30"
    ]
    assert marker_problems(ckptdir.read_step_dir(saved(run, 20))) == []
    assert marker_problems(ckptdir.read_step_dir(marker(run, 40, "{"))) == [
        f"{run}/ckpt/step-40/.complete: unreadable"
    ]
