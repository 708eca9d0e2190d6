"""`agpt failover plan`: what the failover loop does after an attempt (or before one), as one pure function.

Standard library only.  Every decision of lib/failover.sh lives here, so it is unit-tested without a cluster and
the Bash loop stays glue: run the attempt, classify its log, ask `plan`, act, repeat.

`decide()` takes the attempt that just ended (its class from `agpt failover classify`, its steps), the host lists
and the earlier attempts of this job (events.jsonl), and returns
  {action: relaunch|stop, verdict, exit, swap_out, swap_in, returned, blind, mark_bad, backoff_s, reason}.

The rules, in order (why in brackets):
1. rc 0 -> stop `done` (0).  Class `walltime`, or rc 75 (the trainer itself asked to be resubmitted) -> stop
   `resubmit` (75).
2. The same class at the same step (the last progress line, else the checkpoint resumed from) for FAILOVER_MAX_REPEAT attempts in a row -> stop `repeat` (4) [a
   deterministic bug: more attempts only burn hours].  Not for `node`: each named host is evidence of its own,
   and the spares and FAILOVER_MAX_ATTEMPTS bound it.  For `hang`/`crash` the limit is at least one more than the
   blind rotation needs (min(active, FAILOVER_MAX_BLIND) + 1), so a rotation can reach every original host
   before the failure is called deterministic.
3. Two attempts in a row with no progress line, neither of them `node` or `system` -> stop `stuck` (3) [a config
   or environment bug; a swap of a host proven bad is a real fix, and a site-wide fault is waited out].  When
   every attempt of the row is a `hang`/`crash`, the row must be as long as the blind rotation (min(active,
   FAILOVER_MAX_BLIND) + 1): a bad host that hangs the first collective after a resume looks the same.
4. FAILOVER_MAX_ATTEMPTS reached -> stop: `resubmit` (75) after progress in this job, else `failed` (1).
5. `node`: swap exactly the named active hosts.  `hang`/`crash`: a rotating blind swap of one host: never a
   spare this rotation added, the hosts the evidence points at first (the classifier's `suspect_hosts`, then
   `last_heard`), then in rank order; when the failure recurs unchanged, the host evicted last time is
   cleared and goes back to the end of the spare list, so a rotation needs one spare, not one per host.
   `system`: same hosts.  `app`: no swap.  Not enough spares -> stop `resubmit` (75) after progress in this job
   (a new allocation continues; the hosts proven bad are recorded so it avoids them), else `failed` (1).
6. Backoff: FAILOVER_BACKOFF[k], k = the attempts in a row without progress (or in a row of `system`) minus one.
   If the deadline leaves less than FAILOVER_MIN_ATTEMPT_S after the backoff -> stop `resubmit` (75): never
   start an attempt that cannot reach a checkpoint.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agpt.errors import BadInput

CLASSES = ("success", "walltime", "node", "hang", "crash", "system", "app")
BLIND_CLASSES = ("hang", "crash")
NO_SUCH_COMMAND = (2, 126, 127)  # CONTRACT.md bad input; the shell's "cannot execute" and "not found"
EXIT_CODES = {"done": 0, "failed": 1, "stuck": 3, "repeat": 4, "resubmit": 75}
DEFAULT_PROGRESS_RE = r"\bstep[=:] ?[0-9]+"


@dataclass(kw_only=True, slots=True)
class Settings:
    """The loop's limits (FAILOVER_* in lib/failover.sh)."""

    max_attempts: int = 20
    max_repeat: int = 3
    max_blind: int = 8
    min_attempt_s: float = 600.0
    backoff: tuple[float, ...] = (5.0, 10.0, 20.0, 40.0, 60.0)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise BadInput(f"FAILOVER_MAX_ATTEMPTS must be at least 1, got {self.max_attempts}")
        if self.max_repeat < 2:
            raise BadInput(f"FAILOVER_MAX_REPEAT must be at least 2, got {self.max_repeat}")
        if self.max_blind < 1:
            raise BadInput(f"FAILOVER_MAX_BLIND must be at least 1, got {self.max_blind}")
        if self.min_attempt_s < 0:
            raise BadInput(f"FAILOVER_MIN_ATTEMPT_S must not be negative, got {self.min_attempt_s}")
        if not self.backoff or any(b < 0 for b in self.backoff):
            raise BadInput(f"FAILOVER_BACKOFF must be non-negative seconds, got {self.backoff}")


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

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "verdict": self.verdict,
            "exit": self.exit,
            "swap_out": self.swap_out,
            "swap_in": self.swap_in,
            "returned": self.returned,
            "blind": self.blind,
            "mark_bad": self.mark_bad,
            "backoff_s": self.backoff_s,
            "reason": self.reason,
        }


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
    progressed = any(_progress(e) for e in history)
    if attempt > settings.max_attempts:
        verdict = "resubmit" if progressed else "failed"
        return _stop(verdict, f"{settings.max_attempts} attempts used (FAILOVER_MAX_ATTEMPTS)")
    left = _time_left(now, deadline)
    if left is not None and left < settings.min_attempt_s:
        return _stop(
            "resubmit",
            f"{max(left, 0):.0f} s left before the deadline < FAILOVER_MIN_ATTEMPT_S={settings.min_attempt_s:g}: "
            "not starting an attempt that cannot reach a checkpoint",
        )
    return Plan(action="relaunch", reason="start")


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
) -> Plan:
    """The next step after attempt `att`; `history` holds this job's earlier attempt events, oldest first."""
    progressed = att.progress or any(_progress(e) for e in history)
    cls = effective_class(att.cls, att.rc)
    # Only a `node` verdict makes a named host bad; other classes may name hosts only as context.
    named = [h for h in dict.fromkeys(att.bad_hosts) if h in active] if cls == "node" else []
    if att.rc == 0 or cls == "success":
        return _stop("done", "training finished" if att.rc == 0 else "classified success")
    if cls == "walltime":
        return _stop("resubmit", "killed at the job's deadline", mark_bad=named)
    if att.rc == 75:
        return _stop("resubmit", "the trainer asked to be resubmitted (rc 75)", mark_bad=named)
    # rc 4 with class app: the trainer's rollback limit (train.max_rollbacks); a relaunch would repeat it.
    if att.rc == 4 and cls == "app":
        return _stop("repeat", "the trainer gave up after too many rollbacks (rc 4)")

    rotation = min(len(active), settings.max_blind) + 1  # attempts a blind rotation needs to try every host

    # repeat: the same class at the same step, attempts in a row (this one included)
    where = att.where
    same = 1
    for ev in reversed(history):
        if not _same_failure(ev, cls, where):
            break
        same += 1
    limit = max(settings.max_repeat, rotation) if cls in BLIND_CLASSES else settings.max_repeat
    if cls != "node" and where is not None and same >= limit:
        return _stop(
            "repeat",
            f"'{cls}' at step {where} {same} times in a row (limit {limit}): a deterministic failure",
        )

    # stuck: attempts in a row without a progress line (swaps of proven-bad hosts and site faults break the row)
    if not att.progress and cls not in ("node", "system"):
        row = [cls]
        for ev in reversed(history):
            if _progress(ev) or ev.get("class") in ("node", "system"):
                break
            row.append(str(ev.get("class")))
        limit = rotation if all(c in BLIND_CLASSES for c in row) else 2
        if len(row) >= limit:
            return _stop(
                "stuck",
                f"{len(row)} attempts in a row made no progress ({', '.join(reversed(row))})",
            )

    if att.attempt >= settings.max_attempts:
        return _stop(
            "resubmit" if progressed else "failed",
            f"{settings.max_attempts} attempts used (FAILOVER_MAX_ATTEMPTS)",
            mark_bad=named,
        )

    plan = Plan(action="relaunch")
    if cls == "node" and named:
        if len(spare) < len(named):
            why = f"{len(named)} bad host(s) ({','.join(named)}) but {len(spare)} spare(s) left"
            return _stop("resubmit" if progressed else "failed", why, mark_bad=named)
        plan.swap_out, plan.swap_in = named, list(spare[: len(named)])
        plan.reason = f"'{cls}': the log names {','.join(named)}"
    elif cls in BLIND_CLASSES or cls == "node":
        out, inn, returned, why = _blind_swap(att, active=active, spare=spare, history=history)
        if not out:
            return _stop("resubmit" if progressed else "failed", f"'{cls}' and {why}")
        plan.swap_out, plan.swap_in, plan.returned, plan.blind = out, inn, returned, True
        plan.reason = f"'{cls}' names no host: blind swap of {out[0]} ({why})"
        if returned:
            plan.reason += f"; {','.join(returned)} cleared, back to the spares"
    elif cls == "system":
        plan.reason = "'system': a site-wide fault; same hosts after the backoff"
    else:
        plan.reason = "'app': an application error every rank hits; no swap"

    plan.backoff_s = _backoff(att, history, settings)
    left = _time_left(now + plan.backoff_s, deadline)
    if left is not None and left < settings.min_attempt_s:
        return _stop(
            "resubmit",
            f"{max(left, 0):.0f} s would be left after the backoff < FAILOVER_MIN_ATTEMPT_S="
            f"{settings.min_attempt_s:g}: not starting a doomed attempt",
            mark_bad=named,
        )
    return plan


