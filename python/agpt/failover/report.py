"""`agpt failover report RUN_DIR [--json]`: what the failover loop did to a run, as a timeline.

Why: after a night of failures the operator asks three questions: which hosts did we evict and on what grounds
(evidence or a blind guess), how much training did we lose, and did the run stop for a reason that needs a
human.  The answers are spread over events.jsonl, hosts/bad, chain.jsonl and the checkpoints; this puts them on
one screen.  Lines a killed writer left half-written are skipped and counted, never fatal.

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from agpt import ckptdir, rundir, shown
from agpt import goodput as gp
from agpt.errors import BadInput
from agpt.evals import records
from agpt.failover import hosts, policy
from agpt.failover import shrink as shrinklib
from agpt.heartbeat.format import STACKS_SUFFIX


@dataclass(kw_only=True, slots=True)
class AttemptRow:
    """One attempt, as the timeline shows it."""

    jobid: str
    attempt: int
    rc: int | None
    cls: str
    started: float | None
    ended: float | None
    first_step: int | None
    last_step: int | None
    ckpt_step: int | None
    swapped_out: list[str] = field(default_factory=list)
    swapped_in: list[str] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)
    blind: bool = False
    bad_hosts: list[str] = field(default_factory=list)
    evidence: str = ""
    reason: str = ""
    steps_made: int = 0
    lost_s: float | None = None
    sweep: dict[str, Any] | None = None  # the health sweep run after this attempt (agpt.failover.sweep)
    then: str = ""  # the stop for a person deferred for a save before it (the event's `then`): its verdict
    nodes: int | None = None  # hosts the attempt ran on

    @property
    def duration_s(self) -> float | None:
        if self.started is None or self.ended is None:
            return None
        return max(0.0, self.ended - self.started)

    @property
    def why(self) -> str:
        if not self.swapped_out:
            return ""
        return "blind" if self.blind else "evidence"

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobid": self.jobid,
            "attempt": self.attempt,
            "rc": self.rc,
            "class": self.cls,
            "started": self.started,
            "ended": self.ended,
            "duration_s": _round(self.duration_s),
            "first_step": self.first_step,
            "last_step": self.last_step,
            "ckpt_step": self.ckpt_step,
            "steps_made": self.steps_made,
            "lost_s": _round(self.lost_s),
            "swapped_out": self.swapped_out,
            "swapped_in": self.swapped_in,
            "swap_why": self.why or None,
            "returned": self.returned,
            "bad_hosts": self.bad_hosts,
            "evidence": self.evidence,
            "reason": self.reason,
            "sweep": self.sweep,
            "nodes": self.nodes,
        }


@dataclass(kw_only=True, slots=True)
class Report:
    run_dir: str
    attempts: list[AttemptRow]
    stops: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    bad: list[dict[str, Any]]
    notes: list[str]
    goodput: dict[str, Any] | None = (
        None  # the run's MTBF, ratio so far, recommended interval (agpt.goodput.figures)
    )
    stragglers: list[dict[str, Any]] = field(default_factory=list)  # heartbeat monitor events
    stacks: list[str] = field(default_factory=list)  # attempts/JOBID.N.stacks/: where each rank was
    resume_step: int | None = None  # the newest complete checkpoint: where the next attempt starts
    evaluation: dict[str, Any] | None = (
        None  # eval.jsonl: newest record per scorer, bests (agpt.evals.records)
    )
    nodes: dict[str, shrinklib.JobNodes] = field(default_factory=dict)  # per job: node counts, shrinks, cost
    measured: dict[str, Any] | None = None  # tokens/s at each device count (metrics.jsonl)

    def totals(self) -> dict[str, Any]:
        proven = sum(len(a.swapped_out) for a in self.attempts if a.swapped_out and not a.blind)
        blind = sum(len(a.swapped_out) for a in self.attempts if a.blind)
        lost = [a.lost_s for a in self.attempts if a.lost_s is not None]
        starts = [a.started for a in self.attempts if a.started is not None]
        ends = [a.ended for a in self.attempts if a.ended is not None]
        busy = sum(a.duration_s or 0.0 for a in self.attempts)
        wall = (max(ends) - min(starts)) if starts and ends else None
        last = self.stops[-1] if self.stops else {}
        classes: dict[str, int] = {}
        for a in self.attempts:
            classes[a.cls] = classes.get(a.cls, 0) + 1
        return {
            "jobs": len({a.jobid for a in self.attempts} | {str(j.get("jobid")) for j in self.jobs}),
            "attempts": len(self.attempts),
            "classes": classes,
            "swaps_proven": proven,
            "swaps_blind": blind,
            "preflight_evicted": sum(1 for b in self.bad if b["evidence"].startswith("preflight")),
            "sweeps": sum(1 for a in self.attempts if a.sweep is not None and a.sweep.get("ran")),
            "sweep_evicted": sum(1 for b in self.bad if b["evidence"].startswith("sweep:")),
            "sweep_s": _round(sum(_num(a.sweep.get("cost_s")) or 0.0 for a in self.attempts if a.sweep)),
            "steps_made": sum(a.steps_made for a in self.attempts),
            "last_step": max((a.last_step for a in self.attempts if a.last_step is not None), default=None),
            "lost_s": _round(sum(lost)) if lost else None,
            "between_attempts_s": _round(wall - busy) if wall is not None else None,
            "wall_s": _round(wall),
            "resume_step": self.resume_step,
            "verdict": last.get("verdict"),
            "exit": last.get("exit"),
            "reason": last.get("reason"),
            "shrinks": sum(len(j.shrinks) for j in self.nodes.values()),
            "shrunk_s": _round(sum(j.shrunk_s for j in self.nodes.values())),
            "shrink_cost_s": _round(sum(j.cost_s for j in self.nodes.values())),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "attempts": [a.as_dict() for a in self.attempts],
            "stops": self.stops,
            "jobs": self.jobs,
            "bad_hosts": self.bad,
            "totals": self.totals(),
            "goodput": self.goodput,
            "notes": self.notes,
            "stragglers": self.stragglers,
            "stacks": self.stacks,
            "evaluation": self.evaluation,
            "nodes": {jid: j.as_dict() for jid, j in self.nodes.items()},
            "shrinks": [e for j in self.nodes.values() for e in j.shrinks],
            "throughput_by_devices": self.measured,
        }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


_num = rundir.num
_int = rundir.integer


def read_jsonl(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """Objects of a JSON-lines file; a line that is not an object (a half-written tail) is skipped and noted."""
    return rundir.read_jsonl(path, notes=notes)


def read_bad(path: Path) -> list[dict[str, Any]]:
    """hosts/bad records (hosts.read_bad) as the report shows them: evidence, or blind."""
    return [
        {
            "host": r.host,
            "time": r.time or None,
            "jobid": r.jobid,
            "blind": r.blind,
            "evidence": "" if r.blind else r.evidence,
        }
        for r in hosts.read_bad(path)
    ]


def checkpoint_times(run_dir: Path) -> dict[int, float]:
    """step -> time of each complete checkpoint (agpt.ckptdir's rule), to date the work an attempt saved."""
    return {d.step: t for d in ckptdir.complete(run_dir / rundir.CKPT) if (t := d.time) is not None}


def _strs(v: Any) -> list[str]:
    """A list of names from a record; anything else (a record is data) is no names."""
    return [str(h) for h in v] if isinstance(v, list) else []


def _row(ev: dict[str, Any]) -> AttemptRow:
    sw = ev.get("swapped")
    out: list[str] = []
    inn: list[str] = []
    returned: list[str] = []
    blind = False
    if isinstance(sw, dict):
        out = _strs(sw.get("out"))
        inn = _strs(sw.get("in"))
        blind = bool(sw.get("blind")) and bool(out)
        returned = _strs(sw.get("returned"))
    elif isinstance(sw, list):  # a plain list of hosts swapped out
        out = _strs(sw)
        blind = bool(ev.get("blind")) or ev.get("class") in ("hang", "crash")
    evidence = ev.get("evidence")
    if isinstance(evidence, list):
        evidence = evidence[0] if evidence else ""
    return AttemptRow(
        jobid=str(ev.get("jobid", "")),
        attempt=_int(ev.get("attempt")) or 0,
        rc=_int(ev.get("rc")),
        cls=str(ev.get("class") or "?"),
        started=_num(ev.get("started")),
        ended=_num(ev.get("ended")),
        first_step=_int(ev.get("first_step")),
        last_step=_int(ev.get("last_step")),
        ckpt_step=_int(ev.get("ckpt_step")),
        swapped_out=out,
        swapped_in=inn,
        returned=returned,
        blind=blind,
        bad_hosts=_strs(ev.get("bad_hosts")),
        evidence=str(evidence or ""),
        reason=str(ev.get("reason") or ""),
        sweep=ev.get("sweep") if isinstance(ev.get("sweep"), dict) else None,
        then=_deferred_verdict(ev.get("then")),
        nodes=len(ev["hosts"]) if isinstance(ev.get("hosts"), list) else None,
    )


def _account(rows: list[AttemptRow], ckpts: dict[int, float]) -> None:
    """Steps each attempt made, and the time it lost: from its last saved checkpoint (or its start) to its end."""
    saved: int | None = None  # the newest checkpoint before this attempt
    for a in rows:
        if a.last_step is not None:
            base = (
                a.first_step - 1
                if a.first_step is not None
                else (saved if saved is not None else a.last_step)
            )
            a.steps_made = max(0, a.last_step - base)
        if a.cls == "success" or a.duration_s is None:
            a.lost_s = 0.0 if a.cls == "success" else None
        else:
            assert a.started is not None and a.ended is not None
            in_attempt = [t for s, t in ckpts.items() if a.started <= t <= a.ended]
            new_ckpt = a.ckpt_step is not None and (saved is None or a.ckpt_step > saved)
            if in_attempt:
                a.lost_s = a.ended - max(in_attempt)
            elif new_ckpt and a.last_step is not None and a.steps_made and a.ckpt_step is not None:
                # no checkpoint times: estimate from the attempt's step rate
                per_step = a.duration_s / a.steps_made
                a.lost_s = min(a.duration_s, max(0.0, (a.last_step - a.ckpt_step) * per_step))
            else:
                a.lost_s = a.duration_s
        if a.ckpt_step is not None:
            saved = a.ckpt_step if saved is None else max(saved, a.ckpt_step)


def build(run_dir: str | Path) -> Report:
    """Read a run directory.  BadInput when it is missing or holds no events at all."""
    d = Path(run_dir)
    if not d.is_dir():
        raise BadInput(f"run directory not found: {d}")
    events_path = d / "events.jsonl"
    if not events_path.is_file():
        raise BadInput(f"{events_path}: missing (not a failover run directory, or no attempt has ended yet)")
    notes: list[str] = []
    try:
        events = read_jsonl(events_path, notes)
    except OSError as e:
        raise BadInput(f"{events_path}: unreadable: {e.strerror or e}") from None
    rows: list[AttemptRow] = []
    stops: list[dict[str, Any]] = []
    stragglers = [ev for ev in events if ev.get("event") == "straggler"]
    for ev in events:
        kind = ev.get("event")
        if kind == "stop" or (kind is None and "verdict" in ev and "class" not in ev):
            stops.append(ev)
        elif kind in (None, "attempt") and ("class" in ev or "rc" in ev):
            rows.append(_row(ev))
    if not rows and not stops:
        raise BadInput(f"{events_path}: no attempt or stop events in it")
    rows.sort(key=lambda a: (a.started if a.started is not None else float("inf"), a.jobid, a.attempt))
    ckpts = checkpoint_times(d)
    _account(rows, ckpts)
    jobs: list[dict[str, Any]] = []
    chain = d / "chain.jsonl"
    if chain.is_file():
        try:
            jobs = read_jsonl(chain, notes)
        except OSError as e:
            notes.append(f"chain.jsonl unreadable: {e.strerror or e}")
    if not stops:
        notes.append(
            "no stop event yet: the run is still going, or its job was killed before the loop stopped"
        )
    goodput = None
    try:
        goodput = gp.figures(d, rows, events, ckpts)
    except Exception as e:  # a figure we cannot compute must not cost the timeline
        notes.append(f"goodput figures unavailable ({type(e).__name__}: {e})")
    return Report(
        run_dir=str(d),
        attempts=rows,
        stops=stops,
        jobs=jobs,
        bad=read_bad(d / "hosts" / "bad"),
        notes=notes,
        goodput=goodput,
        stragglers=stragglers,
        stacks=[f"{p}/" for p in sorted((d / rundir.ATTEMPTS).glob(f"*{STACKS_SUFFIX}")) if p.is_dir()],
        resume_step=ckptdir.resume_step(d),
        evaluation=records.summary(d, notes=notes),
        nodes=shrinklib.history(events),
        measured=_throughput_by_devices(d / rundir.METRICS, notes),
    )


def _throughput_by_devices(path: Path, notes: list[str]) -> dict[str, Any] | None:
    """Mean tokens/s of the whole job at each device count of metrics.jsonl (what a shrink cost, measured);
    None when the trainer wrote none or only one device count."""
    if not path.is_file():
        return None
    by: dict[int, list[float]] = {}
    for r in read_jsonl(path, notes):
        dev, tps = _int(r.get("devices")), _num(r.get("tokens_per_s_per_device"))
        if dev and tps is not None and (_int(r.get("steps")) or 0) > 0:
            by.setdefault(dev, []).append(tps * dev)
    if len(by) < 2:
        return None
    return {str(k): round(sum(v) / len(v), 1) for k, v in sorted(by.items(), reverse=True)}


# --- text ----------------------------------------------------------------------------------------------------
def fmt_duration(s: float | None) -> str:
    if s is None:
        return "-"
    n = round(s)
    h, rem = divmod(n, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{sec:02d}s"
    return f"{sec}s"


def fmt_time(t: float | None) -> str:
    if t is None:
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
    except (OverflowError, OSError, ValueError):  # a record's time out of the clock's range
        return "?"


def _steps(a: AttemptRow) -> str:
    if a.last_step is None:
        return "none"
    if a.first_step is None:
        return f"..{a.last_step}"
    return f"{a.first_step}-{a.last_step} (+{a.steps_made})"


def _swap(a: AttemptRow) -> str:
    if not a.swapped_out:
        return "-"
    text = f"{','.join(a.swapped_out)} -> {','.join(a.swapped_in) or '(none)'} [{a.why}]"
    if a.returned:
        text += f" (back to the spares: {','.join(a.returned)})"
    if not a.blind and a.evidence:
        ev = a.evidence if len(a.evidence) <= 70 else a.evidence[:67] + "..."
        text += f" {ev}"
    return text


def render(rep: Report) -> str:
    """The report as text: the attempts' table (each stop under its attempt), the other records, the totals."""
    t = rep.totals()
    lines = [f"failover report: {rep.run_dir}", f"{t['jobs']} job(s), {t['attempts']} attempt(s)", ""]
    lines += _timeline(rep)
    lines += _records(rep)
    lines += ["", *summary_lines(rep)]
    for n in rep.notes:
        lines.append(f"note: {n}")
    return shown.lines("\n".join(lines)) + "\n"  # evidence, hosts and names are data: no control character


HEADER = ("JOB", "#", "START (UTC)", "DURATION", "NODES", "RC", "CLASS", "STEPS", "LOST", "SWAP")


def row_cells(a: AttemptRow) -> tuple[str, ...]:
    """One attempt's cells of the timeline (also the table of `agpt report --html`)."""
    return (a.jobid, str(a.attempt), fmt_time(a.started), fmt_duration(a.duration_s),
            "?" if a.nodes is None else str(a.nodes), "-" if a.rc is None else str(a.rc), a.cls, _steps(a),
            fmt_duration(a.lost_s), _swap(a))  # fmt: skip


def _timeline(rep: Report) -> list[str]:
    """One row per attempt, aligned; each stop event after the attempt it ended, the others at the end."""
    header = HEADER
    table = [header] + [row_cells(a) for a in rep.attempts]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    stops = list(rep.stops)
    lines = []
    for i, row in enumerate(table):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1])
        if i == 0:
            continue
        a = rep.attempts[i - 1]
        if a.sweep is not None:
            lines.append(_sweep_line(a))
        if a.then:
            lines.append(f"  save before a stop after {a.jobid}.{a.attempt}: {a.then}, once node memory's "
                         "newest step is saved globally")  # fmt: skip
        for s in [
            s for s in stops if str(s.get("jobid", "")) == a.jobid and _int(s.get("attempt")) == a.attempt
        ]:
            lines.append(_stop_line(s))
            stops.remove(s)
    return lines + [_stop_line(s) for s in stops]


