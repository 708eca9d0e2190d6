"""`agpt sim`: the real recovery code on a virtual clock, its fault model, and its agreement with the chaos test."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agpt.errors import ConfigError
from agpt.failover import classify, policy
from agpt.failover import hosts as hostlib
from agpt.sim import engine, logs, model, sweep, validate
from agpt.train import ckpt_policy
from conftest import BIN, agpt_env


def small(**kw: object) -> model.FaultModel:
    """A small, failure-heavy model: 64 nodes, a failure every ~8 h of the job, two simulated days; each mechanism
    a test turns on by itself: no heartbeats, no local tier, saves every 500 steps, stragglers reported."""
    data: dict[str, object] = {
        "nodes": 64,
        "machine_nodes": 256,
        "horizon_days": 2,
        "heartbeats": False,
        "failures": {"node_mtbf_h": 500},
        "costs": {"queue_wait_s": 600, "walltime_h": 6},
        "train": {"checkpoint_interval": 500, "local_interval": 0, "local_interval_s": 0},
        "failover": {"straggler": "report"},
    }
    data.update(kw)
    return model.from_dict(data)


@pytest.mark.parametrize("launcher", ["pals", "srun"])
@pytest.mark.parametrize("kind", ["node", "hang", "crash", "system", "app", "unreadable", "app_error"])
def test_generated_logs_read_as_their_class_by_the_real_classifier(
    tmp_path: Path, launcher: str, kind: str
) -> None:
    hosts = logs.host_names(64, launcher)
    log = tmp_path / "a.log"
    rc = logs.write(
        log, launcher=launcher, kind=kind, hosts=hosts, bad=hosts[17], resumed=500, first=501, last=640
    )
    c = classify.classify(log, rc, hosts, None, None, 1e9, None)
    assert c.cls == {"unreadable": "crash", "app_error": "app"}.get(kind, kind)
    assert c.bad_hosts == ([hosts[17]] if kind == "node" else [])
    if kind == "crash":
        assert c.suspect_hosts[0] == hosts[17]
    if kind == "unreadable":  # a misread: nothing in it points at the host that failed
        assert hosts[17] not in c.suspect_hosts[:1]


def test_the_simulation_is_deterministic_for_a_seed() -> None:
    a = engine.simulate(small(), seed=3).as_dict()
    b = engine.simulate(small(), seed=3).as_dict()
    c = engine.simulate(small(), seed=4).as_dict()
    assert a == b
    assert a != c
    assert a["failures"] > 0


def test_time_adds_up_to_the_allocation_and_work_survives_failures() -> None:
    r = engine.simulate(small(), seed=1)
    inside = sum(v for k, v in r.time.items() if k not in ("queue", "waiting_for_a_person"))
    assert inside == pytest.approx(r.allocated_s, rel=1e-6)
    assert 0 < r.effective_ratio < 1
    assert r.steps > 0
    assert r.steps <= r.ideal_steps


def test_a_named_node_failure_swaps_that_host_and_records_it_bad(tmp_path: Path) -> None:
    m = small(mix={"node": 1.0})
    r = engine.simulate(m, seed=2, workdir=tmp_path)
    events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    nodes = [e for e in events if e.get("class") == "node"]
    assert nodes and len(nodes) == r.classes["node"]
    bad = hostlib.read_bad(tmp_path / "run" / "hosts" / "bad")
    for e in nodes:
        assert e["swapped"]["out"] == e["bad_hosts"]
        assert e["bad_hosts"][0] in {b.host for b in bad if not b.blind}
    assert not (
        set(e["bad_hosts"][0] for e in nodes) & set(hostlib.read_hosts(tmp_path / "run" / "hosts" / "active"))
    )


def test_heartbeats_find_a_hung_host_in_one_attempt_where_blind_rotation_cannot() -> None:
    m = small(mix={"hang": 1.0}, behaviour={"hang_persists": 1.0}, nodes=32)
    blind = engine.simulate(m, seed=5)
    named = engine.simulate(model.override(m, heartbeats=True), seed=5)
    assert named.faults and all(f.attempts == 1 for f in named.faults if f.back_s is not None)
    assert sum(f.attempts for f in blind.faults) > sum(f.attempts for f in named.faults)
    assert named.effective_ratio > blind.effective_ratio
    assert not named.person_stops


def test_a_straggler_is_swapped_on_the_monitors_request_with_swap_and_slows_the_job_without(
    tmp_path: Path,
) -> None:
    """FAILOVER_STRAGGLER=swap: the trainer stops (save, 75) after the monitor's windows, the real classifier reads
    the request (apply_heartbeats) and the real planner swaps that host; `report` leaves the job slow."""
    m = small(mix={"straggler": 1.0}, heartbeats=True)
    kept = engine.simulate(m, seed=3)
    swapped = engine.simulate(model.override(m, straggler="swap"), seed=3, workdir=tmp_path)
    assert kept.faults and swapped.faults
    assert kept.time["slow_steps"] > 20 * swapped.time["slow_steps"]
    assert swapped.effective_ratio > kept.effective_ratio
    events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    swaps = [e for e in events if e.get("class") == "node" and e.get("swapped", {}).get("out")]
    assert swaps and all(e["rc"] == 75 for e in swaps)
    bad = hostlib.read_bad(tmp_path / "run" / "hosts" / "bad")
    assert bad and all(b.evidence.startswith("straggler: ") and not b.blind for b in bad)
    # the monitor's windows after the straggler began, then the save: the first step back a minute or so later
    back = [f.back_s for f in swapped.faults if f.back_s is not None]
    assert back and max(back) < m.failover.straggler_windows * m.costs.heartbeat_interval_s + 120
    # without heartbeats there is no monitor: nothing is swapped
    blind = engine.simulate(model.override(m, straggler="swap", heartbeats=False), seed=3)
    assert blind.time["slow_steps"] == pytest.approx(kept.time["slow_steps"], rel=0.5)


def test_a_misread_node_failure_is_evicted_on_the_sweeps_evidence_and_blind_without_it(
    tmp_path: Path,
) -> None:
    """The planner decides what a log it cannot read leads to: the real sweep path (evidence), or blind swaps."""
    m = small(mix={"node": 1.0}, misread={"node": 1.0}, probe={"gone": 1.0})
    swept = engine.simulate(m, seed=2, workdir=tmp_path / "sweep")
    events = [json.loads(x) for x in (tmp_path / "sweep" / "run" / "events.jsonl").read_text().splitlines()]
    found = [e for e in events if e.get("sweep", {}).get("failed")]
    assert found and all(e["class"] == "node" and not e["swapped"]["blind"] for e in found)
    bad = hostlib.read_bad(tmp_path / "sweep" / "run" / "hosts" / "bad")
    assert bad and not any(b.blind for b in bad) and all(b.evidence.startswith("sweep: ") for b in bad)
    assert swept.time["detection"] > 0
    # a failed node is gone (no sign of life): its probe launch ends with the others' answers and the wait their
    # spread sets (the launcher's start at most: 10 s, GoneWatch's least), not at the timeout
    p, start = m.probe, m.costs.launcher_start_s
    probe_s = max(p.launch_s(m.costs), start + 10.0)
    assert probe_s < p.timeout_s
    assert all(
        e["sweep"]["cost_s"]
        == pytest.approx(
            probe_s + p.round_for(m.costs, e["sweep"]["hosts"]) * (e["sweep"]["rounds"] - 1), abs=0.1
        )
        for e in found
    )
    blind = engine.simulate(model.override(m, sweep=False), seed=2, workdir=tmp_path / "blind")
    bad = hostlib.read_bad(tmp_path / "blind" / "run" / "hosts" / "bad")
    assert any(b.blind for b in bad)
    assert blind.faults and swept.faults


def test_a_failed_device_on_a_live_host_is_found_with_the_probes_answers_a_gone_host_after_the_wait(
    tmp_path: Path,
) -> None:
    """`probe.gone`: a node whose host is gone costs the sweep the launch and the wait for a sign of life (as
    long again as the launch took, 10 s at least); one whose host is up fails its device check as the others
    answer, at the probe launch's cost, which is the model's own start-up stages when the model does not pin it."""
    costs = {"queue_wait_s": 600, "walltime_h": 6, "launcher_start_s": 4.0, "imports_s": 3.0}

    def sweeps(name: str, **probe: float) -> list[dict[str, Any]]:
        m = small(mix={"node": 1.0}, misread={"node": 1.0}, probe={"finds_node": 1.0, **probe}, costs=costs)
        engine.simulate(m, seed=2, workdir=tmp_path / name)
        lines = (tmp_path / name / "run" / "events.jsonl").read_text().splitlines()
        found = [e["sweep"] for e in map(json.loads, lines) if e.get("sweep", {}).get("failed")]
        assert found
        return found

    device = sweeps("device", gone=0.0)
    assert all(s["rounds"] == 1 and s["cost_s"] == pytest.approx(7.0) for s in device)
    assert all("FAILED: device" in line for s in device for line in s["failed"].values())
    gone = sweeps("gone", gone=1.0, finds_node=0.0)  # no sign of life is never missed
    assert all(s["cost_s"] == pytest.approx(4.0 + 10.0) for s in gone)
    assert all(line.startswith("no sign of life") for s in gone for line in s["failed"].values())
    pinned = small(probe={"probe_s": 20, "round_s": 9}).probe
    assert pinned.launch_s(model.Costs()) == 20.0 and pinned.round_for(model.Costs(), 4096) == 9.0
    comm = model.Costs(launcher_start_s=4.0, imports_s=3.0, comm_init_fixed_s=2.0, comm_init_per_rank_s=0.01)
    assert model.Probe().round_for(comm, 1000) == pytest.approx(19.0)


def test_without_spares_a_node_failure_ends_the_job_unless_the_job_shrinks(tmp_path: Path) -> None:
    m = small(mix={"node": 1.0})
    with_spares = engine.simulate(m, seed=1)
    without = engine.simulate(model.override(m, spares=0, shrink=False), seed=1)
    assert without.jobs > with_spares.jobs and without.shrinks == 0
    assert without.time["queue"] > with_spares.time["queue"]
    # FAILOVER_SHRINK (the model's batch: 2 micro-steps on 64 nodes): the real planner relaunches on 43 nodes
    # (3 micro-steps, as on 63) and keeps 20 healthy ones as spares; the job goes on, slower.
    shrunk = engine.simulate(model.override(m, spares=0, min_nodes="0.5"), seed=1, workdir=tmp_path)
    assert shrunk.shrinks > 0 and shrunk.jobs < without.jobs and shrunk.shrunk_s > 0
    events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    first = next(e for e in events if e.get("event") == "shrink")
    assert (first["nodes_before"], first["nodes_after"], first["throughput"]) == (64, 43, 0.6667)
    # The default floor (FAILOVER_MIN_NODES=0.9) refuses a shrink to 0.67 of the throughput: the job hands over.
    assert engine.simulate(model.override(m, spares=0), seed=1).shrinks == 0
    inside = sum(v for k, v in shrunk.time.items() if k not in ("queue", "waiting_for_a_person"))
    assert inside == pytest.approx(shrunk.allocated_s, rel=1e-6)
    assert shrunk.time["slow_steps"] > 0  # the shrunk steps' extra time


def test_the_simulator_asks_for_the_spares_job_generation_asks_for(tmp_path: Path) -> None:
    """4,096 nodes: rundir.spares_for gives 82 (not the 81 of splitting 4,096 hosts), and the loop's split of
    that allocation gives back 4,096 active and 82 spare."""
    sim = engine.Sim(model.override(model.load("aurora-20b"), nodes=4096), seed=1, workdir=tmp_path)
    assert sim.spares == 82
    split = hostlib.init_run_hosts(sim.run_dir, sim._allocation(), resolve_timeout=0)
    assert (len(split.active), len(split.spare)) == (4096, 82)


def test_512_nodes_of_the_aurora_20b_model_train_at_least_95_percent_of_the_allocation() -> None:
    r = engine.simulate(model.override(model.load("aurora-20b"), horizon_days=3), seed=1)
    assert r.nodes == 512 and r.spares == 11
    assert r.effective_ratio >= 0.95


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_simulated_chaos_run_matches_its_recorded_figures(seed: int) -> None:
    sched = validate.chaos_schedule(seed)
    assert sorted(k for k, _ in sched) == ["ckpt", "kill", "node", "stop"]
    pred = validate.predict(sched)
    assert pred["verdict"] == "done" and pred["steps"] == 150
    assert pred["walltime_handovers"] >= 1
    # every fault fires, as the chaos test fires it: one whose step an attempt resumed past (a walltime hand-over
    # saved beyond it) fires at that attempt's first step, not never
    assert len(pred["result"].faults) == 4 and None not in pred["steps_lost"].values()
    assert validate.compare(pred) == []


def test_the_checkpoint_policy_saves_at_the_step_the_simulator_expects() -> None:
    for interval, interval_s, step_s in [(5, 0.0, 1.0), (0, 30.0, 7.0), (500, 600.0, 1.7), (10, 25.0, 3.0)]:
        last = 0
        for _ in range(5):
            nxt = ckpt_policy.next_save(last, interval=interval, interval_s=interval_s, step_s=step_s)
            s = last + 1
            while not ckpt_policy.due(
                s, interval=interval, interval_s=interval_s, since_save_s=(s - last) * step_s
            ):
                s += 1
            assert nxt == s
            last = s
    assert ckpt_policy.next_save(7, interval=0, interval_s=0.0, step_s=1.0) is None


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"failures": {"node_mtbf_h": -5}}, "failures.node_mtbf_h"),
        ({"failures": {"node_mtbf_h": "often"}}, "failures.node_mtbf_h"),
        ({"mix": {"node": 0.5, "hang": 0.2}}, "mix"),
        ({"mix": {"node": "most"}}, "mix.node"),
        ({"nodes": 0}, "nodes"),
        ({"costs": {"queue_wait_s": -1}}, "costs.queue_wait_s"),
        ({"behaviour": {"hang_persists": 1.5}}, "behaviour.hang_persists"),
        ({"costs": {"walltime": 6}}, "costs.walltime"),
        ({"failures": {"distribution": "gamma"}}, "failures.distribution"),
        ({"misread": {"node": 1.5}}, "misread.node"),
        ({"misread": {"gpu": 0.1}}, "misread.gpu"),
        ({"probe": {"finds_node": 2}}, "probe.finds_node"),
        ({"sweep": "yes"}, "sweep"),
        ({"failover": {"straggler": "evict"}}, "failover.straggler"),
        ({"failover": {"straggler_windows": 0}}, "failover.straggler_windows"),
    ],
)
def test_a_bad_fault_model_names_its_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(key) + "(:| )"):
        model.from_dict(data)


def test_a_bad_fault_model_file_exits_2_naming_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: 16\nmix: {node: 0.7, hang: 0.2}\n")
    r = subprocess.run(
        [str(BIN / "agpt"), "sim", "run", "--model", str(bad)], env=agpt_env(), capture_output=True, text=True
    )
    assert r.returncode == 2
    assert "mix:" in r.stderr and "sum to 1" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_sim_run_prints_the_ratio_and_the_recovery_clock(tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text("nodes: 32\nmachine_nodes: 128\nhorizon_days: 1\nfailures: {node_mtbf_h: 300}\n")
    r = subprocess.run(
        [str(BIN / "agpt"), "sim", "run", "--model", str(m), "--seed", "2", "--json"],
        env=agpt_env(),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert 0 < d["effective_ratio"] <= 1
    # as shipped on the default site (aurora), the plan turns the local tier on: its restores and stages are shown
    assert set(d["recovery_clock_s"]) == {"detected", "relaunched", "first_step_back", "local_restores",
                                          "first_step_back_node", "stages"}  # fmt: skip
    assert d["time_h"]["productive"] > 0


def test_failover_report_shows_the_runs_mtbf_ratio_and_recommended_interval(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "attempts").mkdir(parents=True)
    hosts = [f"n{i}" for i in range(4)]
    t0 = 1_800_000_000.0
    lines = "".join(
        f"step={s} loss=2.5 grad_norm=0.4 lr=1e-4 tps=100.0 stall_ms={40.0 if s % 10 == 0 else 0.0}\n"
        for s in range(1, 41)
    )
    (run / "attempts" / "j.1.log").write_text(lines[: lines.index("step=21 ")])
    (run / "attempts" / "j.2.log").write_text(lines)
    for step, t in ((10, t0 + 110), (20, t0 + 210), (30, t0 + 530)):
        (run / "ckpt" / f"step-{step}").mkdir(parents=True)
        (run / "ckpt" / f"step-{step}" / ".complete").write_text(json.dumps({"step": step, "time": t}))
    events = [
        {"event": "attempt", "jobid": "j", "attempt": 1, "rc": 1, "class": "node", "bad_hosts": ["n2"],
         "first_step": 1, "last_step": 20, "started": t0, "ended": t0 + 215, "hosts": hosts, "log": "attempts/j.1.log"},
        {"event": "attempt", "jobid": "j", "attempt": 2, "rc": 0, "class": "success", "first_step": 21,
         "last_step": 40, "started": t0 + 230, "ended": t0 + 640, "hosts": hosts, "log": "attempts/j.2.log"},
    ]  # fmt: skip
    clock = {"event": "clock", "jobid": "j", "attempt": 2, "started": t0 + 232, "built": t0 + 240,
             "loaded": t0 + 250, "first_step": t0 + 260, "step": 21}  # fmt: skip
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in [*events, clock]))
    r = subprocess.run(
        [str(BIN / "agpt"), "failover", "report", str(run), "--json"],
        env=agpt_env(),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    g = json.loads(r.stdout)["goodput"]
    assert g["failures"] == 1
    assert g["node_mtbf_h"] == pytest.approx(4 * (215 + 410) / 3600, abs=0.01)
    assert g["step_s"] == pytest.approx(10.0)  # ckpt 10 -> 20 in attempt 1: 100 s for 10 steps
    assert g["save_stall_s"] == pytest.approx(0.04)
    assert 0 < g["effective_ratio"] <= 1
    assert g["interval_s"] > 0 and g["interval_steps"] >= 1
    text = subprocess.run(
        [str(BIN / "agpt"), "failover", "report", str(run)], env=agpt_env(), capture_output=True, text=True
    ).stdout
    assert "node MTBF" in text and "checkpoint.interval_s" in text
    # No watch times (an older loop): the clock runs from the attempt's end; detection and teardown unknown.
    assert g["recovery"] == [
        {"failed": "j.1", "class": "node", "relaunched_s": 15.0, "started_s": 17.0, "built_s": 25.0,
         "loaded_s": 35.0, "first_step_s": 45.0, "tier": None, "from_partner": None, "since": "attempt end",
         "stages": {"detection": None, "teardown": None, "relaunch": 15.0, "process start": 2.0,
                    "model build": 8.0, "state restore": 10.0, "first step": 10.0}, "total_s": 45.0}
    ]  # fmt: skip
    assert (
        "recovery clock after j.1 (node): relaunch 15.0 s, process start 2.0 s, model build 8.0 s, state "
        "restore 10.0 s, first step 10.0 s; first step back 45.0 s after its attempt end"
    ) in text


def test_weibull_failures_keep_the_mean_rate() -> None:
    # A shape below 1 (infant mortality) with the same mean, drawn otherwise: every node's clock starts fresh, so
    # over a horizon much shorter than the MTBF it fails as the Weibull's cumulative hazard (t / scale) ** shape
    # says, more often than the mean rate alone (about twice here), not as the exponential's t / MTBF.
    expo = small(horizon_days=4)
    weib = small(
        horizon_days=4, failures={"node_mtbf_h": 500, "distribution": "weibull", "weibull_shape": 0.7}
    )
    a = engine.simulate(expo, seed=1)
    b = engine.simulate(weib, seed=1)
    scale_h = 500 / math.gamma(1 + 1 / 0.7)  # the same mean: 500 h
    expected = 64 * (b.allocated_s / 3600 / scale_h) ** 0.7
    assert 0.4 * expected < len(b.faults) < 2.5 * expected
    assert [f.time_s for f in a.faults] != [f.time_s for f in b.faults]


@pytest.mark.parametrize("name", ["aurora-20b", "aurora-80b", "chaos"])
def test_every_shipped_model_loads(name: str) -> None:
    m = model.load(name)
    assert abs(sum(m.mix.values()) - 1) < 1e-9
    assert m.nodes >= 1


def test_a_long_site_outage_is_waited_out_without_a_person(tmp_path: Path) -> None:
    # A site-wide fault at the same step is never a deterministic `repeat`: the loop backs off, hands over to a
    # later job (75) once its attempts are spent, and training goes on when the outage ends (an hour here). One
    # simulated day (4 outages; two days took 6x the time for 14).
    m = small(
        mix={"system": 1.0},
        behaviour={"system_outage_s": 3600},
        failures={"node_mtbf_h": 200},
        horizon_days=1,
    )
    r = engine.simulate(m, seed=1, workdir=tmp_path)
    events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    stops = [e for e in events if e.get("event") == "stop"]
    assert any(e["verdict"] == "resubmit" and "FAILOVER_MAX_ATTEMPTS" in e["reason"] for e in stops), stops
    assert not any(k.startswith("repeat") for k in r.person_stops), r.person_stops
    assert r.time["waiting_for_a_person"] == 0
    assert r.steps > 0


def test_a_job_that_trains_on_between_site_outages_keeps_its_allocation(tmp_path: Path) -> None:
    """FAILOVER_MAX_ATTEMPTS bounds the attempts in a row that train nothing new, not a job's attempts: a 6-hour
    job that meets several 15-minute site outages (each ~10 failing relaunches) trains on between them instead of
    handing its allocation, and node memory, back once 20 attempts are spent; an hour-long outage (test above)
    still hands over."""
    m = small(mix={"system": 1.0}, failures={"node_mtbf_h": 20}, horizon_days=0.5, nodes=16, machine_nodes=64,
              costs={"queue_wait_s": 600, "walltime_h": 6})  # fmt: skip
    r = engine.simulate(m, seed=1, workdir=tmp_path)
    events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    attempts: dict[str, int] = {}
    for e in events:
        if e.get("event") == "attempt":
            attempts[e["jobid"]] = attempts.get(e["jobid"], 0) + 1
    # a job ran more attempts than the old per-job limit, and no job handed its allocation over on the limit
    assert max(attempts.values()) > 20
    stops = [e for e in events if e.get("event") == "stop"]
    assert not any("FAILOVER_MAX_ATTEMPTS" in str(e.get("reason")) for e in stops), stops
    assert r.steps > 0


def test_the_local_tier_leaves_the_global_saves_on_their_own_clock() -> None:
    """The trainer's `checkpoint.interval_s` runs from the last global save (agpt.train.trainer's `t_save`), not
    from the last local one: with a local save every few steps, a job without failures still writes a global
    checkpoint every interval, not only at its deadline (the simulator once restarted the global clock at each local
    save, so a job that ended without its deadline save had saved nothing)."""
    m = model.override(small(failures={"node_mtbf_h": 1e9}, horizon_days=0.25, costs={"walltime_h": 12}),
                       checkpoint_interval=0, checkpoint_interval_s=600, local_tier=True)  # fmt: skip
    r = engine.simulate(m, seed=1)
    assert r.local is not None and r.jobs == 1  # one job, cut by the horizon before its deadline
    trained = r.time["productive"] / m.train.step_s
    assert trained > 6000 and r.steps >= trained - 600 / m.train.step_s - 1  # one interval behind at most


def test_the_local_tier_restores_in_the_job_from_memory_and_loses_fewer_steps() -> None:
    """Node failures only: with the tier the relaunches in a job restore a local step (state restore in about a
    second instead of the filesystem's reload), far fewer steps are redone, and its memory per node is stated;
    a failure that reaches a new job is still restored from the global tier."""
    m = small(mix={"node": 1.0})
    base = engine.simulate(m, seed=1)
    # A local save every 120 s, not Daly's for the tier's own stall: the test is about where a relaunch restores
    # from, whatever the model's costs make Daly's interval.
    lm = model.override(m, local_tier=True)
    lm.train.local_daly, lm.train.local_interval_s = False, 120.0
    loc = engine.simulate(lm, seed=1)
    assert loc.local is not None and loc.local["interval_s"] == 120.0 and loc.local["memory_gb_per_node"] > 0
    tiers = {f.tier for f in loc.faults if f.back_s is not None}
    assert "local" in tiers
    for f in loc.faults:
        if f.tier == "local":
            assert f.stages["state restore"] < m.costs.load_s
    assert sum(f.steps_lost for f in loc.faults) < sum(f.steps_lost for f in base.faults)
    assert loc.time["lost_work"] < base.time["lost_work"]
    clock = loc.as_dict()["recovery_clock_s"]
    assert list(clock["stages"]) == ["detection", "relaunch", "process start", "model build", "state restore",
                                     "first step"]  # fmt: skip


def test_a_failure_in_a_jobs_last_minutes_is_saved_from_node_memory_not_trained_again() -> None:
    """With the local tier on, a failure that leaves less than FAILOVER_MIN_ATTEMPT_S before the deadline starts
    a save attempt (the trainer restores node memory and saves it globally at its first step) instead of handing
    the allocation back with that progress in it: fewer steps trained twice, none waiting for the next job.  The
    same run with FAILOVER_MIN_SAVE_S = FAILOVER_MIN_ATTEMPT_S (no save attempt can start) is the baseline; a job
    that ends with progress only node memory held is charged as lost work (the next job trains it again)."""

    def run(min_save_s: float) -> engine.Result:
        m = small(mix={"node": 1.0}, failures={"node_mtbf_h": 100}, horizon_days=4, spares=16,
                  failover={"straggler": "report", "min_save_s": min_save_s},
                  train={"checkpoint_interval": 0, "checkpoint_interval_s": 3600})  # fmt: skip
        m = model.override(m, local_tier=True)
        m.train.local_daly, m.train.local_interval_s = False, 120.0
        return engine.simulate(m, seed=1)

    saved, handed = run(150.0), run(600.0)
    assert sum(f.next_job for f in saved.faults) < sum(f.next_job for f in handed.faults)
    assert saved.time["lost_work"] < handed.time["lost_work"] and saved.steps > handed.steps


def test_a_stop_for_a_person_saves_node_memory_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every application fault a bug that recurs at its step: each reproduction stops for a person.  With the
    local tier on, the real planner first relaunches a save before the stop (the trainer saves node memory's
    newest step globally, no step), so the person's restart resumes there, not up to the global interval (an
    hour) before it.  The baseline is the same run with that decision patched out (the stop at once)."""

    def run() -> engine.Result:
        m = small(mix={"app": 1.0}, failures={"node_mtbf_h": 2000}, horizon_days=4, spares=16,
                  behaviour={"app_deterministic": 1.0}, costs={"queue_wait_s": 600, "person_response_h": 1},
                  train={"checkpoint_interval": 0, "checkpoint_interval_s": 3600})  # fmt: skip
        m = model.override(m, local_tier=True)
        m.train.local_daly, m.train.local_interval_s = False, 120.0
        return engine.simulate(m, seed=1)

    saved = run()
    with monkeypatch.context() as mp:
        mp.setattr(policy, "_save_first", lambda stop, *_a: stop)
        stopped = run()
    assert sum(saved.person_stops.values()) >= 2 and sum(stopped.person_stops.values()) >= 2
    assert saved.time["lost_work"] < 0.5 * stopped.time["lost_work"]
    assert saved.steps > stopped.steps


def test_sim_table_runs_only_the_variants_asked_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    r = subprocess.run([str(BIN / "agpt"), "sim", "table", "--variants", "as shipped,fast", "--out", str(tmp_path)],
                       env=agpt_env(), capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2 and "--variants: unknown variant 'fast'" in r.stderr
    r = subprocess.run([str(BIN / "agpt"), "sim", "table", "--nodes", "64", "--days", "1", "--out", str(tmp_path),
                        "--variants", "as shipped,blind rotation"], env=agpt_env(), capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in (tmp_path / "goodput.md").read_text().splitlines() if ln.startswith("| 64 |")]
    assert [ln.split(" | ")[1] for ln in rows] == ["as shipped", "blind rotation"]


def test_the_reads_every_log_variant_is_the_model_with_no_misread_and_nothing_else_changed() -> None:
    # The table's "reads every log" row is what the goodput figures assumed before misreads were charged: the
    # same model with every misread share at zero, so its gap to "as shipped" is what the classifier misses.
    m = model.load("aurora-20b")
    assert any(v > 0 for shares in m.misread.values() for v in shares.values())
    kw = dict(sweep.VARIANTS)["reads every log"]
    mm = model.override(m, **kw)
    assert mm.misread == {c: dict.fromkeys(model.MISREAD_KINDS, 0.0) for c in model.CLASSES}
    assert model.override(mm, misread=m.misread) == m


def test_kill_on_evidence_ends_node_failures_and_stopped_hosts_sooner() -> None:
    """FAILOVER_KILL_ON_EVIDENCE (the default): a node failure the launcher reports ends after the 2 s evidence
    grace instead of the 30 s teardown, a host the heartbeats show stopped after three publish intervals instead of
    the heartbeat timeout and the grace."""
    m = small(mix={"node": 0.5, "hang": 0.5}, heartbeats=True)
    on = engine.simulate(m, seed=2)
    off = engine.simulate(model.override(m, kill_on_evidence=False), seed=2)
    assert on.time["detection"] < off.time["detection"]
    node_on = [f.detected_s for f in on.faults if f.cls == "node" and f.detected_s is not None]
    node_off = [f.detected_s for f in off.faults if f.cls == "node" and f.detected_s is not None]
    assert node_on and min(node_on) == pytest.approx(2.0) and min(node_off) == pytest.approx(30.0)


def test_an_attempt_ends_on_the_launchers_error_exit_whatever_its_log_is_read_as() -> None:
    """The watch's kill on evidence runs the real `ends` patterns over the attempt's log: an application error (every
    rank exits 1) and a node failure whose lines the classifier cannot read (only the failing rank's error exit is
    legible) end after the 2 s evidence grace, not the 30 s teardown; a hang still waits for the heartbeats."""
    m = small(mix={"node": 0.5, "app": 0.5}, misread={"node": {"recoverable": 1.0}})
    r = engine.simulate(m, seed=3)
    for cls in ("node", "app"):
        detected = [f.detected_s for f in r.faults if f.cls == cls and f.detected_s is not None]
        assert detected and max(detected) == pytest.approx(2.0), cls
    assert r.classes.get("crash")  # the node failures were read as a crash that names nobody
    off = engine.simulate(model.override(m, kill_on_evidence=False), seed=3)
    assert min(f.detected_s for f in off.faults if f.detected_s is not None) == pytest.approx(30.0)


def test_sim_run_shows_the_first_step_back_by_class_and_a_jobs_cold_start(tmp_path: Path) -> None:
    m = small(mix={"node": 0.6, "system": 0.4}, heartbeats=True)
    d = engine.simulate(m, seed=2).as_dict()
    back = d["first_step_back_s"]
    node = back["by_class"]["node"]
    assert node["n"] and node["p50"] <= node["p95"]
    # the failures the job recovers from itself leave out the site outages and the waits for the next job
    assert back["in_job"]["n"] == back["all"]["n"] - back["site_outages"]["n"] - sum(
        1 for f in d["faults"] if f["next_job"] and f["class"] != "system"
    )
    cold = d["cold_start_s"]
    assert 1 <= cold["jobs"] <= d["jobs"]  # every job whose first attempt trained
    assert cold["mean"] == pytest.approx(sum(cold["stages"].values()), abs=0.5)
    r = subprocess.run([str(BIN / "agpt"), "sim", "run", "--nodes", "64", "--days", "1", "--seed", "2"],
                       env=agpt_env(), capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "first step back after a failure" in r.stdout
    assert re.search(
        r"cold start of a chained job's first attempt .*: [\d.]+ s: job start [\d.]+, process start", r.stdout
    )
