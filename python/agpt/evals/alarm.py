"""The regression alarm: a downstream score or a bits-per-byte figure that falls too far below its best.

Accuracy (`TASK/acc`, `TASK/acc_norm`) regresses when it drops more than `acc_margin` (absolute, 0..1)
below the best value so far; bits per byte (`bpb/CORPUS`) when it rises more than `bpb_margin` (a
fraction) above the lowest so far.  The best is taken from the run's eval.jsonl (so it survives a
restart) and moves only on an improvement: a run that keeps sliding keeps alarming.  A margin of 0
turns that half off.  Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from agpt.evals import records


@dataclass(frozen=True, slots=True)
class Regression:
    metric: str
    step: int
    value: float
    best: float
    best_step: int
    margin: float
    source: str

    def line(self) -> str:
        kind = "rose" if self.metric.startswith("bpb/") else "fell"
        how = f"{self.margin:.0%}" if self.metric.startswith("bpb/") else f"{self.margin:g}"
        return (
            f"event: eval regression: {self.metric} {kind} to {self.value:.4g} at step {self.step} "
            f"(best {self.best:.4g} at step {self.best_step}, margin {how})"
        )

    def fields(self) -> dict[str, Any]:
        return asdict(self)


class Alarm:
    """The best value of every figure of one source, and the rule that compares a new record with it."""

    def __init__(
        self,
        *,
        acc_margin: float,
        bpb_margin: float,
        history: Iterable[dict[str, Any]] = (),
        source: str = "loop",
    ) -> None:
        self.acc_margin = acc_margin
        self.bpb_margin = bpb_margin
        self.source = source
        self.best: dict[str, tuple[float, int]] = {}
        for rec in history:
            if self._mine(rec):
                self._improve(rec)

    @property
    def enabled(self) -> bool:
        return self.acc_margin > 0 or self.bpb_margin > 0

    def _mine(self, rec: dict[str, Any]) -> bool:
        return rec.get("source", "loop") == self.source or (
            self.source != "loop" and rec.get("source", "loop") != "loop"
        )

    def _improve(self, rec: dict[str, Any]) -> None:
        for name, (value, higher) in records.scores(rec).items():
            old = self.best.get(name)
            if old is None or (value > old[0] if higher else value < old[0]):
                self.best[name] = (value, int(rec["step"]))

    def observe(self, rec: dict[str, Any]) -> list[Regression]:
        """The figures of `rec` that regressed against their best; then the bests move to any improvement."""
        out: list[Regression] = []
        if not self._mine(rec):
            return out
        for name, (value, higher) in records.scores(rec).items():
            old = self.best.get(name)
            if old is None:
                continue
            best, best_step = old
            if higher and self.acc_margin > 0 and value < best - self.acc_margin:
                margin = self.acc_margin
            elif not higher and self.bpb_margin > 0 and value > best * (1 + self.bpb_margin):
                margin = self.bpb_margin
            else:
                continue
            out.append(Regression(metric=name, step=int(rec["step"]), value=value, best=best,
                                  best_step=best_step, margin=margin, source=str(rec.get("source", "loop"))))  # fmt: skip
        self._improve(rec)
        return out
