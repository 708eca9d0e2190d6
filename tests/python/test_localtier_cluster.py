"""The local checkpoint tier on the real local Slurm cluster, under the failover loop: each node's memory is its
own folder (tests/cluster/up), and a node failure (tests/cluster/node fail) destroys it with the node.

- A node killed at step k with a local save every 3 steps and a global one every 10: the relaunch resumes at
  the newest local step, the lost node's shards taken from the node that held its copy, and every step's loss
  is, as text, the loss of an unfaulted run.  The same failure in the job's last minutes (less than
  FAILOVER_MIN_ATTEMPT_S left): the relaunch is the loop's save attempt, not a hand-over with node memory's steps.
  A bug that recurs at its step (AGPT_FAULT_BUG_AT): the stop for a person comes after a save before it, which
  writes node memory's step to the global tier without running the failing step again.
- A local shard corrupted in memory between the failure and the relaunch: found by its digest, global used.
The first prints the steps lost by the failure from the tier it resumed from, and from the global tier alone.

- Two partners lost at once: a node killed, and at the same moment the node that held its copy loses its memory
  (its folder destroyed: a node that crashed and came straight back): no node of the relaunch holds the killed
  node's shard, so the whole job resumes from the global tier, and every step's loss is still the reference's.
  (Both nodes failed for good cannot be drilled on this test cluster: when two nodes of one job step fail
  together, slurmctld removes both from the job but keeps the rest of the step "busy" (`srun: Job N step creation
  temporarily disabled, retrying (Requested nodes are busy)`), so no relaunch in that allocation can start; the
  same loss with both nodes gone is drilled with real ranks on pretend nodes in test_train_localtier.py.)
- Wrong numbers (issue 38): a bit flipped in one rank's forward (AGPT_FAULT_BITFLIP, tests only) spikes the loss;
  the trainer's rerun names that rank's host (`sdc: nK rank R: ...`), the loop evicts it on that evidence, the
  relaunch on a spare resumes from node memory before the flip, and every step's loss is the reference's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from agpt import ckptdir, localtier
from conftest import ROOT
from train_util import srun_env

pytestmark = pytest.mark.cluster

STEPS = 30
CONFIG = f"""model: {{vocab_size: 512, dim: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_dim: 172, max_seq_len: 64}}
train: {{steps: {STEPS}, seq_len: 64, global_batch: 8, micro_batch: 2, seed: 1234, param_dtype: bf16,
        master_dtype: fp32}}
optim: {{lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 5, weight_decay: 0.1, grad_clip: 1.0}}
data: {{path: "", synthetic: true, seed: 0}}
checkpoint: {{interval: 10, keep: 2, async_save: true, max_writers: 4, local_interval: 3}}
"""
SRUN = "srun --label --nodelist {hosts} -N {nhosts} --ntasks-per-node=1 --kill-on-bad-exit=1"
STEP_RE = re.compile(r"^(?:\d+: )?step=(\d+) loss=(\S+) grad_norm=(\S+)", re.M)


def _env(cluster: dict[str, str]) -> dict[str, str]:
    env = srun_env({**cluster, "MASTER_ADDR": "127.0.0.1", "OMP_NUM_THREADS": "1"})
    for k in [k for k in env if k.startswith(("SLURM_JOB", "SLURM_STEP", "AGPT_DEADLINE", "FAILOVER_"))]:
        del env[k]
    return env


def _job(tmp: Path, run: Path, backoff: str, hold: str, config: str = CONFIG, faults: str = "",
         min_attempt: str = "30") -> Path:  # fmt: skip
    cfg = tmp / "tiny-local.yaml"
    cfg.write_text(config)
    job = tmp / "job.sh"
    job.write_text(f"""#!/bin/bash
