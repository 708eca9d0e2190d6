"""A NaN and a loss spike injected into a job of the local Slurm cluster under the failover loop: both are
rolled back in the trainer, the chain ends `done` with no person, and a fresh run given the recorded skip
list reproduces the losses bit for bit."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from train_util import AGPT, losses, srun_env

pytestmark = pytest.mark.cluster

TRAIN = """model: {vocab_size: 512, dim: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_dim: 172, max_seq_len: 64}
train: {steps: 14, seq_len: 64, global_batch: 8, micro_batch: 2, seed: 1234, param_dtype: bf16,
        master_dtype: fp32, on_nonfinite: rollback, spike: {factor: 3, window: 4}}
optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 5, weight_decay: 0.1, grad_clip: 1.0}
data: {synthetic: true}
checkpoint: {interval: 4, keep: 2, async_save: true, max_writers: 2}
"""


LINE_RE = re.compile(r"\bstep=(\d+) (loss=\S+ grad_norm=\S+)")


def _lines(text: str) -> dict[int, str]:
    """step -> `loss=... grad_norm=...` (the last one of a replayed step), with or without a launcher prefix."""
    return {int(s): rest for s, rest in LINE_RE.findall(text)}


def _chain(run: Path) -> list[dict[str, object]]:
    try:
        return [json.loads(x) for x in (run / "chain.jsonl").read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return []


@pytest.mark.timeout(600)
def test_nan_and_spike_under_the_failover_loop_end_done(cluster: dict[str, str], tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg = tmp_path / "health.yaml"
    cfg.write_text(
        TRAIN
        + f"""job:
  name: health
  nodes: 2
  spares: 0
  walltime: "00:03:00"
  account: ""
  run_dir: {run}
  launcher: srun
  ranks_per_node: 1
  max_jobs: 2
  env: {{MASTER_ADDR: 127.0.0.1, AGPT_FAULT_NAN_AT: 7, AGPT_FAULT_SPIKE_AT: 11, FAILOVER_MIN_ATTEMPT_S: 30,
        FAILOVER_WALLTIME_MARGIN: 10, AGPT_TRAIN_DEADLINE_MARGIN_S: 10}}
"""
    )
    env = srun_env({**cluster})
    r = subprocess.run(
        [str(AGPT), "jobgen", "--site", "generic", "--scheduler", "slurm", "-o", str(tmp_path / "h.slurm"), str(cfg)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        ["sbatch", "--parsable", "h.slurm"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    end = time.monotonic() + 480
    while not any(c.get("decision") == "stop" for c in _chain(run)) and time.monotonic() < end:
        time.sleep(1)
    chain = _chain(run)
    logs = sorted(p for p in (run / "attempts").glob("*.log") if not p.name.endswith(".preflight.log"))
    text = "".join(p.read_text(errors="replace") for p in logs)
    assert chain and chain[-1].get("verdict") == "done", f"{chain}\n{text[-3000:]}"
    assert len(logs) == 1, "recovered inside the first attempt: no second attempt, no person"
    assert "loss not finite at step 7" in text and "loss spike at step 11" in text
    skips = json.loads((run / "skips.json").read_text())["skip"]
    assert skips == [[5, 7], [12, 14]]  # step 11 read batch 14 (3 batches skipped before)

    # A fresh run with the recorded skip list: the same loss and grad-norm at every step.
    r = subprocess.run(
        ["srun", "-N", "2", "-n", "2", str(AGPT), "train", "--config", str(cfg), "--run-dir", str(tmp_path / "fresh"),
         "--set", f"train.skip={run / 'skips.json'}"],
        env={**env, "MASTER_ADDR": "127.0.0.1"}, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    want = _lines(text)
    assert sorted(losses(r.stdout)) == list(range(1, 15))
    assert _lines(r.stdout) == want
