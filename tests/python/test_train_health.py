"""Rollback past a NaN and a loss spike, the skip list a fresh run replays bit for bit, the rollback limit.

Real gloo ranks under the real mpiexec, tiny config, faults injected with AGPT_FAULT_NAN_AT and
AGPT_FAULT_SPIKE_AT.  One recovering run is shared by the assertions (module fixture).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agpt.train import health
from train_util import AGPT, TINY, agpt_cmd, run_train, train_env

ROLLBACK = (
    "--set",
    "train.on_nonfinite=rollback",
    "--set",
    "train.spike={factor: 3, window: 4}",
    "--set",
    "train.rollback_lr_factor=0.5",
    "--set",
    "train.rollback_lr_steps=2",
)


def full_lines(text: str) -> dict[int, str]:
    """step -> the whole line without tps/stall_ms (the last occurrence of a replayed step wins)."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        if line.startswith("step="):
            fields = dict(tok.split("=", 1) for tok in line.split())
            out[int(fields["step"])] = (
                f"loss={fields['loss']} grad_norm={fields['grad_norm']} lr={fields['lr']}"
            )
    return out


@pytest.fixture(scope="module")
def recovered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    run = tmp_path_factory.mktemp("recover")
    env = {"AGPT_FAULT_NAN_AT": "7", "AGPT_FAULT_SPIKE_AT": "10"}
    r = run_train(2, run, "--steps", "14", "--ckpt-interval", "4", *ROLLBACK, env=env)
    return run, r


