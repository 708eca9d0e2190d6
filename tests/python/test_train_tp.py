"""Tensor parallelism on a (dp, tp) mesh: same losses as pure data parallel, bit-exact repeats, checkpoints
that resume at another tp degree and dp size, metrics.jsonl and its plot panels, kill -9 and exact resume.

Real gloo ranks under the real mpiexec, the tiny config (4 heads, 2 KV heads, FFN 172 split 2 ways).
One 30-step dp 2 × tp 2 run is shared by most assertions (module fixture).
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from train_util import (
    AGPT,
    LOSS_RTOL,
    MPIEXEC,
    TINY,
    copy_ckpt,
    kill_9_mid_save,
    losses,
    run_train,
    same_steps,
    script_cmd,
    smoke,
    train_env,
    trained,
    two_more_steps,
)

pytestmark = pytest.mark.slow

TP2 = ("--set", "parallel.tp=2")


@pytest.fixture(scope="module")
def tp2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return trained(tmp_path_factory, "tp2", 4, "--steps", "30", "--ckpt-interval", "10", "--set", "checkpoint.keep=3",
                   *TP2, env={"SITE_PEAK_TFLOPS": "0.5"})  # fmt: skip


@pytest.fixture(scope="module")
def dp4(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return trained(tmp_path_factory, "dp4", 4, "--steps", "30", "--ckpt-interval", "20",
                   "--set", "checkpoint.save_final=false")  # fmt: skip


def test_dp2_tp2_matches_dp4_on_the_same_global_batch(tp2: tuple[Path, str], dp4: tuple[Path, str]) -> None:
    _, out = tp2
    assert "as dp 2 x tp 2" in out and "global batch 8 = 2 dp ranks x micro 2 x accum 2" in out
    got, want = losses(out), losses(dp4[1])
    assert sorted(got) == sorted(want) == list(range(1, 31))
    for s in range(1, 31):
        assert got[s] == pytest.approx(want[s], rel=LOSS_RTOL), f"step {s}"
    # The mean over the global batch, counted once per tensor-parallel group: near ln(vocab) at step 1,
    # not divided by the group size.
    assert abs(got[1] - math.log(512)) < 0.1
    assert got[30] < got[1] - 0.5


def test_sequence_parallel_matches_too(tp2: tuple[Path, str], tmp_path: Path) -> None:
    _, out = tp2
    r = run_train(
        4, tmp_path / "sp", "--steps", "5", "--ckpt-interval", "0", "--set", "checkpoint.save_final=false",
        "--set", "optim.decay_steps=30", *TP2, "--set", "parallel.sequence_parallel=true",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(sequence parallel)" in r.stdout
    got, want = losses(r.stdout), losses(out)
    for s in range(1, 6):
        assert got[s] == pytest.approx(want[s], rel=LOSS_RTOL), f"step {s}"


def _smoke(baseline: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One tensor-parallel group of 2 ranks (dp 1): the tp collectives are what could vary run to run.  A second
    dp group adds only the gradient all-reduce, which the 2-rank exact resumes (test_train_resume) and the kill -9
    at dp 2 x tp 2 below already hold bit for bit; 4 ranks took 40% more CPU for this test.  A global batch of 6
    micro batches, not smoke.yaml's 24 (sized for 12 or 4 ranks a node): each step still accumulates several
    micro batches through the same collectives, for a quarter of the CPU (45 -> about 12 s)."""
    return smoke(baseline, *TP2, "--set", "train.global_batch=6", *args, ranks=2, steps=8)


def test_smoke_at_tp2_is_bit_identical_run_to_run(tmp_path: Path) -> None:
    base = tmp_path / "tp2.txt"
    r = _smoke(base, "--record")
    assert r.returncode == 0, r.stdout + r.stderr
    assert len([ln for ln in base.read_text().splitlines() if ln.startswith("step=")]) == 8
    r = _smoke(base)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS: 8 steps equal" in r.stdout


