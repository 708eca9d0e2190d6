"""The recovery clock's trainer side: when this process started, finished its imports, initialised the process
group, built the model, restored its state (and from which tier) and finished its first step, appended to
RUN_DIR/events.jsonl as one `{"event": "clock", ...}` line by rank 0 (every attempt: a job's first is its cold
start).

`agpt failover report` joins it with the attempt events (agpt.goodput.recovery), so the time from a failure to the
first step back is split into detection, teardown, relaunch, process start, model build, state restore and the
first step.  Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from agpt import numeric, rundir, safewrite
from agpt.errors import BadInput


def process_start() -> float:
    """This process's start as an epoch (Linux /proc; else now): Python's and torch's imports are start-up too.

    The start is counted in clock ticks after boot (proc(5), field 22), on the boot-time clock; it is placed on the
    wall clock through CLOCK_BOOTTIME read now, not through /proc/stat's `btime`, which is whole seconds: a start
    computed from it came out up to a second early, a process "up" before the failover loop had relaunched it.
    What is left is the tick (10 ms on Linux): the start is known to within one."""
    warm = os.environ.get(
        "AGPT_WARM_STARTED"
    )  # a parked process (agpt.warm): its claim's start is the launch's
    if warm:
        try:
            return float(warm)
        except ValueError:
            pass
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime, after boot
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


def attempt() -> int:
    """FAILOVER_ATTEMPT (the failover loop's attempt number; 0 outside it) through agpt.numeric: a bad value is
    refused naming it.  train/run.py asks once before training, so the record after the first step cannot fail."""
    return int(
        numeric.env_number(os.environ, "FAILOVER_ATTEMPT", 0, lo=0, hi=numeric.MAX_COUNT, integer=True)
    )


def record(run_dir: Path, marks: dict[str, float], step: int, **fields: Any) -> dict[str, Any]:
    """Append this attempt's clock to events.jsonl (one O_APPEND write, never fatal); returns the record.
    FIELDS: what else the restore says (`tier`: local or global, and how the local tier's shards came)."""
    rec: dict[str, Any] = {
        "event": "clock",
        "jobid": rundir.job_id(),
        "attempt": attempt() or None,
        **{k: round(v, 3) for k, v in marks.items()},
        "step": step,
        **fields,
    }
    try:  # lib/env.sh env_stage: the venv brought to every node before the loop began (a record never fails)
        staged = numeric.env_number(os.environ, "AGPT_STAGE_S", None, lo=0, hi=numeric.MAX_SECONDS)
    except BadInput:
        staged = None
    if staged is not None:
        rec["staging_s"] = staged
    if os.environ.get("AGPT_WARM_STARTED"):
        rec["warm"] = True  # a parked process took this rank (agpt.warm): imports were paid before the launch
    with contextlib.suppress(OSError):  # the clock is a note: a full disk must not stop the run
        safewrite.append(run_dir / rundir.EVENTS, json.dumps(rec) + "\n", sync=False)
    return rec
