"""Settings and the choice of transport: what `agpt yeet` does, without click.

Transport: `mpi` when an MPI launcher or srun started us (one rank per node), `ssh` when a hostfile names the
nodes and no launcher did, else `local` (this node only; useful on a laptop and for a single-node job).
"""

from __future__ import annotations

import getpass
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agpt.errors import BadInput
from agpt.yeet.extract import check_dest, check_dest_src
from agpt.yeet.node import NodeResult, TreeCopier, stage_file
from agpt.yeet.pack import resolve_source
from agpt.yeet.report import needed, node_name, parse_min_success, read_hostfile, render_dest, report_lines

MODES = ("tar", "copy", "rsync")
TRANSPORTS = ("mpi", "ssh", "local")
TAR_SUFFIXES = (".tar.zst", ".tzst", ".tar.gz", ".tgz", ".tar")


def env_int(name: str, default: int, lo: int, hi: int) -> int:
    """A whole-number setting from the environment (empty: DEFAULT); anything else is one line, exit 2."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadInput(f"{name}={raw!r}: expected a whole number {lo}..{hi}") from None
    if not lo <= value <= hi:
        raise BadInput(f"{name}={value}: expected {lo}..{hi}")
    return value


@dataclass(kw_only=True, slots=True)
class YeetSettings:
    """One `agpt yeet` invocation; `validate()` turns every bad flag into a one-line BadInput."""

    src: Path
    dest: str | None = None
    mode: str = "tar"
    transport: str | None = None
    hostfile: Path | None = None
    check: str | None = None
    min_success: str | None = None
    chunk_mb: int = field(default_factory=lambda: env_int("AGPT_YEET_CHUNK_MB", 8, 1, 1024))
    timeout_s: float = field(default_factory=lambda: float(env_int("AGPT_YEET_TIMEOUT_S", 600, 1, 86400 * 7)))
    retries: int = field(default_factory=lambda: env_int("AGPT_YEET_RETRIES", 2, 0, 100))  # per ssh target
    fanout: int = field(default_factory=lambda: env_int("AGPT_YEET_FANOUT", 8, 1, 4096))

    def validate(self) -> None:
        if self.mode not in MODES:
            raise BadInput(f"--mode {self.mode}: expected one of {', '.join(MODES)}")
        if self.transport is not None and self.transport not in TRANSPORTS:
            raise BadInput(f"--transport {self.transport}: expected one of {', '.join(TRANSPORTS)}")
        if not os.path.lexists(self.src):
            raise BadInput(f"SRC {self.src}: no such file or directory")
        if not os.access(self.src, os.R_OK):
            raise BadInput(f"SRC {self.src}: not readable")
        if self.mode != "tar" and not self.src.is_dir():
            raise BadInput(f"--mode {self.mode}: SRC {self.src} must be a directory")
        parse_min_success(self.min_success)
        if not 1 <= self.chunk_mb <= 1024:
            raise BadInput(f"AGPT_YEET_CHUNK_MB={self.chunk_mb}: expected 1..1024")

    def default_dest(self) -> str:
        """`$SITE_LOCAL_DIR/$USER/NAME` (SITE_LOCAL_DIR defaults to /tmp): node-local, per user."""
        name = self.src.resolve().name
        for suffix in TAR_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                break
        base = os.environ.get("SITE_LOCAL_DIR") or "/tmp"
        return str(Path(base) / getpass.getuser() / name.lstrip("."))

    def pick_transport(self) -> str:
        from agpt.yeet.mpi import under_launcher

        if self.transport:
            return self.transport
        if under_launcher():
            return "mpi"
        if self.hostfile is not None:
            return "ssh"
        return "local"


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
