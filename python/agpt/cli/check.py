"""`agpt check CONFIG`: will this config train at this size on this site?  One screen, before the queue."""

from __future__ import annotations

import sys

import click

from agpt import check as chk
from agpt import numeric
from agpt.cli import params
from agpt.errors import EXIT_USAGE


@click.command(name="check")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--site", default=None, help="Site name or profile path (default: `agpt site detect`).")
@click.option(
    "--nodes",
    type=params.count(1, numeric.MAX_NODES),
    default=None,
    help="Nodes training (default: the config's job.nodes).",
)
@click.option(
    "--ranks-per-node",
    type=params.count(1, numeric.MAX_RANKS_PER_NODE),
    default=None,
    help="Ranks per node (default: job.ranks_per_node, else the site's SITE_RANKS_PER_NODE).",
)
@click.option("--no-data", is_flag=True, help="Do not open data.path (it lives on the site's filesystem).")
@click.option("--run-dir", default=None, help="Also check the run directory: writable, checkpoints readable.")
@click.option("-q", "--quiet", is_flag=True, help="Print the table only when a check fails.")
def cli(
    config: str,
    site: str | None,
    nodes: int | None,
    ranks_per_node: int | None,
    no_data: bool,
    run_dir: str | None,
    quiet: bool,
) -> None:
    """Check CONFIG at its real size without a GPU: schema, world size and layout, batch divisibility,
    parameters and memory per device (model built on the meta device) against the site's device memory,
    checkpoint size and save time, tokens per step and in total, and the data's manifest.

    Exit 0 with the table when every check passes; 2 with one line per failed check on standard error,
    each naming the file and field and saying how to fix it.
    """
    if site is None:
        from agpt import site as site_mod

        site = site_mod.detect()
    report = chk.check(
        config, site=site, nodes=nodes, ranks_per_node=ranks_per_node, data=not no_data, run_dir=run_dir
    )
    if report.failures or not quiet:
        click.echo(report.table())
    for line in report.warnings:
        click.echo(f"agpt check: warning: {line}", err=True)
    for line in report.failures:
        click.echo(f"agpt check: {line}", err=True)
    if report.failures:
        sys.exit(EXIT_USAGE)
