"""Fixtures for the checkpoint export/import/info tests: a tiny model trained on a real blend (so its
checkpoint pins a real SentencePiece tokenizer), and its Hugging Face export."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from data_util import run_agpt, stdlib_documents
from train_util import TINY, run_train

VOCAB = 640  # the 600-piece test tokenizer fits; a multiple of 64 as real vocabularies are padded
STEPS = 8


def data_sets(blend: Path) -> list[str]:
    return ["--set", f"data.path={blend}", "--set", f"model.vocab_size={VOCAB}"]


@pytest.fixture(scope="session")
def blend(sp_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agpt.data.blend import BlendSettings, build
    from agpt.data.tokenize import TokenizeSettings, run

    d = tmp_path_factory.mktemp("ckptdata")
    src = d / "text.txt"
    src.write_text("\n\n".join(stdlib_documents(200)))
    run(TokenizeSettings(model=str(sp_model), inputs=[str(src)], output=str(d / "tok"), workers=1, quiet=True,
                         corpus="code"))  # fmt: skip
    build(BlendSettings(file_list=str(d / "tok/filelist.txt"), seq_len=64, num_samples=256, seed=1,
                        output=str(d / "blend")))  # fmt: skip
    return d / "blend"


@pytest.fixture(scope="session")
def trained(blend: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory whose step-8 checkpoint was saved by 2 ranks."""
    run = tmp_path_factory.mktemp("ckptrun") / "run"
    r = run_train(2, run, "--steps", str(STEPS), "--ckpt-interval", str(STEPS), *data_sets(blend))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (run / "ckpt" / f"step-{STEPS}" / ".complete").exists()
    return run


@pytest.fixture(scope="session")
def exported(trained: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ckptexport") / "hf"
    r = run_agpt("ckpt", "export", str(trained / "ckpt" / f"step-{STEPS}"), str(out), "--dtype", "fp32")
    assert r.returncode == 0, r.stderr
    return out


def git_head() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def files_of(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


__all__ = ["TINY", "blend", "exported", "trained"]
