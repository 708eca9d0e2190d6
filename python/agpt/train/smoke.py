"""`agpt smoke`: a short deterministic run compared bit for bit with a recorded baseline.

Silent numerical changes (a new kernel, a changed default, a reduction over the wrong group) do not
crash; they shift the loss curve by a little and are found weeks later.  Comparing the exact per-step
loss, gradient norm and peak memory against a baseline recorded on the same stack finds them at once,
and names the first step that differs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agpt import safewrite
from agpt.errors import BadInput
from agpt.textfile import read_utf8
from agpt.train.config import load_config

ROOT = Path(os.environ.get("AGPT_HOME") or Path(__file__).resolve().parents[3])
DEFAULT_CONFIG = ROOT / "jobs" / "configs" / "smoke.yaml"


def _line(step: int, loss: float, grad_norm: float, peak_mem: int) -> str:
    # repr() of a float round-trips exactly, so equal text means equal bits.
    return f"step={step} loss={loss!r} grad_norm={grad_norm!r} peak_mem={peak_mem}"


def read_baseline(path: Path) -> dict[int, str]:
    text = read_utf8(path, f"--baseline {path}", hint="; record one with --record")
    out: dict[int, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head = line.split()[0]
        if not head.startswith("step=") or not head[5:].isdigit():
            raise BadInput(f"--baseline {path}:{n}: not a baseline line: {line[:60]!r}")
        out[int(head[5:])] = line
    return out


def first_difference(got: list[str], want: dict[int, str]) -> tuple[int, str, str] | None:
    for line in got:
        step = int(line.split()[0][5:])
        if want.get(step) != line:
            return step, line, want.get(step, "(missing)")
    return None


def smoke(
    config: str | None,
    *,
    baseline: str,
    steps: int = 50,
    record: bool = False,
    sets: tuple[str, ...] | list[str] = (),
) -> int:
    """Run `steps` deterministic steps; record the baseline or compare with it (0 equal, 1 differs)."""
    base = Path(baseline)
    want = {} if record else read_baseline(base)
    if not record and max(want, default=0) < steps:
        raise BadInput(f"--baseline {base}: holds {len(want)} steps, --steps is {steps}")
    cfg = load_config(config or DEFAULT_CONFIG, list(sets), flags={"train.steps": steps})
    cfg.train.deterministic = True
    os.environ["OMP_NUM_THREADS"] = "1"  # CPU reductions split by thread count; pin it so bits repeat
    import torch

    torch.set_num_threads(1)
    from agpt.train.trainer import Trainer

    trainer = Trainer(cfg, None, checkpoints=False)
    got: list[str] = []
    for _ in range(steps):
        rec, _stops = trainer.train_step()
        line = _line(rec.step, rec.loss, rec.grad_norm, rec.peak_mem)
        got.append(line)
        if trainer.rank == 0:
            print(line, flush=True)
        if not record and want.get(rec.step) != line:
            break  # every rank sees the same global numbers, so all stop at the same step
    if trainer.rank != 0:
        return 0 if record or first_difference(got, want) is None else 1
    if record:
        header = (
            f"# agpt smoke baseline: config={Path(config or DEFAULT_CONFIG).name} steps={steps} "
            f"world={trainer.world} device={trainer.device.type} torch={torch.__version__}\n"
        )
        safewrite.replace(base, header + "\n".join(got) + "\n")  # never through a link at a temporary name
        print(f"smoke: recorded {steps} steps to {base}", flush=True)
        return 0
    diff = first_difference(got, want)
    if diff is None:
        print(f"smoke: PASS: {steps} steps equal {base} bit for bit", flush=True)
        return 0
    step, line, ref = diff
    print(f"smoke: FAIL: first difference at step {step}", file=sys.stderr, flush=True)
    print(f"  run:      {line}", file=sys.stderr, flush=True)
    print(f"  baseline: {ref}", file=sys.stderr, flush=True)
    return 1
