"""Kill on evidence: `agpt watch --kill-on / --heartbeat-dir` ends an attempt at once when the launcher says a node
failed or a task died, or the heartbeats show a host stopped; the grace stays for everything else.

Real child processes that ignore SIGTERM and would outlive a --grace of 600 s: the watch returning at all (the
subprocess timeout is the bound) is the behaviour; no wall-clock assert."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from agpt.failover import patterns
from agpt.heartbeat import format as hbformat
from conftest import agpt_env

PY = sys.executable
STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("step=3 loss 2.1 pid=%d" % __import__("os").getpid(), flush=True)
print({line!r}, file=sys.stderr, flush=True)
time.sleep({sleep})
"""


def ends_file(tmp: Path) -> Path:
    f = tmp / "ends.json"
    f.write_text(json.dumps(patterns.ends(patterns.load(patterns.DEFAULT_SETS))))
    return f


def run_watch(tmp: Path, line: str, *extra: str, sleep: float = 600, env: dict[str, str] | None = None,
              ) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:  # fmt: skip
    times = tmp / "t.json"
    child = [PY, "-c", textwrap.dedent(STUBBORN.format(line=line, sleep=sleep))]
    proc = subprocess.run(
        [PY, "-m", "agpt.watch", "--timeout", "0", "--grace", "600", "--evidence-grace", "0.2",
         "--times", str(times), *extra, "--", *child],
        capture_output=True, text=True, env={**agpt_env(), **(env or {})}, timeout=120,
    )  # fmt: skip
    return proc, json.loads(times.read_text()) if times.exists() else {}


def test_a_launchers_node_failure_line_ends_the_attempt_without_the_grace(tmp_path: Path) -> None:
    line = "srun: error: Node failure on n3"
    proc, times = run_watch(tmp_path, line, "--kill-on", str(ends_file(tmp_path)))
    assert proc.returncode == 137  # SIGTERM ignored: SIGKILL after the evidence grace, not after 600 s
    assert f"agpt watch: evidence: {line} [srun.node_failure]; SIGTERM to process group" in proc.stderr
    assert times["evidence"] == f"{line} [srun.node_failure]"
    assert times["detected"] <= times["ended"]  # type: ignore[operator]


def test_with_detach_teardown_the_watch_returns_and_a_reaper_ends_the_group(tmp_path: Path) -> None:
    # What the failover loop runs: it plans the relaunch while the launcher's teardown goes on.
    line = "srun: error: Node failure on n3"
    proc, times = run_watch(tmp_path, line, "--kill-on", str(ends_file(tmp_path)), "--evidence-grace", "1",
                            "--detach-teardown", sleep=600)  # fmt: skip
    assert proc.returncode == 137 and times["evidence"] == f"{line} [srun.node_failure]"
    pid = int(re.search(r"pid=(\d+)", proc.stdout).group(1))  # type: ignore[union-attr]
    for _ in range(300):  # the reaper's SIGKILL after the evidence grace (the child ignores SIGTERM)
        if not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"pid {pid} outlived the reaper")


def test_a_task_killed_by_a_signal_under_pals_ends_it_too(tmp_path: Path) -> None:
    proc, times = run_watch(tmp_path, "x1002c0s3b0n0: rank 5 died from signal 11",
                            "--kill-on", str(ends_file(tmp_path)))  # fmt: skip
    assert proc.returncode == 137 and "[pals.rank_signal_fault]" in str(times["evidence"])


def test_an_orderly_exit_notice_is_no_evidence(tmp_path: Path) -> None:
    # The trainer's own exit 75 (a save, then every rank stops) must never cut the other ranks' writes short.
    proc, times = run_watch(tmp_path, "srun: error: n1: task 0: Exited with exit code 75",
                            "--kill-on", str(ends_file(tmp_path)), sleep=0.5)  # fmt: skip
    assert proc.returncode == 0 and "evidence" not in times and "evidence" not in proc.stderr


def test_a_task_that_exits_with_an_error_ends_the_attempt_under_srun_and_pals(tmp_path: Path) -> None:
    # Its peers wait in a collective for a rank that is gone; srun (--kill-on-bad-exit) ends the step anyway.
    for line, pid in (("srun: error: n2: task 5: Exited with exit code 1", "srun.task_exit_code"),
                      ("x1002c0s3b0n0: rank 5 exited with code 255", "pals.rank_exit_code")):  # fmt: skip
        proc, times = run_watch(tmp_path, line, "--kill-on", str(ends_file(tmp_path)))
        assert proc.returncode == 137 and times["evidence"] == f"{line} [{pid}]"


