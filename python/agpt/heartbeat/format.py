"""The heartbeat format, once: its version, its files in the run directory, the phases, the record fields.

The writer (agpt.heartbeat.writer) produces these files and the readers (agpt.heartbeat.reader, the straggler
monitor, `agpt failover report`) read them through these names; docs/contract.md ("Heartbeats") describes the
same for users, and tests/python/test_heartbeat.py holds the writer's records, this module and that page equal.

Standard library only (the recovery path).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agpt import rundir, safewrite

FORMAT = "agpt-heartbeat/1"

DIR = "heartbeat"  # RUN_DIR/heartbeat/<host>.json: one node record per host
SWAP_FILE = "swap.json"  # RUN_DIR/heartbeat/swap.json: the straggler monitor's swap request
STACKS_SUFFIX = ".stacks"  # RUN_DIR/attempts/<attempt>.stacks/<host>.txt: the stacks of a stuck node's ranks

# A rank's phase within a step, in the order a step goes through them; `done`: the rank stopped.
PHASES = ("start", "data", "forward", "backward", "optimizer", "collective", "checkpoint", "done")
# Where a phase puts a rank within its step, for the reader: `done` and an unknown phase count as the step's start
# (a rank that stopped is never taken for the one ahead of a live rank).
PHASE_ORDER = {p: i for i, p in enumerate(PHASES) if p != "done"}

# A node record's fields, and each rank's in its `ranks` list (docs/contract.md's node record lists the same).
NODE_FIELDS = (
    "format",
    "attempt",
    "host",
    "seq",
    "interval_s",
    "tick_s",
    "up_s",
    "time",
    "local_size",
    "ranks",
)
NODE_OPTIONAL = ("unreadable",)  # rank records the publisher could not read
RANK_FIELDS = ("rank", "local_rank", "pid", "step", "phase", "phase_s", "step_s", "compute_s", "wait_s",
               "tick")  # fmt: skip
RANK_PUBLISHED = ("stalled_s", "age_s", "state")  # added by the node's publisher


def node_file(host: str) -> str:
    return f"{host}.json"


def stacks_dir(run_dir: Path, attempt: str) -> Path:
    return run_dir / "attempts" / f"{attempt}{STACKS_SUFFIX}"


def parse_node(text: str) -> dict[str, Any]:
    """A node record from its file's text.  ValueError, KeyError or TypeError when it is not one (torn, half
    written, another kind of file); its format and attempt are the caller's to check."""
    rec = rundir.parse_json_line(text)
    if not isinstance(rec, dict) or not isinstance(rec.get("ranks"), list):
        raise ValueError("not a node record")
    str(rec["host"])
    for r in rec["ranks"]:
        int(r["rank"]), int(r["step"]), float(r["step_s"]), float(r["phase_s"])
    return rec


def write_atomic(path: Path, text: str) -> None:
    """One create + one rename: readers see the old file or the new one, never half of one.  No fsync: a record
    is replaced every few seconds, and a lost one is only an older picture.  (agpt.safewrite: never through a
    link, a temporary name of its own.)"""
    safewrite.replace(path, text, sync=False)
