"""Every subprocess we start is ours to end: a timeout or a signal ends the whole process group (hooks, preflight,
launch), temporary files go on every exit path, and a reader never opens a FIFO or a device as a log.  Each test
is one instance found from outside (issue 29): a hang, or a process left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, agpt_env

# A command whose child outlives it unless its whole process group is ended: the grandchild's pid goes to PIDFILE.
LINGER = "sleep 300 & echo $! > {pidfile}; wait"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (dead, not yet reaped by whoever adopted it) is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, within: float = 10.0) -> bool:
    """Whether PID is gone within WITHIN seconds; a leftover is killed here (a failing test leaves nothing)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return False


@pytest.mark.parametrize("form", ["true {host}; ", "true {hosts}; "])
def test_hosts_each_ends_the_hooks_children_at_its_timeout(tmp_path: Path, form: str) -> None:
    """Per host ({host}) or once ({hosts}): the hook's whole process group ends at the timeout."""
    run = tmp_path / "run"
    (run / "hosts").mkdir(parents=True)
    (run / "hosts" / "active").write_text("h1\n")
    pidfile = tmp_path / "pid"
    cmd = form + LINGER.format(pidfile=pidfile)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "agpt.failover",
            "hosts",
            "each",
            "--run-dir",
            str(run),
            "--timeout",
            "1",
            "--cmd",
            cmd,
        ],
        capture_output=True,
        text=True,
        env=agpt_env(),
        timeout=60,
    )
    assert r.returncode == 1 and "timed out after 1 s" in r.stderr, r.stderr
    assert wait_gone(int(pidfile.read_text())), "the hook's child outlived the timeout"


