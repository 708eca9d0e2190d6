"""`agpt smoke`: parse options, then hand over to agpt.train.smoke."""

from __future__ import annotations

import click

from agpt.cli import params


@click.command(name="smoke")
@click.option(
    "--config",
    default=None,
    type=click.Path(dir_okay=False),
    help="Config (default jobs/configs/smoke.yaml).",
)
@click.option(
    "--steps", type=params.count(1, 10**6), default=50, show_default=True, help="Steps to run and compare."
)
@click.option(
    "--baseline", required=True, type=click.Path(dir_okay=False), help="Baseline file to compare or write."
)
@click.option("--record", is_flag=True, help="Write the baseline instead of comparing.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
def cli(config: str | None, steps: int, baseline: str, record: bool, sets: tuple[str, ...]) -> None:
    """Run a short deterministic training and compare it bit for bit to a baseline.

    Per-step loss, grad-norm and peak memory must equal the baseline exactly; the first differing step
    is printed and the exit code is 1.  --record writes the baseline.  Runs on one process, or under a
    launcher like `agpt train`.
    """
    from agpt.train.entry import run_and_exit
    from agpt.train.smoke import smoke

    run_and_exit(lambda: smoke(config, baseline=baseline, steps=steps, record=record, sets=sets))
