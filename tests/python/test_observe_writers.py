"""The trainer's writers on their own (agpt.observe.writers): TensorBoard read back with TensorBoard's own reader,
W&B's offline record log, and what a broken writer costs (one warning, never the run)."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agpt import rundir
from agpt.observe.writers import Writers
from agpt.train.config import ObserveConfig
from conftest import agpt_env
from observe_util import tb_events, tb_texts, wandb_records

CONFIG = {"train": {"steps": 20}, "model": {"dim": 64}}


def _rec(step: int, loss: float) -> dict[str, Any]:
    return {"step": step, "time": 1.7e9 + step, "tokens": step * 512, "loss": loss, "grad_norm": 0.5,
            "lr": 1e-3, "tokens_per_s_per_device": 100.0, "mfu": None, "step_s": 0.1,
            "eval": {"code": 2.0} if step % 5 == 0 else None, "update": {"attn": 1e-4}}  # fmt: skip


def _writers(run: Path, start: int, warnings: list[str], **kw: Any) -> Writers:
    oc = ObserveConfig(prometheus=False, **kw)
    return Writers(run, oc, CONFIG, start, warn=warnings.append)


def _attempt_event(run: Path, n: int, last_step: int, cls: str = "crash") -> None:
    rundir.append_jsonl(run / rundir.EVENTS, {"event": "attempt", "jobid": "j1", "attempt": n, "rc": 137,
                        "class": cls, "last_step": last_step, "evidence": ["rank 1 killed"],
                        "swapped": {"out": ["h2"], "in": ["h3"], "blind": True}})  # fmt: skip


def test_resumed_steps_show_once_and_each_failure_is_one_marker_at_its_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    warnings: list[str] = []
    w = _writers(run, 0, warnings)
    for s in range(1, 11):
        w.log(_rec(s, 10.0 - s))
    w.close()  # killed after step 10; its checkpoint is step 6
    _attempt_event(run, 1, 10)
    w = _writers(run, 6, warnings)  # the next attempt resumes at 6 and replays 7..10
    for s in range(7, 15):
        w.log(_rec(s, 100.0 + s))
    w.rollback(12)  # a rollback to step 12's checkpoint replays 13 and 14
    for s in range(13, 17):
        w.log(_rec(s, 200.0 + s))
    w.close()
    w = _writers(run, 16, warnings)  # a third start: the failure of attempt 1 is not written again
    w.close()
    assert warnings == []

    acc = tb_events(run / rundir.TB)
    loss = {e.step: e.value for e in acc.Scalars("train/loss")}
    steps = [e.step for e in acc.Scalars("train/loss")]
    assert steps == list(range(1, 17)), steps  # every logged step once
    assert loss[6] == 4.0 and loss[7] == 107.0 and loss[12] == 112.0 and loss[13] == 213.0
    assert [e.step for e in acc.Scalars("eval/code")] == [5, 10, 15]
    assert {"train/grad_norm", "perf/tokens_per_s_per_device", "time/step_s", "update/attn"} <= set(
        acc.Tags()["scalars"]
    )
    assert "perf/mfu" not in acc.Tags()["scalars"]  # null in the record: no point rather than a fake 0
    events = tb_texts(acc)
    failures = [(s, t) for s, t in events if t.startswith("failure")]
    assert (
        failures == [(10, failures[0][1])]
        and "crash" in failures[0][1]
        and "h2 -> h3 [blind]" in failures[0][1]
    )
    assert [s for s, t in events if t.startswith("restart")] == [6, 16]
    assert [s for s, _ in tb_texts(acc, "config")] == [0, 6, 16]
    assert json.loads(tb_texts(acc, "config")[0][1].strip("`json\n")) == CONFIG


def test_rollback_in_health_jsonl_becomes_a_marker(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rundir.append_jsonl(run / rundir.HEALTH, {"event": "rollback", "time": 1.0, "step": 7, "reason": "spike",
                                              "ckpt_step": 4, "skip": [5, 7]})  # fmt: skip
    warnings: list[str] = []
    _writers(run, 4, warnings).close()
    _writers(run, 4, warnings).close()
    texts = [(s, t) for s, t in tb_texts(tb_events(run / rundir.TB)) if t.startswith("rollback")]
    assert texts == [(7, "rollback: spike at step 7; reloaded step 4, skipping batches [5, 7]")]


def test_torn_records_are_noted_once_and_the_rest_still_marked(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _attempt_event(run, 1, 9)
    with open(run / rundir.EVENTS, "a") as f:
        f.write('{"event": "attempt", "jobid": "j1", "attempt": 2, "rc"')  # a writer killed mid-line
    (run / rundir.HEALTH).write_text('{"event": "rollb')
    warnings: list[str] = []
    w = _writers(run, 5, warnings)
    w.rollback(5)  # markers are read again: no second note
    w.close()
    assert len(warnings) == 2 and all(n.startswith("agpt: note: ") for n in warnings), warnings
    assert f"{rundir.EVENTS}: 1 unreadable line(s) skipped" in warnings[0]
    assert f"{rundir.HEALTH}: 1 unreadable line(s) skipped" in warnings[1]
    assert [s for s, t in tb_texts(tb_events(run / rundir.TB)) if t.startswith("failure")] == [9]


def test_a_folder_that_cannot_be_written_costs_one_warning(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / rundir.CKPT).mkdir()  # what `agpt train --run-dir` makes first
    (run / rundir.TB).write_text("a file where the folder would go\n")
    warnings: list[str] = []
    w = Writers(run, ObserveConfig(prometheus_interval_s=0), CONFIG, 0, warn=warnings.append)
    for s in range(1, 4):
        w.log(_rec(s, 1.0))
    w.close()
    assert len(warnings) == 1 and "observe.tensorboard: cannot start" in warnings[0], warnings
    assert "agpt_step" in (run / rundir.PROM).read_text()  # the others go on


def test_a_missing_library_costs_one_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # `import tensorboardX` raises ImportError
    monkeypatch.setitem(sys.modules, "tensorboardX.event_file_writer", None)
    warnings: list[str] = []
    w = _writers(tmp_path, 0, warnings)
    w.log(_rec(1, 1.0))
    w.close()
    assert len(warnings) == 1, warnings
    assert (
        "observe.tensorboard: tensorboardX" in warnings[0]
        and "pip install 'agpt[tensorboard]'" in warnings[0]
    )


def test_a_writer_failing_mid_run_is_dropped_after_one_warning(tmp_path: Path) -> None:
    warnings: list[str] = []
    w = _writers(tmp_path, 0, warnings)
    sink = w.sinks[0]

    def full(*_a: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    sink.scalars = full  # type: ignore[method-assign]
    for s in range(1, 5):
        w.log(_rec(s, 1.0))
    w.close()
    assert warnings == ["agpt: warning: observe.tensorboard: OSError: [Errno 28] No space left on device; "
                        "training goes on without it"]  # fmt: skip


WANDB_SCRIPT = """
import sys
from pathlib import Path
from agpt.observe.writers import Writers
from agpt.train.config import ObserveConfig
run = Path(sys.argv[1])
w = Writers(run, ObserveConfig(tensorboard=False, prometheus=False, wandb=True), {"train": {"steps": 9}}, 0,
            warn=lambda m: sys.exit(m))
