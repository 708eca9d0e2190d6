"""Heartbeat evidence: name the host that hung a job from RUN_DIR/heartbeat/, or say why it cannot.

Why: the idle watchdog only knows that the log went silent; the blind rotation then costs one attempt per guess.
The node records that agpt.heartbeat.writer publishes (one JSON file per host, agpt.heartbeat.format) say where
every rank was.  Two kinds of evidence, each quoted with its numbers:
  stopped  a host whose record stopped while the others went on (its publisher froze: compared by the time each
           record had spent in the same step, a duration on each node's own monotonic clock, anchored at the
           step's collective), or a rank whose tick stopped while its node's publisher kept ticking;
           or a record left at an earlier step, younger than the others' wait (it was not published again);
  behind   a host whose ranks are at an earlier step, or still computing (an earlier phase of the same step)
           while every other rank has been waiting, longer than two publish intervals.  When a host is stopped,
           the hosts behind it are waiting on it (a consequence, noted, not named).
Never two nodes' wall clocks: the `time` field is for people.  A missing, torn or half-written file, one from
another attempt or from a host not in the job is ignored with a note; when the evidence names more than a
minority of the hosts, or too few hosts published, nothing is named and blind rotation takes over.

`agpt failover classify --heartbeat-dir` applies it to a hang (agpt.failover.classify.apply_heartbeats); the
straggler monitor (agpt.heartbeat.straggler) reads the same records.  Standard library only (the recovery path).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agpt import rundir
from agpt.heartbeat.format import FORMAT, PHASE_ORDER, SWAP_FILE, parse_node

Records = dict[str, dict[str, Any]]  # host -> its node record


@dataclass(kw_only=True, slots=True)
class Finding:
    bad_hosts: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)  # host -> stopped|behind|straggler


def read_records(
    hb_dir: str | Path, hosts: Sequence[str] | None, attempt: str | None
) -> tuple[Records, list[str]]:
    """host -> its node record for `attempt`; notes for every file left out and every host without one."""
    d = Path(hb_dir)
    notes: list[str] = []
    recs: Records = {}
    if not d.is_dir():
        return recs, [f"heartbeat: {d}: no such directory (the trainer publishes none)"]
    job = set(hosts) if hosts is not None else None
    for p in sorted(d.glob("*.json")):
        if p.name.startswith(".") or p.name == SWAP_FILE:
            continue
        try:
            rec = parse_node(rundir.read_bytes(p, limit=rundir.RECORD_MAX).decode("utf-8", errors="replace"))
            host = str(rec["host"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            notes.append(f"heartbeat: {p.name}: unreadable or half-written ({type(e).__name__}): ignored")
            continue
        if rec.get("format") != FORMAT:
            notes.append(f"heartbeat: {p.name}: format {rec.get('format')!r}, not {FORMAT}: ignored")
        elif attempt is not None and str(rec.get("attempt")) != attempt:
            notes.append(f"heartbeat: {p.name}: from attempt {rec.get('attempt')}, not {attempt}: ignored")
        elif job is not None and host not in job:
            notes.append(f"heartbeat: {p.name}: host {host} is not in the job: ignored")
        elif not rec["ranks"]:
            notes.append(f"heartbeat: {p.name}: no rank in it: ignored")
        else:
            recs[host] = rec
    if job is not None and recs:
        silent = [h for h in hosts or [] if h not in recs]
        if silent:
            notes.append(f"heartbeat: no record from {', '.join(silent)} (never published in this attempt)")
    return recs, notes


def as_float(x: Any, default: float = 0.0) -> float:
    """A record's number, or `default` when it holds none (a record is data)."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return default


def _pos(r: dict[str, Any]) -> tuple[int, int]:
    """A rank's position: its step, then its phase within the step."""
    return int(r["step"]), PHASE_ORDER.get(str(r.get("phase")), 0)