def test_a_teardowns_own_exit_notice_is_no_evidence(tmp_path: Path) -> None:
    # 143 and 137: tasks the launcher (or a pre-emption) terminated; a save may be under way.
    proc, times = run_watch(tmp_path, "x1002c0s3b0n0: rank 5 exited with code 143",
                            "--kill-on", str(ends_file(tmp_path)), sleep=0.5)  # fmt: skip
    assert proc.returncode == 0 and "evidence" not in times


def test_a_bad_kill_on_file_is_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "ends.json"
    bad.write_text("{not json")
    proc, _ = run_watch(tmp_path, "x", "--kill-on", str(bad), sleep=0)
    assert (
        proc.returncode == 2
        and f"--kill-on {bad}: not JSON" in proc.stderr
        and "Traceback" not in proc.stderr
    )


def record(host: str, ranks: list[tuple[int, float, str]], attempt: str = "9.1") -> dict[str, object]:
    return {"format": hbformat.FORMAT, "attempt": attempt, "host": host, "seq": 20, "interval_s": 0.2,
            "tick_s": 0.05, "up_s": 20.0, "time": 0.0, "local_size": len(ranks),
            "ranks": [{"rank": r, "local_rank": i, "pid": 1000 + r, "step": 4, "phase": "collective",
                       "phase_s": 9.0, "step_s": 9.5, "compute_s": 0.1, "tick": 50, "stalled_s": stalled,
                       "age_s": 0.1, "state": state} for i, (r, stalled, state) in enumerate(ranks)]}  # fmt: skip


def test_a_host_the_heartbeats_show_stopped_ends_a_silent_attempt_as_a_hang(tmp_path: Path) -> None:
    hb = tmp_path / "heartbeat"
    hb.mkdir()
    hosts = ["n1", "n2", "n3", "n4"]
    for i, h in enumerate(hosts):
        frozen = h == "n3"
        recs = [(2 * i, 8.4 if frozen else 0.1, "T" if frozen else "S"), (2 * i + 1, 0.1, "S")]
        (hb / f"{h}.json").write_text(json.dumps(record(h, recs)))
    proc, times = run_watch(tmp_path, "NCCL waiting", "--heartbeat-dir", str(hb),
                            env={"AGPT_ATTEMPT_ID": "9.1", "FAILOVER_HOSTS": ",".join(hosts),
                                 "AGPT_HEARTBEAT_INTERVAL_S": "0.2"})  # fmt: skip
    assert proc.returncode == 124  # the watchdog's hang: the classifier's heartbeats then name the host
    assert "heartbeat: n3 stopped: rank 4" in str(times["evidence"])


def test_heartbeats_of_another_attempt_are_no_evidence(tmp_path: Path) -> None:
    hb = tmp_path / "heartbeat"
    hb.mkdir()
    for i, h in enumerate(["n1", "n2", "n3"]):
        recs = [(i, 8.4 if h == "n3" else 0.1, "T" if h == "n3" else "S")]
        (hb / f"{h}.json").write_text(json.dumps(record(h, recs, attempt="8.1")))
    proc, times = run_watch(tmp_path, "x", "--heartbeat-dir", str(hb), sleep=2,
                            env={"AGPT_ATTEMPT_ID": "9.1", "FAILOVER_HOSTS": "n1,n2,n3",
                                 "AGPT_HEARTBEAT_INTERVAL_S": "0.2"})  # fmt: skip
    assert proc.returncode == 0 and "evidence" not in times


def test_every_ends_pattern_is_a_launchers_node_failure_or_task_death() -> None:
    found = [p for p in patterns.load(patterns.DEFAULT_SETS) if p.ends]
    assert {p.set_name for p in found} == {"srun", "pals", "hydra", "openmpi"}
    assert all(p.cls in ("node", "crash") for p in found)
    for p in (p for p in found if "code" in p.groups):  # an exit code may be the trainer's orderly 75
        for ex in p.positive:
            m = p.regex.search(ex.line)
            assert m is not None and m.group("code") not in ("75", "137", "143")
            for code in ("75", "137", "143"):
                assert not p.regex.search(ex.line[: m.start("code")] + code + ex.line[m.end("code") :]), (
                    p.id,
                    code,
                )