def shrink_lines(rep: Report) -> list[str]:
    """Each shrink (node count before and after, what it kept and cost) and the throughput measured at each
    device count (`agpt monitor` prints the same lines)."""
    lines = []
    for s in (e for j in rep.nodes.values() for e in j.shrinks):
        lines.append(f"  {fmt_time(_num(s.get('time')))}  job {s.get('jobid')} after attempt {s.get('attempt')}: "
                     f"{s.get('nodes_before')} -> {s.get('nodes_after')} nodes (job: {s.get('nodes_full')}), "
                     f"{s.get('micro_steps_full')} -> {s.get('micro_steps')} micro-steps per step: "
                     f"{_num(s.get('throughput')) or 0:.2f} of full throughput"
                     f"{', uneven split' if s.get('uneven') else ''}")  # fmt: skip
    for j in rep.nodes.values():
        if j.shrunk_s:
            lines.append(f"  job {j.jobid}: {j.text} nodes; {fmt_duration(_round(j.shrunk_s))} on fewer nodes cost "
                         f"{fmt_duration(_round(j.cost_s))} of full-speed training (planned throughput)")  # fmt: skip
    if rep.measured:
        lines.append(
            "  measured tokens/s: " + ", ".join(f"{v:g} on {k} devices" for k, v in rep.measured.items())
        )
    return ["", "nodes (shrinks: FAILOVER_SHRINK):", *lines] if lines else []


