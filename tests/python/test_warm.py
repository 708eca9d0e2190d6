"""Warm ranks (agpt.warm) without a cluster: one real parked process (torch imported) on a pretend node, and the
claims a launcher would start.  Each refusal is said with its reason and the command runs as without warm ranks;
an accepted claim trains as the rank, in the parked process, and the recovery clock says it was warm.  The drill
on the local Slurm cluster is tests/python/test_warm_cluster.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agpt import nodelocal
from agpt.warm import common
from conftest import ROOT, agpt_env
from train_util import MPIEXEC, TINY

HOST = "wh1"


PALS_HOST = "wh3"  # a second pretend node, whose parked process a claim started as PALS starts ranks takes


def _park(run: Path, tmp: Path, host: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    env = agpt_env({"AGPT_RUN_DIR": str(run), "AGPT_HEARTBEAT_HOST": host, "SITE_LOCAL_CKPT_DIR": str(tmp),
                    "OMP_NUM_THREADS": "1", "AGPT_TEST_ZYGOTE": "0"})  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "agpt.warm.parked", "--slot", "0", "--", "agpt", "train",
                             "--config", str(TINY)], env=env, stderr=subprocess.PIPE, text=True)  # fmt: skip
    return proc, env


def _listening(proc: subprocess.Popen[str], addr: str, deadline: float) -> None:
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(addr)  # a connection it then refuses as unreadable: it keeps waiting
            s.close()
            return
        except OSError:
            s.close()
            assert proc.poll() is None and time.monotonic() < deadline, "the parked process never listened"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def parked(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """(tmp, run, env of HOST, env of PALS_HOST): one parked process on each pretend node, started together."""
    tmp = tmp_path_factory.mktemp("warm")
    run = tmp / "run"
    run.mkdir()
    procs = {h: _park(run, tmp, h) for h in (HOST, PALS_HOST)}
    deadline = time.monotonic() + 180
    for h, (proc, _) in procs.items():
        _listening(proc, common.address(str(run), h, 0), deadline)
    yield tmp, run, procs[HOST][1], procs[PALS_HOST][1]
    for proc, _ in procs.values():
        proc.kill()
        proc.wait()


def claim(env: dict[str, str], *cmd: str, python: str | None = None, rank: str = "0") -> subprocess.CompletedProcess[str]:  # fmt: skip
    rank_env = {"RANK": rank, "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29611", "AGPT_ATTEMPT_ID": "j.1"}  # fmt: skip
    return subprocess.run([python or sys.executable, "-m", "agpt.warm", "claim", "--", *cmd],
                          env={**env, **rank_env}, capture_output=True, text=True, timeout=300)  # fmt: skip


def test_no_parked_process_is_the_normal_launch_said_once(parked) -> None:  # type: ignore[no-untyped-def]
    _, _, env, _ = parked
    r = claim({**env, "AGPT_HEARTBEAT_HOST": "wh2"}, "sh", "-c", "echo cold $RANK")
    assert r.returncode == 0 and r.stdout == "cold 0\n"
    assert r.stderr == "agpt warm: no parked process for slot 0 on wh2: normal launch\n"


def test_a_command_other_than_agpt_train_is_refused_and_run_as_it_is(parked) -> None:  # type: ignore[no-untyped-def]
    _, _, env, _ = parked
    r = claim(env, "sh", "-c", "echo cold")
    assert r.stdout == "cold\n"
    assert "refused: only `agpt train` runs warm" in r.stderr and "normal launch" in r.stderr


def test_another_venv_is_refused_with_both_digests(parked, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, _, env, _ = parked
    other = "/usr/bin/python3"
    if not Path(other).exists() or os.path.realpath(other) == os.path.realpath(sys.executable):
        pytest.skip("no second interpreter here")
    r = claim(env, "agpt", "train", "--config", str(tmp_path / "missing.yaml"), python=other)
    assert "refused: venv digest" in r.stderr and "differs from the parked process's" in r.stderr
    assert r.returncode == 2 and "missing.yaml" in r.stderr  # the normal launch ran, and said its own error


def test_a_rank_already_held_on_the_node_is_refused(parked) -> None:  # type: ignore[no-untyped-def]
    tmp, run, env, _ = parked
    d = nodelocal.private_dir(nodelocal.folder(tmp, "warm", str(run), HOST))
    (d / "held.j.1.7").write_text(str(os.getpid()))  # rank 7 of attempt j.1, held by a live process
    r = claim(env, "agpt", "train", "--config", str(tmp / "missing.yaml"), rank="7")
    assert f"refused: rank 7 of attempt j.1 is already held on {HOST} by pid {os.getpid()}" in r.stderr
    assert r.returncode == 2


def test_an_accepted_claim_under_hydra_trains_as_the_rank_and_the_clock_says_warm(parked) -> None:  # type: ignore[no-untyped-def]
    _, run, env, _ = parked
    # The claim as hydra's mpiexec starts it: its rank and local rank are hydra's (PMI_RANK, MPI_LOCALRANKID).
    env = {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29612", "AGPT_ATTEMPT_ID": "j.2"}
    r = subprocess.run([str(MPIEXEC), "-n", "1", sys.executable, "-m", "agpt.warm", "claim", "--", "agpt", "train",
                        "--config", str(TINY), "--run-dir", str(run), "--steps", "2"], env=env, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "step=2 " in r.stdout and "normal launch" not in r.stderr
    clock = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if '"clock"' in x][-1]
    assert clock["warm"] is True and clock["started"] <= clock["imported"] <= clock["first_step"]
    # A parked process serves one rank: the next claim of the slot finds none (here no agent parks another).
    r = claim(env, "sh", "-c", "echo cold")
    assert r.stdout == "cold\n" and "no parked process for slot 0" in r.stderr


def test_an_accepted_claim_under_pals_trains_as_the_rank(parked) -> None:  # type: ignore[no-untyped-def]
    _, run, _, env = parked  # the run directory the hydra claim trained to step 2: this one goes on to 4
    # PALS' mpiexec (Aurora, Polaris) gives each rank PALS_RANKID, PALS_LOCAL_RANKID, PALS_LOCAL_SIZE and, with Cray
    # MPICH, PMI_SIZE (https://docs.alcf.anl.gov/aurora/running-jobs-aurora/): no RANK, no LOCAL_RANK.
    pals = {"PALS_RANKID": "0", "PALS_LOCAL_RANKID": "0", "PALS_LOCAL_SIZE": "1", "PMI_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29613", "AGPT_ATTEMPT_ID": "j.3"}  # fmt: skip
    env = {
        k: v
        for k, v in {**env, **pals}.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    }
    r = subprocess.run([sys.executable, "-m", "agpt.warm", "claim", "--", "agpt", "train", "--config", str(TINY),
                        "--run-dir", str(run), "--steps", "4"], env=env, capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "step=4 " in r.stdout and "normal launch" not in r.stderr and "refused" not in r.stderr
    clock = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if '"clock"' in x][-1]
    assert clock["warm"] is True


def test_agpt_check_says_how_a_site_keeps_warm_ranks_or_why_it_cannot() -> None:
    from agpt import check

    assert check.warm_row("srun", "none", "").startswith("FAILOVER_WARM='srun --overlap --no-kill")
    assert "cannot keep parked processes: ranks run in an image (SITE_CONTAINER=apptainer)" in check.warm_row(
        "pals", "apptainer", "img.sif"
    )
    out = subprocess.run([str(ROOT / "bin" / "agpt"), "check", "--site", "aurora", "--no-data",
                          str(ROOT / "jobs" / "configs" / "20b.yaml")], env=agpt_env(), capture_output=True, text=True)  # fmt: skip
    assert "warm ranks  FAILOVER_WARM='mpiexec -n {nhosts} --ppn 1 --hostfile {hostfile}'" in out.stdout


def test_the_loop_runs_without_warm_ranks_where_ranks_run_in_an_image(tmp_path: Path) -> None:
    script = f"""source {ROOT}/lib/failover.sh
