"""`agpt failover plan`: one step of the failover loop on a run directory, after an attempt (or before one).

Standard library only.  The Bash loop stays glue: run the attempt, ask `plan` (which classifies the log
in-process and writes attempts/JOBID.N.class.json), act, repeat.  One call per attempt; `--before` runs once,
before the first.  This module reads the run directory (hosts/active and spare, events.jsonl, the checkpoints),
hands the attempt to the policy's pure functions (agpt.failover.policy: the rules, in order), and with --apply
does what they decide (swaps in hosts/, hosts/bad, events.jsonl).  When the attempt names no host proven bad
(policy.wants_sweep), the health sweep (agpt.failover.sweep) runs first and its evidence decides
(policy.apply_sweep); its output goes to attempts/JOBID.N.sweep.log and its summary to the attempt's event.
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
from pathlib import Path
from typing import Any

from agpt import ckptdir, numeric, rundir, safewrite
from agpt.errors import EXIT_RESUBMIT, BadInput
from agpt.failover import hosts as hostlib
from agpt.failover import policy
from agpt.failover import shrink as shrinklib
from agpt.failover import sweep as sweeplib
from agpt.failover.policy import (
    Attempt,
    Plan,
    Settings,
    apply_sweep,
    before_attempt,
    decide,
    effective_class,
    wants_sweep,
)
from agpt.rundir import CLASSES

DEFAULT_PROGRESS_RE = rundir.PROGRESS_RE


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
        with rundir.open_regular(log) as f:
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


def _hosts(v: Any) -> list[str]:
    """The host names of a record's list (anything else in it is dropped)."""
    return [h for h in v if rundir.valid_host(h)] if isinstance(v, list) else []


def _clean_event(ev: dict[str, Any]) -> dict[str, Any]:
    """An attempt record as decide() reads it: numbers that are numbers, `swapped` a dict (records are data)."""
    out = dict(ev)
    out["attempt"] = rundir.integer(ev.get("attempt")) or 0
    for k in ("first_step", "last_step", "ckpt_step"):
        out[k] = rundir.integer(ev.get(k))
    sw = ev.get("swapped")
    if not isinstance(sw, dict):
        sw = {}
    # Hosts read back pass the host-name rule: a record is data, never the source of a host list.
    out["swapped"] = {
        "out": _hosts(sw.get("out")),
        "in": _hosts(sw.get("in")),
        "blind": bool(sw.get("blind")),
    }
    out["class"] = ev.get("class") if isinstance(ev.get("class"), str) else "crash"
    sig = ev.get("signature")
    out["signature"] = sig[: policy.SIGNATURE_CHARS + 24] if isinstance(sig, str) else None
    out["passed"] = ev.get("passed") if isinstance(ev.get("passed"), str) else ""
    out["held"] = ev.get("held") is True
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
            data = rundir.parse_json_line(
                rundir.read_bytes(path, limit=rundir.RECORD_MAX).decode("utf-8", errors="replace") or "null"
            )
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
        with contextlib.suppress(OSError):
            safewrite.replace(out, json.dumps(data) + "\n")
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
        return tuple(rundir.seconds(x, "FAILOVER_BACKOFF/--backoff") for x in text.replace(",", " ").split())

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
        min_save_s=_opt(
            getattr(args, "min_save_s", None),
            lambda v: rundir.seconds(v, "FAILOVER_MIN_SAVE_S"),
            d.min_save_s,
        ),
        backoff=_opt(args.backoff, backoff, d.backoff),
        shrink=_opt(getattr(args, "shrink", None), _switch("FAILOVER_SHRINK"), d.shrink),
        min_nodes=_opt(getattr(args, "min_nodes", None), str, d.min_nodes),
    )


def _switch(name: str) -> Any:
    def parse(v: str) -> bool:
        if v.strip() not in ("0", "1"):
            raise BadInput(f"{name}: 0 or 1, got {v!r}")
        return v.strip() == "1"

    return parse


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
    ap.add_argument(
        "--min-save-s",
        help=f"FAILOVER_MIN_SAVE_S: the least time left for a save attempt (default {d.min_save_s:g})",
    )
    ap.add_argument("--backoff", help=f"FAILOVER_BACKOFF (default '{' '.join(f'{b:g}' for b in d.backoff)}')")
    sweeplib.add_options(ap)
    ap.add_argument(
        "--shrink", help=f"FAILOVER_SHRINK, 0 or 1 (default {int(d.shrink)}; '': SITE_FAILOVER_SHRINK)"
    )
    ap.add_argument("--min-nodes", help=f"FAILOVER_MIN_NODES: a count or a fraction (default {d.min_nodes})")
    ap.add_argument("--apply", action="store_true", help="do it: swap hosts, append events.jsonl")
    ap.add_argument(
        "--shell",
        action="store_true",
        help="print `ACTION EXIT BACKOFF_S ATTEMPT [save]` instead of JSON (save: a save before a stop)",
    )
    ap.add_argument("--report", action="store_true", help="on a stop, print `agpt failover report` to stderr")
    return ap


