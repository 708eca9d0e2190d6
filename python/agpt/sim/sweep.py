"""The goodput table: one fault model at 512-4,096 nodes, with and without spares, heartbeats, a shrink when the
spares run out (FAILOVER_SHRINK), the health sweep (as shipped) against the blind rotation, a classifier that
misreads nothing, and async saves.

`sweep()` runs the simulations, `table()` writes the Markdown of docs/sim/goodput.md, `plot()` the PNG.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agpt import figure
from agpt.errors import ConfigError
from agpt.sim import engine, model
from agpt.sim.engine import Result

NODES = (512, 1024, 2048, 4096)
# (name, overrides): each variant changes one knob of the model as shipped.  As shipped is what a committed job
# script runs: the trainer's, the loop's and the chain's defaults, and the checkpoint plan its `agpt check` makes at
# job start (agpt.ckptplan: the local tier where it fits, the global interval from Young/Daly).
VARIANTS: tuple[tuple[str, dict[str, object]], ...] = (
    ("as shipped", {}),
    ("stragglers reported", {"straggler": "report"}),  # FAILOVER_STRAGGLER=report: named, never swapped
    (
        "no local tier",
        {"local_tier": False},
    ),  # checkpoint.local_interval: 0 (the global interval then by Daly)
    (
        "500-step saves, no tier",
        {"local_tier": False, "checkpoint_interval": 500},
    ),  # what 20b.yaml set until 2026-12
    ("no heartbeats", {"heartbeats": False}),  # heartbeat.enabled: false: hangs left to the idle watchdog
    ("blind rotation", {"sweep": False}),  # FAILOVER_SWEEP=off: a misread failure evicts a host blind
    # What the table showed before it charged for misreads: every log read (the gap is the classifier's misses).
    ("reads every log", {"misread": model.no_misread()}),
    # The shrink down to half the throughput (FAILOVER_MIN_NODES=0.5, the default until 2026-12-01): with today's
    # 0.9 this model never shrinks, which is the next row.
    ("no spares", {"spares": 0, "min_nodes": "0.5"}),
    ("no spares, no shrink", {"spares": 0, "shrink": False}),  # the loop before FAILOVER_SHRINK
    ("sync saves", {"async_save": False}),
)
# The rows every seed runs (the range across seeds shown); the others run the first seed alone, to keep the table
# within an hour on two cores.  The straggler policies are the comparison docs/goodput.md chose the default from.
ALL_SEEDS = ("as shipped", "stragglers reported")
SHOWN = ("lost_work", "restarts", "detection", "backoff", "checkpoint_stalls", "slow_steps")


@dataclass(kw_only=True, slots=True)
class Row:
    variant: str
    results: list[Result]  # one per seed

    def mean(self, fn: Callable[[Result], float]) -> float:
        return sum(fn(r) for r in self.results) / len(self.results)

    def hours(self, bucket: str) -> float:
        return sum(r.time[bucket] for r in self.results) / len(self.results) / 3600

    def share(self, bucket: str) -> float:
        """The bucket's share of the allocated time."""
        return sum(r.time[bucket] / r.allocated_s for r in self.results if r.allocated_s) / len(self.results)


def pick(names: Sequence[str]) -> list[tuple[str, dict[str, object]]]:
    """The variants named (`agpt sim table --variants`), in the table's order; an unknown name is ConfigError."""
    known = {n: kw for n, kw in VARIANTS}
    bad = [n for n in names if n not in known]
    if bad:
        raise ConfigError(f"--variants: unknown variant {bad[0]!r} (known: {', '.join(known)})")
    return [(n, kw) for n, kw in VARIANTS if n in names]


def _one(job: tuple[model.FaultModel, int]) -> Result:
    return engine.simulate(job[0], seed=job[1])


def sweep(
    m: model.FaultModel,
    *,
    nodes: Sequence[int] = NODES,
    seeds: Sequence[int] = (1,),
    variants: Sequence[tuple[str, dict[str, object]]] = VARIANTS,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
) -> list[Row]:
    """Every variant at every node count: the ALL_SEEDS rows with every seed, the others with the first; JOBS
    simulations at once (processes; each is deterministic for its seed, so the table does not depend on JOBS)."""
    plan: list[tuple[str, model.FaultModel, list[int]]] = []
    for n in nodes:
        for name, kw in variants:
            ss = list(seeds) if name in ALL_SEEDS else list(seeds)[:1]
            plan.append((name, model.override(m, nodes=n, **kw), ss))
    work = [(mm, s) for _, mm, ss in plan for s in ss]
    labels = [f"{mm.nodes} nodes, {name}, seed {s}" for name, mm, ss in plan for s in ss]
    results: list[Result] = []

    def note(i: int, r: Result) -> None:
        results.append(r)
        if progress:
            progress(f"{labels[i]}: effective ratio {r.effective_ratio:.3f}, {len(r.faults)} failures, "
                     f"{r.attempts} attempts")  # fmt: skip

    if jobs > 1 and len(work) > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(min(jobs, len(work))) as pool:
            for i, r in enumerate(pool.imap(_one, work)):
                note(i, r)
    else:
        for i, w in enumerate(work):
            note(i, _one(w))
    rows, k = [], 0
    for name, _, ss in plan:
        rows.append(Row(variant=name, results=results[k : k + len(ss)]))
        k += len(ss)
    return rows


