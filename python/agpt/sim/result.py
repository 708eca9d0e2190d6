"""What one simulated run gives: the time in each bucket, each fault's record and the recovery clock's means;
`agpt sim run --json` prints `Result.as_dict()`.  (agpt.sim.engine produces it.)"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from agpt import goodput
from agpt.sim import local as simlocal

BUCKETS = (
    "productive",
    "lost_work",
    "restarts",
    "detection",
    "backoff",
    "checkpoint_stalls",
    "slow_steps",
    "queue",
    "waiting_for_a_person",
)


@dataclass(kw_only=True, slots=True)
class FaultRecord:
    cls: str
    time_s: float
    step: int
    steps_lost: int | None = None
    detected_s: float | None = None  # failure -> the attempt's end (detection)
    relaunched_s: float | None = None  # failure -> the next attempt's launch
    back_s: float | None = None  # failure -> the first step back
    attempts: int = 0  # attempts until the first step back (1: the next one worked)
    tier: str | None = None  # where the first attempt back restored its state from: local or global
    job: int = 0  # the chained job it struck
    next_job: bool = False  # its first step back came in a later job (a resubmit, or a person's restart)
    stages: dict[str, float] = field(
        default_factory=dict
    )  # of the attempt that came back (the recovery clock)


@dataclass(kw_only=True, slots=True)
class Result:
    model: str
    nodes: int
    spares: int
    heartbeats: bool
    async_save: bool
    seed: int
    horizon_s: float
    steps: int  # steps kept (the newest complete checkpoint at the end)
    ideal_steps: int  # steps of a run with no failure, no stall, no queue, over the allocated time
    allocated_s: float
    elapsed_s: float
    time: dict[str, float] = field(default_factory=dict)
    faults: list[FaultRecord] = field(default_factory=list)
    classes: dict[str, int] = field(default_factory=dict)  # the classifier's verdicts, over attempts
    person_stops: dict[str, int] = field(default_factory=dict)
    jobs: int = 0
    attempts: int = 0
    verdict: str = ""
    first_start_s: float = 0.0
    cold_starts: list[dict[str, float]] = field(default_factory=list)  # each job's first attempt, by stage
    local: dict[str, float] | None = None  # the local tier's interval and costs (sim.local), when it is on
    shrinks: int = 0  # relaunches on fewer nodes (FAILOVER_SHRINK)
    shrunk_s: float = 0.0  # of the allocated time, attempts on fewer nodes than the job started with

    @property
    def effective_ratio(self) -> float:
        """Productive step time over allocated time (the job held its nodes)."""
        return goodput.effective_ratio(self.time["productive"], self.allocated_s)

    @property
    def wall_ratio(self) -> float:
        """Productive step time over the time from the first job's start to the end (queues and stops in)."""
        return goodput.effective_ratio(self.time["productive"], self.elapsed_s - self.first_start_s)

    @property
    def vs_ideal(self) -> float:
        """Steps per node-hour (spares included) against an ideal run on the active nodes alone."""
        return self.effective_ratio * self.nodes / (self.nodes + self.spares)

    def as_dict(self) -> dict[str, Any]:
        lost = [f.steps_lost for f in self.faults if f.steps_lost is not None]
        return {
            "model": self.model,
            "nodes": self.nodes,
            "spares": self.spares,
            "heartbeats": self.heartbeats,
            "async_save": self.async_save,
            "seed": self.seed,
            "horizon_days": round(self.horizon_s / 86400, 3),
            "effective_ratio": round(self.effective_ratio, 4),
            "wall_ratio": round(self.wall_ratio, 4),
            "steps_per_node_hour_vs_ideal": round(self.vs_ideal, 4),
            "steps": self.steps,
            "allocated_h": round(self.allocated_s / 3600, 3),
            "elapsed_h": round(self.elapsed_s / 3600, 3),
            "time_h": {k: round(v / 3600, 4) for k, v in self.time.items()},
            "failures": len(self.faults),
            "failures_by_class": _count(f.cls for f in self.faults),
            "classified": self.classes,
            "steps_lost_mean": round(sum(lost) / len(lost), 2) if lost else None,
            "person_stops": self.person_stops,
            "jobs": self.jobs,
            "attempts": self.attempts,
            "shrinks": self.shrinks,
            "shrunk_h": round(self.shrunk_s / 3600, 3),
            "verdict": self.verdict,
            "recovery_clock_s": _clock(self.faults),
            "first_step_back_s": first_step_back(self.faults),
            "cold_start_s": _cold(self.cold_starts),
            "local_tier": self.local,
            "faults": [
                {
                    "class": f.cls,
                    "time_h": round(f.time_s / 3600, 4),
                    "step": f.step,
                    "steps_lost": f.steps_lost,
                    "detected_s": _r(f.detected_s),
                    "relaunched_s": _r(f.relaunched_s),
                    "back_s": _r(f.back_s),
                    "attempts": f.attempts,
                    "next_job": f.next_job,
                }
                for f in self.faults
            ],
        }


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def _clock(faults: list[FaultRecord]) -> dict[str, float | None]:
    def mean(vals: list[float | None]) -> float | None:
        v = [x for x in vals if x is not None]
        return round(sum(v) / len(v), 1) if v else None

    stops = [f for f in faults if f.cls != "straggler"]
    out: dict[str, Any] = {
        "detected": mean([f.detected_s for f in stops]),
        "relaunched": mean([f.relaunched_s for f in stops]),
        "first_step_back": mean([f.back_s for f in stops]),
    }
    if any(f.tier == "local" for f in stops):  # the local tier's variant: each stage, and node failures alone
        out["first_step_back_node"] = mean([f.back_s for f in stops if f.cls == "node"])
        out["stages"] = {k: mean([f.stages.get(k) for f in stops if f.stages]) for k in simlocal.STAGES}
        out["local_restores"] = sum(f.tier == "local" for f in stops)
    return out


def _pct(vals: list[float], q: float) -> float:
    """The nearest-rank percentile Q (0-100) of VALS (not empty)."""
    s = sorted(vals)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def _stats(vals: list[float]) -> dict[str, float | int | None]:
    if not vals:
        return {"n": 0, "p50": None, "p95": None, "mean": None}
    return {"n": len(vals), "p50": round(_pct(vals, 50), 1), "p95": round(_pct(vals, 95), 1),
            "mean": round(sum(vals) / len(vals), 1)}  # fmt: skip


def first_step_back(faults: list[FaultRecord]) -> dict[str, Any]:
    """Seconds from each failure to its first step back: per class (n, nearest-rank p50 and p95, mean), over all
    failures, and over the failures the job recovers from itself: not a site-wide outage (`system`, which lasts
    as long as the fault model says) and not one whose step back waited for the next job in the queue."""
    back = [(f, f.back_s) for f in faults if f.back_s is not None]
    return {
        "by_class": {c: _stats([s for f, s in back if f.cls == c]) for c in sorted({f.cls for f, _ in back})},
        "all": _stats([s for _, s in back]),
        "in_job": _stats([s for f, s in back if f.cls != "system" and not f.next_job]),
        "site_outages": _stats([s for f, s in back if f.cls == "system"]),
        "next_job": _stats([s for f, s in back if f.next_job]),
    }


def _cold(starts: list[dict[str, float]]) -> dict[str, Any] | None:
    """A chained job's first attempt, its start to its first step: the mean and each stage's mean."""
    if not starts:
        return None
    n = len(starts)
    stages = {k: round(sum(s[k] for s in starts) / n, 1) for k in starts[0]}
    return {"jobs": n, "mean": round(sum(sum(s.values()) for s in starts) / n, 1), "stages": stages}