def _sweep(
    args: argparse.Namespace, run_dir: Path, att: Attempt, active: list[str], *, now: float,
    deadline: float | None, settings: Settings, prober: sweeplib.Prober | None,
) -> sweeplib.SweepResult:  # fmt: skip
    """The health sweep on the active hosts, its settings from the command line, its output to JOBID.N.sweep.log."""
    return sweeplib.for_attempt(
        run_dir / rundir.ATTEMPTS / f"{args.jobid}.{att.attempt}.sweep.log",
        active,
        sweeplib.settings_from(args, run_dir),
        ident=f"{args.jobid}.{att.attempt}",
        time_left=None if deadline is None else deadline - now,
        min_attempt_s=settings.min_attempt_s,
        prober=prober,
    )


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


# The trainer asked to be resubmitted, said by the log when the launcher's own code no longer says it: every rank
# of agpt train exits 75 together after its agreed stop (the deadline, SIGUSR1, a straggler swap), and srun's
# --kill-on-bad-exit ends the ranks still exiting when the first 75 arrives, so srun returns their 143.  Two
# lines say what the 143 hides: the trainer's own stop line (agpt.rundir.STOP_LINE) and srun's exit notice of a task
# that exited 75 (the srun.task_exit_code pattern's format).
_STOP_RE = (
    re.escape(rundir.STOP_LINE)
    .replace(r"\{step\}", r"\d+")
    .replace(r"\{reason\}", re.escape(rundir.RESUBMIT_REASON))
)
ASKED_RESUBMIT = re.compile(
    rf"^(?:\d+: )?{_STOP_RE}|^srun: error: \S+: tasks? [\d,-]+: Exited with exit code 75\s*$".encode(),
    re.M,
)
ASKED_TAIL_BYTES = 1 << 16  # the stop is at the end of the log


def asked_resubmit(log: Path | None) -> bool:
    """Whether the attempt's log (its tail) shows the trainer's own exit 75 (ASKED_RESUBMIT)."""
    if log is None:
        return False
    try:
        with rundir.open_regular(log) as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - ASKED_TAIL_BYTES))
            return ASKED_RESUBMIT.search(fh.read()) is not None
    except OSError:
        return False


# of the log's head: the line comes before the first step, after the start-up's lines
LOCAL_TIER_LINES = 100_000


def local_tier_on(log: Path | None) -> bool:
    """Whether the attempt's log shows the trainer's local checkpoint tier on (rank 0's `rundir.LOCAL_TIER_ON`
    line, printed once before its first step): read from the head up to that line or the first progress line."""
    if log is None:
        return False
    on = rundir.LOCAL_TIER_ON.encode()
    step = re.compile(rundir.PROGRESS_RE.encode())
    try:
        with rundir.open_regular(log) as fh:
            for _ in range(LOCAL_TIER_LINES):
                line = fh.readline(1 << 16)
                if not line or step.search(line):
                    return False
                if on in line:
                    return True
    except OSError:
        pass
    return False


def _held(att: Attempt, log: Path | None, history: Sequence[dict[str, Any]]) -> bool:
    """`Attempt.held`: the job logged a step past its newest global checkpoint (in this attempt or an earlier one),
    and the local tier was on (this attempt's log says so, or an earlier attempt was held: one that failed before
    the trainer started logs nothing of it), so node memory may hold that step."""
    steps = [s for s in (att.last_step, *(e.get("last_step") for e in history)) if isinstance(s, int)]
    if not steps or (att.ckpt_step is not None and max(steps) <= att.ckpt_step):
        return False
    return any(e.get("held") for e in history) or local_tier_on(log)


def _rc(text: str | None) -> int:
    if text is None:
        raise BadInput("failover plan: --rc is required after an attempt (or pass --before)")
    rc = rundir.whole(text, "--rc", minimum=-255, maximum=255)
    return 128 - rc if rc < 0 else rc


