"""The decision: one attempt's class from its exit code, the clock and the evidence, and the verdict's fields.

Evidence first, exit codes last.  The rules run in the order of RULES; the first that holds decides:
  success            rc 0
  walltime           killed within the margin of the deadline (the clock decides, never a signal number)
  preempted          the scheduler says it took the allocation back (preemption, requeue): walltime's action,
                     stop and resubmit, whatever the nodes said while they were being killed
  most_of_job_named  hosts of the job named by node patterns, but most of them: system when the scheduler named
                     them (a site outage), app when every rank saw the same device error (the environment)
  node               hosts of the job named by node patterns (the innocent cascade never counts)
  system             a system pattern (a site-wide fault no swap fixes), unless a crash on one host came first (by
                     time stamp where the lines carry one, else by line) and only other hosts then reported
                     system errors: those are its consequences (attribution.consequences_of_a_crash)
  outside            the same failure on most of the job's hosts naming an endpoint (a URL) that is no host of the
                     job: system (a service outside the job: back off and relaunch, never a stop on first sight)
  watchdog           rc 124 (the idle watchdog): app if every rank raised the same error, else hang
  crash_everywhere   one crash pattern printed by most of the job's hosts: app (nodes do not fail together), unless
                     lines name one host (failed connections' far end, a host others name): evidence outranks
                     a majority, for this rule, `app`, `watchdog`'s app and `weak_everywhere` alike
  crash              a crash pattern
  app                an app error that two ranks (or an unlabelled log) raised
  hang               a collective timeout
  weak_everywhere    a launcher's exit notice or lone exception on most of the job's hosts: app, unless a task's
                     death by a signal came before every exit notice (the others exited on the lost peer)
  weak               a launcher's exit notice or one rank's lone exception: crash
and, when none holds, crash by the exit code, with a note.  Then the hints: the suspects (agpt.failover.attribution),
led by the far end of failed connections that several reporters name.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agpt.failover import attribution as attr
from agpt.failover.evidence import STRENGTH, Evidence, Hit
from agpt.failover.labels import TRAINING_RANK

EVIDENCE_CHARS = 400
MAX_EVIDENCE = 20


@dataclass(kw_only=True, slots=True)
class Classification:
    """One attempt's verdict: docs/contract.md's four fields, then what a blind swap can use.

    suspect_hosts: hosts the evidence points nearest to, best first (crash lines, then launcher exit notices in
    log order, then the first killed follower); last_heard: the host of the last labelled line; rank_hosts: the
    rank->host map learned from launcher labels.  All in hostfile spelling, all hints, never proof.
    """

    cls: str
    bad_hosts: list[str]
    evidence: list[str]
    last_step: int | None
    first_step: int | None = None
    suspect_hosts: list[str] = field(default_factory=list)
    last_heard: str | None = None
    rank_hosts: dict[int, str] = field(default_factory=dict)
    matches: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    lines: int = 0
    rc: int = 0
    pattern_sets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "class": self.cls,
            "bad_hosts": self.bad_hosts,
            "evidence": self.evidence,
            "last_step": self.last_step,
            "first_step": self.first_step,
            "suspect_hosts": self.suspect_hosts,
            "last_heard": self.last_heard,
            "rank_hosts": {str(k): v for k, v in sorted(self.rank_hosts.items())},
            "rc": self.rc,
            "lines": self.lines,
            "counts": self.counts,
            "matches": self.matches,
            "pattern_sets": self.pattern_sets,
            "notes": self.notes,
        }


@dataclass(kw_only=True, slots=True)
class Case:
    """What the rules look at: the attempt's end, and its evidence."""

    rc: int
    ev: Evidence
    job: int  # the job's hosts
    deadline: float | None
    now: float
    margin_s: float
    qualified: list[Hit]  # app errors enough ranks raised
    weak: list[Hit]  # launcher exit notices and lone exceptions, in log order
    death: Hit | None = None  # a task killed by a signal before any exit notice (_first_death)
    notes: list[str] = field(default_factory=list)  # what a rule that did not decide saw

    @property
    def node(self) -> list[str]:
        return list(self.ev.node_hosts)


@dataclass(kw_only=True, slots=True)
class Verdict:
    cls: str
    decisive: list[Hit] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _success(c: Case) -> Verdict | None:
    if c.rc != 0:
        return None
    v = Verdict(cls="success")
    if c.ev.counts["node"] or c.ev.counts["crash"] or c.ev.counts["system"]:
        v.notes.append("rc 0: failure lines in the log ignored (the attempt finished)")
    return v


