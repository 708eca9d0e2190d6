"""Goodput arithmetic: the checkpoint interval from failure rates, and a run's own figures from its records.

One home for the formulas that `agpt ckpt interval`, `agpt failover report` and the simulator (`agpt sim`) use:

Young (1974), "A first order approximation to the optimum checkpoint interval", CACM 17(9):530:
    T = sqrt(2 * delta * M)
Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3):303-312:
    T = sqrt(2 * delta * M) * (1 + sqrt(delta / (2M)) / 3 + (delta / (2M)) / 9) - delta   for delta < 2M, else M
where delta is the time a save stalls training, M the job's mean time between failures (a node's MTBF over the
node count: the job dies when any node dies).  The expected share of time lost at interval T (first order):
    waste(T) = delta / T + (T / 2 + R) / M
the save stalls, half an interval of work redone per failure, and R (detection, relaunch, load) per failure.
The effective training time ratio: productive step time over the time the job held its nodes.

A run's own figures (`figures`), all from the run directory:
- failures: attempts that ended in a failure class (not success, not walltime, not the trainer's own rc 75);
- node-hours: each attempt's duration times its hosts (events.jsonl `hosts`);
- the step time: two complete checkpoints' markers (`.complete` step and time) written in one attempt;
- the save stall: the largest `stall_ms=` of the newest attempt log's tail (the trainer's step lines).

Standard library only (the report runs on the recovery path).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agpt import numeric, rundir

DAY_S = 86400.0


@dataclass(kw_only=True, slots=True)
class Interval:
    nodes: int
    node_mtbf_h: float
    save_stall_s: float
    load_s: float
    restart_s: float
    job_mtbf_s: float
    failures_per_day: float
    young_s: float
    daly_s: float
    waste_fraction: float  # at Daly's interval
    loss_h_per_day: float

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def young(delta: float, mtbf: float) -> float:
    return math.sqrt(2.0 * delta * mtbf)


def daly(delta: float, mtbf: float) -> float:
    if delta >= 2.0 * mtbf:
        return mtbf
    x = delta / (2.0 * mtbf)
    return math.sqrt(2.0 * delta * mtbf) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta


def waste(t: float, *, delta: float, mtbf: float, restart: float) -> float:
    """Expected fraction of time lost at checkpoint interval t (first order, capped at 1)."""
    return min(1.0, delta / t + (t / 2.0 + restart) / mtbf)


def interval(
    *, nodes: int, node_mtbf_h: float, save_stall_s: float, load_s: float = 0.0, restart_s: float = 0.0
) -> Interval:
    """The optimum for `nodes` nodes that each fail every `node_mtbf_h` hours; BadInput names a bad flag."""
    nodes = numeric.whole(nodes, "--nodes", minimum=1, maximum=numeric.MAX_NODES)
    node_mtbf_h = numeric.number(node_mtbf_h, "--node-mtbf-h", lo=1e-3, hi=1e9)
    save_stall_s = numeric.seconds(save_stall_s, "--save-stall-s", minimum=1e-6)
    load_s = numeric.seconds(load_s, "--load-s")
    restart_s = numeric.seconds(restart_s, "--restart-s")
    m = node_mtbf_h * 3600.0 / nodes
    t = daly(save_stall_s, m)
    w = waste(t, delta=save_stall_s, mtbf=m, restart=load_s + restart_s)
    return Interval(
        nodes=nodes,
        node_mtbf_h=node_mtbf_h,
        save_stall_s=save_stall_s,
        load_s=load_s,
        restart_s=restart_s,
        job_mtbf_s=m,
        failures_per_day=DAY_S / m,
        young_s=young(save_stall_s, m),
        daly_s=t,
        waste_fraction=w,
        loss_h_per_day=24.0 * w,
    )


def fmt_s(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def render_interval(iv: Interval) -> str:
    return "\n".join(
        [
            f"nodes {iv.nodes}, node MTBF {iv.node_mtbf_h:g} h -> job MTBF {fmt_s(iv.job_mtbf_s)}, "
            f"{iv.failures_per_day:.2f} failures/day",
            f"save stall {iv.save_stall_s:g} s, load {iv.load_s:g} s, restart {iv.restart_s:g} s",
            f"Young interval: {fmt_s(iv.young_s)} ({iv.young_s:.0f} s)",
            f"Daly interval:  {fmt_s(iv.daly_s)} ({iv.daly_s:.0f} s)  -> checkpoint.interval_s: {iv.daly_s:.0f}",
            f"expected loss at that interval: {100 * iv.waste_fraction:.2f}% of the time, "
            f"{iv.loss_h_per_day:.2f} h per day",
        ]
    )


def effective_ratio(productive_s: float, held_s: float) -> float:
    """Productive step time over the time the job held its nodes (0 when it held them for no time)."""
    return productive_s / held_s if held_s > 0 else 0.0


# --- a run's own figures -------------------------------------------------------------------------------------
NOT_FAILURES = ("success", "walltime")
STALL_RE = re.compile(rb"\bstall_ms=([0-9.]+)")
TAIL_BYTES = 256 * 1024


def is_failure(cls: str, rc: int | None) -> bool:
    """An attempt that ended in a failure: not success or walltime, nor the trainer's own stop (rc 0 or 75)."""
    return cls not in NOT_FAILURES and rc not in (0, 75)