set -euo pipefail
source '{ROOT}/lib/sched.sh'
source '{ROOT}/lib/failover.sh'
export AGPT_RUN_DIR='{run}'
export AGPT_FAULT_SLEEP_AT='{hold}'
{faults}
FAILOVER_SPARES=2 FAILOVER_BACKOFF="{backoff}" FAILOVER_IDLE_TIMEOUT=60 FAILOVER_STARTUP_TIMEOUT=180
FAILOVER_GRACE=2 FAILOVER_RESOLVE_TIMEOUT=2 FAILOVER_MIN_ATTEMPT_S={min_attempt} FAILOVER_MIN_SAVE_S=30
rc=0
failover_run {SRUN} agpt train --config '{cfg}' --run-dir '{run}' || rc=$?
echo "verdict: $rc"
exit "$rc"
""")
    return job


def _wait(jobid: str, env: dict[str, str], timeout: float = 420) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["scontrol", "show", "job", jobid], env=env, capture_output=True, text=True
        ).stdout
        m = re.search(r"JobState=(\S+)", out)
        if m and m.group(1) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return m.group(1)
        time.sleep(0.5)
    raise AssertionError(f"job {jobid} still running after {timeout} s")


def _until(pred, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _losses(text: str) -> dict[int, str]:
    return {int(m.group(1)): f"{m.group(2)} {m.group(3)}" for m in STEP_RE.finditer(text)}


def _node(cluster: dict[str, str], *args: str) -> None:
    r = subprocess.run([str(ROOT / "tests/cluster/node"), "--dir", cluster["AGPT_CLUSTER_DIR"], *args],
                       env=_env(cluster), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def reference(cluster: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    """The same config on four nodes by plain srun, no failure: the loss of every step."""
    tmp = tmp_path_factory.mktemp("ref")
    cfg = tmp / "tiny-local.yaml"
    cfg.write_text(CONFIG)
    r = subprocess.run(["srun", "-N", "4", "--ntasks-per-node=1", "agpt", "train", "--config", str(cfg),
                        "--run-dir", str(tmp / "run")], env=_env(cluster), cwd=tmp, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    got = _losses(r.stdout)
    assert sorted(got) == list(range(1, STEPS + 1))
    return got


def _drill(cluster: dict[str, str], tmp: Path, kill: list[str], at: int, *, backoff: str = "1",
           between=None, min_attempt: str = "30", kill_after_s: float = 0.0,
           ) -> tuple[Path, str, list[str]]:  # type: ignore[no-untyped-def]  # fmt: skip
    """Submit the job (4 active + 2 spares), fail the nodes KILL when attempt 1 logs step AT, run BETWEEN (if
    any) once attempt 1's event is written, wait for the verdict: (run dir, job id, the attempt logs' text).
    The last node of KILL holds step AT + 1 in its forward pass (AGPT_FAULT_SLEEP_AT), so the failure lands after
    step AT however slow the kill is on loaded cores; its replacement does not hold."""
    env = _env(cluster)
    run = tmp / "run"
    submitted = time.monotonic()
    jobid = _submit(env, tmp, _job(tmp, run, backoff, f"{at + 1}:{kill[-1]}", min_attempt=min_attempt))
    log = run / "attempts" / f"{jobid}.1.log"
    _until(
        lambda: log.is_file() and re.search(rf"^(\d+: )?step={at} ", log.read_text(), re.M), 300, f"step {at}"
    )
    time.sleep(max(0.0, submitted + kill_after_s - time.monotonic()))  # step AT + 1 is held until the kill
    procs = [subprocess.Popen([str(ROOT / "tests/cluster/node"), "--dir", cluster["AGPT_CLUSTER_DIR"], "fail", n],
                              env=env) for n in kill]  # fmt: skip
    assert all(p.wait(timeout=120) == 0 for p in procs)
    if between is not None:
        _until(lambda: (run / "events.jsonl").is_file(), 120, "attempt 1's event")
        between(run)
    state = _wait(jobid, env)
    for n in kill:
        _node(cluster, "restore", n)
    out = (tmp / "job.out").read_text()
    assert state == "COMPLETED" and "verdict: 0" in out, out
    return run, jobid, _attempt_logs(run, jobid)


def _submit(env: dict[str, str], tmp: Path, job: Path) -> str:
    """sbatch JOB on all 6 nodes (4 active + 2 spares), its output in TMP/job.out: the job id."""
    sub = subprocess.run(["sbatch", "--parsable", "-N", "6", "-t", "15:00", "--no-kill", "-o", str(tmp / "job.out"),
                          str(job)], env=env, cwd=tmp, capture_output=True, text=True)  # fmt: skip
    assert sub.returncode == 0, sub.stderr
    return sub.stdout.strip()


def _attempt_logs(run: Path, jobid: str) -> list[str]:
    """The text of each attempt's log of JOBID, in attempt order."""
    return [p.read_text() for p in sorted((run / "attempts").glob(f"{jobid}.*.log"),
                                          key=lambda p: int(p.name.split(".")[1]))]  # fmt: skip


def _final(logs: list[str]) -> dict[int, str]:
    """step -> the last loss logged for it, over the attempts in order."""
    out: dict[int, str] = {}
    for text in logs:
        out.update(_losses(text))
    return out


def _lost(logs: list[str], resumed: int) -> tuple[int, int, int]:
    """(last step of attempt 1, steps lost resuming from RESUMED, steps lost from the global tier alone)."""
    last = max(_losses(logs[0]))
    return last, last - resumed, last - last // 10 * 10


