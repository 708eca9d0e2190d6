"""Heartbeats: one bounded file per node, the evidence read back from them, stragglers, and the classifier hook.

The end-to-end cases run the fake trainer as 6 real processes (3 hosts x 2 ranks, file barrier), freeze or stall
one with a real SIGSTOP or a sleep, kill them as the watchdog would, and classify the attempt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agpt.failover.classify import apply_heartbeats
from agpt.failover.decide import Classification
from agpt.heartbeat import format as hbformat
from agpt.heartbeat import reader as hbs
from agpt.heartbeat import writer as heartbeat
from agpt.heartbeat.straggler import StragglerMonitor
from agpt.train import faults

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fixtures" / "fake_trainer.py"
ATT = "77.1"


def rank(r: int, *, step: int = 4, phase: str = "collective", phase_s: float = 9.0, step_s: float = 9.5,
         stalled_s: float = 0.2, tick: int = 50, compute_s: float | None = 0.1, state: str = "S") -> dict[str, Any]:  # fmt: skip
    return {"rank": r, "local_rank": r % 2, "pid": 1000 + r, "step": step, "phase": phase, "phase_s": phase_s,
            "step_s": step_s, "compute_s": compute_s, "tick": tick, "stalled_s": stalled_s, "age_s": 0.1,
            "state": state}  # fmt: skip


def node(host: str, ranks: list[dict[str, Any]], *, seq: int = 20, attempt: str = ATT, t: float = 0.0) -> dict[str, Any]:  # fmt: skip
    return {"format": hbformat.FORMAT, "attempt": attempt, "host": host, "seq": seq, "interval_s": 1.0,
            "tick_s": 0.25, "up_s": 20.0, "time": t, "local_size": 2, "ranks": ranks}  # fmt: skip


def write(d: Path, recs: list[dict[str, Any]]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for r in recs:
        (d / f"{r['host']}.json").write_text(json.dumps(r))
    return d


HOSTS = ["n1", "n2", "n3", "n4"]


def healthy(host: str, i: int, **kw: Any) -> dict[str, Any]:
    return node(host, [rank(2 * i, **kw), rank(2 * i + 1, **kw)])


def test_a_rank_frozen_under_a_live_publisher_names_its_host(tmp_path: Path) -> None:
    recs = [healthy(h, i) for i, h in enumerate(HOSTS)]
    recs[2]["ranks"][1].update(stalled_s=8.4, tick=31, state="T", phase="forward", phase_s=0.1)
    f = hbs.attribute(write(tmp_path, recs), HOSTS, ATT)
    assert f.bad_hosts == ["n3"]
    assert "rank 5 tick 31 unchanged for 8.4 s (process state T: stopped)" in f.evidence[0]


def test_a_frozen_publisher_shows_as_a_record_that_stopped_early_in_the_step(tmp_path: Path) -> None:
    # n2's wall clock is an hour off: never read; its record stopped 0.3 s into step 4, the others' at ~9.5 s
    recs = [healthy(h, i) for i, h in enumerate(HOSTS)]
    recs[1] = node("n2", [rank(2, phase="forward", phase_s=0.2, step_s=0.3), rank(3, step_s=0.3)], seq=12,
                   t=time.time() + 3600)  # fmt: skip
    f = hbs.attribute(write(tmp_path, recs), HOSTS, ATT)
    assert f.bad_hosts == ["n2"]
    assert "ends 0.3 s into step 4" in f.evidence[0] and "9.5 s" in f.evidence[0]


def test_a_rank_sleeping_in_forward_while_the_others_wait_is_behind(tmp_path: Path) -> None:
    recs = [healthy(h, i) for i, h in enumerate(HOSTS)]
    recs[3]["ranks"][0].update(phase="forward", phase_s=9.4)
    f = hbs.attribute(write(tmp_path, recs), HOSTS, ATT)
    assert f.bad_hosts == ["n4"]
    assert (
        "rank 6 at step 4 in forward for 9.4 s while 7 other rank(s) wait at step 4 in collective"
        in f.evidence[0]
    )


def test_a_rank_at_an_earlier_step_is_behind(tmp_path: Path) -> None:
    recs = [healthy(h, i) for i, h in enumerate(HOSTS)]
    recs[0]["ranks"][1].update(step=3, phase="backward", step_s=10.0)
    assert hbs.attribute(write(tmp_path, recs), HOSTS, ATT).bad_hosts == ["n1"]


def test_everyone_waiting_alike_explains_nothing(tmp_path: Path) -> None:
    f = hbs.attribute(write(tmp_path, [healthy(h, i) for i, h in enumerate(HOSTS)]), HOSTS, ATT)
    assert f.bad_hosts == [] and "not explained" in f.notes[-1]


def test_most_hosts_stopped_is_not_one_hosts_fault(tmp_path: Path) -> None:
    recs = [healthy(h, i, stalled_s=7.0) for i, h in enumerate(HOSTS[:3])] + [healthy("n4", 3)]
    f = hbs.attribute(write(tmp_path, recs), HOSTS, ATT)
    assert f.bad_hosts == []


def test_bad_files_are_ignored_with_a_note_never_blamed(tmp_path: Path) -> None:
    recs = [healthy(h, i) for i, h in enumerate(HOSTS)]
    recs[1] = node("n2", [rank(2, step_s=0.1), rank(3, step_s=0.1)], attempt="77.0")  # an earlier attempt
    d = write(tmp_path, [*recs, node("n9", [rank(20, step_s=0.1)])])
    (d / "n3.json").write_text('{"format": "agpt-heartbeat/1", "host": "n3", "ranks": [{"rank"')  # torn
    (d / ".n4.json.123.tmp").write_text("{")  # a writer's temporary file
    f = hbs.attribute(d, HOSTS, ATT)
    assert f.bad_hosts == []
    text = "\n".join(f.notes)
    assert "n3.json: unreadable or half-written" in text
    assert "n2.json: from attempt 77.0, not 77.1: ignored" in text
    assert "host n9 is not in the job" in text
    assert "no record from n2, n3" in text


def test_no_directory_is_a_note(tmp_path: Path) -> None:
    f = hbs.attribute(tmp_path / "none", HOSTS, ATT)
    assert f.bad_hosts == [] and "no such directory" in f.notes[0]


def test_one_file_per_node_holds_every_local_rank(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shm = tmp_path / "shm"
    a = heartbeat.Heartbeat(run, attempt=ATT, rank=0, host="h1", local_rank=0, local_size=2, interval_s=0.3,
                            tick_s=0.05, local_dir=shm).start()  # fmt: skip
    b = heartbeat.Heartbeat(run, attempt=ATT, rank=1, host="h1", local_rank=1, local_size=2, interval_s=0.3,
                            tick_s=0.05, local_dir=shm).start()  # fmt: skip
    a.phase("forward")
    b.step(3, 0.25)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.1)
        try:
            rec = json.loads((run / "heartbeat" / "h1.json").read_text())
        except (OSError, ValueError):
            continue
        if len(rec["ranks"]) == 2 and rec["ranks"][1]["step"] == 3:
            break
    a.stop()
    b.stop()
    assert sorted(p.name for p in (run / "heartbeat").iterdir()) == ["h1.json"]
    rec = json.loads((run / "heartbeat" / "h1.json").read_text())
    assert rec["attempt"] == ATT and [r["rank"] for r in rec["ranks"]] == [0, 1]
    assert rec["ranks"][1]["compute_s"] == 0.25 and rec["ranks"][0]["tick"] > 0
    # the writer's record is the format's: its fields, and the reader takes it
    assert set(rec) <= {*hbformat.NODE_FIELDS, *hbformat.NODE_OPTIONAL} and set(hbformat.NODE_FIELDS) <= set(
        rec
    )
    fields = {*hbformat.RANK_FIELDS, *hbformat.RANK_PUBLISHED}
    assert all(set(hbformat.RANK_FIELDS) <= set(r) <= fields for r in rec["ranks"])
    assert hbs.read_records(run / hbformat.DIR, ["h1"], ATT)[0] == {"h1": rec}


def test_the_contract_shows_the_formats_node_record() -> None:
    doc = (ROOT / "docs" / "contract.md").read_text()
    section = doc.split(f"### Node record (`heartbeat/<host>.json`, format `{hbformat.FORMAT}`)", 1)[1]
    example = json.loads(section.split("```json", 1)[1].split("```", 1)[0])
    assert example["format"] == hbformat.FORMAT
    assert set(example) == set(hbformat.NODE_FIELDS)
    assert set(example["ranks"][0]) == {*hbformat.RANK_FIELDS, *hbformat.RANK_PUBLISHED}
    assert f"`phase` (one of {', '.join(hbformat.PHASES)})" in " ".join(section.split())


def test_a_rank_that_stopped_is_never_the_leader_of_its_step(tmp_path: Path) -> None:
    """`done` counts as the step's start for the reader: a host whose ranks stopped is the odd one out, not the
    others waiting in the collective it left."""
    recs = [healthy(h, i) for i, h in enumerate(HOSTS)]
    for r in recs[1]["ranks"]:
        r.update(phase="done", phase_s=9.4)
    f = hbs.attribute(write(tmp_path, recs), HOSTS, ATT)
    assert f.bad_hosts == ["n2"] and "in done for 9.4 s while 6 other rank(s) wait" in f.evidence[0]


def test_a_stuck_rank_dumps_its_stacks_into_the_attempts_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    hb = heartbeat.Heartbeat(run, attempt=ATT, rank=0, host="h1", interval_s=0.2, tick_s=0.05,
                             dump_after_s=0.3, local_dir=tmp_path / "shm").start()  # fmt: skip
    hb.phase("collective")
    target = run / "attempts" / f"{ATT}.stacks" / "h1.txt"
    deadline = time.monotonic() + 10
    while not target.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    hb.stop()
    text = target.read_text()
    assert "rank 0" in text and "in phase collective" in text
    assert "test_a_stuck_rank_dumps_its_stacks" in text  # this thread's frame


def test_straggler_monitor_needs_windows_in_a_row_then_asks_for_a_swap(tmp_path: Path) -> None:
    hb_dir = tmp_path / "heartbeat"
    mon = StragglerMonitor(run_dir=tmp_path, attempt=ATT, pct=20, windows=3, swap=True)
    torn = '{"event": "attempt", "jobid": "77", "att'  # a writer killed mid-line
    (tmp_path / "events.jsonl").write_text(torn)
    for seq in range(1, 6):
        recs = [node(h, [rank(2 * i, compute_s=0.1, step=seq), rank(2 * i + 1, compute_s=0.11, step=seq)], seq=seq)
                for i, h in enumerate(HOSTS)]  # fmt: skip
        if seq != 2:  # one window where n3 caught up breaks the streak
            for r in recs[2]["ranks"]:
                r["compute_s"] = 0.3
        write(hb_dir, recs)
        got = mon.poll()
        assert got == ("n3" if seq == 5 else None)
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    ev = [json.loads(x) for x in lines[1:]]  # the event starts on a fresh line (rundir.append_jsonl)
    assert [(e["event"], e["host"], e["action"], e["windows"]) for e in ev] == [
        ("straggler", "n3", "swap", 3)
    ]
    assert hbs.read_swap(hb_dir, ATT)["evidence"].startswith("straggler: n3 computes 0.300 s/step")
    assert hbs.read_swap(hb_dir, "77.2") is None


def test_a_host_waiting_behind_a_stopped_one_is_never_named_a_straggler(tmp_path: Path) -> None:
    """n1 stops at step 5 (its record no longer moves); n2-n4 wait in its collective: their records are republished
    (new seq) at the same step with a growing wait and their last compute.  Only windows in which steps complete
    count: n3's two slow steps before the stop are two windows, not the three that would name it."""
    hb_dir = tmp_path / "heartbeat"
    mon = StragglerMonitor(run_dir=tmp_path, attempt=ATT, pct=20, windows=3, swap=False)
    for seq in range(1, 9):
        step = min(seq, 5)
        recs = [node(h, [rank(2 * i, compute_s=0.1, step=step), rank(2 * i + 1, compute_s=0.1, step=step)],
                     seq=seq if h != "n1" or seq <= 5 else 5) for i, h in enumerate(HOSTS)]  # fmt: skip
        for r in recs[2]["ranks"]:  # n3 waits longest; its last two steps computed 30% slower
            r["step_s"] = 30.0 * seq
            r["compute_s"] = 0.13 if seq >= 4 else 0.1
        write(hb_dir, recs)
        assert mon.poll() is None
    assert not (tmp_path / "events.jsonl").exists()


