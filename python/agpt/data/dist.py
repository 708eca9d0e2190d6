"""MPI when launched by mpiexec/srun, a single process otherwise (mpi4py is imported only then).

Importing mpi4py initializes MPI, which some launchers forbid outside a job step; so we look for the
environment that MPI launchers set before touching it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from agpt.errors import AgptError
from agpt.rundir import LOCAL_SIZE_VARS, MPI_RANK_VARS, MPI_VARS, SLURM_TASKS_PER_NODE

T = TypeVar("T")


@dataclass(kw_only=True, slots=True)
class Comm:
    """The few collectives the data tools need; a size-1 stand-in when not under MPI."""

    rank: int = 0
    size: int = 1
    mpi: Any = None

    def barrier(self) -> None:
        if self.mpi is not None:
            self.mpi.Barrier()

    def allgather(self, value: Any) -> list[Any]:
        if self.mpi is None:
            return [value]
        result: list[Any] = self.mpi.allgather(value)
        return result

    def bcast(self, value: Any) -> Any:
        if self.mpi is None:
            return value
        return self.mpi.bcast(value, root=0)

    def first_error(self, error: BaseException | None) -> BaseException | None:
        """Every rank learns the lowest rank's error, so all ranks stop together with the same message."""
        if self.mpi is None:
            return error
        code = getattr(error, "exit_code", 1)
        errors = self.allgather(None if error is None else (code, str(error)))
        for i, item in enumerate(errors):
            if item is not None:
                if i == self.rank and error is not None:
                    return error
                remote = AgptError(item[1])
                remote.exit_code = item[0]
                return remote
        return None

    def on_every_rank(self, fn: Callable[[], T]) -> T | None:
        """FN's value on every rank; an AgptError on any rank is raised on all of them (the lowest rank's)."""
        value: T | None = None
        err: BaseException | None = None
        try:
            value = fn()
        except AgptError as exc:
            err = exc
        err = self.first_error(err)
        if err is not None:
            raise err
        return value

    def on_root(self, fn: Callable[[], T]) -> T:
        """FN run on rank 0 and its value broadcast; an AgptError there is raised on every rank."""
        out: T = self.bcast(self.on_every_rank(lambda: fn() if self.rank == 0 else None))
        return out


# The launchers' variables: one table (agpt.rundir.LAUNCHERS).  A Slurm job's tasks per node count when nothing
# else says how many ranks share this node.
_LOCAL_SIZE_VARS = (*LOCAL_SIZE_VARS, SLURM_TASKS_PER_NODE)


def launcher_rank() -> int:
    """This process' rank as the launcher told it (0 when not under MPI), without initializing MPI."""
    for v in MPI_RANK_VARS:
        value = os.environ.get(v, "")
        if value.isdigit():
            return int(value)
    return 0


def local_ranks() -> int:
    """Ranks sharing this node (so worker pools do not oversubscribe its CPUs)."""
    for v in _LOCAL_SIZE_VARS:
        value = os.environ.get(v, "").split("(")[0]
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def under_mpi() -> bool:
    return any(v in os.environ for v in MPI_VARS)


def world() -> Comm:
    """COMM_WORLD when this process was started by an MPI launcher, else a single-process Comm."""
    if not under_mpi():
        return Comm()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_size() == 1:
        return Comm()
    return Comm(rank=comm.Get_rank(), size=comm.Get_size(), mpi=comm)


def root_reports(fn: Callable[[], T]) -> T:
    """Run `fn`; on an AgptError, only rank 0 prints it (every rank exits with its code), so a bad
    input under `mpiexec -n 64` is one line, not 64."""
    try:
        return fn()
    except AgptError as exc:
        if launcher_rank() != 0:
            sys.exit(exc.exit_code)
        raise