def _records(rep: Report) -> list[str]:
    """The chain's jobs, the stragglers, the stack dumps, hosts/bad and the trainer's health events."""
    lines: list[str] = shrink_lines(rep)
    if rep.jobs:
        lines += ["", "chain:"]
        for j in rep.jobs:
            nodes = rep.nodes.get(str(j.get("jobid")))
            lines.append(
                f"  job {j.get('jobid')}: {fmt_time(_num(j.get('started')))} -> {fmt_time(_num(j.get('ended')))}"
                f"  {j.get('verdict', '?')}"
                + (f", next {j['next_jobid']}" if j.get("next_jobid") else "")
                + (f", nodes {nodes.text}" if nodes else "")
            )
    if rep.stragglers:
        lines += ["", "stragglers (heartbeats):"]
        lines += [
            f"  {s.get('attempt', '?')}  {s.get('evidence', s.get('host'))} -> {s.get('action')}"
            for s in rep.stragglers
        ]
    if rep.stacks:
        lines += ["", "stack dumps of hung attempts:"] + [f"  stacks: {p}" for p in rep.stacks]
    if rep.bad:
        lines += ["", "hosts/bad:"]
        for b in rep.bad:
            why = "blind (a suspect, still usable)" if b["blind"] else f"evidence: {b['evidence'] or '?'}"
            lines.append(f"  {b['host']}  {fmt_time(b['time'])}  job {b['jobid'] or '?'}  {why}")
    health = Path(rep.run_dir) / "health.jsonl"  # the trainer's rollbacks and frozen-group warnings
    if health.is_file():
        lines += ["", "trainer health:"]
        for h in read_jsonl(health, rep.notes):
            what = {k: v for k, v in h.items() if k not in ("event", "time")}
            lines.append(f"  {fmt_time(_num(h.get('time')))}  {h.get('event')}  {json.dumps(what)}")
    if rep.evaluation is not None:
        lines += ["", *records.render(rep.evaluation)]
    return lines