# --- end to end: real processes --------------------------------------------------------------------------
def launch(run: Path, tmp: Path, faults: str, env_extra: dict[str, str] | None = None) -> list[subprocess.Popen[str]]:  # fmt: skip
    procs = []
    for r in range(6):
        env = {**os.environ, "AGPT_RUN_DIR": str(run), "SLURM_PROCID": str(r), "SLURM_NTASKS": "6",
               "SLURM_LOCALID": str(r % 2), "FAKE_TRAINER_HOST": f"h{r // 2 + 1}",
               "AGPT_HEARTBEAT_HOST": f"h{r // 2 + 1}", "AGPT_ATTEMPT_ID": ATT, "FAILOVER_ATTEMPT": "1",
               "AGPT_HEARTBEAT_INTERVAL_S": "0.5", "AGPT_HEARTBEAT_TICK_S": "0.1", "AGPT_HEARTBEAT_DUMP_S": "2",
               "AGPT_HEARTBEAT_LOCAL_DIR": str(tmp / "shm"), "FAKE_TRAINER_FAULTS": faults,
               **(env_extra or {})}  # fmt: skip
        env.pop("SLURMD_NODENAME", None)
        log = open(tmp / f"rank{r}.log", "w")  # noqa: SIM115
        procs.append(subprocess.Popen([sys.executable, str(FAKE), "--steps", "200", "--step-time", "0.1"],
                                      env=env, stdout=log, stderr=subprocess.STDOUT, text=True))  # fmt: skip
    return procs


