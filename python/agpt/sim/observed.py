"""A run's own goodput figures, for `agpt failover report`: the observed MTBF, the effective ratio so far, and the
checkpoint interval those figures recommend (Young/Daly, agpt.sim.interval).

Standard library only (the report runs on the recovery path).  Inputs, all from the run directory:
- failures: attempts that ended in a failure class (not success, not walltime, not the trainer's own rc 75);
- node-hours: each attempt's duration times its hosts (events.jsonl `hosts`);
- the step time: two complete checkpoints' markers (`.complete` step and time) written in one attempt;
- the save stall: the largest `stall_ms=` of the newest attempt log's tail (the trainer's step lines).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from agpt.sim import interval as iv

NOT_FAILURES = ("success", "walltime")
STALL_RE = re.compile(rb"\bstall_ms=([0-9.]+)")
TAIL_BYTES = 256 * 1024


def _stall_s(run_dir: Path, logs: list[str]) -> float | None:
    for rel in reversed(logs):
        p = Path(rel) if Path(rel).is_absolute() else run_dir / rel
        try:
            with p.open("rb") as f:
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
        if a.cls not in NOT_FAILURES and a.rc not in (0, 75):
            failures += 1
    starts = [a.started for a in attempts if a.started is not None]
    ends = [a.ended for a in attempts if a.ended is not None]
    wall = (max(ends) - min(starts)) if starts and ends else None
    step_s = _step_s(attempts, ckpts)
    first = min((a.first_step for a in attempts if a.first_step is not None), default=None)
    kept = max(ckpts, default=None)
    ratio = None
    if step_s is not None and wall and kept is not None and first is not None:
        ratio = min(1.0, max(0, kept - (first - 1)) * step_s / wall)
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
    stall = _stall_s(run_dir, logs)
    out["save_stall_s"] = round(stall, 3) if stall is not None else None
    if failures and stall and nodes:
        r = iv.interval(nodes=nodes, node_mtbf_h=node_h / failures, save_stall_s=stall)
        out["interval_s"] = round(r.daly_s, 1)
        if step_s:
            out["interval_steps"] = max(1, round(r.daly_s / step_s))
    return out


def recovery(attempts: list[Any], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recovery clock of each failure: seconds from the failed attempt's end (its detection: the launcher
    tore it down, or the idle watchdog fired) to the relaunch, and, from the trainer's clock event of the next
    attempt, to its process start, model built, checkpoint loaded and first step."""
    clocks = {(str(e.get("jobid")), e.get("attempt")): e for e in events if e.get("event") == "clock"}
    out = []
    for a, b in itertools.pairwise(attempts):
        if a.cls in NOT_FAILURES or a.rc in (0, 75) or a.ended is None or b.started is None:
            continue
        row: dict[str, Any] = {
            "failed": f"{a.jobid}.{a.attempt}",
            "class": a.cls,
            "relaunched_s": round(b.started - a.ended, 1),
        }
        c = clocks.get((b.jobid, b.attempt))
        for key in ("started", "built", "loaded", "first_step"):
            v = c.get(key) if c else None
            row[f"{key}_s"] = round(v - a.ended, 1) if isinstance(v, int | float) else None
        out.append(row)
    return out


def render(g: dict[str, Any]) -> list[str]:
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
    for r in g.get("recovery") or []:
        parts = [f"relaunched +{r['relaunched_s']} s"]
        for key, word in (
            ("started", "process up"),
            ("built", "model built"),
            ("loaded", "checkpoint loaded"),
        ):
            if r[f"{key}_s"] is not None:
                parts.append(f"{word} +{r[key + '_s']} s")
        if r["first_step_s"] is not None:
            parts.append(f"first step back +{r['first_step_s']} s")
        lines.append(
            f"recovery clock after {r['failed']} ({r['class']}, detected at its end): " + ", ".join(parts)
        )
    return lines
