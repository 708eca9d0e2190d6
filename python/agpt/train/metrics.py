"""RUN_DIR/metrics.jsonl: one JSON object per logged step, the figures a run is steered by.

Global tokens per second says little when the node count changes between attempts; tokens per second
per device and MFU (model FLOPs utilisation) compare across layouts and machines, and the step time
split into compute, wait and checkpoint stall says where the rest went.  The fields are documented in
docs/contract.md.  Each line is written with one write() call and flushed, so a reader sees
whole lines, and at worst a torn last line after a kill.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from agpt import numeric, rundir, safewrite
from agpt.train.config import Config, ModelConfig

FILE = rundir.METRICS
PEAK_ENV = "SITE_PEAK_TFLOPS"  # the site profile key, exported to the job's environment


def flops_per_token(model: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token: 6·N for the matmuls (forward + backward) plus 12·L·d·T for attention.

    The definition of MFU in the PaLM paper (Chowdhery et al. 2022, appendix B,
    https://arxiv.org/abs/2204.02311), with N the parameters that take part in a matmul: all but the
    input embedding, which is a table lookup.  Recomputation under activation checkpointing is not
    counted (that would be hardware FLOPs utilisation).
    """
    n = model.num_params() - model.vocab_size * model.dim
    return 6.0 * n + 12.0 * model.n_layers * model.dim * seq_len


def peak_tflops(environ: dict[str, str] | None = None) -> float | None:
    """Peak dense bf16 TFLOPS of one device (one rank's accelerator) from the site profile; None if unset."""
    value = numeric.env_number(os.environ if environ is None else environ, PEAK_ENV, 0.0, lo=0, hi=1e6)
    return float(value) if value > 0 else None


@dataclass(kw_only=True, slots=True)
class StepRecord:
    """What one optimizer step did (the trainer's record; the logged ones become metrics.jsonl lines)."""

    step: int
    loss: float
    grad_norm: float
    lr: float
    tokens: int
    seconds: float
    peak_mem: int
    compute_s: float = 0.0  # forward, backward, clip, update
    wait_s: float = 0.0  # reading the batch and waiting for every rank at the step's reduction
    update: dict[str, float] | None = None  # |Δw|/|w| per parameter group (logged steps)
    eval: dict[str, Any] | None = None  # held-out loss, bits per byte, tasks (eval.interval steps)


@dataclass(kw_only=True, slots=True)
class Window:
    """What happened since the previous logged step."""

    steps: int = 0
    tokens: int = 0
    compute_s: float = 0.0
    wait_s: float = 0.0
    started: float = 0.0

    def reset(self) -> None:
        self.steps, self.tokens, self.compute_s, self.wait_s = 0, 0, 0.0, 0.0
        self.started = time.perf_counter()

    def add(self, tokens: int, compute_s: float, wait_s: float) -> None:
        """One more step in the window."""
        self.steps += 1
        self.tokens += tokens
        self.compute_s += compute_s
        self.wait_s += wait_s


class MetricsWriter:
    """Appends the lines on rank 0."""

    def __init__(self, path: Path, cfg: Config, world: int) -> None:
        self.path = path
        self.world = world
        self.flops = flops_per_token(cfg.model, cfg.train.seq_len)
        self.peak = peak_tflops()
        self.target_steps = cfg.train.steps
        self.target_tokens = cfg.train.steps * cfg.train.global_batch * cfg.train.seq_len
        self._fh: IO[str] | None = None

    def record(
        self, rec: StepRecord, *, tokens_consumed: int, window: Window, stall_s: float
    ) -> dict[str, Any]:
        """The metrics.jsonl line of a logged step: REC and what its log window measured."""
        elapsed = max(time.perf_counter() - window.started, 1e-9)
        per_device = window.tokens / elapsed / self.world
        steps = max(window.steps, 1)
        mfu = per_device * self.flops / (self.peak * 1e12) if self.peak else None
        return (
            {
                "step": rec.step,
                "time": round(time.time(), 3),
                "tokens": tokens_consumed,
                "target_steps": self.target_steps,
                "target_tokens": self.target_tokens,
                "loss": rec.loss,
                "grad_norm": rec.grad_norm,
                "lr": rec.lr,
                "tokens_per_s_per_device": round(per_device, 3),
                "mfu": None if mfu is None else round(mfu, 6),
                "peak_mem_bytes": rec.peak_mem,
                "devices": self.world,
                "steps": window.steps,
                "step_s": round(elapsed / steps, 6),
                "compute_s": round(window.compute_s / steps, 6),
                "wait_s": round(window.wait_s / steps, 6),
                "ckpt_stall_s": round(stall_s / steps, 6),
            }
            | ({"update": rec.update} if rec.update else {})
            | (rec.eval or {})
        )

    def write(self, rec: dict[str, Any]) -> None:
        if self._fh is None:  # never through a link, only a regular file (safewrite); kept open for the run
            self._fh = os.fdopen(safewrite.open_append(self.path), "a")
        self._fh.write(json.dumps(rec, allow_nan=True) + "\n")
        self._fh.flush()


def read(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl, skipping a torn or unreadable line; the last record of a step wins."""
    by_step: dict[int, dict[str, Any]] = {}
    try:
        text = rundir.read_bytes(path).decode("utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        rec = rundir.metrics_record(line)
        if rec is not None:
            by_step[rec["step"]] = rec
    return [by_step[s] for s in sorted(by_step)]