def test_a_killed_node_resumes_at_the_newest_local_step_from_its_partners_copy(
    cluster: dict[str, str], tmp_path: Path, reference: dict[int, str]
) -> None:
    run, jobid, logs = _drill(cluster, tmp_path, ["n3"], at=14)
    back = logs[-1]
    m = re.search(r"resumed from the local tier \(step (\d+): 3 rank\(s\) from their node's memory, 1 from a "
                  r"partner's copy; rank (\d) from (n\d)\)", back)  # fmt: skip
    assert m, back
    step = int(m.group(1))
    assert step % 3 == 0 and step >= 12 and step > (max(_losses(logs[0])) // 10) * 10
    last, lost_local, lost_global = _lost(logs, step)
    print(
        f"node n3 failed at step {last}: resumed from local step {step}: {lost_local} steps lost "
        f"(the global tier alone: {lost_global})"
    )
    assert lost_local < lost_global
    assert _final(logs) == reference  # every step's loss, as text
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    first = next(e for e in events if e.get("event") == "attempt")
    assert first["class"] == "node" and first["bad_hosts"] == ["n3"]
    assert first["last_progress"] <= first["detected"] <= first["ended"]
    clock = next(e for e in events if e.get("event") == "clock" and e.get("attempt") == 2)
    assert clock["tier"] == "local" and clock["from_partner"] == [int(m.group(2))]
    report = subprocess.run(["agpt", "failover", "report", str(run)], env=_env(cluster), capture_output=True,
                            text=True).stdout  # fmt: skip
    line = next(x for x in report.splitlines() if x.startswith(f"recovery clock after {jobid}.1 (node)"))
    print(line)
    assert re.search(r"detection [\d.]+ s, teardown [\d.]+ s, relaunch [\d.]+ s, process start [\d.]+ s, "
                     r"imports [\d.]+ s, process group [\d.]+ s, model build [\d.]+ s, state restore [\d.]+ s "
                     r"\(local tier\), first step [\d.]+ s; first step back [\d.]+ s after its last progress", line)  # fmt: skip


def test_a_node_killed_in_the_jobs_last_minutes_is_relaunched_as_a_save_attempt(
    cluster: dict[str, str], tmp_path: Path, reference: dict[int, str]
) -> None:
    """The job's 15 minutes less FAILOVER_MIN_ATTEMPT_S (840 s) leave its first minute for attempt 1 to start; the
    kill comes after it, so less than FAILOVER_MIN_ATTEMPT_S is left.  Node memory holds steps past the global
    checkpoint (the attempt's log, under srun's labels, shows the local tier on) and FAILOVER_MIN_SAVE_S (30) fits:
    the loop relaunches (a save attempt) instead of handing the allocation back (75) with those steps in it."""
    run, _, logs = _drill(cluster, tmp_path, ["n3"], at=14, min_attempt="840", kill_after_s=75)
    assert re.search(r"resumed from the local tier \(step \d+:", logs[-1]), logs[-1]
    assert _final(logs) == reference
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    first = next(e for e in events if e.get("event") == "attempt")
    assert first["held"] is True and first["action"] == "relaunch" and "save attempt" in first["reason"], (
        first
    )


def test_a_bug_that_recurs_has_node_memory_saved_before_the_stop_for_a_person(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    """A bug that fails step 14 in every run, on every rank (AGPT_FAULT_BUG_AT): attempt 1 fails, the health sweep
    passes every host, the relaunch resumes from node memory (local step 12) and fails with the same signature: a
    stop for a person (repeat).  Node memory holds step 12, past the global checkpoint (10): the loop first
    relaunches a save before the stop (AGPT_CHECKPOINT_SAVE_AND_STOP through srun), the trainer saves step 12
    globally without a step, and the loop stops (4): the person's fix resumes at 12, not 10."""
    env = _env(cluster)
    run = tmp_path / "run"
    jobid = _submit(env, tmp_path, _job(tmp_path, run, "1", "", faults="export AGPT_FAULT_BUG_AT=14"))
    _wait(jobid, env)
    out = (tmp_path / "job.out").read_text()
    assert "verdict: 4" in out, out
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    attempts = [e for e in events if e.get("event") == "attempt"]
    assert [(a["class"], a["action"]) for a in attempts] == [("app", "relaunch"), ("app", "relaunch"),
                                                             ("crash", "stop")], attempts  # fmt: skip
    assert attempts[0]["passed"] and attempts[1]["held"] is True
    assert (
        attempts[1]["then"]["verdict"] == "repeat" and "save before a stop (repeat)" in attempts[1]["reason"]
    )
    save = (run / "attempts" / f"{jobid}.3.log").read_text()
    assert (
        "resumed from the local tier (step 12:" in save
        and "save before a stop: step 12 saved globally" in save
    )
    assert not STEP_RE.search(save)  # the failing step is not run again
    assert ckptdir.resume_step(run) == 12
    stop = [e for e in events if e.get("event") == "stop"][-1]
    assert (
        stop["verdict"] == "repeat"
        and "(the save before this stop saved; newest global checkpoint: step 12)" in stop["reason"]
    )
    report = subprocess.run(
        ["agpt", "failover", "report", str(run)], env=env, capture_output=True, text=True
    ).stdout
    assert (
        f"  save before a stop after {jobid}.2: repeat, once node memory's newest step is saved globally"
        in report
    )
    assert "resumes from: step 12" in report


def test_a_corrupt_local_shard_is_found_and_the_global_tier_used(
    cluster: dict[str, str], tmp_path: Path, reference: dict[int, str]
) -> None:
    shm = Path(cluster["AGPT_CLUSTER_DIR"]) / "local" / "n1"
    corrupted: list[Path] = []

    def corrupt(run: Path) -> None:  # every kept step of rank 0's own shard, one bit each
        for d in localtier.step_dirs(localtier.node_folder(shm, run, "n1")):
            shard = d[1] / localtier.shard_name(0)
            data = bytearray(shard.read_bytes())
            data[-1] ^= 1
            fd = os.open(shard, os.O_WRONLY)
            os.write(fd, bytes(data))
            os.close(fd)
            corrupted.append(shard)

    run, _, logs = _drill(cluster, tmp_path, ["n3"], at=14, backoff="8", between=corrupt)
    back = logs[-1]
    assert corrupted and re.search(
        r"local step \d+ cannot be restored: n1:\S+/rank-0\.shard: sha256 \S+ differs", back
    ), back
    assert f"resumed from {run}/ckpt/step-10 " in back, back
    assert _final(logs) == reference


def test_two_partners_lost_at_once_resume_from_the_global_tier(
    cluster: dict[str, str], tmp_path: Path, reference: dict[int, str]
) -> None:
    memory = Path(cluster["AGPT_CLUSTER_DIR"]) / "local"
    rank = 2  # n3's: the active nodes n1..n4 in rank order
    lost: list[str] = []

    def partner_lost(run: Path) -> None:  # the node holding n3's copy loses this run's memory too
        for node in sorted(p.name for p in memory.iterdir() if p.is_dir()):
            folder = localtier.node_folder(memory / node, run, node)
            if any(folder.rglob(localtier.shard_name(rank))):
                shutil.rmtree(folder)
                lost.append(node)

    # (a backoff of 8 s: the partner's memory is gone before the relaunch, which would hand the copy on)
    run, _, logs = _drill(cluster, tmp_path, ["n3"], at=14, backoff="8", between=partner_lost)
    back = logs[-1]
    assert len(lost) == 1 and lost != ["n3"], lost
    assert re.search(rf"local step \d+: rank {rank}'s shard is on no node of this launch", back), back
    assert f"resumed from {run}/ckpt/step-10 " in back, back
    print(f"n3 failed and its partner {lost[0]} lost its memory: resumed from the global step 10")
    assert _final(logs) == reference


def test_a_flipped_bit_names_its_host_which_the_loop_evicts_and_training_ends_as_unfaulted(
    cluster: dict[str, str], tmp_path: Path, reference: dict[int, str]
) -> None:
    env = _env(cluster)
    run = tmp_path / "run"
    config = CONFIG.replace(
        "master_dtype: fp32}", "master_dtype: fp32,\n        spike: {factor: 3, window: 2}}"
    )
    assert config != CONFIG
    faults = "export AGPT_TEST_FAULTS=1 AGPT_FAULT_BITFLIP=8:1:matmul"  # rank 1 (n2), step 8, once per run
    jobid = _submit(env, tmp_path, _job(tmp_path, run, "1", "", config=config, faults=faults))
    state = _wait(jobid, env)
    out = (tmp_path / "job.out").read_text()
    assert state == "COMPLETED" and "verdict: 0" in out, out
    logs = _attempt_logs(run, jobid)
    sdc = [ln for ln in logs[0].splitlines() if re.match(r"^(\d+: )?sdc: ", ln)]
    assert len(sdc) == 1 and re.search(r"sdc: n2 rank 1: step 8 \(spike\) recomputed", sdc[0]), logs[0]
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    first = next(e for e in events if e.get("event") == "attempt")
    assert first["class"] == "node" and first["bad_hosts"] == ["n2"], first
    bad = (run / "hosts/bad").read_text().splitlines()
    assert len(bad) == 1 and bad[0].startswith("n2\t") and "sdc: n2 rank 1" in bad[0], bad
    assert "n2" not in (run / "hosts/active").read_text().split()
    print(f"flip on n2 at step 8: {sdc[0].split('sdc: ', 1)[1][:120]}; evicted, {len(logs)} attempts")
    # the step with the flip redone from node memory: every loss as unfaulted
    assert _final(logs) == reference