@pytest.mark.slow
def test_nan_and_spike_are_rolled_back_skipped_and_the_run_ends_0(
    recovered: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run, r = recovered
    assert r.returncode == 0, r.stdout + r.stderr
    events = [ln for ln in r.stdout.splitlines() if ln.startswith("agpt: event: rollback")]
    assert len(events) == 2, r.stdout
    # NaN at step 7: back to step 4, batches 5-7 skipped; spike at step 10 (the spike rule): back to 8.
    assert "loss not finite at step 7" in events[0] and "skipping batches 5-7" in events[0]
    assert "loss spike at step 10" in events[1] and "skipping batches 12-13" in events[1]
    saved = json.loads((run / "skips.json").read_text())
    assert saved["skip"] == [[5, 7], [12, 13]]
    assert [rb["reason"] for rb in saved["rollbacks"]] == ["nonfinite_loss", "spike"]
    recs = [json.loads(x) for x in (run / "health.jsonl").read_text().splitlines()]
    assert [(e["event"], e["step"], e["ckpt_step"]) for e in recs if e["event"] == "rollback"] == [
        ("rollback", 7, 4),
        ("rollback", 10, 8),
    ]
    # Each was recomputed first (agpt.train.sdc): the same numbers, so the data, not a device.
    assert [(e["step"], e["outcome"]) for e in recs if e["event"] == "rerun"] == [
        (7, "reproduced"),
        (10, "reproduced"),
    ]
    lines = full_lines(r.stdout)
    assert sorted(lines) == list(range(1, 15))
    # The two steps after each skip run at half the scheduled rate.
    lr = {s: float(lines[s].split("lr=")[1]) for s in (5, 6, 7)}
    assert lr[5] == lr[6] and lr[5] < 0.6 * lr[7]
    # No line of a recovered run may read as a failure to the classifier.
    assert "non-finite" not in r.stdout and "loss=nan" not in r.stdout


@pytest.mark.slow
def test_fresh_run_with_the_skip_list_reproduces_the_losses_bit_for_bit(
    recovered: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    run, first = recovered
    assert first.returncode == 0, first.stdout + first.stderr
    skips = tmp_path / "skips.json"
    skips.write_text((run / "skips.json").read_text())
    r = run_train(
        2,
        tmp_path / "fresh",
        "--steps",
        "14",
        "--ckpt-interval",
        "4",
        *ROLLBACK,
        "--set",
        f"train.skip={skips}",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "event: rollback" not in r.stdout
    assert full_lines(r.stdout) == full_lines(first.stdout)


@pytest.mark.slow
def test_too_many_rollbacks_stop_as_repeat(tmp_path: Path) -> None:
    env = {"AGPT_FAULT_NAN_AT": "5", "AGPT_FAULT_SPIKE_AT": "7"}
    r = run_train(
        2,
        tmp_path / "run",
        "--steps",
        "8",
        "--ckpt-interval",
        "4",
        *ROLLBACK,
        "--set",
        "train.max_rollbacks=1",
        env=env,
    )
    assert r.returncode == 4, r.stdout + r.stderr
    assert r.stdout.count("event: rollback:") == 1
    assert "event: rollback limit" in r.stdout
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("agpt: error:")]
    assert len(errors) == 1 and "train.max_rollbacks 1" in errors[0], r.stderr


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("train.spike={factor: 1, window: 4}", "train.spike.factor"),
        ("train.spike={factor: 0.5}", "train.spike.factor"),
        ("train.spike={factor: 2, window: 0}", "train.spike.window"),
        ("train.on_nonfinite=ignore", "train.on_nonfinite"),
        ("train.skip=[[9, 3]]", "train.skip"),
        ("train.rollback_lr_factor=2", "train.rollback_lr_factor"),
    ],
)
def test_bad_health_settings_exit_2_naming_the_key(tmp_path: Path, setting: str, key: str) -> None:
    cmd = [*agpt_cmd(), "train", "--config", str(TINY), "--run-dir", str(tmp_path / "r"), "--set", setting]
    r = subprocess.run(cmd, env=train_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("agpt: error:") and key in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


class _TC:
    rollback_lr_steps = 2
    rollback_lr_factor = 0.5


def test_skip_position_and_lr_factor_are_functions_of_the_skip_list() -> None:
    h = health.Health.__new__(health.Health)
    h.tc = _TC()
    h.skips = health.merge([(12, 13), (5, 7), (7, 8)])
    assert h.skips == [(5, 8), (12, 13)]
    g = 8
    # Batch n = samples [(n-1)g, ng): the position before step 5 (4 batches read) jumps past 5-8.
    assert h.skip_to(4 * g, g) == 8 * g
    assert h.skip_to(3 * g, g) == 3 * g
    assert h.skip_to(11 * g, g) == 13 * g
    # Step 5 reads batch 9, step 8 reads batch 12 -> 14: the two steps after each range are lowered.
    assert [h.lr_factor(s) for s in range(4, 12)] == [1.0, 0.5, 0.5, 1.0, 0.5, 0.5, 1.0, 1.0]


@pytest.mark.slow
def test_frozen_alarm_fires_for_a_group_whose_learning_rate_is_0(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = run_train(2, run, "--steps", "6", "--set", "optim.lr_scale={norm: 0}", "--set", "train.frozen_logs=3")
    assert r.returncode == 0, r.stdout + r.stderr
    warnings = [ln for ln in r.stdout.splitlines() if ln.startswith("agpt: warning: parameter group")]
    assert len(warnings) == 1 and warnings[0].startswith("agpt: warning: parameter group norm frozen"), (
        r.stdout
    )
    assert "(step 3)" in warnings[0]
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(rec["update"]["norm"] == 0.0 for rec in recs)
    assert all(rec["update"][g] > 1e-4 for rec in recs for g in ("embed", "attn", "mlp", "output"))
    (ev,) = [json.loads(x) for x in (run / "health.jsonl").read_text().splitlines()]
    assert (ev["event"], ev["group"], ev["step"]) == ("frozen", "norm", 3)
    # agpt failover report shows the trainer's health records of a run directory.
    (run / "events.jsonl").write_text(
        json.dumps({"event": "stop", "jobid": "1", "attempt": 1, "verdict": "done", "exit": 0, "time": 0})
        + "\n"
    )
    rep = subprocess.run(
        [str(AGPT), "failover", "report", str(run)],
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rep.returncode == 0, rep.stderr
    assert "trainer health:" in rep.stdout and '"group": "norm"' in rep.stdout


def test_update_monitor_counts_logs_below_the_threshold_while_lr_is_positive() -> None:
    m = health.UpdateMonitor([], threshold=1e-7, logs=2)
    assert m.judge({"norm": 0.0, "attn": 1e-3}, lr=1e-3) == []
    assert m.judge({"norm": 0.0, "attn": 1e-3}, lr=0.0) == []  # lr 0: nothing is expected to move
    assert m.judge({"norm": 0.0, "attn": 1e-3}, lr=1e-3) == []
    assert m.judge({"norm": 0.0, "attn": 1e-3}, lr=1e-3) == ["norm"]
    assert m.judge({"norm": 0.0, "attn": 1e-3}, lr=1e-3) == []  # once until it moves again
    assert [
        health.param_group(n) for n in ("tok_embeddings.weight", "layers.3.ffn_norm.weight", "output.weight")
    ] == [
        "embed",
        "norm",
        "output",
    ]
