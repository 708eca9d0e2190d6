"""`agpt mpi-hello`: one line per MPI rank, to check a launcher and a host list."""

from __future__ import annotations

import socket

import click


@click.command(name="mpi-hello")
def cli() -> None:
    """Print rank, size and host from every MPI rank (a launcher check)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    names = comm.gather(socket.gethostname(), root=0)
    comm.Barrier()
    if comm.Get_rank() == 0:
        assert names is not None
        for rank, host in enumerate(names):
            click.echo(f"rank {rank}/{comm.Get_size()} on {host}")
