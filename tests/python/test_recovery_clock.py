"""The recovery clock: detection, teardown, relaunch, process start, model build, state restore (and its tier) and
the first step, in order and on one clock, and `agpt failover report`'s breakdown with the mean per stage."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from agpt import goodput
from conftest import BIN, agpt_env
from failover_util import plan_cli, run_with_attempt


def test_a_process_start_is_never_before_its_launch() -> None:
    """The demo showed "relaunched +15.9 s, process up +15.5 s": the start came from /proc/stat's whole-second
    btime.  A stamp taken before the spawn must not be after the start the process computes for itself."""
    code = "from agpt.train import clock; print(clock.process_start())"
    for _ in range(5):
        launched = time.time()
        out = subprocess.run([sys.executable, "-c", code], env=agpt_env(), capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert float(out.stdout) >= launched - goodput.CLOCK_RES_S  # the kernel's tick, and no more


def test_watch_times_the_attempts_end(tmp_path: Path) -> None:
    """--times: the last progress line, the first output after it (detection), the end (teardown done)."""
    script = (
        "echo step=1; sleep 0.2; echo step=2; sleep 0.3; echo 'error: rank 1 lost' >&2; sleep 0.6; exit 3"
    )
    times = tmp_path / "a.times.json"
    r = subprocess.run([str(BIN / "agpt-watch"), "--timeout", "30", "--log", str(tmp_path / "a.log"), "--times",
                        str(times), "--", "bash", "-c", script], env=agpt_env(), capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 3, r.stderr
    t = json.loads(times.read_text())
    assert (
        t["last_progress"] + 0.2 <= t["detected"] <= t["ended"] - 0.4
    )  # the sleeps bound each stage (read latency aside)
    # A hang: detected when the idle limit fires.
    r = subprocess.run([str(BIN / "agpt-watch"), "--timeout", "1", "--grace", "1", "--log", str(tmp_path / "b.log"),
                        "--times", str(times), "--", "bash", "-c", "echo step=1; exec sleep 60"],
                       env=agpt_env(), capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 124, r.stderr
    t = json.loads(times.read_text())
    assert t["last_progress"] + 0.9 <= t["detected"] <= t["ended"]


def test_the_report_breaks_each_recovery_into_stages_in_order_with_the_mean(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "attempts").mkdir(parents=True)
    t0 = 1_800_000_000.0
    hosts = ["n1", "n2"]

    def attempt(n: int, rc: int, cls: str, started: float, ended: float, **kw: float) -> dict[str, object]:
        return {"event": "attempt", "jobid": "7", "attempt": n, "rc": rc, "class": cls, "first_step": 1,
                "last_step": 10 * n, "started": t0 + started, "ended": t0 + ended, "hosts": hosts,
                **{k: t0 + v for k, v in kw.items()}}  # fmt: skip

    def clock(n: int, tier: str, *marks: float) -> dict[str, object]:
        keys = ("started", "built", "loaded", "first_step")
        return {"event": "clock", "jobid": "7", "attempt": n, **{k: t0 + v for k, v in zip(keys, marks, strict=True)},
                "step": 10, "tier": tier, "from_partner": [1] if tier == "local" else []}  # fmt: skip

    events = [
        attempt(1, 137, "node", 0, 100, last_progress=95.0, detected=96.0),
        clock(2, "local", 108.0, 112.0, 112.5, 113.0),
        attempt(2, 137, "node", 107, 200, last_progress=190.0, detected=192.0),
        clock(3, "global", 212.0, 216.0, 226.0, 227.0),
        attempt(3, 0, "success", 210, 300),
    ]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    r = subprocess.run([str(BIN / "agpt"), "failover", "report", str(run), "--json"], env=agpt_env(),
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["goodput"]["recovery"]
    assert list(rows[0]["stages"].items()) == [
        ("detection", 1.0), ("teardown", 4.0), ("relaunch", 7.0), ("process start", 1.0), ("model build", 4.0),
        ("state restore", 0.5), ("first step", 0.5)]  # fmt: skip
    assert (rows[0]["tier"], rows[0]["total_s"], rows[1]["tier"], rows[1]["total_s"]) == (
        "local",
        18.0,
        "global",
        37.0,
    )
    text = subprocess.run([str(BIN / "agpt"), "failover", "report", str(run)], env=agpt_env(), capture_output=True,
                          text=True).stdout  # fmt: skip
    assert ("recovery clock after 7.1 (node): detection 1.0 s, teardown 4.0 s, relaunch 7.0 s, process start 1.0 s, "
            "model build 4.0 s, state restore 0.5 s (local tier), first step 0.5 s; first step back 18.0 s after its "
            "last progress") in text  # fmt: skip
    assert ("recovery clock, mean of 2 failures: detection 1.5 s, teardown 6.0 s, relaunch 8.5 s, process start "
            "1.5 s, model build 4.0 s, state restore 5.2 s, first step 0.8 s; first step back 27.5 s after its last "
            "progress") in text  # fmt: skip


def test_a_stage_within_the_clocks_resolution_is_zero_and_a_missing_mark_leaves_it_unknown() -> None:
    marks = {"detected": 10.0, "ended": 12.0, "relaunched": 15.0, "started": 14.99, "built": None, "loaded": 20.0,
             "first_step": 21.0}  # fmt: skip
    assert goodput._stages(9.0, marks) == {
        "detection": 1.0, "teardown": 2.0, "relaunch": 3.0, "process start": 0.0, "model build": None,
        "state restore": 5.0, "first step": 1.0}  # fmt: skip


def test_the_failover_plan_records_the_watchs_times_in_the_attempts_event(tmp_path: Path) -> None:
    run, log = run_with_attempt(
        tmp_path, ["n1", "n2"], ["n3"], "step=4 loss=1\nsrun: error: Node failure on n2\n"
    )
    log.with_name("j.1.times.json").write_text('{"last_progress": 1800000000.5, "detected": 1800000003.25}\n')
    r = plan_cli(run, "--jobid", "j", "--attempt", "1", "--rc", "1", "--log", str(log), "--started", "1799999990",
                 "--ended", "1800000004", "--apply")  # fmt: skip
    assert r.returncode == 0, r.stderr
    ev = json.loads((run / "events.jsonl").read_text().splitlines()[0])
    assert (ev["last_progress"], ev["detected"], ev["ended"]) == (1800000000.5, 1800000003.25, 1800000004.0)
