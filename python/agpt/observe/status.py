"""One snapshot of a run directory: the figures `agpt monitor`, RUN_DIR/metrics.prom and `agpt report --html` show.

Standard library only (the failover loop rewrites metrics.prom through this module).  The recovery figures
(attempts, classes, swaps, time lost, the effective ratio, the recovery clock) come from `agpt failover
report`'s own `build()`, so the monitor and the report cannot disagree; the training figures come from the
tail of metrics.jsonl, so a three-week run's file is never read whole.  Torn or unreadable files degrade to
"unknown" with a note, never an exception: a monitor must keep drawing while the run is half-written.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agpt import goodput, rundir
from agpt.errors import BadInput
from agpt.failover import hosts
from agpt.failover import report as freport
from agpt.heartbeat import format as hbformat
from agpt.heartbeat import reader as hbreader

TAIL_BYTES = 256 * 1024  # the newest records of metrics.jsonl: a few hundred logged steps
# A run directory has at least one of these (a fresh `agpt train --run-dir` makes ckpt/ at once).
MARKS = (rundir.METRICS, rundir.EVENTS, rundir.CHAIN, rundir.PROGRESS, rundir.CKPT, "hosts", rundir.ATTEMPTS,
         hbformat.DIR)  # fmt: skip


def check_run_dir(path: Path) -> Path:
    """`path` when it looks like a run directory; BadInput naming it otherwise."""
    if not path.is_dir():
        raise BadInput(f"{path}: not a run directory (no such directory)")
    if not any((path / m).exists() for m in MARKS):
        raise BadInput(f"{path}: not a run directory (none of {', '.join(MARKS)} in it)")
    return path


def tail_records(
    path: Path, nbytes: int = TAIL_BYTES, notes: list[str] | None = None
) -> list[dict[str, Any]]:
    """The records in the last `nbytes` of a metrics.jsonl, the last of each step, oldest first."""
    try:
        with rundir.open_regular(path) as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - nbytes))
            data = f.read()
    except FileNotFoundError:
        return []
    except OSError as e:
        if notes is not None:
            notes.append(f"{path}: unreadable ({e.strerror or e})")
        return []
    lines = data.decode("utf-8", errors="replace").split("\n")
    if size > nbytes:
        lines = lines[1:]  # the first line of the window is cut
    by_step: dict[int, dict[str, Any]] = {}
    for line in lines:
        rec = rundir.metrics_record(line)
        if rec is not None:
            by_step.pop(rec["step"], None)  # a replayed step moves to the end: it is the newest
            by_step[rec["step"]] = rec
    return sorted(by_step.values(), key=lambda r: r["step"])


@dataclass(kw_only=True, slots=True)
class Beat:
    """One node's heartbeat record as the monitor shows it."""

    host: str
    attempt: str
    mtime: float  # when the file was last replaced (its age: this machine's clock against it)
    step: int | None  # its slowest rank's step
    phase: str


@dataclass(kw_only=True, slots=True)
class Status:
    run_dir: Path
    now: float
    recent: list[dict[str, Any]]  # the newest metrics.jsonl records, oldest first
    report: freport.Report | None  # None without events.jsonl (no failover loop yet)
    hosts: dict[str, int]  # active, spare, bad (proven), blind (suspects)
    beats: list[Beat]
    current: dict[str, Any] | None  # the newest attempt: jobid, attempt, running, log_age_s
    rollbacks: int
    notes: list[str] = field(default_factory=list)

    # -- training ----------------------------------------------------------------------------------
    @property
    def last(self) -> dict[str, Any]:
        return self.recent[-1] if self.recent else {}

    def num(self, key: str) -> float | None:
        return rundir.num(self.last.get(key))

    @property
    def step(self) -> int | None:
        return rundir.integer(self.last.get("step"))

    @property
    def target_steps(self) -> int | None:
        return rundir.integer(self.last.get("target_steps"))

    @property
    def target_tokens(self) -> int | None:
        return rundir.integer(self.last.get("target_tokens"))

    @property
    def tokens_per_s(self) -> float | None:
        """All devices together."""
        per, dev = self.num("tokens_per_s_per_device"), self.num("devices")
        return None if per is None or dev is None else per * dev

    @property
    def step_s(self) -> float | None:
        """The median seconds per step over the newest records (checkpoint stalls and logging included)."""
        vals = [v for r in self.recent[-20:] if (v := rundir.num(r.get("step_s"))) is not None and v > 0]
        return statistics.median(vals) if vals else None

    @property
    def eta_s(self) -> float | None:
        """Steps left times the recent step time: what training alone still needs (no failures counted)."""
        if self.step is None or self.target_steps is None or self.step_s is None:
            return None
        return max(0, self.target_steps - self.step) * self.step_s

    @property
    def since_step_s(self) -> float | None:
        t = self.num("time")
        return None if t is None else max(0.0, self.now - t)

    # -- recovery (agpt failover report's figures) ---------------------------------------------------
    @property
    def totals(self) -> dict[str, Any]:
        return self.report.totals() if self.report is not None else {}

    @property
    def goodput(self) -> dict[str, Any]:
        return (self.report.goodput or {}) if self.report is not None else {}

    @property
    def failures(self) -> list[freport.AttemptRow]:
        if self.report is None:
            return []
        return [a for a in self.report.attempts if goodput.is_failure(a.cls, a.rc)]

    @property
    def last_failure(self) -> freport.AttemptRow | None:
        return self.failures[-1] if self.failures else None

    @property
    def last_recovery(self) -> dict[str, Any] | None:
        """The recovery clock of the last failure (goodput.recovery), when the run went on after it."""
        a = self.last_failure
        if a is None:
            return None
        key = f"{a.jobid}.{a.attempt}"
        rows = [r for r in self.goodput.get("recovery") or [] if r.get("failed") == key]
        return rows[-1] if rows else None


