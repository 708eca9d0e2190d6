"""The fault-injection hooks of the tests and drills, in one module.

The trainer calls each hook where its fault would strike; each is a no-op unless its variable is set
(docs/contract.md lists them), so production code reads as if there were none.

  AGPT_FAULT_NAN_AT=K                    rank 0's loss contribution at step K is NaN (once per run directory)
  AGPT_FAULT_SPIKE_AT=K                  ... 1000 times larger: a loss spike (once per run directory)
  AGPT_FAULT_EVAL_AT=K                   the in-loop evaluation of step K scores every task 0 and every bits per
                                         byte 10 times larger: a regression (rank 0, once per run directory)
  AGPT_FAULT_SLEEP_AT=STEP[:HOST]        the ranks (of HOST) sleep forever, alive, in the forward pass of STEP
  AGPT_FAULT_SLOW_HOST=HOST[:FACTOR]     HOST's forward passes take FACTOR (default 3) times as long
  AGPT_TEST_STEP_PACE=S                  every rank sleeps S seconds after each forward pass: a run paced so that
                                         it cannot finish inside one short test job, however fast the machine
  AGPT_TEST_CKPT_WRITE_DELAY=S | STEP:S[,STEP:S...]
                                         a checkpoint writer sleeps S seconds before writing (tests kill
                                         ranks in the middle of a save)
  AGPT_TEST_LOCAL_FULL=STEP[:HOST]       the local tier's write of STEP (on HOST) fails as a full node-local
                                         folder does (ENOSPC)
  AGPT_FAULT_BITFLIP=STEP:RANK:WHERE     one bit of RANK's numbers flips at STEP (once per run directory): WHERE is
                                         `matmul` (an element of the output projection's result in the step's first
                                         forward), `grad` (an element of its gradient shard after the backward) or
                                         `canary` (an element of its canary forward's result after STEP).  Refused
                                         (exit 2) unless AGPT_TEST_FAULTS=1 and the run reads synthetic data: a
                                         production run never flips its own numbers
  AGPT_FAULT_RERUN_OOM=STEP              the rerun of STEP (agpt.train.sdc) fails as an out-of-memory error does
  AGPT_FAULT_BUG_AT=STEP                 every rank raises a ValueError in the forward pass of STEP, in every run: a
                                         bug that recurs at its step, which the failover loop stops for a person
  AGPT_TEST_SAMPLE_LOG=PATH              every micro batch appends `ATTEMPT STEP DP_RANK MICRO FIRST COUNT WEIGHT`
                                         to PATH (tp rank 0 only): the samples a run consumed, in order (the
                                         shrink drill compares them with an unfaulted run's)
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agpt.errors import ConfigError
from agpt.nodelocal import host_name

NAN_AT = "AGPT_FAULT_NAN_AT"
SPIKE_AT = "AGPT_FAULT_SPIKE_AT"
EVAL_AT = "AGPT_FAULT_EVAL_AT"
SLEEP_AT = "AGPT_FAULT_SLEEP_AT"
SLOW_HOST = "AGPT_FAULT_SLOW_HOST"
STEP_PACE = "AGPT_TEST_STEP_PACE"
CKPT_WRITE_DELAY = "AGPT_TEST_CKPT_WRITE_DELAY"
LOCAL_FULL = "AGPT_TEST_LOCAL_FULL"
SAMPLE_LOG = "AGPT_TEST_SAMPLE_LOG"
BITFLIP = "AGPT_FAULT_BITFLIP"
RERUN_OOM = "AGPT_FAULT_RERUN_OOM"
BUG_AT = "AGPT_FAULT_BUG_AT"
TEST_FAULTS = "AGPT_TEST_FAULTS"  # =1: the number faults may run (tests only)
FLIP_WHERE = ("matmul", "grad", "canary")
SPIKE_SCALE = 1000.0  # an injected spike multiplies the step's loss by this


def _env_step(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    return int(raw) if raw.isdigit() else None


class Faults:
    """The hooks of one rank."""

    def __init__(self, rank: int, run_dir: Path | None, env: Mapping[str, str] | None = None) -> None:
        self.rank = rank
        self.run_dir = run_dir
        self.env = os.environ if env is None else env
        self._fired: set[str] = set()

    def _fires(self, name: str, kind: str, step: int) -> bool:
        """Whether the fault KIND of variable NAME strikes at STEP (rank 0): once per run directory (a marker
        file), so that the rollback which replays the step does not meet it again."""
        if self.rank != 0 or _env_step(self.env, name) != step or kind in self._fired:
            return False
        marker = None if self.run_dir is None else self.run_dir / f".fault-{kind}-{step}"
        if marker is not None and marker.exists():
            return False
        self._fired.add(kind)
        if marker is not None:
            marker.touch()
        return True

    def loss(self, step: int, value: Any) -> Any:
        """VALUE (rank 0's loss contribution at STEP), NaN or a spike when asked."""
        if self._fires(NAN_AT, "nan", step):
            value = value * float("nan")
        if self._fires(SPIKE_AT, "spike", step):
            value = value * SPIKE_SCALE
        return value

    def evaluation(self, step: int, out: dict[str, Any]) -> dict[str, Any]:
        """The in-loop evaluation OUT of STEP, a regression when asked: every accuracy 0, bits per byte x 10."""
        if not self._fires(EVAL_AT, "eval", step):
            return out
        bad = dict(out)
        bad["bpb"] = {k: 10 * v for k, v in (out.get("bpb") or {}).items()}
        bad["tasks"] = {k: {**v, "acc": 0.0, "acc_norm": 0.0} for k, v in (out.get("tasks") or {}).items()}
        return bad

    def samples(self, step: int, dp_rank: int, micro: int, indices: range, weight: float) -> None:
        """Record the samples of one micro batch of STEP (AGPT_TEST_SAMPLE_LOG; one O_APPEND write a line)."""
        path = self.env.get(SAMPLE_LOG, "")
        if path:
            attempt = self.env.get("AGPT_ATTEMPT_ID", "-")
            line = f"{attempt} {step} {dp_rank} {micro} {indices.start} {len(indices)} {weight:g}\n"
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    # -- numbers (agpt.train.sdc's tests) ------------------------------------------------------------------
    def bitflip_plan(self, synthetic: bool) -> tuple[int, int, str] | None:
        """(STEP, RANK, WHERE) of AGPT_FAULT_BITFLIP, None when unset; ConfigError naming it when malformed or
        when this is not a test run (AGPT_TEST_FAULTS=1 and synthetic data, both)."""
        raw = self.env.get(BITFLIP, "").strip()
        if not raw:
            return None
        parts = raw.split(":")
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit() or parts[2] not in FLIP_WHERE:
            raise ConfigError(f"{BITFLIP}: expected STEP:RANK:WHERE with WHERE one of {', '.join(FLIP_WHERE)} "
                              f"(got {raw!r})")  # fmt: skip
        if self.env.get(TEST_FAULTS) != "1" or not synthetic:
            raise ConfigError(f"{BITFLIP}: the number fault injector runs only in tests ({TEST_FAULTS}=1 and "
                              "data.synthetic: true); unset it")  # fmt: skip
        return int(parts[0]), int(parts[1]), parts[2]

    def flips(self, step: int, where: str, plan: tuple[int, int, str] | None) -> bool:
        """Whether this rank's WHERE flips a bit at STEP: once per run directory, on the planned rank."""
        if plan is None or plan != (step, self.rank, where) or where in self._fired:
            return False
        marker = None if self.run_dir is None else self.run_dir / f".fault-flip-{where}-{step}"
        if marker is not None and marker.exists():
            return False
        self._fired.add(where)
        if marker is not None:
            marker.touch()
        return True

    def rerun_fails(self, step: int) -> None:
        """Raise as an out-of-memory error does when AGPT_FAULT_RERUN_OOM names STEP (every rank)."""
        if _env_step(self.env, RERUN_OOM) == step:
            raise MemoryError(f"fault drill: out of memory in the rerun of step {step}")

    def forward(self, step: int, compute_s: float) -> None:
        """Right after the forward pass of STEP, which took COMPUTE_S: the recurring bug, hang alive, or be the
        slow host."""
        if _env_step(self.env, BUG_AT) == step:
            raise ValueError(f"fault drill: a bug in the forward pass of step {step} ({BUG_AT}), every run")
        forward(step, compute_s, self.env)


def forward(step: int, compute_s: float, env: Mapping[str, str] | None = None) -> None:
    """AGPT_FAULT_SLEEP_AT, AGPT_TEST_STEP_PACE and AGPT_FAULT_SLOW_HOST after a forward pass (see the module's list)."""
    env = os.environ if env is None else env
    me = host_name(env)
    at, _, where = env.get(SLEEP_AT, "").partition(":")
    if at.isdigit() and int(at) == step and where in ("", me):
        print(f"agpt: fault drill: sleeping in the forward pass of step {step} on {me}", flush=True)
        while True:
            time.sleep(3600)
    pace = env.get(STEP_PACE, "")
    if pace:
        try:
            time.sleep(min(60.0, max(0.0, float(pace))))
        except ValueError:
            pass
    slow, _, factor = env.get(SLOW_HOST, "").partition(":")
    if slow and slow == me:
        try:
            time.sleep(max(0.0, (float(factor or 3) - 1) * compute_s))
        except ValueError:
            pass


def flip_bit(t: Any) -> None:
    """Flip the top exponent bit of one element of T in place: a small positive number (0 < x < 2, the most
    common) becomes about 2**128 times larger, as a stuck or flipped bit in a device's arithmetic makes it."""
    import torch

    flat = t.detach().view(-1)
    small = ((flat > 0) & (flat < 2)).nonzero()
    i = int(small[0]) if len(small) else 0
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
    bit = 8 * flat.element_size() - 2  # the sign is the top bit, the exponent's top bit the next
    view = flat[i : i + 1].view(ints)
    view ^= 1 << bit


def ckpt_write_delay(step: int, env: Mapping[str, str] | None = None) -> float:
    """Seconds a checkpoint writer sleeps before writing STEP (AGPT_TEST_CKPT_WRITE_DELAY)."""
    raw = (os.environ if env is None else env).get(CKPT_WRITE_DELAY, "")
    for item in filter(None, raw.split(",")):
        key, sep, val = item.partition(":")
        if not sep:
            return float(key)
        if int(key) == step:
            return float(val)
    return 0.0


def local_write(step: int, path: Path, env: Mapping[str, str] | None = None) -> None:
    """Before the local tier writes PATH of STEP: raise ENOSPC when AGPT_TEST_LOCAL_FULL asks for it."""
    env = os.environ if env is None else env
    at, _, where = env.get(LOCAL_FULL, "").partition(":")
    if at.isdigit() and int(at) == step and where in ("", host_name(env)):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
