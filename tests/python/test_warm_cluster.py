"""Warm ranks on the real local Slurm cluster, under the failover loop, side by side with warm ranks off.

The tiny model on 4 nodes + 2 spares (a local save every 3 steps); n3 is killed (tests/cluster/node fail: slurmd,
its steps and its memory) after step 12.  With FAILOVER_WARM the loop runs `agpt warm serve` on all six nodes
for the whole job (`srun --overlap --no-kill`), and the relaunch's ranks are handed to parked processes; without
it, the same drill starts interpreters as today.  Each prints its recovery clock (`agpt failover report`): the
figures go to docs/recovery.md with this command, never into an assert.
    .venv/bin/python -m pytest -s tests/python/test_warm_cluster.py
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT
from train_util import srun_env

pytestmark = pytest.mark.cluster

CONFIG = """model: {vocab_size: 512, dim: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_dim: 172, max_seq_len: 64}
train: {steps: 24, seq_len: 64, global_batch: 8, micro_batch: 2, seed: 1234, param_dtype: bf16,
        master_dtype: fp32}
optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 5, weight_decay: 0.1, grad_clip: 1.0}
data: {path: "", synthetic: true, seed: 0}
checkpoint: {interval: 10, keep: 2, async_save: true, max_writers: 4, local_interval: 3}
"""
SRUN = "srun --label --nodelist {hosts} -N {nhosts} --ntasks-per-node=1 --kill-on-bad-exit=1"
WARM = "srun --overlap --no-kill --kill-on-bad-exit=0 -N {nhosts} --nodelist {hosts} --ntasks-per-node=1"
AT = 12


def _env(cluster: dict[str, str]) -> dict[str, str]:
    # Plain interpreters (no test zygote): the start itself is what this drill measures.
    env = srun_env({**cluster, "MASTER_ADDR": "127.0.0.1", "OMP_NUM_THREADS": "1", "AGPT_TEST_ZYGOTE": "0"})
    for k in [k for k in env if k.startswith(("SLURM_JOB", "SLURM_STEP", "AGPT_DEADLINE", "FAILOVER_"))]:
        del env[k]
    return env


def _job(tmp: Path, run: Path, warm: bool) -> Path:
    cfg = tmp / "tiny.yaml"
    cfg.write_text(CONFIG)
    job = tmp / "job.sh"
    job.write_text(f"""#!/bin/bash
set -euo pipefail
source '{ROOT}/lib/sched.sh'
source '{ROOT}/lib/failover.sh'
export AGPT_RUN_DIR='{run}'
export AGPT_FAULT_SLEEP_AT='{AT + 1}:n3'
FAILOVER_SPARES=2 FAILOVER_BACKOFF=0 FAILOVER_IDLE_TIMEOUT=60 FAILOVER_STARTUP_TIMEOUT=180
FAILOVER_GRACE=30 FAILOVER_RESOLVE_TIMEOUT=2 FAILOVER_MIN_ATTEMPT_S=30 FAILOVER_SWEEP=off
FAILOVER_WARM='{WARM if warm else ""}'
rc=0
failover_run {SRUN} {{warm}} agpt train --config '{cfg}' --run-dir '{run}' || rc=$?
echo "verdict: $rc"
exit "$rc"
""")
    return job


def _until(pred, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _state(jobid: str, env: dict[str, str]) -> str:
    out = subprocess.run(["scontrol", "show", "job", jobid], env=env, capture_output=True, text=True).stdout
    m = re.search(r"JobState=(\S+)", out)
    return m.group(1) if m else "?"


def _drill(cluster: dict[str, str], tmp: Path, warm: bool) -> tuple[Path, str, str]:
    env = _env(cluster)
    run = tmp / "run"
    sub = subprocess.run(["sbatch", "--parsable", "-N", "6", "-t", "15:00", "--no-kill", "-o", str(tmp / "job.out"),
                          str(_job(tmp, run, warm))], env=env, cwd=tmp, capture_output=True, text=True)  # fmt: skip
    assert sub.returncode == 0, sub.stderr
    jobid = sub.stdout.strip()
    log = run / "attempts" / f"{jobid}.1.log"
    _until(
        lambda: log.is_file() and re.search(rf"^(\d+: )?step={AT} ", log.read_text(), re.M), 300, f"step {AT}"
    )
    node = [str(ROOT / "tests/cluster/node"), "--dir", cluster["AGPT_CLUSTER_DIR"]]
    assert subprocess.run([*node, "fail", "n3"], env=env, timeout=120).returncode == 0
    _until(
        lambda: _state(jobid, env) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"), 420, "the job"
    )
    subprocess.run([*node, "restore", "n3"], env=env, timeout=120, capture_output=True)
    out = (tmp / "job.out").read_text()
    assert "verdict: 0" in out, out
    report = subprocess.run(
        ["agpt", "failover", "report", str(run)], env=env, capture_output=True, text=True
    ).stdout
    return run, jobid, report


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_killed_node_comes_back_on_parked_ranks_and_the_clock_says_so(
    cluster: dict[str, str], tmp_path: Path, warm: bool
) -> None:
    run, jobid, report = _drill(cluster, tmp_path, warm)
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    first = next(e for e in events if e.get("event") == "attempt")
    assert first["class"] == "node" and first["bad_hosts"] == ["n3"]
    clock = next(e for e in events if e.get("event") == "clock" and e.get("attempt") == 2)
    assert clock.get("warm", False) is warm  # every relaunched rank on a parked process, or none
    lines = [x for x in report.splitlines() if x.startswith(("recovery clock after", "cold start of"))]
    print(f"\n[{'warm ranks' if warm else 'warm ranks off'}] job {jobid}")
    print("\n".join(lines))
    assert any(x.startswith(f"recovery clock after {jobid}.1 (node)") and "imports" in x for x in lines)
    if warm:
        text = (run / "attempts" / f"{jobid}.warm.log").read_text()
        assert "parked" in text and "normal launch" not in (run / "attempts" / f"{jobid}.2.log").read_text()