def stall_s(run_dir: Path, logs: list[str]) -> float | None:
    for rel in reversed(logs):
        p = Path(rel) if Path(rel).is_absolute() else run_dir / rel
        try:
            with rundir.open_regular(p) as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - TAIL_BYTES))
                tail = f.read()
        except OSError:
            continue
        vals = [float(m) for m in STALL_RE.findall(tail)]
        vals = [v for v in vals if v > 0]
        if vals:
            return max(vals) / 1000.0
    return None


def _step_s(attempts: list[Any], ckpts: dict[int, float]) -> float | None:
    """Seconds per step (save stalls included) from two complete checkpoints written within one attempt."""
    best: float | None = None
    for a in attempts:
        if a.started is None or a.ended is None:
            continue
        inside = sorted((s, t) for s, t in ckpts.items() if a.started <= t <= a.ended)
        for (s1, t1), (s2, t2) in itertools.pairwise(inside):
            if s2 > s1 and t2 > t1:
                rate = (t2 - t1) / (s2 - s1)
                best = rate if best is None else min(best, rate)
    return best


def figures(
    run_dir: Path, attempts: list[Any], events: list[dict[str, Any]], ckpts: dict[int, float]
) -> dict[str, Any]:
    """The run's MTBF, effective ratio so far and recommended interval; None where the run has too little data."""
    by_key = {
        (str(e.get("jobid")), e.get("attempt")): e for e in events if e.get("event", "attempt") == "attempt"
    }
    node_h = 0.0
    job_h = 0.0
    failures = 0
    nodes = 0
    logs: list[str] = []
    for a in attempts:
        ev = by_key.get((a.jobid, a.attempt), {})
        n = len(ev.get("hosts") or [])
        nodes = n or nodes
        if ev.get("log"):
            logs.append(str(ev["log"]))
        d = a.duration_s or 0.0
        node_h += d * max(n, 1) / 3600.0
        job_h += d / 3600.0
        if is_failure(a.cls, a.rc):
            failures += 1
    starts = [a.started for a in attempts if a.started is not None]
    ends = [a.ended for a in attempts if a.ended is not None]
    wall = (max(ends) - min(starts)) if starts and ends else None
    step_s = _step_s(attempts, ckpts)
    first = min((a.first_step for a in attempts if a.first_step is not None), default=None)
    kept = max(ckpts, default=None)
    ratio = None
    if step_s is not None and wall and kept is not None and first is not None:
        ratio = min(1.0, effective_ratio(max(0, kept - (first - 1)) * step_s, wall))
    out: dict[str, Any] = {
        "failures": failures,
        "node_hours": round(node_h, 3),
        "node_mtbf_h": round(node_h / failures, 2) if failures else None,
        "job_mtbf_h": round(job_h / failures, 3) if failures else None,
        "step_s": round(step_s, 4) if step_s is not None else None,
        "effective_ratio": round(ratio, 4) if ratio is not None else None,
        "save_stall_s": None,
        "interval_s": None,
        "interval_steps": None,
    }
    out["recovery"] = recovery(attempts, events)
    out["cold_start"] = cold_starts(attempts, events)
    stall = stall_s(run_dir, logs)
    out["save_stall_s"] = round(stall, 3) if stall is not None else None
    if failures and stall and nodes:
        r = interval(nodes=nodes, node_mtbf_h=node_h / failures, save_stall_s=stall)
        out["interval_s"] = round(r.daly_s, 1)
        if step_s:
            out["interval_steps"] = max(1, round(r.daly_s / step_s))
    return out


