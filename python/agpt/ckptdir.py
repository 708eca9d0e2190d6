"""`RUN_DIR/ckpt/step-N/` and its `.complete` marker: the one rule for "this checkpoint is complete".

Standard library only: the chain, the planner and the failover report (the recovery path) read it, and so do
the trainer, `agpt check`, `agpt ckpt` and the simulator, so that every tool names the same resume step.

The rule (docs/contract.md, Checkpoints):
- a step directory is `ckpt/step-N`, N in ASCII digits;
- it is complete when its `.complete` marker is a file: the trainer writes the marker last, after every rank's
  files are fsynced, and removes it before it rewrites the directory, so its presence is the evidence;
- unless the marker parses and names another step (`{"step": M}`, M != N): a directory renamed or copied by
  hand holds step M's state, not step N's, so it is not resumed (nor pruned: it is not ours to delete);
- a marker that exists but does not parse (bit rot, a hand edit) still counts, by its directory's step: its
  data is then checked by size, and the trainer never prunes it (what could not be read is evidence).
Resume takes the newest complete step; the trainer falls back past one whose data fails verification.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agpt.rundir import CKPT, COMPLETE, num, read_record

STEP_PREFIX = "step-"


def step_of(name: str) -> int | None:
    """N of a `step-N` directory name (ASCII digits, fewer than 19), else None."""
    digits = name.removeprefix(STEP_PREFIX)
    if digits == name or not (digits.isascii() and digits.isdigit() and len(digits) < 19):
        return None
    return int(digits)


def step_dir(ckpt_root: Path, step: int) -> Path:
    return ckpt_root / f"{STEP_PREFIX}{step}"


def read_marker(path: Path) -> dict[str, Any] | None:
    """The `.complete` record of step directory PATH: a JSON object with a whole `step`; None when the marker
    is missing or does not parse."""
    try:
        data = read_record(path / COMPLETE)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or type(data.get("step")) is not int:
        return None
    return data


def marker_record(step: int, *, world_size: int | None = None, sha256: dict[str, str] | None = None,
                  when: float | None = None) -> str:  # fmt: skip
    """The text of a `.complete` marker (docs/contract.md): step, time, world_size, sha256 of every file."""
    rec: dict[str, Any] = {"step": step, "time": int(time.time()) if when is None else when}
    if world_size is not None:
        rec["world_size"] = world_size
    if sha256 is not None:
        rec["sha256"] = sha256
    return json.dumps(rec, sort_keys=True) + "\n"


@dataclass(frozen=True, slots=True)
class StepDir:
    """One `ckpt/step-N` directory as the rule sees it."""

    step: int
    path: Path
    marked: bool  # `.complete` is a file
    record: dict[str, Any] | None  # the parsed marker; None when it is missing or does not parse

    @property
    def marker(self) -> Path:
        return self.path / COMPLETE

    @property
    def unreadable(self) -> bool:
        """A marker that does not parse: complete by its directory's step, its data checked by size."""
        return self.marked and self.record is None

    @property
    def names_another_step(self) -> int | None:
        """The step a parsed marker names when it is not this directory's: such a directory is not complete."""
        if self.record is None or self.record["step"] == self.step:
            return None
        step: int = self.record["step"]
        return step

    @property
    def complete(self) -> bool:
        return self.marked and self.names_another_step is None

    @property
    def world_size(self) -> int | None:
        ws = (self.record or {}).get("world_size")
        return ws if type(ws) is int else None

    @property
    def time(self) -> float | None:
        """When the marker was written: its `time`, else (unreadable) the file's mtime."""
        t = num((self.record or {}).get("time"))
        if t is not None:
            return t
        with contextlib.suppress(OSError):
            return self.marker.stat().st_mtime
        return None


def read_step_dir(path: Path, step: int | None = None) -> StepDir:
    """PATH as a step directory (its step from its name unless given)."""
    record = read_marker(path)
    n = step_of(path.name) if step is None else step
    if n is None:  # not named step-N (a copy given by path): the marker's step, when it has one
        n = record["step"] if record is not None else -1
    return StepDir(step=n, path=path, marked=(path / COMPLETE).is_file(), record=record)


def step_dirs(ckpt_root: Path) -> list[StepDir]:
    """Every `step-N` directory under CKPT_ROOT, oldest first; none when it is missing or unreadable."""
    out: list[StepDir] = []
    with contextlib.suppress(OSError):
        for p in ckpt_root.iterdir():
            n = step_of(p.name)
            if n is not None and p.is_dir():
                out.append(read_step_dir(p, n))
    return sorted(out, key=lambda d: d.step)


def complete(ckpt_root: Path) -> list[StepDir]:
    """The complete checkpoints under CKPT_ROOT, oldest first: the candidates resume tries, newest first."""
    return [d for d in step_dirs(ckpt_root) if d.complete]


def resume_step(run_dir: Path) -> int | None:
    """The step a resume starts from: the newest complete checkpoint of RUN_DIR, None when there is none."""
    done = complete(Path(run_dir) / CKPT)
    return done[-1].step if done else None
