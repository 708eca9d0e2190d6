"""A rank slow in compute is named by its compute time, not its step time, and swapped at the next local checkpoint.

Three real gloo ranks as three nodes (n1-n3); n2's forward passes take 6 times as long (AGPT_FAULT_SLOW_HOST, a
sleep before its backward's collectives), so every rank's step takes n2's time.  Heartbeats every 0.2 s.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agpt.failover.classify import apply_heartbeats
from agpt.failover.decide import Classification
from agpt.heartbeat import reader as hbs
from conftest import ROOT
from train_util import MPIEXEC, TINY, agpt_cmd, train_env


def run_nodes(
    hosts: list[str], run: Path, *args: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """train_util.run_nodes with one rank per node that is its node's local rank 0 (PALS_LOCAL_RANKID), so that
    each node publishes its own heartbeat record."""
    cmd: list[str] = [str(MPIEXEC)]
    for i, host in enumerate(hosts):
        cmd += [":"] * bool(i) + ["-n", "1", "-env", "AGPT_HEARTBEAT_HOST", host, "-env", "PALS_LOCAL_RANKID", "0",
                                  "-env", "PALS_LOCAL_SIZE", "1"]  # fmt: skip
        cmd += [*agpt_cmd(), "train", "--config", str(TINY), "--run-dir", str(run), *args]
    return subprocess.run(cmd, env=train_env(env), capture_output=True, text=True, timeout=300)


SEED = int(os.environ.get("AGPT_TEST_STRAGGLER_SEED", "1234"))  # docs/recovery.md: the same test in 3 seeds


@pytest.mark.slow
def test_a_compute_slowed_host_is_named_within_3_windows_and_swapped_at_the_next_local_checkpoint(
    tmp_path: Path,
) -> None:
    shm, run = tmp_path / "shm", tmp_path / "run"
    shm.mkdir()
    env = {"SITE_LOCAL_CKPT_DIR": str(shm), "AGPT_ATTEMPT_ID": "77.1", "AGPT_FAULT_SLOW_HOST": "n2:6",
           "AGPT_HEARTBEAT_INTERVAL_S": "0.2", "AGPT_HEARTBEAT_TICK_S": "0.05", "FAILOVER_STRAGGLER": "swap",
           "FAILOVER_STRAGGLER_PCT": "100", "FAILOVER_STRAGGLER_WINDOWS": "3"}  # fmt: skip
    r = run_nodes(["n1", "n2", "n3"], run, "--steps", "200", "--ckpt-interval", "0", "--set",
                  "train.global_batch=6", "--set", "checkpoint.local_interval=7", "--set",
                  f"train.seed={SEED}", "--set", "train.canary_interval=0", env=env)  # fmt: skip
    assert r.returncode == 75, r.stdout + r.stderr
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if '"straggler"' in x]
    assert [(e["host"], e["action"], e["windows"]) for e in events] == [("n2", "swap", 3)], events
    assert events[0]["compute_s"] > 2 * events[0]["peers_median_s"]
    # The stop waits for the next local checkpoint (every 7 steps) and saves no global one.
    stop = [
        ln for ln in r.stdout.splitlines() if "straggler swap: stopping at the local checkpoint of step" in ln
    ]
    assert len(stop) == 1 and int(stop[0].rsplit(" ", 1)[1]) % 7 == 0, r.stdout
    assert not list((run / "ckpt").glob("step-*")), "a global checkpoint was written"
    # The loop's classifier names n2 from the swap request (rc 75), class node.
    res = Classification(cls="walltime", bad_hosts=[], evidence=[], last_step=None)
    apply_heartbeats(res, run / "heartbeat", ["n1", "n2", "n3"], "77.1", 75)
    assert (res.cls, res.bad_hosts) == ("node", ["n2"]) and res.evidence[0].startswith(
        "straggler: n2 computes"
    )
    # The node records carry compute apart from the wait: the peers waited for n2, n2 computed.
    recs, _ = hbs.read_records(run / "heartbeat", None, "77.1")
    compute = {h: rec["ranks"][0]["compute_s"] for h, rec in recs.items()}
    assert compute["n2"] > 2 * max(compute["n1"], compute["n3"]), recs
    assert all(rec["ranks"][0]["wait_s"] is not None for rec in recs.values())


@pytest.mark.slow
def test_bench_straggler_runs_and_prints_who_it_named_and_the_ratio() -> None:
    agpt = " ".join(shlex.quote(w) for w in agpt_cmd())
    out = subprocess.run([sys.executable, str(ROOT / "tests/bench/bench_straggler.py"), "--nodes", "3",
                          "--ranks-per-node", "1", "--steps", "2", "--interval", "0.1", "--agpt", agpt],
                         env=train_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all healthy: named nobody" in out.stdout and "n2's compute to its peers' median" in out.stdout
