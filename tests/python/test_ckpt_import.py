"""`agpt ckpt import`: Hugging Face Llama weights start a run that `agpt train` continues, and refuse
folders that are not this model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckpt_util import TINY, data_sets, files_of
from data_util import run_agpt
from train_util import losses, run_train

pytestmark = pytest.mark.slow


def _import(hf: Path, run: Path, *extra: str, mpi: int = 0):
    return run_agpt("ckpt", "import", str(hf), "--config", str(TINY), "--run-dir", str(run),
                    "--set", "model.vocab_size=640", *extra, mpi=mpi, timeout=300)  # fmt: skip


def test_import_then_export_gives_identical_tensors(exported: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    r = _import(exported, tmp_path / "run")
    assert r.returncode == 0, r.stdout + r.stderr
    step0 = tmp_path / "run" / "ckpt" / "step-0"
    assert (step0 / ".complete").exists() and (step0 / "meta.json").exists()
    meta = json.loads((step0 / "meta.json").read_text())
    assert meta["source"]["hf_dir"] == str(exported.resolve())
    out = tmp_path / "again"
    r = run_agpt("ckpt", "export", str(step0), str(out), "--dtype", "fp32",
                 "--tokenizer", str(exported / "tokenizer.model"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    a = load_file(exported / "model-00001-of-00001.safetensors")
    b = load_file(out / "model-00001-of-00001.safetensors")
    assert a.keys() == b.keys()
    assert all(a[k].dtype == b[k].dtype and a[k].equal(b[k]) for k in a)
    assert files_of(out) == files_of(exported)


def test_imports_a_folder_saved_by_transformers(exported: Path, tmp_path: Path) -> None:
    """save_pretrained's own layout (one model.safetensors, rope_parameters) imports to the same weights."""
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    saved = tmp_path / "saved"
    LlamaForCausalLM.from_pretrained(exported, dtype=torch.float32).save_pretrained(saved)
    r = _import(saved, tmp_path / "run")
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "out"
    r = run_agpt("ckpt", "export", str(tmp_path / "run" / "ckpt" / "step-0"), str(out), "--dtype", "fp32")
    assert r.returncode == 0, r.stderr
    a = load_file(exported / "model-00001-of-00001.safetensors")
    b = load_file(out / "model-00001-of-00001.safetensors")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


def test_a_run_started_from_an_import_continues_training(exported: Path, blend: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = _import(exported, run, "--set", f"data.path={blend}")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_train(1, run, "--steps", "3", *data_sets(blend))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"resumed from {run / 'ckpt' / 'step-0'} (step 0" in r.stdout
    imported = losses(r.stdout)
    fresh = losses(run_train(1, tmp_path / "fresh", "--steps", "1", *data_sets(blend)).stdout)
    assert sorted(imported) == [1, 2, 3]
    # the imported weights were trained already: far below a new model's first loss, and still learning
    assert imported[1] < fresh[1] - 0.2, (imported, fresh)
    assert imported[3] < imported[1]


def test_refuses_a_run_dir_that_already_has_checkpoints(
    exported: Path, trained: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained / "ckpt", run / "ckpt")
    r = _import(exported, run)
    assert r.returncode == 2 and "step-8" in r.stderr, r.stderr


def _copy_hf(exported: Path, tmp_path: Path) -> Path:
    hf = tmp_path / "hf"
    shutil.copytree(exported, hf)
    return hf


def test_another_architecture_exit_2_naming_config_json(exported: Path, tmp_path: Path) -> None:
    hf = _copy_hf(exported, tmp_path)
    cfg = json.loads((hf / "config.json").read_text())
    cfg.update(architectures=["GPT2LMHeadModel"], model_type="gpt2")
    (hf / "config.json").write_text(json.dumps(cfg))
    r = _import(hf, tmp_path / "run")
    assert r.returncode == 2, r.stderr
    assert str(hf / "config.json") in r.stderr and "GPT2LMHeadModel" in r.stderr, r.stderr
    assert not (tmp_path / "run" / "ckpt").exists() or not any((tmp_path / "run" / "ckpt").iterdir())


def test_config_dimension_mismatch_exit_2(exported: Path, tmp_path: Path) -> None:
    r = _import(exported, tmp_path / "run", "--set", "model.n_layers=3")
    assert r.returncode == 2, r.stderr
    assert str(exported / "config.json") in r.stderr and "num_hidden_layers" in r.stderr, r.stderr


def test_tensor_shape_mismatch_exit_2_naming_tensor_and_file(exported: Path, tmp_path: Path) -> None:
    """config.json claims the run's sizes but a tensor in the weights file has another shape."""
    from safetensors.torch import load_file, save_file

    hf = _copy_hf(exported, tmp_path)
    shard = hf / "model-00001-of-00001.safetensors"
    weights = load_file(shard)
    weights["model.layers.1.mlp.up_proj.weight"] = weights["model.layers.1.mlp.up_proj.weight"][:100].clone()
    save_file(weights, shard)
    r = _import(hf, tmp_path / "run")
    assert r.returncode == 2, r.stderr
    assert str(shard) in r.stderr and "model.layers.1.mlp.up_proj.weight" in r.stderr, r.stderr
    assert "[100, 64]" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_missing_weights_file_exit_2(exported: Path, tmp_path: Path) -> None:
    hf = _copy_hf(exported, tmp_path)
    (hf / "model-00001-of-00001.safetensors").unlink()
    r = _import(hf, tmp_path / "run")
    assert r.returncode == 2 and str(hf / "model-00001-of-00001.safetensors") in r.stderr, r.stderr
