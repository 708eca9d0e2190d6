"""`agpt yeet`: parse options, call `agpt.yeet.run.yeet`, turn its result into an exit code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from agpt.errors import AgptError


@click.command(name="yeet")
@click.argument("src", type=click.Path(path_type=Path))
@click.option(
    "--dest", help="Node-local folder to stage into (default $SITE_LOCAL_DIR or /tmp, /$USER/NAME)."
)
@click.option("--mode", default="tar", show_default=True, help="tar (broadcast one tarball), copy or rsync.")
@click.option("--transport", help="mpi (default under mpiexec/srun), ssh (default with --hostfile), local.")
@click.option(
    "--hostfile",
    type=click.Path(path_type=Path),
    envvar="FAILOVER_HOSTFILE",
    help="Hosts, one per line (ssh targets; report spelling). Default: $FAILOVER_HOSTFILE.",
)
@click.option("--check", metavar="CMD", help="Command run in the staged tree before it replaces DEST.")
@click.option(
    "--min-success", metavar="N|F", help="Nodes (count or fraction) that must succeed (default all)."
)
def cli(**opts: Any) -> None:
    """Stage a venv, checkpoint or data set (a directory or a tarball) on every node's local storage.

    SRC is packed once into a zstd tarball cached beside it, broadcast (MPI) or fanned out (ssh),
    extracted on each node into DEST.tmp.<id>, verified and swapped in atomically.  A venv is relocated
    so that DEST/bin/python and its scripts run from DEST.  `{rank}` and `{host}` in --dest are filled
    in per node.  Exit 0 when at least --min-success nodes have DEST, 1 otherwise (under MPI every node then
    keeps its old DEST; over ssh each node commits on its own), 2 for a bad flag or input.

    \b
    Settings (environment):
      AGPT_YEET_CHUNK_MB   broadcast chunk size (8)
      AGPT_YEET_CACHE      where to cache tarballs when SRC's parent is read-only (~/.cache/agpt/yeet)
      AGPT_YEET_HOST       this node's name in reports ($SLURMD_NODENAME, else the hostname)
      AGPT_YEET_SSH        the ssh command (ssh -o BatchMode=yes -o ConnectTimeout=20)
      AGPT_YEET_FANOUT     concurrent copies per source, ssh transport (8)
      AGPT_YEET_TIMEOUT_S  per ssh call (600); AGPT_YEET_RETRIES per target (2)
    """
    from agpt.yeet.run import yeet
    from agpt.yeet.settings import YeetSettings

    def emit(line: str) -> None:
        click.echo(line)
        sys.stdout.flush()

    try:
        settings = YeetSettings(**opts)
        rc = yeet(settings, emit)
    except AgptError as exc:
        if not getattr(exc, "silent", False):
            click.echo(f"agpt: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(rc)
