"""`--transport mpi`: rank 0 reads the tarball in large chunks and broadcasts them; every rank extracts as
chunks arrive.

Why MPI: every HPC site has it, its broadcast already uses the fabric's best tree (for large messages MPICH and
Open MPI switch to a pipelined scatter + allgather, so the time hardly grows with the node count), and it
needs no ssh keys.  We only pick the chunk size; the library picks the tree.  Each rank hands a received
chunk to an extraction thread and posts the next `Bcast` at once, so network, decompression and disk overlap.

The decision is collective: every rank reports its result, and DEST is replaced only when at least
`--min-success` nodes verified their tree; otherwise every node aborts and keeps its old DEST.

`AGPT_YEET_FAULT` (tests): `corrupt:RANK:CHUNK` flips a byte of chunk CHUNK as rank RANK received it,
`kill:RANK:CHUNK` makes that rank SIGKILL itself there; several specs are separated by commas.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from agpt.errors import AgptError, BadInput
from agpt.rundir import LAUNCHERS, MPI_RANK_VARS
from agpt.yeet.extract import check_dest
from agpt.yeet.node import NodeResult, Receiver, TreeCopier
from agpt.yeet.pack import resolve_source
from agpt.yeet.report import failed_hosts, needed, node_name, render_dest, report_lines, spell

# The launchers' rank variables but torchrun's (it is no MPI launcher): the MPI launchers' and srun's.
LAUNCHER_RANK_VARS = (*MPI_RANK_VARS, *(x.rank for x in LAUNCHERS if x.name == "srun"))
POLL_S = 0.0005


class PeerFailed(AgptError):
    """Another rank hit an error and rank 0 reports it; this rank exits with the same code, silently."""

    silent = True

    def __init__(self, code: int) -> None:
        super().__init__("")
        self.exit_code = code


def under_launcher(env: dict[str, str] | None = None) -> bool:
    """True when an MPI launcher or srun started this process (so MPI is the natural transport)."""
    e = os.environ if env is None else env
    if e.get("SLURM_STEP_ID") == "batch":  # a batch script itself, not a job step
        return False
    # SLURM_PROCID without a step id: a batch script itself, not a job step.
    return any(v in e and (v != "SLURM_PROCID" or "SLURM_STEP_ID" in e) for v in LAUNCHER_RANK_VARS)


def _faults(rank: int) -> dict[int, str]:
    out: dict[int, str] = {}
    for spec in filter(None, os.environ.get("AGPT_YEET_FAULT", "").split(",")):
        action, r, c = spec.split(":")
        if int(r) == rank:
            out[int(c)] = action
    return out


def _inject(action: str, rank: int, chunk: int, view: memoryview) -> None:
    print(f"yeet: AGPT_YEET_FAULT: {action} on rank {rank} at chunk {chunk}", file=sys.stderr, flush=True)
    if action == "corrupt":
        view[len(view) // 2] ^= 0xFF
    elif action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def _raise_collective(rank: int, msg: str, code: int) -> NoReturn:
    if rank == 0:
        err = BadInput(msg) if code == 2 else AgptError(msg)
        raise err
    raise PeerFailed(code)


@dataclass(kw_only=True, slots=True)
class Broadcast:
    """What `agpt yeet --transport mpi` stages: SRC to DEST (with {rank}/{host}) on every rank."""

    src: Path
    dest: str
    mode: str
    check: str | None
    min_success: str | None
    hosts: list[str]
    chunk: int


def run(job: Broadcast, emit: Callable[[str], None]) -> int:
    """Stage SRC on every rank's DEST; rank 0 reports.  Returns the exit code (the same on every rank)."""
    from mpi4py import MPI

    try:
        return _run(job, emit)
    except AgptError:
        raise  # raised on every rank alike (rank 0 prints it)
    except BaseException:
        # one rank alone hit a bug or an interrupt: the others would wait forever in a collective
        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
        raise


