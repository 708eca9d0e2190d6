"""`agpt ckpt`: checkpoint tools.  `interval`: the save interval from failure rates (Young/Daly)."""

from __future__ import annotations

import json

import click

from agpt.sim import interval as iv


@click.group(name="ckpt")
def cli() -> None:
    """Checkpoint tools."""


@cli.command(name="interval")
@click.option("--nodes", type=int, required=True, help="nodes in the job (it dies when any one dies)")
@click.option("--node-mtbf-h", type=float, required=True, help="one node's mean time between failures, hours")
@click.option("--save-stall-s", type=float, required=True, help="seconds a save stalls training")
@click.option("--load-s", type=float, default=0.0, show_default=True, help="seconds to load a checkpoint")
@click.option(
    "--restart-s", type=float, default=0.0, show_default=True, help="seconds to detect and relaunch"
)
@click.option("--json", "as_json", is_flag=True, help="print the figures as JSON")
def interval_cmd(
    nodes: int, node_mtbf_h: float, save_stall_s: float, load_s: float, restart_s: float, as_json: bool
) -> None:
    """The optimum checkpoint interval (Young and Daly) and the expected loss per day.

    Example (the AuroraGPT 20B figures): agpt ckpt interval --nodes 512 --node-mtbf-h 8760 --save-stall-s 23.6
    --load-s 59
    """
    r = iv.interval(
        nodes=nodes, node_mtbf_h=node_mtbf_h, save_stall_s=save_stall_s, load_s=load_s, restart_s=restart_s
    )
    click.echo(json.dumps(r.as_dict()) if as_json else iv.render(r))