# ----------------------------------------------------------------------------------------------- run-dir glue


def scan_steps(log: Path, pattern: str = DEFAULT_PROGRESS_RE) -> tuple[int | None, int | None, int]:
    """(first step, last step, progress lines) of a log, streamed in bounded memory (any bytes, any size)."""
    rx = re.compile(pattern)
    num = re.compile(r"[0-9]+")
    first: int | None = None
    last: int | None = None
    count = 0
    try:
        with open(log, "rb") as f:
            while True:
                chunk = f.readline(1 << 16)
                if not chunk:
                    break
                m = rx.search(chunk.decode("utf-8", errors="replace"))
                n = num.search(m.group(0)) if m else None
                if n is None:
                    continue
                step = int(n.group(0))
                count += 1
                if first is None:
                    first = step
                last = step
    except OSError:
        return None, None, 0
    return first, last, count


def latest_checkpoint(run_dir: Path) -> int | None:
    """The highest N of RUN_DIR/ckpt/step-N/.complete (CONTRACT.md), None when there is none."""
    best: int | None = None
    for marker in (run_dir / "ckpt").glob("step-*/.complete"):
        try:
            n = int(marker.parent.name.split("-", 1)[1])
        except ValueError:
            continue
        if best is None or n > best:
            best = n
    return best


