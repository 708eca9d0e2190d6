"""Wrong numbers are failures too: silent data corruption attributed to the rank, and the host, that computed them.

A device that computes wrong without an error (about one in a thousand in fleet studies) shows as a loss spike, a
NaN, or nothing at all.  Two detectors name it; both end the same way:

- rerun: when a step's loss or gradient is not finite, or its loss spikes (agpt.train.health), the step is
  recomputed from the same state and batch before anything is rolled back (Megatron-LM's rerun state machine,
  https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/rerun_state_machine.py, does the same to tell a
  transient fault from a reproducible one).  Each rank's fingerprint of the two runs, its local loss and the norm
  of its gradient shard, is compared bit for bit: the same everywhere, the data or the model did it (the health
  layer's rollback-and-skip); different on a minority of ranks, those ranks' devices did.  A rerun that fails
  itself (out of memory) falls back to the rollback and says so.
- canary: every `train.canary_interval` steps each rank runs the forward pass of one fixed canary micro-batch (the
  data's first sample) with the current weights; the results must agree across ranks bit for bit
  (`train.canary_rtol` 0) or within that relative tolerance.  A rank outside the majority is the evidence.

A named rank's host is printed as `sdc: HOST rank R: ...` (rank 0, one line per rank) and a `sdc` record in
RUN_DIR/health.jsonl, and the run stops with SilentCorruption (exit 1) without saving: the failover classifier's
pattern `app.sdc` (class node) reads the line, the loop evicts HOST and relaunches on a spare from the newest
checkpoint.
"""

from __future__ import annotations

import collections
import math
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from agpt.errors import ConfigError
from agpt.nodelocal import host_name
from agpt.train import data as tdata
from agpt.train import faults
from agpt.train.config import Config
from agpt.train.entry import SilentCorruption
from agpt.train.health import Health


class Trainer(Protocol):
    """What the guard reads and runs of agpt.train.trainer.Trainer (which imports this module, not the reverse)."""

    cfg: Config
    rank: int
    world: int
    device: torch.device
    step: int
    source: tdata.Source
    faults: faults.Faults
    health: Health
    model: torch.nn.Module
    optim: torch.optim.Optimizer

    def _forward_backward(self) -> tuple[torch.Tensor, float]: ...


LINE = "sdc: {host} rank {rank}: {what}"  # the evidence line (pattern app.sdc reads it)


def build_canary(source: tdata.Source, vocab_size: int, seq_len: int) -> torch.Tensor:
    """The canary micro-batch: the data's first sample, checked here so that a batch that cannot be built is a
    configuration error at start, naming train.canary_interval."""
    key = "train.canary_interval"
    try:
        batch = tdata.micro_batch(source, range(0, 1))
    except Exception as exc:  # a data source's own error (DataError, an unreadable shard)
        raise ConfigError(f"{key}: cannot build the canary batch from the data's first sample ({exc}); "
                          f"set {key}=0 to run without the canary") from None  # fmt: skip
    if batch.shape != (1, seq_len + 1):
        raise ConfigError(
            f"{key}: the canary sample has {batch.shape[-1] - 1} tokens, train.seq_len is {seq_len}"
        )
    top = int(batch.max()) if batch.size else -1
    if top >= vocab_size or int(batch.min()) < 0:
        raise ConfigError(f"{key}: the canary sample holds token {top}, outside model.vocab_size {vocab_size} "
                          "(the data and the model disagree)")  # fmt: skip
    return torch.from_numpy(np.ascontiguousarray(batch))


def grad_shard_sq(model: torch.nn.Module) -> torch.Tensor:
    """The squared norm of this rank's local gradient shards (float64): half of a rank's fingerprint."""
    grads = [
        g.to_local() if isinstance(g, DTensor) else g for p in model.parameters() if (g := p.grad) is not None
    ]
    if not grads:
        return torch.zeros((), dtype=torch.float64)
    norms = torch._foreach_norm([g.detach() for g in grads])
    return torch.stack([n.double() for n in norms]).square().sum()


def _bits(t: torch.Tensor) -> list[int]:
    """A float64 tensor's values as their bit patterns: equal exactly when the numbers are (NaN included)."""
    return [int(x) for x in t.detach().cpu().double().contiguous().view(torch.int64).tolist()]


def _minority(changed: list[int], world: int) -> list[int]:
    """The ranks to name: a minority of the world (more is not one device's doing)."""
    return changed if changed and 2 * len(changed) < world else []


