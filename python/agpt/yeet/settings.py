"""`agpt yeet`'s settings: one invocation, validated; and the choice of transport.

Transport: `mpi` when an MPI launcher or srun started us (one rank per node), `ssh` when a hostfile names the
nodes and no launcher did, else `local` (this node only; useful on a laptop and for a single-node job).
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, field
from pathlib import Path

from agpt import numeric
from agpt.errors import BadInput
from agpt.yeet.report import parse_min_success

MODES = ("tar", "copy", "rsync")
TRANSPORTS = ("mpi", "ssh", "local")
TAR_SUFFIXES = (".tar.zst", ".tzst", ".tar.gz", ".tgz", ".tar")


def env_int(name: str, default: int, lo: int, hi: int) -> int:
    """A whole-number setting from the environment (empty: DEFAULT) through agpt.numeric: anything else is one
    line naming it, exit 2."""
    return int(numeric.env_number(os.environ, name, default, lo=lo, hi=hi, integer=True))


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