def read_events(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict):
            out.append(ev)
    return out


def job_history(events: Sequence[dict[str, Any]], jobid: str) -> list[dict[str, Any]]:
    """This job's attempt events (a chain's earlier jobs ran on other hosts)."""
    return [e for e in events if e.get("event") == "attempt" and str(e.get("jobid")) == jobid]


def append_event(path: Path, ev: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(ev, sort_keys=False) + "\n")


def load_classification(path: str | None, *, rc: int, now: float, deadline: float | None) -> dict[str, Any]:
    """The classifier's JSON; when it gave none (missing, crashed, not JSON), a fallback from rc and the clock.

    A scraper failure must never stop the loop: it degrades to "no evidence" and says so.
    """
    data: Any = None
    note = ""
    if path:
        try:
            data = json.loads(Path(path).read_text(errors="replace") or "null")
        except (OSError, ValueError) as e:
            note = f"classifier output unreadable ({e.__class__.__name__})"
    if isinstance(data, dict) and data.get("class") in CLASSES:
        return data
    if not note:
        note = "classifier gave no answer"
    if rc == 0:
        cls = "success"
    elif deadline is not None and now >= deadline - 60:
        cls = "walltime"
    elif rc == 124:
        cls = "hang"
    else:
        cls = "crash"
    return {"class": cls, "bad_hosts": [], "evidence": [f"({note}; fell back to rc {rc})"], "last_step": None}


def _suspects(c: dict[str, Any]) -> list[str]:
    """Hosts the classifier's hints point at, nearest first: its suspects, then the last host heard from.

    (`rank_hosts` alone points nowhere: it is the rank order the rotation follows anyway; the classifier uses
    it to turn "rank 3 died" into a suspect host.)
    """
    out: list[str] = []
    for key in ("suspects", "suspect_hosts", "last_heard"):
        v = c.get(key)
        for h in [v] if isinstance(v, str) else v if isinstance(v, list) else []:
            if isinstance(h, str) and h:
                out.append(h)
    return list(dict.fromkeys(out))


