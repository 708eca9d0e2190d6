"""`agpt chain`: the chain of jobs behind one training run (JOB layer).

lib/chain.sh is the glue a job script runs; the decisions are here, in plain Python, so they are unit-
testable and start in milliseconds with no venv (standard library only).

Subcommands
  status RUN_DIR [--json]   the chain as a table: job, start, end, steps, verdict, next
  step RUN_DIR              the newest complete checkpoint's step (0 when none)
  bad-hosts RUN_DIR         hosts proven bad in hosts/bad (blind evictions excluded), comma separated
  start RUN_DIR --job ID    at job start: should this job submit a successor?  Prints `submit` or
                            `last REASON`; records a predecessor that died without an end record
  eval-mark RUN_DIR --every N
                            hold every N-th new complete checkpoint for an evaluation job; prints the
                            steps newly held (space separated; nothing when none) (agpt.evals.due)
  eval-pending RUN_DIR      the steps held for evaluation, oldest first
  end RUN_DIR --job ID --rc RC ...
                            at job end: verdict and decision; appends one line to chain.jsonl and prints
                            `keep|stop VERDICT REASON EXCLUDE` (EXCLUDE: comma list or -)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agpt import ckptdir, numeric, rundir, shown
from agpt.errors import BadInput
from agpt.evals import due
from agpt.failover import shrink as shrinklib
from agpt.failover.hosts import read_bad

# rc -> (verdict, does the chain go on).  The exit codes of docs/contract.md; anything else is a failure that a
# fresh allocation may fix (a node died, the job was killed), bounded by the no-progress guard.
_GOES_ON = ("resubmit", "idle")
VERDICTS: dict[int, tuple[str, bool]] = {
    code: (verdict, verdict in _GOES_ON)
    for verdict, code in rundir.VERDICT_EXIT.items()
    if verdict != "failed"
}


def verdict_of(rc: int) -> tuple[str, bool]:
    """The verdict name for an exit code and whether the chain should continue after it."""
    if rc in VERDICTS:
        return VERDICTS[rc]
    if rc > 128:
        return (f"signal{rc - 128}", True)
    return ("failed", True)


def latest_step(run_dir: Path) -> int:
    """The step a resume starts from (agpt.ckptdir's rule), 0 when there is no complete checkpoint."""
    return ckptdir.resume_step(run_dir) or 0


def read_chain(run_dir: Path) -> list[dict[str, Any]]:
    """chain.jsonl's records; a torn or unreadable line (a job killed mid-write) is skipped with a note."""
    return rundir.read_jsonl(run_dir / rundir.CHAIN)


def append_record(run_dir: Path, rec: dict[str, Any]) -> None:
    """One line per job: one O_APPEND write on a fresh line (see rundir.append_line)."""
    rundir.append_jsonl(run_dir / rundir.CHAIN, rec)


def proven_bad_hosts(run_dir: Path) -> list[str]:
    """Hosts in hosts/bad with evidence; `blind` evictions (a guess in a rotation) are not excluded."""
    records = read_bad(run_dir / "hosts" / "bad")
    return list(dict.fromkeys(r.host for r in records if r.evidence and not r.blind))


@dataclass(kw_only=True, slots=True)
class Limits:
    """Guard rails: a chain never runs more than max_jobs jobs, nor max_no_progress jobs in a row that
    made no new complete checkpoint (a chain that cannot progress would otherwise burn an allocation)."""

    max_jobs: int = 50
    max_no_progress: int = 2

    def __post_init__(self) -> None:
        if self.max_jobs < 1:
            raise BadInput("CHAIN_MAX_JOBS must be at least 1")
        if self.max_no_progress < 1:
            raise BadInput("CHAIN_MAX_NO_PROGRESS must be at least 1")


def decide_start(records: list[dict[str, Any]], limits: Limits) -> tuple[bool, str]:
    """At job start: submit a successor unless this job is the last the chain may run."""
    index = len(records) + 1
    if index >= limits.max_jobs:
        return (False, f"max_jobs({limits.max_jobs})")
    return (True, "")


def decide_end(
    records: list[dict[str, Any]], rc: int, start_step: int, end_step: int, limits: Limits
) -> tuple[str, bool, str]:
    """At job end: (verdict, keep the successor?, reason when a guard stopped a chain that would go on)."""
    verdict, go_on = verdict_of(rc)
    if not go_on:
        return (verdict, False, verdict)
    streak = 0 if end_step > start_step else 1
    if streak:
        for rec in reversed(records):
            if rec.get("progress"):
                break
            streak += 1
    if streak >= limits.max_no_progress:
        return (verdict, False, f"no_progress({streak})")
    if len(records) + 1 >= limits.max_jobs:
        return (verdict, False, f"max_jobs({limits.max_jobs})")
    return (verdict, True, "")


def _fmt_time(t: Any) -> str:
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return "?"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    except (OverflowError, OSError, ValueError):  # a record's time out of the clock's range
        return "?"


def read_lock(run_dir: Path) -> tuple[str, str]:
    """chain.lock: `SUCCESSOR SUBMITTER EPOCH`, written by lib/chain.sh; ('', '') when absent."""
    try:
        words = (
            rundir.read_bytes(run_dir / rundir.CHAIN_LOCK, limit=rundir.TEXT_MAX)
            .decode("utf-8", errors="replace")
            .split()
        )
    except FileNotFoundError:
        return ("", "")
    except OSError as e:
        raise BadInput(f"{run_dir / rundir.CHAIN_LOCK}: unreadable: {e.strerror or e}") from None
    return (words[0] if words else "", words[1] if len(words) > 1 else "")


def job_nodes(run_dir: Path) -> dict[str, shrinklib.JobNodes]:
    """Each job's node counts and shrinks (agpt.failover.shrink.history of events.jsonl)."""
    return shrinklib.history(rundir.read_jsonl(run_dir / rundir.EVENTS))


def _nodes_text(rec: dict[str, Any], nodes: dict[str, shrinklib.JobNodes]) -> str:
    """`4`, `4->3 (1m35s at 0.75)`: the record's `nodes`, else events.jsonl's; `-` when neither knows."""
    j = nodes.get(str(rec.get("jobid")))
    n = rec.get("nodes") if isinstance(rec.get("nodes"), dict) else j.as_dict() if j else None
    if not n or n.get("start") is None:
        return "-"
    start, end = n.get("start"), n.get("end")
    text = str(start) if end in (None, start) else f"{start}->{end}"
    shrunk = rundir.num(n.get("shrunk_s")) or 0.0
    if shrunk:
        text += f" ({shrunk:.0f} s shrunk, cost {rundir.num(n.get('cost_s')) or 0:.0f} s)"
    return text


def status_rows(run_dir: Path) -> list[list[str]]:
    rows = [["JOB", "START", "END", "STEPS", "NODES", "VERDICT", "NEXT"]]
    nodes = job_nodes(run_dir)
    for r in read_chain(run_dir):
        s0, s1 = r.get("start_step"), r.get("end_step")
        steps = f"{'?' if s0 is None else s0}->{'?' if s1 is None else s1}"
        verdict = str(r.get("verdict", "?"))
        if r.get("reason") and r.get("reason") != verdict:
            verdict += f" ({r['reason']})"
        nxt = str(r.get("next_jobid") or "") or (
            f"cancelled {r['cancelled_jobid']}" if r.get("cancelled_jobid") else "-"
        )
        rows.append(
            [
                str(r.get("jobid", "?")),
                _fmt_time(r.get("started")),
                _fmt_time(r.get("ended")),
                steps,
                _nodes_text(r, nodes),
                verdict,
                nxt,
            ]
        )
    return rows


def cmd_status(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        sys.stderr.write(f"agpt chain: {run_dir}: no such run directory\n")
        return 2
    records = read_chain(run_dir)
    pending, _ = read_lock(run_dir)
    nodes = job_nodes(run_dir)
    if args.json:
        json.dump({"jobs": records, "pending": pending or None, "step": latest_step(run_dir),
                   "nodes": {j: n.as_dict() for j, n in nodes.items()}}, sys.stdout, indent=2)  # fmt: skip
        sys.stdout.write("\n")
        return 0
    rows = [[shown.terminal(cell) for cell in row] for row in status_rows(run_dir)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        sys.stdout.write(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
        )
    last = shown.terminal(records[-1].get("verdict", "?")) if records else "none yet"
    tail = (
        f", successor {pending} pending" if pending and (not records or records[-1].get("next_jobid")) else ""
    )
    shrinks = sum(len(n.shrinks) for n in nodes.values())
    if shrinks:
        tail += (f", {shrinks} shrink(s): {sum(n.shrunk_s for n in nodes.values()):.0f} s on fewer nodes cost "
                 f"{sum(n.cost_s for n in nodes.values()):.0f} s of full-speed training")  # fmt: skip
    sys.stdout.write(
        f"chain: {len(records)} job(s), last verdict {last}, checkpoint step {latest_step(run_dir)}{tail}\n"
    )
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    records = read_chain(run_dir)
    pred = args.predecessor
    if pred and pred != args.job and not any(str(r.get("jobid")) == pred for r in records):
        # The predecessor was killed before chain_end could run (walltime SIGKILL, node crash): say so.
        # Its progress: a newer complete checkpoint than the one the chain had recorded before it.
        before = max((rundir.integer(r.get("end_step")) or 0 for r in records), default=0)
        now = latest_step(run_dir)
        rec = {
            "jobid": pred,
            "index": len(records) + 1,
            "started": None,
            "ended": None,
            "start_step": before,
            "end_step": now,
            "rc": None,
            "verdict": "lost",
            "reason": "no end record: killed before it could write one",
            "progress": now > before,
            "next_jobid": args.job,
        }
        append_record(run_dir, rec)
        records.append(rec)
    submit, reason = decide_start(records, Limits(max_jobs=args.max_jobs, max_no_progress=1))
    print("submit" if submit else f"last {reason}")
    return 0


def cmd_end(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    records = read_chain(run_dir)
    limits = Limits(max_jobs=args.max_jobs, max_no_progress=args.max_no_progress)
    end_step = latest_step(run_dir)
    verdict, keep, reason = decide_end(records, args.rc, args.start_step, end_step, limits)
    exclude = proven_bad_hosts(run_dir) if keep and args.next else []
    rec = {
        "jobid": args.job,
        "index": len(records) + 1,
        "started": args.started,
        "ended": args.ended if args.ended is not None else int(time.time()),
        "start_step": args.start_step,
        "end_step": end_step,
        "rc": args.rc,
        "verdict": verdict,
        "decision": "keep" if keep else "stop",
        "reason": reason,
        "progress": end_step > args.start_step,
        "next_jobid": (args.next or None) if keep else None,
        "cancelled_jobid": None if keep else (args.next or None),
        "excluded": exclude,
        "host": os.uname().nodename,
    }
    nodes = job_nodes(run_dir).get(str(args.job))
    if nodes is not None:  # what the job ran on, and what its shrinks cost (failover.shrink)
        rec["nodes"] = nodes.as_dict()
    append_record(run_dir, rec)
    print(f"{'keep' if keep else 'stop'} {verdict} {reason or '-'} {','.join(exclude) or '-'}")
    return 0


_DEFAULTS = Limits()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise BadInput(message)


def _count(name: str, default: int) -> Any:
    """An argparse type: a whole number; '' (lib/chain.sh passes its settings as given) is the default."""

    def parse(text: str) -> int:
        return default if not text.strip() else rundir.whole(text, name, minimum=-(10**6))

    return parse


def _exit_status(text: str) -> int:
    rc = rundir.whole(text, "--rc", minimum=-255, maximum=255)
    return 128 - rc if rc < 0 else rc


def _epoch(flag: str) -> Any:
    """An argparse type: an epoch time (agpt.numeric), the flag named in a refusal."""
    return lambda text: int(numeric.number(text, flag, lo=0, hi=numeric.MAX_EPOCH, unit="epoch seconds"))


def cmd_eval_mark(args: argparse.Namespace) -> int:
    if args.every < 1:
        raise BadInput(f"--every {args.every}: CHAIN_EVAL_EVERY must be a whole number >= 1")
    print(" ".join(map(str, due.mark(Path(args.run_dir), args.every))))
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="agpt chain", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="SUBCOMMAND")
    p = sub.add_parser("status", help="the chain as a table (job, start, end, steps, verdict, next)")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.set_defaults(fn=cmd_status)
    p = sub.add_parser("step", help="the newest complete checkpoint's step")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.set_defaults(fn=lambda a: print(latest_step(Path(a.run_dir))) or 0)
    p = sub.add_parser("bad-hosts", help="hosts proven bad (not blind), comma separated")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.set_defaults(fn=lambda a: print(",".join(proven_bad_hosts(Path(a.run_dir)))) or 0)
    p = sub.add_parser("eval-mark", help="hold every N-th new complete checkpoint for evaluation")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--every", type=_count("CHAIN_EVAL_EVERY", 0), required=True)
    p.set_defaults(fn=cmd_eval_mark)
    p = sub.add_parser("eval-pending", help="steps held for evaluation")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.set_defaults(fn=lambda a: print(" ".join(map(str, due.pending(Path(a.run_dir))))) or 0)
    p = sub.add_parser("start", help="at job start: submit a successor or not")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--job", required=True)
    p.add_argument("--predecessor", default="", help="the job that submitted this one (from chain.lock)")
    p.add_argument(
        "--max-jobs", type=_count("CHAIN_MAX_JOBS", _DEFAULTS.max_jobs), default=_DEFAULTS.max_jobs
    )
    p.set_defaults(fn=cmd_start)
    p = sub.add_parser("end", help="at job end: record the verdict and decide")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--job", required=True)
    p.add_argument("--rc", type=_exit_status, required=True)
    p.add_argument("--started", type=_epoch("--started"), required=True)
    p.add_argument("--ended", type=_epoch("--ended"))
    p.add_argument("--start-step", type=_count("--start-step", 0), required=True)
    p.add_argument("--next", default="")
    p.add_argument(
        "--max-jobs", type=_count("CHAIN_MAX_JOBS", _DEFAULTS.max_jobs), default=_DEFAULTS.max_jobs
    )
    p.add_argument(
        "--max-no-progress",
        type=_count("CHAIN_MAX_NO_PROGRESS", _DEFAULTS.max_no_progress),
        default=_DEFAULTS.max_no_progress,
    )
    p.set_defaults(fn=cmd_end)
    return ap


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
        rc: int = args.fn(args)
    except BadInput as exc:
        sys.stderr.write(f"agpt chain: {exc}\n")
        return exc.exit_code
    return rc


if __name__ == "__main__":
    sys.exit(main())
