"""Failures, swaps, hand-overs and rollbacks as markers at their step, for TensorBoard and W&B.

The trainer that starts after a failure is the first to know of it (the failover loop wrote it to events.jsonl),
so each new process turns the run directory's records into markers and writes the ones not written before.
TensorBoard never drops a text record (a resume's purge drops scalars only), so which markers were written is
kept in `tb/markers.json` and every marker is written once.  Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agpt import goodput, rundir, safewrite

STATE = "markers.json"  # under RUN_DIR/tb/: {"written": {key: step}}


@dataclass(frozen=True, slots=True)
class Marker:
    key: str  # unique per record: the attempt (JOBID.N) or the rollback's step and time
    step: int
    kind: str  # failure, hand-over, rollback, restart
    text: str


def _swap(sw: Any) -> str:
    if not isinstance(sw, dict) or not sw.get("out"):
        return ""
    why = "blind" if sw.get("blind") else "evidence"
    return f"; swapped {','.join(map(str, sw['out']))} -> {','.join(map(str, sw.get('in') or [])) or '(none)'} [{why}]"


def _attempt(ev: dict[str, Any]) -> Marker | None:
    cls = str(ev.get("class") or "?")
    rc = rundir.integer(ev.get("rc"))
    step = rundir.integer(ev.get("last_step"))
    if step is None:
        step = rundir.integer(ev.get("ckpt_step")) or 0
    key = f"attempt:{ev.get('jobid')}.{ev.get('attempt')}"
    where = f"attempt {ev.get('jobid')}.{ev.get('attempt')} (rc {rc if rc is not None else '?'})"
    if cls == "success":
        return None
    if not goodput.is_failure(cls, rc):
        return Marker(
            key, step, "hand-over", f"hand-over: {cls} at step {step}, {where}: {ev.get('reason') or ''}"
        )
    evidence = ev.get("evidence")
    if isinstance(evidence, list):
        evidence = evidence[0] if evidence else ""
    text = f"failure: {cls} at step {step}, {where}{_swap(ev.get('swapped'))}"
    if evidence:
        text += f"; evidence: {str(evidence)[:300]}"
    return Marker(key, step, "failure", text)


def from_run_dir(run_dir: Path, notes: list[str] | None = None) -> list[Marker]:
    """Every marker the run directory's records give, by step; a torn line is skipped with a note in `notes`."""
    out: list[Marker] = []
    notes = [] if notes is None else notes
    for ev in rundir.read_jsonl(run_dir / rundir.EVENTS, notes=notes):
        if ev.get("event", "attempt") == "attempt" and ("class" in ev or "rc" in ev):
            m = _attempt(ev)
            if m is not None:
                out.append(m)
    for h in rundir.read_jsonl(run_dir / rundir.HEALTH, notes=notes):
        step = rundir.integer(h.get("step"))
        if h.get("event") != "rollback" or step is None:
            continue
        text = (f"rollback: {h.get('reason')} at step {step}; reloaded step {h.get('ckpt_step')}, "
                f"skipping batches {h.get('skip')}")  # fmt: skip
        out.append(Marker(f"rollback:{step}:{h.get('time')}", step, "rollback", text))
    return sorted(out, key=lambda m: m.step)


def read_state(tb_dir: Path) -> dict[str, int]:
    try:
        doc = rundir.read_record(tb_dir / STATE)
        written = doc.get("written", {}) if isinstance(doc, dict) else {}
        return {str(k): int(v) for k, v in written.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def write_state(tb_dir: Path, written: dict[str, int]) -> None:
    safewrite.replace(tb_dir / STATE, json.dumps({"written": written}, sort_keys=True))
