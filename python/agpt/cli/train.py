"""`agpt train`: parse options, then hand over to agpt.train (which works without click)."""

from __future__ import annotations

import click

from agpt.cli import params


@click.command(name="train")
@click.option("--config", "config", required=True, type=click.Path(dir_okay=False), help="Run config YAML.")
@click.option("--run-dir", default=None, help="Run directory (checkpoints, progress); default $AGPT_RUN_DIR.")
@click.option("--steps", type=params.count(0), default=None, help="Train to this step (train.steps).")
@click.option(
    "--ckpt-interval",
    type=params.count(0),
    default=None,
    help="Steps between checkpoints (checkpoint.interval).",
)
@click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a dotted key, e.g. optim.lr=1e-3."
)
def cli(
    config: str, run_dir: str | None, steps: int | None, ckpt_interval: int | None, sets: tuple[str, ...]
) -> None:
    """Train a Llama-style model with FSDP2, async checkpoints and exact resume.

    Launch one process per device with mpiexec, srun or torchrun; rank and world size come from the
    launcher.  Resumes from the newest complete checkpoint in RUN_DIR/ckpt.  Exit codes: 0 done,
    1 failure (e.g. non-finite loss), 2 bad config or checkpoint, 75 stopped at the deadline or on
    SIGUSR1 with a checkpoint saved, 143 stopped on SIGTERM with a checkpoint saved.
    """
    from agpt.train.entry import run_and_exit
    from agpt.train.run import train

    run_and_exit(lambda: train(config, run_dir=run_dir, steps=steps, ckpt_interval=ckpt_interval, sets=sets))
