"""`agpt watch [OPTIONS] -- CMD [ARGS...]`: the command line (argparse: standard library only).

Every bad flag is one line naming it and exit 2, before CMD starts.
"""

from __future__ import annotations

import argparse
import sys

from agpt import numeric
from agpt.errors import EXIT_USAGE, BadInput
from agpt.watch.attempt import DRAIN_S
from agpt.watch.run import run_settings
from agpt.watch.settings import (
    DEFAULT_BACKOFF,
    DEFAULT_EVIDENCE_GRACE,
    DEFAULT_GRACE,
    DEFAULT_TIMEOUT,
    WatchSettings,
)

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any, NoReturn

DESCRIPTION = """\
Run CMD and kill it when its output goes idle: no byte on its stdout or stderr (any process it started counts,
a partial line or a lone \\r counts) for --timeout seconds.  Then SIGTERM goes to CMD's whole process group,
SIGKILL follows after --grace seconds, and agpt watch exits 124 with one line on stderr saying why.

Until the first output line that matches the progress regex ($FAILOVER_PROGRESS_RE, default
'\\bstep[=:] ?[0-9]+'), --startup-timeout applies instead: model build, compile and checkpoint load can take
many minutes before the first step.  With --progress-file, idle also means that file's mtime has not advanced
(a job whose ranks still print warnings but make no step progress is caught too).

Output passes through byte for byte, stdout to stdout and stderr to stderr.  SIGTERM, SIGINT, SIGHUP, SIGUSR1
and SIGUSR2 sent to agpt watch are forwarded to CMD's process group; after SIGTERM or SIGINT it waits --grace
seconds, SIGKILLs the group and exits 128+N.  When CMD exits, whatever it left behind in its group gets
{drain:g} s to close the pipes, then SIGTERM (and SIGKILL after --grace): a rank that outlives its launcher
would hold the node.
"""

EPILOG = """\
exit status:
  CMD's own; 128+N when a signal N killed it or was sent to agpt watch; 124 when it went idle;
  127 when CMD does not exist, 126 when it cannot run; 2 on a bad flag (one line naming it).
  With --retries, the status of the last attempt; each attempt sees AGPT_WATCH_ATTEMPT=N.

examples:
  # kill the launcher after 10 idle minutes, allowing 30 minutes before the first step
  agpt watch --timeout 600 --startup-timeout 1800 -- mpiexec -n 8 python -m agpt train cfg.yaml

  # also idle when the trainer's progress file stops advancing; keep a copy of both streams
  agpt watch --timeout 600 --progress-file "$AGPT_RUN_DIR/progress" --log attempt.log -- srun ...

  # a flaky copy: up to 3 retries after 5, 10 and 20 s; any failure, 124 included, is retried
  agpt watch --timeout 120 --retries 3 --backoff 5,10,20 -- rsync -a src/ dst/

  # when the training environment itself is broken (standard library only)
  PYTHONPATH=python python3 -m agpt.watch --timeout 60 -- ./job.sh
"""


def _seconds(flag: str) -> Any:
    return lambda text: numeric.seconds(text, flag)


def _schedule(text: str) -> tuple[float, ...]:
    return tuple(numeric.seconds(p, "--backoff") for p in text.split(","))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line naming the flag, exit 2 (argparse would print the usage block too)."""
        self.exit(EXIT_USAGE, f"agpt watch: error: {message}\n")


def _parser() -> _Parser:
    p = _Parser(
        prog="agpt watch",
        usage="agpt watch [OPTIONS] -- CMD [ARGS...]",
        description=DESCRIPTION.format(drain=DRAIN_S),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    seconds: list[tuple[str, float | None, str]] = [
        (
            "--timeout",
            DEFAULT_TIMEOUT,
            f"idle seconds before the kill; 0 disables (default {DEFAULT_TIMEOUT:g})",
        ),
        (
            "--startup-timeout",
            None,
            "idle limit until the first progress line; 0 disables (default --timeout)",
        ),
        ("--grace", DEFAULT_GRACE, f"seconds between SIGTERM and SIGKILL (default {DEFAULT_GRACE:g})"),
        (
            "--evidence-grace",
            DEFAULT_EVIDENCE_GRACE,
            f"seconds between SIGTERM and SIGKILL after evidence (default {DEFAULT_EVIDENCE_GRACE:g})",
        ),
    ]
    for flag, default, text in seconds:
        p.add_argument(flag, type=_seconds(flag), default=default, metavar="S", help=text)
    p.add_argument(
        "--retries",
        type=numeric.flag("--retries", lo=0, hi=1000, integer=True),
        default=0,
        metavar="N",
        help="re-run up to N times on a non-zero exit, 124 included (default 0)",
    )
    p.add_argument(
        "--backoff",
        type=_schedule,
        default=DEFAULT_BACKOFF,
        metavar="S,S,...",
        help="seconds to wait before each retry, the last repeated (default 5,10,20,40,60)",
    )
    p.add_argument(
        "--log", metavar="FILE", help="also append both streams, interleaved as they came, to FILE"
    )
    p.add_argument(
        "--times",
        metavar="FILE",
        help="write the attempt's end as JSON epochs: last_progress, detected (the first output after it, the "
        "idle limit, a signal or the exit) and ended (torn down); the recovery clock's first stages",
    )
    p.add_argument(
        "--progress-file",
        metavar="FILE",
        help="idle also when FILE's mtime has not advanced for the idle limit",
    )
    p.add_argument(
        "--kill-on",
        metavar="FILE",
        help="end CMD at once (--evidence-grace, not --grace) on an output line matching one of FILE's patterns, "
        "a JSON list of {id, regex, flags, needles} (`agpt failover patterns --ends`: a launcher's notice of a "
        "node failure or a task's death)",
    )
    p.add_argument(
        "--detach-teardown",
        action="store_true",
        help="after evidence, exit at once and leave the group's SIGKILL (after --evidence-grace) to a reaper, so "
        "the caller plans the relaunch while the teardown runs",
    )
    p.add_argument(
        "--heartbeat-dir",
        metavar="DIR",
        help="end CMD at once when DIR's heartbeat records show a host stopped (two looks one publish interval "
        "apart, after two intervals of silence); exit 124 as for idle ($AGPT_ATTEMPT_ID, $FAILOVER_HOSTS)",
    )
    p.add_argument(
        "--progress-re",
        metavar="REGEX",
        default=None,
        help="a progress line (default $FAILOVER_PROGRESS_RE, else '\\bstep[=:] ?[0-9]+')",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    cmd: list[str] | None = None
    if "--" in args:
        cut = args.index("--")
        args, cmd = args[:cut], args[cut + 1 :]
    parser = _parser()
    try:
        try:
            ns, extra = parser.parse_known_args(args)
        except BadInput as e:
            parser.error(str(e))
        if extra:
            parser.error(f"unexpected {extra[0]!r}: put the command after '--': agpt watch [OPTIONS] -- CMD")
        if cmd is None:
            parser.error("missing '--' and the command: agpt watch [OPTIONS] -- CMD [ARGS...]")
        if not cmd:
            parser.error("no command after '--': agpt watch [OPTIONS] -- CMD [ARGS...]")
    except SystemExit as e:  # --help, or a usage error already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    try:
        options = vars(ns)
        log, times = (
            options.pop("log"),
            options.pop("times"),
        )  # every other option is a setting of the same name
        settings = WatchSettings(**options)
        return run_settings(cmd, settings, log=log, times=times).rc
    except BadInput as e:
        sys.stderr.write(f"agpt watch: error: {e}\n")
        return EXIT_USAGE