def summary_lines(rep: Report) -> list[str]:
    """The totals and goodput lines that end the report (`agpt monitor` prints the same lines)."""
    return _summary(rep.totals()) + (gp.render_figures(rep.goodput) if rep.goodput is not None else [])


def _summary(t: dict[str, Any]) -> list[str]:
    return [
        f"attempts: {t['attempts']}  ({', '.join(f'{k} {v}' for k, v in t['classes'].items()) or 'none'})",
        f"swaps: {t['swaps_proven']} proven, {t['swaps_blind']} blind"
        + (f"; {t['preflight_evicted']} host(s) evicted by the preflight" if t["preflight_evicted"] else "")
        + (
            f"; {t['sweeps']} health sweep(s), {fmt_duration(t['sweep_s'])}, {t['sweep_evicted']} host(s) evicted on their evidence"
            if t["sweeps"]
            else ""
        ),
        f"steps made: {t['steps_made']}"
        + (f" (last step {t['last_step']})" if t["last_step"] is not None else ""),
        "resumes from: "
        + ("step 0 (no complete checkpoint)" if t["resume_step"] is None else f"step {t['resume_step']}"),
        f"time lost: {fmt_duration(t['lost_s'])} after the last checkpoints"
        + (f", {fmt_duration(t['between_attempts_s'])} between attempts" if t["between_attempts_s"] else "")
        + (f", wall {fmt_duration(t['wall_s'])}" if t["wall_s"] is not None else ""),
        f"verdict: {t['verdict'] or 'none yet'}" + (f" (exit {t['exit']})" if t["exit"] is not None else ""),
    ] + ([f"shrinks: {t['shrinks']}, {fmt_duration(t['shrunk_s'])} on fewer nodes, costing "
          f"{fmt_duration(t['shrink_cost_s'])} of full-speed training"] if t["shrinks"] else [])  # fmt: skip


