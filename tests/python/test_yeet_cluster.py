"""`srun agpt yeet` on the local Slurm cluster: MPI is detected from srun's environment, nodes are named as
Slurm names them, and a failed node is recorded for the failover loop."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import agpt_env
from yeet_util import make_data, tree

pytestmark = pytest.mark.cluster


def test_srun_stages_one_tree_per_node_and_records_a_failed_one(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    src = make_data(tmp_path / "data", big=2_500_000)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("n1\nn2\nn3\n")
    env = agpt_env(cluster) | {"AGPT_YEET_CHUNK_MB": "1"}
    argv = ["srun", "--mpi=pmi2", "-N", "3", "-n", "3", "agpt", "yeet", str(src), "--dest"]
    r = subprocess.run(
        [*argv, f"{tmp_path}/nodes/{{host}}/data"], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for node in ("n1", "n2", "n3"):
        assert tree(tmp_path / "nodes" / node / "data") == tree(src)
        assert f"host={node}" in r.stdout
    # one node's copy is damaged on arrival: the job continues on the other two and names it
    env["AGPT_YEET_FAULT"] = "corrupt:1:1"
    r = subprocess.run(
        [*argv, f"{tmp_path}/again/{{host}}/data", "--min-success", "2", "--hostfile", str(hostfile)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    failed = [line.split("host=")[1].split()[0] for line in r.stdout.splitlines() if "status=failed" in line]
    assert len(failed) == 1
    bad = failed[0]
    for node in sorted({"n1", "n2", "n3"} - {bad}):
        assert (tmp_path / "again" / node / "data" / ".yeet-failed-hosts").read_text() == f"{bad}\n"
    assert os.listdir(tmp_path / "again" / bad) == []  # no DEST, no DEST.tmp.*
