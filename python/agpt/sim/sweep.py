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
# (name, overrides): each variant changes one knob of the model as shipped.
VARIANTS: tuple[tuple[str, dict[str, object]], ...] = (
    ("as shipped", {}),
    ("+ heartbeats", {"heartbeats": True}),
    ("+ local tier", {"heartbeats": True, "local_tier": True}),  # and heartbeats: the tier at Daly's interval
    ("blind rotation", {"sweep": False}),  # FAILOVER_SWEEP=off: a misread failure evicts a host blind
    # What the table showed before it charged for misreads: every log read (the gap is the classifier's misses).
    ("reads every log", {"misread": model.no_misread()}),
    # The shrink down to half the throughput (FAILOVER_MIN_NODES=0.5, the default until 2026-12-01): with today's
    # 0.9 this model never shrinks, which is the next row.
    ("no spares", {"spares": 0, "min_nodes": "0.5"}),
    ("no spares, no shrink", {"spares": 0, "shrink": False}),  # the loop before FAILOVER_SHRINK
    ("sync saves", {"async_save": False}),
)
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


def sweep(
    m: model.FaultModel,
    *,
    nodes: Sequence[int] = NODES,
    seeds: Sequence[int] = (1,),
    variants: Sequence[tuple[str, dict[str, object]]] = VARIANTS,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    rows = []
    for n in nodes:
        for name, kw in variants:
            mm = model.override(m, nodes=n, **kw)
            res = []
            for s in seeds:
                r = engine.simulate(mm, seed=s)
                res.append(r)
                if progress:
                    progress(
                        f"{n} nodes, {name}, seed {s}: effective ratio {r.effective_ratio:.3f}, "
                        f"{len(r.faults)} failures, {r.attempts} attempts"
                    )
            rows.append(Row(variant=name, results=res))
    return rows


def _stops(r: Row) -> str:
    total: dict[str, int] = {}
    for res in r.results:
        for k, v in res.person_stops.items():
            total[k] = total.get(k, 0) + v
    if not total:
        return "0"
    runs = len(r.results)
    return ", ".join(f"{v / runs:g} {name}" for name, v in sorted(total.items()))


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
        lines.append(
            f"| {r0.nodes:,} | {row.variant} | {row.mean(lambda r: r.effective_ratio):.3f} | "
            f"{row.mean(lambda r: r.wall_ratio):.3f} | "
            f"{row.mean(lambda r: r.vs_ideal):.3f} | {row.mean(lambda r: len(r.faults)):.0f} | "
            + " | ".join(f"{hours[k]:.1f} h" for k in SHOWN)
            + f" | {hours['queue']:.0f} h | {_stops(row)} ({hours['waiting_for_a_person']:.0f} h) |"
        )
    lines.append("")
    lines.append(
        f"{days:g} simulated days per row, fault model `{m.name}`, seeds "
        f"{', '.join(str(r.seed) for r in rows[0].results)}; effective ratio = productive step time / allocated "
        "time; wall ratio = the same over the time since the first job started (queues and stops in); "
        "steps/node-h counts the spares' node-hours too; the hour columns are totals over the run."
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
