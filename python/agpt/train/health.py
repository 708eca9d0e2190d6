"""Keeping a run healthy without a person: rollback past NaNs and loss spikes, deterministic skips.

On a non-finite loss or gradient, or a loss above `factor` times the running median of the last
`window` logged losses, a run with `train.on_nonfinite: rollback` reloads its newest complete
checkpoint in-process and skips the batches from that checkpoint up to the one that failed.  This is
the recipe of the PaLM report (Chowdhery et al. 2022, section 5.1, https://arxiv.org/abs/2204.02311:
"restart training from a checkpoint roughly 100 steps before the spike started, and skip roughly
200-500 data batches"), here from the newest checkpoint instead of a fixed distance.

Skips are ranges of global batch numbers: batch n holds samples [(n-1)·G, n·G) for a global batch of
G samples, so without earlier skips step n reads batch n.  The data position moves past a skipped
range before a step reads its batch, and the `rollback_lr_steps` steps after each range run at
`rollback_lr_factor` times the scheduled rate: both are pure functions of the skip list, so a fresh
run given the same list (`train.skip`) reproduces the losses bit for bit.  The list of a run lives in
RUN_DIR/skips.json and every rollback is a line in RUN_DIR/health.jsonl and on stdout
(docs/contract.md).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections import deque
from pathlib import Path
from typing import Any

from agpt import numeric, rundir, safewrite
from agpt.errors import EXIT_REPEAT, ConfigError
from agpt.train.entry import NonFinite

SKIPS = "skips.json"
EVENTS = rundir.HEALTH


class Fault(Exception):
    """A step that must not be applied: roll back (internal to the trainer, never reaches the CLI)."""

    def __init__(self, step: int, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.step = step
        self.kind = kind  # nonfinite_loss, nonfinite_grad, spike, grad_spike, eval_regression
        self.detail = detail


class TooManyRollbacks(NonFinite):
    """More rollbacks than train.max_rollbacks within train.rollback_window steps: the `repeat` verdict."""

    exit_code = EXIT_REPEAT


class SpikeStop(NonFinite):
    """A loss spike with train.on_nonfinite: stop."""


def parse_skip(value: Any, key: str = "train.skip") -> list[tuple[int, int]]:
    """[[from, to], ...] of batch numbers (1-based, inclusive), or a path to a skips.json / JSON list."""
    if isinstance(value, str):
        if not value:
            return []
        try:
            data = json.loads(rundir.read_bytes(value))  # a regular file: never a FIFO
        except OSError as exc:
            raise ConfigError(f"{key}: cannot read {value} ({exc.strerror})") from None
        except ValueError as exc:
            raise ConfigError(f"{key}: {value} is not JSON ({exc})") from None
        value = data.get("skip") if isinstance(data, dict) else data
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{key}: expected a list of [from_batch, to_batch] pairs or a file, got {value!r}")
    out: list[tuple[int, int]] = []
    for item in value:
        ok = (
            isinstance(item, list | tuple)
            and len(item) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in item)
            and 1 <= item[0] <= item[1] <= numeric.MAX_COUNT
        )
        if not ok:
            raise ConfigError(
                f"{key}: {item!r:.80} is not a [from_batch, to_batch] pair with 1 <= from <= to <= 2**53"
            )
        out.append((int(item[0]), int(item[1])))
    return out


def merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


class Health:
    """The skip list, the spike rule and the rollback budget of one rank."""

    def __init__(self, cfg: Any, run_dir: Path | None, rank: int) -> None:
        tc = cfg.train
        self.tc = tc
        self.run_dir = run_dir
        self.rank = rank
        self.rollback = tc.on_nonfinite == "rollback"
        self.spike_factor = float(tc.spike.get("factor", 0.0)) if tc.spike else 0.0
        self.spike_window = int(tc.spike.get("window", 0)) if tc.spike else 0
        self.recent: deque[tuple[int, float]] = deque(maxlen=max(1, self.spike_window))
        self.grad_factor = float(tc.spike.get("grad_factor", 0.0)) if tc.spike else 0.0
        self.recent_grad: deque[tuple[int, float]] = deque(maxlen=max(1, self.spike_window))
        skips = parse_skip(tc.skip)
        self.rollbacks: list[dict[str, Any]] = []
        saved = self._read_saved()
        if saved is not None:
            skips += parse_skip(saved.get("skip", []), str(self._skips_path()))
            rb = saved.get("rollbacks")
            self.rollbacks = [r for r in rb if isinstance(r, dict)] if isinstance(rb, list) else []
        self.skips = merge(skips)

    # -- files ----------------------------------------------------------------------------------
    def _skips_path(self) -> Path | None:
        return None if self.run_dir is None else self.run_dir / SKIPS

    def _read_saved(self) -> dict[str, Any] | None:
        path = self._skips_path()
        if path is None or not path.is_file():
            return None
        try:
            data = rundir.read_record(path)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: unreadable skip list ({exc})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected an object with a 'skip' list")
        return data

    def _save(self) -> None:
        path = self._skips_path()
        if path is None or self.rank != 0:
            return
        body = {"skip": [list(r) for r in self.skips], "rollbacks": self.rollbacks}
        safewrite.replace(path, json.dumps(body, indent=1) + "\n")

    def event(self, kind: str, line: str, **fields: Any) -> None:
        """`agpt: event: ...` on stdout and a JSON line in RUN_DIR/health.jsonl (rank 0 only)."""
        if self.rank != 0:
            return
        print(f"agpt: {line}", flush=True)
        self.record(kind, **fields)

    def record(self, kind: str, **fields: Any) -> None:
        """A JSON line in RUN_DIR/health.jsonl without a line on stdout (rank 0 only)."""
        if self.rank != 0 or self.run_dir is None:
            return
        rec = {"event": kind, "time": round(time.time(), 3), **fields}
        safewrite.append(self.run_dir / EVENTS, json.dumps(rec) + "\n", sync=False)

    # -- data position and learning rate ----------------------------------------------------------
    def skip_to(self, consumed: int, global_batch: int) -> int:
        """The data position after moving past every skipped range that holds the next batch."""
        batch = consumed // global_batch + 1
        for a, b in self.skips:
            if a <= batch <= b:
                batch = b + 1
        return (batch - 1) * global_batch

    def lr_factor(self, step: int) -> float:
        """rollback_lr_factor for the rollback_lr_steps steps that follow each skipped range, else 1."""
        k = self.tc.rollback_lr_steps
        if not k or self.tc.rollback_lr_factor == 1.0:
            return 1.0
        skipped = 0
        for a, b in self.skips:
            skipped += b - a + 1
            first = b + 1 - skipped  # the step that reads the batch after this range
            if first <= step < first + k:
                return float(self.tc.rollback_lr_factor)
        return 1.0

    # -- detection --------------------------------------------------------------------------------
    def check(self, step: int, loss: float, grad_norm: float) -> None:
        """Raise Fault (rollback) or NonFinite/SpikeStop (stop) when this step must not be applied."""
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            what = "loss" if not math.isfinite(loss) else "gradient"
            if self.rollback:
                # Worded so that the classifier's non-finite-loss pattern does not match a recovered run.
                detail = f"{what} not finite at step {step} (loss {loss}, grad_norm {grad_norm})"
                raise Fault(step, f"nonfinite_{'loss' if what == 'loss' else 'grad'}", detail)
            raise NonFinite(
                f"non-finite {what} at step {step} (loss={loss} grad_norm={grad_norm}): stopping; "
                f"lower optim.lr or check the data"
            )
        if self.spike_factor and len(self.recent) >= self.spike_window:
            median = statistics.median(v for _, v in self.recent)
            if loss > self.spike_factor * median:
                detail = (
                    f"loss spike at step {step}: {loss:.6g} > {self.spike_factor:g} x the median "
                    f"{median:.6g} of the last {self.spike_window} logged losses"
                )
                if self.rollback:
                    raise Fault(step, "spike", detail)
                raise SpikeStop(f"{detail}: stopping (train.on_nonfinite: rollback would roll back)")
        if self.grad_factor and len(self.recent_grad) >= self.spike_window:
            median = statistics.median(v for _, v in self.recent_grad)
            if grad_norm > self.grad_factor * median:
                detail = (
                    f"gradient norm spike at step {step}: {grad_norm:.6g} > {self.grad_factor:g} x the median "
                    f"{median:.6g} of the last {self.spike_window} logged gradient norms"
                )
                if self.rollback:
                    raise Fault(step, "grad_spike", detail)
                raise SpikeStop(f"{detail}: stopping (train.on_nonfinite: rollback would roll back)")

    def logged(self, step: int, loss: float, grad_norm: float | None = None) -> None:
        self.recent.append((step, loss))
        if grad_norm is not None:
            self.recent_grad.append((step, grad_norm))

    # -- rollback -------------------------------------------------------------------------------
    def begin_rollback(self, fault: Fault) -> None:
        """Count this rollback; TooManyRollbacks when it is one more than the window allows."""
        window, most = self.tc.rollback_window, self.tc.max_rollbacks
        recent = [
            r
            for r in self.rollbacks
            if isinstance(r.get("step"), int) and fault.step - window < r["step"] <= fault.step
        ]
        if len(recent) + 1 > most:
            self.event(
                "rollback_limit",
                f"event: rollback limit: {fault.detail}; {len(recent)} rollbacks already within "
                f"{window} steps (train.max_rollbacks {most})",
                step=fault.step,
                reason=fault.kind,
                rollbacks=len(recent),
            )
            raise TooManyRollbacks(
                f"{fault.detail}: {len(recent) + 1} rollbacks within {window} steps exceed "
                f"train.max_rollbacks {most}; stopping"
            )

    def finish_rollback(self, fault: Fault, *, ckpt_step: int, from_batch: int, to_batch: int) -> None:
        """Add [from_batch, to_batch] to the skip list, save it, and record the event."""
        self.skips = merge([*self.skips, (from_batch, to_batch)])
        self.recent = deque(((s, v) for s, v in self.recent if s <= ckpt_step), maxlen=self.recent.maxlen)
        self.recent_grad = deque(((s, v) for s, v in self.recent_grad if s <= ckpt_step),
                                 maxlen=self.recent_grad.maxlen)  # fmt: skip
        rec = {
            "step": fault.step,
            "reason": fault.kind,
            "ckpt_step": ckpt_step,
            "skip": [from_batch, to_batch],
        }
        self.rollbacks.append(rec)
        self._save()
        lr = ""
        if self.tc.rollback_lr_steps and self.tc.rollback_lr_factor != 1.0:
            lr = f", lr x{self.tc.rollback_lr_factor:g} for {self.tc.rollback_lr_steps} steps"
        self.event(
            "rollback",
            f"event: rollback: {fault.detail}; reloaded step {ckpt_step}, skipping batches "
            f"{from_batch}-{to_batch}{lr}",
            **rec,
        )


# -- the frozen-parameter alarm ---------------------------------------------------------------------
GROUPS = ("embed", "attn", "mlp", "norm", "output", "other")
# Elements per local shard whose update is measured (a frozen tensor is frozen all over): 720 tensors of
# an 80-layer model copy 47 M elements at a logged step, not the whole shard.
UPDATE_SAMPLE = 16384


def param_group(name: str) -> str:
    """The parameter group of a parameter name of agpt.train.model.Transformer."""
    if name.startswith("tok_embeddings."):
        return "embed"
    if name.startswith("output."):
        return "output"
    if name.endswith("norm.weight"):
        return "norm"
    if ".attn." in name:
        return "attn"
    if ".ffn." in name:
        return "mlp"
    return "other"


class UpdateMonitor:
    """|Δw| / |w| per parameter group at logged steps, and the alarm for groups that stopped moving.

    A bf16 master copy rounds updates below half an ulp to nothing: RMSNorm weights near 1 (ulp 2^-7)
    stayed exactly still for 17,000 steps while the loss looked normal.  A healthy group under AdamW
    moves by about lr / rms(w) per step (at least ~1e-6 with the smallest min_lr of jobs/configs, 1e-5,
    on norm weights near 1 and an Adam ratio |m/√v| of 0.1); a frozen one by exactly 0.  Measured on
    the first UPDATE_SAMPLE elements of each rank's local shard and summed over all ranks: two small
    reductions per logged step, and a copy of at most UPDATE_SAMPLE elements per tensor.
    """

    def __init__(self, named: list[tuple[str, Any]], threshold: float, logs: int) -> None:
        self.params = [(GROUPS.index(param_group(n)), p) for n, p in named]
        self.threshold = threshold
        self.logs = logs
        self.below = dict.fromkeys(GROUPS, 0)
        self.warned: set[str] = set()
        self._before: list[Any] = []

    def before(self) -> None:
        self._before = [_flat_sample(p).clone() for _, p in self.params]

    def after(self) -> dict[str, float]:
        import torch
        import torch.distributed as dist

        if not self.params:
            return {}
        dev = self._before[0].device
        sums = torch.zeros(2 * len(GROUPS), dtype=torch.float64, device=dev)
        for (g, p), old in zip(self.params, self._before, strict=True):
            new = _flat_sample(p).double()
            sums[2 * g] += (new - old.double()).square().sum()
            sums[2 * g + 1] += new.square().sum()
        self._before = []
        if dist.is_initialized():
            dist.all_reduce(sums)
        present = {g for g, _ in self.params}
        out: dict[str, float] = {}
        for g in sorted(present):
            d, w = float(sums[2 * g]) ** 0.5, float(sums[2 * g + 1]) ** 0.5
            out[GROUPS[g]] = d / w if w > 0 else (0.0 if d == 0 else float("inf"))
        return out

    def judge(self, ratios: dict[str, float], lr: float) -> list[str]:
        """Groups that have just stayed below the threshold for `logs` logs in a row (while lr > 0)."""
        fired: list[str] = []
        for group, ratio in ratios.items():
            if lr > 0 and ratio < self.threshold:
                self.below[group] += 1
            else:
                self.below[group] = 0
                self.warned.discard(group)
            if self.below[group] >= self.logs and group not in self.warned:
                self.warned.add(group)
                fired.append(group)
        return fired


def _flat_sample(p: Any) -> Any:
    t = p.to_local() if hasattr(p, "to_local") else p
    return t.detach().reshape(-1)[:UPDATE_SAMPLE]