@dataclass(kw_only=True, slots=True)
class _Window:
    """How far apart two records may lie in time: the publish interval and the tick, the largest published."""

    interval: float
    slack: float  # two records of one host may lie this far apart in time
    stall_min: float  # a live rank's tick moves every tick_s

    @classmethod
    def of(cls, recs: Records) -> _Window:
        interval = max(as_float(r.get("interval_s"), 15.0) for r in recs.values())
        tick = max(as_float(r.get("tick_s"), 1.0) for r in recs.values())
        return cls(interval=interval, slack=2 * interval + 2 * tick, stall_min=max(4 * tick, 2.0))


Named = dict[str, tuple[str, str]]  # host -> (stopped|behind, the evidence line)


def attribute(hb_dir: str | Path, hosts: Sequence[str] | None, attempt: str | None) -> Finding:
    """Which hosts the heartbeats show as the cause of a hang; empty bad_hosts when they cannot tell."""
    recs, notes = read_records(hb_dir, hosts, attempt)
    out = Finding(notes=notes)
    if len(recs) < 2:
        if recs or not notes:
            out.notes.append(f"heartbeat: {len(recs)} host record(s): too few to compare, nothing named")
        return out
    w = _Window.of(recs)
    evidence: Named = {}
    stalled = _stalled_ranks(recs, w, evidence)
    _stopped_early(recs, w, evidence)
    _behind(recs, w, stalled, evidence)
    _consequences(evidence, out.notes)
    if not evidence:
        out.notes.append(
            f"heartbeat: {len(recs)} host record(s), none stopped or behind the others: the hang is not explained"
        )
        return out
    if len(evidence) * 2 > len(recs) or len(evidence) == len(recs):
        out.notes.append(
            f"heartbeat: {len(evidence)} of {len(recs)} hosts look stopped or behind: not one host's fault, "
            "nothing named"
        )
        return out
    order = list(hosts) if hosts is not None else sorted(recs)
    out.bad_hosts = [h for h in order if h in evidence]
    out.evidence = [evidence[h][1] for h in out.bad_hosts]
    out.kinds = {h: evidence[h][0] for h in out.bad_hosts}
    return out


def _stalled_ranks(recs: Records, w: _Window, evidence: Named) -> list[dict[str, Any]]:
    """(a1) ranks whose tick stopped while their node's publisher (and most ranks) kept ticking; their hosts are
    `stopped`.  Returns the stalled ranks (none when they are half the ranks or more)."""
    all_ranks = [r for rec in recs.values() for r in rec["ranks"]]
    stalled = [r for r in all_ranks if as_float(r.get("stalled_s")) >= w.stall_min]
    if not stalled or len(stalled) * 2 >= len(all_ranks):
        return stalled
    for host, rec in recs.items():
        for r in rec["ranks"]:
            if r in stalled and host not in evidence:
                state = {
                    "T": " (process state T: stopped)",
                    "D": " (process state D: in the kernel)",
                }.get(str(r.get("state")), "" if r.get("state") else " (process gone)")
                evidence[host] = (
                    "stopped",
                    f"heartbeat: {host} stopped: rank {r['rank']} tick {r.get('tick')} unchanged for "
                    f"{as_float(r.get('stalled_s')):.1f} s{state} while its node's publisher kept ticking "
                    f"(record seq {rec.get('seq')}); {len(all_ranks) - len(stalled)} other rank(s) ticking",
                )
    return stalled


