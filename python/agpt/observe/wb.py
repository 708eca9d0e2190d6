"""Weights & Biases in offline mode under RUN_DIR/wandb/ (optional extra `agpt[wandb]`), behind the same `Sink`
interface as TensorBoard.

Compute nodes have no route out, so the run is written offline and uploaded later from a login node with
`wandb sync RUN_DIR/wandb/offline-run-*`.  Each process is one offline run of the group named after the run
directory, with its attempt in the name.  W&B wants its own step to grow, so the training step is logged as
the value `step` and every chart uses it as its x axis (`define_metric`): a resume's replayed steps and a
marker written for an earlier step are then ordinary points, not records W&B drops.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


class WandbOffline:
    """The `Sink` of agpt.observe.writers for W&B (offline)."""

    name = "wandb"

    def __init__(self, run_dir: Path, *, project: str, config: Mapping[str, Any], attempt: str) -> None:
        import wandb  # ImportError: the caller warns once

        (run_dir / "wandb").mkdir(parents=True, exist_ok=True)
        group = run_dir.resolve().name
        self._run: Any = wandb.init(
            mode="offline",
            dir=str(run_dir),
            project=project,
            group=group,
            name=f"{group}-{attempt}" if attempt else group,
            job_type="train",
            config=dict(config),
            settings=wandb.Settings(console="off", x_disable_stats=True, silent=True),
        )
        self._run.define_metric("step")
        self._run.define_metric("*", step_metric="step")

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        self._run.log({"step": step, **{k: float(v) for k, v in values.items()}})

    def text(self, step: int, tag: str, text: str) -> None:
        self._run.log({"step": step, tag: text})

    def restart(self, step: int) -> None:
        """Nothing to purge: a replayed step is one more point at the same x."""

    def flush(self) -> None:
        """wandb writes its records as they come."""

    def close(self) -> None:
        if self._run is not None:
            run, self._run = self._run, None
            run.finish()
