"""The failover loop's decisions (agpt.failover.policy.decide), one rule at a time, and its run-dir CLI
(agpt.failover.plan)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from agpt import rundir
from agpt.errors import BadInput
from agpt.failover import plan as P
from agpt.failover import policy
from failover_util import plan_cli, run_with_attempt

ACTIVE = ["h1", "h2", "h3", "h4"]
SPARE = ["h5", "h6"]
FAST = policy.Settings(backoff=(5, 10, 20, 40, 60), min_attempt_s=60)


def att(
    n: int,
    cls: str,
    *,
    rc: int = 1,
    bad: list[str] | None = None,
    first: int | None = 1,
    last: int | None = 3,
    suspects: list[str] | None = None,
    note: str = "",
    sig: str | None = None,
    passed: str = "",
) -> policy.Attempt:
    """An attempt; `note`: why the health sweep could not run (today's counting rules then decide a stop)."""
    return policy.Attempt(
        attempt=n,
        rc=rc,
        cls=cls,
        bad_hosts=bad or [],
        first_step=first,
        last_step=last,
        suspects=suspects or [],
        sweep_note=note,
        signature=sig,
        passed=passed,
    )


OFF = "FAILOVER_SWEEP=off"


def ev(
    n: int,
    cls: str,
    *,
    first: int | None = 1,
    last: int | None = 3,
    out: list[str] | None = None,
    inn: list[str] | None = None,
    blind: bool = False,
    sig: str | None = None,
    passed: str = "",
) -> dict[str, Any]:
    return {
        "event": "attempt",
        "jobid": "j",
        "attempt": n,
        "class": cls,
        "first_step": first,
        "last_step": last,
        "swapped": {"out": out or [], "in": inn or [], "blind": blind, "returned": []},
        "signature": sig,
        "passed": passed,
    }


def decide(
    a: policy.Attempt,
    history: list[dict[str, Any]] | None = None,
    *,
    active: list[str] = ACTIVE,
    spare: list[str] = SPARE,
    settings: policy.Settings = FAST,
    now: float = 1000.0,
    deadline: float | None = None,
) -> policy.Plan:
    return policy.decide(
        a, active=active, spare=spare, history=history or [], settings=settings, now=now, deadline=deadline
    )


def test_success_stops_done() -> None:
    p = decide(att(1, "success", rc=0, last=20))
    assert (p.action, p.verdict, p.exit) == ("stop", "done", 0)


def test_rc0_is_done_whatever_the_class() -> None:
    assert decide(att(1, "app", rc=0)).exit == 0


def test_walltime_resubmits() -> None:
    p = decide(att(1, "walltime", rc=143))
    assert (p.verdict, p.exit) == ("resubmit", 75)


def test_trainer_rc75_resubmits() -> None:
    assert decide(att(1, "crash", rc=75)).exit == 75


def test_trainer_rollback_limit_rc4_stops_as_repeat_once_the_sweep_passed() -> None:
    a = att(1, "app", rc=4)
    assert policy.wants_sweep(a, active=ACTIVE, history=[], settings=FAST)  # a bad device rolls back too
    p = decide(att(1, "app", rc=4, passed="probe + collective"))
    assert (p.action, p.verdict, p.exit) == ("stop", "repeat", 4)
    assert "every host passed the sweep (probe + collective)" in p.reason
    p = decide(att(1, "app", rc=4, note=OFF))
    assert (p.verdict, p.exit) == ("repeat", 4) and p.reason.endswith(
        f"(the health sweep could not run: {OFF})"
    )
    assert decide(att(1, "crash", rc=4, note=OFF)).action == "relaunch"  # not the trainer's own verdict


def test_node_swaps_exactly_the_named_hosts() -> None:
    p = decide(att(1, "node", bad=["h3"]))
    assert (p.action, p.swap_out, p.swap_in, p.blind) == ("relaunch", ["h3"], ["h5"], False)
    assert p.backoff_s == 0  # the cause left with the host: nothing to wait out


def test_the_backoff_counts_the_time_the_sweep_already_waited() -> None:
    """A site outage the sweep proved (every host failing) already cost the sweep's time: the backoff waits the
    rest of its step, not the whole step again."""
    h = [ev(1, "system"), ev(2, "system")]
    assert decide(att(3, "system", last=4), h).backoff_s == 20
    sweep = dict(active=ACTIVE, spare=SPARE, history=h, settings=FAST, now=1000.0)
    assert policy.decide(att(3, "system", last=4), **sweep, waited_s=14).backoff_s == 6  # type: ignore[arg-type]
    assert policy.decide(att(3, "system", last=4), **sweep, waited_s=120).backoff_s == 0  # type: ignore[arg-type]


def test_node_ignores_names_outside_the_active_hosts() -> None:
    p = decide(att(1, "node", bad=["h2", "x9", "h5"]))
    assert p.swap_out == ["h2"] and p.swap_in == ["h5"]


def test_node_two_hosts_take_two_spares() -> None:
    p = decide(att(1, "node", bad=["h1", "h4"]))
    assert p.swap_out == ["h1", "h4"] and p.swap_in == ["h5", "h6"]


def test_spares_exhausted_after_progress_resubmits_and_marks_bad() -> None:
    # Three named hosts at the same step are three pieces of evidence, not a repeat.
    p = decide(att(3, "node", bad=["h2"]), [ev(1, "node"), ev(2, "node")], spare=[])
    assert (p.verdict, p.exit, p.mark_bad) == ("resubmit", 75, ["h2"])


def test_spares_exhausted_without_any_progress_fails() -> None:
    p = decide(
        att(2, "node", bad=["h2"], first=None, last=None), [ev(1, "node", first=None, last=None)], spare=[]
    )
    assert (p.verdict, p.exit) == ("failed", 1)


def test_system_relaunches_on_the_same_hosts_with_growing_backoff() -> None:
    h = [ev(1, "system"), ev(2, "system")]
    p = decide(att(3, "system", last=4), h)
    assert (p.action, p.swap_out) == ("relaunch", [])
    assert p.backoff_s == 20


def test_a_site_fault_at_the_same_step_is_never_called_deterministic() -> None:
    # A filesystem outage that keeps interrupting the same step is still a site fault: relaunch after the
    # backoff, and once the attempts are spent hand over to a later job (75), never `repeat` (4).
    h = [ev(n, "system", last=4) for n in range(1, 5)]
    p = decide(att(5, "system", last=4), h)
    assert p.action == "relaunch" and p.verdict != "repeat"
    s = dataclasses.replace(FAST, max_attempts=3)
    p = decide(
        att(3, "system", first=None, last=None),
        [ev(n, "system", first=None, last=None) for n in (1, 2)],
        settings=s,
    )
    assert (p.verdict, p.exit) == ("resubmit", 75)


def test_app_does_not_swap() -> None:
    p = decide(att(1, "app"))
    assert (p.action, p.swap_out, p.swap_in) == ("relaunch", [], [])


@pytest.mark.parametrize("rc", [2, 126, 127])
def test_bad_input_or_missing_command_is_no_reason_to_evict_a_host(rc: int) -> None:
    p = decide(att(1, "crash", rc=rc, first=None, last=None))
    assert p.action == "relaunch" and p.swap_out == [] and "'app'" in p.reason


def test_stuck_after_two_attempts_without_progress() -> None:
    p = decide(att(2, "app", first=None, last=None, note=OFF), [ev(1, "app", first=None, last=None)])
    assert (p.verdict, p.exit, p.swap_out) == ("stuck", 3, [])


def test_one_attempt_without_progress_is_not_stuck() -> None:
    p = decide(att(2, "app", first=None, last=None), [ev(1, "app", first=1, last=5)])
    assert p.action == "relaunch"


def test_a_named_host_swap_does_not_count_toward_stuck() -> None:
    p = decide(
        att(2, "node", bad=["h5"], first=None, last=None),
        [ev(1, "node", first=None, last=None)],
        active=["h1", "h2", "h3", "h5"],
        spare=["h6"],
    )
    assert p.action == "relaunch" and p.swap_out == ["h5"]


def test_repeat_same_class_same_step() -> None:
    h = [ev(1, "app", last=6), ev(2, "app", last=6)]
    p = decide(att(3, "app", last=6, note=OFF), h)
    assert (p.verdict, p.exit) == ("repeat", 4)


def test_a_failure_right_after_resume_repeats_at_the_checkpoint_step() -> None:
    # Attempt 1 reached step 4 (checkpoint 4) and died at 5; later ones die at 5 before printing a step.
    h = [ev(1, "app", last=4), {**ev(2, "app", first=None, last=None), "ckpt_step": 4}]
    a = att(3, "app", first=None, last=None, note=OFF)
    a.ckpt_step = 4
    p = decide(a, h)
    assert (p.verdict, p.exit) == ("repeat", 4)


def test_blind_rows_without_progress_get_the_whole_rotation_before_stuck() -> None:
    row = [ev(1, "hang", first=None, last=None)]
    assert decide(att(2, "hang", rc=124, first=None, last=None, note=OFF), row).action == "relaunch"
    row = [ev(n, "hang", first=None, last=None) for n in range(1, 5)]
    p = decide(att(5, "hang", rc=124, first=None, last=None, note=OFF), row)
    assert (p.verdict, p.exit) == ("stuck", 3)


def test_an_app_error_in_a_row_without_progress_is_stuck_at_two() -> None:
    p = decide(att(2, "app", first=None, last=None, note=OFF), [ev(1, "hang", first=None, last=None)])
    assert p.verdict == "stuck"


def test_different_steps_are_no_repeat() -> None:
    h = [ev(1, "app", last=6), ev(2, "app", last=9)]
    assert decide(att(3, "app", last=6), h).action == "relaunch"


def test_max_repeat_is_a_setting() -> None:
    h = [ev(1, "app", last=6), ev(2, "app", last=6)]
    s = policy.Settings(max_repeat=4, backoff=(0,), min_attempt_s=0)
    assert decide(att(3, "app", last=6), h, settings=s).action == "relaunch"


def test_blind_rotation_never_evicts_the_spare_it_added() -> None:
    a1 = decide(att(1, "hang", rc=124))
    assert (a1.swap_out, a1.swap_in, a1.blind) == (["h1"], ["h5"], True)
    h = [ev(1, "hang", out=["h1"], inn=["h5"], blind=True)]
    a2 = decide(att(2, "hang", rc=124), h, active=["h5", "h2", "h3", "h4"], spare=["h6"])
    assert a2.swap_out == ["h2"] and a2.swap_in == ["h6"]
    # h1 was cleared by the unchanged failure: back to the spares
    assert a2.returned == ["h1"]


def test_blind_rotation_prefers_the_hosts_the_evidence_points_at() -> None:
    p = decide(att(1, "hang", rc=124, suspects=["x7", "h3", "h1"]))
    assert p.swap_out == ["h3"]


def test_suspect_that_is_a_just_added_spare_is_skipped() -> None:
    h = [ev(1, "crash", out=["h1"], inn=["h5"], blind=True)]
    p = decide(att(2, "crash", suspects=["h5"]), h, active=["h5", "h2", "h3", "h4"], spare=["h6"])
    assert p.swap_out == ["h2"]


def simulate_rotation(
    guilty: str, n_active: int, n_spares: int, settings: policy.Settings = FAST
) -> tuple[int, str]:
    """Run the decisions against a fake cluster where `guilty` hangs every attempt it is in, the health sweep off
    (the blind rotation is then the last resort)."""
    active = [f"h{i}" for i in range(1, n_active + 1)]
    spare = [f"s{i}" for i in range(1, n_spares + 1)]
    history: list[dict[str, Any]] = []
    for n in range(1, 50):
        if guilty.startswith("h") and guilty not in active:
            return n, "done"
        p = decide(
            att(n, "hang", rc=124, last=7, note=OFF), history, active=active, spare=spare, settings=settings
        )
        if p.action == "stop":
            return n, str(p.verdict)
        repl = dict(zip(p.swap_out, p.swap_in, strict=True))
        pool = [h for h in spare if h not in p.returned] + [h for h in p.returned if h not in active]
        active = [repl.get(h, h) for h in active]
        spare = [h for h in pool if h not in p.swap_in]
        history.append(ev(n, "hang", last=7, out=p.swap_out, inn=p.swap_in, blind=True))
        assert len(set(active)) == n_active
    raise AssertionError("no end")


@pytest.mark.parametrize("guilty", ["h1", "h2", "h3", "h4"])
@pytest.mark.parametrize("spares", [1, 2])
def test_rotation_reaches_the_guilty_host_within_active_attempts(guilty: str, spares: int) -> None:
    n, verdict = simulate_rotation(guilty, 4, spares)
    assert verdict == "done"
    assert n - 1 <= 4  # failed attempts before the good one


def test_rotation_that_never_helps_ends_as_repeat() -> None:
    n, verdict = simulate_rotation("nobody", 4, 2)
    assert verdict == "repeat"
    assert n == 5  # every original host tried once, then called deterministic


def test_max_attempts_counts_attempts_in_a_row_without_a_step_past_the_jobs_furthest() -> None:
    """FAILOVER_MAX_ATTEMPTS bounds the attempts in a row that trained nothing new, not the job's attempts: a job
    that trains on between failures keeps its allocation (and node memory); one stalled for the limit hands over."""
    s = policy.Settings(max_attempts=3, backoff=(0,), min_attempt_s=0)
    onward = [ev(n, "node", last=10 * n) for n in range(1, 30)]
    assert decide(att(30, "node", bad=["h2"], last=300), onward, settings=s).action == "relaunch"
    assert policy.before_attempt(31, history=onward, settings=s, now=0, deadline=None).action == "relaunch"
    # after progress, attempts that replay steps up to the furthest or log none are stalled: the third hands over
    stuck = [ev(1, "app", last=9), ev(2, "system", first=None, last=None), ev(3, "system", last=9)]
    assert policy.stalled(stuck) == 2 and policy.stalled(stuck, 12) == 0
    p = decide(att(4, "system", first=None, last=None), stuck, settings=s)
    assert (p.verdict, p.exit) == ("resubmit", 75) and "3 attempts in a row without a step past" in p.reason
    q = policy.before_attempt(
        4, history=[*stuck, ev(4, "crash", first=5, last=7)], settings=s, now=0, deadline=None
    )
    assert (q.action, q.exit) == ("stop", 75)
    # node memory holds progress past the global checkpoint: a save before the hand-over, which may start though
    # the attempts stalled, then the hand-over (75); not when the stop names a host (its relaunch would fail)
    held = dataclasses.replace(att(4, "system", first=None, last=None), held=True)
    p = decide(held, stuck, settings=s)
    assert p.action == "relaunch" and p.then is not None and p.then["verdict"] == "resubmit"
    after = [*stuck, {**ev(4, "system", first=None, last=None), "held": True, "then": p.then}]
    assert policy.before_attempt(5, history=after, settings=s, now=0, deadline=None).action == "relaunch"
    q = decide(
        dataclasses.replace(att(5, "crash", rc=75, first=None, last=None), ckpt_step=9), after, settings=s
    )
    assert (q.verdict, q.exit) == ("resubmit", 75) and "(the save before this stop saved; " in q.reason
    named = dataclasses.replace(att(4, "node", bad=["h2"], first=None, last=None), held=True)
    assert decide(named, stuck, settings=s).action == "stop"


def test_deadline_near_resubmits_instead_of_a_doomed_attempt() -> None:
    p = decide(att(1, "node", bad=["h2"]), now=1000, deadline=1050)
    assert (p.verdict, p.exit, p.mark_bad) == ("resubmit", 75, ["h2"])


def test_a_failure_in_the_last_minutes_starts_a_save_attempt_when_node_memory_holds_progress() -> None:
    s = policy.Settings(backoff=(5,), min_attempt_s=600, min_save_s=150)
    held = dataclasses.replace(att(1, "node", bad=["h2"]), held=True)
    p = decide(held, now=1000, deadline=1400, settings=s)  # 400 s left: under 600, over 150
    assert p.action == "relaunch" and p.swap_out == ["h2"] and "save attempt" in p.reason
    # nothing held past the global checkpoint: the stop of old, the allocation handed back
    assert decide(att(1, "node", bad=["h2"]), now=1000, deadline=1400, settings=s).exit == 75
    # too little left even to save: the stop says what it loses
    p = decide(held, now=1000, deadline=1100, settings=s)
    assert (p.verdict, p.exit) == ("resubmit", 75) and "FAILOVER_MIN_SAVE_S=150" in p.reason
    # a backoff is waited first, then counted: 155 s left after it, a save attempt; 145 s, none
    assert (
        decide(dataclasses.replace(held, cls="app", bad_hosts=[]), now=1000, deadline=1160, settings=s).action
        == "relaunch"
    )
    assert (
        decide(dataclasses.replace(held, cls="app", bad_hosts=[]), now=1000, deadline=1150, settings=s).exit
        == 75
    )


def test_the_attempt_before_counts_what_the_last_one_held() -> None:
    s = policy.Settings(min_attempt_s=600, min_save_s=150)
    held = [{**ev(1, "node", last=9), "held": True}]
    assert policy.before_attempt(2, history=held, settings=s, now=1000, deadline=1300).action == "relaunch"
    assert (
        policy.before_attempt(2, history=[ev(1, "node", last=9)], settings=s, now=1000, deadline=1300).exit
        == 75
    )
    assert policy.before_attempt(2, history=held, settings=s, now=1000, deadline=1100).exit == 75


def test_held_needs_the_local_tier_on_and_a_step_past_the_global_checkpoint(tmp_path: Path) -> None:
    on = f"0: {rundir.LOCAL_TIER_ON}/dev/shm/agpt-0/ckpt.run.HOST, every 3 steps\n"
    log = tmp_path / "a.log"
    log.write_text("0: [agpt] resuming\n" + on + "0: step=7 loss=1\n0: step=9 loss=1\n")
    a = dataclasses.replace(att(2, "node", first=7, last=9), ckpt_step=6)
    assert P._held(a, log, []) is True
    assert P._held(dataclasses.replace(a, ckpt_step=9), log, []) is False  # the global checkpoint has it
    log.write_text("0: step=7 loss=1\n" + on)  # a line after the first step is not the trainer's start-up
    assert P._held(a, log, []) is False
    # an attempt that failed before the trainer started logs nothing: an earlier held attempt of the job says it
    late = dataclasses.replace(att(3, "node", first=None, last=None), ckpt_step=6)
    log.write_text("srun: error: Unable to start on h2\n")
    assert P._held(late, log, [{**ev(2, "node", last=9), "held": True}]) is True
    assert P._held(late, log, [ev(2, "node", last=9)]) is False


def test_cli_records_held_and_relaunches_a_save_attempt(tmp_path: Path) -> None:
    text = f"0: {rundir.LOCAL_TIER_ON}/dev/shm/x\n0: step=5 loss=3\n0: step=9 loss=2\nCUDA error: ECC on h2\n"
    run, log = run_with_attempt(tmp_path, ["h1", "h2", "h3", "h4"], ["h5", "h6"], text)
    cls = tmp_path / "c.json"
    cls.write_text(json.dumps({"class": "node", "bad_hosts": ["h2"], "evidence": ["ECC on h2"], "first_step": 5,
                               "last_step": 9}))  # fmt: skip
    args = ["--jobid", "j", "--attempt", "1", "--rc", "1", "--now", "1000", "--deadline", "1300", "--apply",
            "--log", str(log), "--classification", str(cls)]  # fmt: skip
    p = run_plan(run, *args)
    assert p["action"] == "relaunch" and "save attempt" in p["reason"]
    (e,) = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert e["held"] is True and e["action"] == "relaunch"
    r = plan_cli(run, "--jobid", "j", "--attempt", "1", "--rc", "1", "--min-save-s", "soon")
    assert r.returncode == 2 and "FAILOVER_MIN_SAVE_S" in r.stderr


def test_a_stop_for_a_person_saves_node_memory_first_then_stops_as_it_would_have() -> None:
    """The deterministic bug reproduced on swept hosts: a stop for a person.  Node memory holds progress past the
    global checkpoint (`held`): a save before the stop (the same hosts, checkpoint.save_and_stop), then that stop,
    whatever the save attempt did; once per job; not without `held`, nor with less than FAILOVER_MIN_SAVE_S."""
    s = policy.Settings(backoff=(5,), min_attempt_s=600, min_save_s=150)
    swept = "probe + collective"
    h = [ev(1, "app", last=6, sig="6 boom", passed=swept)]
    bug = dataclasses.replace(att(2, "app", last=6, sig="6 boom"), held=True)
    p = decide(bug, h, settings=s, deadline=None)
    assert p.action == "relaunch" and not p.swap_out and p.backoff_s == 0
    assert p.then is not None and (p.then["verdict"], p.then["exit"]) == ("repeat", 4)
    assert "save before a stop (repeat)" in p.reason and "a person is needed" in p.then["reason"]
    after = [*h, {**ev(2, "app", last=6, sig="6 boom"), "held": True, "then": p.then}]
    for rc, said in ((75, "saved"), (1, "ended rc 1: not saved")):
        saved = dataclasses.replace(att(3, "crash", rc=rc, first=None, last=None), ckpt_step=6)
        assert not policy.wants_sweep(saved, active=ACTIVE, history=after, settings=s)
        q = decide(saved, after, settings=s)
        assert (q.action, q.verdict, q.exit) == ("stop", "repeat", 4)
        assert (
            "a person is needed" in q.reason
            and f"(the save before this stop {said}; newest global checkpoint: step 6)" in q.reason
        )
    # once per job: a later stop for a person in it is not deferred again
    assert decide(bug, [*after, ev(3, "crash", first=None, last=None)], settings=s).action == "stop"
    # nothing held: the stop at once
    assert decide(dataclasses.replace(bug, held=False), h, settings=s).verdict == "repeat"
    # too little time left to save: the stop, saying what it loses
    p = decide(bug, h, settings=s, now=1000, deadline=1100)
    assert (
        p.verdict == "repeat"
        and "node memory's progress past the newest global checkpoint is lost" in p.reason
    )
    # a save before a stop that cannot start (the attempt limit, the deadline) is that stop, not a resubmit
    q = policy.before_attempt(3, history=after, settings=s, now=1150, deadline=1200)  # 50 s left
    assert (q.verdict, q.exit) == ("repeat", 4) and "(no save before it: " in q.reason
    # ... but the attempt limit does not hold it back: a save is no training
    lim = dataclasses.replace(s, max_attempts=1)
    assert policy.before_attempt(3, history=after, settings=lim, now=1000, deadline=None).action == "relaunch"
    # the trainer's rollback limit is a stop for a person too; a site fault or a resubmit never is
    rb = dataclasses.replace(att(1, "app", rc=4, passed=swept), held=True)
    assert decide(rb, settings=s).then is not None
    assert decide(dataclasses.replace(att(1, "crash", rc=75), held=True), settings=s).action == "stop"


def test_cli_records_the_deferred_stop_and_says_save_to_the_loop(tmp_path: Path) -> None:
    text = f"0: {rundir.LOCAL_TIER_ON}/dev/shm/x\n0: step=5 loss=3\n0: step=9 loss=2\nValueError: boom\n"
    run, log = run_with_attempt(tmp_path, ["h1", "h2", "h3", "h4"], ["h5", "h6"], text)
    cls = tmp_path / "c.json"
    cls.write_text(json.dumps({"class": "app", "evidence": ["ValueError: boom"], "first_step": 5,
                               "last_step": 9}))  # fmt: skip
    earlier = {**ev(1, "app", first=5, last=9, passed="probe + collective"), "held": True}
    earlier["signature"] = policy.signature("ValueError: boom", hosts=[], where=9)
    (run / "events.jsonl").write_text(json.dumps(earlier) + "\n")
    args = ["--jobid", "j", "--attempt", "2", "--rc", "1", "--apply", "--log", str(log), "--classification",
            str(cls), "--shell"]  # fmt: skip
    out = plan_cli(run, *args)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["relaunch", "-", "0", "2", "save"]
    e = json.loads((run / "events.jsonl").read_text().splitlines()[-1])
    assert e["then"]["verdict"] == "repeat" and e["action"] == "relaunch"
    (tmp_path / "c.json").write_text(json.dumps({"class": "crash", "evidence": []}))
    out = plan_cli(run, "--jobid", "j", "--attempt", "3", "--rc", "75", "--apply", "--classification",
                   str(cls), "--shell")  # fmt: skip
    assert out.stdout.split() == ["stop", "4", "0", "3"], out.stderr
    assert "the save before this stop saved" in out.stderr


def test_backoff_counts_toward_the_deadline() -> None:
    s = policy.Settings(backoff=(30,), min_attempt_s=60)
    assert decide(att(1, "app"), now=1000, deadline=1080, settings=s).exit == 75
    assert decide(att(1, "app"), now=1000, deadline=1100, settings=s).action == "relaunch"


def test_before_first_attempt_checks_the_deadline() -> None:
    p = policy.before_attempt(1, history=[], settings=FAST, now=1000, deadline=1030)
    assert (p.action, p.verdict, p.exit) == ("stop", "resubmit", 75)
    assert policy.before_attempt(1, history=[], settings=FAST, now=1000, deadline=None).action == "relaunch"


def test_settings_validate_themselves() -> None:
    with pytest.raises(BadInput, match="FAILOVER_MAX_REPEAT"):
        policy.Settings(max_repeat=1)
    with pytest.raises(BadInput, match="FAILOVER_BACKOFF"):
        policy.Settings(backoff=())


def test_scan_steps_streams_any_bytes(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(
        b"\xff\xfe junk\nstep=4 loss=1\n" + b"x" * 200_000 + b"\n[h1] step: 9 loss=2\nno step here\n"
    )
    assert P.scan_steps(log) == (4, 9, 2)
    assert P.scan_steps(tmp_path / "missing") == (None, None, 0)


def test_classification_fallback_when_the_classifier_said_nothing(tmp_path: Path) -> None:
    c = P.load_classification(str(tmp_path / "none.json"), rc=124, now=0, deadline=None)
    assert c["class"] == "hang" and "fell back" in c["evidence"][0]
    (tmp_path / "bad.json").write_text("{not json")
    assert P.load_classification(str(tmp_path / "bad.json"), rc=1, now=0, deadline=None)["class"] == "crash"
    assert P.load_classification(None, rc=143, now=1000, deadline=1010)["class"] == "walltime"


def run_plan(run: Path, *args: str) -> dict[str, Any]:
    out = plan_cli(run, *args)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def test_cli_applies_the_swap_and_writes_events(tmp_path: Path) -> None:
    ecc = "step=1 loss=3\nstep=2 loss=2\nCUDA error: uncorrectable ECC error encountered on h2\n"
    run, log = run_with_attempt(tmp_path, ["h1", "h2", "h3", "h4"], ["h5", "h6"], ecc)
    cls = tmp_path / "c.json"
    cls.write_text(
        json.dumps({"class": "node", "bad_hosts": ["h2"], "evidence": ["ECC on h2"], "last_step": 2})
    )
    flags = [
        "--jobid",
        "j",
        "--attempt",
        "1",
        "--rc",
        "1",
        "--started",
        "10",
        "--ended",
        "20",
        "--apply",
        "--backoff",
        "0",
    ]
    p = run_plan(run, *flags, "--log", str(log), "--classification", str(cls))
    assert p["action"] == "relaunch" and p["swap_out"] == ["h2"]
    assert (run / "hosts/active").read_text() == "h1\nh5\nh3\nh4\n"
    assert (run / "hosts/spare").read_text() == "h6\n"
    bad = (run / "hosts/bad").read_text().split("\t")
    assert bad[0] == "h2" and bad[2] == "j" and "ECC" in bad[3]
    (e,) = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert e["event"] == "attempt" and e["class"] == "node" and e["swapped"]["out"] == ["h2"]
    assert (e["first_step"], e["last_step"], e["started"], e["ended"]) == (1, 2, 10, 20)
    assert e["hosts"] == ["h1", "h2", "h3", "h4"] and e["log"] == "attempts/j.1.log"


def test_cli_before_writes_a_stop_event(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    p = run_plan(
        run,
        *[
            "--jobid",
            "j",
            "--attempt",
            "1",
            "--before",
            "--now",
            "1000",
            "--deadline",
            "1100",
            "--min-attempt-s",
            "600",
            "--apply",
        ],
    )
    assert (p["verdict"], p["exit"]) == ("resubmit", 75)
    (e,) = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert (e["event"], e["verdict"], e["exit"]) == ("stop", "resubmit", 75)


def test_cli_bad_flag_is_exit_2(tmp_path: Path) -> None:
    r = plan_cli(tmp_path, "--attempt", "1", "--rc", "1", "--backoff", "soon")
    assert r.returncode == 2 and "--backoff" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_classifier_hints_suspects_then_last_heard_not_rank_order() -> None:
    c = {"suspect_hosts": ["h3"], "last_heard": "h2", "rank_hosts": {"0": "h1", "1": "h2"}}
    assert P._suspects(c) == ["h3", "h2"]
    assert P._suspects({"last_heard": None, "suspect_hosts": "bad type"}) == ["bad type"]
    assert P._suspects({}) == []


def test_next_attempt_continues_a_requeued_job(tmp_path: Path) -> None:
    assert P.next_attempt(tmp_path, "7") == 1
    P.append_event(tmp_path / "events.jsonl", {"event": "attempt", "jobid": "7", "attempt": 2})
    P.append_event(tmp_path / "events.jsonl", {"event": "attempt", "jobid": "8", "attempt": 5})
    P.append_event(tmp_path / "events.jsonl", {"event": "stop", "jobid": "7", "attempt": 9})
    assert P.next_attempt(tmp_path, "7") == 3
    r = plan_cli(tmp_path, "--jobid", "8", "--next-attempt")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "6"


def test_the_trainers_own_75_is_read_when_srun_returns_143_for_the_ranks_it_ended(tmp_path: Path) -> None:
    """Every rank of agpt train exits 75 after its agreed stop; srun --kill-on-bad-exit ends the ranks still
    exiting when the first 75 arrives and returns 143.  The log says what the 143 hides: a resubmit, not a
    crash to relaunch (or a healthy host to swap)."""
    log_text = (
        "0: step=3 loss=2.1\n1: step=3 loss=2.1\n"
        "0: agpt: stopped at step 3 on SIGUSR1 or the deadline, checkpoint saved\n"
        "srun: error: n2: task 1: Exited with exit code 75\n"
        "0: slurmstepd-n1: error: *** STEP 5.0 ON n1 CANCELLED AT 2026-12-01T19:41:36 ***\n"
        "srun: error: n1: task 0: Terminated\n"
    )
    flags = ["--jobid", "j", "--attempt", "1", "--started", "10", "--ended", "20", "--backoff", "0"]
    for text in (
        log_text,
        log_text.replace("0: agpt: stopped at step 3 on SIGUSR1 or the deadline, checkpoint saved\n", ""),
    ):
        run, log = run_with_attempt(tmp_path / str(len(text)), ["n1", "n2"], [], text)
        p = run_plan(run, *flags, "--rc", "143", "--log", str(log))
        assert (p["action"], p["verdict"], p["exit"]) == ("stop", "resubmit", 75), p
    # Without either line, a 143 is what it says: not the trainer's resubmit.
    run, log = run_with_attempt(
        tmp_path / "plain", ["n1", "n2"], [], "0: step=3 loss=2.1\nsrun: error: n1: task 0: Terminated\n"
    )
    p = run_plan(run, *flags, "--rc", "143", "--log", str(log))
    assert p.get("verdict") != "resubmit" or "rc 75" not in str(p.get("reason")), p


def test_a_straggler_swap_is_read_as_one_when_srun_returns_143_for_the_ranks_it_ended(tmp_path: Path) -> None:
    """The trainer stopped at a checkpoint to swap a straggler (every rank exits 75), and srun's --kill-on-bad-exit
    returned 143: the classifier must see the 75 the log shows, or the heartbeats' swap request is never read and
    the job hands over instead of swapping (a flake of cluster_heartbeat.bats (c) under load)."""
    text = (
        "0: step=10 loss=2.1\n0: fake_trainer: stopping after the checkpoint of step 10 to swap a straggler\n"
        "srun: error: n2: task 1: Exited with exit code 75\nsrun: error: n1: task 0: Terminated\n"
    )
    run, log = run_with_attempt(tmp_path, ["n1", "n2"], ["n3"], text)
    (run / "heartbeat").mkdir()
    (run / "heartbeat" / "swap.json").write_text(
        json.dumps({"attempt": "j.1", "host": "n2", "evidence": "straggler: n2 computes +199%"})
    )
    flags = ["--jobid", "j", "--attempt", "1", "--started", "10", "--ended", "20", "--backoff", "0"]
    p = run_plan(
        run, *flags, "--rc", "143", "--log", str(log), "--", "--heartbeat-dir", str(run / "heartbeat")
    )
    assert (p["action"], p["swap_out"], p["swap_in"]) == ("relaunch", ["n2"], ["n3"]), p