# The recovery clock's marks in order, each ending a stage: (stage, mark).  The clock starts at the failed
# attempt's last progress line (`agpt watch --times`: the last sign it trained), else at its end; the watch and
# the failover loop stamp the first three on the batch host, the trainer's rank 0 the rest (agpt.train.clock).
STAGES = (("detection", "detected"), ("teardown", "ended"), ("relaunch", "relaunched"),
          ("process start", "started"), ("imports", "imported"), ("process group", "pg_init"),
          ("model build", "built"), ("state restore", "loaded"), ("first step", "first_step"))  # fmt: skip
# Stages a trainer before issue 39 did not mark: left out of a clock that lacks them, not shown as unknown.
SPLIT_STAGES = ("imports", "process group")
# The trainer's marks (agpt.train.clock's `clock` event): a first attempt's cold start runs through them.
TRAINER_MARKS = ("started", "imported", "pg_init", "built", "loaded", "first_step")
CLOCK_RES_S = (
    0.05  # a stage this much below zero is the clocks' resolution (a process start is known to 10 ms)
)


def _stages(zero: float | None, marks: dict[str, float | None]) -> dict[str, float | None]:
    """Each stage's seconds, from the previous mark (None where a mark, or the one before it, is unknown)."""
    out: dict[str, float | None] = {}
    prev = zero
    for name, key in STAGES:
        v = marks.get(key)
        if v is None and name in SPLIT_STAGES:
            continue  # an older trainer's clock: its model build runs from the process start
        d = None if v is None or prev is None else v - prev
        out[name] = None if d is None else round(0.0 if -CLOCK_RES_S < d < 0 else d, 1)
        prev = v if v is not None else prev
    return out


