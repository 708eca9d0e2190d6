"""Running on fewer nodes when the spares run out (FAILOVER_SHRINK): the rule (agpt.failover.shrink), the planner's
decision (policy.decide), its effect on the run directory (`agpt failover plan --apply`) and what the report and the
chain show of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agpt.errors import BadInput
from agpt.failover import hosts, policy, report
from agpt.failover import shrink as S
from conftest import agpt_env
from failover_util import plan_cli, run_with_attempt

FOUR = S.Layout(nodes=4, ranks_per_node=1, global_batch=12, micro_batch=1)  # the cluster drill's layout
ACTIVE = ["n1", "n2", "n3", "n4"]


def test_three_of_four_nodes_keep_a_batch_of_twelve_with_four_micro_steps() -> None:
    f = S.fit(FOUR, 3)
    assert (f.dp, f.micro_steps, f.exact, f.throughput, f.refused) == (3, 4, True, 0.75, "")
    assert S.fit(FOUR, 4).micro_steps == 3


def test_an_uneven_split_runs_on_the_fewest_nodes_as_fast_and_keeps_the_rest_as_spares() -> None:
    """768 samples, 32 nodes x 12 ranks (jobs/configs/20b.yaml on Aurora): 2 micro-steps; one node lost makes it
    3 on 31 nodes as on 22, so 22 run and 9 healthy hosts become spares."""
    lay = S.Layout(nodes=32, ranks_per_node=12, global_batch=768, micro_batch=1)
    c = S.choose(lay, 31, "0.5")
    assert c.fit is not None and (c.fit.nodes, c.fit.micro_steps, c.fit.exact) == (22, 3, False)
    assert "global batch 768 kept" in c.reason and "9 healthy host(s) kept as spares" in c.reason
    sh = S.plan(lay, active=[f"x{i}" for i in range(32)], spare=[], named=["x5"], floor_spec="0.5")
    assert (
        isinstance(sh, S.Shrink)
        and sh.after == 22
        and len(sh.to_spare) == 9
        and "x5" not in sh.record["hosts"]
    )
    assert sh.record["hosts"] == [f"x{i}" for i in range(32) if i != 5][:22]  # rank order kept


@pytest.mark.parametrize(
    ("lay", "healthy", "floor", "why"),
    [
        (FOUR, 3, "0.9", "3 healthy node(s) < FAILOVER_MIN_NODES=0.9 (3.6 of 4)"),
        (FOUR, 3, "4", "3 healthy node(s) < FAILOVER_MIN_NODES=4 (4 of 4)"),
        (S.Layout(nodes=4, ranks_per_node=1, global_batch=4, micro_batch=1), 3, "0.6",
         "3 node(s): 0.50 of full throughput (2 micro-steps for 1, uneven), 2.0 nodes' worth < FAILOVER_MIN_NODES=0.6 (2.4 of 4)"),
        (S.Layout(nodes=4, ranks_per_node=2, tp=4, global_batch=12, micro_batch=1), 3, "1",
         "parallel.tp 4 does not divide the 2 ranks per node"),
        (S.Layout(nodes=4, ranks_per_node=1, global_batch=12, micro_batch=1, state_bytes=12 * 2**30,
                  usable_bytes=3.5 * 2**30), 3, "1",
         "3 node(s): 4.0 GiB per device (state 4.0 + the rest 0.0) > 3.5 GiB usable"),
    ],
)  # fmt: skip
def test_a_count_below_the_floor_or_that_the_layout_cannot_hold_is_refused_with_the_numbers(
    lay: S.Layout, healthy: int, floor: str, why: str
) -> None:
    c = S.choose(lay, healthy, floor)
    assert c.fit is None and why in c.reason


@pytest.mark.parametrize(
    ("spec", "nodes"), [("3", 3.0), ("0.75", 3.0), ("1.0", 4.0), ("", 3.6), (" 0.5 ", 2.0)]
)
def test_min_nodes_is_a_count_or_a_fraction(spec: str, nodes: float) -> None:
    assert S.min_nodes(spec, 4) == nodes


@pytest.mark.parametrize("spec", ["0", "1.5", "half", "-1", "nan", "0.0", "3x", "1e400"])
def test_a_bad_min_nodes_names_the_setting(spec: str) -> None:
    with pytest.raises(BadInput, match="FAILOVER_MIN_NODES"):
        S.min_nodes(spec, 4)
    with pytest.raises(BadInput, match="FAILOVER_MIN_NODES"):
        policy.Settings(min_nodes=spec)


def test_the_layout_record_round_trips_and_a_bad_one_is_named(tmp_path: Path) -> None:
    S.write_layout(tmp_path, FOUR)
    assert S.read_layout(tmp_path) == FOUR
    (tmp_path / "layout.json").write_text(json.dumps({"format": S.FORMAT, "nodes": 0}))
    with pytest.raises(BadInput, match=r"layout.json: nodes: must be a whole number"):
        S.read_layout(tmp_path)
    (tmp_path / "layout.json").unlink()
    with pytest.raises(BadInput, match=r"no .*layout.json \(`agpt check --run-dir` writes it"):
        S.read_layout(tmp_path)


def _node(n: int = 1, bad: str = "n3") -> policy.Attempt:
    return policy.Attempt(attempt=n, rc=1, cls="node", bad_hosts=[bad], first_step=1, last_step=7)


def _decide(
    settings: policy.Settings, layout: S.Layout | str | None, spare: list[str] | None = None
) -> policy.Plan:
    return policy.decide(_node(), active=ACTIVE, spare=spare or [], history=[], settings=settings, now=0.0,
                         layout=layout)  # fmt: skip


# The shrink's own tests set the floor to half the throughput (the default, 0.9, refuses 4 -> 3 at 0.75: below).
HALF = "0.5"


def test_a_named_node_with_no_spare_shrinks_the_job() -> None:
    plan = _decide(policy.Settings(backoff=(0.0,), min_nodes=HALF), FOUR)
    assert plan.action == "relaunch" and plan.swap_out == ["n3"] and plan.swap_in == []
    assert plan.shrink is not None and plan.shrink["hosts"] == ["n1", "n2", "n4"]
    assert (plan.shrink["nodes_before"], plan.shrink["nodes_after"], plan.shrink["throughput"]) == (
        4,
        3,
        0.75,
    )
    assert "shrink 4 -> 3 nodes (FAILOVER_SHRINK), global batch 12 kept: 4 micro-step(s)" in plan.reason


def test_a_spare_left_is_still_a_swap_and_two_bad_hosts_use_it_before_shrinking() -> None:
    plan = _decide(policy.Settings(min_nodes=HALF), FOUR, spare=["n5"])
    assert plan.shrink is None and plan.swap_in == ["n5"]
    two = policy.decide(policy.Attempt(attempt=1, rc=1, cls="node", bad_hosts=["n1", "n3"], first_step=1,
                                       last_step=7), active=ACTIVE, spare=["n5"], history=[],
                        settings=policy.Settings(min_nodes=HALF), now=0.0, layout=FOUR)  # fmt: skip
    assert two.shrink is not None and two.shrink["hosts"] == ["n5", "n2", "n4"] and two.swap_in == ["n5"]


@pytest.mark.parametrize(
    ("settings", "layout", "why"),
    [
        (policy.Settings(shrink=False), FOUR, "not shrinking (FAILOVER_SHRINK=0)"),
        (policy.Settings(), "no run/layout.json (`agpt check --run-dir` writes it when a job starts)",
         "cannot shrink: no run/layout.json"),
        (policy.Settings(min_nodes="0.9"), FOUR, "cannot shrink: 3 healthy node(s) < FAILOVER_MIN_NODES=0.9"),
        # the default floor: a shrink that keeps 0.75 of the throughput holds the allocation for too little work
        (policy.Settings(), FOUR, "cannot shrink: 3 healthy node(s) < FAILOVER_MIN_NODES=0.9"),
    ],
)  # fmt: skip
def test_a_refused_shrink_hands_over_as_before_with_the_reason(
    settings: policy.Settings, layout: S.Layout | str, why: str
) -> None:
    plan = _decide(settings, layout)
    assert (plan.action, plan.verdict, plan.exit) == ("stop", "resubmit", 75)
    assert plan.reason.startswith("1 bad host(s) (n3) but 0 spare(s) left; ") and why in plan.reason
    assert plan.mark_bad == ["n3"]


def test_a_stale_layout_for_fewer_nodes_than_are_active_is_refused() -> None:
    plan = policy.decide(_node(), active=[*ACTIVE, "n5"], spare=[], history=[], settings=policy.Settings(),
                         now=0.0, layout=FOUR)  # fmt: skip
    assert plan.action == "stop" and "layout.json is for 4 node(s) but 5 are active" in plan.reason


CLASSIFIED = {"class": "node", "bad_hosts": ["n3"], "evidence": ["srun: error: Node failure on n3"],
              "first_step": 1, "last_step": 7}  # fmt: skip


def _shrunk_run(tmp_path: Path, *flags: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    run, log = run_with_attempt(tmp_path, ACTIVE, [], "step=7 loss=1\nsrun: error: Node failure on n3\n")
    S.write_layout(run, FOUR)
    cls = run / "attempts/j.1.class.json"
    cls.write_text(json.dumps(CLASSIFIED))
    r = plan_cli(run, "--jobid", "j", "--attempt", "1", "--rc", "1", "--log", str(log), "--classification",
                 str(cls), "--started", "100", "--ended", "200", "--now", "200", "--apply", "--shell", *flags)  # fmt: skip
    return run, r


def test_plan_apply_shrinks_hosts_records_the_event_and_says_so(tmp_path: Path) -> None:
    run, r = _shrunk_run(tmp_path, "--min-nodes", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:2] == ["relaunch", "-"]
    assert "shrink 4 -> 3 nodes (FAILOVER_SHRINK), global batch 12 kept" in r.stderr and "out n3" in r.stderr
    assert hosts.read_hosts(run / "hosts/active") == ["n1", "n2", "n4"]
    assert [b.host for b in hosts.read_bad(run / "hosts/bad")] == ["n3"]
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["attempt", "shrink"]
    sh = events[1]
    assert {k: sh[k] for k in ("nodes_before", "nodes_after", "nodes_full", "out", "throughput", "uneven")} == {
        "nodes_before": 4, "nodes_after": 3, "nodes_full": 4, "out": ["n3"], "throughput": 0.75, "uneven": False}  # fmt: skip


def test_plan_with_shrink_off_or_below_the_floor_hands_over_75_with_the_reason(tmp_path: Path) -> None:
    for i, (flags, why) in enumerate(((("--shrink", "0"), "FAILOVER_SHRINK=0"),
                                      (("--min-nodes", "0.9"), "FAILOVER_MIN_NODES=0.9"))):  # fmt: skip
        run, r = _shrunk_run(tmp_path / str(i), *flags)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[:2] == ["stop", "75"] and why in r.stderr
        assert hosts.read_hosts(run / "hosts/active") == ACTIVE


@pytest.mark.parametrize(("flag", "value"), [("--min-nodes", "half"), ("--shrink", "yes")])
def test_plan_refuses_a_bad_shrink_setting_in_one_line(tmp_path: Path, flag: str, value: str) -> None:
    run, _ = run_with_attempt(tmp_path, ACTIVE, [], "")
    r = plan_cli(run, "--jobid", "j", "--before", "--shell", flag, value)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and ("FAILOVER_MIN_NODES" in lines[0] or "FAILOVER_SHRINK" in lines[0])


def test_hosts_shrink_keeps_rank_order_and_returns_the_healthy_extra_as_spares(tmp_path: Path) -> None:
    run, _ = run_with_attempt(tmp_path, ["a", "b", "c", "d", "e"], ["s"], "")
    r = hosts.shrink(run, ["b"], ["a", "s", "c"], jobid="j", evidence="named")
    assert hosts.read_hosts(run / "hosts/active") == ["a", "s", "c"]
    assert (
        hosts.read_hosts(run / "hosts/spare") == ["d", "e"]
        and r.returned == ["d", "e"]
        and r.swap_in == ["s"]
    )
    with pytest.raises(BadInput, match="out, twice, or unknown"):
        hosts.shrink(run, ["a"], ["a", "c"])


def _events(run: Path, *evs: dict[str, object]) -> None:
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evs))


def _shrunk_history(run: Path) -> None:
    base = {"event": "attempt", "rc": 1, "class": "node"}
    _events(
        run,
        {**base, "jobid": "7", "attempt": 1, "hosts": ACTIVE, "started": 0, "ended": 100, "first_step": 1,
         "last_step": 10, "swapped": {"out": ["n3"], "in": []}},
        {"event": "shrink", "jobid": "7", "attempt": 1, "time": 100, "nodes_before": 4, "nodes_after": 3,
         "nodes_full": 4, "micro_steps_full": 3, "micro_steps": 4, "throughput": 0.75, "uneven": False},
        {**base, "jobid": "7", "attempt": 2, "rc": 75, "class": "walltime", "hosts": ["n1", "n2", "n4"],
         "started": 110, "ended": 510, "first_step": 9, "last_step": 30},
        {**base, "jobid": "8", "attempt": 1, "rc": 0, "class": "success", "hosts": ["n1", "n2", "n4", "n5"],
         "started": 600, "ended": 700, "first_step": 31, "last_step": 40},
    )  # fmt: skip


def test_the_history_gives_each_job_its_node_counts_and_what_the_shrink_cost(tmp_path: Path) -> None:
    _shrunk_history(tmp_path)
    from agpt import rundir

    jobs = S.history(rundir.read_jsonl(tmp_path / "events.jsonl"))
    assert (jobs["7"].text, jobs["8"].text) == ("4->3", "4")
    assert (jobs["7"].shrunk_s, jobs["7"].cost_s) == (400.0, 100.0)  # 400 s at 0.75 of full throughput


def test_report_and_chain_status_show_the_nodes_over_time_and_the_cost(tmp_path: Path) -> None:
    _shrunk_history(tmp_path)
    (tmp_path / "chain.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"jobid": "7", "started": 0, "ended": 520, "start_step": 0, "end_step": 30, "verdict": "resubmit",
         "next_jobid": "8"},
        {"jobid": "8", "started": 590, "ended": 710, "start_step": 30, "end_step": 40, "verdict": "done"})))  # fmt: skip
    text = report.render(report.build(tmp_path))
    assert "NODES" in text.splitlines()[3]
    assert (
        "job 7 after attempt 1: 4 -> 3 nodes (job: 4), 3 -> 4 micro-steps per step: 0.75 of full throughput"
        in text
    )
    assert "job 7: 4->3 nodes; 6m40s on fewer nodes cost 1m40s of full-speed training" in text
    assert "shrinks: 1, 6m40s on fewer nodes, costing 1m40s of full-speed training" in text
    assert report.build(tmp_path).as_dict()["nodes"]["7"] == {"start": 4, "end": 3, "shrinks": 1, "shrunk_s": 400.0,
                                                              "cost_s": 100.0}  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "agpt.chain", "status", str(tmp_path)], capture_output=True,
                       text=True, env=agpt_env(), timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines()}
    assert "NODES" in rows["JOB"] and "4->3 (400 s shrunk, cost 100 s)" in rows["7"] and " 4 " in rows["8"]
    assert "1 shrink(s): 400 s on fewer nodes cost 100 s of full-speed training" in r.stdout


def test_the_monitor_and_the_plot_show_the_node_count_over_the_run(tmp_path: Path) -> None:
    from agpt import runplot
    from agpt.observe import status as ostatus
    from agpt.views import monitor

    _shrunk_history(tmp_path)
    rows = dict(monitor.host_rows(ostatus.snapshot(tmp_path)))
    assert rows["shrunk"] == "job 7: 4 -> 3 nodes (job: 4), 0.75 of full throughput"
    (tmp_path / "attempts").mkdir()
    (tmp_path / "attempts/7.1.log").write_text("".join(f"step={s} loss={6 - s / 10}\n" for s in range(1, 41)))
    curve = runplot.read_run(tmp_path)
    assert runplot.node_spans(curve.events) == [(1.0, 10.0, 4), (9.0, 30.0, 3), (31.0, 40.0, 4)]
    assert runplot.plot_run(tmp_path, tmp_path / "plot.png").stat().st_size > 10_000
