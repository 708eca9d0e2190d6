"""tests/cluster/chaoslib.py without a cluster: the schedule parser, the checkpoint watch and the figures."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "cluster"))
import chaoslib


def test_schedule_parses_in_step_order_and_names_a_bad_item() -> None:
    faults = chaoslib.parse_schedule("node@60, stop@15,ckpt@40")
    assert [(f.kind, f.step) for f in faults] == [("node", 60), ("stop", 15), ("ckpt", 40)]
    with pytest.raises(ValueError, match="'boom@3'"):
        chaoslib.parse_schedule("kill@1,boom@3")
    with pytest.raises(ValueError, match="'kill'"):
        chaoslib.parse_schedule("kill")


def _ckpt(run: Path, step: int, complete: bool = True) -> Path:
    d = run / "ckpt" / f"step-{step}"
    d.mkdir(parents=True)
    (d / "__0_0.distcp").write_bytes(b"x" * step)
    if complete:
        (d / ".complete").write_text(json.dumps({"step": step, "time": 0, "world_size": 4}))
    return d


def test_ckpt_watch_allows_the_keep_policy_and_catches_a_lost_or_changed_checkpoint(tmp_path: Path) -> None:
    watch = chaoslib.CkptWatch(run_dir=tmp_path)
    for step in (5, 10):
        _ckpt(tmp_path, step)
        watch.poll()
    _ckpt(tmp_path, 15, complete=False)  # being written: never counted
    watch.poll()
    assert sorted(watch.seen) == [5, 10]
    (tmp_path / "ckpt/step-15/.complete").write_text("{}")
    watch.poll()
    shutil.rmtree(tmp_path / "ckpt/step-5")  # keep 2: 10 and 15 remain, 5 may go
    watch.poll()
    assert watch.problems(keep=2) == []
    shutil.rmtree(tmp_path / "ckpt/step-15")  # the newest complete one: lost
    (tmp_path / "ckpt/step-10/__0_0.distcp").write_bytes(b"short")  # changed after .complete
    watch.poll()
    problems = watch.problems(keep=2)
    assert any("step-15: complete, then removed" in p for p in problems)
    assert any("step-10: files changed" in p for p in problems)


def test_figures_steps_lost_per_fault_walltime_and_ratio(tmp_path: Path) -> None:
    run = tmp_path
    (run / "attempts").mkdir()
    (run / "attempts/7.1.log").write_text("".join(f"0: step={i} loss=5.0 tps=512.0\n" for i in range(1, 24)))
    (run / "attempts/7.2.log").write_text("".join(f"0: step={i} loss=4.0 tps=256.0\n" for i in range(21, 31)))
    (run / "attempts/8.1.log").write_text("".join(f"step={i} loss=3.0 tps=512.0\n" for i in range(31, 41)))
    events = [
        {"event": "attempt", "jobid": "7", "attempt": 1, "class": "crash", "first_step": 1, "last_step": 23,
         "log": "attempts/7.1.log"},
        {"event": "attempt", "jobid": "7", "attempt": 2, "class": "walltime", "first_step": 21, "last_step": 30,
         "log": "attempts/7.2.log"},
        {"event": "stop", "jobid": "7", "attempt": 2, "verdict": "resubmit", "reason": "killed at the job's deadline"},
        {"event": "attempt", "jobid": "8", "attempt": 1, "class": "success", "first_step": 31, "last_step": 40,
         "log": "attempts/8.1.log"},
    ]  # fmt: skip
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "chain.jsonl").write_text(
        json.dumps({"jobid": "7", "started": 1000, "ended": 1050}) + "\n"
        + json.dumps({"jobid": "8", "started": 1051, "ended": 1100, "decision": "stop", "verdict": "done"}) + "\n"
    )  # fmt: skip
    kill = chaoslib.Fault(kind="kill", step=20, fired=True, at_step=23, hosts=["n2"], log="7.1.log")
    fig = chaoslib.figures(run, [kill], tokens_per_step=512)
    rows = {r["fault"]: r for r in fig["faults"]}
    assert rows["kill@20"]["steps_lost"] == 3  # 21..23 ran again
    assert rows["walltime"]["steps_lost"] == 0
    # steps 1..20 and 31..40 at 1 s, 21..30 at 2 s (the replayed values win): 50 s of 100 s
    assert fig["productive_s"] == 50.0 and fig["wall_s"] == 100.0 and fig["effective_ratio"] == 0.5
    assert "effective training time ratio: 0.5" in chaoslib.table(fig)
    assert chaoslib.chain_stopped(run)
    assert chaoslib.last(run).startswith("done 8 ")


def test_figures_a_job_killed_at_its_time_limit_is_a_walltime_hand_over(tmp_path: Path) -> None:
    (tmp_path / "attempts").mkdir()
    (tmp_path / "attempts/2.1.log").write_text(
        "".join(f"0: step={i} loss=5.0 tps=512.0\n" for i in range(1, 41))
        + "0: slurmstepd-n2: error: *** STEP 2.0 ON n2 CANCELLED AT 2026-11-29T12:16:38 DUE TO TIME LIMIT ***\n"
    )
    (tmp_path / "attempts/3.1.log").write_text(
        "".join(f"step={i} loss=3.0 tps=512.0\n" for i in range(36, 51))
    )
    (tmp_path / "chain.jsonl").write_text(
        json.dumps({"jobid": "2", "started": None, "ended": None, "verdict": "lost"}) + "\n"
        + json.dumps({"jobid": "3", "started": 1040, "ended": 1060, "decision": "stop", "verdict": "done"}) + "\n"
    )  # fmt: skip
    fig = chaoslib.figures(tmp_path, [], tokens_per_step=512, started=1000.0)
    assert fig["faults"] == [
        {"fault": "walltime", "fired": True, "at_step": 40, "hosts": [], "attempt": "2.1.log", "steps_lost": 5,
         "why": "the scheduler killed the job at its time limit; the next job took over"}
    ]  # fmt: skip
    assert fig["wall_s"] == 60.0 and fig["productive_s"] == 50.0


def test_bad_hosts_splits_proven_from_blind(tmp_path: Path) -> None:
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts/bad").write_text("n3\t1\t7\tsrun: error: Node failure on n3\nn1\t2\t7\tblind\n")
    assert chaoslib.bad_hosts(tmp_path) == (["n3"], ["n1"])
