"""What a reading costs: the failover loop's real decisions replayed on one scored case.

A label can be wrong and the loop still do the right thing (a crash that names nobody is swept, and the sweep
finds the bad node), and a label can be nearly right and the loop do harm (a node verdict naming a healthy host
evicts it).  `agpt failover score` grades both: the label (agpt.failover.score.judge) and, here, its consequence.

The replay calls the loop's own decision code (agpt.failover.policy: wants_sweep, apply_sweep, decide) attempt
after attempt with the case's classification, on the case's hosts plus spares, under these assumptions, which are
the ground truth the case's expectation states:
- a node fault recurs while its host is active (the same log, read the same way), and the health sweep's probe
  fails exactly that host (`expect.bad_hosts`);
- an application fault recurs on any hosts, and every host passes the sweep;
- a site fault (`system`: a shared filesystem, a service outside the job) lasts: it recurs on SITE_FAULT_RELAUNCHES
  relaunches (the backoff's first steps, a minute or two), then clears;
- any other fault (a crash or hang no host is proven for, the deadline) does not recur: the first relaunch trains.

Each case ends in one of CONSEQUENCES:
  right        the label is right and the loop takes the right action
  recoverable  the label is wrong, but the loop recovers without a person and evicts no healthy host (what it
               costs: a sweep, a relaunch), or for an application fault still reaches the stop
  unresolved   the loop neither recovers nor stops within MAX_ATTEMPTS attempts: the fault stays (a bad host
               never evicted, an application fault relaunched until FAILOVER_MAX_ATTEMPTS and the chain's
               no-progress guard end it): hours, but no person paged and no host lost
  evicted      the loop evicts a host that is not at fault (a healthy host; the bad one may stay)
  stopped      the loop stops for a person (`stuck`, `repeat`) where the fault was not the application's

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agpt.failover import policy
from agpt.failover.sweep import SweepResult

CONSEQUENCES = ("right", "recoverable", "unresolved", "evicted", "stopped")
PERSON = ("stuck", "repeat")  # the loop's verdicts that wait for a person
SPARES = ("spare-1", "spare-2", "spare-3")
MAX_ATTEMPTS = 8
SITE_FAULT_RELAUNCHES = (
    2  # a site outage outlasts the first backoffs (5 + 10 s, lib/failover.sh FAILOVER_BACKOFF)
)
STEP_S = 60.0  # the replay's clock between attempts


@dataclass(kw_only=True, slots=True)
class Replay:
    kind: str  # one of CONSEQUENCES
    detail: str  # what the loop did, in a few words
    attempts: int


def _attempt(n: int, got: dict[str, Any], line: str | None, hosts: list[str]) -> policy.Attempt:
    att = policy.Attempt(
        attempt=n,
        rc=int(got.get("rc") or 0),
        cls=policy.effective_class(str(got.get("class")), int(got.get("rc") or 0)),
        bad_hosts=[h for h in got.get("bad_hosts") or [] if isinstance(h, str)],
        evidence=[str(x) for x in got.get("evidence") or []][:5],
        suspects=[h for h in got.get("suspect_hosts") or [] if isinstance(h, str)],
        first_step=got.get("first_step"),
        last_step=got.get("last_step"),
    )
    att.signature = policy.signature(line, hosts=hosts, where=att.where)
    return att


def _sweep(active: list[str], bad: set[str]) -> SweepResult:
    failed = {h: "agpt-probe: FAILED: the device check" for h in active if h in bad}
    return SweepResult(ran=True, mode="full", hosts=list(active), failed=failed, rounds=1)


def _event(att: policy.Attempt, plan: policy.Plan, swept: bool) -> dict[str, Any]:
    return {
        "event": "attempt",
        "attempt": att.attempt,
        "class": att.cls,
        "first_step": att.first_step,
        "last_step": att.last_step,
        "ckpt_step": att.ckpt_step,
        "swapped": {"out": plan.swap_out, "in": plan.swap_in, "blind": plan.blind},
        "sweep": {"ran": swept},
        "signature": att.signature,
        "passed": att.passed,
    }


def replay(
    want: dict[str, Any], got: dict[str, Any], hosts: list[str], *, label_right: bool, line: str | None = None
) -> Replay:
    """Drive the loop's decisions on this case until it recovers, stops, or harms (see the module's docstring).
    `line`: the attempt's first failing line (agpt.failover.policy.failing_line), whose signature a recurrence
    repeats; None when it has none."""
    truth = str(want.get("class"))
    bad = set(want.get("bad_hosts") or []) if truth == "node" else set()
    not_healthy = bad | ({str(want["suspect_first"])} if want.get("suspect_first") else set())
    active, spare = list(hosts), list(SPARES)
    history: list[dict[str, Any]] = []
    settings = policy.Settings()
    sweeps = 0
    for n in range(1, MAX_ATTEMPTS + 1):
        att = _attempt(n, got, line, [*hosts, *SPARES])
        swept = False
        if policy.wants_sweep(att, active=active, history=history, settings=settings):
            att, swept, sweeps = policy.apply_sweep(att, _sweep(active, bad), active=active), True, sweeps + 1
        plan = policy.decide(
            att, active=active, spare=spare, history=history, settings=settings, now=n * STEP_S
        )
        healthy = [h for h in [*plan.swap_out, *plan.mark_bad] if h not in not_healthy]
        if healthy:
            return Replay(kind="evicted", detail=f"evicts {','.join(healthy)} ({plan.reason})", attempts=n)
        if plan.action == "stop" and plan.verdict in PERSON:
            if truth == "app":
                kind = "right" if label_right else "recoverable"
                return Replay(kind=kind, detail=f"stops, {plan.verdict}, after {n} attempt(s)", attempts=n)
            return Replay(kind="stopped", detail=f"stops for a person: {plan.reason}", attempts=n)
        if plan.action == "stop":
            kind = "right" if label_right else "recoverable"
            return Replay(kind=kind, detail=f"stops, {plan.verdict}", attempts=n)
        history.append(_event(att, plan, swept))
        for out, inn in zip(plan.swap_out, plan.swap_in, strict=False):
            active[active.index(out)] = inn
            spare.remove(inn)
        spare.extend(h for h in plan.returned if h not in spare)
        if truth == "node" and not bad & set(active):
            break
        if truth == "system" and n > SITE_FAULT_RELAUNCHES:
            break
        if truth not in ("node", "app", "system"):
            break
    else:
        what = "no stop" if truth == "app" else "the fault stays"
        return Replay(
            kind="unresolved", detail=f"{what} after {MAX_ATTEMPTS} attempts", attempts=MAX_ATTEMPTS
        )
    cost = f", {sweeps} sweep(s)" if sweeps else ""
    return Replay(kind="right" if label_right else "recoverable", detail=f"recovers in {n} attempt(s){cost}",
                  attempts=n)  # fmt: skip