def wait_step(run: Path, step: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if int((run / "progress").read_text().split()[0].split("=")[1]) >= step:
                return
        except (OSError, ValueError, IndexError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"no step {step} within {timeout} s")


def kill_all(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        p.send_signal(signal.SIGCONT)
        p.kill()
        p.wait()


def classify(tmp: Path, run: Path) -> dict[str, Any]:
    log = tmp / f"{ATT}.log"
    log.write_text("step=1 loss=1.0\n")
    hosts = tmp / "hosts"
    hosts.write_text("h1\nh2\nh3\n")
    out = subprocess.run([sys.executable, "-m", "agpt.failover.classify", "--rc", "124", "--hostfile", str(hosts),
                          "--heartbeat-dir", str(run / "heartbeat"), str(log)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "python")})  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_end_to_end_a_sigstopped_rank_is_named_with_evidence(tmp_path: Path) -> None:
    run = tmp_path / "run"
    procs = launch(run, tmp_path, "")
    try:
        wait_step(run, 3)
        os.kill(procs[3].pid, signal.SIGSTOP)  # rank 3: local rank 1 of h2; h2's publisher lives on
        time.sleep(4)
    finally:
        kill_all(procs)
    c = classify(tmp_path, run)
    assert c["class"] == "node" and c["bad_hosts"] == ["h2"], c
    assert "rank 3 tick" in c["evidence"][0] and "state T: stopped" in c["evidence"][0]
    # every live rank was stuck for 2 s: one stack file per node, naming each live rank
    stacks = run / "attempts" / f"{ATT}.stacks"
    assert "rank 4 pid" in (stacks / "h3.txt").read_text()


def test_end_to_end_a_rank_asleep_in_forward_is_named_behind(tmp_path: Path) -> None:
    run = tmp_path / "run"
    procs = launch(run, tmp_path, "sleep@4:h3")
    try:
        time.sleep(0.5)
        wait_step(run, 3)
        time.sleep(4)
    finally:
        kill_all(procs)
    c = classify(tmp_path, run)
    assert c["class"] == "node" and c["bad_hosts"] == ["h3"], c
    assert "h3 behind" in c["evidence"][0] and "in forward" in c["evidence"][0]


def test_classify_without_heartbeats_stays_a_blind_hang(tmp_path: Path) -> None:
    c = classify(tmp_path, tmp_path / "no-run")
    assert c["class"] == "hang" and c["bad_hosts"] == []
    assert any("no such directory" in n for n in c["notes"])


def test_apply_names_the_straggler_of_a_75_stop(tmp_path: Path) -> None:
    write(tmp_path, [])
    (tmp_path / hbformat.SWAP_FILE).write_text(
        json.dumps({"attempt": ATT, "host": "n2", "evidence": "straggler: n2 x"})
    )
    res = Classification(cls="crash", bad_hosts=[], evidence=[], last_step=5)
    apply_heartbeats(res, tmp_path, HOSTS, ATT, 75)
    assert (res.cls, res.bad_hosts, res.evidence) == ("node", ["n2"], ["straggler: n2 x"])
    res = Classification(cls="crash", bad_hosts=[], evidence=[], last_step=5)
    apply_heartbeats(res, tmp_path, HOSTS, "77.2", 75)  # another attempt's request
    assert res.cls == "crash"


def test_bench_heartbeat_runs_and_prints_the_writes_per_node_per_minute() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests/bench/bench_heartbeat.py"), "--hosts", "2", "--ranks-per-node", "2",
         "--interval", "1", "--seconds", "3"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "run-directory writes per node per minute" in out.stdout and "fewer shared writes" in out.stdout


def test_fault_drill_hooks_do_nothing_unless_set_and_slow_only_their_host() -> None:
    t0 = time.monotonic()
    faults.forward(3, 0.2, env={})
    faults.forward(3, 0.2, env={"AGPT_FAULT_SLOW_HOST": "other:3", "AGPT_HEARTBEAT_HOST": "me"})
    assert time.monotonic() - t0 < 0.15
    faults.forward(3, 0.1, env={"AGPT_FAULT_SLOW_HOST": "me:3", "AGPT_HEARTBEAT_HOST": "me"})
    assert time.monotonic() - t0 >= 0.2  # (3 - 1) x 0.1 s more


def test_heartbeat_settings_are_a_config_section() -> None:
    from agpt.train.config import load_config

    cfg = load_config(None, environ={"AGPT_HEARTBEAT_INTERVAL_S": "2.5"})
    assert cfg.heartbeat.interval_s == 2.5 and cfg.heartbeat.enabled
    cfg = load_config(None, ["heartbeat.enabled=false"], environ={})
    assert cfg.heartbeat.enabled is False


def test_a_rank_record_left_by_an_earlier_launch_is_not_a_frozen_rank(tmp_path: Path) -> None:
    # Job ids repeat (a new test cluster, a requeue): an old launch's node-local file must not be blamed.
    run = tmp_path / "run"
    hb = heartbeat.Heartbeat(run, attempt=ATT, rank=0, host="h1", interval_s=0.2, tick_s=0.05,
                             local_dir=tmp_path / "shm")  # fmt: skip
    hb.local_dir.mkdir(parents=True)
    old = {"rank": 7, "step": 2, "phase": "forward", "phase_s": 0, "step_s": 0, "tick": 3,
           "mono": time.monotonic() - 500}  # fmt: skip
    (hb.local_dir / "rank7.json").write_text(json.dumps(old))
    hb.start()
    time.sleep(0.5)
    hb.stop()
    rec = json.loads((run / "heartbeat" / "h1.json").read_text())
    assert [r["rank"] for r in rec["ranks"]] == [0]


def test_a_rank_frozen_just_before_recording_a_step_the_others_completed_is_stopped(tmp_path: Path) -> None:
    # one rank per node: the frozen rank is its node's publisher, its record stops at step 3, 0.3 s in
    recs = [node(h, [rank(i, step=4, phase="forward", phase_s=9.5, step_s=9.6)]) for i, h in enumerate(HOSTS)]
    recs[2] = node("n3", [rank(2, step=3, phase="optimizer", phase_s=0.1, step_s=0.3)], seq=9)
    f = hbs.attribute(write(tmp_path, recs), HOSTS, ATT)
    assert f.bad_hosts == ["n3"], f
    assert "rank 2's record is at step 3 (optimizer, 0.3 s after that step)" in f.evidence[0]
    assert "3 other rank(s) completed step 4 9.6 s before" in f.evidence[0]


def test_a_rank_waiting_behind_a_stopped_host_is_a_consequence_not_named(tmp_path: Path) -> None:
    # The chaos drill's seed 2: n1's rank stopped inside a collective that n2 and n3 then completed; n4's rank
    # still waits in the optimizer's collective for n1's last message: live (its record 9.8 s into the step),
    # behind, and healthy.  Only n1 is named; n4 is noted as waiting on it.
    recs = [
        node(h, [rank(i, step=25, phase="collective", phase_s=9.5, step_s=9.6)]) for i, h in enumerate(HOSTS)
    ]
    recs[0] = node("n1", [rank(0, step=20, phase="optimizer", phase_s=0.1, step_s=0.3)], seq=9)
    recs[3] = node("n4", [rank(3, step=24, phase="optimizer", phase_s=9.8, step_s=9.8)])
    f = hbs.attribute(write(tmp_path, recs), HOSTS, ATT)
    assert f.bad_hosts == ["n1"] and f.kinds == {"n1": "stopped"}, f
    assert "heartbeat: n1 stopped: rank 0's record is at step 20" in f.evidence[0]
    assert any("n4 behind" in n and "waiting on the stopped n1" in n for n in f.notes), f.notes


def test_a_live_rank_behind_with_nobody_stopped_is_still_named(tmp_path: Path) -> None:
    recs = [
        node(h, [rank(i, step=25, phase="collective", phase_s=9.5, step_s=9.6)]) for i, h in enumerate(HOSTS)
    ]
    recs[3] = node("n4", [rank(3, step=24, phase="optimizer", phase_s=9.8, step_s=12.0)])
    f = hbs.attribute(write(tmp_path, recs), HOSTS, ATT)
    assert f.bad_hosts == ["n4"] and f.kinds == {"n4": "behind"}, f
