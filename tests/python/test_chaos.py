"""The chaos run on the real local Slurm cluster (tests/cluster/chaos): a seeded schedule of a rank kill -9, a
rank SIGSTOP, a node failure, a kill mid-checkpoint and a walltime hand-over, recovered to the unfaulted loss."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from train_util import srun_env

pytestmark = pytest.mark.cluster


@pytest.mark.timeout(720)
def test_chaos_schedule_recovers_to_the_unfaulted_loss(tmp_path: Path) -> None:
    # Its own 8-node cluster: a failed node stays down and a proven-bad host is excluded from later jobs,
    # which the session's shared 6-node cluster could not absorb.
    try:
        r = subprocess.run(
            [str(ROOT / "tests/cluster/chaos"), "--seed", "1", "--out", str(tmp_path)],
            env=srun_env(),
            capture_output=True,
            text=True,
            timeout=700,
        )
    finally:  # chaos takes its cluster down itself, unless it was killed
        subprocess.run(
            [str(ROOT / "tests/cluster/down"), "--dir", str(tmp_path / "cluster")], capture_output=True
        )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    fig = json.loads((tmp_path / "run" / "chaos.json").read_text())
    assert fig["failures"] == []
    assert fig["final_loss"] == fig["unfaulted_final_loss"]
    kinds = {row["fault"].split("@")[0] for row in fig["faults"] if row["fired"]}
    assert kinds == {"kill", "stop", "node", "ckpt", "walltime"}
    assert set(fig["hosts_bad_proven"]) <= set(fig["hosts_faulted"])
    assert 0 < fig["effective_ratio"] < 1
    assert "effective training time ratio" in r.stdout
