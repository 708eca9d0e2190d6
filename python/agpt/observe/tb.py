"""TensorBoard event files under RUN_DIR/tb/, written by rank 0 with tensorboardX's protocol buffers and record
checksum (optional extra `agpt[tensorboard]`: tensorboardX needs only numpy, protobuf and packaging).

Why not `SummaryWriter`: it queues events to a thread and its `flush()` does not drain that queue, so a rank
killed with -9 loses the steps still queued, and a resume starts after its checkpoint: those steps would be
missing for good.  And tensorboardX's own record writer fsyncs at every flush (5 ms here, far more on a parallel
file system).  So each logged step is one record (TFRecord framing: length, masked CRC-32C, data, masked CRC-32C)
appended in the training thread and handed to the kernel at once, which a killed process cannot lose; an fsync
follows at most every FSYNC_S seconds and at the end, for a node that dies with its kernel.

Resume: every process opens a new event file that starts with a `SessionLog.START` at its first step (what
`SummaryWriter(purge_step=...)` writes), so TensorBoard's reader drops the scalars earlier files hold at that
step and later: the steps a resume replays show once.  Text records are never dropped by that purge, which is
why markers are written once (agpt.observe.markers).  File names hold the second the file was opened, the host
and a sequence number, and the reader takes files in name order: the order they were written.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

FSYNC_S = 30.0


class TensorBoard:
    """The `Sink` of agpt.observe.writers for TensorBoard."""

    name = "tensorboard"

    def __init__(self, logdir: Path, start_step: int) -> None:
        from tensorboardX import summary  # ImportError: the caller warns once
        from tensorboardX.proto import event_pb2, summary_pb2
        from tensorboardX.record_writer import masked_crc32c

        self._pb, self._summary, self._text, self._crc = (
            event_pb2,
            summary_pb2.Summary,
            summary.text,
            masked_crc32c,
        )
        self.logdir = logdir
        self.logdir.mkdir(parents=True, exist_ok=True)
        self._f: IO[bytes] | None = None
        self._synced = time.monotonic()
        self.restart(start_step)

    def _write(self, step: int, **fields: Any) -> None:
        assert self._f is not None
        data = self._pb.Event(wall_time=time.time(), step=step, **fields).SerializeToString()
        header = struct.pack("<Q", len(data))
        self._f.write(
            header + struct.pack("<I", self._crc(header)) + data + struct.pack("<I", self._crc(data))
        )

    def restart(self, step: int) -> None:
        """A new file whose records replace whatever earlier files hold after `step` (a resume or rollback)."""
        self.close()
        seq = sum(1 for _ in self.logdir.glob("events.out.tfevents.*")) + 1
        path = self.logdir / f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{seq:06d}"
        self._f = open(path, "xb")  # noqa: SIM115 - open for the life of the process
        self._write(0, file_version="brain.Event:2")
        self._write(step + 1, session_log=self._pb.SessionLog(status=self._pb.SessionLog.START))
        self.flush()

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        value = self._summary.Value
        self._write(
            step, summary=self._summary(value=[value(tag=k, simple_value=v) for k, v in values.items()])
        )

    def text(self, step: int, tag: str, text: str) -> None:
        self._write(step, summary=self._text(tag, text))

    def flush(self) -> None:
        """To the kernel now (a killed process loses nothing); to the disk at most every FSYNC_S seconds."""
        assert self._f is not None
        self._f.flush()
        if time.monotonic() - self._synced >= FSYNC_S:
            os.fsync(self._f.fileno())
            self._synced = time.monotonic()

    def close(self) -> None:
        if self._f is not None:
            f, self._f = self._f, None
            f.flush()
            os.fsync(f.fileno())
            f.close()