def _float_or_none(v: str | None) -> float | None:
    if v is None or v == "":
        return None
    try:
        return float(v)
    except ValueError:
        raise BadInput(f"failover plan: not a number: '{v}'") from None


def _settings(args: argparse.Namespace) -> Settings:
    try:
        backoff = tuple(float(x) for x in args.backoff.replace(",", " ").split())
    except ValueError:
        raise BadInput(
            f"failover plan: --backoff wants seconds like '5 10 20', got '{args.backoff}'"
        ) from None
    try:
        re.compile(args.progress_re)
    except re.error as e:
        raise BadInput(
            f"FAILOVER_PROGRESS_RE: not a regular expression ({e}): {args.progress_re!r}"
        ) from None
    return Settings(
        max_attempts=args.max_attempts,
        max_repeat=args.max_repeat,
        max_blind=args.max_blind,
        min_attempt_s=args.min_attempt_s,
        backoff=backoff,
    )


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="agpt failover plan",
        description="Decide the failover loop's next step from the run directory; print JSON (or --shell words).",
    )
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--jobid", default="local")
    ap.add_argument("--attempt", type=int, help="the attempt number in this job (1-based)")
    ap.add_argument(
        "--next-attempt",
        action="store_true",
        help="print the number of this job's next attempt (a requeued job id continues its count)",
    )
    ap.add_argument("--before", action="store_true", help="decide whether this attempt may start")
    ap.add_argument("--rc", type=int, help="the attempt's exit status")
    ap.add_argument("--log", help="the attempt's log (progress lines are counted here)")
    ap.add_argument("--classification", help="file holding `agpt failover classify` JSON")
    ap.add_argument("--started", type=float)
    ap.add_argument("--ended", type=float)
    ap.add_argument("--now", type=float, help="the clock (tests)")
    ap.add_argument("--deadline", default="", help="epoch at which the job ends ('' unknown)")
    ap.add_argument("--progress-re", default=DEFAULT_PROGRESS_RE)
    ap.add_argument("--max-attempts", type=int, default=20)
    ap.add_argument("--max-repeat", type=int, default=3)
    ap.add_argument("--max-blind", type=int, default=8)
    ap.add_argument("--min-attempt-s", type=float, default=600.0)
    ap.add_argument("--backoff", default="5 10 20 40 60")
    ap.add_argument("--apply", action="store_true", help="do it: swap hosts, append events.jsonl")
    ap.add_argument("--shell", action="store_true", help="print `ACTION EXIT BACKOFF_S` instead of JSON")
    return ap


def _stop_event(jobid: str, attempt: int, plan: Plan, now: float) -> dict[str, Any]:
    return {
        "event": "stop",
        "jobid": jobid,
        "attempt": attempt,
        "verdict": plan.verdict,
        "exit": plan.exit,
        "reason": plan.reason,
        "time": round(now, 3),
    }


