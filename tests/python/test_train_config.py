"""Trainer config: validation names the dotted key, precedence defaults < YAML < env < --set < flags,
launcher detection; plus the CLI's exit 2 on bad input (no torch start-up needed for these)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agpt import rundir
from agpt.errors import ConfigError
from agpt.train import dist
from agpt.train.config import load_config
from conftest import ROOT, agpt_env

TINY = ROOT / "jobs" / "configs" / "tiny.yaml"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_every_committed_config_loads() -> None:
    for name in ("tiny", "smoke", "2b", "20b", "80b"):
        cfg = load_config(ROOT / "jobs" / "configs" / f"{name}.yaml", environ={})
        assert cfg.train.master_dtype == "fp32"
    big = load_config(ROOT / "jobs/configs/20b.yaml", environ={}).model.num_params()
    assert 15e9 < big < 25e9


def test_unknown_key_names_the_dotted_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'optim\.lrr'"):
        load_config(write(tmp_path, "optim:\n  lrr: 1\n"), environ={})
    with pytest.raises(ConfigError, match=r"unknown key 'optimizer'"):
        load_config(write(tmp_path, "optimizer: {}\n"), environ={})


def test_job_section_is_ignored(tmp_path: Path) -> None:
    cfg = load_config(
        write(tmp_path, "job:\n  nodes: 4\n  anything: [1, 2]\ntrain:\n  steps: 7\n"), environ={}
    )
    assert cfg.train.steps == 7


def test_impossible_shapes_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model\.n_heads.*model\.dim"):
        load_config(write(tmp_path, "model:\n  dim: 100\n  n_heads: 8\n"), environ={})
    with pytest.raises(ConfigError, match=r"model\.n_kv_heads"):
        load_config(write(tmp_path, "model:\n  dim: 64\n  n_heads: 4\n  n_kv_heads: 3\n"), environ={})
    with pytest.raises(ConfigError, match=r"train\.steps: expected int"):
        load_config(write(tmp_path, "train:\n  steps: many\n"), environ={})


def test_precedence_yaml_env_set_flags() -> None:
    env = {"AGPT_TRAIN_STEPS": "11", "AGPT_OPTIM_LR": "1e-3", "AGPT_RUN_DIR": "/r", "AGPT_HOME": "/x"}
    cfg = load_config(TINY, environ=env)
    assert (cfg.train.steps, cfg.optim.lr, cfg.train.run_dir) == (11, 1e-3, "/r")
    cfg = load_config(TINY, ["train.steps=12", "optim.lr=2e-3", "checkpoint.async_save=false"], environ=env)
    assert (cfg.train.steps, cfg.optim.lr, cfg.checkpoint.async_save) == (12, 2e-3, False)
    cfg = load_config(
        TINY, ["train.steps=12"], environ=env, flags={"train.steps": 13, "checkpoint.interval": None}
    )
    assert cfg.train.steps == 13 and cfg.checkpoint.interval == 20
    with pytest.raises(ConfigError, match="AGPT_TRAIN_STEPZ"):
        load_config(TINY, environ={"AGPT_TRAIN_STEPZ": "1"})
    with pytest.raises(ConfigError, match=r"--set.*model\.nope"):
        load_config(TINY, ["model.nope=1"], environ={})


@pytest.mark.parametrize(
    ("env", "rank", "world"),
    [
        ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALNRANKS": "2"}, 1, 2),
        ({"PALS_RANKID": "3", "PMI_SIZE": "8", "PALS_LOCAL_RANKID": "3", "PALS_LOCAL_SIZE": "4"}, 3, 8),
        ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}, 2, 4),
        ({"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_NNODES": "1", "SLURM_JOB_ID": "9"}, 5, 6),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h0", "MASTER_PORT": "1234"}, 0, 2),
        ({}, 0, 1),
    ],
)
def test_launcher_detection(env: dict[str, str], rank: int, world: int) -> None:
    info = dist.detect(env)
    assert (info.rank, info.world_size) == (rank, world)
    assert 1024 < info.master_port < 65536
    if "MASTER_PORT" in env:
        assert (info.master_addr, info.master_port) == ("h0", 1234)


@pytest.mark.parametrize("row", rundir.LAUNCHERS, ids=lambda x: f"{x.name}-{x.size}")
def test_every_reader_of_a_launchers_rank_reads_one_table(
    row: rundir.Launcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer, the data tools and yeet read this process' rank from agpt.rundir.LAUNCHERS alone."""
    from agpt.data import dist as data_dist
    from agpt.yeet.mpi import under_launcher

    env = {row.rank: "3", row.size: "8", row.local_rank: "1", "SLURM_STEP_ID": "0"}
    if row.local_size:
        env[row.local_size] = "4"
    info = dist.detect(env)
    assert (info.rank, info.world_size, info.local_rank) == (3, 8, 1)
    assert info.local_world_size == (4 if row.local_size else 8)  # srun: all local when no host list says
    assert dist.env_rank(env) == 3
    assert under_launcher(env) is (row.name != "torchrun")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    mpi = row.name not in ("torchrun", "srun")
    assert (data_dist.under_mpi(), data_dist.launcher_rank()) == ((True, 3) if mpi else (False, 0))


