"""The local checkpoint tier's rules: where each node keeps its shards, who holds whose copy, when a step counts.

The trainer (agpt.train.localckpt) writes and restores; `agpt check` sizes the memory; the simulator prices it.
They share these rules, so each is stated once.  Standard library only.

On each node, one private folder per run (agpt.nodelocal's rule: `BASE/agpt-UID/ckpt.TAG.HOST`, BASE from
checkpoint.local_dir, else SITE_LOCAL_CKPT_DIR, else /dev/shm), holding per saved step:
  step-N/rank-R.shard     rank R's shard of the full training state (its own ranks', and its ward's: the replicas)
  step-N/.node-complete   the node's marker (`marker_record`): written by the node's first rank after every shard
                          of its own ranks AND the replica of its ward node are written; it pins the run, the job,
                          the world size and the layout, and the sha256 the owning rank computed of every shard.
A shard file (`pack_header`): 8 bytes of magic, a little-endian u64 header length, a JSON header (pins, step,
rank, each tensor's key, dtype, shape, offset and length; the non-tensor values) padded to 64 bytes, then the raw
tensor bytes.  JSON, not pickle: a file is hashed, then parsed, and nothing in it runs.

The partner (`partners`): node k's replica goes to the node `shift` places after it in a ring that lists the nodes
grouped by failure domain (SITE_FAILURE_DOMAIN_RE's first group of each host name; no setting: every node is
its own domain), where `shift` is the largest domain's size: a cyclic shift, so every node holds exactly one
replica, and when no domain holds more than half of the nodes, never one of its own domain.

Complete across the job: every node's marker for the step (the saver learns it from every rank and only then
prunes older steps).  Restorable (`choose`): after a failure some nodes are gone; a step is restorable when every
rank's shard is held, with a marker of this run, job, world size and layout, by a node of the new launch: a rank
reads its own node's copy when it has one, else the first holder's (the partner that kept the replica).
"""

from __future__ import annotations

import contextlib
import json
import re
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agpt import nodelocal, rundir
from agpt.ckptdir import step_of

KIND = "ckpt"  # the folder's kind: agpt-UID/ckpt.TAG.HOST
FORMAT = 1
NODE_MARKER = ".node-complete"
SHARD_SUFFIX = ".shard"
MAGIC = b"AGPTLCK1"
ALIGN = 64
SETTING_ENV = "SITE_LOCAL_CKPT_DIR"  # the site profile's key, exported to the job's environment
DOMAIN_ENV = "SITE_FAILURE_DOMAIN_RE"


def node_folder(root: Path, run_dir: str | Path, host: str) -> Path:
    """This run's folder on node HOST under the node-local base ROOT."""
    return nodelocal.folder(root, KIND, run_dir, host)


def shard_name(rank: int) -> str:
    return f"rank-{rank}{SHARD_SUFFIX}"


def layout_name(dp: int, tp: int) -> str:
    return f"dp{dp}xtp{tp}"


def pins(*, run: str, job: str, world_size: int, layout: str) -> dict[str, Any]:
    """What a shard and a marker must match to be loaded: run (agpt.nodelocal.run_tag), job, world, layout."""
    return {"format": FORMAT, "run": run, "job": job, "world_size": world_size, "layout": layout}


# -- who holds whose copy -------------------------------------------------------------------------------------
def domain(host: str, regex: str) -> str:
    """HOST's failure domain: REGEX's first group (or its match) on the name; the host itself without one."""
    if regex:
        m = re.search(regex, host)
        if m:
            return m.group(1) if m.groups() and m.group(1) is not None else m.group(0)
    return host


def partners(hosts: list[str], domain_re: str = "") -> list[int]:
    """partner[k]: the index (into HOSTS, the nodes in rank order) of the node holding node k's replica."""
    n = len(hosts)
    if n < 2:
        return [0] * n
    doms = [domain(h, domain_re) for h in hosts]
    size: dict[str, int] = {}
    for d in doms:
        size[d] = size.get(d, 0) + 1
    # The ring: rank order, grouped by domain when the site names domains.
    order = sorted(range(n), key=lambda k: (doms[k], k)) if domain_re else list(range(n))
    shift = max(size.values()) % n or 1
    out = [0] * n
    for pos, k in enumerate(order):
        out[k] = order[(pos + shift) % n]
    return out


# -- markers --------------------------------------------------------------------------------------------------
def marker_record(step: int, *, host: str, pinned: dict[str, Any], shards: dict[int, dict[str, Any]]) -> str:
    """A node's `.node-complete`: the step, the node, the pins and {rank: {sha256, bytes, owner}} it holds."""
    rec = {"step": step, "time": round(time.time(), 3), "host": host, **pinned,
           "shards": {str(r): v for r, v in sorted(shards.items())}}  # fmt: skip
    return json.dumps(rec, sort_keys=True) + "\n"


def read_marker(path: Path) -> dict[str, Any] | None:
    """The marker of step directory PATH, None when missing or malformed (then the step is not held)."""
    try:
        rec = rundir.read_record(path / NODE_MARKER)
    except (OSError, ValueError, RecursionError):
        return None
    if (
        not isinstance(rec, dict)
        or type(rec.get("step")) is not int
        or not isinstance(rec.get("shards"), dict)
    ):
        return None
    return rec