def _walltime(c: Case) -> Verdict | None:
    if c.deadline is None or c.now < c.deadline - c.margin_s:
        return None
    notes = [f"killed {c.deadline - c.now:.0f} s before the deadline (margin {c.margin_s:.0f} s)"]
    if c.node:
        notes.append(f"node evidence ignored at walltime: {', '.join(c.node)}")
    return Verdict(cls="walltime", notes=notes)


def _preempted(c: Case) -> Verdict | None:
    hits = c.ev.hits["preempt"]
    if not hits:
        return None
    note = "the scheduler preempted or requeued the job: no host to blame, nothing to relaunch in this allocation"
    return Verdict(cls="walltime", decisive=hits[:1], notes=[note])


def _most_of_job_named(c: Case) -> Verdict | None:
    node = c.node
    if not (len(node) >= 2 and len(node) > c.job / 2):
        return None
    # Swapping most of the job is never the fix: a scheduler naming them all is a site outage, every rank
    # seeing the same device error is the environment or the configuration.
    named = any(h.named for h in c.ev.node_hosts.values())
    why = "(a site-wide outage)" if named else "(every rank sees it: environment or configuration)"
    return Verdict(
        cls="system" if named else "app",
        decisive=_unique(c.ev.node_hosts.values()),
        notes=[f"{len(node)} of {c.job} hosts named: not a node fault " + why],
    )


def _node(c: Case) -> Verdict | None:
    if not c.node:
        return None
    return Verdict(cls="node", bad=c.node, decisive=_unique(c.ev.node_hosts.values()))


def _system(c: Case) -> Verdict | None:
    """A site-wide fault, unless a crash came first: then the PMI, peer or I/O errors after it are its consequences
    (ranks that lost a dead peer report the launcher's service unreachable), and the crash rule decides."""
    if not c.ev.hits["system"]:
        return None
    if attr.consequences_of_a_crash(c.ev):
        c.notes.append("system errors on other hosts after the first crash are taken as its consequences")
        return None
    return Verdict(cls="system", decisive=c.ev.hits["system"])


def _outside(c: Case) -> Verdict | None:
    hits = attr.outside_service(c.ev, c.job, [*c.qualified, *c.ev.hits["crash"], *c.weak])
    if not hits:
        return None
    note = (
        f"{hits[0].pattern} on most of the {c.job} hosts names an endpoint outside the job: a service's fault"
    )
    return Verdict(cls="system", decisive=hits, notes=[note])


def _watchdog(c: Case) -> Verdict | None:
    if c.rc != 124:
        return None
    if c.qualified and not _outranked(c, f"{c.qualified[0].pattern} on several ranks"):
        return Verdict(cls="app", decisive=c.qualified)
    hits = c.ev.hits
    return Verdict(
        cls="hang",
        decisive=hits["hang-hint"] + hits["crash"] + c.weak,
        notes=["the idle-output watchdog fired and no line names a host"],
    )


def _outranked(c: Case, what: str) -> bool:
    """Evidence outranks a majority: when lines name one host (the far end of failed connections several
    reporters name, or a host others name while it names no one), a rule that reads the same error or exit on
    most ranks as the application's does not decide; the crash rules do, that host leading the suspects."""
    culprit = attr.peer_culprit(c.ev)
    if culprit is None:
        return False
    host, _, n = culprit
    c.notes.append(f"{what}, but {n} line(s) name {host}: evidence about a host outranks the majority")
    return True


def _same_everywhere(hits: list[Hit], c: Case) -> Verdict | None:
    """The same fault on most of the job's hosts (a memory access fault at step 1, host memory exhausted while
    loading): nodes do not fail together; the code, the data or the configuration does."""
    spread = attr.everywhere(hits, c.ev, c.job) if hits else []
    if not spread or _outranked(c, f"{spread[0].pattern} on most of the {c.job} hosts"):
        return None
    note = (
        f"{spread[0].pattern} on most of the {c.job} hosts: the same fault everywhere "
        "is the application or its configuration, not a node"
    )
    return Verdict(cls="app", decisive=spread, notes=[note])


def _crash_everywhere(c: Case) -> Verdict | None:
    return _same_everywhere(c.ev.hits["crash"], c)


def _crash(c: Case) -> Verdict | None:
    return Verdict(cls="crash", decisive=c.ev.hits["crash"]) if c.ev.hits["crash"] else None


def _app(c: Case) -> Verdict | None:
    if not c.qualified or _outranked(c, f"{c.qualified[0].pattern} on several ranks"):
        return None
    return Verdict(cls="app", decisive=c.qualified)


