"""How long this rank computes in a step, apart from how long it waits for the others: what names a straggler.

The step's collectives equalise step time: a rank slow in compute makes every other rank wait for it, so every
rank's step takes as long as the slowest one's.  The forward passes hold the step's first collectives (FSDP's
all-gather of each block's parameters, in the block's pre-forward hook); a rank that waits for a slow peer waits
there, and in the backward's collectives after them.  This clock times each rank's forward passes and takes out
the time spent in those all-gathers (a hook before FSDP's pre-forward hook and one after it): what is left is the
rank's own compute, and the straggler monitor (agpt.heartbeat.straggler) compares it across hosts.  A rank
waiting behind a stopped or slow host shows a long wait, never a long compute.  Tensor-parallel collectives inside
a block are not taken out: they stay within a node, whose ranks are all slowed alike.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.distributed.fsdp import FSDPModule


class ComputeClock:
    """Forward compute of one rank, the FSDP all-gathers taken out; `start`/`stop` around each forward pass."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.compute_s = 0.0  # this step's so far
        self.gather_s = 0.0  # ... and its time in the all-gathers (moving parameters, waiting for the others)
        self._active = False
        self._t_forward = 0.0
        self._t_gather = 0.0
        self._gathered = 0.0
        for m in model.modules():
            if isinstance(m, FSDPModule):
                # prepend: before FSDP's own pre-forward hook (registered with prepend at fully_shard); the plain one
                # runs after it, once the all-gather has been waited for.
                m.register_forward_pre_hook(self._before_gather, prepend=True)
                m.register_forward_pre_hook(self._after_gather)

    # Host clocks, never traced: with train.compile a compiled block runs its hooks, and dynamo would break the
    # graph at perf_counter and guard on the float it adds to (a recompile once that changes).
    @torch.compiler.disable
    def _before_gather(self, *_: Any) -> None:
        if self._active:
            self._t_gather = time.perf_counter()

    @torch.compiler.disable
    def _after_gather(self, *_: Any) -> None:
        if self._active:
            self._gathered += time.perf_counter() - self._t_gather

    def new_step(self) -> None:
        self.compute_s = self.gather_s = 0.0

    def start(self) -> None:
        self._active = True
        self._gathered = 0.0
        self._t_forward = time.perf_counter()

    def stop(self) -> None:
        """End of one forward pass (its loss included): add its compute to the step's."""
        if self._active:
            self._active = False
            self.compute_s += max(0.0, time.perf_counter() - self._t_forward - self._gathered)
            self.gather_s += self._gathered
