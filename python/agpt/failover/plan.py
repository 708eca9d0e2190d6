"""`agpt failover plan`: what the failover loop does after an attempt (or before one), as one pure function.

Standard library only.  Every decision of lib/failover.sh lives here, so it is unit-tested without a cluster and
the Bash loop stays glue: run the attempt, ask `plan` (which classifies the log in-process and writes
attempts/JOBID.N.class.json), act, repeat.  One call per attempt; `--before` runs once, before the first.

`decide()` takes the attempt that just ended (its class from `agpt failover classify`, its steps), the host lists
and the earlier attempts of this job (events.jsonl), and returns
  {action: relaunch|stop, verdict, exit, swap_out, swap_in, returned, blind, mark_bad, backoff_s, reason}.

The rules, in order (why in brackets):
1. rc 0 -> stop `done` (0).  Class `walltime`, or rc 75 (the trainer itself asked to be resubmitted) -> stop
   `resubmit` (75).
2. The same class at the same step (the last progress line, else the checkpoint resumed from) for FAILOVER_MAX_REPEAT attempts in a row -> stop `repeat` (4) [a
   deterministic bug: more attempts only burn hours].  Not for `node`: each named host is evidence of its own,
   and the spares and FAILOVER_MAX_ATTEMPTS bound it.  Not for `system`: a filesystem or PMI outage lasts as
   long as it lasts, whatever step it interrupts; the backoff, FAILOVER_MAX_ATTEMPTS and then the chain's
   no-progress guard bound it, and a person is not needed to restart a run a site fault stopped.  For `hang`/`crash` the limit is at least one more than the
   blind rotation needs (min(active, FAILOVER_MAX_BLIND) + 1), so a rotation can reach every original host
   before the failure is called deterministic.
3. Two attempts in a row with no progress line, neither of them `node` or `system` -> stop `stuck` (3) [a config
   or environment bug; a swap of a host proven bad is a real fix, and a site-wide fault is waited out].  When
   every attempt of the row is a `hang`/`crash`, the row must be as long as the blind rotation (min(active,
   FAILOVER_MAX_BLIND) + 1): a bad host that hangs the first collective after a resume looks the same.
4. FAILOVER_MAX_ATTEMPTS reached -> stop: `resubmit` (75) after progress in this job, or when the attempt is a
   `system` fault (a later job retries after its queue wait; CHAIN_MAX_NO_PROGRESS bounds it), else `failed` (1).
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
import contextlib
import io
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agpt import ckptdir, rundir
from agpt.errors import EXIT_RESUBMIT, EXIT_USAGE, BadInput
from agpt.rundir import BLIND_CLASSES, CLASSES

NO_SUCH_COMMAND = (
    EXIT_USAGE,
    126,
    127,
)  # bad input (docs/contract.md); the shell's "cannot execute", "not found"
EXIT_CODES = {v: rundir.VERDICT_EXIT[v] for v in rundir.FAILOVER_VERDICTS}
DEFAULT_PROGRESS_RE = rundir.PROGRESS_RE


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
        for name, v in (("max_attempts", self.max_attempts), ("max_repeat", self.max_repeat)):
            if v > 1_000_000:
                raise BadInput(f"FAILOVER_{name.upper()} must be at most 1000000, got {v}")
        self.max_blind = min(self.max_blind, 1_000_000)
        self.min_attempt_s = rundir.seconds(self.min_attempt_s, "FAILOVER_MIN_ATTEMPT_S")
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
    straggler = bool(named) and any(e.startswith("straggler:") for e in att.evidence)
    if att.rc == EXIT_RESUBMIT and not straggler:  # a straggler's stop (heartbeat monitor) is swapped below
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
    if cls not in ("node", "system") and where is not None and same >= limit:
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
            "resubmit" if progressed or cls == "system" else "failed",
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
    """(first step, last step, progress lines) of a log, streamed in bounded memory (any bytes, any size).

    Only when the classifier gave no answer: its JSON carries first_step and last_step."""
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
                if n is None or len(n.group(0)) > 18:
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
    """The step a resume starts from (agpt.ckptdir's rule), None when there is no complete checkpoint."""
    return ckptdir.resume_step(run_dir)


def read_events(path: Path) -> list[dict[str, Any]]:
    """events.jsonl's records (a torn or unreadable line is skipped with a note on stderr)."""
    return rundir.read_jsonl(path)


def _clean_event(ev: dict[str, Any]) -> dict[str, Any]:
    """An attempt record as decide() reads it: numbers that are numbers, `swapped` a dict (records are data)."""
    out = dict(ev)
    out["attempt"] = rundir.integer(ev.get("attempt")) or 0
    for k in ("first_step", "last_step", "ckpt_step"):
        out[k] = rundir.integer(ev.get(k))
    sw = ev.get("swapped")
    if not isinstance(sw, dict):
        sw = {}
    out["swapped"] = {
        "out": [h for h in sw.get("out") or [] if isinstance(h, str)]
        if isinstance(sw.get("out"), list)
        else [],
        "in": [h for h in sw.get("in") or [] if isinstance(h, str)] if isinstance(sw.get("in"), list) else [],
        "blind": bool(sw.get("blind")),
    }
    out["class"] = ev.get("class") if isinstance(ev.get("class"), str) else "crash"
    return out


def job_history(events: Sequence[dict[str, Any]], jobid: str) -> list[dict[str, Any]]:
    """This job's attempt events (a chain's earlier jobs ran on other hosts)."""
    return [_clean_event(e) for e in events if e.get("event") == "attempt" and str(e.get("jobid")) == jobid]


def append_event(path: Path, ev: dict[str, Any]) -> None:
    rundir.append_jsonl(path, ev)


def _walltime_margin() -> float:
    """FAILOVER_WALLTIME_MARGIN as the classifier reads it; a bad value there is the classifier's to report."""
    try:
        return rundir.seconds(
            os.environ.get("FAILOVER_WALLTIME_MARGIN") or rundir.WALLTIME_MARGIN_S, "margin"
        )
    except BadInput:
        return rundir.WALLTIME_MARGIN_S


def fallback_classification(rc: int, *, now: float, deadline: float | None, note: str) -> dict[str, Any]:
    """A class from rc and the clock alone, when the classifier gave none: a scraper failure never stops the
    loop, it degrades to "no evidence" and says so."""
    if rc == 0:
        cls = "success"
    elif deadline is not None and now >= deadline - _walltime_margin():
        cls = "walltime"
    elif rc == 124:
        cls = "hang"
    else:
        cls = "crash"
    return {"class": cls, "bad_hosts": [], "evidence": [f"({note}; fell back to rc {rc})"], "last_step": None}


def load_classification(path: str | None, *, rc: int, now: float, deadline: float | None) -> dict[str, Any]:
    """The classifier's JSON from a file; when it gave none (missing, crashed, not JSON), the fallback."""
    data: Any = None
    note = ""
    if path:
        try:
            data = rundir.parse_json_line(Path(path).read_text(errors="replace") or "null")
        except (OSError, ValueError, RecursionError) as e:
            note = f"classifier output unreadable ({e.__class__.__name__})"
    if isinstance(data, dict) and data.get("class") in CLASSES:
        return data
    return fallback_classification(rc, now=now, deadline=deadline, note=note or "classifier gave no answer")


def classify_attempt(
    run_dir: Path,
    *,
    log: Path,
    rc: int,
    now: float,
    deadline: float | None,
    progress_re: str | None,
    extra: Sequence[str] = (),
    out: Path | None = None,
) -> dict[str, Any]:
    """`agpt failover classify` in this process, on hosts/active and hosts/ip, with `extra` classify options
    passed through as given; its JSON is written to `out` (attempts/JOBID.N.class.json).  When it cannot answer
    (bad option, missing log, a scraper bug), the fallback from rc and the clock, written there too."""
    from agpt.failover import classify as cl  # the classifier's patterns load only when an attempt ended

    argv = [str(log), "--rc", str(rc), "--hostfile", str(run_dir / rundir.HOSTS_ACTIVE), "--now", repr(now)]
    if (run_dir / rundir.HOSTS_IP).is_file():
        argv += ["--ipmap", str(run_dir / rundir.HOSTS_IP)]
    if deadline is not None:
        argv += ["--deadline", repr(deadline)]
    if progress_re:
        argv += ["--progress-re", progress_re]
    buf = io.StringIO()
    code: Any = 1
    try:
        with contextlib.redirect_stdout(buf):
            code = cl.main([*argv, *extra])
    except Exception as e:  # a classifier bug must not stop the loop
        sys.stderr.write(f"failover: classifier error ({type(e).__name__}: {e})\n")
    data: Any = None
    if code == 0:
        with contextlib.suppress(ValueError, RecursionError):
            data = rundir.parse_json_line(buf.getvalue())
    if not (isinstance(data, dict) and data.get("class") in CLASSES):
        sys.stderr.write(f"failover: classifier failed on {log} (rc {code}); deciding from the exit code\n")
        data = fallback_classification(rc, now=now, deadline=deadline, note="classifier gave no answer")
    if out is not None:
        from agpt.failover.hosts import write_atomic

        with contextlib.suppress(OSError):
            write_atomic(out, json.dumps(data) + "\n")
    return dict(data)


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


_DEFAULTS = Settings()


def _opt(v: str | None, parse: Any, default: Any) -> Any:
    """A flag's value: '' or absent is the Settings default (lib/failover.sh passes its settings as given)."""
    return default if v is None or str(v).strip() == "" else parse(v)


def _settings(args: argparse.Namespace) -> Settings:
    def backoff(text: str) -> tuple[float, ...]:
        try:
            return tuple(float(x) for x in text.replace(",", " ").split())
        except ValueError:
            raise BadInput(f"failover plan: --backoff wants seconds like '5 10 20', got '{text}'") from None

    try:
        re.compile(args.progress_re or DEFAULT_PROGRESS_RE)
    except (re.error, RecursionError) as e:
        raise BadInput(
            f"FAILOVER_PROGRESS_RE: not a regular expression ({e}): {args.progress_re!r}"
        ) from None

    def count(name: str) -> Any:
        return lambda v: rundir.whole(v, name, minimum=-(10**6))

    d = _DEFAULTS
    return Settings(
        max_attempts=_opt(args.max_attempts, count("FAILOVER_MAX_ATTEMPTS"), d.max_attempts),
        max_repeat=_opt(args.max_repeat, count("FAILOVER_MAX_REPEAT"), d.max_repeat),
        max_blind=_opt(args.max_blind, count("FAILOVER_MAX_BLIND"), d.max_blind),
        min_attempt_s=_opt(
            args.min_attempt_s, lambda v: rundir.seconds(v, "FAILOVER_MIN_ATTEMPT_S"), d.min_attempt_s
        ),
        backoff=_opt(args.backoff, backoff, d.backoff),
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise BadInput(f"failover plan: {message}")


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="agpt failover plan",
        description="Decide the failover loop's next step from the run directory; print JSON (or --shell words). "
        "After an attempt it classifies the log in-process (writing attempts/JOBID.N.class.json); options "
        "after `--` go to `agpt failover classify` as given.",
    )
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--jobid", default="local")
    ap.add_argument("--attempt", help="the attempt number in this job (1-based; with --before: default next)")
    ap.add_argument(
        "--next-attempt",
        action="store_true",
        help="print the number of this job's next attempt (a requeued job id continues its count)",
    )
    ap.add_argument("--before", action="store_true", help="decide whether the first attempt may start")
    ap.add_argument("--rc", help="the attempt's exit status")
    ap.add_argument("--log", help="the attempt's log (classified, progress lines counted)")
    ap.add_argument("--classification", help="file holding `agpt failover classify` JSON (skips classifying)")
    ap.add_argument("--started")
    ap.add_argument("--ended")
    ap.add_argument("--now", help="the clock (tests)")
    ap.add_argument("--deadline", default="", help="epoch at which the job ends ('' unknown)")
    ap.add_argument("--progress-re", default="", help=f"FAILOVER_PROGRESS_RE (default {DEFAULT_PROGRESS_RE})")
    d = _DEFAULTS
    ap.add_argument("--max-attempts", help=f"FAILOVER_MAX_ATTEMPTS (default {d.max_attempts})")
    ap.add_argument("--max-repeat", help=f"FAILOVER_MAX_REPEAT (default {d.max_repeat})")
    ap.add_argument("--max-blind", help=f"FAILOVER_MAX_BLIND (default {d.max_blind})")
    ap.add_argument("--min-attempt-s", help=f"FAILOVER_MIN_ATTEMPT_S (default {d.min_attempt_s:g})")
    ap.add_argument("--backoff", help=f"FAILOVER_BACKOFF (default '{' '.join(f'{b:g}' for b in d.backoff)}')")
    ap.add_argument("--apply", action="store_true", help="do it: swap hosts, append events.jsonl")
    ap.add_argument(
        "--shell", action="store_true", help="print `ACTION EXIT BACKOFF_S ATTEMPT` instead of JSON"
    )
    ap.add_argument("--report", action="store_true", help="on a stop, print `agpt failover report` to stderr")
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


def _rc(text: str | None) -> int:
    if text is None:
        raise BadInput("failover plan: --rc is required after an attempt (or pass --before)")
    rc = rundir.whole(text, "--rc", minimum=-255, maximum=255)
    return 128 - rc if rc < 0 else rc


def run(args: argparse.Namespace, extra: Sequence[str] = ()) -> Plan:
    # Imported here so `plan` stays importable on its own for the pure function's tests.
    from agpt.failover import hosts as hostlib

    settings = _settings(args)
    run_dir = Path(args.run_dir)
    now = time.time() if args.now is None else rundir.epoch(args.now, "--now")
    assert now is not None
    deadline = rundir.epoch(args.deadline, "--deadline")
    events_path = run_dir / rundir.EVENTS
    events = read_events(events_path)
    if args.attempt is None:
        args.attempt = next_attempt(run_dir, args.jobid, events)
    args.attempt = rundir.whole(args.attempt, "--attempt", minimum=1)
    history = [e for e in job_history(events, args.jobid) if e["attempt"] < args.attempt]
    rh = hostlib.RunHosts(run_dir=run_dir)
    active, spare = rh.active(), rh.spare()

    if args.before:
        plan = before_attempt(args.attempt, history=history, settings=settings, now=now, deadline=deadline)
        if args.apply and plan.action == "stop":
            append_event(events_path, _stop_event(args.jobid, args.attempt - 1, plan, now))
        return plan

    rc = _rc(args.rc)
    started = rundir.epoch(args.started, "--started")
    ended = rundir.epoch(args.ended, "--ended")
    log = Path(args.log) if args.log else None
    if args.classification or log is None:
        c = load_classification(args.classification, rc=rc, now=now, deadline=deadline)
    else:
        out = log.with_name(log.name.removesuffix(".log") + ".class.json")
        c = classify_attempt(
            run_dir,
            log=log,
            rc=rc,
            now=ended or now,
            deadline=deadline,
            progress_re=args.progress_re,
            extra=extra,
            out=out,
        )
    if "first_step" in c:
        first, last = rundir.integer(c.get("first_step")), rundir.integer(c.get("last_step"))
    else:
        first, last, _ = scan_steps(log, args.progress_re or DEFAULT_PROGRESS_RE) if log else (None, None, 0)
    ckpt = latest_checkpoint(run_dir)
    att = Attempt(
        attempt=args.attempt,
        rc=rc,
        cls=effective_class(str(c.get("class")), rc),
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
        "rc": rc,
        "class": att.cls,
        "bad_hosts": att.bad_hosts,
        "evidence": att.evidence,
        "swapped": swapped,
        "first_step": first,
        "last_step": last,
        "ckpt_step": ckpt,
        "started": started,
        "ended": ended if ended is not None else round(now, 3),
        "hosts": list(active),
        "log": str(log.relative_to(run_dir)) if log and _under(log, run_dir) else args.log,
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
    if args.before and plan.action == "stop":
        head = f"not starting attempt {args.attempt}"
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


def next_attempt(run_dir: Path, jobid: str, events: Sequence[dict[str, Any]] | None = None) -> int:
    """1 + the highest attempt of `jobid` in events.jsonl: a job requeued under the same id keeps counting, so
    its logs and history never mix with the earlier run's."""
    evs = read_events(run_dir / rundir.EVENTS) if events is None else events
    done = [e["attempt"] for e in job_history(evs, jobid)]
    return max(done, default=0) + 1


def _print_report(run_dir: str) -> None:
    """The run's timeline on stderr (the loop's log), at every stop; a report that cannot be built is a note."""
    from agpt.failover import report

    try:
        sys.stderr.write(report.render(report.build(run_dir)))
    except (BadInput, OSError, ValueError) as e:
        sys.stderr.write(f"failover: no report: {e}\n")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:  # what follows goes to the classifier as given
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    try:
        args = _parser().parse_args(argv)
        if args.next_attempt:
            print(next_attempt(Path(args.run_dir), args.jobid))
            return 0
        if args.attempt is None and not args.before:
            raise BadInput("failover plan: --attempt N is required (or --next-attempt, --before)")
        plan = run(args, extra)
    except BadInput as e:
        sys.stderr.write(f"agpt: error: {e}\n")
        return e.exit_code
    if args.apply and (plan.action == "stop" or not args.before):
        sys.stderr.write(f"failover: {_summary(args, plan)}\n")
    if args.report and plan.action == "stop":
        _print_report(args.run_dir)
    if args.shell:
        print(
            f"{plan.action} {plan.exit if plan.exit is not None else '-'} {plan.backoff_s:g} {args.attempt}"
        )
    else:
        print(json.dumps(plan.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
