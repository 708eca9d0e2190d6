"""Data-mix stages: `data.stages: [{path, until_tokens}, ...]`, one blend after the other.

A 2B reference run stepped its loss down at each change of data mix; a staged run switches blends at
fixed token counts.  Stage i serves global samples [start_i, end_i) with end_i = ceil(until_tokens_i /
seq_len), reading its own blend from sample 0; the last stage may leave `until_tokens` out and runs to
the end.  Which blend a sample comes from is a pure function of the global sample index, so resume
(on any number of ranks) is exact across a stage boundary.  Each stage's blend is pinned: its
manifest's cache key is written to RUN_DIR/stages.json at the first start and checked at every later
one, so a blend rebuilt under a run is refused rather than silently changing the data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from agpt import rundir, safewrite
from agpt.errors import ConfigError, DataError
from agpt.train import data as tdata

PIN = "stages.json"


def validate(stages: Any) -> None:
    """The shape of data.stages, without opening any data (config checks run before submitting)."""
    if not isinstance(stages, list):
        raise ConfigError(f"data.stages: expected a list of {{path, until_tokens}}, got {stages!r}")
    last = 0
    for i, st in enumerate(stages):
        key = f"data.stages[{i}]"
        if not isinstance(st, dict):
            raise ConfigError(f"{key}: expected a mapping with path and until_tokens, got {st!r}")
        unknown = sorted(set(st) - {"path", "until_tokens"})
        if unknown:
            raise ConfigError(f"{key}.{unknown[0]}: unknown key (keys: path, until_tokens)")
        if not isinstance(st.get("path"), str) or not st["path"]:
            raise ConfigError(f"{key}.path: required (a blend made by agpt blend)")
        until = st.get("until_tokens")
        if until is None and i == len(stages) - 1:
            continue
        if not isinstance(until, int) or isinstance(until, bool) or until <= 0:
            raise ConfigError(f"{key}.until_tokens: must be a positive integer (got {until!r})")
        if until <= last:
            raise ConfigError(
                f"{key}.until_tokens: {until} is not after the previous stage's {last} "
                f"(stages must be in increasing token order)"
            )
        last = until


class Staged:
    """A Source over the stages' blends."""

    def __init__(self, stages: list[dict[str, Any]], vocab_size: int, seq_len: int) -> None:
        self.parts: list[tuple[int, int | None, tdata.Blended]] = []
        self.paths = [str(st["path"]) for st in stages]
        self.keys: list[str] = []
        start = 0
        for i, st in enumerate(stages):
            try:
                src = tdata.Blended(st["path"], vocab_size, seq_len)
            except DataError as exc:
                raise DataError(f"data.stages[{i}].path: {str(exc).removeprefix('data.path: ')}") from None
            until = st.get("until_tokens")
            end = None if until is None else -(-int(until) // seq_len)
            self.parts.append((start, end, src))
            self.keys.append(str(src.ds.manifest.get("cache_key", "")))
            start = end if end is not None else start

    def stage_of(self, index: int) -> int:
        for i, (_start, end, _src) in enumerate(self.parts):
            if end is None or index < end:
                return i
        return len(self.parts) - 1  # past the last until_tokens: the last stage goes on

    def sample(self, index: int) -> np.ndarray:
        start, _end, src = self.parts[self.stage_of(index)]
        return src.sample(index - start)

    def pin(self, stages: list[dict[str, Any]], run_dir: Path | None, rank: int) -> None:
        """Check each stage against RUN_DIR/stages.json; write the file at the first start (rank 0)."""
        if run_dir is None:
            return
        path = run_dir / PIN
        mine = [
            {"path": p, "until_tokens": st.get("until_tokens"), "cache_key": k}
            for p, st, k in zip(self.paths, stages, self.keys, strict=True)
        ]
        if path.is_file():
            try:
                pinned = rundir.read_record(path)["stages"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise DataError(f"{path}: unreadable stage pins ({exc})") from None
            for i, (old, new) in enumerate(zip(pinned, mine, strict=False)):
                if old.get("until_tokens") != new["until_tokens"]:
                    raise DataError(
                        f"data.stages[{i}].until_tokens: {new['until_tokens']} differs from "
                        f"{old.get('until_tokens')} pinned in {path} (exact resume needs the same boundaries)"
                    )
                if old.get("cache_key") != new["cache_key"]:
                    raise DataError(
                        f"data.stages[{i}].path: {new['path']} is not the blend pinned in {path} "
                        f"(cache key {str(new['cache_key'])[:12]}..., pinned {str(old.get('cache_key'))[:12]}...)"
                    )
            if len(pinned) >= len(mine):
                return
        if rank == 0:
            safewrite.replace(path, json.dumps({"stages": mine}, indent=1) + "\n")
