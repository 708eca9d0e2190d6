"""`agpt failover settings [FLAGS]`: every setting the failover loop reads late, checked once before the first
attempt (lib/failover.sh `_failover_check_settings`), by the parsers that read them later.

A bad health-sweep setting, walltime margin, GPUs per node, straggler policy, shrink floor or eval poll used to
be found only after the first failure ("gave no decision": the attempt never recorded, its evidence lost).  Here
each is parsed as its reader parses it (agpt.failover.sweep.settings_from, agpt.heartbeat.straggler.mode,
agpt.failover.shrink.min_nodes, agpt.numeric): exit 0, or one line naming the setting and exit 2.  An empty
value is unset (the reader's default).  Standard library only (the recovery path).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agpt import numeric
from agpt.errors import EXIT_OK, BadInput
from agpt.failover import shrink, sweep
from agpt.heartbeat import straggler


def check(args: argparse.Namespace) -> None:
    """BadInput naming the first setting of ARGS that its reader would refuse."""
    run_dir = Path(os.environ.get("AGPT_RUN_DIR") or ".")
    sweep.settings_from(
        args, run_dir
    )  # FAILOVER_SWEEP*, SITE_SWEEP*, SITE_GPUS_PER_NODE, FAILOVER_SWEEP_LAUNCH
    if args.sweep_program.strip():
        sweep.words(args.sweep_program, "AGPT_SWEEP_PROGRAM")
    if args.walltime_margin.strip():
        numeric.seconds(args.walltime_margin, "FAILOVER_WALLTIME_MARGIN")
    straggler.mode(args.straggler)
    if args.min_nodes.strip():
        shrink.min_nodes(args.min_nodes, 1)
    if args.eval_poll.strip():
        numeric.number(args.eval_poll, "CHAIN_EVAL_POLL_S", lo=0.1, hi=numeric.MAX_SECONDS)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="agpt failover settings", description=__doc__.split("\n\n")[0])
    sweep.add_options(ap)
    ap.add_argument("--sweep-program", default="", help="AGPT_SWEEP_PROGRAM: the probe's words")
    ap.add_argument("--walltime-margin", default="", help="FAILOVER_WALLTIME_MARGIN: seconds")
    ap.add_argument("--straggler", default="", help=f"FAILOVER_STRAGGLER: {' | '.join(straggler.MODES)}")
    ap.add_argument("--min-nodes", default="", help="FAILOVER_MIN_NODES: a count or a fraction")
    ap.add_argument(
        "--eval-poll", default="", help="CHAIN_EVAL_POLL_S: seconds between the eval watcher's looks"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        check(args)
    except BadInput as e:
        sys.stderr.write(f"agpt: error: {e}\n")
        return e.exit_code
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
