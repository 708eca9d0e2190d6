"""`agpt lr-find`: parse options, then hand over to agpt.train.lrfind."""

from __future__ import annotations

import click

from agpt.cli import params


@click.command(name="lr-find")
@click.option("--config", required=True, type=click.Path(dir_okay=False), help="Run config YAML.")
@click.option(
    "--steps", type=params.count(2, 10**6), default=100, show_default=True, help="Steps in the sweep."
)
@click.option(
    "--lr-min",
    type=params.Number(lo=1e-30, hi=1e6),
    default=1e-6,
    show_default=True,
    help="First learning rate.",
)
@click.option(
    "--lr-max",
    type=params.Number(lo=1e-30, hi=1e6),
    default=1.0,
    show_default=True,
    help="Last learning rate.",
)
@click.option("--out", default=None, help="PNG path (default RUN_DIR/lr_find.png or ./lr_find.png).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
def cli(
    config: str, steps: int, lr_min: float, lr_max: float, out: str | None, sets: tuple[str, ...]
) -> None:
    """Sweep the learning rate exponentially over a short run and plot loss vs LR.

    Prints the steepest-descent LR and a tenth of the blow-up LR, and writes a PNG (plus a JSON of the
    sweep beside it).  Launch like `agpt train` to sweep at the real scale.
    """
    from agpt.train.entry import run_and_exit
    from agpt.train.lrfind import lr_find

    run_and_exit(lambda: lr_find(config, out=out, steps=steps, lr_min=lr_min, lr_max=lr_max, sets=sets))
