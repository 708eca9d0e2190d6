"""Helpers for the trainer tests: launch `agpt train` under the real mpiexec, kill ranks, parse lines.

Each rank is a fork of a server that imported torch and the trainer once (agpt_zygote.py: a rank's start is
most of a tiny test run's CPU time); AGPT_TEST_ZYGOTE=0 starts every rank plainly through bin/agpt, as does
`plain=True` where a test is about the start itself."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, agpt_env

TINY = ROOT / "jobs" / "configs" / "tiny.yaml"
MPIEXEC = ROOT / ".venv" / "bin" / "mpiexec"
AGPT = ROOT / "bin" / "agpt"
STEP_RE = re.compile(r"^step=(\d+) ")
# Losses of two layouts over the same global batch (dp 2 x tp 2 against dp 4, 3 data ranks against 4) differ
# only by reduction order (bf16 compute): measured max relative difference 4e-5 over the 30 steps of
# test_train_tp.py, 3.6e-4 to 4.8e-4 over the 160 steps test_shrink_cluster.py had (33-100 of them on 3 ranks),
# 1.7e-4 over the 80 it has (58 on 3 ranks).
LOSS_RTOL = 1e-3


ZYGOTE = Path(__file__).resolve().parent / "agpt_zygote.py"
_zygote: dict[str, object] = {}


def _zygote_socket() -> str | None:
    """The fork server's socket, started on first use (one per pytest process); None when it is off."""
    if os.environ.get("AGPT_TEST_ZYGOTE") == "0":
        return None
    if "socket" not in _zygote:
        folder = tempfile.mkdtemp(prefix="agpt-zygote-")
        sock = os.path.join(folder, "s")
        env = agpt_env({"OMP_NUM_THREADS": "1"})
        proc = subprocess.Popen([sys.executable, str(ZYGOTE), "serve", sock], env=env, stdout=subprocess.PIPE,
                                text=True)  # fmt: skip
        assert proc.stdout is not None
        ready = proc.stdout.readline().strip()
        assert ready == "ready", f"agpt_zygote did not start (printed {ready!r}, rc {proc.poll()})"

        def stop() -> None:
            proc.kill()
            proc.wait()
            shutil.rmtree(folder, ignore_errors=True)

        atexit.register(stop)
        _zygote["socket"] = sock
    return str(_zygote["socket"])


def agpt_cmd(plain: bool = False) -> list[str]:
    """What starts one rank of `agpt ...`: the fork server's client, or bin/agpt (PLAIN, or the server off)."""
    if plain or _zygote_socket() is None:
        return [str(AGPT)]
    return [sys.executable, "-S", str(ZYGOTE), "agpt"]


def script_cmd(module: str) -> list[str]:
    """What starts one rank of MODULE.py, a script in this folder: the fork server's client (`-m MODULE`: the
    server's sys.path has this folder), or the venv's python."""
    if _zygote_socket() is None:
        return [sys.executable, str(Path(__file__).resolve().parent / f"{module}.py")]
    return [sys.executable, "-S", str(ZYGOTE), "-m", module]


def forked_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """agpt_env with the fork server's socket, for a command started with agpt_cmd()."""
    sock = _zygote_socket()
    return agpt_env({**({"AGPT_TEST_ZYGOTE": sock} if sock else {}), **(extra or {})})


def train_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """agpt_env with one OpenMP thread per rank (the test machine's cores are shared and loaded), and the fork
    server's socket."""
    return forked_env({"OMP_NUM_THREADS": "1", **(extra or {})})


ZYGOTE_PYTHON = ZYGOTE.parent / "zygote-python"


def srun_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """train_env for a job on the local Slurm cluster: bin/agpt's ranks of `agpt train` (and the health sweep's
    probes) there are forks of this process's server too (AGPT_PYTHON is zygote-python; AGPT_TEST_ZYGOTE=0
    leaves them plain)."""
    env = train_env(extra)
    if env.get("AGPT_TEST_ZYGOTE", "0") != "0":
        env["AGPT_TEST_PYTHON"] = env.get("AGPT_PYTHON", sys.executable)
        env["AGPT_PYTHON"] = str(ZYGOTE_PYTHON)
    return env


def train_cmd(ranks: int, run_dir: Path, *args: str, plain: bool = False) -> list[str]:
    base = [*agpt_cmd(plain), "train", "--config", str(TINY), "--run-dir", str(run_dir), *args]
    if ranks == 1:
        return base
    return [str(MPIEXEC), "-n", str(ranks), *base]


def nodes_cmd(hosts: list[str], run_dir: Path, *args: str, per_node: int = 1) -> list[str]:
    """`mpiexec` of `agpt train` on this host as if on the nodes HOSTS (PER_NODE ranks each): each block of ranks
    gets its node's name (AGPT_HEARTBEAT_HOST), which keys the node-local folders (agpt.nodelocal)."""
    cmd: list[str] = [str(MPIEXEC)]
    for i, host in enumerate(hosts):
        cmd += [":"] * bool(i) + ["-n", str(per_node), "-env", "AGPT_HEARTBEAT_HOST", host]
        cmd += [*agpt_cmd(), "train", "--config", str(TINY), "--run-dir", str(run_dir), *args]
    return cmd


