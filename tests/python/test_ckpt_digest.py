"""Checkpoint digests: `.complete` pins each file's sha256, a load verifies them and falls back naming the
file; a marker that does not parse neither restarts the run from step 1 nor gets its checkpoint pruned.

Real gloo ranks under the real mpiexec, tiny config; one 20-step run is shared (module fixture).
"""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest

from agpt.digest import file_sha256
from agpt.train import checkpoint as ck
from train_util import copy_ckpt, run_train, same_steps, step_lines, trained

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return trained(tmp_path_factory, "straight", 2, "--steps", "20", "--ckpt-interval", "10",
                   "--set", "checkpoint.keep=3")  # fmt: skip


def test_complete_pins_a_digest_of_every_file_and_keeps_its_contract_fields(
    straight: tuple[Path, str],
) -> None:
    run, _ = straight
    d = run / "ckpt/step-20"
    rec = json.loads((d / ".complete").read_text())
    assert rec["step"] == 20 and rec["world_size"] == 2 and isinstance(rec["time"], int)
    files = sorted(p.name for p in d.iterdir() if p.name != ".complete")
    assert sorted(rec["sha256"]) == files
    assert all(rec["sha256"][f] == file_sha256(d / f) for f in files)


def test_a_same_size_change_falls_back_with_a_warning_naming_the_file(
    straight: tuple[Path, str], tmp_path: Path
) -> None:
    src, ref = straight
    run = copy_ckpt(src, tmp_path / "run", 10, 20)
    data = run / "ckpt/step-20/__1_0.distcp"
    blob = bytearray(data.read_bytes())
    blob[len(blob) // 2] ^= 0x01  # one bit in the middle of a tensor: same size, still deserializes
    data.write_bytes(bytes(blob))
    r = run_train(2, run, "--steps", "20", "--ckpt-interval", "10")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert "warning:" in out and f"{data}: corrupt checkpoint data (sha256" in out
    assert "resumed from" in out and "step-10 (step 10" in out
    same_steps(r.stdout, ref, 11, 20)


def test_a_garbage_marker_resumes_from_its_step_and_is_never_pruned(
    straight: tuple[Path, str], tmp_path: Path
) -> None:
    src, _ = straight
    run = copy_ckpt(src, tmp_path / "run", 20)
    marker = run / "ckpt/step-20/.complete"
    marker.write_bytes(b"\x00garbage{")
    r = run_train(1, run, "--steps", "30", "--ckpt-interval", "10", "--set", "checkpoint.keep=1")
    assert r.returncode == 0, r.stdout + r.stderr
    steps = sorted(step_lines(r.stdout))
    assert steps[0] == 21, "restarted from scratch instead of resuming step 20"
    assert f"{marker}: unreadable marker" in r.stderr
    assert (run / "ckpt/step-20/__0_0.distcp").exists() and marker.read_bytes() == b"\x00garbage{"
    assert (run / "ckpt/step-30/.complete").exists()


def test_a_newest_marker_naming_another_step_is_skipped_by_the_trainer_as_by_every_tool(
    straight: tuple[Path, str], tmp_path: Path
) -> None:
    """The trainer resumes from the step `agpt check`, `agpt failover report` and the chain name
    (test_ckpt_rule.py): not from step-30, a copy of step-20 whose marker says so."""
    from test_ckpt_rule import resume_steps, with_an_attempt

    src, _ = straight
    run = copy_ckpt(src, tmp_path / "run", 10, 20)
    shutil.copytree(run / "ckpt/step-20", run / "ckpt/step-30")
    assert set(resume_steps(with_an_attempt(run)).values()) == {20}
    r = run_train(1, run, "--steps", "21", "--ckpt-interval", "100")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"resumed from {run / 'ckpt/step-20'} (step 20" in r.stdout
    assert sorted(step_lines(r.stdout)) == [21]


def test_prune_keeps_what_it_could_not_read(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    for step in (10, 20, 30, 40):
        d = root / f"step-{step}"
        d.mkdir(parents=True)
        (d / "__0_0.distcp").write_bytes(b"x")
        (d / ".complete").write_text(json.dumps({"step": step, "time": 0, "world_size": 1}))
    (root / "step-20/.complete").write_text("not json")
    (root / "step-5").mkdir()  # an interrupted save: no marker
    ck.SUSPECT.add(root / "step-30")
    cp = object.__new__(ck.Checkpointer)
    cp.root, cp.in_flight_step = root, None
    cp.cfg = type("C", (), {"keep": 1})()  # type: ignore[assignment]
    try:
        cp.prune()
    finally:
        ck.SUSPECT.discard(root / "step-30")
    assert sorted(p.name for p in root.iterdir()) == ["step-20", "step-30", "step-40"]


def test_disk_full_is_recognised_through_dcp_wrappers() -> None:
    inner = OSError(errno.ENOSPC, "No space left on device")
    wrapper = RuntimeError("save failed")
    wrapper.failures = {1: (inner, "traceback")}  # type: ignore[attr-defined]
    assert ck._disk_full(wrapper)
    assert not ck._disk_full(RuntimeError("other"))
