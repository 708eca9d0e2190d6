"""Heartbeat evidence: name the host that hung a job, and the host that slows it, from RUN_DIR/heartbeat/.

Why: the idle watchdog only knows that the log went silent; the blind rotation then costs one attempt per guess.
The node records that agpt.heartbeat publishes (one JSON file per host) say where every rank was.  Two kinds of
evidence, each quoted with its numbers:
  stopped  a host whose record stopped while the others went on (its publisher froze: compared by the time each
           record had spent in the same step, a duration on each node's own monotonic clock, anchored at the
           step's collective), or a rank whose tick stopped while its node's publisher kept ticking;
  behind   a host whose ranks are at an earlier step, or still computing (an earlier phase of the same step)
           while every other rank has been waiting, longer than two publish intervals.
Never two nodes' wall clocks: the `time` field is for people.  A missing, torn or half-written file, one from
another attempt or from a host not in the job is ignored with a note; when the evidence names more than a
minority of the hosts, or too few hosts published, nothing is named and blind rotation takes over.

StragglerMonitor runs on rank 0 of the trainer (through agpt.heartbeat's on_publish): per host, the median over
its ranks of the recent compute time per step; a host slower than its peers' median by more than
FAILOVER_STRAGGLER_PCT (20) percent for FAILOVER_STRAGGLER_WINDOWS (3) publish windows in a row is a straggler:
an event in events.jsonl, and with FAILOVER_STRAGGLER=swap a request (heartbeat/swap.json) on which the trainer
saves a checkpoint and exits 75; `agpt failover classify --heartbeat-dir` then names it, class `node`.

Standard library only (the recovery path).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "agpt-heartbeat/1"
PHASE_ORDER = {
    p: i
    for i, p in enumerate(("start", "data", "forward", "backward", "optimizer", "collective", "checkpoint"))
}
SWAP_FILE = "swap.json"


@dataclass(kw_only=True, slots=True)
class Finding:
    bad_hosts: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)  # host -> stopped|behind|straggler


def read_records(
    hb_dir: str | Path, hosts: Sequence[str] | None, attempt: str | None
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """host -> its node record for `attempt`; notes for every file left out and every host without one."""
    d = Path(hb_dir)
    notes: list[str] = []
    recs: dict[str, dict[str, Any]] = {}
    if not d.is_dir():
        return recs, [f"heartbeat: {d}: no such directory (the trainer publishes none)"]
    job = set(hosts) if hosts is not None else None
    for p in sorted(d.glob("*.json")):
        if p.name.startswith(".") or p.name == SWAP_FILE:
            continue
        try:
            rec = json.loads(p.read_text(errors="replace"))
            if not isinstance(rec, dict) or not isinstance(rec.get("ranks"), list):
                raise ValueError("not a node record")
            host = str(rec["host"])
            for r in rec["ranks"]:
                int(r["rank"]), int(r["step"]), float(r["step_s"]), float(r["phase_s"])
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


def _f(x: Any, default: float = 0.0) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return default


def _pos(r: dict[str, Any]) -> tuple[int, int]:
    return int(r["step"]), PHASE_ORDER.get(str(r.get("phase")), 0)


def attribute(hb_dir: str | Path, hosts: Sequence[str] | None, attempt: str | None) -> Finding:
    """Which hosts the heartbeats show as the cause of a hang; empty bad_hosts when they cannot tell."""
    recs, notes = read_records(hb_dir, hosts, attempt)
    out = Finding(notes=notes)
    if len(recs) < 2:
        if recs or not notes:
            out.notes.append(f"heartbeat: {len(recs)} host record(s): too few to compare, nothing named")
        return out
    interval = max(_f(r.get("interval_s"), 15.0) for r in recs.values())
    tick = max(_f(r.get("tick_s"), 1.0) for r in recs.values())
    slack = 2 * interval + 2 * tick  # two records of one host may lie this far apart in time
    stall_min = max(4 * tick, 2.0)  # a live rank's tick moves every tick_s
    evidence: dict[str, str] = {}

    # (a1) a rank whose tick stopped while its node's publisher (and most ranks) kept ticking
    all_ranks = [r for rec in recs.values() for r in rec["ranks"]]
    stalled = [r for r in all_ranks if _f(r.get("stalled_s")) >= stall_min]
    if stalled and len(stalled) * 2 < len(all_ranks):
        for host, rec in recs.items():
            for r in rec["ranks"]:
                if r in stalled and host not in evidence:
                    state = {
                        "T": " (process state T: stopped)",
                        "D": " (process state D: in the kernel)",
                    }.get(str(r.get("state")), "" if r.get("state") else " (process gone)")
                    evidence[host] = (
                        f"heartbeat: {host} stopped: rank {r['rank']} tick {r.get('tick')} unchanged for "
                        f"{_f(r.get('stalled_s')):.1f} s{state} while its node's publisher kept ticking "
                        f"(record seq {rec.get('seq')}); {len(all_ranks) - len(stalled)} other rank(s) ticking"
                    )
                    out.kinds[host] = "stopped"

    # (a2) a host whose record stopped earlier in the last step than the others' records
    def reach(rec: dict[str, Any]) -> tuple[int, float]:
        step = max(int(r["step"]) for r in rec["ranks"])
        return step, max(_f(r["step_s"]) for r in rec["ranks"] if int(r["step"]) == step)

    reaches = {h: reach(rec) for h, rec in recs.items()}
    top = max(s for s, _ in reaches.values())
    at_top = {h: t for h, (s, t) in reaches.items() if s == top}
    for h, t in at_top.items():
        others = [x for k, x in at_top.items() if k != h]
        if not others:
            continue
        med = statistics.median(others)
        if med - t > max(slack, med / 2) and h not in evidence:
            evidence[h] = (
                f"heartbeat: {h} stopped: its record ends {t:.1f} s into step {top} (seq "
                f"{recs[h].get('seq')}), the {len(others)} other host(s)' records went on to {med:.1f} s into "
                f"step {top} (median; publish interval {interval:g} s)"
            )
            out.kinds[h] = "stopped"

    # (b) ranks behind: an earlier step, or an earlier phase while the others wait
    live = [(h, r) for h, rec in recs.items() for r in rec["ranks"] if h not in evidence and r not in stalled]
    if live:
        lead = max(_pos(r) for _, r in live)
        leaders = [r for _, r in live if _pos(r) == lead]
        behind = [(h, r) for h, r in live if _pos(r) < lead]
        wait = statistics.median(_f(r["phase_s"]) for r in leaders)
        at_step = [r for _, r in live if int(r["step"]) == lead[0]]
        step_wait = statistics.median(_f(r["step_s"]) for r in at_step)
        for h, r in behind:
            if h in evidence:
                continue
            if int(r["step"]) < lead[0]:
                # The others completed a later step long ago: whether this rank still computes or its record
                # froze just before it could record that step, the others are waiting for it.
                if step_wait < slack:
                    continue
                evidence[h] = (
                    f"heartbeat: {h} behind: rank {r['rank']}'s record is at step {r['step']} ({r.get('phase')}, "
                    f"{_f(r['step_s']):.1f} s after that step) while {len(at_step)} other rank(s) completed step "
                    f"{lead[0]} {step_wait:.1f} s before (median)"
                )
            else:
                since = _f(r["phase_s"])
                if since < slack or wait < slack:
                    continue
                evidence[h] = (
                    f"heartbeat: {h} behind: rank {r['rank']} at step {r['step']} in {r.get('phase')} for "
                    f"{since:.1f} s while {len(leaders)} other rank(s) wait at step {lead[0]} in "
                    f"{leaders[0].get('phase')} (median {wait:.1f} s)"
                )
            out.kinds[h] = "behind"

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
        out.kinds.clear()
        return out
    order = list(hosts) if hosts is not None else sorted(recs)
    out.bad_hosts = [h for h in order if h in evidence]
    out.evidence = [evidence[h] for h in out.bad_hosts]
    return out


def read_swap(hb_dir: str | Path, attempt: str | None) -> dict[str, Any] | None:
    """The straggler swap the trainer was asked for in `attempt`, or None."""
    p = Path(hb_dir) / SWAP_FILE
    try:
        req = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(req, dict) or not req.get("host"):
        return None
    if attempt is not None and str(req.get("attempt")) != attempt:
        return None
    return req


def apply(result: Any, hb_dir: str | Path, hosts: Sequence[str], attempt: str | None, rc: int) -> None:
    """Refine a classification (agpt.failover.classify.Classification) with heartbeat evidence, in place.

    A hang (the watchdog's 124 or a collective timeout) that names no host becomes `node` with the hosts the
    heartbeats show stopped or behind; an rc-75 stop the straggler monitor asked for becomes `node` naming the
    straggler.  Anything else is left alone.
    """
    if rc == 75:
        req = read_swap(hb_dir, attempt)
        if req and str(req["host"]) in hosts:
            result.cls = "node"
            result.bad_hosts = [str(req["host"])]
            result.evidence = [
                str(req.get("evidence") or f"straggler: {req['host']}"),
                *list(result.evidence),
            ]
            result.notes.append(f"heartbeat: the trainer stopped to swap the straggler {req['host']}")
        return
    if result.cls != "hang" or result.bad_hosts:
        return
    try:
        found = attribute(hb_dir, hosts, attempt)
    except Exception as e:
        result.notes.append(f"heartbeat: reading failed ({type(e).__name__}: {e}): blind rotation")
        return
    result.notes.extend(found.notes)
    if found.bad_hosts:
        result.cls = "node"
        result.bad_hosts = found.bad_hosts
        result.evidence = found.evidence + list(result.evidence)
        result.notes.append(f"heartbeat: the hang is attributed to {', '.join(found.bad_hosts)}")


# --- stragglers ----------------------------------------------------------------------------------------------
@dataclass(kw_only=True, slots=True)
class StragglerMonitor:
    """Rank 0's view of the node records, one poll per publish interval."""

    run_dir: Path
    attempt: str
    pct: float = 20.0
    windows: int = 3
    swap: bool = False
    streak: dict[str, int] = field(default_factory=dict)
    last_seq: dict[str, int] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)
    swap_host: str | None = None

    @classmethod
    def from_env(cls, run_dir: str | Path, attempt: str) -> StragglerMonitor:
        def num(name: str, default: float) -> float:
            try:
                return float(os.environ.get(name) or default)
            except ValueError:
                return default

        return cls(
            run_dir=Path(run_dir),
            attempt=attempt,
            pct=num("FAILOVER_STRAGGLER_PCT", 20.0),
            windows=max(1, int(num("FAILOVER_STRAGGLER_WINDOWS", 3))),
            swap=os.environ.get("FAILOVER_STRAGGLER", "report").strip().lower() == "swap",
        )

    def poll(self) -> str | None:
        """Count one window; returns a host newly found a straggler (its event written), else None."""
        recs, _ = read_records(self.run_dir / "heartbeat", None, self.attempt)
        per_host: dict[str, float] = {}
        for h, rec in recs.items():
            vals = [_f(r.get("compute_s"), -1) for r in rec["ranks"]]
            vals = [v for v in vals if v > 0]
            seq = int(rec.get("seq") or 0)
            if vals and seq != self.last_seq.get(h):  # a fresh record: one window
                per_host[h] = statistics.median(vals)
            self.last_seq[h] = seq
        if len(per_host) < 3:  # a median of peers needs at least two of them
            return None
        found = None
        for h, v in per_host.items():
            peers = statistics.median(x for k, x in per_host.items() if k != h)
            if peers > 0 and v > peers * (1 + self.pct / 100):
                self.streak[h] = self.streak.get(h, 0) + 1
            else:
                self.streak[h] = 0
            if self.streak[h] >= self.windows and h not in self.reported:
                self.reported.add(h)
                slower = (v / peers - 1) * 100
                evidence = (
                    f"straggler: {h} computes {v:.3f} s/step, its peers' median {peers:.3f} s (+{slower:.0f}%, "
                    f"over {self.pct:g}%) for {self.streak[h]} windows in a row"
                )
                ev = {
                    "event": "straggler",
                    "attempt": self.attempt,
                    "host": h,
                    "compute_s": round(v, 4),
                    "peers_median_s": round(peers, 4),
                    "slower_pct": round(slower, 1),
                    "windows": self.streak[h],
                    "action": "swap" if self.swap and self.swap_host is None else "report",
                    "evidence": evidence,
                    "time": round(time.time(), 3),
                }
                _append_event(self.run_dir / "events.jsonl", ev)
                if ev["action"] == "swap":
                    self.swap_host = h
                    tmp = self.run_dir / "heartbeat" / f".{SWAP_FILE}.tmp"
                    tmp.write_text(json.dumps({k: ev[k] for k in ("attempt", "host", "evidence", "time")}))
                    os.replace(tmp, self.run_dir / "heartbeat" / SWAP_FILE)
                found = found or h
        return found


def _append_event(path: Path, ev: dict[str, Any]) -> None:
    """One line in one write(2) with O_APPEND: a reader never sees half of it next to another writer's."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(ev, separators=(",", ":")) + "\n").encode())
    finally:
        os.close(fd)