def _run(job: Broadcast, emit: Callable[[str], None]) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    t_start = time.monotonic()
    _check_world(size)
    name, my_dest, crowded = _check_dests(comm, job)
    try:
        need = needed(job.min_success, size)
    except BadInput as exc:
        _raise_collective(rank, str(exc), 2)
    worker: Receiver | TreeCopier
    total = 0
    if job.mode == "tar":
        worker, total = _broadcast_tar(comm, job, my_dest, emit, crowded)
    else:
        if rank == 0:
            emit(f"yeet: {job.mode} of {job.src} to {size} ranks, file by file")
        worker = TreeCopier(src=job.src, dest=my_dest, mode=job.mode, check=job.check).start()
    error = worker.finish()
    result = NodeResult(rank=rank, host=name, dest=str(my_dest), ok=not error, error=error, files=worker.files,
                        bytes=worker.bytes)  # fmt: skip
    _sync(comm, crowded)
    _commit_if_enough(worker, result, comm.allgather(result), need)
    final = comm.gather(result, root=0)
    rc = 0
    if rank == 0:
        assert final is not None
        rc = _report(final, need, time.monotonic() - t_start, total, job.mode, emit)
    return int(comm.bcast(rc, root=0))


def _check_world(size: int) -> None:
    """A launcher that started many tasks must give MPI a world of as many (mpi4py built for another MPI)."""
    ntasks = os.environ.get("SLURM_NTASKS") or os.environ.get("PMI_SIZE") or "1"
    if size == 1 and ntasks.isdigit() and int(ntasks) > 1:
        raise BadInput(
            f"--transport mpi: the launcher started {ntasks} tasks but MPI sees a world of 1 "
            "(is mpi4py built against this launcher's MPI? under srun, try --mpi=pmi2 or --mpi=pmix)"
        )


def _check_dests(comm: Any, job: Broadcast) -> tuple[str, Path, bool]:
    """Every rank's DEST is usable and no two ranks share one; (this node's name, its DEST, ranks share nodes).
    A refusal is raised on every rank alike."""
    rank, size = comm.Get_rank(), comm.Get_size()
    name = spell(node_name(), job.hosts)
    my_dest = render_dest(job.dest, rank=rank, host=name)
    err = ""
    try:
        check_dest(my_dest, job.src)
    except BadInput as exc:
        err = str(exc)
    info: list[tuple[str, str, str]] = comm.allgather((socket.gethostname(), name, err))
    if "{rank}" not in job.dest and "{host}" not in job.dest:
        seen: dict[str, int] = {}
        for r, (phys, _n, _e) in enumerate(info):
            if phys in seen:
                _raise_collective(
                    rank,
                    f"--dest {job.dest}: ranks {seen[phys]} and {r} run on the same node {phys} and would race on "
                    "one folder; launch one rank per node (or put {rank} in --dest)",
                    2,
                )
            seen[phys] = r
    for r, (_p, n, e) in enumerate(info):
        if e:
            _raise_collective(rank, f"{e} (rank {r} on {n})", 2)
    return name, my_dest, len({phys for phys, _n, _e in info}) < size


def _broadcast_tar(comm: Any, job: Broadcast, my_dest: Path, emit: Callable[[str], None],
                   crowded: bool) -> tuple[Receiver, int]:  # fmt: skip
    """Rank 0 packs (or finds) the tarball and broadcasts it in chunks; every rank extracts what arrives."""
    rank, size = comm.Get_rank(), comm.Get_size()
    header: dict[str, Any] = {}
    if rank == 0:
        try:
            tb = resolve_source(job.src, progress=emit)
            header = {"path": str(tb.path), "size": tb.size, "sha256": tb.sha256, "compression": tb.compression,
                      "members": tb.members}  # fmt: skip
        except AgptError as exc:
            header = {"error": str(exc), "code": exc.exit_code}
    _sync(comm, crowded)  # rank 0 may pack for a while: the others must not spin on its cores
    header = comm.bcast(header, root=0)
    if "error" in header:
        _raise_collective(rank, header["error"], header["code"])
    total = int(header["size"])
    if rank == 0:
        emit(f"yeet: broadcasting {header['path']} bytes={total} to {size} ranks chunk={job.chunk}")
    rx = Receiver(dest=my_dest, compression=header["compression"], sha256=header["sha256"], size=total,
                  check=job.check, members=int(header["members"])).start()  # fmt: skip
    _pump(comm, rank, rx, Path(header["path"]), total, job.chunk, crowded)
    return rx, total


