"""Cooperative checkpoint load: a stored item that several ranks need is read from the filesystem by one of them
and broadcast to the rest, instead of every rank reading it.

Where ranks share what they read: items saved once and loaded by every rank (replicated tensors, the trainer's
and scheduler's state, other objects), and a reshard (a shrink, another layout), where several new ranks need
parts of one old shard and DCP reads the whole stored chunk for each.  On a parallel filesystem at thousands of
ranks the same bytes read N times are N times the metadata and bandwidth load on the servers.

`CoopReader` is DCP's FileSystemReader with one change: before reading, the ranks exchange the byte ranges they
need (an all_gather of (file, offset, length)); a range asked by two or more ranks goes to one reader (the
asking rank with the fewest so far), which reads it and broadcasts it over the process group; the others take it
from memory.  DCP calls read_data once on every rank at the same point, so the collectives line up; a reader
that cannot read its range broadcasts a failure and every asking rank reads the range itself.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import IO, Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemReader

Key = tuple[str, int, int]  # (relative path, offset, length)


class CoopReader(FileSystemReader):
    def __init__(self, path: str | Path, group: Any = None) -> None:
        super().__init__(path)
        self.group = group
        self.prefetched: dict[Key, bytes] = {}
        self.read_bytes = 0  # what this rank read from the filesystem (for the benchmark)

    def read_data(self, plan: Any, planner: Any) -> Any:
        if dist.is_initialized() and dist.get_world_size(self.group) > 1:
            self._share(sorted({self._key(self.storage_data[r.storage_index]) for r in plan.items}))
        try:
            return super().read_data(plan, planner)
        finally:
            self.prefetched = {}

    @staticmethod
    def _key(info: Any) -> Key:
        return (str(info.relative_path), int(info.offset), int(info.length))

    def _share(self, mine: list[Key]) -> None:
        world, rank = dist.get_world_size(self.group), dist.get_rank(self.group)
        wants: list[Any] = [None] * world
        dist.all_gather_object(wants, mine, group=self.group)
        askers: dict[Key, list[int]] = {}
        for r, keys in enumerate(wants):
            for k in keys:
                askers.setdefault(tuple(k), []).append(r)  # type: ignore[arg-type]
        load = [0] * world
        for key in sorted(k for k, who in askers.items() if len(who) > 1):
            who = askers[key]
            src = min(who, key=lambda r: (load[r], r))
            load[src] += 1
            data = self._read(key) if rank == src else None
            size = torch.tensor(
                [len(data) if data is not None else (-1 if rank == src else 0)], dtype=torch.int64
            )
            gsrc = dist.get_global_rank(self.group, src) if self.group is not None else src
            dist.broadcast(size, src=gsrc, group=self.group)
            n = int(size.item())
            if n < 0:
                continue  # the reader failed: every asking rank reads it itself
            buf = (
                torch.frombuffer(bytearray(data), dtype=torch.uint8)
                if data
                else torch.empty(n, dtype=torch.uint8)
            )
            dist.broadcast(buf, src=gsrc, group=self.group)
            if rank in who:
                self.prefetched[key] = data if data is not None else buf.numpy().tobytes()

    def _read(self, key: Key) -> bytes | None:
        rel, offset, length = key
        try:
            with open(Path(self.path) / rel, "rb") as f:
                f.seek(offset)
                data = f.read(length)
        except OSError:
            return None
        self.read_bytes += len(data)
        return data if len(data) == length else None

    def _slice_file(self, file: Any, sinfo: Any) -> IO[bytes]:
        data = self.prefetched.get(self._key(sinfo))
        if data is not None:
            return io.BytesIO(data)
        self.read_bytes += int(sinfo.length)
        return super()._slice_file(file, sinfo)
