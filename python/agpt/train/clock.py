"""The recovery clock's trainer side: when this process started, built the model, loaded the checkpoint and
finished its first step, appended to RUN_DIR/events.jsonl as one `{"event": "clock", ...}` line by rank 0.

`agpt failover report` joins it with the attempt events, so the time from a failure to the first step back is
split into detection, relaunch, start-up, model build, checkpoint load and the first step.  Standard library only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from agpt import numeric


def process_start() -> float:
    """This process's start as an epoch (Linux /proc; else now): Python's and torch's imports are start-up too."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # starttime, field 22 of proc(5), in clock ticks after boot
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return int(line.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    return time.time()


def attempt() -> int:
    """FAILOVER_ATTEMPT (the failover loop's attempt number; 0 outside it) through agpt.numeric: a bad value is
    refused naming it.  train/run.py asks once before training, so the record after the first step cannot fail."""
    return int(
        numeric.env_number(os.environ, "FAILOVER_ATTEMPT", 0, lo=0, hi=numeric.MAX_COUNT, integer=True)
    )


def record(run_dir: Path, marks: dict[str, float], step: int) -> dict[str, Any]:
    """Append this attempt's clock to events.jsonl (one O_APPEND write, never fatal); returns the record."""
    jobid = (
        os.environ.get("FAILOVER_JOBID") or os.environ.get("SLURM_JOB_ID") or os.environ.get("PBS_JOBID", "")
    )
    rec: dict[str, Any] = {
        "event": "clock",
        "jobid": jobid.replace("/", "_"),
        "attempt": attempt() or None,
        **{k: round(v, 3) for k, v in marks.items()},
        "step": step,
    }
    try:
        fd = os.open(run_dir / "events.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(rec) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass
    return rec