def run(args: argparse.Namespace, extra: Sequence[str] = (), prober: sweeplib.Prober | None = None) -> Plan:
    """`agpt failover plan` on a run directory: --before the first attempt, else after one (classified here
    unless --classification names the classifier's JSON); with --apply the swaps and events are written.
    `prober`: the health sweep's stand-in (the simulator's); None runs the real one when the attempt needs it."""
    settings = _settings(args)
    run_dir = Path(args.run_dir)
    now = time.time() if args.now is None else numeric.number(args.now, "--now", lo=0, hi=numeric.MAX_EPOCH)
    deadline = rundir.epoch(args.deadline, "--deadline")
    events_path = run_dir / rundir.EVENTS
    if args.apply:  # a change the last plan recorded but did not finish is finished first (or dropped)
        hostlib.settle_locked(run_dir)
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

    att, record = _ended_attempt(
        args, run_dir, now=now, deadline=deadline, extra=extra, hosts=[*active, *spare]
    )
    att.held = _held(att, Path(args.log) if args.log else None, history)
    waited = 0.0
    if wants_sweep(att, active=active, history=history, settings=settings):
        found = _sweep(
            args, run_dir, att, active, now=now, deadline=deadline, settings=settings, prober=prober
        )
        now += found.cost_s
        waited = found.cost_s
        att = apply_sweep(att, found, active=active)
        record["sweep"] = found.as_event()
    plan = decide(att, active=active, spare=spare, history=history, settings=settings, now=now,
                  deadline=deadline, layout=_layout(run_dir) if settings.shrink else None, waited_s=waited)  # fmt: skip
    if args.apply:
        _apply(run_dir, args.jobid, att, plan, record=record, active=active, now=now)
    return plan


def _apply(
    run_dir: Path, jobid: str, att: Attempt, plan: Plan, *, record: dict[str, Any], active: Sequence[str],
    now: float,
) -> None:  # fmt: skip
    """Record, then change (docs/trust.md): under hosts/.lock, the change is worked out, journalled
    (hosts/.pending), recorded (the attempt's events in one append), made, and the journal removed.  Cut short
    at any step, the next plan (or `failover hosts`) completes a recorded change and drops an unrecorded one."""
    with rundir.locked(run_dir / rundir.HOSTS_LOCK):
        change = _change(run_dir, jobid, att, plan, now=now)
        swapped: dict[str, Any] = {"out": [], "in": [], "blind": plan.blind, "returned": []}
        r = change.result
        if plan.shrink is not None:
            swapped.update({"out": r.swap_out, "in": r.swap_in, "to_spare": r.returned})
        elif plan.swap_out:
            swapped.update({"out": r.swap_out, "in": r.swap_in, "returned": r.returned})
        evs = [_attempt_event(jobid, att, record, swapped, plan, active)]
        if plan.shrink is not None:
            evs.append(_shrink_event(jobid, att, plan, now))
        if plan.action == "stop":
            evs.append(_stop_event(jobid, att.attempt, plan, now))
        changes = change.active is not None or change.spare is not None or bool(change.bad)
        if changes:
            hostlib.journal(run_dir, change, jobid=jobid, attempt=att.attempt)
        try:
            rundir.append_line(run_dir / rundir.EVENTS, "".join(rundir.jsonl_line(e) for e in evs))
        except BadInput:
            if changes:  # nothing recorded, so nothing changes (a journal left behind is dropped next time)
                with contextlib.suppress(OSError):
                    hostlib.unjournal(run_dir)
            raise
        if not changes:
            return
        try:
            hostlib.commit(run_dir, change)
            hostlib.unjournal(run_dir)
        except BadInput as exc:
            raise BadInput(
                f"{exc}; attempt {jobid}.{att.attempt} is recorded in {rundir.EVENTS} and the next "
                "`agpt failover plan` completes its host change"
            ) from None


def _layout(run_dir: Path) -> shrinklib.Layout | str:
    """The job's layout.json for a shrink, or why there is none."""
    try:
        return shrinklib.read_layout(run_dir)
    except BadInput as e:
        return str(e)


def _shrink_event(jobid: str, att: Attempt, plan: Plan, now: float) -> dict[str, Any]:
    """The `shrink` line of events.jsonl (docs/contract.md): the node count before and after, and its cost."""
    return {"event": "shrink", "jobid": jobid, "attempt": att.attempt, "time": round(now, 3), **(plan.shrink or {}),
            "out": plan.swap_out, "in": plan.swap_in, "reason": plan.reason}  # fmt: skip


