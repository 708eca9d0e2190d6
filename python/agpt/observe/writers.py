"""Rank 0's writers for operators: TensorBoard, W&B offline and RUN_DIR/metrics.prom, behind one small object the
trainer calls at start, at every logged step, at a rollback and at the end.

A writer that cannot work (its library is not installed, its folder is not writable, the disk filled up) costs
one warning and is dropped; training goes on.  The trainer's own record (metrics.jsonl) is what the writers are
fed, so every figure has one definition (agpt.train.metrics).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from agpt import rundir
from agpt.heartbeat import writer as heartbeat
from agpt.observe import markers, prom

# metrics.jsonl field -> TensorBoard/W&B tag.  Groups: train/ (what it learns), perf/ (how fast), time/ (where a
# step's time went), eval/ (held-out), update/ (|dw|/|w| per parameter group).
TAGS = {
    "loss": "train/loss",
    "grad_norm": "train/grad_norm",
    "lr": "train/lr",
    "tokens": "train/tokens",
    "tokens_per_s_per_device": "perf/tokens_per_s_per_device",
    "mfu": "perf/mfu",
    "peak_mem_bytes": "perf/peak_mem_bytes",
    "step_s": "time/step_s",
    "compute_s": "time/compute_s",
    "wait_s": "time/wait_s",
    "ckpt_stall_s": "time/ckpt_stall_s",
    "eval_loss": "eval/loss",
}


class Sink(Protocol):
    """What TensorBoard (agpt.observe.tb) and W&B (agpt.observe.wb) both do."""

    name: str

    def scalars(self, step: int, values: Mapping[str, float]) -> None: ...
    def text(self, step: int, tag: str, text: str) -> None: ...
    def restart(self, step: int) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


def scalars_of(rec: Mapping[str, Any]) -> dict[str, float]:
    """The scalars of one metrics.jsonl record, under their tags (None and non-numbers left out)."""
    out: dict[str, float] = {}
    for key, tag in TAGS.items():
        v = rec.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[tag] = float(v)
    for prefix, key in (("eval", "eval"), ("update", "update")):
        for name, v in (rec.get(key) or {}).items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                out[f"{prefix}/{name}"] = float(v)
    return out


def _print(msg: str) -> None:
    print(msg, flush=True)


class Writers:
    """Opened on rank 0 once the start step is known (after a resume)."""

    def __init__(
        self,
        run_dir: Path,
        oc: Any,  # agpt.train.config.ObserveConfig
        config: Mapping[str, Any],
        start_step: int,
        *,
        warn: Callable[[str], None] = _print,
    ) -> None:
        self.run_dir = run_dir
        self.oc = oc
        self.warn = warn
        self.sinks: list[Sink] = []
        self.prom_every: float | None = float(oc.prometheus_interval_s) if oc.prometheus else None
        self._prom_at = 0.0  # monotonic time of the last metrics.prom write
        self._prom_thread: threading.Thread | None = None
        self._noted = False  # the run directory's torn lines were reported
        self.recent: deque[dict[str, Any]] = deque(maxlen=20)
        self.attempt = heartbeat.attempt_id()
        if oc.tensorboard:
            self._open("observe.tensorboard", "agpt[tensorboard]", lambda: _tensorboard(run_dir, start_step))
        if oc.wandb:
            self._open("observe.wandb", "agpt[wandb]", lambda: _wandb(run_dir, oc, config, self.attempt))
        text = "```json\n" + json.dumps(config, indent=1, sort_keys=True, default=str) + "\n```"
        self._each("text", start_step, "config", text)
        if start_step > 0:
            self._each(
                "text", start_step, "events", f"restart: attempt {self.attempt} resumed at step {start_step}"
            )
        self.sync_markers()

    # -- the trainer's calls ---------------------------------------------------------------------------
    def log(self, rec: Mapping[str, Any]) -> None:
        """One logged step (a metrics.jsonl record)."""
        step = int(rec["step"])
        self._each("scalars", step, scalars_of(rec))
        self._each("flush")
        self.recent.append(dict(rec))
        if self.prom_every is not None and time.monotonic() - self._prom_at >= self.prom_every:
            self._prom_in_background()

    def rollback(self, step: int) -> None:
        """The run went back to `step`: what follows replaces what the sinks hold after it."""
        self._each("restart", step)
        self.sync_markers()

    def close(self) -> None:
        if self._prom_thread is not None:
            self._prom_thread.join()
        if self.prom_every is not None:
            self.write_prom(list(self.recent))
        self._each("close")
        self.sinks = []

    # -- parts -----------------------------------------------------------------------------------------
    def _prom_in_background(self) -> None:
        """metrics.prom reads the run directory (events, hosts, checkpoints): off the training thread, one at
        a time (a rewrite still running when the next is due is skipped)."""
        if self._prom_thread is not None and self._prom_thread.is_alive():
            return
        self._prom_at = time.monotonic()
        self._prom_thread = threading.Thread(target=self.write_prom, args=(list(self.recent),), daemon=True,
                                             name="agpt-metrics-prom")  # fmt: skip
        self._prom_thread.start()

    def write_prom(self, recent: list[dict[str, Any]]) -> None:
        self._prom_at = time.monotonic()
        try:
            prom.update(self.run_dir, recent=recent)
        except Exception as e:  # a full disk, a torn file: the run goes on
            self.warn(f"agpt: warning: observe.prometheus: {self.run_dir / rundir.PROM} not written "
                      f"({type(e).__name__}: {e}); training goes on without it")  # fmt: skip
            self.prom_every = None

    def sync_markers(self) -> None:
        """Write the failures, hand-overs and rollbacks of the run directory not written before."""
        if not self.sinks:
            return
        tb_dir = self.run_dir / rundir.TB
        written = markers.read_state(tb_dir)
        notes: list[str] = []
        new = [m for m in markers.from_run_dir(self.run_dir, notes) if m.key not in written]
        for n in notes if not self._noted else []:  # a torn line: said once, at the start
            self.warn(f"agpt: note: {n}")
        self._noted = True
        for m in new:
            self._each("text", m.step, "events", m.text)
            written[m.key] = m.step
        if new:
            self._each("flush")
            try:
                tb_dir.mkdir(parents=True, exist_ok=True)
                markers.write_state(tb_dir, written)
            except OSError as e:
                self.warn(f"agpt: warning: {tb_dir / markers.STATE}: not written ({e.strerror or e})")

    def _open(self, key: str, extra: str, make: Callable[[], Sink]) -> None:
        try:
            self.sinks.append(make())
        except ImportError as e:
            self.warn(f"agpt: warning: {key}: {e.name or e} is not installed (pip install '{extra}'); "
                      "training goes on without it")  # fmt: skip
        except Exception as e:
            self.warn(
                f"agpt: warning: {key}: cannot start ({type(e).__name__}: {e}); training goes on without it"
            )

    def _each(self, method: str, *args: Any) -> None:
        """Call `method` on every sink; one that raises is closed and dropped, with one warning."""
        for sink in list(self.sinks):
            try:
                getattr(sink, method)(*args)
            except Exception as e:
                self.sinks.remove(sink)
                self.warn(f"agpt: warning: observe.{sink.name}: {type(e).__name__}: {e}; training goes on "
                          "without it")  # fmt: skip
                try:
                    sink.close()
                except Exception:
                    pass


def _tensorboard(run_dir: Path, start_step: int) -> Sink:
    from agpt.observe.tb import TensorBoard

    return TensorBoard(run_dir / rundir.TB, start_step)


def _wandb(run_dir: Path, oc: Any, config: Mapping[str, Any], attempt: str) -> Sink:
    from agpt.observe.wb import WandbOffline

    return WandbOffline(run_dir, project=oc.wandb_project, config=config, attempt=attempt)
