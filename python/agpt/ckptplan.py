"""A job's checkpoint plan: the node-local tier on or off, and how often each tier saves, decided when the job starts.

One home for these decisions.  `agpt check` prints them (and with `--run-dir` writes RUN_DIR/checkpoint_plan.json,
what the job script's check does at every job start); the trainer applies the plan's values to the keys its config
does not set and logs the decision at start; `agpt sim` runs the same `decide` for its "as shipped" rows.

- The local tier (docs/checkpoints.md) is on when its peak memory per node (agpt.localtier.memory_per_node) fits in
  the tmpfs share of the node's memory (SITE_HOST_MEM_GIB), else off with the reason.  A profile that sets no host
  memory gets it off (unknown memory is not assumed to fit) and says so.  Its interval is Daly's for its own stall
  (a staging copy of one device's shard: LOCAL_FIXED_S + bytes / LOCAL_STAGE_GB_S) and the job's MTBF, within
  LOCAL_BOUNDS_S.
- The global interval is Daly's for the global save's stall and the job's MTBF (SITE_NODE_MTBF_H over the nodes),
  within GLOBAL_BOUNDS_S.  The stall is the previous job's measured one when the run directory has it (the largest
  `stall_ms=` of its newest attempt log, agpt.goodput), else the AuroraGPT talks' figure.  With the local tier on, every failure inside a job restores from node memory, so the global tier
  only covers the loss of a whole job, and saves at the upper bound.
- A key the config sets (`checkpoint.interval`, `interval_s`, `local_interval`, `local_interval_s`) is obeyed; the
  plan says where it differs from the recommendation.

Young (1974), Daly (2006): agpt.goodput.  Standard library only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agpt import goodput, localtier, rundir, safewrite

FILE = "checkpoint_plan.json"  # RUN_DIR/checkpoint_plan.json: `agpt check --run-dir` writes it, the trainer reads it
FORMAT = 1
# A node's mean time between failures when the profile gives none (SITE_NODE_MTBF_H unset or not positive): the
# AuroraGPT talks ("each node ... fails on average once a year"); Llama 3's 54-day snapshot (419 interruptions on
# 2,048 nodes, arXiv:2407.21783 section 3.3.4) gives 6,335 h, the same order.
NODE_MTBF_H = 8760.0
# The global tier's interval: at least 5 minutes (a save more often than that is rarely worth its write bandwidth on a
# shared filesystem), at most an hour (what a whole job lost to a failure the local tier cannot cover redoes).
GLOBAL_BOUNDS_S = (300.0, 3600.0)
# The local tier's interval: at least 10 s (its saves are asynchronous memory copies, each still a stall), at most
# 10 minutes.
LOCAL_BOUNDS_S = (10.0, 600.0)
# The local save's stall: a fixed part (copy launches, one synchronize) and the staging copy of one device's shard.
LOCAL_FIXED_S = 0.02  # a 20B rank's ~1,500 tensors at ~10 us per asynchronous copy launch, then a synchronize
LOCAL_STAGE_GB_S = 8.8  # measured: tests/bench/bench_localckpt.py --part stall (0.25 GiB in 30.6 ms, 2 cores)
# The global save's stall until a job of the run measured one: the AuroraGPT talks' 20B figures (an async save
# stalls ~5.4 s, 1.7 s staging and 3.7 s draining; a blocking one 23.6 s).  A site's aggregate peak bandwidth
# (SITE_FS_BW_GBPS) is no estimate of it: one job sees a share of it, and an async save's stall is not the write.
FALLBACK_STALL_S = {True: 5.4, False: 23.6}
KEYS = ("interval", "interval_s", "local_interval", "local_interval_s")  # the checkpoint keys a plan sets


@dataclass(kw_only=True, slots=True)
class Facts:
    """What the decision reads: the job's shape, the site's profile, the config, the run directory."""

    nodes: int
    ranks_per_node: int
    state_bytes: float  # the whole training state (parameters and AdamW moments in the master dtype)
    async_save: bool = True
    local_keep: int = 2
    host_mem_gib: float = 0.0  # SITE_HOST_MEM_GIB (0: unknown)
    node_mtbf_h: float = 0.0  # SITE_NODE_MTBF_H (0 or less: NODE_MTBF_H)
    measured_stall_s: float | None = None  # the previous job's save stall (agpt.goodput's reading of the run)
    # the checkpoint keys the config sets, with their values
    pinned: Mapping[str, float] = field(default_factory=dict)
    profile: str = "the site profile"


@dataclass(kw_only=True, slots=True)
class Plan:
    local: bool
    local_interval_s: float  # the recommendation (0 when off)
    local_memory_gib: float  # the tier's peak memory per node
    local_why: str  # one line: on, with what it takes, or off and why
    interval_s: float  # the global tier's recommended interval
    interval_why: str
    job_mtbf_h: float
    stall_s: float
    stall_source: str  # "measured" or what it was estimated from
    values: dict[str, float]  # the checkpoint keys the trainer applies (the pinned ones left out)
    notes: list[str]  # fallbacks taken and pinned keys that differ from the recommendation

    def lines(self) -> list[str]:
        return [f"local tier: {self.local_why}", f"global interval: {self.interval_why}", *self.notes]

    def record(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}


def local_stall_s(device_bytes: float) -> float:
    """The local save's stall for one device's shard."""
    return LOCAL_FIXED_S + device_bytes / (LOCAL_STAGE_GB_S * 1e9)


def _clamp(x: float, bounds: tuple[float, float]) -> float:
    return min(max(x, bounds[0]), bounds[1])


def _fmt(s: float) -> str:
    return goodput.fmt_s(s)


def decide(f: Facts) -> Plan:
    """The plan for these facts (pure: the same facts, the same plan)."""
    notes: list[str] = []
    mtbf_h = f.node_mtbf_h
    if not (mtbf_h > 0 and math.isfinite(mtbf_h)):
        notes.append(f"{f.profile} sets no positive SITE_NODE_MTBF_H: a node MTBF of {NODE_MTBF_H:g} h assumed "
                     "(the AuroraGPT talks: once a year)")  # fmt: skip
        mtbf_h = NODE_MTBF_H
    nodes = max(1, f.nodes)
    job_mtbf_s = mtbf_h * 3600.0 / nodes
    node_b = f.state_bytes / nodes
    dev_b = node_b / max(1, f.ranks_per_node)
    mem = localtier.memory_per_node(node_b, f.local_keep)
    gib = 1024**3
    # the local tier
    pinned_local = {k: f.pinned[k] for k in ("local_interval", "local_interval_s") if k in f.pinned}
    lstall = local_stall_s(dev_b)
    l_rec = _clamp(goodput.daly(lstall, job_mtbf_s), LOCAL_BOUNDS_S)
    cap = f.host_mem_gib * gib * localtier.TMPFS_SHARE
    if f.host_mem_gib <= 0:
        fits = False
        why = f"{f.profile} sets no host memory (SITE_HOST_MEM_GIB): the tier needs {mem / gib:.3g} GiB per node"
    elif mem > cap:
        fits, why = False, (f"needs {mem / gib:.3g} GiB per node, more than {localtier.TMPFS_SHARE:.0%} of "
                            f"{f.host_mem_gib:g} GiB (SITE_HOST_MEM_GIB) that a tmpfs holds")  # fmt: skip
    else:
        fits, why = True, ""
    if pinned_local:
        on = any(v > 0 for v in pinned_local.values())
        set_ = ", ".join(f"checkpoint.{k}: {v:g}" for k, v in pinned_local.items())
        local_why = f"{'on' if on else 'off'} (the config sets {set_})" + (
            f", {mem / gib:.3g} GiB per node at most ({node_b / gib:.2g} GiB of state per node, "
            f"checkpoint.local_keep {f.local_keep})" if on else "")  # fmt: skip
        if on and f.host_mem_gib <= 0:
            notes.append(f"{f.profile} sets no host memory (SITE_HOST_MEM_GIB): the tier's {mem / gib:.3g} GiB per "
                         "node is not screened")  # fmt: skip
        rec = f"a save every {_fmt(l_rec)}" if fits else "off"
        if on != fits or (on and pinned_local.get("local_interval_s", l_rec) != l_rec):
            notes.append(f"checkpoint.local_interval*: differs from the recommended ({rec})")
    else:
        on = fits
        local_why = (f"on, a save every {_fmt(l_rec)} (Daly for a {lstall * 1000:.3g} ms stall, job MTBF "
                     f"{_fmt(job_mtbf_s)}), {mem / gib:.3g} GiB per node of {f.host_mem_gib:g} GiB" if fits
                     else f"off: {why}")  # fmt: skip
    # the global tier
    if f.measured_stall_s is not None and f.measured_stall_s > 0:
        stall, source = f.measured_stall_s, "measured by the previous job"
    else:
        stall = FALLBACK_STALL_S[f.async_save]
        source = "assumed until a job measures it: the AuroraGPT talks' 20B"
    daly = goodput.daly(stall, job_mtbf_s)
    g_rec = GLOBAL_BOUNDS_S[1] if on else _clamp(daly, GLOBAL_BOUNDS_S)
    basis = f"Daly {_fmt(daly)} for a {stall:.3g} s stall, {source}; job MTBF {_fmt(job_mtbf_s)}"
    if on:
        why_g = "the upper bound: the local tier covers the failures inside a job"
    elif daly != g_rec:
        why_g = f"{basis}, within {GLOBAL_BOUNDS_S[0]:g}-{GLOBAL_BOUNDS_S[1]:g} s"
    else:
        why_g = basis
    pinned_global = {k: f.pinned[k] for k in ("interval", "interval_s") if k in f.pinned}
    if pinned_global:
        set_ = ", ".join(f"checkpoint.{k}: {v:g}" for k, v in pinned_global.items())
        interval_why = f"the config sets {set_}"
        if pinned_global.get("interval_s", 0) != g_rec or pinned_global.get("interval", 0):
            notes.append(f"checkpoint.interval*: differs from the recommended every {_fmt(g_rec)}" +
                         (" (the local tier's upper bound)" if on else ""))  # fmt: skip
    else:
        interval_why = f"every {_fmt(g_rec)} ({why_g})"
    if on or pinned_global:
        notes.append(f"global tier: {basis}")
    values: dict[str, float] = {}
    if not pinned_global:
        values.update(interval=0, interval_s=round(g_rec, 1))
    if not pinned_local:
        values.update(local_interval=0, local_interval_s=round(l_rec, 1) if on else 0.0)
    return Plan(local=on, local_interval_s=round(l_rec, 1) if fits else 0.0, local_memory_gib=round(mem / gib, 3),
                local_why=local_why, interval_s=round(g_rec, 1), interval_why=interval_why,
                job_mtbf_h=round(job_mtbf_s / 3600.0, 4), stall_s=round(stall, 3), stall_source=source,
                values=values, notes=notes)  # fmt: skip


def measured_stall_s(run_dir: Path) -> float | None:
    """The previous job's save stall, as `agpt failover report` reads it: the largest `stall_ms=` in the tail of the
    newest attempt log that has one (agpt.goodput)."""
    folder = Path(run_dir) / "attempts"
    try:
        logs = sorted((p for p in folder.glob("*.log") if p.is_file()), key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    return goodput.stall_s(Path(run_dir), [str(p) for p in logs[-8:]])


def write(run_dir: Path, plan: Plan) -> Path:
    path = Path(run_dir) / FILE
    safewrite.replace(path, json.dumps(plan.record(), indent=1) + "\n")
    return path


def read_values(run_dir: Path) -> tuple[dict[str, float], list[str]] | None:
    """The plan's checkpoint values and its lines, from RUN_DIR/checkpoint_plan.json; None when there is none; a
    plan that cannot be read is None too (the config's values then stand), with the reason as its one line."""
    path = Path(run_dir) / FILE
    try:
        rec = rundir.read_record(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as e:
        return {}, [f"checkpoint plan: {path} unreadable ({e.__class__.__name__}): the config's values stand"]
    vals = rec.get("values") if isinstance(rec, dict) else None
    if not isinstance(vals, dict) or rec.get("format") != FORMAT:
        return {}, [f"checkpoint plan: {path} is not a plan of format {FORMAT}: the config's values stand"]
    out: dict[str, float] = {}
    for k, v in vals.items():
        if (
            k in KEYS
            and isinstance(v, int | float)
            and not isinstance(v, bool)
            and math.isfinite(v)
            and v >= 0
        ):
            out[k] = v
    lines = [f"checkpoint plan: local tier {rec.get('local_why', '?')}", f"checkpoint plan: global interval "
             f"{rec.get('interval_why', '?')}"]  # fmt: skip
    return out, lines


def apply(ck: Any, pinned: set[str], run_dir: Path | None) -> list[str]:
    """Set the plan's values (RUN_DIR/checkpoint_plan.json) on the checkpoint config CK, leaving the keys a source
    set (PINNED: `checkpoint.KEY`) as they are; the lines the trainer logs at start (none without a plan)."""
    got = read_values(run_dir) if run_dir is not None else None
    if got is None:
        return []
    values, lines = got
    kept: list[str] = []
    for pair in (
        ("interval", "interval_s"),
        ("local_interval", "local_interval_s"),
    ):  # a tier's two rules as one
        mine = [k for k in pair if f"checkpoint.{k}" in pinned]
        if mine:
            kept += mine
            continue
        for k in pair:
            if k in values:
                setattr(ck, k, int(values[k]) if k in ("interval", "local_interval") else float(values[k]))
    if kept:
        lines.append("checkpoint plan: the config's " + ", ".join(f"checkpoint.{k}" for k in kept) + " kept")
    return lines
