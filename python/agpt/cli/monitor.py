"""`agpt monitor RUN_DIR`: a live view of a run in the terminal (rich), or one frame with --once."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agpt.cli import params


@click.command(name="monitor")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--once", is_flag=True, help="Print one frame and exit (for scripts and job logs).")
@click.option(
    "--interval",
    type=params.Number(lo=0.2, hi=3600, unit="seconds"),
    default=2.0,
    show_default=True,
    help="Seconds between frames.",
)
def cli(run_dir: Path, once: bool, interval: float) -> None:
    """Watch RUN_DIR: step and tokens against the target with an ETA, tokens/s and MFU, the current job
    and attempt, the last failure with its recovery clock, hosts per state and the oldest heartbeats.

    It reads the run directory only (metrics.jsonl, events.jsonl, hosts/, heartbeat/), so it runs on a
    login node beside the job; Ctrl-C stops it.  The recovery lines are those of `agpt failover report`.

    \b
    Examples:
      agpt monitor runs/20b
      agpt monitor runs/20b --once     # one frame, e.g. in a cron job or a job's epilogue
    """
    from agpt.views.monitor import run

    sys.exit(run(run_dir, once=once, interval=interval))
