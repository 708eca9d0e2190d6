"""A tiny run on 2 ranks under the real failover loop, killed once (kill -9 of a rank) and resumed: what operators
see of it.  TensorBoard's reader shows every logged step once and the failure at its step; metrics.prom parses
with the Prometheus parser at every moment and its counters only grow; `agpt monitor --once` prints the figures
`agpt failover report` prints; `agpt report --html` renders in headless chromium.  Then what a broken writer
costs a real training: a warning, never the run."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agpt import rundir
from conftest import ROOT, agpt_env
from observe_util import agpt, browse, ink, loop_job, prom_families, prom_values, tb_events, tb_texts
from train_util import TINY, descendants, run_train

pytestmark = pytest.mark.slow
STEPS = 30
KILL_AT = 13  # a rank is killed once attempt 1 has logged this step; checkpoints every 5 steps


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _job(tmp: Path, run: Path) -> Path:
    """The failover loop (lib/failover.sh) around 2 real `agpt train` ranks on hosts h1 h2, h3 spare: each rank
    thinks it is alone on its host (its heartbeat is heartbeat/<host>.json) and meets the other on localhost."""
    rank = (f"exec env MASTER_ADDR=127.0.0.1 MASTER_PORT=$(({_free_port()} + FAILOVER_ATTEMPT)) LOCAL_RANK=0 "
            f"LOCAL_WORLD_SIZE=1 AGPT_HEARTBEAT_HOST=$FAKE_TRAINER_HOST OMP_NUM_THREADS=1 agpt train "
            f"--config {TINY} --run-dir {run} --steps {STEPS} --ckpt-interval 5 "
            "--set observe.prometheus_interval_s=0 --set heartbeat.interval_s=1")  # fmt: skip
    return loop_job(tmp, run, f"bash -c '{rank}'", hosts=3, spares=1, timeouts="120 240 2")


def _ranks(pid: int) -> list[int]:
    out = []
    for p in descendants(pid):
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            b"agpt" in cmd
            and b"train" in cmd
            and any(a.endswith(b"python") or b"python3" in a for a in cmd[:1])
        ):
            out.append(p)
    return out


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("killed")
    run = tmp / "run"
    snapshots: list[str] = []
    stop = threading.Event()

    def sample() -> None:  # metrics.prom as a scraper sees it, every 0.1 s, and once more at the end
        last = ""
        while True:
            done = stop.is_set()
            try:
                text = (run / rundir.PROM).read_text()
            except OSError:
                text = ""
            if text and text != last:
                snapshots.append(text)
                last = text
            if done:
                return
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    log = tmp / "job.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", str(_job(tmp, run))], env=agpt_env(), stdout=out, stderr=out,
                                start_new_session=True)  # fmt: skip
        try:
            first = run / "attempts" / "j1.1.log"
            end = time.monotonic() + 300
            while not (first.is_file() and f"step={KILL_AT} " in first.read_text(errors="replace")):
                assert proc.poll() is None and time.monotonic() < end, log.read_text()[-3000:]
                time.sleep(0.1)
            victims = _ranks(proc.pid)
            assert len(victims) == 2, victims
            os.kill(victims[-1], signal.SIGKILL)  # one rank dies as a node failure kills it
            rc = proc.wait(timeout=400)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            stop.set()
            sampler.join()
    assert rc == 0, log.read_text()[-4000:]
    events = [json.loads(x) for x in (run / rundir.EVENTS).read_text().splitlines()]
    attempts = [e for e in events if e.get("event") == "attempt"]
    assert len(attempts) == 2 and attempts[0]["class"] != "success" and attempts[1]["class"] == "success", (
        attempts
    )
    return {"run": run, "tmp": tmp, "snapshots": snapshots, "attempts": attempts}


def test_tensorboard_shows_every_logged_step_once_and_the_failure_at_its_step(killed: dict[str, Any]) -> None:
    run = killed["run"]
    assert len(list((run / rundir.TB).glob("events.out.tfevents.*"))) == 2  # one file per process
    acc = tb_events(run / rundir.TB)
    steps = [e.step for e in acc.Scalars("train/loss")]
    assert steps == list(range(1, STEPS + 1)), steps  # the replayed steps after the resume appear once
    metrics = {}
    for line in (run / rundir.METRICS).read_text().splitlines():
        rec = json.loads(line)
        metrics[rec["step"]] = rec  # the last record of a step is the resumed attempt's
    for e in acc.Scalars("train/loss"):
        assert e.value == pytest.approx(metrics[e.step]["loss"], rel=1e-6)
    failed = killed["attempts"][0]
    marks = [(s, t) for s, t in tb_texts(acc) if t.startswith("failure")]
    assert len(marks) == 1 and marks[0][0] == failed["last_step"] >= KILL_AT, marks
    assert f"failure: {failed['class']} at step {failed['last_step']}, attempt j1.1" in marks[0][1]
    resumed = [s for s, t in tb_texts(acc) if t.startswith("restart")]
    assert len(resumed) == 1 and resumed[0] < failed["last_step"] and resumed[0] % 5 == 0
    assert {"perf/tokens_per_s_per_device", "time/compute_s", "time/wait_s", "time/ckpt_stall_s", "train/lr",
            "train/grad_norm", "perf/peak_mem_bytes"} <= set(acc.Tags()["scalars"])  # fmt: skip
    assert [s for s, _ in tb_texts(acc, "config")] == [0, resumed[0]]


def test_metrics_prom_always_parses_and_its_counters_only_grow(killed: dict[str, Any]) -> None:
    snaps = killed["snapshots"]
    assert len(snaps) > 10, len(snaps)
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for text in snaps:
        fams = prom_families(text)  # never a half-written file: every snapshot parses
        for fam in fams.values():
            if fam.type != "counter":
                continue
            for s in fam.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                assert s.value >= seen.get(key, 0), (key, s.value, seen.get(key))
                seen[key] = s.value
    final = prom_values(snaps[-1])
    assert final[("agpt_failures_total", ())] == 1
    assert sum(v for (n, _), v in final.items() if n == "agpt_attempts_total") == 2
    assert final[("agpt_step", ())] == STEPS and final[("agpt_steps_target", ())] == STEPS
    steps = [prom_values(t).get(("agpt_step", ())) for t in snaps]
    assert max(s for s in steps if s is not None) == STEPS


def test_monitor_once_prints_the_figures_the_report_prints(killed: dict[str, Any]) -> None:
    run = killed["run"]
    mon = agpt("monitor", str(run), "--once")
    assert mon.returncode == 0, mon.stderr
    rep = agpt("failover", "report", str(run))
    tail = rep.stdout.split("\n\n")[-1].splitlines()
    assert any(line.startswith("recovery clock after j1.1") and "first step back" in line for line in tail)
    for (
        line
    ) in tail:  # attempts, swaps, steps made, time lost, verdict, goodput, recovery clock: the same words
        if not line.startswith("note:"):
            assert line in mon.stdout, line
    tokens = STEPS * 8 * 64
    assert re.search(rf"step\s+{STEPS} / {STEPS} \(100\.0%\)\s+ETA 0s", mon.stdout), mon.stdout
    assert (
        f"tokens        {tokens:,} / {tokens:,} (100.0%)" in mon.stdout
        or f"{tokens:,} / {tokens:,}" in mon.stdout
    )
    assert re.search(r"tokens/s on 2 devices \([\d,.]+ per device\)", mon.stdout)
    failed = killed["attempts"][0]
    assert f"j1.1 {failed['class']} at step {failed['last_step']} (rc {failed['rc']})" in mon.stdout
    assert "active 2, spare 0" in mon.stdout and "heartbeats  oldest first: h" in mon.stdout


def test_report_html_of_the_run_renders_in_headless_chromium(killed: dict[str, Any], tmp_path: Path) -> None:
    page = tmp_path / "run.html"
    r = agpt("report", str(killed["run"]), "--html", str(page))
    assert r.returncode == 0, r.stderr
    dom, shot = browse(page, tmp_path)
    n_img = page.read_text().count("<img ")
    assert n_img == 3 and f'data-plots-loaded="{n_img}"' in dom
    assert "j1.1" in dom and "Goodput" in dom and "where the time went" in dom
    assert ink(shot) > 0.03


# -- what a broken writer costs a real training ------------------------------------------------------------
def _readonly(path: Path) -> list[str]:
    """A command prefix that runs its command with PATH mounted read-only (root: a private read-only bind
    mount; anyone else: the folder's write bits off)."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        return []
    assert shutil.which("unshare"), "unshare (util-linux) is needed to make a read-only folder as root"
    return ["unshare", "-m", "sh", "-c", f'mount --bind "{path}" "{path}" && mount -o remount,bind,ro "{path}" '
            f'"{path}" && exec "$@"', "sh"]  # fmt: skip


def test_unwritable_writers_and_torn_files_cost_a_warning_each_not_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / rundir.TB).mkdir(parents=True)
    (run / rundir.PROM).mkdir()  # metrics.prom cannot be replaced: a folder is in its way
    (run / rundir.PROM / "keep").write_text("x")
    for name in (rundir.EVENTS, rundir.HEALTH, rundir.METRICS):
        (run / name).write_text('{"event": "attempt", "jobid": "j0", "attempt": 1, "rc": 1')  # torn by a kill
    from train_util import train_cmd, train_env

    # plain: a rank forked by the test's fork server would not be in the read-only mount's namespace
    r = subprocess.run([*_readonly(run / rundir.TB), *train_cmd(1, run, "--steps", "6", plain=True)], env=train_env(),
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert len([ln for ln in r.stdout.splitlines() if ln.startswith("step=")]) == 6
    warnings = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("agpt: warning: observe")]
    assert len(warnings) == 2, warnings
    assert "observe.tensorboard: cannot start (OSError: [Errno 30] Read-only file system" in warnings[0] or (
        os.geteuid() != 0 and "Permission denied" in warnings[0]
    )
    assert "observe.prometheus:" in warnings[1] and "training goes on without it" in warnings[1]
    assert "Traceback" not in r.stdout + r.stderr
    assert not list((run / rundir.TB).iterdir())


