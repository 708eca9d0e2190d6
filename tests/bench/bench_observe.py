#!/usr/bin/env python3
"""Benchmark: what the operators' writers (TensorBoard event files, RUN_DIR/metrics.prom) cost a training step.

Usage: tests/bench/bench_observe.py [--steps N] [--logs N]

1. Side by side on a training step: the tiny config trained in this process on one CPU rank (`agpt train`'s own
   code), every step logged, with the writers working after every other logged step and idle after the others,
   so both arms share one process, one model and the machine's load of the moment.  A step's `step_s` in
   metrics.jsonl (its wall time, logging included) holds the writers' work of the previous log, so steps are
   split by what the previous log did.  Printed: the median of each arm and their ratio, for the writers as
   shipped (TensorBoard, metrics.prom at most every 15 s) and with metrics.prom rewritten at every log (the worst
   case: observe.prometheus_interval_s 0).
2. What one log costs each writer in microseconds (Writers.log over --logs records of the trainer's shape), and
   that against the median step time: the writers' share of the step without the step's own noise.
Not a timed test: the figures are for people (docs/observability.md), never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

COMMON = [
    "train.log_interval=1",
    "checkpoint.interval=0",
    "checkpoint.save_final=false",
    "heartbeat.enabled=false",
]


def paired(steps: int, run_dir: Path, sets: list[str]) -> tuple[list[float], list[float], list[float]]:
    """step_s after an idle log, after a working one, and each working step minus the idle step after it,
    from one real training run."""
    from agpt.observe import writers
    from agpt.train.run import train

    real = writers.Writers

    class EveryOther(real):  # type: ignore[misc, valid-type]
        def log(self, rec: Any) -> None:
            if rec["step"] % 2 == 0:
                super().log(rec)

    writers.Writers = EveryOther  # the trainer looks the class up when it opens its writers
    try:
        assert (
            train(
                str(ROOT / "jobs/configs/tiny.yaml"), run_dir=str(run_dir), steps=steps, sets=[*COMMON, *sets]
            )
            == 0
        )
    finally:
        writers.Writers = real
    recs = {r["step"]: r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}
    idle = [recs[s]["step_s"] for s in recs if s > 5 and (s - 1) % 2 == 1]
    busy = [recs[s]["step_s"] for s in recs if s > 5 and (s - 1) % 2 == 0]
    diff = [
        recs[s]["step_s"] - recs[s + 1]["step_s"]
        for s in recs
        if s > 5 and (s - 1) % 2 == 0 and s + 1 in recs
    ]
    return idle, busy, diff


def per_log(n: int, tmp: Path) -> dict[str, float]:
    """Microseconds per Writers.log call with TensorBoard alone (the training thread's part), and per rewrite of
    metrics.prom (a background thread's, at most every observe.prometheus_interval_s)."""
    from agpt.observe import prom
    from agpt.observe.writers import Writers
    from agpt.train.config import ObserveConfig

    rec = {"step": 0, "time": time.time(), "tokens": 0, "target_steps": n, "target_tokens": n * 512, "loss": 5.9,
           "grad_norm": 0.7, "lr": 4e-4, "tokens_per_s_per_device": 2500.0, "mfu": None, "peak_mem_bytes": 1877844,
           "devices": 1, "steps": 1, "step_s": 0.2, "compute_s": 0.19, "wait_s": 0.01, "ckpt_stall_s": 0.0,
           "update": {"embed": 1e-3, "attn": 1e-3, "mlp": 1e-3, "norm": 1e-3, "output": 1e-3}}  # fmt: skip
    run = tmp / "per_log"
    (run / "ckpt").mkdir(parents=True)
    w = Writers(run, ObserveConfig(prometheus=False), {}, 0, warn=print)
    t0 = time.perf_counter()
    for s in range(1, n + 1):
        w.log({**rec, "step": s})
    out = {"tensorboard": (time.perf_counter() - t0) / n * 1e6}
    w.close()
    t0 = time.perf_counter()
    for s in range(1, n // 10 + 1):
        prom.update(run, recent=[{**rec, "step": s}])
    out["metrics.prom rewrite"] = (time.perf_counter() - t0) / (n // 10) * 1e6
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--logs", type=int, default=2000)
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_observe.") as tmp_s:
        tmp = Path(tmp_s)
        costs = per_log(a.logs, tmp)
        for name, sets in (
            ("as shipped", []),
            ("metrics.prom every log", ["observe.prometheus_interval_s=0"]),
        ):
            results[name] = paired(a.steps, tmp / name.replace(" ", "_"), sets)
    print(f"tiny model on 1 CPU rank, {a.steps} steps per run, every step logged; median step_s after a log:")
    base = None
    for name, (idle, busy, diff) in results.items():
        off, on, d = statistics.median(idle), statistics.median(busy), statistics.median(diff)
        base = base or off
        print(f"  writers {name:<24} without {off * 1e3:7.2f} ms  with {on * 1e3:7.2f} ms  ratio with/without "
              f"{on / off:.3f}; median paired difference {d * 1e3:+.2f} ms")  # fmt: skip
    assert base is not None
    tb, pr = costs["tensorboard"], costs["metrics.prom rewrite"]
    print(f"in the training thread: tensorboard {tb:.0f} us per log ({tb / 1e6 / base:.2%} of a step); in a "
          f"background thread: a metrics.prom rewrite {pr / 1e3:.2f} ms, at most every 15 s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
