"""The `cluster` fixture gives a real local Slurm cluster: jobs run on its six nodes from Python tests too."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = 60) -> str:
    """Run a Slurm client command against the test cluster; its stdout, or the failure with stderr."""
    proc = subprocess.run(
        cmd, env={**os.environ, **env}, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}: {proc.stderr}"
    return proc.stdout


def _wait_done(jobid: str, env: dict[str, str], cwd: Path, timeout: float = 60) -> str:
    """Poll the job's state until it ends (sbatch --wait polls at 2, 4, 8 s: too slow for tests)."""
    deadline = time.monotonic() + timeout
    while True:
        out = _run(["scontrol", "show", "job", jobid], env, cwd)
        state = re.search(r"JobState=(\S+)", out)
        if state and state.group(1) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state.group(1)
        assert time.monotonic() < deadline, f"job {jobid} still {state and state.group(1)} after {timeout} s"
        time.sleep(0.2)


def test_fixture_environment(cluster: dict[str, str]) -> None:
    assert cluster["AGPT_CLUSTER_NODES"].split() == [f"n{i}" for i in range(1, 7)]
    assert Path(cluster["SLURM_CONF"]).is_file()
    assert Path(cluster["AGPT_CLUSTER_DIR"], "pids").read_text().count("\n") == 7


def test_srun_spans_six_nodes(cluster: dict[str, str], tmp_path: Path) -> None:
    out = _run(["srun", "-N", "6", "bash", "-c", 'echo "$SLURMD_NODENAME"'], cluster, tmp_path)
    assert sorted(out.split()) == [f"n{i}" for i in range(1, 7)]


def test_sbatch_wait_and_pbs_env(cluster: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH -N 2\n"
        'echo "pbs=$PBS_JOBID slurm=$SLURM_JOB_ID"\n'
        "srun bash -c 'echo \"node $SLURMD_NODENAME\"'\n"
    )
    jobid = _run(["sbatch", "--parsable", "-o", "out.txt", str(script)], cluster, tmp_path).strip()
    assert _wait_done(jobid, cluster, tmp_path) == "COMPLETED"
    lines = (tmp_path / "out.txt").read_text().splitlines()
    assert f"pbs={jobid} slurm={jobid}" in lines
    assert sorted(line for line in lines if line.startswith("node ")) == ["node n1", "node n2"]