def run(args: argparse.Namespace) -> Plan:
    # Imported here so `plan` stays importable on its own for the pure function's tests.
    from agpt.failover import hosts as hostlib

    settings = _settings(args)
    run_dir = Path(args.run_dir)
    now = time.time() if args.now is None else args.now
    deadline = _float_or_none(args.deadline)
    events_path = run_dir / "events.jsonl"
    history = job_history(read_events(events_path), args.jobid)
    history = [e for e in history if int(e.get("attempt") or 0) < args.attempt]
    rh = hostlib.RunHosts(run_dir=run_dir)
    active, spare = rh.active(), rh.spare()

    if args.before:
        plan = before_attempt(args.attempt, history=history, settings=settings, now=now, deadline=deadline)
        if args.apply and plan.action == "stop":
            append_event(events_path, _stop_event(args.jobid, args.attempt - 1, plan, now))
        return plan

    if args.rc is None:
        raise BadInput("failover plan: --rc is required after an attempt (or pass --before)")
    c = load_classification(args.classification, rc=args.rc, now=now, deadline=deadline)
    first, last, _count = scan_steps(Path(args.log), args.progress_re) if args.log else (None, None, 0)
    ckpt = latest_checkpoint(run_dir)
    att = Attempt(
        attempt=args.attempt,
        rc=args.rc,
        cls=effective_class(str(c.get("class")), args.rc),
        bad_hosts=[h for h in c.get("bad_hosts") or [] if isinstance(h, str)],
        evidence=[str(x) for x in (c.get("evidence") or [])][:5],
        suspects=_suspects(c),
        first_step=first,
        last_step=last,
        ckpt_step=ckpt,
    )
    plan = decide(
        att, active=active, spare=spare, history=history, settings=settings, now=now, deadline=deadline
    )
    if not args.apply:
        return plan
    jobid = args.jobid
    swapped: dict[str, Any] = {"out": [], "in": [], "blind": plan.blind, "returned": []}
    if plan.action == "relaunch" and plan.swap_out:
        r = hostlib.swap(
            run_dir,
            plan.swap_out,
            swap_in=plan.swap_in,
            returned=plan.returned,
            blind=plan.blind,
            jobid=jobid,
            evidence="; ".join(att.evidence[:2]) or att.cls,
        )
        swapped.update({"out": r.swap_out, "in": r.swap_in, "returned": r.returned})
    if plan.mark_bad:
        hostlib.mark_bad(run_dir, plan.mark_bad, jobid=jobid, evidence="; ".join(att.evidence[:2]) or att.cls)
    ev: dict[str, Any] = {
        "event": "attempt",
        "jobid": jobid,
        "attempt": args.attempt,
        "rc": args.rc,
        "class": att.cls,
        "bad_hosts": att.bad_hosts,
        "evidence": att.evidence,
        "swapped": swapped,
        "first_step": first,
        "last_step": last,
        "ckpt_step": ckpt,
        "started": args.started,
        "ended": args.ended if args.ended is not None else round(now, 3),
        "hosts": list(active),
        "log": str(Path(args.log).relative_to(run_dir))
        if args.log and _under(Path(args.log), run_dir)
        else args.log,
        "action": plan.action,
        "backoff_s": plan.backoff_s,
        "reason": plan.reason,
    }
    append_event(events_path, ev)
    if plan.action == "stop":
        append_event(events_path, _stop_event(jobid, args.attempt, plan, now))
    return plan


def _summary(args: argparse.Namespace, plan: Plan) -> str:
    """One line for the batch log: what ended, what happens next, why."""
    head = f"attempt {args.attempt}" + (f" ended rc {args.rc}" if args.rc is not None else "")
    if plan.action == "stop":
        return f"{head}: stop, {plan.verdict} (exit {plan.exit}): {plan.reason}"
    swap = ""
    if plan.swap_out:
        swap = (
            f"; swap {','.join(plan.swap_out)} -> {','.join(plan.swap_in)}{' (blind)' if plan.blind else ''}"
        )
    return f"{head}: {plan.reason}{swap}; relaunch in {plan.backoff_s:g} s"


def _under(p: Path, d: Path) -> bool:
    try:
        p.relative_to(d)
    except ValueError:
        return False
    return True


def next_attempt(run_dir: Path, jobid: str) -> int:
    """1 + the highest attempt of `jobid` in events.jsonl: a job requeued under the same id keeps counting, so
    its logs and history never mix with the earlier run's."""
    done = [int(e.get("attempt") or 0) for e in job_history(read_events(run_dir / "events.jsonl"), jobid)]
    return max(done, default=0) + 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.next_attempt:
        print(next_attempt(Path(args.run_dir), args.jobid))
        return 0
    if args.attempt is None:
        sys.stderr.write("agpt: error: failover plan: --attempt N is required (or --next-attempt)\n")
        return 2
    try:
        plan = run(args)
    except BadInput as e:
        sys.stderr.write(f"agpt: error: {e}\n")
        return e.exit_code
    if args.apply and (plan.action == "stop" or not args.before):
        sys.stderr.write(f"failover: {_summary(args, plan)}\n")
    if args.shell:
        print(f"{plan.action} {plan.exit if plan.exit is not None else '-'} {plan.backoff_s:g}")
    else:
        print(json.dumps(plan.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