def _hang(c: Case) -> Verdict | None:
    return Verdict(cls="hang", decisive=c.ev.hits["hang-hint"]) if c.ev.hits["hang-hint"] else None


def _weak_everywhere(c: Case) -> Verdict | None:
    if c.death is not None:
        host = c.death.hosts[0] if c.death.hosts else "a host"
        c.notes.append(
            f"line {c.death.lineno}: a task on {host} died of a signal before any task exited: the exits that "
            "follow are its consequence, not an error every rank hits"
        )
        return None
    return _same_everywhere(c.weak, c)


def _first_death(ev: Evidence, weak: list[Hit]) -> Hit | None:
    """A launcher's notice of a task killed by a signal (`srun: error: n2: task 1: Killed`: the OOM killer, an
    operator, a node agent) printed before every exit notice: the first failure, not the launcher's teardown."""
    deaths = {p.id for p in ev.patterns if p.death}
    first = min(
        (h for h in ev.hits["cascade-ignore"] if h.pattern in deaths), key=lambda h: h.lineno, default=None
    )
    if first is None or not weak or first.lineno > min(h.lineno for h in weak):
        return None
    return first


def _weak(c: Case) -> Verdict | None:
    return Verdict(cls="crash", decisive=[c.death, *c.weak] if c.death else c.weak) if c.weak else None


RULES: tuple[Callable[[Case], Verdict | None], ...] = (
    _success,
    _walltime,
    _preempted,
    _most_of_job_named,
    _node,
    _system,
    _outside,
    _watchdog,
    _crash_everywhere,
    _crash,
    _app,
    _hang,
    _weak_everywhere,
    _weak,
)


def decide(
    rc: int, ev: Evidence, *, job: int, deadline: float | None, now: float, margin_s: float
) -> Classification:
    """The class of an attempt that ended with `rc` at `now`, on a job of `job` hosts, from its evidence."""
    qualified, lone = attr.app_verdict(ev, job)
    for h in lone:  # an exception only one rank raised: that rank crashed; its host is the nearest suspect
        ev.suspects.append((STRENGTH["weak"], h.lineno, h.reporter, h.reporter_rank))
    weak = sorted(ev.hits["weak"] + lone, key=lambda h: h.lineno)
    death = _first_death(ev, weak)
    if death is not None:  # the killed task's host leads the suspects, ahead of the exits that followed it
        for host in death.hosts:
            ev.suspects.append((STRENGTH["crash"], death.lineno, host, None))
    case = Case(
        rc=rc,
        ev=ev,
        job=job,
        deadline=deadline,
        now=now,
        margin_s=margin_s,
        qualified=qualified,
        weak=weak,
        death=death,
    )
    verdict = next((v for rule in RULES if (v := rule(case)) is not None), None)
    if verdict is None:
        verdict = Verdict(cls="crash", notes=[f"no failure line in the log: classified by exit code {rc}"])
    notes = case.notes + verdict.notes
    suspects = [] if verdict.cls in ("success", "walltime") else attr.suspect_hosts(ev)
    culprit = attr.peer_culprit(ev)
    if culprit is not None and verdict.cls not in ("success", "walltime"):
        host, reporters, n = culprit
        # the peer that every failing connection names goes first; hosts that only reported a lost peer are
        # victims of it, not suspects
        suspects = [host] + [h for h in suspects if h != host and h not in reporters]
        notes.append(f"{n} failed connection(s) point at {host}: its reporters are not suspected")
    evidence_hits = verdict.decisive[:MAX_EVIDENCE]
    return Classification(
        cls=verdict.cls,
        bad_hosts=verdict.bad,
        evidence=[_cap(h.line) for h in evidence_hits],
        last_step=ev.last_step,
        first_step=ev.first_step,
        suspect_hosts=suspects,
        last_heard=attr.last_heard(ev),
        rank_hosts={**ev.task_map, **{r: h for r, h in ev.rank_map.items() if r < TRAINING_RANK}},
        matches=[h.brief() for h in evidence_hits],
        counts={("cascade" if k == "cascade-ignore" else k): v for k, v in ev.counts.items() if v},
        lines=ev.lines,
        rc=rc,
        notes=notes,
    )


def _unique(hits: Iterable[Hit]) -> list[Hit]:
    seen: set[int] = set()
    out: list[Hit] = []
    for h in hits:
        if id(h) not in seen:
            seen.add(id(h))
            out.append(h)
    return out


def _cap(line: str) -> str:
    line = line.rstrip()
    return line if len(line) <= EVIDENCE_CHARS else line[: EVIDENCE_CHARS - 3] + "..."
