"""`agpt failover classify`: what killed one attempt, and which hosts (if any) are proven guilty.

Evidence first, exit codes last.  The failover tool we replace trusted exit codes: it called every rc 143 a
walltime kill, skipped the log when its watchdog fired, and so made 123 blind swaps in 132.  Here:

- walltime is decided by the clock only (`--deadline`, minus a margin), never by a signal number;
- the log is read whatever the exit code (a watchdog kill included): a host named by a node pattern beats a guess;
- the innocent cascade (ranks SIGTERMed or aborted after the first death) is never evidence;
- a host is reported only in the hostfile's spelling, and only when it is one of the job's hosts;
- the log is streamed in bounded memory (gigabytes, any bytes), and a scraper bug degrades to "no evidence"
  with a note instead of killing the recovery loop.

The pieces, each its own module, in the order a log goes through them:
  agpt.failover.scan         reads the log in bounded memory; a template prefilter hands on only candidate lines
  agpt.failover.labels       takes the launcher labels off a line: the rank and host that printed it
  agpt.failover.evidence     one line's strongest match, kept in bounded stores (node, crash, app, peers, ranks)
  agpt.failover.attribution  the rules from evidence to hosts, the same for every launcher's labels
  agpt.failover.decide       the decision order, and the verdict (Classification)
  agpt.heartbeat.reader      (--heartbeat-dir) a hang that names no host, attributed from the node records
This module is the command: its options, their environment defaults, and the fallback when scraping fails.

Standard library only: it runs with a plain `python3` when the training environment is what broke.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from agpt import numeric
from agpt.errors import BadInput
from agpt.failover import attribution, evidence, scan
from agpt.failover import patterns as pat
from agpt.failover.decide import Classification, decide
from agpt.failover.hostmatch import HostMatcher, read_hostfile, read_ipmap
from agpt.heartbeat import reader as heartbeats
from agpt.rundir import CLASSES as CLASSES
from agpt.rundir import PROGRESS_RE as DEFAULT_PROGRESS_RE
from agpt.rundir import WALLTIME_MARGIN_S as DEFAULT_MARGIN_S

DEFAULT_MAX_MB = 256  # FAILOVER_CLASSIFY_MAX_MB: beyond it, the head and the tail of the log are read
MAX_MB = 1 << 20  # ... at most a TiB of it


def compile_progress(source: str, where: str) -> re.Pattern[bytes]:
    try:
        return re.compile(source.encode("utf-8"), re.MULTILINE)
    except re.error as e:
        raise BadInput(f"{where}: bad progress regex '{source}': {e}") from None


def classify(
    log_path: str | Path,
    rc: int,
    hosts: list[str],
    ipmap: list[tuple[str, str]] | None = None,
    deadline: float | None = None,
    now: float | None = None,
    pattern_sets: list[str] | None = None,
    *,
    margin_s: float = DEFAULT_MARGIN_S,
    progress_re: str | None = None,
    max_mb: float | None = None,
) -> Classification:
    """Classify one attempt.  Raises BadInput for a missing log or unknown set; never for what the log holds."""
    log = Path(log_path)
    if not log.is_file():
        raise BadInput(f"log not found: {log}")
    sets = pattern_sets if pattern_sets is not None else pat.select_sets(None)
    if not progress_re:  # unset or empty: an empty regex would match everywhere
        progress = compile_progress(
            os.environ.get("FAILOVER_PROGRESS_RE") or DEFAULT_PROGRESS_RE, "FAILOVER_PROGRESS_RE"
        )
    else:
        progress = compile_progress(progress_re, "--progress-re")
    if max_mb is None:
        max_mb = numeric.env_number(os.environ, "FAILOVER_CLASSIFY_MAX_MB", DEFAULT_MAX_MB, lo=0, hi=MAX_MB)
    max_mb = numeric.number(max_mb, "FAILOVER_CLASSIFY_MAX_MB/--max-mb", lo=0, hi=MAX_MB)
    max_bytes = int(max_mb * scan.MIB)
    matcher = HostMatcher(hosts=list(hosts), ipmap=list(ipmap or []))
    now = time.time() if now is None else now
    notes: list[str] = []
    try:
        ev = _read(log, max_bytes, pat.load(sets), matcher, progress)
    except Exception as e:  # a scraper bug must not kill the recovery loop
        notes.append(
            f"scraper error ({type(e).__name__}: {e}): no evidence used, classified by exit code and clock"
        )
        try:  # progress still counts: the loop needs it to tell a stuck run from a moving one
            ev = _read(log, max_bytes, [], matcher, progress)
        except Exception as e2:
            notes.append(f"progress scan failed too ({type(e2).__name__}: {e2})")
            ev = evidence.Evidence([], matcher)
    result = decide(rc, ev, job=len(matcher.hosts), deadline=deadline, now=now, margin_s=margin_s)
    result.notes = notes + ev.notes + result.notes
    result.pattern_sets = list(sets)
    return result


def _read(
    log: Path, max_bytes: int, patterns: list[pat.Pattern], matcher: HostMatcher, progress: re.Pattern[bytes]
) -> evidence.Evidence:
    """The log's evidence, with node evidence that named a rank placed on the rank's host."""
    ev = evidence.Evidence(patterns, matcher)
    scanner = scan.Scanner(ev, progress)
    scanner.scan_file(log, max_bytes)
    missing = attribution.unplaced_ranks(ev)
    if missing:
        scanner.find_ranks(missing)
    attribution.place_node_ranks(ev)
    attribution.place_before_first_exit(ev)
    return ev


def apply_heartbeats(
    result: Classification, hb_dir: str | Path, hosts: Sequence[str], attempt: str | None, rc: int
) -> None:
    """Refine a classification with the heartbeats' evidence (agpt.heartbeat.reader), in place.

    A hang (the watchdog's 124 or a collective timeout) that names no host becomes `node` with the hosts the
    heartbeats show stopped or behind; an rc-75 stop the straggler monitor asked for becomes `node` naming the
    straggler.  Anything else is left alone.
    """
    if rc == 75:
        req = heartbeats.read_swap(hb_dir, attempt)
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
        found = heartbeats.attribute(hb_dir, hosts, attempt)
    except Exception as e:
        result.notes.append(f"heartbeat: reading failed ({type(e).__name__}: {e}): blind rotation")
        return
    result.notes.extend(found.notes)
    if found.bad_hosts:
        result.cls = "node"
        result.bad_hosts = found.bad_hosts
        result.evidence = found.evidence + list(result.evidence)
        result.notes.append(f"heartbeat: the hang is attributed to {', '.join(found.bad_hosts)}")


# --- command line --------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadInput(message)


def _parser() -> _Parser:
    p = _Parser(
        prog="agpt failover classify",
        description="Classify one attempt's log: prints one JSON object "
        '{"class", "bad_hosts", "evidence", "last_step", ...}. Exit 0 whatever the class; 2 on bad input.',
    )
    p.add_argument("log", metavar="LOG", help="the attempt's full output")
    p.add_argument("--rc", required=True, help="the attempt's exit status (128+N: signal N; 124: watchdog)")
    p.add_argument("--hostfile", required=True, help="the attempt's hosts, one per line (hosts/active)")
    p.add_argument("--ipmap", help="`IP HOST` lines (hosts/ip) so an address in the log names a host")
    p.add_argument("--deadline", help="the job's end, epoch seconds: a kill within the margin is walltime")
    p.add_argument("--now", help="the time of the kill, epoch seconds (default: now)")
    p.add_argument(
        "--walltime-margin",
        help=f"seconds before --deadline that count as walltime (FAILOVER_WALLTIME_MARGIN, default {DEFAULT_MARGIN_S:.0f})",
    )
    p.add_argument(
        "--patterns",
        help="pattern sets, comma or space separated (FAILOVER_PATTERN_SETS; default all: "
        + ",".join(pat.DEFAULT_SETS)
        + ")",
    )
    p.add_argument(
        "--progress-re", help=f"progress regex (FAILOVER_PROGRESS_RE, default {DEFAULT_PROGRESS_RE})"
    )
    p.add_argument(
        "--max-mb",
        help=f"read at most this many MiB of a bigger log, its head and its tail (FAILOVER_CLASSIFY_MAX_MB, "
        f"default {DEFAULT_MAX_MB}; 0: all)",
    )
    p.add_argument(
        "--heartbeat-dir",
        help="RUN_DIR/heartbeat: a hang that names no host is attributed from the node records (agpt.heartbeat.reader)",
    )
    p.add_argument(
        "--attempt-id", help="the attempt the heartbeats must come from (default: LOG's name, JOBID.N)"
    )
    p.add_argument("--pretty", action="store_true", help="indent the JSON")
    return p


def _deadline(text: str | None) -> float | None:
    """--deadline: '' or 0 (lib/failover.sh passes an unknown one so) is none; else an epoch time."""
    if text is None or text.strip() in ("", "0"):
        return None
    return numeric.epoch(text, "--deadline")


def parse_rc(text: str) -> int:
    """An exit status as the shell reports it (0-255); a negative one (Python's -N for signal N) is 128+N."""
    try:
        rc = int(text.strip())
    except ValueError:
        raise BadInput(f"--rc: not an exit status: '{text}'") from None
    if rc < 0:
        rc = 128 - rc
    if rc > 255:
        raise BadInput(f"--rc: exit status out of range 0-255: {text}")
    return rc


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        rc = parse_rc(args.rc)
        deadline = _deadline(args.deadline)
        now = None if args.now is None else numeric.number(args.now, "--now", lo=0, hi=numeric.MAX_EPOCH)
        margin_text = args.walltime_margin
        margin_flag = "--walltime-margin"
        if margin_text is None and os.environ.get("FAILOVER_WALLTIME_MARGIN"):
            margin_text, margin_flag = os.environ["FAILOVER_WALLTIME_MARGIN"], "FAILOVER_WALLTIME_MARGIN"
        margin = None if margin_text is None else numeric.seconds(margin_text, margin_flag)
        if not Path(args.log).is_file():
            raise BadInput(f"log not found: {args.log}")
        hosts = read_hostfile(args.hostfile)
        ipmap: list[tuple[str, str]] = []
        ipmap_note = ""
        if args.ipmap:
            try:
                ipmap = read_ipmap(args.ipmap)
            except BadInput as e:  # a missing address map costs the addresses, not the whole classification
                ipmap_note = f"--ipmap: {e}: addresses in the log name no host"
        sets = pat.select_sets(args.patterns)  # None: FAILOVER_PATTERN_SETS, else every set
        result = classify(
            args.log,
            rc,
            hosts,
            ipmap,
            deadline,
            now,
            sets,
            margin_s=DEFAULT_MARGIN_S if margin is None else margin,
            progress_re=args.progress_re,
            max_mb=None if args.max_mb is None else numeric.number(args.max_mb, "--max-mb", lo=0, hi=MAX_MB),
        )
        if ipmap_note:
            result.notes.insert(0, ipmap_note)
        if args.heartbeat_dir:
            attempt = args.attempt_id or Path(args.log).name.removesuffix(".log")
            apply_heartbeats(result, args.heartbeat_dir, hosts, attempt, rc)
    except BadInput as e:
        sys.stderr.write(f"agpt failover classify: error: {e}\n")
        return 2
    sys.stdout.write(json.dumps(result.to_json(), indent=2 if args.pretty else None) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