def _commit_if_enough(worker: Receiver | TreeCopier, result: NodeResult, results: list[NodeResult],
                      need: int) -> None:  # fmt: skip
    """The collective decision: with enough verified nodes each verified node replaces its DEST, else every
    node keeps its old one."""
    go = sum(r.ok for r in results) >= need
    if result.ok and go:
        worker.write_failed_hosts([r.host for r in results if not r.ok])
        try:
            worker.stage.commit()
            result.committed = True
        except OSError as exc:
            result.error = f"replacing {result.dest} failed: {exc}"
            worker.stage.abort()
    else:
        if result.ok:
            result.error = "not committed: too few nodes succeeded"
        worker.stage.abort()
    result.seconds = worker.seconds()


def _report(final: list[NodeResult], need: int, seconds: float, total: int, mode: str,
            emit: Callable[[str], None]) -> int:  # fmt: skip
    """Rank 0: the per-node lines and the exit code (1 when too few nodes committed)."""
    for line in report_lines(final, need=need, seconds=seconds, nbytes=total, verb=f"staged ({mode})"):
        emit(line)
    rc = 0 if sum(r.committed for r in final) >= need else 1
    if rc == 0 and failed_hosts(final):
        emit(f"yeet: failed hosts recorded in DEST/.yeet-failed-hosts: {','.join(failed_hosts(final))}")
    return rc


def _sync(comm: Any, crowded: bool) -> None:
    """Wait for every rank.  When ranks share a node, poll with sleeps: MPI's blocking waits busy-poll."""
    if crowded:
        req = comm.Ibarrier()
        while not req.Test():
            time.sleep(POLL_S * 10)


def _reader(path: Path, total: int, chunk: int, free: queue.Queue[bytearray], out: queue.Queue[Any]) -> None:
    """Rank 0's read-ahead: large sequential reads, so the shared filesystem sees one streaming reader."""
    try:
        with open(path, "rb", buffering=0) as f:
            done = 0
            while done < total:
                n = min(chunk, total - done)
                buf = free.get()
                view = memoryview(buf)[:n]
                got = 0
                while got < n:
                    k = f.readinto(view[got:])
                    if not k:
                        raise OSError(f"{path} shrank while being read ({done + got} of {total} bytes)")
                    got += k
                out.put((buf, n, ""))
                done += n
    except OSError as exc:
        out.put((None, 0, str(exc)))


def _pump(
    comm: Any,
    rank: int,
    rx: Receiver,
    path: Path,
    total: int,
    chunk: int,
    crowded: bool = False,
) -> None:
    """Broadcast every chunk; each rank hands each one to its extractor and goes on to the next.

    CROWDED (several ranks share a node, as in tests): a blocking Bcast busy-polls and steals the cores the
    extractors need, so post an Ibcast and poll it with short sleeps instead.  With one rank per node the
    blocking call is better: a sleeping rank would delay forwarding in the broadcast tree.
    """
    from mpi4py import MPI

    nchunks = (total + chunk - 1) // chunk
    free: queue.Queue[bytearray] = queue.Queue()
    for _ in range(6):
        free.put(bytearray(chunk))
    filled: queue.Queue[Any] = queue.Queue()
    if rank == 0:
        threading.Thread(target=_reader, args=(path, total, chunk, free, filled), daemon=True).start()
    from agpt.progress import Progress

    faults = _faults(rank)
    read_error = ""
    bar = Progress(total, "yeet: broadcast and extract", unit="B", scale=True, quiet=rank != 0)
    for i in range(nchunks):
        n = min(chunk, total - i * chunk)
        if rank == 0:
            buf, _n, e = (None, 0, read_error) if read_error else filled.get()
            if buf is None:
                read_error = e
                buf = free.get()  # keep the collective going; every rank will fail the digest check
                buf[:n] = bytes(n)
        else:
            buf = free.get()
        view = memoryview(buf)[:n]
        if crowded:
            req = comm.Ibcast([view, n, MPI.BYTE], root=0)
            while not req.Test():
                time.sleep(POLL_S)
        else:
            comm.Bcast([view, n, MPI.BYTE], root=0)
        if i in faults:
            _inject(faults[i], rank, i, view)
        rx.feed(view, lambda b=buf: free.put(b))  # type: ignore[misc]
        bar.update(n)
    bar.close()
    if read_error:
        rx.error = rx.error or f"reading the tarball failed: {read_error}"