def _ended_attempt(
    args: argparse.Namespace, run_dir: Path, *, now: float, deadline: float | None, extra: Sequence[str],
    hosts: Sequence[str],
) -> tuple[Attempt, dict[str, Any]]:  # fmt: skip
    """The attempt that just ended, from its classification and its log (its signature blanks `hosts`); and what
    its event records beside (started, ended, the log's path in the run directory)."""
    rc = _rc(args.rc)
    started = rundir.epoch(args.started, "--started")
    ended = rundir.epoch(args.ended, "--ended")
    log = Path(args.log) if args.log else None
    # 143/137: the launcher's, over the trainer's 75 (srun's --kill-on-bad-exit ends the ranks still exiting when
    # the first 75 arrives): classified as the 75 it was, so a straggler swap the trainer stopped for is read as one
    if rc in (128 + 15, 128 + 9) and asked_resubmit(log):
        rc = EXIT_RESUBMIT
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
    evidence = [str(x) for x in (c.get("evidence") or [])][:5]
    att = Attempt(
        attempt=args.attempt,
        rc=rc,
        cls=effective_class(str(c.get("class")), rc),
        bad_hosts=[h for h in c.get("bad_hosts") or [] if isinstance(h, str)],
        evidence=evidence,
        suspects=_suspects(c),
        first_step=first,
        last_step=last,
        ckpt_step=ckpt,
    )
    att.signature = policy.signature(policy.failing_line(evidence), hosts=hosts, where=att.where)
    record = {
        "started": started,
        "ended": ended if ended is not None else round(now, 3),
        "log": str(log.relative_to(run_dir)) if log and _under(log, run_dir) else args.log,
        **(rundir.times_of(log) if log else {}),  # the watch's last progress line and first sign of the end
    }
    return att, record


def _change(run_dir: Path, jobid: str, att: Attempt, plan: Plan, *, now: float) -> hostlib.Change:
    """What the plan does to the host lists (the swap or shrink, the hosts proven bad), worked out with the lock
    held and nothing written yet."""
    evidence = "; ".join(att.evidence[:2]) or att.cls
    change = hostlib.Change()
    if plan.action == "relaunch" and plan.shrink is not None:
        change = hostlib.shrink_change(run_dir, plan.swap_out, plan.shrink["hosts"], jobid=jobid,
                                       evidence=evidence, now=now)  # fmt: skip
    elif plan.action == "relaunch" and plan.swap_out:
        change = hostlib.swap_change(run_dir, plan.swap_out, swap_in=plan.swap_in, returned=plan.returned,
                                     blind=plan.blind, jobid=jobid, evidence=evidence, now=now)  # fmt: skip
    if plan.mark_bad:
        bad = hostlib.RunHosts(run_dir=run_dir).path("bad")
        ev = evidence or "named"
        change.bad += hostlib.bad_lines(bad, plan.mark_bad, jobid=jobid, evidence=ev, now=now)
    return change


def _attempt_event(
    jobid: str,
    att: Attempt,
    record: dict[str, Any],
    swapped: dict[str, Any],
    plan: Plan,
    active: Sequence[str],
) -> dict[str, Any]:
    """The attempt's line in events.jsonl (docs/contract.md)."""
    return {
        "event": "attempt",
        "jobid": jobid,
        "attempt": att.attempt,
        "rc": att.rc,
        "class": att.cls,
        "bad_hosts": att.bad_hosts,
        "evidence": att.evidence,
        "swapped": swapped,
        "first_step": att.first_step,
        "last_step": att.last_step,
        "ckpt_step": att.ckpt_step,
        "started": record["started"],
        "last_progress": record.get("last_progress"),
        "detected": record.get("detected"),
        "ended": record["ended"],
        "hosts": list(active),
        "log": record["log"],
        "action": plan.action,
        "backoff_s": plan.backoff_s,
        "reason": plan.reason,
        "signature": att.signature,
        "passed": att.passed,
        "held": att.held,
        **({"then": plan.then} if plan.then is not None else {}),
        **({"sweep": record["sweep"]} if "sweep" in record else {}),
    }


def _summary(args: argparse.Namespace, plan: Plan) -> str:
    """One line for the batch log: what ended, what happens next, why."""
    head = f"attempt {args.attempt}" + (f" ended rc {args.rc}" if args.rc is not None else "")
    if args.before and plan.action == "stop":
        head = f"not starting attempt {args.attempt}"
    if plan.action == "stop":
        return f"{head}: stop, {plan.verdict} (exit {plan.exit}): {plan.reason}"
    swap = ""
    if plan.shrink is not None:
        swap = f"; out {','.join(plan.swap_out)}" + (f", in {','.join(plan.swap_in)}" if plan.swap_in else "") + (
            f", back to the spares {','.join(plan.to_spare)}" if plan.to_spare else "")  # fmt: skip
    elif plan.swap_out:
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
            + (" save" if plan.then is not None else "")
        )
    else:
        print(json.dumps(plan.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
