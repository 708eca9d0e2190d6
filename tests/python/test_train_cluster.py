"""`agpt train` under the real srun of the local Slurm cluster: ranks from SLURM_PROCID, a rendezvous
port every rank derives alone from the job step, across two nodes (each with its own slurmd)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from train_util import AGPT, TINY, losses, srun_env

pytestmark = pytest.mark.cluster


def _srun_train(
    env: dict[str, str], cwd: Path, srun: list[str], run: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """`srun SRUN agpt train` of the tiny config into RUN."""
    cmd = ["srun", *srun, str(AGPT), "train", "--config", str(TINY), "--run-dir", str(run), *args]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_srun_two_nodes_trains_and_checkpoints(cluster: dict[str, str], tmp_path: Path) -> None:
    run = tmp_path / "run"
    # The test nodes n1..n6 are all localhost but their names do not resolve: give the address only.
    env = srun_env({**cluster, "MASTER_ADDR": "127.0.0.1"})
    r = _srun_train(env, tmp_path, ["-N", "2", "-n", "2"], run, "--steps", "3", "--ckpt-interval", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(losses(r.stdout)) == [1, 2, 3]
    assert (run / "ckpt/step-2/.complete").exists() and (run / "ckpt/step-3/.complete").exists()


def test_srun_tensor_parallel_groups_stay_inside_a_node(cluster: dict[str, str], tmp_path: Path) -> None:
    """srun places ranks in blocks per node: tp 2 over 2 ranks per node trains; 1 rank per node is refused.

    (Without --ntasks-per-node this cluster places 4 tasks 3 + 1, which the same check refuses.)"""
    env = srun_env({**cluster, "MASTER_ADDR": "127.0.0.1"})

    def srun(tasks: int, run: str) -> subprocess.CompletedProcess[str]:
        return _srun_train(env, tmp_path, ["-N", "2", f"--ntasks-per-node={tasks // 2}"], tmp_path / run,
                           "--steps", "2", "--ckpt-interval", "0", "--set", "parallel.tp=2")  # fmt: skip

    r = srun(4, "ok")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "as dp 2 x tp 2" in r.stdout and sorted(losses(r.stdout)) == [1, 2]
    r = srun(2, "across")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "parallel.tp: 2 does not divide the 1 ranks per node" in r.stderr