def _stops(r: Row) -> str:
    total: dict[str, int] = {}
    for res in r.results:
        for k, v in res.person_stops.items():
            total[k] = total.get(k, 0) + v
    wait = f"{r.hours('waiting_for_a_person'):.0f} h"
    runs = len(r.results)
    said = ", ".join(f"{v} {name}" for name, v in sorted(total.items())) or "0"
    return f"{said} in {runs} runs ({wait} per run)" if runs > 1 else f"{said} ({wait})"


def table(rows: list[Row], m: model.FaultModel) -> str:
    days = m.horizon_days
    head = (
        "| nodes | variant | effective ratio | wall ratio | steps/node-h vs ideal | failures | "
        "lost work | restarts | detection | backoff | ckpt stalls | slow steps | queue | stops for a person (wait) |"
    )
    lines = [head, "|" + "---|" * 14]
    for row in rows:
        r0 = row.results[0]
        hours = {k: row.hours(k) for k in (*SHOWN, "queue", "waiting_for_a_person")}
        ratio = f"{row.mean(lambda r: r.effective_ratio):.3f}"
        if len(row.results) > 1:
            rs = [r.effective_ratio for r in row.results]
            ratio += f" ({min(rs):.3f}-{max(rs):.3f})"
        lines.append(
            f"| {r0.nodes:,} | {row.variant} | {ratio} | "
            f"{row.mean(lambda r: r.wall_ratio):.3f} | "
            f"{row.mean(lambda r: r.vs_ideal):.3f} | {row.mean(lambda r: len(r.faults)):.0f} | "
            + " | ".join(f"{max(hours[k], 0.0):.1f} h" for k in SHOWN)  # never "-0.0 h"
            + f" | {hours['queue']:.0f} h | {_stops(row)} |"
        )
    lines.append("")
    multi = [r for r in rows if len(r.results) > 1]
    seeds = ", ".join(str(r.seed) for r in (multi or rows)[0].results)
    which = (f"seeds {seeds} for {', '.join(dict.fromkeys(r.variant for r in multi))} (the mean, and the range "
             f"across seeds), seed {rows[0].results[0].seed} for the others") if multi else f"seeds {seeds}"  # fmt: skip
    lines.append(
        f"{days:g} simulated days per row, fault model `{m.name}`, {which}; effective ratio = productive step time / allocated "
        "time; wall ratio = the same over the time since the first job started (queues and stops in); "
        "steps/node-h counts the spares' node-hours too; the hour columns are totals over the run (the mean run's "
        "where there are seeds), the stops for a person the seeds' sum."
    )
    return "\n".join(lines)


def headline(rows: list[Row], nodes: int = 512, variant: str = "as shipped") -> str:
    """What the default model reaches at `nodes`, and the overhead that keeps it from more."""
    row = next((r for r in rows if r.variant == variant and r.results[0].nodes == nodes), None)
    if row is None:
        return ""
    ratio = row.mean(lambda r: r.effective_ratio)
    shares = {k: row.share(k) for k in SHOWN}
    top = sorted(shares.items(), key=lambda kv: -kv[1])
    parts = ", ".join(f"{k.replace('_', ' ')} {100 * v:.2f}%" for k, v in top if v > 0)
    return (
        f"At {nodes} nodes ({variant}): effective training time ratio {ratio:.3f}; the allocated time not "
        f"training: {parts}."
    )


def plot(rows: list[Row], path: Path, m: model.FaultModel) -> None:
    plt = figure.pyplot()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    variants = list(dict.fromkeys(r.variant for r in rows))
    for v in variants:
        pts = [(r.results[0].nodes, r.mean(lambda x: x.effective_ratio)) for r in rows if r.variant == v]
        ax1.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=v)
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("active nodes")
    ax1.set_ylabel("effective training time ratio")
    ax1.set_title(f"{m.name}: productive step time / allocated time")
    ax1.grid(alpha=0.3)
    ax1.legend()
    base = [r for r in rows if r.variant == variants[0]]
    labels = [f"{r.results[0].nodes}" for r in base]
    bottom = [0.0] * len(base)
    for k in SHOWN:
        vals = [100 * r.share(k) for r in base]
        ax2.bar(labels, vals, bottom=bottom, label=k.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax2.set_xlabel("active nodes")
    ax2.set_ylabel("% of allocated time")
    ax2.set_title(f"where the time went ({variants[0]})")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
