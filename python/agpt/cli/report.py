"""`agpt report RUN_DIR --html OUT`: one self-contained page about a run (plots embedded)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command(name="report")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--html",
    "out",
    type=click.Path(path_type=Path),
    required=True,
    help="Where to write the page (one file).",
)
def cli(run_dir: Path, out: Path) -> None:
    """Write one HTML page about RUN_DIR that opens anywhere, offline: the timeline of jobs and attempts,
    every failure with its evidence, the loss and throughput curves with the failures marked, and the
    goodput breakdown (the figures of `agpt failover report`).  The plots are embedded in the page.

    \b
    Example:
      agpt report runs/20b --html 20b.html
    """
    from agpt.views.html import write

    click.echo(str(write(run_dir, out)))
