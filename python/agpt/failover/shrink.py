"""Keep training on fewer nodes when the spares run out (FAILOVER_SHRINK): the node counts a job can use, and
the one the failover loop picks.  Standard library only (the recovery path).

The facts are RUN_DIR/layout.json, written by `agpt check --run-dir` when a job starts (the generated job
scripts run it before the first launch): the job's nodes, ranks per node, tensor-parallel degree, global and
micro batch, and `agpt check`'s memory model per device split into what FSDP shards over every rank and the
rest.  Without it the loop cannot show that the global batch is kept, so it does not shrink.

For n nodes of R ranks with tensor-parallel degree T, dp = n·R/T data-parallel ranks:
- T divides R: a tensor-parallel group never spans nodes (true of every n or of none);
- the global batch G stays, so a step consumes the samples [s·G, (s+1)·G) and the learning-rate schedule is
  the same: each data rank holds G/dp samples, where dp does not divide G some ranks one more than the others
  (`train.uneven_batch`, which the loop sets for its attempts), in ceil(ceil(G/dp) / micro_batch) micro-steps;
- dp <= G: a data rank with no sample adds nothing;
- state / (n·R) + the rest fits the device's usable memory (when the site gives it).
A step lasts as long as its busiest rank, so the throughput against the job's full size is
micro-steps(full) / micro-steps(n).  FAILOVER_MIN_NODES (a count, or a fraction of the job's nodes) bounds it
in nodes' worth: throughput x the job's nodes >= the floor, which for a batch n divides is n >= the floor.
Of the counts up to the healthy hosts that qualify, the loop takes the best throughput and of those the fewest
nodes: the healthy hosts left over become spares, so the next failure is a swap rather than another shrink.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agpt import rundir, safewrite
from agpt.errors import BadInput

FORMAT = "agpt-layout/1"
GIB = 1024**3
# FAILOVER_MIN_NODES: 0.9 of the job's throughput, in nodes' worth.  A shrink holds the whole allocation for
# less work: at 0.5 the simulated 20B run without spares lost 2 points of effective ratio at 512 nodes and 18 at
# 4,096, where a node lost turns a step of 2 micro-steps into 3 (docs/goodput.md, "The shrink does not pay").
MIN_NODES = "0.9"
_COUNT = re.compile(r"[0-9]+")


def min_nodes(spec: Any, full: int) -> float:
    """FAILOVER_MIN_NODES as nodes for a job of `full` nodes: a whole number is a count, a number with a point
    in (0, 1] a fraction ('' is the default).  BadInput names the setting."""
    text = str(spec).strip() or MIN_NODES
    if _COUNT.fullmatch(text) and 1 <= int(text) <= 10**7:
        return float(int(text))
    try:
        frac = float(text) if "." in text else math.nan
    except ValueError:
        frac = math.nan
    if not 0 < frac <= 1:  # NaN fails too
        raise BadInput(
            f"FAILOVER_MIN_NODES: a count of nodes (3) or a fraction of the job's nodes (0.75), got {spec!r}"
        )
    return frac * full


@dataclass(kw_only=True, slots=True)
class Layout:
    """What RUN_DIR/layout.json holds (docs/contract.md)."""

    nodes: int
    ranks_per_node: int
    tp: int = 1
    global_batch: int
    micro_batch: int
    state_bytes: float = 0.0  # bytes of state FSDP shards over every rank (per device: / world)
    fixed_bytes: float = 0.0  # bytes per device whatever the world size (working set, activations)
    usable_bytes: float = 0.0  # the device's memory less the headroom; 0: unknown, not checked
    config: str = ""  # the trainer config the figures are of
    site: str = ""

    def __post_init__(self) -> None:
        for name in ("nodes", "ranks_per_node", "tp", "global_batch", "micro_batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 10**9:
                raise BadInput(f"{name}: must be a whole number from 1 to 1000000000, got {v!r}")
        for name in ("state_bytes", "fixed_bytes", "usable_bytes"):
            v = rundir.num(getattr(self, name))
            if v is None or v < 0:
                raise BadInput(f"memory.{name}: must be a number of bytes >= 0, got {getattr(self, name)!r}")
            setattr(self, name, v)

    def as_record(self) -> dict[str, Any]:
        d = asdict(self)
        mem = {k: d.pop(k) for k in ("state_bytes", "fixed_bytes", "usable_bytes")}
        return {"format": FORMAT, **d, "memory": mem, "time": round(time.time(), 3)}


def write_layout(run_dir: Path, lay: Layout) -> Path:
    """RUN_DIR/layout.json, replaced in one step."""
    path = Path(run_dir) / rundir.LAYOUT
    safewrite.replace(path, json.dumps(lay.as_record(), indent=1) + "\n")
    return path


def read_layout(run_dir: Path) -> Layout:
    """The job's layout; BadInput saying why there is none (missing, unreadable, a bad field)."""
    path = Path(run_dir) / rundir.LAYOUT
    try:
        data = rundir.read_record(path)
    except FileNotFoundError:
        raise BadInput(f"no {path} (`agpt check --run-dir` writes it when a job starts)") from None
    except (OSError, ValueError, RecursionError) as e:
        raise BadInput(f"{path}: unreadable ({e.__class__.__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BadInput(f"{path}: not a {FORMAT} record")
    mem: dict[str, Any] = data["memory"] if isinstance(data.get("memory"), dict) else {}
    sizes: dict[str, Any] = {
        k: data.get(k) for k in ("nodes", "ranks_per_node", "tp", "global_batch", "micro_batch")
    }
    memory: dict[str, Any] = {k: mem.get(k, 0.0) for k in ("state_bytes", "fixed_bytes", "usable_bytes")}
    try:
        return Layout(
            **sizes, **memory, config=str(data.get("config") or ""), site=str(data.get("site") or "")
        )
    except BadInput as e:
        raise BadInput(f"{path}: {e}") from None


@dataclass(kw_only=True, slots=True)
class Fit:
    """The job on `nodes` nodes: its data ranks, micro-steps per step, bytes per device, throughput against the
    job's full size; `refused` says why it cannot run there, with the numbers."""

    nodes: int
    dp: int
    per_rank: int  # samples the busiest data rank holds
    micro_steps: int
    exact: bool  # micro_batch x dp divides the global batch (no uneven split)
    bytes_per_device: float
    throughput: float
    refused: str = ""


def _steps(lay: Layout, nodes: int) -> tuple[int, int, int]:
    """(dp, samples of the busiest data rank, micro-steps) on `nodes` nodes."""
    dp = max(1, nodes * lay.ranks_per_node // lay.tp)
    per = -(-lay.global_batch // dp)
    return dp, per, -(-per // lay.micro_batch)


def fit(lay: Layout, nodes: int) -> Fit:
    world = nodes * lay.ranks_per_node
    dp, per, steps = _steps(lay, nodes)
    full = _steps(lay, lay.nodes)[2]
    mem = lay.state_bytes / world + lay.fixed_bytes
    f = Fit(nodes=nodes, dp=dp, per_rank=per, micro_steps=steps, exact=lay.global_batch % (lay.micro_batch * dp) == 0,
            bytes_per_device=mem, throughput=full / steps)  # fmt: skip
    if lay.ranks_per_node % lay.tp:
        f.refused = (f"parallel.tp {lay.tp} does not divide the {lay.ranks_per_node} ranks per node (a tensor-"
                     "parallel group would span nodes)")  # fmt: skip
    elif dp > lay.global_batch:
        f.refused = (
            f"{dp} data-parallel ranks for a global batch of {lay.global_batch}: some would hold no sample"
        )
    elif lay.usable_bytes and mem > lay.usable_bytes:
        f.refused = (f"{mem / GIB:.1f} GiB per device (state {lay.state_bytes / world / GIB:.1f} + the rest "
                     f"{lay.fixed_bytes / GIB:.1f}) > {lay.usable_bytes / GIB:.1f} GiB usable")  # fmt: skip
    return f


def describe(f: Fit, lay: Layout) -> str:
    """`4 micro-steps (global batch 12 = 3 data ranks x 4), 0.75 of full throughput`."""
    split = (f"{f.dp} data ranks x {lay.global_batch // f.dp}" if f.exact or lay.global_batch % f.dp == 0
             else f"{f.dp} data ranks x {f.per_rank - 1}-{f.per_rank}, uneven")  # fmt: skip
    return (f"{f.micro_steps} micro-step(s) (global batch {lay.global_batch} = {split}), "
            f"{f.throughput:.2f} of full throughput")  # fmt: skip


@dataclass(kw_only=True, slots=True)
class Choice:
    """The count the loop runs on (None: none qualifies) and the line that says what it chose, or why not."""

    fit: Fit | None
    reason: str
    full: Fit | None = None


def choose(lay: Layout, healthy: int, floor_spec: Any) -> Choice:
    """Of the counts from the floor (FAILOVER_MIN_NODES) up to `healthy` (at most the job's nodes less one), the
    best throughput, and of those the fewest nodes; Choice.fit None with the numbers when none qualifies."""
    full = fit(lay, lay.nodes)
    floor = min_nodes(floor_spec, lay.nodes)
    top = min(healthy, lay.nodes - 1)
    floor_text = f"FAILOVER_MIN_NODES={str(floor_spec).strip() or MIN_NODES} ({floor:.4g} of {lay.nodes})"
    if top < 1 or top < floor - 1e-9:
        return Choice(fit=None, full=full, reason=f"{healthy} healthy node(s) < {floor_text}")
    best: Fit | None = None
    first: Fit | None = None
    for n in range(top, max(1, math.ceil(floor - 1e-9)) - 1, -1):
        f = fit(lay, n)
        first = first or f
        if f.refused or f.throughput * lay.nodes < floor - 1e-9:
            continue
        if best is None or f.micro_steps <= best.micro_steps:
            best = f
    if best is None:
        assert first is not None
        why = first.refused or (f"{first.throughput:.2f} of full throughput ({first.micro_steps} micro-steps for "
                                f"{full.micro_steps}{', uneven' if not first.exact else ''}), "
                                f"{first.throughput * lay.nodes:.1f} nodes' worth < {floor_text}")  # fmt: skip
        return Choice(fit=None, full=full, reason=f"{first.nodes} node(s): {why}")
    kept = f"global batch {lay.global_batch} kept"
    fewer = f"; {healthy - best.nodes} healthy host(s) kept as spares" if best.nodes < healthy else ""
    return Choice(
        fit=best, full=full, reason=f"{kept}: {describe(best, lay)} (full: {full.micro_steps}){fewer}"
    )


def counts(lay: Layout, floor_spec: Any) -> list[Fit]:
    """Every count below the job's from its nodes less one down to the floor (or 1), as `agpt check` lists them."""
    floor = min_nodes(floor_spec, lay.nodes)
    return [fit(lay, n) for n in range(lay.nodes - 1, max(1, math.ceil(floor - 1e-9)) - 1, -1)]


@dataclass(kw_only=True, slots=True)
class Shrink:
    """The relaunch on fewer hosts: the spares that replace named hosts, the healthy hosts put back as spares."""

    swap_in: list[str]
    to_spare: list[str]
    before: int
    after: int
    full: int
    fit: Fit
    full_steps: int
    reason: str
    record: dict[str, Any] = field(default_factory=dict)


def plan(
    lay: Layout, *, active: Sequence[str], spare: Sequence[str], named: Sequence[str], floor_spec: Any
) -> Shrink | str:
    """The shrink when the named hosts outnumber the spares: every spare swapped in, the named hosts left go,
    and healthy hosts from the end of the rank order become spares when fewer nodes run as fast.  A string
    (the numbers) when the job cannot shrink."""
    if len(active) > lay.nodes:
        return (f"{rundir.LAYOUT} is for {lay.nodes} node(s) but {len(active)} are active: written for another "
                "job (`agpt check --run-dir` at this size rewrites it)")  # fmt: skip
    ins = list(spare[: len(named)])
    repl = dict(zip(named, ins, strict=False))
    survivors = [repl.get(h, h) for h in active if h in repl or h not in named]
    c = choose(lay, len(survivors), floor_spec)
    if c.fit is None or c.full is None:
        return c.reason
    n = c.fit.nodes
    hosts = survivors[:n]
    to_spare = [h for h in survivors[n:] if h not in spare]  # a spare that would go straight back stays one
    sh = Shrink(swap_in=[h for h in ins if h in hosts], to_spare=to_spare, before=len(active), after=n,
                full=lay.nodes, fit=c.fit, full_steps=c.full.micro_steps, reason=c.reason)  # fmt: skip
    sh.record = {
        "nodes_before": sh.before,
        "nodes_after": n,
        "nodes_full": lay.nodes,
        "hosts": hosts,
        "to_spare": to_spare,
        "global_batch": lay.global_batch,
        "micro_steps_full": sh.full_steps,
        "micro_steps": c.fit.micro_steps,
        "uneven": not c.fit.exact,
        "throughput": round(c.fit.throughput, 4),
    }
    return sh


def summary(lay: Layout, floor_spec: Any) -> list[str]:
    """`agpt check`'s shrink lines: what one lost node with no spare leads to, and the counts the job can run on
    grouped by throughput (largest first)."""
    floor = min_nodes(floor_spec, lay.nodes)
    spec = f"FAILOVER_MIN_NODES={str(floor_spec).strip() or MIN_NODES}"
    groups: list[list[Any]] = []  # [largest, smallest, fit]
    refused = ""
    for f in counts(lay, floor_spec):
        if f.refused:
            refused = refused or f"{f.nodes} node(s): {f.refused}"
        elif f.throughput * lay.nodes >= floor - 1e-9:
            last = groups[-1] if groups else None
            if (
                last
                and last[1] == f.nodes + 1
                and (last[2].micro_steps, last[2].exact) == (f.micro_steps, f.exact)
            ):
                last[1] = f.nodes
            else:
                groups.append([f.nodes, f.nodes, f])
    one = choose(lay, lay.nodes - 1, floor_spec)
    if one.fit is None:
        return [f"no shrink: {one.reason}"]
    f = one.fit
    lines = [
        f"one node lost with no spare: {f.nodes} node(s) at {f.throughput:.2f} of full throughput ("
        f"{f.micro_steps} micro-steps{', uneven' if not f.exact else ''}); {spec} ({floor:.4g} nodes' worth)"
    ]
    shown = [
        f"{a}{'' if a == b else f'-{b}'}: {g.throughput:.2f}{'u' if not g.exact else ''}"
        for a, b, g in groups
    ]
    line = "runs on "
    for i, part in enumerate(shown):
        if len(line) + len(part) > 110:
            line += f"+{len(shown) - i} more"
            break
        line += part + ("" if i == len(shown) - 1 else ", ")
    lines.append(line + " (nodes: throughput; u: uneven split)")
    if refused:
        lines.append(refused)
    return lines


@dataclass(kw_only=True, slots=True)
class JobNodes:
    """One job's node counts from events.jsonl: what it started on, what it ended on, its shrinks, and the time
    it trained on fewer nodes with the throughput that cost (the time x (1 - the planned throughput))."""

    jobid: str
    start: int | None = None
    end: int | None = None
    shrinks: list[dict[str, Any]] = field(default_factory=list)
    shrunk_s: float = 0.0
    cost_s: float = 0.0

    @property
    def text(self) -> str:
        """`4`, `4->3`, or `?`."""
        if self.start is None:
            return "?"
        return str(self.start) if self.end in (None, self.start) else f"{self.start}->{self.end}"

    def as_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "shrinks": len(self.shrinks),
                "shrunk_s": round(self.shrunk_s, 1), "cost_s": round(self.cost_s, 1)}  # fmt: skip


def history(events: Sequence[dict[str, Any]]) -> dict[str, JobNodes]:
    """Per job, in order of appearance: its node counts over its attempts and shrinks (a record is data: a
    field of the wrong type counts as unknown)."""
    jobs: dict[str, JobNodes] = {}
    planned: dict[str, float] = {}  # the latest shrink's throughput per job
    for ev in events:
        kind, jid = ev.get("event"), str(ev.get("jobid", ""))
        if kind == "shrink":
            j = jobs.setdefault(jid, JobNodes(jobid=jid))
            j.shrinks.append(ev)
            after = rundir.integer(ev.get("nodes_after"))
            j.end = after if after is not None else j.end
            j.start = j.start if j.start is not None else rundir.integer(ev.get("nodes_before"))
            planned[jid] = rundir.num(ev.get("throughput")) or 1.0
        elif kind == "attempt" and isinstance(ev.get("hosts"), list):
            j = jobs.setdefault(jid, JobNodes(jobid=jid))
            n = len(ev["hosts"])
            j.start = n if j.start is None else j.start
            j.end = n
            t0, t1 = rundir.num(ev.get("started")), rundir.num(ev.get("ended"))
            if n < j.start and t0 is not None and t1 is not None and t1 > t0:
                j.shrunk_s += t1 - t0
                j.cost_s += (t1 - t0) * (1 - min(1.0, planned.get(jid, n / j.start)))
    return jobs