AGPT_RUN_DIR={tmp_path} FAILOVER_WARM='srun --overlap -N {{nhosts}}' SITE_CONTAINER=apptainer
AGPT_CONTAINER_IMAGE=img.sif
_failover_warm_start "" srun {{warm}} agpt train
_failover_subst argv srun {{warm}} agpt train
echo "pid=[$_failover_warm_pid] argv=[${{argv[*]}}]"
"""
    r = subprocess.run(["bash", "-c", script], env=agpt_env(), capture_output=True, text=True)
    assert "warm ranks off: ranks run in an image (SITE_CONTAINER=apptainer)" in r.stderr
    assert r.stdout == "pid=[] argv=[srun agpt train]\n"  # {warm} dropped: the normal launch


def test_an_agent_whose_parked_processes_cannot_import_gives_the_slot_up_and_says_why(tmp_path: Path) -> None:
    # The system interpreter has no torch: each parked process dies importing it, before it is ready.
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no system interpreter here")
    env = agpt_env({"AGPT_RUN_DIR": str(tmp_path), "AGPT_HEARTBEAT_HOST": "wh3", "PYTHONNOUSERSITE": "1"})
    probe = subprocess.run(["/usr/bin/python3", "-c", "import torch"], env=env, capture_output=True)
    if probe.returncode == 0:
        pytest.skip("the system interpreter has torch")
    agent = subprocess.Popen(["/usr/bin/python3", "-m", "agpt.warm", "serve", "--slots", "1", "--", "agpt", "train",
                              "--config", str(TINY)], env=env, stderr=subprocess.PIPE, text=True)  # fmt: skip
    lines: list[str] = []
    try:
        assert agent.stderr is not None
        for line in agent.stderr:
            lines.append(line)
            if "no warm rank in this slot" in line:
                break
    finally:
        agent.terminate()
        agent.wait(timeout=60)
    assert any("slot 0 on wh3: the parked process exited 3 times before it was ready" in x for x in lines), (
        lines
    )
