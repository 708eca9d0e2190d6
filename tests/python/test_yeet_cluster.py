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
# Slurm's pmi2 plugin can misread MPICH's PMI2 `put` of a long value on a loaded node ("slurmstepd: error:
# mpi/pmi2: value not properly terminated in client request", as in
# https://github.com/ufs-community/ufs-weather-model/issues/1732): the ranks' address exchange is garbled and
# MPI_Init fails ("Destination is unreachable") or waits for good.  A launch that ends so is started once more;
# nothing of agpt runs before MPI_Init.
PMI2_MISREAD = "mpi/pmi2: value not properly terminated in client request"


def _srun(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    for attempt in (1, 2):
        try:
            r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=90)
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else str(e.stderr or "")
            if attempt == 2 or PMI2_MISREAD not in err:
                raise
            continue
        if r.returncode == 0 or attempt == 2 or PMI2_MISREAD not in r.stderr:
            return r
    raise AssertionError("unreachable")


def test_srun_stages_one_tree_per_node_and_records_a_failed_one(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    src = make_data(tmp_path / "data", big=2_500_000)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("n1\nn2\nn3\n")
    env = agpt_env(cluster) | {"AGPT_YEET_CHUNK_MB": "1"}
    # (on n1-n3, which the host file names, whichever nodes an earlier test's job still holds)
    argv = [
        "srun",
        "--mpi=pmi2",
        "--nodelist",
        "n1,n2,n3",
        "-N",
        "3",
        "-n",
        "3",
        "agpt",
        "yeet",
        str(src),
        "--dest",
    ]
    r = _srun([*argv, f"{tmp_path}/nodes/{{host}}/data"], env)
    assert r.returncode == 0, r.stdout + r.stderr
    for node in ("n1", "n2", "n3"):
        assert tree(tmp_path / "nodes" / node / "data") == tree(src)
        assert f"host={node}" in r.stdout
    # one node's copy is damaged on arrival: the job continues on the other two and names it
    env["AGPT_YEET_FAULT"] = "corrupt:1:1"
    r = _srun(
        [*argv, f"{tmp_path}/again/{{host}}/data", "--min-success", "2", "--hostfile", str(hostfile)], env
    )
    assert r.returncode == 0, r.stdout + r.stderr
    failed = [line.split("host=")[1].split()[0] for line in r.stdout.splitlines() if "status=failed" in line]
    assert len(failed) == 1
    bad = failed[0]
    for node in sorted({"n1", "n2", "n3"} - {bad}):
        assert (tmp_path / "again" / node / "data" / ".yeet-failed-hosts").read_text() == f"{bad}\n"
    assert os.listdir(tmp_path / "again" / bad) == []  # no DEST, no DEST.tmp.*
