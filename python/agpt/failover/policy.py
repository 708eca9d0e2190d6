"""The failover loop's policy: what to do after an attempt (or before one), as pure functions.

Standard library only.  Every decision of lib/failover.sh lives here, so it is unit-tested without a cluster and
without a run directory; agpt.failover.plan (the `agpt failover plan` command) reads the run directory, calls
these, and acts.

`decide()` takes the attempt that just ended (its class from `agpt failover classify`, its steps), the host lists
and the earlier attempts of this job (events.jsonl), and returns
  {action: relaunch|stop, verdict, exit, swap_out, swap_in, returned, blind, mark_bad, backoff_s, reason}.

The rules, in order (why in brackets):
1. rc 0 -> stop `done` (0).  Class `walltime`, or rc 75 (the trainer itself asked to be resubmitted) -> stop
   `resubmit` (75).
2-3. A stop for a person (`repeat` 4 when an attempt of the reproduction made progress, else `stuck` 3) only on
   evidence that one is needed [a person paged, an allocation held for hours]: every host passed the health sweep
   (the probe, and the collective where the probe named nobody), and the failure reproduced: the same signature
   (`signature()`: the first failing line with numbers and host names blanked, and the step) on a relaunch after the
   sweep (an earlier attempt its sweep put down to a host or the site, `node` or `system`, is no occurrence of
   it).  One sweep and one reproduction per signature per job, so a real bug costs one extra relaunch.  A host the
   sweep fails is evicted on that evidence (`node`); a signature that does not reproduce is a transient, and training
   goes on (bounded by FAILOVER_MAX_ATTEMPTS).  Never for `node` (each named host is evidence of its own) nor `system`
   (a site fault lasts as long as it lasts; one that comes back with the same signature is swept once, for a host it
   was really about).  Only when the sweep could not run (off, no launcher, no time before the deadline in a job that
   never trained) do the counts of old decide, and the stop says why: the same class at the same step (the last
   progress line, else the checkpoint resumed from) FAILOVER_MAX_REPEAT attempts in a row -> `repeat`, and two
   attempts in a row with no progress line, neither `node` nor `system` -> `stuck`; for `hang`/`crash` each as long
   as the blind rotation (min(active, FAILOVER_MAX_BLIND) + 1), so it can reach every original host first.  The
   trainer's own rollback limit (rc 4, `app`) stops as `repeat` once the sweep passed (a device computing wrong
   numbers rolls back too) or could not run.  A sweep deferred for want of time before the deadline, in a job that
   trained, stops nobody for a person, on counts or rc 4: the next job, with time, sweeps (rule 6 saves node memory
   and hands over; at 2,048 simulated nodes a site outage near a job's end, read as two crashes, stopped the chain
   for 8 hours).  A job that never trained keeps the counts' guard (a config that fails at start-up). Any of these
   stops (and rule 4's hand-over naming no host), when node memory holds this job's progress past its newest global
   checkpoint (`Attempt.held`) and FAILOVER_MIN_SAVE_S is left, is deferred once per job for a save before it: a
   relaunch on the same hosts with checkpoint.save_and_stop (the trainer restores node memory's newest state and
   saves it globally before any step, exit 75), after which the loop stops as it would have (the event's `then`),
   whatever that relaunch did.
4. FAILOVER_MAX_ATTEMPTS attempts in a row that trained no step past the furthest one this job had logged (an
   attempt that did resets the count: a job that trains on between failures keeps its allocation, and node memory
   with it) -> stop: `resubmit` (75) after progress in this job, or when the attempt is a `system` fault (a later
   job retries after its queue wait; CHAIN_MAX_NO_PROGRESS bounds it), else `failed` (1).
5. `node`: swap exactly the named active hosts.  `hang`/`crash` that the health sweep (agpt.failover.sweep, run by
   agpt.failover.plan before deciding, read by `apply_sweep`) passed on every host: relaunch on the same hosts, no
   blind eviction.  A sweep that found hosts failing made the attempt `node` (evicted on that evidence), one that
   found most of them failing made it `system`.  Only when the sweep could not run: a rotating blind swap of one host: never a
   spare this rotation added, the hosts the evidence points at first (the classifier's `suspect_hosts`, then
   `last_heard`), then in rank order; when the failure recurs unchanged, the host evicted last time is
   cleared and goes back to the end of the spare list, so a rotation needs one spare, not one per host.
   `system`: same hosts.  `app`: no swap (the sweep first: a host it fails is evicted as for `node`).  Not enough spares -> stop `resubmit` (75) after progress in this job
   (a new allocation continues; the hosts proven bad are recorded so it avoids them), else `failed` (1); but
   for named hosts with FAILOVER_SHRINK on, a relaunch on the healthy hosts left when agpt.failover.shrink finds
   a count that keeps the global batch within FAILOVER_MIN_NODES (its refusal is then part of the stop's reason).
6. Backoff: FAILOVER_BACKOFF[k], k = the attempts in a row without progress (or in a row of `system`) minus one,
   less the time the health sweep already waited for this attempt (it ran after the failure, before the decision);
   none after a swap on evidence (the cause left with the host: there is nothing to wait out).
   If the deadline leaves less than FAILOVER_MIN_ATTEMPT_S after the backoff -> stop `resubmit` (75): never
   start an attempt that cannot reach a checkpoint; unless node memory holds this job's progress past its newest
   global checkpoint (`Attempt.held`: the local tier was on and the job logged a step past it) and at least
   FAILOVER_MIN_SAVE_S is left: then relaunch, a save attempt (the trainer starts inside its deadline margin, so
   it restores the newest state from node memory and saves it at its first step, exit 75), for the progress a
   stop would leave in memory the allocation takes with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agpt import rundir
from agpt.errors import EXIT_RESUBMIT, EXIT_USAGE, BadInput
from agpt.failover import shrink as shrinklib
from agpt.failover.sweep import SweepResult
from agpt.rundir import BLIND_CLASSES, CLASSES

SIGNATURE_CHARS = 240  # of a signature's line, after blanking
SHOWN_CHARS = 160  # of the failure's line in a stop's reason
_NUMBERS = re.compile(r"0[xX][0-9a-fA-F]+|[0-9]+")
NO_SUCH_COMMAND = (
    EXIT_USAGE,
    126,
    127,
)  # bad input (docs/contract.md); the shell's "cannot execute", "not found"
EXIT_CODES = {v: rundir.VERDICT_EXIT[v] for v in rundir.FAILOVER_VERDICTS}


@dataclass(kw_only=True, slots=True)
class Settings:
    """The loop's limits (FAILOVER_* in lib/failover.sh)."""

    max_attempts: int = 20
    max_repeat: int = 3
    max_blind: int = 8
    min_attempt_s: float = 600.0
    # FAILOVER_MIN_SAVE_S: a save attempt's start, restore from node memory, one step and one blocking global save.
    # The AuroraGPT talks: a restart ~10 s (a debug model), the 20B's 232 GB saved in 23.6 s; the 80B's 4x the
    # bytes, ~94 s at that bandwidth, plus its restart: ~105 s, and half as much again for a slower day.
    min_save_s: float = 150.0
    backoff: tuple[float, ...] = (5.0, 10.0, 20.0, 40.0, 60.0)
    shrink: bool = True  # FAILOVER_SHRINK (a site forbids it with SITE_FAILOVER_SHRINK=0)
    min_nodes: str = shrinklib.MIN_NODES  # FAILOVER_MIN_NODES: a count, or a fraction of the job's nodes

    def __post_init__(self) -> None:
        shrinklib.min_nodes(self.min_nodes, 1)  # BadInput naming FAILOVER_MIN_NODES
        for name, v, least in (
            ("MAX_ATTEMPTS", self.max_attempts, 1),
            ("MAX_REPEAT", self.max_repeat, 2),
            ("MAX_BLIND", self.max_blind, 1),
        ):
            if v < least:
                raise BadInput(f"FAILOVER_{name} must be at least {least}, got {v}")
        for name, v in (("max_attempts", self.max_attempts), ("max_repeat", self.max_repeat)):
            if v > 1_000_000:
                raise BadInput(f"FAILOVER_{name.upper()} must be at most 1000000, got {v}")
        self.max_blind = min(self.max_blind, 1_000_000)
        self.min_attempt_s = rundir.seconds(self.min_attempt_s, "FAILOVER_MIN_ATTEMPT_S")
        self.min_save_s = rundir.seconds(self.min_save_s, "FAILOVER_MIN_SAVE_S")
        if not self.backoff:
            raise BadInput(f"FAILOVER_BACKOFF must be non-negative seconds, got {self.backoff}")
        self.backoff = tuple(rundir.seconds(b, "FAILOVER_BACKOFF") for b in self.backoff)


