"""What `agpt yeet` does, without click: stage SRC on every node by the transport its settings pick
(agpt.yeet.settings), and this node's own staging when there is no other."""

from __future__ import annotations

import time
from collections.abc import Callable

from agpt.errors import BadInput
from agpt.yeet.extract import check_dest, check_dest_src
from agpt.yeet.node import NodeResult, TreeCopier, stage_file
from agpt.yeet.pack import resolve_source
from agpt.yeet.report import needed, node_name, read_hostfile, render_dest, report_lines
from agpt.yeet.settings import YeetSettings


def yeet(s: YeetSettings, emit: Callable[[str], None]) -> int:
    """Stage SRC on every node; return the exit code (0 ok, 1 too few nodes succeeded)."""
    s.validate()
    dest = s.dest or s.default_dest()
    transport = s.pick_transport()
    hosts = read_hostfile(s.hostfile) if s.hostfile is not None else []
    for i, h in enumerate(hosts or [node_name()]):
        check_dest_src(render_dest(dest, rank=i, host=h), s.src)
    chunk = s.chunk_mb << 20
    if transport == "mpi":
        from agpt.yeet import mpi

        job = mpi.Broadcast(src=s.src, dest=dest, mode=s.mode, check=s.check, min_success=s.min_success,
                            hosts=hosts, chunk=chunk)  # fmt: skip
        return mpi.run(job, emit=emit)
    if transport == "ssh":
        if s.hostfile is None:
            raise BadInput("--transport ssh: needs --hostfile (one host per line) or FAILOVER_HOSTFILE")
        if s.mode != "tar":
            raise BadInput(f"--mode {s.mode}: the ssh transport ships tarballs only (use --mode tar)")
        from agpt.yeet import ssh

        return ssh.run(s, dest=dest, hosts=hosts, emit=emit)
    return _local(s, dest, emit)


def _local(s: YeetSettings, dest_template: str, emit: Callable[[str], None]) -> int:
    """This node only: the same staging, verification and atomic replace as every node of a job gets."""
    t0 = time.monotonic()
    name = node_name()
    dest = render_dest(dest_template, rank=0, host=name)
    check_dest(dest, s.src)
    need = needed(s.min_success, 1)
    nbytes = 0
    if s.mode == "tar":
        tb = resolve_source(s.src, progress=emit)
        nbytes = tb.size
        rx = stage_file(
            tb.path,
            dest=dest,
            compression=tb.compression,
            sha256=tb.sha256,
            size=tb.size,
            check=s.check,
            chunk=s.chunk_mb << 20,
            members=tb.members,
        )
        error, files, stage, seconds = rx.error, rx.files, rx.stage, rx.seconds
    else:
        tc = TreeCopier(src=s.src, dest=dest, mode=s.mode, check=s.check).start()
        tc.finish()
        error, files, stage, seconds = tc.error, tc.files, tc.stage, tc.seconds
    result = NodeResult(rank=0, host=name, dest=str(dest), ok=not error, error=error, files=files)
    if result.ok:
        try:
            stage.commit()
            result.committed = True
        except OSError as exc:
            result.error = f"replacing {dest} failed: {exc}"
            stage.abort()
    else:
        stage.abort()
    result.seconds = seconds()
    for line in report_lines([result], need=need, seconds=time.monotonic() - t0, nbytes=nbytes):
        emit(line)
    return 0 if result.committed else 1