def fake_launcher(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "mpiexec"
    exe.write_text(f"#!/usr/bin/env bash\n{body}\n")
    exe.chmod(0o755)
    return exe


def test_preflight_ends_the_launchers_ranks_at_its_timeout(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    exe = fake_launcher(tmp_path, LINGER.format(pidfile=pidfile))
    r = subprocess.run(
        [str(ROOT / "bin" / "agpt"), "preflight", "--timeout", "8", "h1"],
        capture_output=True,
        text=True,
        env=agpt_env({"AGPT_SITE": "generic", "LAUNCH_MPIEXEC": str(exe), "LAUNCH_LAUNCHER": "hydra"}),
        timeout=60,
    )
    assert r.returncode == 124 and "timed out after 8 s" in r.stdout, r.stdout + r.stderr
    assert wait_gone(int(pidfile.read_text())), "a rank outlived preflight's timeout"


def test_launch_killed_by_sigterm_ends_its_launcher_and_removes_its_host_file(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    exe = fake_launcher(tmp_path, f"echo $$ > {pidfile}; exec sleep 300")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = agpt_env({"LAUNCH_MPIEXEC": str(exe), "LAUNCH_LAUNCHER": "hydra", "TMPDIR": str(tmp)})
    env.pop("FAILOVER_HOSTFILE", None)
    p = subprocess.Popen(
        [str(ROOT / "bin" / "agpt"), "launch", "--site", "generic", "true"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    end = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < end:
        time.sleep(0.05)
    assert list(tmp.glob("agpt-hostfile.*")), "the launch made no host file"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 128 + signal.SIGTERM
    assert wait_gone(int(pidfile.read_text())), "the launcher was left running"
    assert not list(tmp.glob("agpt-hostfile.*")), "the host file was left behind"


def test_watch_with_a_timeout_within_its_cap_runs_the_child_to_its_end(tmp_path: Path) -> None:
    """--timeout 2200000 is under a year but over poll()'s C int of milliseconds: a crash there left the child."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "agpt.watch",
            "--timeout",
            "2200000",
            "--",
            sys.executable,
            "-c",
            "import time; print('step=1', flush=True); time.sleep(1)",
        ],
        capture_output=True,
        text=True,
        env=agpt_env(),
        timeout=60,
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == "step=1\n"


def fifo_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "attempts").mkdir(parents=True)
    (run / "hosts").mkdir()
    (run / "hosts" / "active").write_text("h1\n")
    os.mkfifo(run / "attempts" / "j.1.log")
    ev = {"event": "attempt", "jobid": "j", "attempt": 1, "rc": 1, "class": "crash", "log": "attempts/j.1.log",
          "started": 1.0, "ended": 2.0}  # fmt: skip
    (run / "events.jsonl").write_text(json.dumps(ev) + "\n")
    return run


def test_failover_report_never_blocks_on_a_fifo_as_a_log(tmp_path: Path) -> None:
    run = fifo_run(tmp_path)
    r = subprocess.run(
        [sys.executable, "-m", "agpt.failover", "report", str(run)],
        capture_output=True,
        text=True,
        env=agpt_env(),
        timeout=60,
    )
    assert r.returncode == 0 and "j    1" in r.stdout, r.stdout + r.stderr


def test_plan_report_at_a_stop_never_blocks_on_a_fifo_as_a_log(tmp_path: Path) -> None:
    run = fifo_run(tmp_path)
    fifo2 = run / "attempts" / "j.2.log"
    os.mkfifo(fifo2)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "agpt.failover",
            "plan",
            "--run-dir",
            str(run),
            "--jobid",
            "j",
            "--attempt",
            "2",
            "--rc",
            "1",
            "--log",
            str(fifo2),
            "--max-attempts",
            "2",
            "--apply",
            "--shell",
            "--report",
        ],
        capture_output=True,
        text=True,
        env=agpt_env(),
        timeout=60,
    )
    assert r.stdout.startswith("stop "), r.stdout + r.stderr
    assert "failover report" in r.stderr


def test_a_reader_refuses_a_device_as_a_record(tmp_path: Path) -> None:
    from agpt import rundir

    for dev in ("/dev/zero", "/dev/urandom"):
        try:
            rundir.open_regular(Path(dev)).close()
        except OSError as e:
            assert "not a regular file" in str(e)
        else:
            raise AssertionError(f"{dev} was read as a file")


def wait_for(path: Path, within: float = 60.0) -> None:
    end = time.monotonic() + within
    while not (path.exists() and path.read_text().strip()) and time.monotonic() < end:
        time.sleep(0.05)
    assert path.exists(), f"{path} never appeared"


def test_preflight_killed_by_sigterm_ends_the_launch_and_removes_its_host_file(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    exe = fake_launcher(tmp_path, LINGER.format(pidfile=pidfile))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = agpt_env({"AGPT_SITE": "generic", "LAUNCH_MPIEXEC": str(exe), "LAUNCH_LAUNCHER": "hydra",
                    "TMPDIR": str(tmp)})  # fmt: skip
    p = subprocess.Popen([sys.executable, "-m", "agpt.preflight", "h1"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    wait_for(pidfile)
    assert list(tmp.glob("agpt-preflight.*")), "preflight made no host file"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 128 + signal.SIGTERM
    assert wait_gone(int(pidfile.read_text())), "the launch outlived preflight"
    assert not list(tmp.glob("agpt-preflight.*")), "preflight's host file was left behind"


def test_hosts_each_killed_by_sigterm_ends_every_hook(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "hosts").mkdir(parents=True)
    (run / "hosts" / "active").write_text("h1\nh2\n")
    cmd = "true {host}; " + LINGER.format(pidfile=f"{tmp_path}/pid.{{host}}")
    p = subprocess.Popen([sys.executable, "-m", "agpt.failover", "hosts", "each", "--run-dir", str(run),
                          "--timeout", "300", "--cmd", cmd], env=agpt_env(), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    pids = [tmp_path / "pid.h1", tmp_path / "pid.h2"]
    for f in pids:
        wait_for(f)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 128 + signal.SIGTERM
    for f in pids:
        assert wait_gone(int(f.read_text())), f"{f.name}'s hook outlived hosts each"
