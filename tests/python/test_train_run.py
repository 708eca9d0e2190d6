"""One-process trainer behaviour: fp32 master weights, non-finite stop, SIGTERM and deadline stops,
the bit-exact smoke gate and the LR finder."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from data_util import stdlib_documents
from train_util import TINY, agpt_cmd, logged, run_train, smoke, train_env, training, wait_for

pytestmark = pytest.mark.slow

MASTER_SCRIPT = """
import os, sys
from agpt.train import dist
from agpt.train.config import load_config
from agpt.train.trainer import Trainer
cfg = load_config(sys.argv[1], sys.argv[2:], environ={})
t = Trainer(cfg, None, checkpoints=False)
w = t.model.layers[0].attn_norm.weight
before = w.to_local().detach().clone()
t.train_step()
after = w.to_local().detach()
print(f"dtype={after.dtype} moved={float((after.float() - before.float()).abs().max())}", flush=True)
dist.finish()
os._exit(0)
"""


def _master(*sets: str) -> str:
    r = subprocess.run(
        [sys.executable, "-c", MASTER_SCRIPT, str(TINY), "optim.lr=1e-5", "optim.warmup_steps=0", *sets],
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def test_master_weights_are_fp32_so_rmsnorm_moves_with_a_tiny_lr() -> None:
    """bf16 compute over fp32 masters: a 1e-5 update of a weight at 1.0 survives; over bf16 it rounds away."""
    out = _master()
    assert out.startswith("dtype=torch.float32 ")
    assert 1e-6 < float(out.split("moved=")[1]) < 1e-4
    out = _master("train.master_dtype=bf16")  # the bug the default prevents
    assert out == "dtype=torch.bfloat16 moved=0.0"


def test_non_finite_loss_stops_with_one_line_and_exit_1(tmp_path: Path) -> None:
    r = run_train(
        1, tmp_path / "run", "--steps", "20", "--ckpt-interval", "0",
        "--set", "optim.lr=1e30", "--set", "optim.warmup_steps=0", "--set", "optim.grad_clip=0",
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("agpt: error:")]
    assert len(errors) == 1 and "non-finite" in errors[0], r.stderr
    assert "Traceback" not in r.stderr


def test_sigterm_saves_a_complete_checkpoint_and_exits_143(tmp_path: Path) -> None:
    run = tmp_path / "run"
    log = tmp_path / "log"
    with training(1, run, "--steps", "100000", "--ckpt-interval", "0", log=log) as proc:
        wait_for(logged(log, 3), 120, "step 3", proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 143, log.read_text()
    out = log.read_text()
    stopped = [ln for ln in out.splitlines() if ln.startswith("agpt: stopped at step")]
    assert stopped, out
    step = int(stopped[0].split()[4])
    rec = json.loads((run / f"ckpt/step-{step}/.complete").read_text())
    assert rec["step"] == step


def test_deadline_saves_and_exits_75(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {"AGPT_DEADLINE_EPOCH": str(int(time.time()) + 60)}
    r = run_train(1, run, "--steps", "1000", "--set", "train.deadline_margin_s=3600", env=env)
    assert r.returncode == 75, r.stdout + r.stderr
    assert (run / "ckpt/step-1/.complete").exists()
    assert (run / "progress").read_text().startswith("step=1 ")


SMOKE_STEPS = 10  # enough to record, repeat bit for bit and name a difference at step 2; 50 took 3x the time


def _smoke(baseline: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return smoke(baseline, *args, steps=SMOKE_STEPS)


def test_smoke_passes_twice_and_fails_on_one_changed_hyperparameter(tmp_path: Path) -> None:
    base = tmp_path / "baseline.txt"
    r = _smoke(base)
    assert r.returncode == 2 and "--baseline" in r.stderr and "baseline.txt" in r.stderr
    assert _smoke(base, "--record").returncode == 0
    lines = [ln for ln in base.read_text().splitlines() if ln.startswith("step=")]
    assert len(lines) == SMOKE_STEPS and "peak_mem=" in lines[0]
    for _ in range(2):
        r = _smoke(base)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "PASS" in r.stdout
    r = _smoke(base, "--set", "optim.warmup_steps=4")
    assert r.returncode == 1
    assert "first difference at step 2" in r.stderr  # step 1's loss and grads precede any update


def test_committed_smoke_baseline_is_well_formed() -> None:
    base = ROOT / "tests/fixtures/smoke/cpu-smoke.txt"
    text = base.read_text()
    assert text.startswith("# agpt smoke baseline: config=smoke.yaml steps=50 world=1 device=cpu")
    assert len([ln for ln in text.splitlines() if ln.startswith("step=")]) == 50


def test_lr_find_reports_two_lrs_and_writes_a_png(tmp_path: Path) -> None:
    png = tmp_path / "out" / "lr.png"
    r = subprocess.run(
        [*agpt_cmd(), "lr-find", "--config", str(TINY), "--steps", "30", "--lr-min", "1e-4", "--lr-max", "10",
         "--out", str(png)],
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    summary = r.stdout.strip().splitlines()[-1]
    assert "steepest descent lr=" in summary and "blow-up/10 lr=" in summary
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads(png.with_suffix(".json").read_text())
    assert 1e-4 <= result["steepest_lr"] <= 10
    assert result["blowup_lr"] is not None and result["suggested_lr"] == pytest.approx(
        result["blowup_lr"] / 10
    )


def test_trains_on_a_blended_data_set(tmp_path: Path, sp_model: Path) -> None:
    """data.path set: samples come from agpt.data.BlendedDataset, checked against the model's shapes."""
    from agpt.data.blend import BlendSettings, build
    from agpt.data.tokenize import TokenizeSettings, run

    src = tmp_path / "text.txt"
    src.write_text("\n\n".join(stdlib_documents(200)))
    run(TokenizeSettings(model=str(sp_model), inputs=[str(src)], output=str(tmp_path / "tok"), workers=1,
                         quiet=True, corpus="code"))  # fmt: skip
    build(BlendSettings(file_list=str(tmp_path / "tok/filelist.txt"), seq_len=64, num_samples=64, seed=1,
                        output=str(tmp_path / "blend")))  # fmt: skip
    data = ["--set", f"data.path={tmp_path / 'blend'}", "--set", "checkpoint.save_final=false"]
    r = run_train(1, tmp_path / "run", "--steps", "2", *data, "--set", "model.vocab_size=640")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "\nstep=2 loss=" in "\n" + r.stdout
    r = run_train(1, tmp_path / "run", "--steps", "2", *data, "--set", "model.vocab_size=512")
    assert r.returncode == 2 and "model.vocab_size" in r.stderr, r.stderr
    r = run_train(1, tmp_path / "run", "--steps", "2", *data, "--set", "model.vocab_size=640",
                  "--set", "train.seq_len=32")  # fmt: skip
    assert r.returncode == 2 and "data.path" in r.stderr and "train.seq_len" in r.stderr, r.stderr
