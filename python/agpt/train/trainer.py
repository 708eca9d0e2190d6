"""The training loop: FSDP2 over fp32 master weights, global-mean loss, exact resume, clean stops.

Each choice here answers a failure seen at scale: the optimizer updates fp32 master shards (bf16
masters froze RMSNorm weights for 17,000 steps); the reported loss is summed over every rank and
divided by the global token count (a loss averaged over the wrong group read 12× too small); a
non-finite loss or gradient stops the run with one clear line (exit 1) instead of training on NaNs,
or with `train.on_nonfinite: rollback` reloads the newest checkpoint and skips past it (health.py);
a signal or the job's deadline ends the run with a complete checkpoint.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from agpt import ckptdir, localtier, rundir, safewrite
from agpt.errors import EXIT_RESUBMIT, AgptError, CheckpointError
from agpt.heartbeat import writer as heartbeat
from agpt.heartbeat.straggler import StragglerMonitor
from agpt.observe import writers as owriters
from agpt.train import checkpoint as ck
from agpt.train import ckpt_policy, clock, faults, localckpt
from agpt.train import compile_cache as tcache
from agpt.train import compute as tcompute
from agpt.train import data as tdata
from agpt.train import dist as tdist
from agpt.train import evaluate as tevaluate
from agpt.train import health as thealth
from agpt.train import metrics as tmetrics
from agpt.train import optim as toptim
from agpt.train import parallel as tpar
from agpt.train import sdc as tsdc
from agpt.train import stages as tstages
from agpt.train.config import Config
from agpt.train.entry import NonFinite
from agpt.train.metrics import StepRecord
from agpt.train.model import Transformer
from agpt.train.stop import NO_STOP, Stop, deadline_near

DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
FULL_INIT_MAX_PARAMS = 1_000_000_000  # above this, build on the meta device and initialise shards


class ModelMismatch(CheckpointError):
    """The checkpoint was written by a different model."""


def format_line(rec: StepRecord, tps: float, stall_ms: float) -> str:
    """The progress line of docs/contract.md; loss and grad_norm with 9 digits (an fp32 round-trips as text)."""
    return (
        f"step={rec.step} loss={rec.loss:.9g} grad_norm={rec.grad_norm:.9g} "
        f"lr={rec.lr:.3e} tps={tps:.1f} stall_ms={stall_ms:.1f}"
    )


class Trainer:
    """One training run on this rank; construct on every rank of the job."""

    def __init__(self, cfg: Config, run_dir: Path | None, *, checkpoints: bool = True) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.info = tdist.detect()
        self.rank = self.info.rank
        self.world = self.info.world_size
        tc = cfg.train
        self.layout = tpar.layout(cfg, self.rank, self.world, self.info.local_world_size)
        self.dp = self.layout.dp
        self.accum = tdata.micro_steps(
            world=self.dp, global_batch=tc.global_batch, micro_batch=tc.micro_batch
        )
        if tc.deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=True)
        self.device_str, backend = tdist.pick_device(tc.device, self.info.local_rank)
        self.device = torch.device(self.device_str)
        if self.device.type == "cpu" and not os.environ.get("OMP_NUM_THREADS"):
            # Ranks sharing a node's cores: oversubscribed OpenMP threads spin and slow everyone.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, self.info.local_world_size)))
        tdist.init(self.info, backend, self.device_str, tc.dist_timeout_s)
        # the recovery clock's process group stage (train/clock.py)
        self.init_marks = {"pg_init": time.time()}
        self.source: tdata.Source
        if cfg.data.stages:
            self.source = tstages.Staged(cfg.data.stages, cfg.model.vocab_size, tc.seq_len)
            self.source.pin(cfg.data.stages, run_dir, self.rank)
        else:
            self.source = tdata.make_source(
                cfg.data.path, cfg.model.vocab_size, tc.seq_len, cfg.data.seed, cfg.data.synthetic
            )
        # Held-out loss and tasks, checked (exit 2 on a bad task file) before anything trains.
        self.evals = tevaluate.InLoop(cfg, run_dir, self.rank) if cfg.eval.interval else None
        # Compiled kernels from the run directory, staged on this node (train/compile_cache.py), before any compile.
        self.compile_cache = tcache.prepare(run_dir, self.rank) if tc.compile else None
        self.model = self._build_model()
        self.compute = tcompute.ComputeClock(self.model)  # compute apart from waiting: what names a straggler
        self.optim = toptim.build(self.model, cfg.optim)
        self.updates: thealth.UpdateMonitor | None = None
        if tc.frozen_threshold > 0:
            named = list(self.model.named_parameters())
            self.updates = thealth.UpdateMonitor(named, tc.frozen_threshold, tc.frozen_logs)
        self.step = 0
        self.consumed = 0
        self.lr_fn: Callable[[int], float] = self.scheduled_lr
        self.ckpt: ck.Checkpointer | None = None
        if checkpoints and run_dir is not None:
            self.ckpt = ck.Checkpointer(
                run_dir / "ckpt",
                cfg.checkpoint,
                rank=self.rank,
                world=self.world,
                pin_memory=self.device.type != "cpu",
            )
        self.local: localckpt.LocalTier | None = (
            None  # node memory with a partner's copy (train/localckpt.py)
        )
        if self.ckpt is not None and cfg.checkpoint.local:
            self.local = localckpt.LocalTier(cfg.checkpoint, self.ckpt.root.parent, rank=self.rank, world=self.world,
                                             layout=localtier.layout_name(self.dp, self.layout.tp), state=self.state,
                                             state_bytes=localckpt.estimate_bytes(self.model),
                                             pin_memory=self.device.type != "cpu")  # fmt: skip
        self.restored: dict[str, Any] = {}  # the tier the state came from, for the recovery clock
        self.health = thealth.Health(cfg, run_dir, self.rank)
        self.faults = faults.Faults(self.rank, run_dir)  # the tests' fault hooks: no-ops unless asked
        self.sdc = tsdc.Guard(self)  # the rerun and the canary: wrong numbers named by rank (sdc.py)
        if self.sdc.flip is not None:
            self.model.get_submodule("output").register_forward_hook(self.sdc.output_hook(self))
        self._signal: int | None = None
        self._swap = False  # the straggler monitor asked for a swap (rank 0)
        self._stage: int | None = None
        self._pending_stall = 0.0
        self._window = tmetrics.Window()
        self.metrics: tmetrics.MetricsWriter | None = None
        if run_dir is not None and self.rank == 0:
            self.metrics = tmetrics.MetricsWriter(run_dir / tmetrics.FILE, cfg, self.world)
        self.clock_marks: dict[str, float] | None = None  # start-up times; the first step writes the clock
        self.hb: heartbeat.Heartbeat | None = None
        self.observe: owriters.Writers | None = None  # TensorBoard, W&B, metrics.prom (rank 0, from run())

    # -- construction -------------------------------------------------------------------------------
    def _build_model(self) -> torch.nn.Module:
        mc, tc = self.cfg.model, self.cfg.train
        master = DTYPE[tc.master_dtype]
        torch.manual_seed(tc.seed)
        self.mesh = tpar.make_mesh(self.device.type, self.layout)
        mesh = tpar.dp_mesh(self.mesh)
        mp = MixedPrecisionPolicy(param_dtype=DTYPE[tc.param_dtype], reduce_dtype=DTYPE[tc.reduce_dtype])
        full = mc.num_params() <= FULL_INIT_MAX_PARAMS
        if full:
            # The same full initialisation on every rank, whatever the world size, then sharded.
            model = Transformer(mc)
            model.init_weights()
            model.to(device=self.device, dtype=master)
        else:
            with torch.device("meta"):
                model = Transformer(mc)
            model.to(dtype=master)
        if self.layout.tp > 1:
            tpar.apply_tp(model, self.mesh["tp"], sequence_parallel=self.cfg.parallel.sequence_parallel)
        for block in model.layers:
            if tc.compile:
                block.compile()  # in place: parameter names (and checkpoints) stay the same
            fully_shard(block, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        if not full:
            model.to_empty(device=self.device)
            model.init_weights()
        model.rope = model.rope.float()
        model.activation_checkpointing = tc.activation_checkpointing
        return model

    # -- schedule -----------------------------------------------------------------------------------
    def scheduled_lr(self, step: int) -> float:
        """Linear warmup to optim.lr, then cosine to optim.min_lr over decay_steps (default train.steps)."""
        oc = self.cfg.optim
        if step < oc.warmup_steps:
            return oc.lr * (step + 1) / oc.warmup_steps
        horizon = oc.decay_steps or self.cfg.train.steps
        span = max(1, horizon - oc.warmup_steps)
        progress = min(1.0, (step - oc.warmup_steps) / span)
        return oc.min_lr + 0.5 * (oc.lr - oc.min_lr) * (1 + math.cos(math.pi * progress))

    # -- state --------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything a resume needs; sharded tensors stay sharded (DCP reshards on load)."""
        msd, osd = get_state_dict(self.model, self.optim, options=StateDictOptions())
        return {
            "model": msd,
            "optim": osd,
            "scheduler": {"step": torch.tensor(self.step, dtype=torch.int64)},
            "trainer": {
                "step": torch.tensor(self.step, dtype=torch.int64),
                "consumed": torch.tensor(self.consumed, dtype=torch.int64),
                "rng_cpu": torch.get_rng_state(),
            },
        }

    def resume(self, *, force: bool = False) -> Path | None:
        """Load the newest complete checkpoint: the local tier's when it is at least as new (a relaunch, not a
        rollback: `force`), else the global one's, falling back past corrupt ones with a warning."""
        if self.ckpt is None or not (self.cfg.checkpoint.resume or force):
            return None
        done = ck.complete_steps(self.ckpt.root)
        if (
            self.local is not None
            and not force
            and (got := self.local.restore(done[-1][0] if done else None))
        ):
            sd, choice = got
            self._adopt(sd, choice.step, self.local.folder)
            self.local.last_saved_step = choice.step
            self.restored = {"tier": "local", "from_partner": choice.from_partner}
            if self.rank == 0:
                print(self.local.resumed_line(choice), flush=True)
            return self.local.folder
        if not done:
            return None
        first_error: CheckpointError | None = None
        for step, path in reversed(done):
            sd = self.state()
            try:
                meta = ck.verified_metadata(path, self.ckpt.group)  # digests before anything is unpickled
                try:
                    ck.check_model(path, meta, sd["model"])
                except CheckpointError as exc:
                    raise ModelMismatch(str(exc)) from None
                ck.check_files(path, meta)
                ck.load(path, sd, self.ckpt.group, meta, coop=self.cfg.checkpoint.coop_load)
            except ModelMismatch:
                raise
            except CheckpointError as exc:
                first_error = first_error or exc
                if self.rank == 0:
                    ck.warn(f"{path} is corrupt ({exc}); trying an older checkpoint")
                continue
            self._adopt(sd, step, path)
            self.restored = {"tier": "global"}
            if self.rank == 0:
                rec = ckptdir.read_marker(path) or {}
                print(
                    f"agpt: resumed from {path} (step {step}, saved by {rec.get('world_size', '?')} ranks, "
                    f"now {self.world})",
                    flush=True,
                )
            self.ckpt.last_saved_step = step  # already on disk: a final save at this step is a no-op
            return path
        assert first_error is not None
        raise first_error

    def _adopt(self, sd: dict[str, Any], step: int, path: Path) -> None:
        """Make a loaded state this trainer's (model, optimizer, step, data position, RNG)."""
        set_state_dict(self.model, self.optim, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        self.step = int(sd["trainer"]["step"])
        self.consumed = int(sd["trainer"]["consumed"])
        torch.set_rng_state(sd["trainer"]["rng_cpu"])
        if self.step != step:
            raise CheckpointError(f"{path}: holds step {self.step}, not {step}")

    # -- one step -----------------------------------------------------------------------------------
    def train_step(self, *, stop: Stop = NO_STOP) -> tuple[StepRecord, Stop]:
        """One update: forward and backward over the micro-batches, clip, one all-reduce of the loss with every
        rank's stop request, the health check, the optimizer.  Returns the record and the agreed request."""
        tc = self.cfg.train
        t0 = time.perf_counter()
        self._phase("data")
        self.compute.new_step()
        self.consumed = self.health.skip_to(self.consumed, tc.global_batch)  # past skipped batches
        lr = self._set_lr()
        loss_sum, wait = self._forward_backward()
        self.sdc.record(self.step + 1, loss_sum, self.model)
        norm = self._clip_gradients()
        t_wait = time.perf_counter()  # what follows waits for the other ranks
        loss, agreed = self._all_reduce(loss_sum, stop)
        grad_norm = float(norm)
        wait += time.perf_counter() - t_wait
        try:
            self.health.check(self.step + 1, loss, grad_norm)  # NonFinite (stop) or Fault (roll back)
        except (thealth.Fault, NonFinite) as exc:
            # Before either: the same step again, to tell a device (SilentCorruption) from the data or the model.
            self.sdc.attribute(self, self.step + 1, exc.kind if isinstance(exc, thealth.Fault) else
                                "spike" if isinstance(exc, thealth.SpikeStop) else "not finite")  # fmt: skip
            self.optim.zero_grad(set_to_none=True)
            raise
        except BaseException:
            self.optim.zero_grad(set_to_none=True)
            raise
        update = self._update()
        self.step += 1
        self.consumed += tc.global_batch
        if self.hb is not None:
            self.hb.step(self.step, self.compute.compute_s, wait_s=self.compute.gather_s)
            self.hb.phase("data")
        seconds = time.perf_counter() - t0
        rec = StepRecord(step=self.step, loss=loss, grad_norm=grad_norm, lr=lr, tokens=tc.global_batch * tc.seq_len,
                         seconds=seconds, peak_mem=self.peak_memory(), compute_s=seconds - wait, wait_s=wait,
                         update=update)  # fmt: skip
        return rec, agreed

    def _set_lr(self) -> float:
        """The scheduled rate for the next step (lowered after a rollback: health.py), on every group."""
        lr = self.lr_fn(self.step) * self.health.lr_factor(self.step + 1)
        for group in self.optim.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        return lr

    def _forward_backward(self) -> tuple[torch.Tensor, float]:
        """Gradients of the global mean loss over this rank's micro-batches: (summed loss, seconds reading data)."""
        tc = self.cfg.train
        scale = self.dp / (
            tc.global_batch * tc.seq_len
        )  # FSDP averages over dp ranks; undo into a global mean
        local_sum = torch.zeros((), dtype=torch.float32, device=self.device)
        wait = 0.0
        for micro in range(self.accum):
            t_data = time.perf_counter()
            # Every rank of a tensor-parallel group reads the same samples: its data-parallel slice.
            idx = tdata.sample_indices(consumed=self.consumed, rank=self.layout.dp_rank, world=self.dp,
                                       global_batch=tc.global_batch, micro_batch=tc.micro_batch,
                                       micro_step=micro)  # fmt: skip
            # Past the end of an uneven share: a micro batch of weight 0 keeps this rank's collectives in step.
            weight = 1.0 if len(idx) else 0.0
            idx = idx or range(idx.start - 1, idx.start)
            if self.layout.tp_rank == 0:
                self.faults.samples(self.step + 1, self.layout.dp_rank, micro, idx, weight)
            batch = torch.from_numpy(tdata.micro_batch(self.source, idx)).to(self.device)
            wait += time.perf_counter() - t_data
            inputs, targets = batch[:, :-1], batch[:, 1:]
            self.model.set_requires_gradient_sync(micro == self.accum - 1)  # type: ignore[operator]
            self._phase("forward")
            t_fwd = time.perf_counter()
            self.compute.start()
            logits = self.model(inputs)
            self.faults.forward(self.step + 1, time.perf_counter() - t_fwd)
            loss_sum = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum"
            )
            self.compute.stop()
            self._phase("backward")
            (loss_sum * (scale * weight)).backward()
            local_sum += loss_sum.detach() * weight
        return local_sum, wait

    def _clip_gradients(self) -> torch.Tensor:
        """Clip to optim.grad_clip; the global gradient norm (a tensor: reading it would wait for the device)."""
        clip = self.cfg.optim.grad_clip or float("inf")
        if self.layout.tp == 1:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip, foreach=True)
        else:  # parameters on two meshes (dp, and dp x tp): a norm that counts each element once
            norm = tpar.clip_grad_norm(self.model.parameters(), clip, self.world)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        if self.device.type != "cpu":
            torch.accelerator.synchronize()  # what follows is waiting for other ranks, not compute
        return norm

    def _all_reduce(self, loss_sum: torch.Tensor, stop: Stop) -> tuple[float, Stop]:
        """The global mean loss and the stop any rank asked for, in one all-reduce over every rank."""
        # The loss is the same on every rank of a tensor-parallel group: count it once, from tp rank 0.
        mine = loss_sum if self.layout.tp_rank == 0 else torch.zeros_like(loss_sum)
        mine = self.faults.loss(self.step + 1, mine)
        totals = torch.stack([mine, *(torch.tensor(x, device=self.device) for x in stop.encode())])
        self._phase("collective")
        dist.all_reduce(totals)
        tc = self.cfg.train
        return float(totals[0] / (tc.global_batch * tc.seq_len)), Stop.decode(totals[1:].tolist())

    def _update(self) -> dict[str, float] | None:
        """The optimizer step; on a logged step, each parameter group's relative update (frozen groups)."""
        self._phase("optimizer")
        tc = self.cfg.train
        logged = (self.step + 1) % tc.log_interval == 0 or self.step + 1 == tc.steps
        if logged and self.updates is not None:
            self.updates.before()
        self.optim.step()
        update = self.updates.after() if logged and self.updates is not None else None
        self.optim.zero_grad(set_to_none=True)
        return update

    def peak_memory(self) -> int:
        """Accelerator peak bytes; on CPU the bytes of parameters and optimizer state (deterministic)."""
        if self.device.type != "cpu":
            return int(torch.accelerator.max_memory_allocated())
        total = 0
        for p in self.model.parameters():
            total += _local(p).numel() * p.element_size()
        for st in self.optim.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor):
                    total += _local(v).numel() * v.element_size()
        return total

    def describe(self) -> str:
        """One line a person checks first in a job log: what runs where, and how the batch is split."""
        tc = self.cfg.train
        params = self.cfg.model.num_params()
        tp = self.layout.tp
        split = "" if tp == 1 else f" as dp {self.dp} x tp {tp}"
        if tp > 1 and self.cfg.parallel.sequence_parallel:
            split += " (sequence parallel)"
        batch = f"{self.dp} dp ranks x micro {tc.micro_batch} x accum {self.accum}"
        if tc.global_batch % (tc.micro_batch * self.dp):
            hi = tdata.share(rank=0, world=self.dp, global_batch=tc.global_batch)[1]
            lo = tdata.share(rank=self.dp - 1, world=self.dp, global_batch=tc.global_batch)[1]
            batch = (f"{self.dp} dp ranks x {lo}-{hi} samples in {self.accum} micro-steps of at most "
                     f"{tc.micro_batch} (uneven: train.uneven_batch)")  # fmt: skip
        return (
            f"agpt: train: {params / 1e6:.1f}M parameters on {self.world} ranks ({self.device.type}){split}, "
            f"global batch {tc.global_batch} = {batch}, "
            f"seq {tc.seq_len}, params {tc.param_dtype} over {tc.master_dtype} masters, "
            f"run dir {self.run_dir or '(none)'}"
        ) + ("\nagpt: train: WARNING: SYNTHETIC DATA (data.synthetic: true): generated tokens, no real data; "
             "this run trains nothing useful" if not self.cfg.data.path else "")  # fmt: skip

    # -- the loop -----------------------------------------------------------------------------------
    def _phase(self, name: str) -> None:
        if self.hb is not None:
            self.hb.phase(name)

    def _start_heartbeat(self) -> None:
        """Heartbeats (agpt.heartbeat); on rank 0 the straggler monitor, whose swap request stops the run
        as SIGUSR1 does: a checkpoint, then exit 75, and the failover loop swaps the straggler."""
        hc = self.cfg.heartbeat
        if not hc.enabled or self.run_dir is None:
            return
        monitor = StragglerMonitor.from_env(self.run_dir, heartbeat.attempt_id()) if self.rank == 0 else None

        def poll(_hb: heartbeat.Heartbeat) -> None:
            if monitor is not None and monitor.poll() and monitor.swap_host:
                self._swap = True  # at the next local checkpoint (_stop_request)

        self.hb = heartbeat.start(self.run_dir, interval_s=hc.interval_s, on_publish=poll, tick_s=hc.tick_s,
                                  dump_s=hc.dump_s, host=hc.host, local_dir=hc.local_dir)  # fmt: skip
        if self.hb is not None:
            self.hb.step(self.step)  # the resumed step: a record never says step 0 after a resume

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._signal = signum

    def _stop_request(self, since_save_s: float) -> Stop:
        """What this rank asks of the next step: stop on a signal or the deadline, or a time-based save."""
        due = ckpt_policy.due_by_time(since_save_s, self.cfg.checkpoint.interval_s) and self.rank == 0
        near = deadline_near(self.cfg.train.deadline_margin_s)
        local = self.local is not None and self.rank == 0 and self.local.due_by_time()
        # A straggler's swap waits for the next local checkpoint, the cheap one to resume from; without the tier, a
        # global save now.
        swap = self._swap and self.local is not None and self.local.on
        resubmit = self._signal == signal.SIGUSR1 or near or (self._swap and not swap)
        return Stop(term=self._signal == signal.SIGTERM, resubmit=resubmit, save=due, local=local,
                    swap=swap)  # fmt: skip

    def save(self, *, block: bool) -> None:
        if self.ckpt is None or self.ckpt.last_saved_step == self.step:
            return
        self._phase("checkpoint")
        self._pending_stall += self.ckpt.save(self.step, self.state, block=block)

    def _wait_saves(self) -> None:
        """Both tiers' saves in flight, to their end (a failed global save raises; a failed local one warns)."""
        if self.local is not None:
            self.local.wait()
        if self.ckpt is not None:
            self.ckpt.wait()

    def write_progress(self) -> None:
        if self.run_dir is None or self.rank != 0:
            return
        text = f"step={self.step} time={int(time.time())}\n"
        safewrite.replace(self.run_dir / rundir.PROGRESS, text, sync=False)

    def run(self, emit: Callable[[str], None] | None = None) -> int:
        """Train to train.steps; 0 when done, 75 after a deadline/SIGUSR1 stop, 143 after SIGTERM."""
        emit = emit or (lambda line: print(line, flush=True))
        self._begin_run()
        t_save = time.perf_counter()
        try:
            if self.cfg.checkpoint.save_and_stop:
                return self._save_and_stop()
            while self.step < self.cfg.train.steps:
                try:
                    rec, agreed = self.train_step(stop=self._stop_request(time.perf_counter() - t_save))
                except thealth.Fault as fault:
                    self._rollback(fault)
                    continue
                self._after_step(rec)
                if self.sdc.canary_due(self.step):
                    self._phase("forward")
                    self.sdc.check_canary(self)  # SilentCorruption naming a rank outside the majority
                if agreed.ends_run:
                    return self._stop(agreed, emit, rec)
                if self.evals is not None and self.step % self.cfg.eval.interval == 0:
                    # Before this step's save: a regression rolls back to a checkpoint from before it.
                    try:
                        rec.eval = self._evaluate()
                    except thealth.Fault as fault:
                        self._rollback(fault, applied=True)
                        continue
                saved = ckpt_policy.due_by_step(self.step, self.cfg.checkpoint.interval) or agreed.save
                if saved:
                    self.save(block=False)
                    t_save = time.perf_counter()
                local_due = agreed.local or saved  # a global save is a local one too: memory holds it
                if self.local is not None and self.local.due(self.step, local_due):
                    self._phase("checkpoint")
                    self._pending_stall += self.local.save(self.step)
                    if agreed.swap:
                        return self._swap_stop(emit, rec)
                if (
                    self.step % self.cfg.train.log_interval == 0
                    or self.step == self.cfg.train.steps
                    or rec.eval
                ):
                    self._log(emit, rec)
            if self.cfg.checkpoint.save_final:
                self.save(block=False)
            self._wait_saves()
            return 0
        except AgptError:
            with contextlib.suppress(AgptError):  # the error that stopped the run is the one to report
                self._wait_saves()
            raise
        finally:
            if self.hb is not None:
                self.hb.stop()
            if self.observe is not None:
                self.observe.close()

    def _begin_run(self) -> None:
        """Signal handlers, the run directory, heartbeats, the observers and evaluations from this step on, and the
        line a person reads first."""
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, self._on_signal)
        if self.run_dir is not None and self.rank == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self._start_heartbeat()
        if self.run_dir is not None and self.rank == 0:  # after the resume: replayed steps replace old ones
            self.observe = owriters.Writers(self.run_dir, self.cfg.observe, self.cfg.to_dict(), self.step)
        if self.evals is not None:
            self.evals.restart(self.step)
        if self.rank == 0:
            print(self.describe(), flush=True)
            if self.step >= self.cfg.train.steps:
                print(f"agpt: already at step {self.step} (train.steps {self.cfg.train.steps}): nothing to do",
                      flush=True)  # fmt: skip
        self._window.reset()

    def _after_step(self, rec: StepRecord) -> None:
        """The bookkeeping of a step: its data stage, the log window, the recovery clock's first step."""
        self._note_stage()
        self._window.add(rec.tokens, rec.compute_s, rec.wait_s)
        if self.clock_marks is not None:
            if self.rank == 0 and self.run_dir is not None:
                clock.record(
                    self.run_dir, {**self.clock_marks, "first_step": time.time()}, self.step, **self.restored
                )
            self.clock_marks = None
            # the first step compiled what this run needs: keep it with the run
            if self.compile_cache is not None:
                self.compile_cache.save_async()

    def _stop(self, agreed: Stop, emit: Callable[[str], None], rec: StepRecord) -> int:
        """A signal or the deadline: a blocking save of this step, its line, and the exit code that says why."""
        self.save(block=True)
        self._log(emit, rec)
        self._wait_saves()
        if self.rank == 0:
            print(rundir.STOP_LINE.format(step=self.step, reason=agreed.reason), flush=True)
        return agreed.exit_code

    def _save_and_stop(self) -> int:
        """checkpoint.save_and_stop, the failover loop's save before a stop for a person: the restored state saved
        globally before any step when it is newer than the newest global checkpoint (node memory's), its line,
        exit 75.  The step that failed is never trained again here: a deterministic bug would fail it."""
        newest = ck.complete_steps(self.ckpt.root) if self.ckpt is not None else []
        fresh = self.ckpt is not None and (not newest or newest[-1][0] < self.step)
        if fresh:
            self.save(block=True)
        self._wait_saves()
        if self.rank == 0:
            what = (
                f"step {self.step} saved globally"
                if fresh
                else f"nothing newer than step {self.step} to save"
            )
            print(f"agpt: event: save before a stop: {what}", flush=True)
            print(rundir.STOP_LINE.format(step=self.step, reason=rundir.RESUBMIT_REASON), flush=True)
        return EXIT_RESUBMIT

    def _swap_stop(self, emit: Callable[[str], None], rec: StepRecord) -> int:
        """The straggler's swap at this step's local checkpoint: its save to the end (the partner's copy too), its
        line, exit 75; the failover loop swaps the host the monitor named (heartbeat/swap.json) and the relaunch
        restores from node memory."""
        self._log(emit, rec)
        self._wait_saves()
        if self.rank == 0:
            print(
                f"agpt: event: straggler swap: stopping at the local checkpoint of step {self.step}",
                flush=True,
            )
            print(rundir.STOP_LINE.format(step=self.step, reason=rundir.RESUBMIT_REASON), flush=True)
        return EXIT_RESUBMIT

    def _note_stage(self) -> None:
        """An event when the next step's batch reaches another data stage than the last one."""
        if not isinstance(self.source, tstages.Staged):
            return
        stage = self.source.stage_of(self.consumed + self.cfg.train.global_batch - 1)
        if self._stage is not None and stage != self._stage:
            self.health.event(
                "stage",
                f"event: data stage {stage} ({self.source.paths[stage]}) from step {self.step + 1}",
                step=self.step + 1,
                stage=stage,
                path=self.source.paths[stage],
            )
        self._stage = stage

    def _evaluate(self) -> dict[str, Any]:
        """The in-loop evaluation (evaluate.InLoop); its regressions are health events, and with
        eval.on_regression: rollback a Fault on every rank (rank 0 judges, the step's flag tells the rest)."""
        assert self.evals is not None
        out, regs = self.evals.run(self)
        if self.rank == 0:
            print(tevaluate.line(self.step, out), flush=True)
        for reg in regs:
            self.health.event("eval_regression", reg.line(), **reg.fields())
        flag = torch.tensor(1.0 if regs and self.evals.rollback else 0.0, device=self.device)
        dist.all_reduce(flag)
        if float(flag):
            raise thealth.Fault(self.step, "eval_regression", regs[0].line().removeprefix("event: ") if regs else
                                f"eval regression at step {self.step}")  # fmt: skip
        return out

    def _rollback(self, fault: thealth.Fault, *, applied: bool = False) -> None:
        """Reload the newest complete checkpoint in-process and skip the batches since it (health.py);
        `applied`: the step that failed was applied (an evaluation after it regressed), its batch skipped too."""
        self.health.begin_rollback(fault)  # TooManyRollbacks (exit 4) past train.max_rollbacks
        batch = self.cfg.train.global_batch
        fault_batch = self.consumed // batch + (0 if applied else 1)
        path = None
        if self.ckpt is not None:
            self.ckpt.wait()
            dist.barrier()  # rank 0 writes a save's `.complete` after the others' writers return
            path = self.resume(force=True)
        if path is None:
            raise NonFinite(f"{fault.detail}: no complete checkpoint to roll back to; stopping")
        self.health.finish_rollback(
            fault, ckpt_step=self.step, from_batch=self.consumed // batch + 1, to_batch=fault_batch
        )
        if self.observe is not None:
            self.observe.rollback(self.step)
        if self.evals is not None:
            self.evals.restart(self.step)
        self._window.reset()

    def _log(self, emit: Callable[[str], None], rec: StepRecord) -> None:
        """The progress line, the progress file, frozen-group warnings and metrics.jsonl (rank 0); a new window."""
        self.health.logged(rec.step, rec.loss, rec.grad_norm)
        stall_s = self._pending_stall
        stall_ms = stall_s * 1000
        self._pending_stall = 0.0
        if self.rank == 0:
            elapsed = max(time.perf_counter() - self._window.started, 1e-9)
            emit(format_line(rec, self._window.tokens / elapsed, stall_ms))
            self.write_progress()
            if self.updates is not None and rec.update:
                for group in self.updates.judge(rec.update, rec.lr):
                    self.health.event(
                        "frozen",
                        f"warning: parameter group {group} frozen: relative update |dw|/|w| = "
                        f"{rec.update[group]:.3g} < train.frozen_threshold {self.updates.threshold:g} "
                        f"for {self.updates.logs} logs in a row (step {rec.step})",
                        step=rec.step,
                        group=group,
                        update=rec.update[group],
                        threshold=self.updates.threshold,
                        logs=self.updates.logs,
                    )
            if self.metrics is not None:
                tokens = self.consumed * self.cfg.train.seq_len
                record = self.metrics.record(
                    rec, tokens_consumed=tokens, window=self._window, stall_s=stall_s
                )
                self.metrics.write(record)
                if self.observe is not None:
                    self.observe.log(record)
        self._window.reset()


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t