def _count(path: Path) -> int:
    try:
        return len(hosts.read_hosts(path))
    except BadInput:
        return 0


def _hosts(d: Path, notes: list[str]) -> dict[str, int]:
    bad = hosts.read_bad(d / rundir.HOSTS_BAD)
    proven = {b.host for b in bad if not b.blind}
    return {
        "active": _count(d / rundir.HOSTS_ACTIVE),
        "spare": _count(d / rundir.HOSTS_SPARE),
        "bad": len(proven),
        "blind": len({b.host for b in bad if b.blind} - proven),
        "evicted_evidence": sum(1 for b in bad if not b.blind),
        "evicted_blind": sum(1 for b in bad if b.blind),
    }


def _beats(d: Path, now: float, notes: list[str]) -> list[Beat]:
    recs, _skipped = hbreader.read_records(d / hbformat.DIR, None, None)
    out = []
    for host, rec in recs.items():
        try:
            mtime = (d / hbformat.DIR / hbformat.node_file(host)).stat().st_mtime
        except OSError:
            mtime = rundir.num(rec.get("time")) or now
        ranks = [r for r in rec.get("ranks", []) if isinstance(r, dict)]
        slow = min(ranks, key=lambda r: rundir.integer(r.get("step")) or 0) if ranks else {}
        out.append(Beat(host=host, attempt=str(rec.get("attempt", "?")), mtime=mtime,
                        step=rundir.integer(slow.get("step")), phase=str(slow.get("phase", "?"))))  # fmt: skip
    return sorted(out, key=lambda b: b.mtime)


def _current(d: Path, now: float) -> dict[str, Any] | None:
    """The newest attempt log: running while it has no classification beside it."""
    best: tuple[float, Path] | None = None
    try:
        for p in (d / rundir.ATTEMPTS).glob("*.log"):
            if p.name.endswith(".preflight.log"):
                continue
            m = p.stat().st_mtime
            if best is None or m > best[0]:
                best = (m, p)
    except OSError:
        return None
    if best is None:
        return None
    jobid, _, n = best[1].name.removesuffix(".log").rpartition(".")
    running = not (best[1].parent / f"{jobid}.{n}.class.json").exists()
    return {
        "jobid": jobid,
        "attempt": rundir.integer(n),
        "running": running,
        "log_age_s": max(0.0, now - best[0]),
    }


def _rollbacks(d: Path, notes: list[str]) -> int:
    return sum(1 for r in rundir.read_jsonl(d / rundir.HEALTH, notes=notes) if r.get("event") == "rollback")


def snapshot(
    run_dir: str | Path, *, now: float | None = None, tail_bytes: int = TAIL_BYTES, beats: bool = True
) -> Status:
    """Read a run directory once.  BadInput only when it is not a run directory.  Without `beats` the node
    heartbeat records are not read (one file per node: thousands on a large run)."""
    d = check_run_dir(Path(run_dir))
    now = time.time() if now is None else now
    notes: list[str] = []
    rep = None
    if (d / rundir.EVENTS).is_file():
        try:
            rep = freport.build(d)
        except BadInput as e:  # an events.jsonl with no attempt yet, or unreadable: the rest still shows
            notes.append(str(e))
        else:
            notes.extend(rep.notes)
    return Status(
        run_dir=d,
        now=now,
        recent=tail_records(d / rundir.METRICS, tail_bytes, notes),
        report=rep,
        hosts=_hosts(d, notes),
        beats=_beats(d, now, notes) if beats else [],
        current=_current(d, now),
        rollbacks=_rollbacks(d, notes),
        notes=notes,
    )
