"""When the trainer saves a checkpoint: every `checkpoint.interval` steps, or every `checkpoint.interval_s` seconds
of training time.  One function, used by the trainer and by `agpt sim`, so the simulator follows the trainer's
policy instead of a copy of it.

Standard library only (no torch): `agpt sim` imports it.  A time-based save must happen at the same step on every
rank (a distributed checkpoint is collective), so the trainer asks `due()` on rank 0 only and broadcasts the answer
with the step's all-reduce.
"""

from __future__ import annotations

import math


def due_by_step(step: int, interval: int) -> bool:
    """Every `interval` steps (0: never)."""
    return bool(interval) and step % interval == 0


def due_by_time(since_save_s: float, interval_s: float) -> bool:
    """`interval_s` seconds of training since the last save or the start of the attempt (0: never)."""
    return bool(interval_s) and since_save_s >= interval_s


def due(step: int, *, interval: int, interval_s: float, since_save_s: float) -> bool:
    """Whether a save is due after finishing `step`: either rule."""
    return due_by_step(step, interval) or due_by_time(since_save_s, interval_s)


def next_save(step: int, *, interval: int, interval_s: float, step_s: float) -> int | None:
    """The step of the next save after `step` (the last save, or the step an attempt resumed from) for steps of
    `step_s` seconds: the first step where `due()` holds.  None when neither rule is set."""
    best: int | None = None
    if interval:
        best = (step // interval + 1) * interval
    if interval_s:
        n = max(1, math.ceil(interval_s / step_s - 1e-9))
        by_time = step + n
        best = by_time if best is None else min(best, by_time)
    return best
