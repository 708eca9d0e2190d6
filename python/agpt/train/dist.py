"""Rank, world size, rendezvous and device, whatever launched us (mpiexec, srun, torchrun, aprun/PALS).

Job scripts at different sites launch the same trainer with different launchers; each one exports
its own spelling of "rank".  The rendezvous address and port default to values every rank can compute
alone (no extra service): localhost when all ranks are local, else the first host of the host list,
and a port hashed from the job's identity so concurrent jobs on one node do not collide.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agpt.errors import ConfigError

# (rank, world size, local rank, local world size) per launcher, in order of preference.
_LAUNCHERS: tuple[tuple[str, str, str, str], ...] = (
    ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),  # torchrun
    ("PALS_RANKID", "PALS_SIZE", "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE"),  # HPE PALS (PBS mpiexec)
    (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),  # MPICH hydra
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),  # srun
)


@dataclass(kw_only=True, slots=True)
class DistInfo:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    launcher: str


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "")
    m = re.match(r"\d+", raw)
    return int(m.group(0)) if m else default


def _first_host(env: Mapping[str, str]) -> str | None:
    """The first host of $FAILOVER_HOSTFILE, $PBS_NODEFILE, or the Slurm node list."""
    for var in ("FAILOVER_HOSTFILE", "PBS_NODEFILE"):
        path = env.get(var)
        if path and Path(path).is_file():
            for line in Path(path).read_text().splitlines():
                host = line.split()[0] if line.split() else ""
                if host and not host.startswith("#"):
                    return host.split(":")[0]
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if nodelist:
        return expand_first_slurm_host(nodelist)
    return None


def expand_first_slurm_host(nodelist: str) -> str:
    """`x1000c0s[1-3,7]b0n0,foo` -> `x1000c0s1b0n0` (first host only, no scontrol needed)."""
    first = ""
    depth = 0
    for ch in nodelist:
        if ch == "," and depth == 0:
            break
        depth += ch == "["
        depth -= ch == "]"
        first += ch
    m = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", first)
    if not m:
        return first
    lo = m.group(2).split(",")[0].split("-")[0]
    return expand_first_slurm_host(m.group(1) + lo + m.group(3))


def _default_port(env: Mapping[str, str], all_local: bool) -> int:
    """A port every rank derives alone: a hash of the job's identity, in 20000-59999."""
    ident = [env.get(k, "") for k in ("SLURM_JOB_ID", "SLURM_STEP_ID", "PBS_JOBID", "FAILOVER_ATTEMPT")]
    if not any(ident[:3]):
        if not all_local:
            return 29500
        # All ranks on one node under one launcher proxy share a parent process.
        ident.append(str(os.getppid()))
    digest = hashlib.sha256("|".join(ident).encode()).digest()
    return 20000 + int.from_bytes(digest[:4], "big") % 40000


def detect(env: Mapping[str, str] | None = None) -> DistInfo:
    """Rank and rendezvous from the launcher's environment; a lone process is rank 0 of 1."""
    env = os.environ if env is None else env
    rank, world, local_rank, local_world, launcher = 0, 1, 0, 1, "none"
    for r, w, lr, lw in _LAUNCHERS:
        if r in env and w in env:
            rank, world = _int(env, r, 0), _int(env, w, 1)
            local_rank = _int(env, lr, rank)
            local_world = _int(env, lw, world)
            launcher = r
            break
    if not 0 <= rank < world:
        raise ConfigError(f"{launcher}: rank {rank} is outside world size {world}")
    all_local = local_world >= world or world == 1
    if env.get("SLURM_NNODES") and launcher == "SLURM_PROCID":
        all_local = _int(env, "SLURM_NNODES", 1) == 1
    addr = env.get("MASTER_ADDR") or env.get("AGPT_MASTER_ADDR")
    if not addr:
        addr = "127.0.0.1" if all_local else (_first_host(env) or "127.0.0.1")
    port_raw = env.get("MASTER_PORT") or env.get("AGPT_MASTER_PORT")
    if port_raw:
        if not port_raw.isdigit():
            raise ConfigError(f"MASTER_PORT: not a port number ({port_raw!r})")
        port = int(port_raw)
    elif world == 1:
        port = _free_port()
    else:
        port = _default_port(env, all_local)
    return DistInfo(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        master_addr=addr,
        master_port=port,
        launcher=launcher,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def pick_device(kind: str, local_rank: int) -> tuple[str, str]:
    """(device string, backend): the first accelerator torch reports, else CPU with gloo."""
    import torch

    if kind == "auto":
        acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        kind = acc.type if acc is not None else "cpu"
    if kind == "cpu":
        return "cpu", "gloo"
    backend = {"cuda": "nccl", "xpu": "xccl", "hpu": "hccl"}.get(kind, "gloo")
    count = torch.accelerator.device_count() if torch.accelerator.is_available() else 1
    index = local_rank % max(count, 1)
    torch.accelerator.set_device_index(index)
    return f"{kind}:{index}", backend


def init(info: DistInfo, backend: str, device: str, timeout_s: int) -> None:
    """Join the default process group (also for one rank: FSDP2 needs a mesh)."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    kwargs: dict[str, Any] = {}
    if not device.startswith("cpu"):
        kwargs["device_id"] = torch.device(device)
    # torchrun's agent already serves a store on MASTER_PORT: join it (env://) rather than bind it again.
    if info.launcher == "RANK" and os.environ.get("TORCHELASTIC_RUN_ID"):
        init_method = "env://"
    else:
        init_method = f"tcp://{info.master_addr}:{info.master_port}"
    dist.init_process_group(
        backend=backend,
        init_method=init_method,
        rank=info.rank,
        world_size=info.world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
        **kwargs,
    )


def finish() -> None:
    """Leave the process group; the caller then ends with os._exit (gloo can abort at interpreter exit)."""
    import torch.distributed as dist

    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:
            pass
