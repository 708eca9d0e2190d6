"""What one in-loop evaluation costs against a training step, from FLOPs and forward passes.

A training step does `global_batch x seq_len` tokens of forward and backward: flops_per_token
(6·N + 12·L·d·T, train.metrics) each.  An evaluation does forwards only (a third of that per token,
with the attention term at the batch's padded width) over every row of every task's fixed subset,
packed as score.plan packs them, plus the held-out loss's `eval.samples` full-length samples.  FLOPs
alone flatter a forward-only pass of small batches, so the rounds of forwards each rank runs (each one
gathers the FSDP-sharded weights, as each micro step of training does) are reported next to them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from agpt.evals.score import plan
from agpt.train.config import Config
from agpt.train.metrics import flops_per_token


def forward_flops(cfg: Config, tokens: int, width: int) -> float:
    """Forward FLOPs of `tokens` tokens read in sequences `width` long (a third of training's per token)."""
    return tokens * flops_per_token(cfg.model, width) / 3


def evaluation(cfg: Config, lengths: Sequence[int], *, dp: int, pad_to: int = 64) -> dict[str, Any]:
    """FLOPs and forward rounds of one evaluation of rows of these input lengths, against one step."""
    tc, ec = cfg.train, cfg.eval
    rounds = plan(lengths, budget=tc.micro_batch * tc.seq_len, dp=dp, pad_to=pad_to, cap=tc.seq_len)
    task_flops = sum(forward_flops(cfg, len(b.rows) * b.width, b.width) for r in rounds for b in r if b.rows)
    held = ec.samples if ec.interval else 0
    held_flops = forward_flops(cfg, held * tc.seq_len, tc.seq_len)
    held_rounds = math.ceil(held / (dp * tc.micro_batch)) if held else 0
    step = tc.global_batch * tc.seq_len * flops_per_token(cfg.model, tc.seq_len)
    total = task_flops + held_flops
    accum = tc.global_batch // (tc.micro_batch * dp)
    out: dict[str, Any] = {
        "rows": len(lengths),
        "task_rounds": len(rounds),
        "held_out_samples": held,
        "held_out_rounds": held_rounds,
        "forward_rounds": len(rounds) + held_rounds,
        "step_micro_steps": accum,
        "eval_tflops": total / 1e12,
        "step_tflops": step / 1e12,
        "steps_of_flops": total / step,
    }
    if ec.interval:
        out["interval"] = ec.interval
        out["share_of_training"] = total / (total + ec.interval * step)
    return out


def render(cfg: Config, res: dict[str, Any], dp: int) -> str:
    lines = [
        f"one evaluation: {res['rows']:,} task rows in {res['task_rounds']} forward round(s) per rank + "
        f"{res['held_out_samples']:,} held-out samples in {res['held_out_rounds']} ({dp} data-parallel ranks)",
        f"  FLOPs: {res['eval_tflops']:,.1f} TFLOP = {res['steps_of_flops']:.4f} training steps "
        f"(one step: {res['step_tflops']:,.1f} TFLOP, {cfg.train.global_batch} x {cfg.train.seq_len} tokens)",
        f"  forwards: {res['forward_rounds']} per rank, a training step runs {res['step_micro_steps']} "
        f"forward+backward micro steps per rank",
    ]
    if "share_of_training" in res:
        lines.append(
            f"  every {res['interval']} steps (eval.interval): {100 * res['share_of_training']:.3f}% of the "
            f"training FLOPs"
        )
    return "\n".join(lines)
