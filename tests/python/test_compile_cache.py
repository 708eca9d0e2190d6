"""Compiled-kernel caches with the run (train.compile): each node's folder is staged from RUN_DIR/compile_cache by
its local rank 0, torch is pointed at it, and rank 0 copies it back after the first step."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agpt.train import compile_cache


def test_the_caches_are_staged_on_the_node_and_kept_with_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    run = tmp_path / "run"
    (run / "compile_cache" / "inductor" / "fx").mkdir(parents=True)
    (run / "compile_cache" / "inductor" / "fx" / "kernel.py").write_text("# an earlier job's kernel\n")
    for var in compile_cache.VARS.values():
        monkeypatch.delenv(var, raising=False)
    env = {"SITE_LOCAL_DIR": str(tmp_path / "node"), "AGPT_HEARTBEAT_HOST": "n1", "LOCAL_RANK": "0"}
    (tmp_path / "node").mkdir()
    cache = compile_cache.prepare(run, 0, env)
    assert cache is not None
    inductor = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    assert (
        inductor.is_relative_to(tmp_path / "node")
        and Path(os.environ["TRITON_CACHE_DIR"]).parent == inductor.parent
    )
    assert (inductor / "fx" / "kernel.py").read_text() == "# an earlier job's kernel\n"  # staged from the run
    (inductor / "new.so").write_bytes(b"compiled")
    cache.save_async()
    assert cache.saver is not None
    cache.saver.join()
    assert (
        run / "compile_cache" / "inductor" / "new.so"
    ).read_bytes() == b"compiled"  # kept for the next job


def test_a_site_that_sets_the_cache_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/site/inductor")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    (tmp_path / "node").mkdir()
    compile_cache.prepare(tmp_path / "run", 1, {"SITE_LOCAL_DIR": str(tmp_path / "node"),
                                               "TORCHINDUCTOR_CACHE_DIR": "/site/inductor"})  # fmt: skip
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/site/inductor"
    assert Path(os.environ["TRITON_CACHE_DIR"]).name == "triton"
