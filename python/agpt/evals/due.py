"""Which checkpoints the chain hands to an evaluation job: every N-th complete checkpoint of a run.

The training job's poller (lib/chain.sh `chain_eval_watch`) calls `mark` every CHAIN_EVAL_POLL_S
seconds: each complete checkpoint newer than the last one it counted is counted, and every
CHAIN_EVAL_EVERY-th gets a hold marker (`ckpt/step-N/.eval-hold`, rundir.EVAL_HOLD) that checkpoint
pruning respects; the poller then submits the eval job script, which evaluates every held checkpoint
(`agpt eval --run-dir RUN --held`) and releases each hold when its record is in eval.jsonl.  Training
never waits for any of it.  Standard library only (the chain runs it without the training venv).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from agpt import ckptdir, rundir, safewrite

STATE = "eval/due.json"  # {"last": newest step counted, "count": checkpoints counted}


def _state_path(run_dir: Path) -> Path:
    return Path(run_dir) / STATE


def _load(run_dir: Path) -> dict[str, int]:
    try:
        data = rundir.read_record(_state_path(run_dir))
    except (OSError, ValueError):
        return {"last": -1, "count": 0}
    ok = isinstance(data, dict) and all(isinstance(data.get(k), int) for k in ("last", "count"))
    return {"last": data["last"], "count": data["count"]} if ok else {"last": -1, "count": 0}


def mark(run_dir: Path, every: int) -> list[int]:
    """Count the complete checkpoints made since the last call; hold every `every`-th; return the new holds."""
    if every < 1:
        raise ValueError(f"every: must be >= 1 (got {every})")
    run_dir = Path(run_dir)
    path = _state_path(run_dir)
    with rundir.locked(path.with_name(".due.lock")):
        state = _load(run_dir)
        held: list[int] = []
        holds: list[Path] = []
        for d in ckptdir.complete(run_dir / rundir.CKPT):
            if d.step <= state["last"]:
                continue
            state["count"] += 1
            state["last"] = d.step
            if state["count"] % every == 0:
                held.append(d.step)
                holds.append(d.path / rundir.EVAL_HOLD)
        # Held first, counted after (a kill between the two: the next call holds the same steps again); a hold
        # or a count that cannot be written undoes this call's holds, so a full disk leaves the state as it was.
        try:
            for hold in holds:
                safewrite.replace(hold, "")
            safewrite.replace(path, json.dumps(state) + "\n")
        except OSError:
            for hold in holds:
                with contextlib.suppress(OSError):
                    os.unlink(hold)
            raise
    return held


def pending(run_dir: Path) -> list[int]:
    """Complete checkpoints held for evaluation, oldest first."""
    return [
        d.step for d in ckptdir.complete(Path(run_dir) / rundir.CKPT) if (d.path / rundir.EVAL_HOLD).exists()
    ]


def release(run_dir: Path, step: int) -> None:
    for d in ckptdir.complete(Path(run_dir) / rundir.CKPT):
        if d.step == step:
            (d.path / rundir.EVAL_HOLD).unlink(missing_ok=True)