def step_dirs(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of every step-N directory in a node folder, oldest first."""
    out = []
    with contextlib.suppress(OSError):
        for p in folder.iterdir():
            n = step_of(p.name)
            if n is not None and p.is_dir() and not p.is_symlink():
                out.append((n, p))
    return sorted(out)


@dataclass(kw_only=True, slots=True)
class Holding:
    """What one node of the new launch holds of the local tier: {step: {rank: sha256}}, and why it holds less."""

    host: str
    steps: dict[int, dict[int, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def inventory(folder: Path, host: str, pinned: dict[str, Any]) -> Holding:
    """The steps node HOST holds for this run: each marked step whose pins are PINNED (others noted, unused)."""
    held = Holding(host=host)
    for step, path in step_dirs(folder):
        rec = read_marker(path)
        if rec is None:
            continue
        if rec.get("step") != step:
            held.notes.append(f"{host}: {path}: its marker names step {rec.get('step')}; not used")
            continue
        off = [k for k, v in pinned.items() if rec.get(k) != v]
        if off:
            what = ", ".join(f"{k} {rec.get(k)!r} (now {pinned[k]!r})" for k in off)
            held.notes.append(f"{host}: local step {step} is of another {'/'.join(off)}: {what}; not used")
            continue
        shards: dict[int, str] = {}
        for r, v in rec["shards"].items():
            if str(r).isdigit() and isinstance(v, dict) and isinstance(v.get("sha256"), str):
                shards[int(r)] = v["sha256"]
        held.steps[step] = shards
    return held


@dataclass(kw_only=True, slots=True)
class Choice:
    """The step to restore and, per rank, the node (index into the new launch's nodes) that holds its shard."""

    step: int
    holder: list[int]
    sha256: list[str]
    from_partner: list[int]  # ranks whose shard comes from another node than their own


def choose(holdings: list[Holding], rank_node: list[int]) -> tuple[Choice | None, list[str]]:
    """The newest step every rank can restore (the module's rule), and why each newer step cannot."""
    world = len(rank_node)
    steps = sorted({s for h in holdings for s in h.steps}, reverse=True)
    why: list[str] = []
    for step in steps:
        holder: list[int] = []
        sha: list[str] = []
        for r in range(world):
            have = [k for k, h in enumerate(holdings) if r in h.steps.get(step, {})]
            if not have:
                break
            k = rank_node[r] if rank_node[r] in have else have[0]
            holder.append(k)
            sha.append(holdings[k].steps[step][r])
        else:
            moved = [r for r in range(world) if holder[r] != rank_node[r]]
            return Choice(step=step, holder=holder, sha256=sha, from_partner=moved), why
        why.append(f"local step {step}: rank {len(holder)}'s shard is on no node of this launch "
                   "(its node and the partner holding its copy are both gone)")  # fmt: skip
    return None, why


# -- memory ---------------------------------------------------------------------------------------------------
# The tier lives in a tmpfs (/dev/shm), whose default size is "half of your physical RAM without swap" (the Linux
# kernel's Documentation/filesystems/tmpfs.rst): the share of a node's memory it may take.
TMPFS_SHARE = 0.5


def memory_per_node(node_state_bytes: float, keep: int) -> float:
    """Peak node memory the tier holds for a node whose ranks' shards weigh NODE_STATE_BYTES: the staging copy of
    a save, and while it is written, KEEP complete steps plus the new one, each its own shards and a replica."""
    return node_state_bytes * (1 + 2 * (keep + 1))


# -- shard files ----------------------------------------------------------------------------------------------
def pack_header(header: dict[str, Any], size: int = 0) -> bytes:
    """Magic, length and JSON header, padded with spaces to SIZE bytes at least (room for a later header of the
    same layout) and so the data starts at a multiple of ALIGN."""
    raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    total = max(len(MAGIC) + 8 + len(raw), size)
    total += -total % ALIGN
    raw += b" " * (total - len(MAGIC) - 8 - len(raw))
    return MAGIC + struct.pack("<Q", len(raw)) + raw


def unpack_header(buf: bytes | bytearray | memoryview) -> tuple[dict[str, Any], int]:
    """(header, where the data starts) of a shard in BUF; ValueError when it is not one."""
    view = memoryview(buf)
    if bytes(view[: len(MAGIC)]) != MAGIC or len(view) < len(MAGIC) + 8:
        raise ValueError("not a local-tier shard (bad magic)")
    (n,) = struct.unpack("<Q", view[len(MAGIC) : len(MAGIC) + 8])
    start = len(MAGIC) + 8 + n
    if start > len(view):
        raise ValueError(f"header of {n} bytes runs past the end of the file")
    header = json.loads(bytes(view[len(MAGIC) + 8 : start]))
    if not isinstance(header, dict) or not isinstance(header.get("tensors"), list):
        raise ValueError("header is not a local-tier header")
    return header, start
