"""`agpt train` without click: config in, exit code out."""

from __future__ import annotations

import os
from pathlib import Path

from agpt import ckptplan
from agpt.errors import BadInput
from agpt.train import provenance
from agpt.train.config import load_config


def train(
    config: str,
    *,
    run_dir: str | None = None,
    steps: int | None = None,
    ckpt_interval: int | None = None,
    sets: tuple[str, ...] | list[str] = (),
) -> int:
    """Load the config (defaults < YAML < AGPT_* env < --set < flags), resume if possible, train."""
    cfg = load_config(
        config,
        list(sets),
        flags={"train.steps": steps, "checkpoint.interval": ckpt_interval, "train.run_dir": run_dir},
    )
    rd = Path(cfg.train.run_dir) if cfg.train.run_dir else None
    if rd is not None:
        try:
            (rd / "ckpt").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"--run-dir {rd}: cannot create ({exc.strerror})") from None
        if not os.access(rd, os.W_OK):
            raise BadInput(f"--run-dir {rd}: not writable")
    # what the job's `agpt check` chose, for the keys the config leaves unset
    plan = ckptplan.apply(cfg.checkpoint, cfg.pinned, rd)
    cfg.checkpoint.validate()
    import time

    from agpt.train import clock, stop
    from agpt.train.trainer import Trainer

    clock.attempt()  # FAILOVER_ATTEMPT and AGPT_DEADLINE_EPOCH: refused here, not after the first step
    stop.deadline()
    marks = {"started": clock.process_start(), "imported": time.time()}  # torch and the trainer's modules
    trainer = Trainer(cfg, rd)
    marks.update(trainer.init_marks)  # the process group's init
    marks["built"] = time.time()
    if trainer.ckpt is not None and trainer.rank == 0:
        trainer.ckpt.meta = provenance.build(cfg.to_dict())
    if trainer.rank == 0:
        for line in plan:
            print(f"agpt: {line}", flush=True)
    if rd is None and trainer.rank == 0:
        print("agpt: warning: no run directory (--run-dir or AGPT_RUN_DIR): checkpoints are off", flush=True)
    trainer.resume()
    marks["loaded"] = time.time()
    trainer.clock_marks = marks  # the first step completes the recovery clock (events.jsonl)
    return trainer.run()
