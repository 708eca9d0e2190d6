"""Exact resume, kill -9 during an async save, 2 -> 4 ranks, corrupt and foreign checkpoints.

Real gloo ranks under the real mpiexec, tiny config.  One straight 40-step run is shared by every
assertion (module fixture) to keep the file fast on a loaded machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from train_util import (
    ckpt_steps,
    copy_ckpt,
    kill_9_mid_save,
    logged,
    losses,
    run_train,
    same_steps,
    trained,
    training,
    two_more_steps,
    wait_for,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    # Every rank sleeps 2 s in its write slot at step 20: with max_writers=1 the slots cannot overlap.
    env = {"AGPT_TEST_CKPT_WRITE_DELAY": "20:2"}
    return trained(tmp_path_factory, "straight", 2, "--steps", "40", "--ckpt-interval", "10",
                   "--set", "checkpoint.keep=3", env=env)  # fmt: skip


def test_straight_run_logs_contract_lines_and_progress(straight: tuple[Path, str]) -> None:
    run, out = straight
    lines = [ln for ln in out.splitlines() if ln.startswith("step=")]
    assert len(lines) == 40
    keys = [tok.split("=")[0] for tok in lines[0].split()]
    assert keys == ["step", "loss", "grad_norm", "lr", "tps", "stall_ms"]
    ls = losses(out)
    assert ls[40] < ls[1] - 0.5, "the tiny model should learn the synthetic stream"
    assert (run / "progress").read_text().startswith("step=40 time=")
    # keep=3: the oldest complete checkpoint was pruned, the newest three remain with their markers.
    assert ckpt_steps(run) == [20, 30, 40]
    rec = json.loads((run / "ckpt" / "step-40" / ".complete").read_text())
    assert rec["step"] == 40 and rec["world_size"] == 2 and rec["time"] > 0


def test_kill_9_mid_async_save_then_exact_resume(straight: tuple[Path, str], tmp_path: Path) -> None:
    """Kill every rank while step 30 is being written: no marker there, resume from 20, bit-exact to 40."""
    _, ref = straight
    run = tmp_path / "run"
    log = tmp_path / "first.log"
    env = {"AGPT_TEST_CKPT_WRITE_DELAY": "30:120"}
    kill_9_mid_save(2, run, log, ["--steps", "40", "--ckpt-interval", "10"], saved=20, at_step=32, env=env)
    assert (run / "ckpt/step-30").is_dir()
    assert not (run / "ckpt/step-30/.complete").exists()
    r = run_train(2, run, "--steps", "40", "--ckpt-interval", "10")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resumed from" in r.stdout and "step-20 (step 20" in r.stdout
    same_steps(r.stdout, ref, 21, 40)
    assert (run / "ckpt/step-30/.complete").exists()


def test_resume_on_four_ranks(straight: tuple[Path, str], tmp_path: Path) -> None:
    """A 2-rank checkpoint resumes on 4 ranks (resharded) and continues the same curve."""
    src, ref = straight
    r = two_more_steps(src, tmp_path / "run", 4, 40, 1e-5, ref)
    assert "saved by 2 ranks, now 4" in r.stdout


def test_one_rank_reports_the_same_global_loss(straight: tuple[Path, str], tmp_path: Path) -> None:
    """Same global batch on 1 rank (4 micro-batches) and 2 ranks (2 each): the same mean loss."""
    _, ref = straight
    r = run_train(
        1, tmp_path / "run", "--steps", "2", "--ckpt-interval", "0", "--set", "optim.decay_steps=40",
        "--set", "checkpoint.save_final=false",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    got, want = losses(r.stdout), losses(ref)
    assert got[1] == pytest.approx(want[1], rel=1e-4)
    assert got[2] == pytest.approx(want[2], rel=1e-4)


def test_corrupt_newest_falls_back_and_marker_goes_first(straight: tuple[Path, str], tmp_path: Path) -> None:
    """Newest checkpoint truncated: warn, resume from the previous one; re-saving removes the old marker first."""
    src, ref = straight
    run = copy_ckpt(src, tmp_path / "run", 30, 40)
    data = run / "ckpt/step-40/__0_0.distcp"
    data.write_bytes(data.read_bytes()[:1000])
    env = {"AGPT_TEST_CKPT_WRITE_DELAY": "40:5"}
    log = tmp_path / "log"
    with training(2, run, "--steps", "40", "--ckpt-interval", "10", log=log, env=env) as proc:
        wait_for(logged(log, 40), 120, "step 40", proc)
        # The save of step 40 into the existing directory is under way: its old marker is gone.
        assert not (run / "ckpt/step-40/.complete").exists()
        assert proc.wait(timeout=120) == 0, log.read_text()
    out = log.read_text()
    # found by its digest, before anything of it is read (a marker without digests: by its size, "truncated")
    assert "warning:" in out and "__0_0.distcp" in out and "corrupt checkpoint data (sha256" in out
    assert "step-30 (step 30" in out
    same_steps(out, ref, 31, 40)
    assert (run / "ckpt/step-40/.complete").exists()
    assert data.stat().st_size > 1000


def test_only_checkpoint_corrupt_exits_2_naming_the_file(straight: tuple[Path, str], tmp_path: Path) -> None:
    """No good checkpoint left: never start from scratch silently; name the bad file (resharded to 1 rank)."""
    src, _ = straight
    for damage in ("flip", "missing"):
        run = copy_ckpt(src, tmp_path / damage, 40)
        data = run / "ckpt/step-40/__1_0.distcp"
        if damage == "missing":
            data.unlink()
        else:
            blob = bytearray(data.read_bytes())
            blob[::997] = bytes(b ^ 0xFF for b in blob[::997])
            data.write_bytes(bytes(blob))
        r = run_train(1, run, "--steps", "41")
        assert r.returncode == 2, r.stdout + r.stderr
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("agpt: error:")]
        assert len(errors) == 1 and "__1_0.distcp" in errors[0], r.stderr
        assert ("corrupt" if damage == "flip" else "missing") in errors[0]


def test_checkpoint_of_another_model_exits_2_naming_the_tensor(
    straight: tuple[Path, str], tmp_path: Path
) -> None:
    src, _ = straight
    run = copy_ckpt(src, tmp_path / "run", 40)
    r = run_train(1, run, "--steps", "41", "--set", "model.dim=128")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "tensor model.tok_embeddings.weight" in r.stderr and "[512, 64]" in r.stderr
    assert os.path.exists(run / "ckpt/step-40/.complete"), "a foreign checkpoint is never touched"


def test_at_most_max_writers_ranks_write_at_once(straight: tuple[Path, str]) -> None:
    run, _ = straight
    step20 = run / "ckpt/step-20"
    first, second = ((step20 / f"__{r}_0.distcp").stat().st_mtime for r in (0, 1))
    assert second - first >= 1.9, "rank 1 wrote while rank 0 held the only writer slot"
