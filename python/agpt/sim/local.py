"""The local checkpoint tier in the simulator: what it costs, from the state each device and each node holds.

A local save (agpt.train.localckpt) stalls training for the staging copy of each device's shard; in the
background each rank hashes and writes its shard, the node sends its shards to its partner and takes its ward's
(the node's network link), hashes and writes those; the step is complete (restorable) only then.  A relaunch in
the same job restores from the newest complete local step when it is at least as new as the global one: the
survivors read their own copy, a spare receives its shards from the partner; the slower path sets the stage.
A new job of the chain (a new allocation) starts from the global tier.  Every cost is bytes over a bandwidth
(the fault model's `costs`, each with its source), so it shrinks with the state per device as the nodes grow,
instead of one constant for every node count.  Failures are independent per node here: two partners lost
within one local interval (which falls back to the global tier) are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agpt import goodput, localtier
from agpt.sim.model import FaultModel

GB = 1e9
# The recovery clock's stages as the simulator knows them (agpt.goodput.STAGES, teardown folded into detection:
# the model's costs give detection and teardown as one figure for a crash).
STAGES = ("detection", "relaunch", "process start", "model build", "state restore", "first step")


@dataclass(kw_only=True, slots=True)
class Costs:
    """The tier's costs for one model at its node count (seconds, and GB per node)."""

    device_gb: float  # one rank's shard
    node_gb: float  # one node's shards
    stall_s: float  # the training thread's stall per local save
    write_s: float  # from the stall's end to the step complete on every node
    restore_s: float  # the state-restore stage of a relaunch from the local tier
    memory_gb: float  # the tier's peak memory per node (agpt.localtier.memory_per_node)


def costs(m: FaultModel) -> Costs:
    c = m.costs
    node_b = c.checkpoint_gb * GB / m.nodes
    dev_b = node_b / c.ranks_per_node
    stall = c.local_fixed_s + dev_b / (c.local_stage_gb_s * GB)
    hash_s = dev_b / (c.sha256_gb_s * GB)
    mem_s = dev_b / (c.host_mem_gb_s * GB)
    net_s = node_b / (c.network_gb_s * GB)
    write = 2 * (hash_s + mem_s) + net_s  # own shard, then the ward's copy (hashed on arrival, written)
    load = dev_b / (c.local_stage_gb_s * GB)  # the copy back to the device
    restore = (
        c.local_fixed_s + max(mem_s, net_s) + hash_s + load
    )  # own copy or the partner's, verified, loaded
    return Costs(device_gb=dev_b / GB, node_gb=node_b / GB, stall_s=stall, write_s=write, restore_s=restore,
                 memory_gb=localtier.memory_per_node(node_b, m.train.local_keep) / GB)  # fmt: skip


def summary(m: FaultModel, c: Costs) -> dict[str, float]:
    """What a result says of the tier: its interval, its costs, its memory per node."""
    return {"interval_s": m.train.local_interval_s, "interval_steps": m.train.local_interval,
            "stall_s": round(c.stall_s, 3), "write_s": round(c.write_s, 3), "restore_s": round(c.restore_s, 3),
            "state_gb_per_device": round(c.device_gb, 4), "memory_gb_per_node": round(c.memory_gb, 2)}  # fmt: skip


def daly_interval_s(m: FaultModel) -> float:
    """The local tier's interval as `agpt ckpt interval` recommends it: Daly's, for its own stall and the job's
    MTBF (every failure in a job is one the tier recovers from)."""
    return goodput.daly(costs(m).stall_s, m.job_mtbf_h * 3600.0)


def stages(m: FaultModel, fault: Any, launch: float, restore_s: float) -> dict[str, float]:
    """The recovery clock of FAULT when the attempt launched at LAUNCH comes back (restoring in RESTORE_S)."""
    detected = fault.detected_s or 0.0
    return {"detection": detected, "relaunch": launch - fault.time_s - detected,
            "process start": m.costs.launcher_start_s,
            "model build": m.costs.start_s(first=False, ranks=m.nodes * m.layout.ranks_per_node)
            - m.costs.launcher_start_s,
            "state restore": restore_s, "first step": m.train.step_s}  # fmt: skip


@dataclass(slots=True)
class Tier:
    """The tier's saves in the current job: (step, when complete)."""

    costs: Costs
    saves: list[tuple[int, float]] = field(default_factory=list)

    def reset(self) -> None:
        """A new job: a new allocation, whose nodes' memory holds nothing of the run."""
        self.saves.clear()

    def save(self, step: int, stalled_until: float) -> None:
        self.saves.append((step, stalled_until + self.costs.write_s))

    def lost_at(self, t: float) -> None:
        """The job's processes died at T: a save still being written is gone."""
        self.saves = [(s, at) for s, at in self.saves if at <= t]

    def newest(self, t: float) -> int | None:
        """The newest step complete by T."""
        done = [s for s, at in self.saves if at <= t]
        return max(done) if done else None