@dataclass(kw_only=True, slots=True)
class Attempt:
    """The attempt that just ended, as the loop saw it."""

    attempt: int
    rc: int
    cls: str
    bad_hosts: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    suspects: list[str] = field(default_factory=list)
    first_step: int | None = None
    last_step: int | None = None
    ckpt_step: int | None = None
    swept: bool = False  # the health sweep ran and every host passed (or had no time to): nobody to evict
    sweep_note: str = ""  # why the sweep could not run (the blind rotation is then the last resort)
    signature: str | None = None  # the failure's signature (signature()); None: cannot be computed
    passed: str = (
        ""  # the sweep ran and every host passed it: its mode's words ("probe + collective", "probe")
    )
    # node memory holds progress past the newest global checkpoint: the attempt's log shows the local tier on, and
    # this job logged a step past that checkpoint (a save attempt keeps it: rule 6)
    held: bool = False

    @property
    def progress(self) -> bool:
        return self.first_step is not None

    @property
    def where(self) -> int | None:
        """Where it failed: the last progress line, else the checkpoint it resumed from (it wrote no newer one)."""
        return self.last_step if self.last_step is not None else self.ckpt_step


@dataclass(kw_only=True, slots=True)
class Plan:
    action: str
    verdict: str | None = None
    exit: int | None = None
    swap_out: list[str] = field(default_factory=list)
    swap_in: list[str] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)
    blind: bool = False
    mark_bad: list[str] = field(default_factory=list)
    backoff_s: float = 0.0
    reason: str = ""
    to_spare: list[str] = field(default_factory=list)  # a shrink: healthy hosts put back as spares
    shrink: dict[str, Any] | None = None  # a shrink: the `shrink` event's figures (agpt.failover.shrink)
    # a save before a stop (a stop of rules 1-4 deferred, `_savable`): the relaunch only saves node memory's newest
    # state globally (checkpoint.save_and_stop), then the loop stops with this {verdict, exit, reason}
    then: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The plan as `agpt failover plan` prints it: every field, by its name."""
        return asdict(self)


def _stop(verdict: str, reason: str, **kw: Any) -> Plan:
    return Plan(action="stop", verdict=verdict, exit=EXIT_CODES[verdict], reason=reason, **kw)


def _progress(ev: dict[str, Any]) -> bool:
    return ev.get("first_step") is not None


def _where(ev: dict[str, Any]) -> int | None:
    last = ev.get("last_step")
    return last if last is not None else ev.get("ckpt_step")


def _same_failure(ev: dict[str, Any], cls: str, step: int | None) -> bool:
    return ev.get("class") == cls and step is not None and _where(ev) == step


def _time_left(now: float, deadline: float | None) -> float | None:
    return None if deadline is None else deadline - now


def before_attempt(
    attempt: int, *, history: Sequence[dict[str, Any]], settings: Settings, now: float, deadline: float | None
) -> Plan:
    """Whether attempt `attempt` (1-based, this job) may start: not past the attempt limit nor the deadline."""
    plan = _may_start(attempt, history=history, settings=settings, now=now, deadline=deadline)
    if plan.action == "stop":  # a save before a stop that cannot start: the stop it was for, not this one
        return _then_stop(history, f"no save before it: {plan.reason}") or plan
    return plan


def _may_start(
    attempt: int, *, history: Sequence[dict[str, Any]], settings: Settings, now: float, deadline: float | None
) -> Plan:
    progressed = any(_progress(e) for e in history)
    if stalled(history) >= settings.max_attempts and pending_save(history) is None:  # a save is no training
        verdict = "resubmit" if progressed else "failed"
        return _stop(verdict, _attempts_used(settings))
    left = _time_left(now, deadline)
    if left is not None and left < settings.min_attempt_s:
        held = bool(history) and bool(history[-1].get("held"))
        if _save_attempt(held, left, settings):
            return Plan(action="relaunch", reason=_save_reason(left, settings))
        return _stop(
            "resubmit",
            f"{max(left, 0):.0f} s left before the deadline < FAILOVER_MIN_ATTEMPT_S={settings.min_attempt_s:g}: "
            f"not starting an attempt that cannot reach a checkpoint{_unsaved_note(held, settings)}",
        )
    return Plan(action="relaunch", reason="start")


def _save_attempt(held: bool, left: float, settings: Settings) -> bool:
    """Rule 6's exception: a save attempt is worth its start when node memory holds unsaved progress (HELD) and
    the LEFT seconds fit its start, restore and one blocking save (FAILOVER_MIN_SAVE_S)."""
    return held and left >= settings.min_save_s


def _save_reason(left: float, settings: Settings) -> str:
    return (
        f"save attempt: {left:.0f} s left < FAILOVER_MIN_ATTEMPT_S={settings.min_attempt_s:g}, but node memory "
        "holds progress past the newest global checkpoint: the trainer restores it and saves it at its first step"
    )


def _unsaved_note(held: bool, settings: Settings) -> str:
    if not held:
        return ""
    return (
        f" (node memory's progress past the newest global checkpoint is lost: less than "
        f"FAILOVER_MIN_SAVE_S={settings.min_save_s:g} left to save it)"
    )


def _backoff(att: Attempt, history: Sequence[dict[str, Any]], settings: Settings) -> float:
    """FAILOVER_BACKOFF[k]: k grows with attempts in a row without progress (or in a row of `system`)."""
    no_prog = 0 if att.progress else 1
    if not att.progress:
        for ev in reversed(history):
            if _progress(ev):
                break
            no_prog += 1
    sys_row = 0
    if att.cls == "system":
        sys_row = 1
        for ev in reversed(history):
            if ev.get("class") != "system":
                break
            sys_row += 1
    k = max(no_prog, sys_row, 1) - 1
    return settings.backoff[min(k, len(settings.backoff) - 1)]


def _blind_swap(
    att: Attempt, *, active: Sequence[str], spare: Sequence[str], history: Sequence[dict[str, Any]]
) -> tuple[list[str], list[str], list[str], str]:
    """(out, in, returned, why) for a rotating blind swap of one host; out empty when no swap is possible."""
    episode: list[dict[str, Any]] = []
    for ev in reversed(history):
        if ev.get("class") not in BLIND_CLASSES:
            break
        episode.insert(0, ev)
    added: set[str] = set()
    for ev in episode:
        sw = ev.get("swapped") or {}
        if sw.get("blind"):
            added.update(sw.get("in") or [])
    returned: list[str] = []
    if episode:
        prev = episode[-1]
        sw = prev.get("swapped") or {}
        # The same failure came back with the last suspect gone: that suspect was innocent.
        if sw.get("blind") and prev.get("class") == att.cls:
            returned = [h for h in sw.get("out") or [] if h not in active and h not in spare]
    pointed = [h for h in att.suspects if h in active and h not in added]
    candidates = list(dict.fromkeys(pointed + [h for h in active if h not in added]))
    pool = [*spare, *returned]
    if not candidates:
        return [], [], returned, "every active host was already tried by this blind rotation"
    if not pool:
        return [], [], returned, "no spare left for a blind swap"
    out = candidates[0]
    why = "the evidence points nearest to it" if out in pointed else "next in the rotation"
    return [out], [pool[0]], returned, why


def effective_class(cls: str, rc: int) -> str:
    """The class the loop acts on: an unknown class is a crash; bad input (2) or a command that cannot run
    (126, 127) fails on every host, so no host is to blame: `app`."""
    c = cls if cls in CLASSES else "crash"
    if c in BLIND_CLASSES and rc in NO_SUCH_COMMAND:
        return "app"
    return c


def decide(
    att: Attempt,
    *,
    active: Sequence[str],
    spare: Sequence[str],
    history: Sequence[dict[str, Any]],
    settings: Settings,
    now: float,
    deadline: float | None = None,
    layout: shrinklib.Layout | str | None = None,
    waited_s: float = 0.0,
) -> Plan:
    """The next step after attempt `att`; `history` holds this job's earlier attempt events, oldest first.
    `layout`: the job's RUN_DIR/layout.json for a shrink, or why there is none; `waited_s`: the health sweep's
    time since the attempt ended.

    The rules of the module's docstring, in its order: the attempt's own end (1), a deterministic failure (2),
    no progress (3), the attempt limit (4), the swap (5), the backoff and the deadline (6).
    """
    progressed = att.progress or any(_progress(e) for e in history)
    cls = effective_class(att.cls, att.rc)
    named = _named(att, cls, active)
    stop = _early_stop(
        att, cls, named, active=active, history=history, settings=settings, progressed=progressed
    )
    if stop is not None:
        return _save_first(stop, att, history, settings, _time_left(now, deadline))
    plan = _swap(att, cls, named, active=active, spare=spare, history=history, progressed=progressed)
    if plan.action == "stop" and named and len(spare) < len(named):
        plan = _shrink_or_stop(plan, named, active=active, spare=spare, settings=settings, layout=layout)
    if plan.action == "stop":
        return plan
    evidence = bool(plan.swap_out) and not plan.blind
    plan.backoff_s = 0.0 if evidence else max(0.0, _backoff(att, history, settings) - waited_s)
    left = _time_left(now + plan.backoff_s, deadline)
    if left is not None and left < settings.min_attempt_s:
        if _save_attempt(att.held, left, settings):
            plan.reason = "; ".join(x for x in (plan.reason, _save_reason(left, settings)) if x)
            return plan
        return _stop(
            "resubmit",
            f"{max(left, 0):.0f} s would be left after the backoff < FAILOVER_MIN_ATTEMPT_S="
            f"{settings.min_attempt_s:g}: not starting a doomed attempt{_unsaved_note(att.held, settings)}",
            mark_bad=named,
        )
    return plan


# the stops for a person: what node memory holds is saved globally first (a save before a stop), as it is before
# the hand-over of a job whose attempts stall (rule 4)
PERSON_VERDICTS = ("repeat", "stuck")
SAVE_FIRST_VERDICTS = (*PERSON_VERDICTS, "resubmit")


def _savable(stop: Plan, settings: Settings) -> bool:
    """A stop whose allocation would leave with node memory's progress and that can wait for a save: one for a
    person, or rule 4's hand-over naming no host (a named host would fail the save's relaunch)."""
    if stop.verdict in PERSON_VERDICTS:
        return True
    return stop.verdict == "resubmit" and stop.reason == _attempts_used(settings) and not stop.mark_bad


def _save_first(
    stop: Plan, att: Attempt, history: Sequence[dict[str, Any]], settings: Settings, left: float | None
) -> Plan:
    """A stop for a person (rules 2-3, the trainer's rollback limit) or rule 4's hand-over (`_savable`) with node
    memory holding progress past the newest global checkpoint (`att.held`) and FAILOVER_MIN_SAVE_S left: a save
    before the stop instead.  The relaunch runs on the same hosts with checkpoint.save_and_stop (the trainer
    restores node memory's newest state, saves it globally before any step, exits 75) and the next decision is the
    deferred stop (`_deferred`).  Once per job: the person's fix, or the next job, resumes from that checkpoint,
    not from up to a global interval before it."""
    if not _savable(stop, settings) or not att.held or any(e.get("then") for e in history):
        return stop
    if left is not None and left < settings.min_save_s:
        stop.reason += _unsaved_note(True, settings)
        return stop
    assert stop.verdict is not None and stop.exit is not None
    return Plan(
        action="relaunch",
        then={"verdict": stop.verdict, "exit": stop.exit, "reason": stop.reason},
        reason=f"save before a stop ({stop.verdict}): node memory holds progress past the newest global "
        "checkpoint; the trainer restores it and saves it globally before any step, then the loop stops",
    )


def _deferred(att: Attempt, history: Sequence[dict[str, Any]]) -> Plan | None:
    """After a save before a stop, that stop, whatever the save attempt did; its reason says whether the save
    attempt ended as asked (rc 75) and the newest global checkpoint."""
    newest = "none" if att.ckpt_step is None else f"step {att.ckpt_step}"
    saved = "saved" if att.rc == EXIT_RESUBMIT else f"ended rc {att.rc}: not saved"
    return _then_stop(history, f"the save before this stop {saved}; newest global checkpoint: {newest}")


def _then_stop(history: Sequence[dict[str, Any]], note: str) -> Plan | None:
    """The stop the last event deferred for a save before it (its `then`, a record read back: checked), its reason
    ending `(NOTE)`; None when it deferred none."""
    then = pending_save(history)
    if then is None:
        return None
    return _stop(str(then["verdict"]), f"{then.get('reason') or then['verdict']} ({note})")


def pending_save(history: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The stop the last event deferred for a save before it (its `then`, a record read back: checked), else None."""
    then = history[-1].get("then") if history else None
    return then if isinstance(then, dict) and then.get("verdict") in SAVE_FIRST_VERDICTS else None


def _named(att: Attempt, cls: str, active: Sequence[str]) -> list[str]:
    """Only a `node` verdict makes a named host bad; other classes may name hosts only as context."""
    return [h for h in dict.fromkeys(att.bad_hosts) if h in active] if cls == "node" else []


def _early_stop(
    att: Attempt,
    cls: str,
    named: list[str],
    *,
    active: Sequence[str],
    history: Sequence[dict[str, Any]],
    settings: Settings,
    progressed: bool,
) -> Plan | None:
    """Rules 1-4, in order (after a save before a stop, that stop); None when the attempt goes on to a swap."""
    return (
        _deferred(att, history)
        or _ended(att, cls, named, history, progressed)
        or _for_a_person(att, cls, active=active, history=history, settings=settings, progressed=progressed)
        or _out_of_attempts(att, cls, settings, progressed, named, history)
    )


def _for_a_person(
    att: Attempt,
    cls: str,
    *,
    active: Sequence[str],
    history: Sequence[dict[str, Any]],
    settings: Settings,
    progressed: bool,
) -> Plan | None:
    """Rules 2-3, the stops that wait for a person (`repeat`, `stuck`): only on evidence that one is needed.

    Evidence: every host passed the health sweep, and the failure reproduced (the same signature on a relaunch).
    Without a sweep that could run (off, no launcher), today's counts decide instead (`_repeated`, `_stuck`: the
    same class at the same step FAILOVER_MAX_REPEAT times, two attempts without progress), and the stop says why
    the sweep could not run.  A sweep deferred to the next job (no time before the deadline) in a job that
    trained stops nobody: that job sweeps."""
    if cls in ("node", "system"):
        return None
    if _swept_for(att, history) or not att.sweep_note:
        return _reproduced(att, cls, history)
    if _sweep_deferred(att, progressed):
        return None
    # attempts a blind rotation needs to try every host; none when no rotation follows (no time for the sweep)
    rotation = 0 if att.swept else min(len(active), settings.max_blind) + 1
    stop = _repeated(att, cls, history, settings, rotation) or _stuck(att, cls, history, rotation)
    if stop is not None:
        stop.reason += f" (the health sweep could not run: {att.sweep_note})"
    return stop


def _sweep_deferred(att: Attempt, progressed: bool) -> bool:
    """The sweep had no time before the deadline (`apply_sweep`: `swept` with a note) in a job that trained
    (PROGRESSED): the next job, with the same time, sweeps.  A job that never trained (a walltime too short for any
    sweep, a config that fails at start-up) keeps the counts' guard: two attempts without a step stop it."""
    return progressed and att.swept and bool(att.sweep_note) and not att.passed


def _same_signature(att: Attempt, history: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """This job's earlier attempts that failed with this attempt's signature (none when it has none)."""
    if att.signature is None:
        return []
    return [ev for ev in history if ev.get("signature") == att.signature]


def _swept_for(att: Attempt, history: Sequence[dict[str, Any]]) -> str:
    """The sweep that passed every host for this failure (this attempt's, or an earlier one of the same
    signature): its words ("probe + collective"), or "" when none did."""
    if att.passed:
        return att.passed
    return next((str(ev["passed"]) for ev in reversed(_same_signature(att, history)) if ev.get("passed")), "")


def _reproduced(att: Attempt, cls: str, history: Sequence[dict[str, Any]]) -> Plan | None:
    """A stop for a person: the failure reproduced on a relaunch and every host passed the sweep (one sweep and
    one reproduction per signature per job, so a real bug costs one extra relaunch).  An earlier attempt of the
    signature that its sweep put down to a host or the site (`node`, `system`: a site outage's log read as a
    crash, the outage ending before the next attempt's sweep) had its cause found: not an occurrence on healthy
    hosts, so not a reproduction."""
    same = [ev for ev in _same_signature(att, history) if ev.get("class") not in ("node", "system")]
    swept = _swept_for(att, history)
    if not same or not swept:
        return None
    where = "before any step" if att.where is None else f"at step {att.where}"
    progressed = att.progress or any(_progress(ev) for ev in same)
    return _stop(
        "repeat" if progressed else "stuck",
        f"{cls}: `{shown(att)}` {where} on attempts {same[-1].get('attempt')} and {att.attempt}, every host passed "
        f"the sweep ({swept}): a person is needed",
    )


def failing_line(evidence: Sequence[str]) -> str | None:
    """The attempt's first failing line, for its signature: the classifier's first evidence that is not one of its
    own notes.  None when it read no failure line (an empty log, a log it cannot read): a failure nobody can name
    is never taken as reproduced, so it never stops the loop for a person (FAILOVER_MAX_ATTEMPTS bounds it)."""
    return next((e for e in evidence if e.strip() and not e.startswith("(")), None)


def shown(att: Attempt) -> str:
    """The failure's line as a person reads it in a stop line: its first failing line, else its signature."""
    line = " ".join((failing_line(att.evidence) or "").split())
    line = line or (att.signature or "").partition(" ")[2] or "no failure line"
    return line if len(line) <= SHOWN_CHARS else line[: SHOWN_CHARS - 3] + "..."


def signature(line: str | None, *, hosts: Sequence[str], where: int | None) -> str | None:
    """A failure's signature: the step where it failed, then its first failing line with host names and numbers
    blanked (`1200 ValueError: bad shape (N, N) on HOST`).  Two attempts of a job with one signature failed the
    same way at the same place: a reproduction.  None when there is no line (an empty log): never reproduced."""
    text = " ".join((line or "").split())
    if not text:
        return None
    names = {h for h in hosts if h} | {h.split(".")[0] for h in hosts if h and not h[0].isdigit()}
    for h in sorted(names, key=len, reverse=True):
        text = text.replace(h, "HOST")
    text = _NUMBERS.sub("N", text)[:SIGNATURE_CHARS]
    return f"{'-' if where is None else where} {text}"


def wants_sweep(
    att: Attempt, *, active: Sequence[str], history: Sequence[dict[str, Any]], settings: Settings
) -> bool:
    """Whether this attempt needs evidence the log does not hold, so agpt.failover.plan runs the health sweep
    before deciding: it names no host proven bad; it is not already ended (done, the deadline, the trainer's
    resubmit); no sweep already passed for its signature in this job (then its reproduction stops without
    another); and it is a fault no host is proven for (`hang`, `crash`, `node` naming no active host), an
    application error (before any relaunch or stop rests on its wording), or a site fault that recurred."""
    cls = effective_class(att.cls, att.rc)
    named = _named(att, cls, active)
    if named or cls not in (*BLIND_CLASSES, "node", "app", "system"):
        return False
    if cls == "system" and not any(ev.get("class") == "system" for ev in _same_signature(att, history)):
        return False  # a site fault is backed off on first sight; one that comes back is swept
    if _swept_for(att, history):
        return False
    progressed = att.progress or any(_progress(e) for e in history)
    stop = _early_stop(
        att, cls, named, active=active, history=history, settings=settings, progressed=progressed
    )
    return stop is None


def apply_sweep(att: Attempt, result: SweepResult, *, active: Sequence[str]) -> Attempt:
    """The attempt as the sweep's evidence leaves it (a new Attempt; pure).

    Hosts that failed are proven bad: `node`, their failing lines first in the evidence.  Most hosts failing (or
    more than FAILOVER_SWEEP_MAX_EVICT) is a site-wide fault: `system`, nobody evicted.  Every host passing: the
    failure is not a node's; `swept`, so no blind eviction follows.  A sweep that could not run leaves the class
    and says why (`sweep_note`): the blind rotation is the last resort.  A sweep deferred for want of time before
    the deadline guesses nobody either: same hosts (the next job, with time, sweeps)."""
    new = Attempt(**{f: getattr(att, f) for f in att.__slots__})  # type: ignore[attr-defined]
    if result.deferred:  # no time for evidence before the deadline: no guess either, the next job sweeps
        new.swept = True
        new.sweep_note = result.note
        return new
    if not result.ran:
        new.sweep_note = result.note or "the sweep did not run"
        return new
    if result.site_wide:
        new.cls, new.bad_hosts = "system", []
        new.evidence = [f"sweep: {result.note}", *att.evidence][:5]
        return new
    failed = [h for h in result.evict() if h in active]
    if failed:
        new.cls, new.bad_hosts = "node", failed
        new.evidence = [f"sweep: {h}: {result.failed[h]}" for h in failed][:5] + att.evidence
        new.evidence = new.evidence[:5]
        return new
    new.swept = True
    if not result.failed:  # a link both halves of which pass is reported, not a pass
        new.passed = "probe + collective" if result.mode == "full" and len(result.hosts) >= 2 else "probe"
    return new


def _ended(
    att: Attempt, cls: str, named: list[str], history: Sequence[dict[str, Any]], progressed: bool
) -> Plan | None:
    """Rule 1: the attempt's own end decides: done, the deadline, the trainer's own resubmit or rollback limit
    (the last once the sweep has passed every host, or could not run: a device that computes wrong numbers makes
    the trainer roll back too)."""
    if att.rc == 0 or cls == "success":
        return _stop("done", "training finished" if att.rc == 0 else "classified success")
    if cls == "walltime":
        return _stop("resubmit", "killed at the job's deadline", mark_bad=named)
    straggler = bool(named) and any(e.startswith("straggler:") for e in att.evidence)
    if att.rc == EXIT_RESUBMIT and not straggler:  # a straggler's stop (heartbeat monitor) is swapped below
        return _stop("resubmit", "the trainer asked to be resubmitted (rc 75)", mark_bad=named)
    # rc 4 with class app: the trainer's rollback limit (train.max_rollbacks); a relaunch would repeat it.
    if att.rc == 4 and cls == "app":
        swept = _swept_for(att, history)
        if swept:
            return _stop(
                "repeat",
                f"the trainer gave up after too many rollbacks (rc 4) and every host passed the sweep ({swept}): "
                "a person is needed",
            )
        if att.sweep_note and not _sweep_deferred(att, progressed):
            return _stop(
                "repeat",
                f"the trainer gave up after too many rollbacks (rc 4) (the health sweep could not run: "
                f"{att.sweep_note})",
            )
    return None


def _repeated(
    att: Attempt, cls: str, history: Sequence[dict[str, Any]], settings: Settings, rotation: int
) -> Plan | None:
    """Rule 2: the same class at the same step, attempts in a row (this one included)."""
    where = att.where
    same = 1
    for ev in reversed(history):
        if not _same_failure(ev, cls, where):
            break
        same += 1
    limit = max(settings.max_repeat, rotation) if cls in BLIND_CLASSES else settings.max_repeat
    if cls not in ("node", "system") and where is not None and same >= limit:
        return _stop(
            "repeat",
            f"'{cls}' at step {where} {same} times in a row (limit {limit}): a deterministic failure",
        )
    return None


def _stuck(att: Attempt, cls: str, history: Sequence[dict[str, Any]], rotation: int) -> Plan | None:
    """Rule 3: attempts in a row without a progress line (swaps of proven-bad hosts and site faults break the
    row)."""
    if att.progress or cls in ("node", "system"):
        return None
    row = [cls]
    for ev in reversed(history):
        if _progress(ev) or ev.get("class") in ("node", "system"):
            break
        row.append(str(ev.get("class")))
    limit = max(rotation, 2) if all(c in BLIND_CLASSES for c in row) else 2
    if len(row) >= limit:
        return _stop("stuck", f"{len(row)} attempts in a row made no progress ({', '.join(reversed(row))})")
    return None


def _out_of_attempts(
    att: Attempt,
    cls: str,
    settings: Settings,
    progressed: bool,
    named: list[str],
    history: Sequence[dict[str, Any]],
) -> Plan | None:
    """Rule 4: FAILOVER_MAX_ATTEMPTS attempts in a row without a step past the job's furthest."""
    if stalled(history, att.last_step) < settings.max_attempts:
        return None
    return _stop(
        "resubmit" if progressed or cls == "system" else "failed", _attempts_used(settings), mark_bad=named
    )


def _attempts_used(settings: Settings) -> str:
    return f"{settings.max_attempts} attempts in a row without a step past the job's furthest (FAILOVER_MAX_ATTEMPTS)"


def stalled(history: Sequence[dict[str, Any]], *ended: int | None) -> int:
    """The attempts in a row at the end of this job's (HISTORY, then the last steps of any that ENDED since) that
    logged no step past the furthest one the job had logged before them."""
    lasts = [e.get("last_step") for e in history] + list(ended)
    furthest: int | None = None
    run = 0
    for step in lasts:
        if isinstance(step, int) and (furthest is None or step > furthest):
            furthest, run = step, 0
        else:
            run += 1
    return run


def _swap(
    att: Attempt,
    cls: str,
    named: list[str],
    *,
    active: Sequence[str],
    spare: Sequence[str],
    history: Sequence[dict[str, Any]],
    progressed: bool,
) -> Plan:
    """Rule 5: the relaunch, with the named hosts swapped, a blind swap, or the same hosts; a stop when the
    spares run out."""
    plan = Plan(action="relaunch")
    if cls == "node" and named:
        if len(spare) < len(named):
            why = f"{len(named)} bad host(s) ({','.join(named)}) but {len(spare)} spare(s) left"
            return _stop("resubmit" if progressed else "failed", why, mark_bad=named)
        plan.swap_out, plan.swap_in = named, list(spare[: len(named)])
        plan.reason = f"'{cls}': the log names {','.join(named)}"
    elif (cls in BLIND_CLASSES or cls == "node") and att.swept:
        plan.reason = (
            f"'{cls}' names no host and no time for the health sweep ({att.sweep_note}): no guess, same hosts"
            if att.sweep_note
            else f"'{cls}' names no host and the health sweep passed every host: no node to blame, same hosts"
        )
    elif cls in BLIND_CLASSES or cls == "node":
        out, inn, returned, why = _blind_swap(att, active=active, spare=spare, history=history)
        late = f" (the health sweep could not run: {att.sweep_note})" if att.sweep_note else ""
        if not out:
            return _stop("resubmit" if progressed else "failed", f"'{cls}' and {why}{late}")
        plan.swap_out, plan.swap_in, plan.returned, plan.blind = out, inn, returned, True
        plan.reason = f"'{cls}' names no host: blind swap of {out[0]} ({why}){late}"
        if returned:
            plan.reason += f"; {','.join(returned)} cleared, back to the spares"
    elif cls == "system":
        plan.reason = "'system': a site-wide fault; same hosts after the backoff"
    elif att.passed:
        plan.reason = (
            f"'app': `{shown(att)}`, and every host passed the sweep ({att.passed}): same hosts, to see whether "
            "it reproduces"
        )
    else:
        late = f" (the health sweep could not run: {att.sweep_note})" if att.sweep_note else ""
        plan.reason = f"'app': `{shown(att)}`: same hosts{late}"
    return plan


def _shrink_or_stop(
    stop: Plan,
    named: list[str],
    *,
    active: Sequence[str],
    spare: Sequence[str],
    settings: Settings,
    layout: shrinklib.Layout | str | None,
) -> Plan:
    """Rule 5's shrink: more named hosts than spares, FAILOVER_SHRINK on: a relaunch on the healthy hosts when
    agpt.failover.shrink finds a count that keeps the global batch; else the stop, its reason saying why not."""
    if not settings.shrink:
        stop.reason += "; not shrinking (FAILOVER_SHRINK=0)"
        return stop
    if not isinstance(layout, shrinklib.Layout):
        stop.reason += f"; cannot shrink: {layout or 'the job has no layout'}"
        return stop
    sh = shrinklib.plan(layout, active=active, spare=spare, named=named, floor_spec=settings.min_nodes)
    if isinstance(sh, str):
        stop.reason += f"; cannot shrink: {sh}"
        return stop
    return Plan(
        action="relaunch",
        swap_out=named,
        swap_in=sh.swap_in,
        to_spare=sh.to_spare,
        shrink=sh.record,
        reason=f"'node': the log names {','.join(named)}, {len(spare)} spare(s) left: shrink {sh.before} -> "
        f"{sh.after} nodes (FAILOVER_SHRINK), {sh.reason}",
    )
