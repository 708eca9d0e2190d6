"""The trainer tests' fork server (agpt_zygote.py): a forked rank trains as a plain one, dies with its client,
gets its client's signals and ends with its exit status."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

import train_util as tu


def _children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.append(int(p.name))
    return out


def _server_pid() -> int:
    sock = tu._zygote_socket()
    if sock is None:
        pytest.skip("AGPT_TEST_ZYGOTE=0: every rank starts plainly")
    r = subprocess.run(["pgrep", "-f", f"agpt_zygote.py serve {sock}"], capture_output=True, text=True)
    return int(r.stdout.split()[0])


def test_a_forked_rank_logs_what_a_plain_rank_logs(tmp_path: Path) -> None:
    args = ("--steps", "4", "--set", "checkpoint.interval=2")
    forked = tu.run_train(2, tmp_path / "forked", *args)
    plain = subprocess.run([str(tu.MPIEXEC), "-n", "2", str(tu.AGPT), "train", "--config", str(tu.TINY), "--run-dir",
                            str(tmp_path / "plain"), *args], env=tu.train_env(), capture_output=True, text=True,
                           timeout=300)  # fmt: skip
    assert forked.returncode == plain.returncode == 0, forked.stderr + plain.stderr
    assert tu.step_lines(forked.stdout) == tu.step_lines(plain.stdout) != {}
    assert sorted(p.name for p in (tmp_path / "forked" / "ckpt").iterdir()) == ["step-2", "step-4"]


def test_a_killed_client_takes_its_rank_and_a_signal_reaches_it(tmp_path: Path) -> None:
    server = _server_pid()
    log = tmp_path / "a.log"
    with tu.training(2, tmp_path / "a", "--steps", "100000", log=log) as proc:
        tu.wait_for(tu.logged(log, 2), 120, "step 2", proc)
        assert len(_children(server)) == 2
        assert tu.kill_ranks(proc.pid) == 2  # kill -9 of the clients, as a node failure
        proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while _children(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _children(server) == []
    log = tmp_path / "b.log"
    with tu.training(1, tmp_path / "b", "--steps", "100000", log=log) as proc:
        tu.wait_for(tu.logged(log, 2), 120, "step 2", proc)
        proc.send_signal(signal.SIGUSR1)  # the trainer saves and exits 75
        assert proc.wait(timeout=120) == 75, log.read_text()
    assert re.search(
        r"^agpt: stopped at step \d+ on SIGUSR1 or the deadline, checkpoint saved$", log.read_text(), re.M
    )


def test_a_rank_killed_by_kill_9_ends_its_client_by_the_same_signal(tmp_path: Path) -> None:
    # As a plain rank would: srun then says `task N: Killed`, which the classifier reads as a crash; a client that
    # exited 1 with a traceback instead turned the chaos run's kill -9 into an `app` error.
    server = _server_pid()
    log = tmp_path / "a.log"
    with tu.training(1, tmp_path / "a", "--steps", "100000", log=log) as proc:
        tu.wait_for(tu.logged(log, 2), 120, "step 2", proc)
        (rank,) = _children(server)
        os.kill(rank, signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    assert "Traceback" not in log.read_text()


def test_on_the_cluster_zygote_python_forks_a_rank_that_the_drills_still_reach(tmp_path: Path) -> None:
    """What srun starts for a rank on the local cluster (bin/agpt -> AGPT_PYTHON=zygote-python -m agpt train) is a
    client; chaoslib and `tests/cluster/node fail` find the rank it stands for, and a kill -9 of the client (as a
    node failure does) takes the rank with it.  Anything but a rank or a probe runs as the real interpreter."""
    import sys

    sys.path.insert(0, str(tu.ROOT / "tests" / "cluster"))
    import chaoslib

    server = _server_pid()
    env = tu.srun_env()
    assert env["AGPT_PYTHON"] == str(tu.ZYGOTE_PYTHON)
    real = subprocess.run([tu.ZYGOTE_PYTHON, "-c", "import sys; print(sys.executable)"], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert real.stdout.strip() == env["AGPT_TEST_PYTHON"]
    probe = [str(tu.AGPT), "--run-module", "agpt.probe", "--help"]
    forked, plain = (subprocess.run(probe, env=e, capture_output=True, text=True, timeout=120) for e in
                     (env, tu.agpt_env()))  # fmt: skip
    assert forked.returncode == plain.returncode == 0 and forked.stdout == plain.stdout != ""
    log = tmp_path / "rank.log"
    with open(log, "w") as fh:
        client = subprocess.Popen([str(tu.AGPT), "train", "--config", str(tu.TINY), "--run-dir", str(tmp_path / "r"),
                                   "--steps", "100000"], env=env, stdout=fh, stderr=fh)  # fmt: skip
    try:
        tu.wait_for(tu.logged(log, 2), 120, "step 2", client)
        (rank,) = _children(server)
        assert chaoslib._forked(str(client.pid), chaoslib._environ(str(client.pid))) == rank
        tree = subprocess.run(["bash", "-c", f'source "$1"; cluster_tree {client.pid}', "-",
                               str(tu.ROOT / "tests/cluster/lib.sh")], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert tree.stdout.split() == [str(client.pid), str(rank)]
        os.kill(rank, signal.SIGSTOP)  # the hang drill: a stopped rank cannot read its client's end-of-file
        client.kill()  # what slurmstepd does to the task when the watchdog ends the step
        client.wait(timeout=60)
        tu.wait_for(lambda: not _children(server), 30, "the stopped rank to end with its client")
    finally:
        if client.poll() is None:
            client.kill()