def test_rendezvous_from_host_list(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("nid001\nnid002\n")
    env = {"PALS_RANKID": "5", "PMI_SIZE": "8", "PALS_LOCAL_SIZE": "4", "FAILOVER_HOSTFILE": str(hosts)}
    assert dist.detect(env).master_addr == "nid001"
    # No launcher variable says how many ranks share a node: two hosts in the list mean multi-node.
    info = dist.detect({"PMI_RANK": "3", "PMI_SIZE": "4", "PBS_NODEFILE": str(hosts)})
    assert (info.master_addr, info.local_rank) == ("nid001", 3)
    assert dist.detect({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALNRANKS": "2"}).master_addr == "127.0.0.1"
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_NNODES": "2", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "x1000c0s[3-4,7]b0n0,y1"}  # fmt: skip
    info = dist.detect(env)
    assert info.master_addr == "x1000c0s3b0n0"
    assert info.master_port == dist.detect(dict(env, SLURM_PROCID="7")).master_port


def test_the_derived_port_stays_below_the_kernels_ephemeral_range() -> None:
    # An outgoing connection's local port comes from 32768-60999 (Linux's default ip_local_port_range): a derived
    # MASTER_PORT there could be held by one on rank 0's host, and rank 0 would fail with EADDRINUSE.
    low, high = rundir.PORT_RANGE
    assert (low, high) == (20000, 32767)
    slurm = {"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "n[1-2]"}
    ports = {
        dist.detect(dict(slurm, SLURM_JOB_ID=str(j), SLURM_STEP_ID="0")).master_port for j in range(3000)
    }
    ports |= {dist.detect({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALNRANKS": "2", "FAILOVER_ATTEMPT": str(a)})
              .master_port for a in range(100)}  # fmt: skip
    assert all(low <= p <= high for p in ports)
    assert len(ports) > 2500  # spread over the range: two jobs sharing a master host seldom meet
    # Each attempt of the failover loop derives another port: a relaunch does not meet what held the last one.
    job = dict(slurm, SLURM_JOB_ID="77", SLURM_STEP_ID="0")
    assert (
        dist.detect(dict(job, FAILOVER_ATTEMPT="1")).master_port
        != dist.detect(dict(job, FAILOVER_ATTEMPT="2")).master_port
    )


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "bin/agpt"), "train", "--run-dir", str(tmp_path / "run"), *args],
        env=agpt_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    r = _cli(tmp_path, "--config", str(write(tmp_path, "model:\n  dimm: 3\n")))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"agpt: error: {tmp_path / 'c.yaml'}: unknown key 'model.dimm'"]
    r = _cli(tmp_path, "--config", str(TINY), "--set", "model.n_heads=3")
    assert r.returncode == 2 and "model.n_heads" in r.stderr
    r = _cli(tmp_path, "--config", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "missing.yaml" in r.stderr
    (tmp_path / "file").write_text("")
    r = _cli(tmp_path, "--config", str(TINY), "--run-dir", str(tmp_path / "file" / "run"))
    assert r.returncode == 2 and "--run-dir" in r.stderr


def test_lr_find_analysis_picks_steepest_descent_before_the_minimum() -> None:
    from agpt.train.lrfind import analyse, blew_up

    lrs = [1e-4 * 10 ** (i / 4) for i in range(13)]
    losses = [6.0, 6.0, 5.9, 5.6, 4.8, 4.0, 3.7, 3.6, 3.9, 5.0, 4.0, 6.5, 9.0]
    assert not blew_up(losses[:8])
    assert blew_up(losses) and not blew_up(losses[:10])
    sweep = analyse(lrs, losses, blowup_lr=lrs[-1])
    assert lrs[3] <= sweep.steepest_lr <= lrs[6]  # on the way down, not the dip after the climb
    assert sweep.suggested_lr == pytest.approx(lrs[-1] / 10)