class Guard:
    """The rerun and the canary of one rank (constructed on every rank; both collective)."""

    def __init__(self, trainer: Trainer) -> None:
        tc = trainer.cfg.train
        self.rank, self.world = trainer.rank, trainer.world
        self.device = trainer.device
        self.rerun = tc.rerun
        self.interval = tc.canary_interval
        self.rtol = tc.canary_rtol
        self.host = trainer.cfg.heartbeat.host or host_name()
        self.fingerprint: torch.Tensor | None = None  # [local loss sum, gradient shard norm squared]
        self.canary: torch.Tensor | None = None
        if self.interval:
            self.canary = build_canary(trainer.source, trainer.cfg.model.vocab_size, tc.seq_len).to(
                self.device
            )
        self.faults = trainer.faults
        self.flip = trainer.faults.bitflip_plan(not trainer.cfg.data.path and trainer.cfg.data.synthetic)
        self._weights: torch.Tensor | None = None
        self._phase_where = "matmul"  # where a forward runs: a training step's, or the canary's

    # -- the step's fingerprint ---------------------------------------------------------------------------------
    def record(self, step: int, loss_sum: torch.Tensor, model: torch.nn.Module) -> None:
        """After the backward of STEP: the fingerprint a rerun compares with (and the gradient flip of the tests)."""
        if self.faults.flips(step, "grad", self.flip):
            first = next(p.grad for p in model.parameters() if p.grad is not None)
            faults.flip_bit(first.to_local() if isinstance(first, DTensor) else first)
        if self.rerun:
            self.fingerprint = torch.stack(
                [loss_sum.detach().double(), grad_shard_sq(model).to(loss_sum.device)]
            )

    def output_hook(self, trainer: Trainer) -> Any:
        """A forward hook on the output projection: the matmul and canary flips of the tests (registered only when
        AGPT_FAULT_BITFLIP asks for one)."""

        def hook(_mod: torch.nn.Module, _inp: Any, out: torch.Tensor) -> None:
            if self.faults.flips(trainer.step + 1 if self._phase_where == "matmul" else trainer.step,
                                 self._phase_where, self.flip):  # fmt: skip
                faults.flip_bit(out.to_local() if isinstance(out, DTensor) else out)

        return hook

    # -- the rerun --------------------------------------------------------------------------------------------
    def attribute(self, trainer: Trainer, step: int, what: str) -> None:
        """Recompute STEP (its numbers were WHAT) from the same state and batch; raise SilentCorruption naming the
        ranks whose fingerprint changed, else return (the caller rolls back or stops, as without a rerun)."""
        if not self.rerun or self.fingerprint is None:
            return
        first, failed, second = self.fingerprint, 0.0, torch.zeros(2, dtype=torch.float64, device=self.device)
        trainer.optim.zero_grad(set_to_none=True)
        err = ""
        try:
            self.faults.rerun_fails(step)
            loss_sum, _ = trainer._forward_backward()
            second = torch.stack(
                [loss_sum.detach().double(), grad_shard_sq(trainer.model).to(loss_sum.device)]
            )
        except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
            failed, err = 1.0, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        finally:
            trainer.optim.zero_grad(set_to_none=True)
        row = torch.cat([first.to(self.device), second, torch.tensor([failed], dtype=torch.float64,
                                                                      device=self.device)])  # fmt: skip
        rows = [torch.empty_like(row) for _ in range(self.world)]
        dist.all_gather(rows, row)
        fails = [r for r, x in enumerate(rows) if float(x[4])]
        if fails:
            self._event(trainer, "rerun", f"event: rerun: step {step} ({what}) could not be recomputed on rank(s) "
                        f"{_ranks(fails)}{' (' + err + ')' if err else ''}: rolling back without attribution",
                        step=step, outcome="failed", ranks=fails)  # fmt: skip
            return
        loss_changed = [r for r, x in enumerate(rows) if _bits(x[0:1]) != _bits(x[2:3])]
        grad_changed = [r for r, x in enumerate(rows) if _bits(x[1:2]) != _bits(x[3:4])]
        if not loss_changed and not grad_changed:
            self._event(trainer, "rerun", f"event: rerun: step {step} ({what}) reproduced bit for bit on all "
                        f"{self.world} ranks: the data or the model, not a device", step=step,
                        outcome="reproduced", ranks=[])  # fmt: skip
            return
        # A forward fault changes its rank's local loss (and, through the gradient reduction, every rank's shard):
        # the losses name it.  A fault after the reduction changes one shard alone.
        named = _minority(loss_changed, self.world) if loss_changed else _minority(grad_changed, self.world)
        if not named:
            changed = loss_changed or grad_changed
            self._event(trainer, "rerun", f"event: rerun: step {step} ({what}) differs on {len(changed)} of "
                        f"{self.world} ranks: a transient fault no single rank explains; rolling back",
                        step=step, outcome="unattributed", ranks=changed)  # fmt: skip
            return
        hosts = self._hosts()
        lines = []
        for r in named:
            x = rows[r]
            lines.append(LINE.format(host=hosts[r], rank=r, what=(
                f"step {step} ({what}) recomputed from the same state and batch differs on this rank alone: local "
                f"loss {float(x[0]):.9g} then {float(x[2]):.9g}, gradient shard norm {math.sqrt(float(x[1])):.9g} "
                f"then {math.sqrt(float(x[3])):.9g}; {self.world - len(named)} other rank(s) reproduced bit for "
                f"bit: silent data corruption on its device")))  # fmt: skip
        self._convict(trainer, step, "rerun", named, hosts, lines)

    # -- the canary -------------------------------------------------------------------------------------------
    def canary_due(self, step: int) -> bool:
        return bool(self.interval) and step % self.interval == 0

    def check_canary(self, trainer: Trainer) -> None:
        """The canary forward on every rank, compared across ranks; SilentCorruption naming the ranks outside the
        majority."""
        assert self.canary is not None
        self._phase_where = "canary"
        try:
            with torch.no_grad():
                logits = trainer.model(self.canary[:, :-1])
        finally:
            self._phase_where = "matmul"
        flat = logits.float().reshape(-1)
        if self._weights is None or self._weights.numel() != flat.numel():
            self._weights = torch.arange(flat.numel(), device=flat.device, dtype=torch.int64) % 65521 + 1
        digest = (
            flat.contiguous().view(torch.int32).long() * self._weights
        ).sum()  # position-sensitive, exact
        # The digest's low 52 bits travel exactly in a float64, beside the sum for the tolerance: one all-gather.
        row = torch.stack([(digest % (1 << 52)).double(), flat.double().sum(), flat.double().abs().sum()])
        rows = [torch.empty_like(row) for _ in range(self.world)]
        dist.all_gather(rows, row)
        if self.rtol:
            mid = sorted(float(x[2]) for x in rows)[self.world // 2]
            odd = [r for r, x in enumerate(rows)
                   if not math.isfinite(float(x[2])) or abs(float(x[2]) - mid) > self.rtol * abs(mid)]  # fmt: skip
            how = f"sum |logits| {{v:.9g}}, the majority's {mid:.9g} (train.canary_rtol {self.rtol:g})"
        else:
            keys = [int(x[0]) for x in rows]
            top, count = collections.Counter(keys).most_common(1)[0]
            odd = (
                [r for r, k in enumerate(keys) if k != top]
                if 2 * count > self.world
                else list(range(self.world))
            )
            how = f"digest {{k}} of its logits, {count} of {self.world} ranks agree on {top}"
        if not odd:
            return
        step = trainer.step
        named = _minority(odd, self.world)
        if not named:
            self._event(trainer, "canary", f"event: canary: after step {step} the ranks disagree with no majority "
                        f"({len(odd)} of {self.world} outside it): nothing named", step=step, ranks=odd)  # fmt: skip
            return
        hosts = self._hosts()
        lines = []
        for r in named:
            detail = how.format(v=float(rows[r][2]), k=int(rows[r][0]))
            lines.append(LINE.format(host=hosts[r], rank=r, what=(
                f"the canary forward after step {step} (the same weights and batch on every rank) differs on this "
                f"rank: {detail}: silent data corruption on its device")))  # fmt: skip
        self._convict(trainer, step, "canary", named, hosts, lines)

    # -- verdicts ---------------------------------------------------------------------------------------------
    def _hosts(self) -> list[str]:
        hosts: list[Any] = [None] * self.world
        dist.all_gather_object(hosts, self.host)
        return [str(h) for h in hosts]

    def _event(self, trainer: Trainer, kind: str, line: str, **fields: Any) -> None:
        trainer.health.event(kind, line, **fields)

    def _convict(self, trainer: Trainer, step: int, how: str, named: list[int], hosts: list[str],
                 lines: list[str]) -> None:  # fmt: skip
        """The evidence lines (rank 0), a health record per rank, and the stop every rank raises alike."""
        for r, line in zip(named, lines, strict=True):
            if self.rank == 0:
                print(line, flush=True)
            trainer.health.record("sdc", step=step, detector=how, rank=r, host=hosts[r], evidence=line)
        raise SilentCorruption(
            f"silent data corruption found by the {how} at step {step} on {', '.join(sorted({hosts[r] for r in named}))}: "
            "stopping without a save, to resume from the newest checkpoint without that host"
        )


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks)
