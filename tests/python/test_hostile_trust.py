"""What is read is verified before it is trusted: a checkpoint's files are checked against the sha256 its
`.complete` marker pins before anything in them is deserialised (torch DCP's `.metadata` is a pickle), and a
node-local folder is private to its user and never followed through a symlink.  Each test is one instance found
from outside (issue 29)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agpt.errors import BadInput
from agpt.heartbeat import writer as heartbeat
from ckpt_util import STEPS, data_sets
from data_util import run_agpt
from train_util import run_train


def test_a_symlink_planted_where_the_heartbeat_folder_goes_is_never_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The node-local folder's name is predictable (/dev/shm/agpt-UID/...): another user could plant a link there
    to make the ranks write where they choose.  The folder is made private and opened with O_NOFOLLOW."""
    shm, victim = tmp_path / "shm", tmp_path / "victim"
    shm.mkdir()
    victim.mkdir()
    (shm / f"agpt-{os.getuid()}").symlink_to(victim)
    env = {"AGPT_RUN_DIR": str(tmp_path / "run"), "AGPT_HEARTBEAT_LOCAL_DIR": str(shm)}
    assert heartbeat.start(env=env) is None
    assert "heartbeat off" in capsys.readouterr().out
    assert list(victim.iterdir()) == []


def test_the_heartbeat_folder_is_private_to_its_user(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / f"agpt-{os.getuid()}").mkdir(mode=0o777)
    os.chmod(shm / f"agpt-{os.getuid()}", 0o777)  # made open by someone: closed again before use
    hb = heartbeat.start(env={"AGPT_RUN_DIR": str(tmp_path / "run"), "AGPT_HEARTBEAT_LOCAL_DIR": str(shm)})
    assert hb is not None
    try:
        for d in (hb.local_dir.parent, hb.local_dir):
            assert d.stat().st_mode & 0o777 == 0o700, oct(d.stat().st_mode)
    finally:
        hb.stop()


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e400", "abc"])
def test_a_bad_heartbeat_interval_is_refused_naming_it(tmp_path: Path, value: str) -> None:
    env = {"AGPT_RUN_DIR": str(tmp_path / "run"), "AGPT_HEARTBEAT_INTERVAL_S": value}
    with pytest.raises(BadInput, match="AGPT_HEARTBEAT_INTERVAL_S"):
        heartbeat.start(env=env, local_dir=str(tmp_path / "shm"))


# --- checkpoints: verified before anything in them is unpickled ------------------------------------------------
class _Planted:
    """A pickle that runs a command when it is loaded: what a planted `.metadata` would hold."""

    def __init__(self, cmd: str) -> None:
        self.cmd = cmd

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (self.cmd,))


def planted_step(trained: Path, tmp: Path) -> tuple[Path, Path]:
    """A copy of TRAINED's checkpoint whose `.metadata` is a planted pickle (`.complete` left as it was, so
    its digest no longer matches), and the canary the pickle would create."""
    import pickle
    import shutil

    step = tmp / "run" / "ckpt" / f"step-{STEPS}"
    shutil.copytree(trained / "ckpt" / f"step-{STEPS}", step)
    canary = tmp / "PWNED"
    (step / ".metadata").write_bytes(pickle.dumps(_Planted(f"touch {canary}")))
    return step, canary


def test_ckpt_info_never_unpickles_metadata_that_does_not_match_its_digest(
    trained: Path, tmp_path: Path
) -> None:
    step, canary = planted_step(trained, tmp_path)
    r = run_agpt("ckpt", "info", str(step))
    assert not canary.exists(), "ckpt info unpickled a .metadata whose digest did not match"
    assert r.returncode == 1 and f"{step}/.metadata: corrupt checkpoint data (sha256" in r.stdout + r.stderr


def test_ckpt_export_never_unpickles_metadata_that_does_not_match_its_digest(
    trained: Path, tmp_path: Path
) -> None:
    step, canary = planted_step(trained, tmp_path)
    r = run_agpt("ckpt", "export", str(step), str(tmp_path / "hf"))
    assert not canary.exists(), "ckpt export unpickled a .metadata whose digest did not match"
    assert r.returncode == 2 and f"{step}/.metadata: corrupt checkpoint data" in r.stderr, r.stderr
    assert not (tmp_path / "hf").exists()


def test_resume_never_unpickles_metadata_that_does_not_match_its_digest(
    trained: Path, blend: Path, tmp_path: Path
) -> None:
    step, canary = planted_step(trained, tmp_path)
    r = run_train(1, tmp_path / "run", "--steps", str(STEPS + 1), *data_sets(blend))
    assert not canary.exists(), "resume unpickled a .metadata whose digest did not match"
    assert f"{step}/.metadata: corrupt checkpoint data" in r.stdout + r.stderr