def _sweep_line(a: AttemptRow) -> str:
    """One line: what the health sweep after this attempt found (docs/contract.md, `agpt failover report`)."""
    sw = a.sweep or {}
    head = f"  sweep after {a.jobid}.{a.attempt}: "
    if sw.get("deferred"):
        return head + f"deferred, no guess: {sw.get('note') or '?'}"
    if not sw.get("ran"):
        return head + f"did not run: {sw.get('note') or '?'}"
    failed = sw.get("failed") if isinstance(sw.get("failed"), dict) else {}
    text = f"{sw.get('hosts', '?')} host(s), {sw.get('rounds', '?')} round(s), {fmt_duration(_num(sw.get('cost_s')))}: "
    if sw.get("site_wide"):
        text += str(sw.get("note") or "a site-wide fault, nobody evicted")
    elif failed:
        text += "; ".join(f"{h} failed: {why}" for h, why in list(failed.items())[:3])
    else:
        text += "every host passed"
    for extra in (sw.get("link"), *(sw.get("config") or [])[:1]):
        if extra:
            text += f"; {extra}"
    return (head + text)[:400]


def _deferred_verdict(then: Any) -> str:
    """The verdict of an attempt event's `then` (a record read back: checked), else ""."""
    return str(then["verdict"]) if policy.pending_save([{"then": then}]) else ""


def _stop_line(s: dict[str, Any]) -> str:
    return (
        f"  stop after {s.get('jobid', '?')}.{s.get('attempt', '?')}: {s.get('verdict')} (exit {s.get('exit')})"
        + (f": {s['reason']}" if s.get("reason") else "")
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadInput(message)


def main(argv: list[str] | None = None) -> int:
    p = _Parser(
        prog="agpt failover report",
        description="A timeline of a run's failover: attempts, swaps (evidence or blind), steps made, time lost.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (AGPT_RUN_DIR)")
    p.add_argument("--json", action="store_true", help="print the same as one JSON object")
    try:
        args = p.parse_args(argv)
        rep = build(args.run_dir)
    except BadInput as e:
        sys.stderr.write(f"agpt failover report: error: {e}\n")
        return 2
    if args.json:
        sys.stdout.write(json.dumps(rep.as_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