@pytest.mark.parametrize(("source", "ranks", "tp"), [("tp2", 2, 1), ("tp2", 4, 1), ("dp4", 4, 2)])
def test_checkpoint_resumes_at_another_layout_with_identical_parameters(
    tp2: tuple[Path, str], dp4: tuple[Path, str], tmp_path: Path, source: str, ranks: int, tp: int
) -> None:
    """Saved by dp 2 × tp 2, loaded by dp 2 or dp 4 at tp 1; saved by dp 4 × tp 1, loaded by dp 2 × tp 2:
    every gathered parameter equals the saved one."""
    src = (tp2 if source == "tp2" else dp4)[0]
    run = copy_ckpt(src, tmp_path / "run", 20)
    # Each rank tp_gather.py, forked from the trainer tests' server (a plain start imports torch: 3 CPU-s a rank).
    r = subprocess.run(
        [str(MPIEXEC), "-n", str(ranks), *script_cmd("tp_gather"), str(TINY), str(run), f"parallel.tp={tp}"],
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"layout dp={ranks // tp} tp={tp} same_names=True differ=[]" in r.stdout, r.stdout + r.stderr


def test_training_continues_after_resuming_at_another_layout(tp2: tuple[Path, str], tmp_path: Path) -> None:
    src, ref = tp2
    r = two_more_steps(src, tmp_path / "run", 4, 30, LOSS_RTOL, ref)
    assert "saved by 4 ranks, now 4" in r.stdout and "x tp" not in r.stdout


def test_kill_9_mid_async_save_at_tp2_then_exact_resume(tp2: tuple[Path, str], tmp_path: Path) -> None:
    """Killed at step 12 while the save of step 10 is written (slowed), resumed from step 5: steps 6-14 equal the
    30-step reference's bit for bit (its learning-rate schedule: optim.decay_steps=30).  14 steps, not 30: each
    step on these 4 ranks is about 0.5 CPU-s, and the steps after 14 would resume nothing new."""
    _, ref = tp2
    run = tmp_path / "run"
    log = tmp_path / "first.log"
    args = ["--steps", "14", "--ckpt-interval", "5", "--set", "optim.decay_steps=30", *TP2]
    kill_9_mid_save(4, run, log, args, saved=5, at_step=12, env={"AGPT_TEST_CKPT_WRITE_DELAY": "10:120"})
    assert not (run / "ckpt/step-10/.complete").exists()
    r = run_train(4, run, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "step-5 (step 5" in r.stdout
    same_steps(r.stdout, ref, 6, 14)


def test_metrics_jsonl_has_a_line_per_logged_step_and_plots(tp2: tuple[Path, str], tmp_path: Path) -> None:
    run, out = tp2
    lines = (run / "metrics.jsonl").read_text().splitlines()
    recs = [json.loads(ln) for ln in lines]
    assert [r["step"] for r in recs] == list(range(1, 31))
    want_loss = losses(out)
    for r in recs:
        assert r["tokens"] == r["step"] * 8 * 64
        assert float(f"{r['loss']:.9g}") == want_loss[r["step"]]  # the stdout line, at full precision
        assert r["devices"] == 4 and r["steps"] == 1
        assert r["tokens_per_s_per_device"] > 0 and 0 < r["mfu"] < 1
        assert r["peak_mem_bytes"] > 0 and r["grad_norm"] > 0 and r["lr"] > 0
        assert r["compute_s"] > 0 and r["wait_s"] >= 0 and r["ckpt_stall_s"] >= 0
    # The saves after steps 10, 20 and 30 stall the training thread; their lines say so, no other does.
    stalled = {r["step"] for r in recs if r["ckpt_stall_s"] > 0}
    assert stalled == {10, 20, 30}, stalled
    png = tmp_path / "run.png"
    r = subprocess.run(
        [str(AGPT), "plot", str(run), "-o", str(png)], env=train_env(), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("ranks", "sets", "message"),
    [
        (2, ["parallel.tp=3"], "parallel.tp: 3 does not divide model.n_heads 4"),
        (1, ["parallel.tp=4"], "parallel.tp: 4 does not divide model.n_kv_heads 2"),
        (
            1,
            ["parallel.tp=2", "model.ffn_dim=171"],
            "parallel.tp: 2 does not divide the FFN width (model.ffn_dim) 171",
        ),
        (3, ["parallel.tp=2"], "parallel.tp: 2 does not divide the world size 3"),
    ],
)
def test_bad_tp_exits_2_naming_the_key_and_numbers(
    tmp_path: Path, ranks: int, sets: list[str], message: str
) -> None:
    args = [a for s in sets for a in ("--set", s)]
    r = run_train(ranks, tmp_path / "run", "--steps", "1", *args, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("agpt: error:")]
    assert len(errors) == 1 and message in errors[0], r.stderr


def test_tp_groups_must_fit_in_a_node() -> None:
    from agpt.errors import ConfigError
    from agpt.train.config import Config
    from agpt.train.parallel import layout

    cfg = Config()
    cfg.parallel.tp = 4
    cfg.train.global_batch = 24
    lay = layout(cfg, rank=5, world=24, ranks_per_node=12)
    assert (lay.dp, lay.tp, lay.dp_rank, lay.tp_rank) == (6, 4, 1, 1)
    with pytest.raises(ConfigError, match=r"parallel.tp: 4 does not divide the 6 ranks per node"):
        layout(cfg, rank=0, world=24, ranks_per_node=6)


def test_80b_config_uses_tensor_parallelism_on_aurora() -> None:
    import yaml

    from agpt.train.config import load_config

    path = ROOT / "jobs/configs/80b.yaml"
    cfg = load_config(path, environ={})
    assert cfg.parallel.tp == 4
    nodes = int(yaml.safe_load(path.read_text())["job"]["nodes"])
    ranks = 12 * nodes  # Aurora: 12 GPU tiles per node, one rank each
    dp = ranks // cfg.parallel.tp
    assert cfg.train.global_batch % (dp * cfg.train.micro_batch) == 0
    cfg.check_layout(ranks, 12)  # what `agpt check` asks before submitting: no error
    assert 372 <= cfg.train.global_batch <= 2976  # the range the 80B runs held NaN-free


def test_compile_trains_the_same_curve(tp2: tuple[Path, str], tmp_path: Path) -> None:
    """train.compile compiles each block (slow to start on CPU: one test, one rank, two steps).  Inductor compiles
    in-process: its default pool of compile workers, each importing torch, cost 25% more CPU on 2 cores.  Started
    plainly, not from the fork server: torch reads TORCH_LOGS when it is imported."""
    _, ref = tp2
    r = run_train(
        1, tmp_path / "run", "--steps", "2", "--ckpt-interval", "0", "--set", "checkpoint.save_final=false",
        "--set", "optim.decay_steps=30", "--set", "train.compile=true", timeout=900,
        env={"TORCHINDUCTOR_COMPILE_THREADS": "1", "TORCH_LOGS": "graph_breaks,recompiles"}, plain=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    # The compute clock's hooks run in each compiled block and are never traced: no graph break, no recompile there.
    assert not [
        x for x in r.stderr.splitlines() if "compute.py" in x and ("Graph break" in x or "Recompiling" in x)
    ]
    got, want = losses(r.stdout), losses(ref)
    for s in (1, 2):
        assert got[s] == pytest.approx(want[s], rel=LOSS_RTOL)


def test_ranks_per_node_under_srun_and_pals() -> None:
    """The node check needs the ranks per node from every launcher the job scripts use."""
    from agpt.train import dist

    srun = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_NNODES": "2", "SLURM_LOCALID": "1",
            "SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_ID": "7"}  # fmt: skip
    assert dist.detect(srun).local_world_size == 4
    # 4 tasks on 2 nodes placed 3 + 1: each node knows its own count.
    uneven = dict(srun, SLURM_NTASKS="4", SLURM_STEP_TASKS_PER_NODE="3,1")
    assert dist.detect(dict(uneven, SLURM_PROCID="0", SLURM_NODEID="0")).local_world_size == 3
    assert dist.detect(dict(uneven, SLURM_PROCID="3", SLURM_NODEID="1")).local_world_size == 1
    pals = {"PALS_RANKID": "13", "PALS_SIZE": "24", "PALS_LOCAL_SIZE": "12", "PALS_LOCAL_RANKID": "1"}
    assert dist.detect(pals).local_world_size == 12
