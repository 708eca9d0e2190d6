"""`checkpoint.interval_s`: saves by training time, decided on rank 0 so every rank saves at the same step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from train_util import run_train

pytestmark = pytest.mark.slow


def test_time_based_saves_complete_on_every_rank(tmp_path: Path) -> None:
    # No step interval and no final save: every checkpoint comes from the time rule.  A save at different
    # steps on the two ranks would never complete (a distributed checkpoint is collective) or hang.
    r = run_train(
        2,
        tmp_path,
        "--steps",
        "12",
        "--ckpt-interval",
        "0",
        "--set",
        "checkpoint.interval_s=0.05",
        "--set",
        "checkpoint.save_final=false",
        "--set",
        "checkpoint.keep=20",
        env={"FAILOVER_ATTEMPT": "2", "FAILOVER_JOBID": "77"},
        timeout=240,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    done = sorted(int(p.parent.name.split("-")[1]) for p in (tmp_path / "ckpt").glob("step-*/.complete"))
    assert len(done) >= 2, done
    for step in done:
        marker = json.loads((tmp_path / "ckpt" / f"step-{step}" / ".complete").read_text())
        assert marker["world_size"] == 2
    # The recovery clock: rank 0 alone records when this process started, built, loaded and stepped.
    clocks = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert len(clocks) == 1
    c = clocks[0]
    assert (c["event"], c["jobid"], c["attempt"], c["step"]) == ("clock", "77", 2, 1)
    assert c["started"] <= c["built"] <= c["loaded"] <= c["first_step"]


def test_a_negative_interval_s_exits_2_naming_the_key(tmp_path: Path) -> None:
    r = run_train(1, tmp_path, "--steps", "2", "--set", "checkpoint.interval_s=-5", timeout=120)
    assert r.returncode == 2
    assert "checkpoint.interval_s" in r.stderr


def test_the_trainer_applies_and_logs_the_job_start_plan(tmp_path: Path) -> None:
    """RUN_DIR/checkpoint_plan.json (what the job's `agpt check --run-dir` decided): the trainer saves by the
    plan's interval where its config sets none, and says so at start."""
    import yaml

    from agpt import ckptplan
    from train_util import TINY

    cfg = yaml.safe_load(TINY.read_text())
    del cfg["checkpoint"]["interval"]
    conf = tmp_path / "tiny-free.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    plan = ckptplan.Plan(local=False, local_interval_s=0.0, local_memory_gib=0.0, local_why="off: a test",
                         interval_s=0.05, interval_why="every 0.05 s (a test)", job_mtbf_h=1.0, stall_s=0.1,
                         stall_source="a test", values={"interval": 0, "interval_s": 0.05, "local_interval": 0,
                                                        "local_interval_s": 0}, notes=[])  # fmt: skip
    run = tmp_path / "run"
    run.mkdir()
    ckptplan.write(run, plan)
    r = run_train(1, run, "--config", str(conf), "--steps", "8", "--set", "checkpoint.save_final=false", "--set",
                  "checkpoint.keep=20", timeout=240)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "agpt: checkpoint plan: global interval every 0.05 s (a test)" in r.stdout
    assert len(list((run / "ckpt").glob("step-*/.complete"))) >= 2