def run_nodes(hosts: list[str], run_dir: Path, *args: str, env: dict[str, str] | None = None,
              per_node: int = 1) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(nodes_cmd(hosts, run_dir, *args, per_node=per_node), env=train_env(env),
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def run_train(ranks: int, run_dir: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300,
              plain: bool = False):  # fmt: skip
    return subprocess.run(
        train_cmd(ranks, run_dir, *args, plain=plain),
        env=train_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def trained(tmp_path_factory: pytest.TempPathFactory, name: str, ranks: int, *args: str,
            env: dict[str, str] | None = None) -> tuple[Path, str]:  # fmt: skip
    """A finished run for a module fixture: its run directory and standard output."""
    run = tmp_path_factory.mktemp(name)
    r = run_train(ranks, run, *args, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return run, r.stdout


@contextlib.contextmanager
def training(ranks: int, run_dir: Path, *args: str, log: Path,
             env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:  # fmt: skip
    """`agpt train` in the background, its output in LOG; killed if it still runs when the block ends."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(train_cmd(ranks, run_dir, *args), env=train_env(env), stdout=fh, stderr=fh)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def logged(log: Path, step: int):  # type: ignore[no-untyped-def]
    """A condition for wait_for: LOG holds the progress line of STEP."""
    return lambda: f"\nstep={step} " in log.read_text()


def same_steps(out: str, ref: str, first: int, last: int) -> None:
    """OUT logged exactly steps FIRST..LAST, each with REF's loss and grad norm to the last digit."""
    got, want = step_lines(out), step_lines(ref)
    assert sorted(got) == list(range(first, last + 1))
    assert [got[s] for s in range(first, last + 1)] == [want[s] for s in range(first, last + 1)]


def smoke(baseline: Path, *args: str, ranks: int = 1, steps: int = 50) -> subprocess.CompletedProcess[str]:
    """`agpt smoke --steps STEPS --baseline BASELINE ARGS` (under mpiexec with RANKS > 1)."""
    cmd = [*agpt_cmd(), "smoke", "--steps", str(steps), "--baseline", str(baseline), *args]
    if ranks > 1:
        cmd = [str(MPIEXEC), "-n", str(ranks), *cmd]
    return subprocess.run(cmd, env=train_env(), capture_output=True, text=True, timeout=300)


def step_lines(text: str) -> dict[int, str]:
    """step -> the line's `loss=... grad_norm=...` part (what must match bit for bit)."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        m = STEP_RE.match(line)
        if m:
            fields = dict(tok.split("=", 1) for tok in line.split())
            out[int(m.group(1))] = f"loss={fields['loss']} grad_norm={fields['grad_norm']}"
    return out


def losses(text: str) -> dict[int, float]:
    return {s: float(v.split()[0][5:]) for s, v in step_lines(text).items()}


def descendants(pid: int) -> list[int]:
    """All processes below pid (from /proc), so a test can kill -9 every rank the way a node failure does."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def rank_pids(launcher_pid: int) -> list[int]:
    pids = []
    for p in descendants(launcher_pid):
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes()
        except OSError:
            continue
        if b"agpt" in cmd and b"hydra" not in cmd:
            pids.append(p)
    return pids


def kill_ranks(launcher_pid: int, sig: int = signal.SIGKILL) -> int:
    pids = rank_pids(launcher_pid)
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
    return len(pids)


def wait_for(pred, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process ended (rc {proc.returncode}) before {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def copy_ckpt(src_run: Path, dst_run: Path, *steps: int) -> Path:
    """DST_RUN holding copies of SRC_RUN's checkpoints at STEPS; returns DST_RUN."""
    (dst_run / "ckpt").mkdir(parents=True, exist_ok=True)
    for s in steps:
        shutil.copytree(src_run / "ckpt" / f"step-{s}", dst_run / "ckpt" / f"step-{s}")
    return dst_run


def two_more_steps(src_run: Path, dst_run: Path, ranks: int, decay_steps: int, rel: float,
                   ref: str) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Steps 21 and 22 on RANKS ranks from a copy of SRC_RUN's step-20 (the schedule of a DECAY_STEPS run), their
    losses within REL of REF's: resuming at another layout continues the same curve."""
    copy_ckpt(src_run, dst_run, 20)
    r = run_train(ranks, dst_run, "--steps", "22", "--ckpt-interval", "0", "--set", f"optim.decay_steps={decay_steps}",
                  "--set", "checkpoint.save_final=false")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    got, want = losses(r.stdout), losses(ref)
    assert sorted(got) == [21, 22]
    for s in (21, 22):
        assert got[s] == pytest.approx(want[s], rel=rel)
    return r


def ckpt_steps(run_dir: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in (run_dir / "ckpt").iterdir() if p.name.startswith("step-"))


def kill_9_when(ranks: int, run_dir: Path, log: Path, args: tuple[str, ...] | list[str], *waits,  # type: ignore[no-untyped-def]
                env: dict[str, str] | None = None, timeout: float = 180) -> None:  # fmt: skip
    """Start `agpt train` on `ranks` ranks (output in `log`), wait for each (predicate, what) in turn, then
    kill -9 every rank, as a node failure does."""
    with training(ranks, run_dir, *args, log=log, env=env) as proc:
        for pred, what in waits:
            wait_for(pred, timeout, what, proc)
        assert kill_ranks(proc.pid) == ranks
        proc.wait(timeout=60)


def kill_9_mid_save(ranks: int, run_dir: Path, log: Path, args: tuple[str, ...] | list[str], *, saved: int,
                    at_step: int, env: dict[str, str] | None = None, timeout: float = 180) -> None:  # fmt: skip
    """kill_9_when checkpoint SAVED is complete and step AT_STEP is logged (the next save is then in flight)."""
    done = (lambda: (run_dir / f"ckpt/step-{saved}/.complete").exists(), f"step-{saved} complete")
    kill_9_when(ranks, run_dir, log, args, done, (logged(log, at_step), f"step {at_step} (a save in flight)"),
                env=env, timeout=timeout)  # fmt: skip