def recovery(attempts: list[Any], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recovery clock of each failure, stage by stage (STAGES): from the failed attempt's last progress line
    to the first sign of its end (detection), to its end (teardown), to the relaunch, and, from the trainer's
    clock event of the next attempt, to its process start, model built, state restored (and from which tier)
    and first step.  `*_s`: seconds from the failed attempt's end, as before the stages were measured."""
    clocks = {(str(e.get("jobid")), e.get("attempt")): e for e in events if e.get("event") == "clock"}
    ends = {
        (str(e.get("jobid")), e.get("attempt")): e for e in events if e.get("event", "attempt") == "attempt"
    }
    out = []
    for a, b in itertools.pairwise(attempts):
        if not is_failure(a.cls, a.rc) or a.ended is None or b.started is None:
            continue
        ev = ends.get((a.jobid, a.attempt), {})
        c = clocks.get((b.jobid, b.attempt)) or {}
        marks: dict[str, float | None] = {"detected": _num(ev.get("detected")), "ended": a.ended,
                                          "relaunched": b.started}  # fmt: skip
        marks.update({k: _num(c.get(k)) for k in TRAINER_MARKS})
        zero = _num(ev.get("last_progress"))
        row: dict[str, Any] = {"failed": f"{a.jobid}.{a.attempt}", "class": a.cls,
                               "relaunched_s": round(b.started - a.ended, 1)}  # fmt: skip
        sw = ev.get("sweep") if isinstance(ev.get("sweep"), dict) else None
        cost = sw.get("cost_s") if sw else None
        if sw and sw.get("ran") and isinstance(cost, int | float):
            row["sweep_s"] = round(float(cost), 1)  # the health sweep, between the end and the relaunch
        for key in ("started", "built", "loaded", "first_step"):
            v = marks[key]
            row[f"{key}_s"] = round(v - a.ended, 1) if v is not None else None
        first = marks["first_step"]
        row.update({
            "tier": c.get("tier"),
            "from_partner": c.get("from_partner"),
            "since": "last progress" if zero is not None else "attempt end",
            "stages": _stages(zero, marks),
            "total_s": round(first - (zero if zero is not None else a.ended), 1) if first is not None else None,
        })  # fmt: skip
        out.append(row)
    return out


def cold_starts(attempts: list[Any], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cold start of each job's first attempt, stage by stage from its launch (no failure before it): what
    every job of a chain pays, from the trainer's clock event (process start, imports, process group, model
    build, state restore and its tier, first step)."""
    clocks = {(str(e.get("jobid")), e.get("attempt")): e for e in events if e.get("event") == "clock"}
    seen: set[str] = set()
    out = []
    for a in attempts:
        if a.jobid in seen or a.started is None:
            continue
        seen.add(a.jobid)
        c = clocks.get((a.jobid, a.attempt))
        if not c:
            continue
        marks: dict[str, float | None] = {k: _num(c.get(k)) for k in TRAINER_MARKS}
        stages = {k: v for k, v in _stages(a.started, marks).items() if k not in ("detection", "teardown")}
        stages.pop("relaunch", None)
        first = marks["first_step"]
        staging = _num(c.get("staging_s"))  # lib/env.sh env_stage, before the loop: not in total_s
        out.append({"attempt": f"{a.jobid}.{a.attempt}", "tier": c.get("tier"), "stages": stages,
                    "total_s": round(first - a.started, 1) if first is not None else None,
                    "staging_s": round(staging, 1) if staging is not None else None})  # fmt: skip
    return out


def recovery_means(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """The mean of each stage (and of the total) over the failures that measured it."""

    def mean(vals: list[Any]) -> float | None:
        v = [x for x in vals if isinstance(x, int | float)]
        return round(sum(v) / len(v), 1) if v else None

    out = {name: mean([(r.get("stages") or {}).get(name) for r in rows]) for name, _ in STAGES}
    for name in SPLIT_STAGES:
        if out[name] is None:
            del out[name]
    out["total"] = mean([r.get("total_s") for r in rows])
    return out


def _num(v: Any) -> float | None:
    return v if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def _clock_line(r: dict[str, Any]) -> str:
    stages = r.get("stages") or {}
    parts = []
    for name, _ in STAGES:
        if name == "relaunch" and r.get("sweep_s") is not None:  # the relaunch waited for it
            parts.append(f"health sweep {r['sweep_s']} s")
        if stages.get(name) is not None:
            tier = f" ({r['tier']} tier)" if name == "state restore" and r.get("tier") else ""
            parts.append(f"{name} {stages[name]} s{tier}")
    total = r.get("total_s")
    back = (
        f"; first step back {total} s after its {r.get('since', 'attempt end')}" if total is not None else ""
    )
    return ", ".join(parts) + back


def render_figures(g: dict[str, Any]) -> list[str]:
    def v(x: Any, unit: str = "") -> str:
        return "-" if x is None else f"{x}{unit}"

    lines = [
        f"goodput: {g['failures']} failure(s) in {g['node_hours']:g} node-hours: node MTBF {v(g['node_mtbf_h'], ' h')}, "
        f"job MTBF {v(g['job_mtbf_h'], ' h')}; effective training time ratio so far {v(g['effective_ratio'])}"
        f" (step {v(g['step_s'], ' s')} from the checkpoint markers)",
    ]
    if g["interval_s"] is not None:
        steps = f" = about {g['interval_steps']} steps" if g["interval_steps"] else ""
        lines.append(
            f"recommended checkpoint interval (Daly, save stall {g['save_stall_s']} s): "
            f"checkpoint.interval_s {g['interval_s']:.0f}{steps}"
        )
    else:
        lines.append("recommended checkpoint interval: - (needs a failure and a logged save stall)")
    rows = g.get("recovery") or []
    for r in rows:
        lines.append(f"recovery clock after {r['failed']} ({r['class']}): {_clock_line(r)}")
    if len(rows) > 1:
        m = recovery_means(rows)
        since = {str(r.get("since")) for r in rows}
        lines.append(f"recovery clock, mean of {len(rows)} failures: " + _clock_line(
            {"stages": m, "total_s": m["total"], "since": since.pop() if len(since) == 1 else "last sign"}))  # fmt: skip
    for r in g.get("cold_start") or []:
        first = f"; first step {r['total_s']} s after the launch" if r.get("total_s") is not None else ""
        staged = (
            f"staging {r['staging_s']} s before the loop, then " if r.get("staging_s") is not None else ""
        )
        lines.append(f"cold start of {r['attempt']}: {staged}" + _clock_line({**r, "total_s": None}) + first)
    return lines
