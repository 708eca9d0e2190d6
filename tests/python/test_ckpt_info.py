"""`agpt ckpt info`: step, tokens, provenance, files and completeness of a checkpoint; exit 0/1/2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckpt_util import STEPS, git_head
from data_util import run_agpt

pytestmark = pytest.mark.slow


def test_info_reports_step_tokens_provenance_and_data(trained: Path, blend: Path) -> None:
    import torch

    r = run_agpt("ckpt", "info", str(trained), "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["path"] == str(trained / "ckpt" / f"step-{STEPS}")
    assert info["complete"] is True and info["problems"] == []
    assert info["step"] == STEPS and info["saved_by_ranks"] == 2
    assert info["samples_consumed"] == STEPS * 8 and info["tokens_consumed"] == STEPS * 8 * 64
    assert info["config"]["model"]["vocab_size"] == 640 and info["config"]["train"]["global_batch"] == 8
    prov = info["provenance"]
    assert prov["agpt_revision"] == git_head() and prov["torch_version"] == torch.__version__
    data = info["data"]
    assert data["path"] == str(blend.resolve()) and data["manifest_matches"] is True
    assert data["cache_key"] == json.loads((blend / "manifest.json").read_text())["cache_key"]
    names = {f["name"]: f for f in info["files"]}
    assert {".complete", ".metadata", "meta.json", "__0_0.distcp", "__1_0.distcp"} <= set(names)
    assert info["bytes"] == sum(p.stat().st_size for p in (trained / "ckpt" / f"step-{STEPS}").iterdir())
    text = run_agpt("ckpt", "info", str(trained / "ckpt" / f"step-{STEPS}"))
    assert (
        text.returncode == 0 and "complete     yes" in text.stdout and f"step         {STEPS}" in text.stdout
    )


def test_info_names_what_is_missing_or_truncated(trained: Path, tmp_path: Path) -> None:
    step = tmp_path / f"step-{STEPS}"
    shutil.copytree(trained / "ckpt" / f"step-{STEPS}", step)
    (step / ".complete").unlink()
    (step / "__1_0.distcp").unlink()
    with open(step / "__0_0.distcp", "r+b") as f:
        f.truncate(100)
    r = run_agpt("ckpt", "info", str(step), "--json")
    assert r.returncode == 1, r.stderr
    info = json.loads(r.stdout)
    assert info["complete"] is False
    problems = "\n".join(info["problems"])
    for name in (".complete", "__1_0.distcp", "__0_0.distcp"):
        assert str(step / name) in problems
    states = {f["name"]: f["state"] for f in info["files"]}
    assert states["__1_0.distcp"] == "missing" and states["__0_0.distcp"].startswith("truncated")
    r = run_agpt("ckpt", "info", str(step))
    assert r.returncode == 1 and "complete     NO" in r.stdout


def test_not_a_checkpoint_exit_2(tmp_path: Path) -> None:
    r = run_agpt("ckpt", "info", str(tmp_path))
    assert r.returncode == 2 and str(tmp_path) in r.stderr, r.stderr
