"""TensorBoard event files under RUN_DIR/tb/, written by rank 0 with tensorboardX's event writer (optional extra
`agpt[tensorboard]`: tensorboardX needs only numpy, protobuf and packaging).

Why not `SummaryWriter`: it queues events to a thread and its `flush()` does not drain that queue, so a rank
killed with -9 loses the steps still queued, and a resume starts after its checkpoint: those steps would be
missing for good.  Here each logged step is one record appended and flushed in the training thread (tens of
microseconds, docs/observability.md).

Resume: every process opens a new event file that starts with a `SessionLog.START` at its first step (what
`SummaryWriter(purge_step=...)` writes), so TensorBoard's reader drops the scalars earlier files hold at that
step and later: the steps a resume replays show once.  Text records are never dropped by that purge, which is
why markers are written once (agpt.observe.markers).  The file name holds the second it was opened, the host
and a sequence number, so the reader, which takes files in name order, sees them in the order they were written.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class TensorBoard:
    """The `Sink` of agpt.observe.writers for TensorBoard."""

    name = "tensorboard"

    def __init__(self, logdir: Path, start_step: int) -> None:
        from tensorboardX.event_file_writer import EventsWriter  # ImportError: the caller warns once

        self._events_writer = EventsWriter
        self.logdir = logdir
        self.logdir.mkdir(parents=True, exist_ok=True)
        self._w: Any = None
        self.restart(start_step)

    def _event(self, step: int, **fields: Any) -> Any:
        from tensorboardX.proto import event_pb2

        return event_pb2.Event(wall_time=time.time(), step=step, **fields)

    def restart(self, step: int) -> None:
        """A new file whose records replace whatever earlier files hold after `step` (a resume or rollback)."""
        from tensorboardX.proto import event_pb2

        self.close()
        seq = sum(1 for p in self.logdir.glob("events.out.tfevents.*")) + 1
        self._w = self._events_writer(str(self.logdir / "events"), f".{seq:06d}")
        self._w.write_event(
            self._event(step + 1, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))
        )
        self._w.flush()

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        from tensorboardX.proto.summary_pb2 import Summary

        vals = [Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()]
        self._w.write_event(self._event(step, summary=Summary(value=vals)))

    def text(self, step: int, tag: str, text: str) -> None:
        from tensorboardX import summary

        self._w.write_event(self._event(step, summary=summary.text(tag, text)))

    def flush(self) -> None:
        self._w.flush()

    def close(self) -> None:
        if self._w is not None:
            w, self._w = self._w, None
            w.close()
