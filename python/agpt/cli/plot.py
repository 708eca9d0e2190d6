"""`agpt plot RUN_DIR`: the loss curve with failures and recoveries marked."""

from __future__ import annotations

from pathlib import Path

import click

from agpt.runplot import plot_run


@click.command(name="plot")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="PNG path (default RUN_DIR/loss.png)")
@click.option("--title", help="plot title")
def cli(run_dir: Path, output: Path | None, title: str | None) -> None:
    """Plot RUN_DIR's loss curve (from attempts/*.log) with each failure and recovery of events.jsonl.

    Example: agpt plot runs/demo -o demo.png
    """
    from agpt import rundir

    if output is not None:
        rundir.refuse_own_file(output, run_dir, "-o")
    out = plot_run(run_dir, output or run_dir / "loss.png", title=title)
    click.echo(str(out))
