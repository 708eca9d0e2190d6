"""Rank, world size, rendezvous and device, whatever launched us (mpiexec, srun, torchrun, aprun/PALS).

Job scripts at different sites launch the same trainer with different launchers; each one exports
its own spelling of "rank".  The rendezvous address and port default to values every rank can compute
alone (no extra service): localhost when all ranks are local, else the first host of the host list,
and a port hashed from the job's identity so concurrent jobs on one node do not collide.
"""

from __future__ import annotations

import datetime
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agpt import rundir
from agpt.errors import ConfigError
from agpt.failover.hostmatch import parse_hosts
from agpt.hostlist import expand_hostlist
from agpt.rundir import LOCAL_RANK_VARS, LOCAL_SIZE_VARS, RANK_SIZE_VARS, RANK_VARS, derived_port


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


def env_rank(env: Mapping[str, str] | None = None) -> int:
    """This process' rank as the launcher exported it, 0 when none did; never raises (error reporting)."""
    env = os.environ if env is None else env
    for name in RANK_VARS:
        raw = env.get(name, "")
        if raw.isdigit():
            return int(raw)
    return 0


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "")
    m = re.match(r"\d+", raw)
    return int(m.group(0)) if m else default


def _hosts(env: Mapping[str, str]) -> list[str]:
    """Distinct hosts of $FAILOVER_HOSTFILE or $PBS_NODEFILE, in order (empty when neither is set)."""
    for var in ("FAILOVER_HOSTFILE", "PBS_NODEFILE"):
        path = env.get(var)
        if path and Path(path).is_file():
            return parse_hosts(rundir.read_text(Path(path), what=var).splitlines())
    return []


def _slurm_node_tasks(env: Mapping[str, str]) -> int | None:
    """Ranks on this node under srun: SLURM_STEP_TASKS_PER_NODE ("2(x3),1") at index SLURM_NODEID.

    srun exports no local size of its own, and the tensor-parallel check (a group must fit in a node)
    needs this node's count, which differs between nodes when the tasks do not divide evenly.
    """
    raw = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or ""
    counts: list[int] = []
    for part in filter(None, raw.split(",")):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            return None
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    node = _int(env, "SLURM_NODEID", 0)
    return counts[node] if node < len(counts) else None


def _first_host(env: Mapping[str, str]) -> str | None:
    """The first host of $FAILOVER_HOSTFILE, $PBS_NODEFILE, or the Slurm node list."""
    hosts = _hosts(env)
    if hosts:
        return hosts[0]
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if nodelist:
        first = expand_hostlist(nodelist, limit=1)
        return first[0] if first else None
    return None


def _default_port(env: Mapping[str, str], all_local: bool) -> int:
    """A port every rank derives alone: a hash of the job's identity (agpt.rundir.derived_port)."""
    ident = [env.get(k, "") for k in ("SLURM_JOB_ID", "SLURM_STEP_ID", "PBS_JOBID", "FAILOVER_ATTEMPT")]
    if not any(ident[:3]):
        if not all_local:
            return 29500
        # All ranks on one node under one launcher proxy share a parent process.
        ident.append(str(os.getppid()))
    return derived_port("|".join(ident))


def detect(env: Mapping[str, str] | None = None) -> DistInfo:
    """Rank and rendezvous from the launcher's environment; a lone process is rank 0 of 1."""
    env = os.environ if env is None else env
    rank, world, launcher = 0, 1, "none"
    for r, w in RANK_SIZE_VARS:
        if r in env and w in env:
            rank, world, launcher = _int(env, r, 0), _int(env, w, 1), r
            break
    if not 0 <= rank < world:
        raise ConfigError(f"{launcher}: rank {rank} is outside world size {world}")
    local_rank = next((_int(env, v, 0) for v in LOCAL_RANK_VARS if v in env), None)
    local_world = next((_int(env, v, 1) for v in LOCAL_SIZE_VARS if v in env), None)
    if local_world is None and launcher == "SLURM_PROCID":
        local_world = _slurm_node_tasks(env)
    if world == 1:
        all_local = True
    elif launcher == "SLURM_PROCID" and env.get("SLURM_NNODES"):
        all_local = _int(env, "SLURM_NNODES", 1) == 1
    elif local_world is not None:
        all_local = local_world >= world
    else:  # nothing says how many ranks share this node: trust the host list, if any
        all_local = len(_hosts(env)) <= 1
    if local_rank is None:  # a guess for block placement; pick_device wraps it by the device count
        local_rank = rank
    if local_world is None:
        local_world = world if all_local else 1
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