def test_a_missing_tensorboardx_costs_one_warning(tmp_path: Path) -> None:
    shim = tmp_path / "shim" / "tensorboardX"
    shim.mkdir(parents=True)  # what an environment without the extra looks like to `import tensorboardX`
    (shim / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tensorboardX'\", name='tensorboardX')\n"
    )
    env = {"PYTHONPATH": f"{shim.parent}:{ROOT / 'python'}"}
    r = run_train(
        1, tmp_path / "run", "--steps", "3", env=env, plain=True
    )  # (the fork server has it imported)
    assert r.returncode == 0, r.stdout + r.stderr
    warnings = [ln for ln in r.stdout.splitlines() if ln.startswith("agpt: warning: observe")]
    assert warnings == ["agpt: warning: observe.tensorboard: tensorboardX is not installed "
                        "(pip install 'agpt[tensorboard]'); training goes on without it"]  # fmt: skip
    assert (tmp_path / "run" / rundir.PROM).is_file()


def test_a_rollback_is_a_marker_and_its_replayed_steps_show_once(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = run_train(1, run, "--steps", "12", "--ckpt-interval", "4", "--set", "train.on_nonfinite=rollback",
                  env={"AGPT_FAULT_NAN_AT": "7"})  # fmt: skip
    assert r.returncode == 0 and "event: rollback" in r.stdout, r.stdout + r.stderr
    acc = tb_events(run / rundir.TB)
    assert [e.step for e in acc.Scalars("train/loss")] == list(range(1, 13))
    logged = {}
    for line in (run / rundir.METRICS).read_text().splitlines():
        rec = json.loads(line)
        logged[rec["step"]] = rec["loss"]  # steps 5 and 6 were logged twice: before and after the rollback
    assert {e.step: e.value for e in acc.Scalars("train/loss")} == pytest.approx(logged, rel=1e-6)
    assert [(s, t) for s, t in tb_texts(acc) if t.startswith("rollback")] == [
        (7, "rollback: nonfinite_loss at step 7; reloaded step 4, skipping batches [5, 7]")
    ]
