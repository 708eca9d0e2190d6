"""The checkpoint interval from failure rates: Young's and Daly's optimum, and what failures cost per day.

Young (1974), "A first order approximation to the optimum checkpoint interval", CACM 17(9):530:
    T = sqrt(2 * delta * M)
Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3):303-312:
    T = sqrt(2 * delta * M) * (1 + sqrt(delta / (2M)) / 3 + (delta / (2M)) / 9) - delta   for delta < 2M, else M
where delta is the time a save stalls training, M the job's mean time between failures (a node's MTBF over the
node count: the job dies when any node dies).  The expected share of time lost at interval T (first order):
    waste(T) = delta / T + (T / 2 + R) / M
the save stalls, half an interval of work redone per failure, and R (detection, relaunch, load) per failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agpt.errors import BadInput

DAY_S = 86400.0


@dataclass(kw_only=True, slots=True)
class Interval:
    nodes: int
    node_mtbf_h: float
    save_stall_s: float
    load_s: float
    restart_s: float
    job_mtbf_s: float
    failures_per_day: float
    young_s: float
    daly_s: float
    waste_fraction: float  # at Daly's interval
    loss_h_per_day: float

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def young(delta: float, mtbf: float) -> float:
    return math.sqrt(2.0 * delta * mtbf)


def daly(delta: float, mtbf: float) -> float:
    if delta >= 2.0 * mtbf:
        return mtbf
    x = delta / (2.0 * mtbf)
    return math.sqrt(2.0 * delta * mtbf) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta


def waste(t: float, *, delta: float, mtbf: float, restart: float) -> float:
    """Expected fraction of time lost at checkpoint interval t (first order, capped at 1)."""
    return min(1.0, delta / t + (t / 2.0 + restart) / mtbf)


def interval(
    *, nodes: int, node_mtbf_h: float, save_stall_s: float, load_s: float = 0.0, restart_s: float = 0.0
) -> Interval:
    """The optimum for `nodes` nodes that each fail every `node_mtbf_h` hours; BadInput names a bad flag."""
    if nodes < 1:
        raise BadInput(f"--nodes: must be at least 1, got {nodes}")
    for flag, v in (("--node-mtbf-h", node_mtbf_h), ("--save-stall-s", save_stall_s)):
        if not (math.isfinite(v) and v > 0):
            raise BadInput(f"{flag}: must be a number greater than 0, got {v}")
    for flag, v in (("--load-s", load_s), ("--restart-s", restart_s)):
        if not (math.isfinite(v) and v >= 0):
            raise BadInput(f"{flag}: must be a number >= 0, got {v}")
    m = node_mtbf_h * 3600.0 / nodes
    t = daly(save_stall_s, m)
    w = waste(t, delta=save_stall_s, mtbf=m, restart=load_s + restart_s)
    return Interval(
        nodes=nodes,
        node_mtbf_h=node_mtbf_h,
        save_stall_s=save_stall_s,
        load_s=load_s,
        restart_s=restart_s,
        job_mtbf_s=m,
        failures_per_day=DAY_S / m,
        young_s=young(save_stall_s, m),
        daly_s=t,
        waste_fraction=w,
        loss_h_per_day=24.0 * w,
    )


def fmt_s(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def render(iv: Interval) -> str:
    return "\n".join(
        [
            f"nodes {iv.nodes}, node MTBF {iv.node_mtbf_h:g} h -> job MTBF {fmt_s(iv.job_mtbf_s)}, "
            f"{iv.failures_per_day:.2f} failures/day",
            f"save stall {iv.save_stall_s:g} s, load {iv.load_s:g} s, restart {iv.restart_s:g} s",
            f"Young interval: {fmt_s(iv.young_s)} ({iv.young_s:.0f} s)",
            f"Daly interval:  {fmt_s(iv.daly_s)} ({iv.daly_s:.0f} s)  -> checkpoint.interval_s: {iv.daly_s:.0f}",
            f"expected loss at that interval: {100 * iv.waste_fraction:.2f}% of the time, "
            f"{iv.loss_h_per_day:.2f} h per day",
        ]
    )