for s in range(1, 6):
    w.log({"step": s, "loss": 10.0 - s, "lr": 0.1})
w.rollback(3)
for s in range(4, 7):
    w.log({"step": s, "loss": 20.0 - s, "lr": 0.1})
w.close()
"""


def test_wandb_offline_run_reads_back_with_its_config_and_steps(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    env = agpt_env({"AGPT_ATTEMPT_ID": "j7.2", "WANDB_DISABLE_GIT": "true"})
    r = subprocess.run([sys.executable, "-c", WANDB_SCRIPT, str(run)], env=env, capture_output=True, text=True,
                       timeout=180, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    files = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    recs = wandb_records(files[0])
    kinds = [r.WhichOneof("record_type") for r in recs]
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
               for r in recs if r.HasField("history")]  # fmt: skip
    points = [(h["step"], h["train/loss"]) for h in history if "train/loss" in h]
    assert points == [(s, 10.0 - s) for s in range(1, 6)] + [(s, 20.0 - s) for s in range(4, 7)]
    runrec = next(r.run for r in recs if r.HasField("run"))
    assert {u.key: json.loads(u.value_json) for u in runrec.config.update}["train"] == {"steps": 9}
    assert (runrec.display_name, runrec.run_group, runrec.project) == ("run-j7.2", "run", "agpt")
    assert kinds[-1] == "exit"  # finished cleanly: `wandb sync` uploads it whole