def _stopped_early(recs: Records, w: _Window, evidence: Named) -> None:
    """(a2) hosts whose record stopped earlier in the last step than the others' records: `stopped`."""

    def reach(rec: dict[str, Any]) -> tuple[int, float]:
        step = max(int(r["step"]) for r in rec["ranks"])
        return step, max(as_float(r["step_s"]) for r in rec["ranks"] if int(r["step"]) == step)

    reaches = {h: reach(rec) for h, rec in recs.items()}
    top = max(s for s, _ in reaches.values())
    at_top = {h: t for h, (s, t) in reaches.items() if s == top}
    for h, t in at_top.items():
        others = [x for k, x in at_top.items() if k != h]
        if not others:
            continue
        med = statistics.median(others)
        if med - t > max(w.slack, med / 2) and h not in evidence:
            evidence[h] = (
                "stopped",
                f"heartbeat: {h} stopped: its record ends {t:.1f} s into step {top} (seq "
                f"{recs[h].get('seq')}), the {len(others)} other host(s)' records went on to {med:.1f} s into "
                f"step {top} (median; publish interval {w.interval:g} s)",
            )


def _behind(recs: Records, w: _Window, stalled: list[dict[str, Any]], evidence: Named) -> None:
    """(b) ranks behind: an earlier step, or an earlier phase while the others wait: their hosts are `behind`."""
    live = [(h, r) for h, rec in recs.items() for r in rec["ranks"] if h not in evidence and r not in stalled]
    if not live:
        return
    lead = max(_pos(r) for _, r in live)
    leaders = [r for _, r in live if _pos(r) == lead]
    wait = statistics.median(as_float(r["phase_s"]) for r in leaders)
    at_step = [r for _, r in live if int(r["step"]) == lead[0]]
    step_wait = statistics.median(as_float(r["step_s"]) for r in at_step)
    for h, r in live:
        if h in evidence or _pos(r) >= lead:
            continue
        if int(r["step"]) < lead[0]:
            # The others completed a later step long ago: whether this rank still computes or its record
            # froze just before it could record that step, the others are waiting for it.
            if step_wait < w.slack:
                continue
            text = (
                f"rank {r['rank']}'s record is at step {r['step']} ({r.get('phase')}, "
                f"{as_float(r['step_s']):.1f} s after that step) while {len(at_step)} other rank(s) completed step "
                f"{lead[0]} {step_wait:.1f} s before (median)"
            )
            if as_float(r["step_s"]) + w.slack < step_wait:
                # A live publisher republishes every interval with the time grown: a record that says it is
                # younger than the others' wait froze with its publisher (one rank per node: the rank itself).
                evidence[h] = ("stopped", f"heartbeat: {h} stopped: {text}; not published again since")
            else:
                evidence[h] = ("behind", f"heartbeat: {h} behind: {text}")
            continue
        since = as_float(r["phase_s"])
        if since < w.slack or wait < w.slack:
            continue
        evidence[h] = (
            "behind",
            f"heartbeat: {h} behind: rank {r['rank']} at step {r['step']} in {r.get('phase')} for "
            f"{since:.1f} s while {len(leaders)} other rank(s) wait at step {lead[0]} in "
            f"{leaders[0].get('phase')} (median {wait:.1f} s)",
        )


def _consequences(evidence: Named, notes: list[str]) -> None:
    """A stopped host explains the hang: hosts merely behind it are waiting on it, not its cause.  (A collective
    can complete on some ranks and not on others when one rank stops inside it: the rank that waits for the
    stopped one's last message sits an operation behind the ones that finished, a live record, as long stuck as
    everyone else.)  Evicting them too would put healthy nodes out of the job."""
    stopped = ", ".join(h for h, (kind, _) in evidence.items() if kind == "stopped")
    if not stopped:
        return
    for h in [h for h, (kind, _) in evidence.items() if kind == "behind"]:
        notes.append(f"{evidence.pop(h)[1]}: waiting on the stopped {stopped}, a consequence: not named")


def read_swap(hb_dir: str | Path, attempt: str | None) -> dict[str, Any] | None:
    """The straggler swap the trainer was asked for in `attempt`, or None."""
    p = Path(hb_dir) / SWAP_FILE
    try:
        req = rundir.read_record(p)
    except (OSError, ValueError):
        return None
    if not isinstance(req, dict) or not req.get("host"):
        return None
    if attempt is not None and str(req.get("attempt")) != attempt:
        return None
    return req
