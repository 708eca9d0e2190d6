"""Distributed checkpoints in RUN_DIR/ckpt/step-N/ that are either complete or visibly not.

Which step directories count is agpt.ckptdir's rule, the one every tool reads: a `.complete` marker (JSON:
step, time, world_size, sha256) that names no other step.  Rank 0 writes the marker after every rank's files
are written and fsynced, and removes it before anything is written into an existing directory, so a kill at
any moment never leaves a placeholder that looks complete.  `sha256` maps each file of the step to its
digest, hashed by the rank that wrote it right after the fsync (from the page cache); a load verifies them
(the files split over the ranks) and falls back to an older checkpoint, naming the file, when one differs.
A directory whose marker exists but does not parse is still a candidate (its data checked by size) and is
never pruned.

Async saves copy the state to host buffers on the training thread (the only stall) and write from a
background thread on their own gloo group (collectives on the default group from two threads can hang), one
save in flight at most, and at most `max_writers` ranks writing at once so a thousand ranks do not flood the
filesystem together.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.futures import Future

from agpt import ckptdir, rundir, safewrite
from agpt.digest import file_sha256
from agpt.errors import AgptError, CheckpointError
from agpt.rundir import COMPLETE
from agpt.train import faults, provenance
from agpt.train.config import CheckpointConfig

# Step directories that failed verification in this process: never pruned, never counted as kept.
SUSPECT: set[Path] = set()


def _is_rank0() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def complete_steps(ckpt_root: Path, *, warn_unreadable: bool = True) -> list[tuple[int, Path]]:
    """(step, directory) of each complete checkpoint (agpt.ckptdir's rule), oldest first.  A marker that does
    not parse still counts, with a warning: its data is then checked by size only."""
    done = ckptdir.complete(ckpt_root)
    if warn_unreadable and _is_rank0():
        for d in done:
            if d.unreadable:
                warn(
                    f"{d.marker}: unreadable marker; trying step {d.step} with its data checked by size only"
                )
    return [(d.step, d.path) for d in done]


def pinned(path: Path) -> dict[str, str]:
    """FILE -> sha256 that step directory PATH's `.complete` pins ({} for a marker without digests)."""
    raw = (ckptdir.read_marker(path) or {}).get("sha256")
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def _first_mismatch(path: Path, names: list[str], pins: dict[str, str]) -> str:
    """The first of NAMES whose bytes differ from its pin (a one-line reason), or ""."""
    for name in names:
        f = path / name
        if "/" in name or name.startswith(".."):
            return f"{path / COMPLETE}: names {name!r}, not a file of this directory"
        try:
            got = file_sha256(f)
        except OSError as exc:
            return f"{f}: checkpoint data file unreadable ({exc.strerror})"
        if got != pins[name]:
            return f"{f}: corrupt checkpoint data (sha256 {got[:16]}..., .complete recorded {pins[name][:16]}...)"
    return ""


def verify_digests(path: Path, group: Any = None, names: list[str] | None = None) -> None:
    """Every file `.complete` pins (or those of NAMES it pins) has its digest, the files split over the ranks of
    GROUP; raise CheckpointError naming the first that differs.  Called before anything in the directory is
    deserialised (docs/trust.md).  A marker without digests (older runs) verifies nothing."""
    pins = pinned(path)
    todo = sorted(pins if names is None else [n for n in names if n in pins])
    rank, world = (dist.get_rank(group), dist.get_world_size(group)) if dist.is_initialized() else (0, 1)
    bad = _first_mismatch(path, todo[rank::world], pins)
    if world > 1:
        found: list[str] = [""] * world
        dist.all_gather_object(found, bad, group=group)
        bad = next((b for b in found if b), "")
    if bad:
        SUSPECT.add(path)
        raise CheckpointError(bad)


def verified_metadata(path: Path, group: Any = None) -> Metadata:
    """PATH's DCP metadata, after every file `.complete` pins was checked against its digest: the trainer's resume
    and `agpt ckpt export` read the whole checkpoint, so all of it is verified before any of it is unpickled."""
    verify_digests(path, group)
    return read_metadata(path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, text: str) -> None:
    safewrite.replace(path, text)  # the one way to write a file: never through a link, fsync, rename
    _fsync_dir(path.parent)


class ThrottledWriter(FileSystemWriter):
    """A FileSystemWriter whose ranks write in waves of `max_writers`, a barrier between waves."""

    def __init__(self, path: Path, *, group: Any, max_writers: int, step: int, thread_count: int) -> None:
        super().__init__(path, single_file_per_rank=True, sync_files=True, thread_count=thread_count)
        self._group = group
        self._max_writers = max_writers
        self._step = step
        self._root = Path(path)
        self.digests: dict[str, str] = {}  # file -> sha256 of what this rank wrote

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[Any]:
        rank = dist.get_rank(self._group)
        world = dist.get_world_size(self._group)
        waves = (world + self._max_writers - 1) // self._max_writers
        mine = rank // self._max_writers
        fut: Future[Any] | None = None
        for wave in range(waves):
            if wave == mine:
                delay = faults.ckpt_write_delay(self._step)
                if delay:
                    time.sleep(delay)
                fut = super().write_data(plan, planner)
                fut.wait()
                self._hash_written(fut.value())
            if waves > 1:
                dist.barrier(group=self._group)
        assert fut is not None
        return fut

    def _hash_written(self, results: Any) -> None:
        """Digest each file this rank just wrote and fsynced (read back from the page cache)."""
        names = {str(r.storage_data.relative_path) for r in results or [] if hasattr(r, "storage_data")}
        for name in sorted(names):
            self.digests[name] = file_sha256(self._root / name)


class Checkpointer:
    """Saves (sync or async) and prunes; one instance per run, created on every rank."""

    def __init__(self, root: Path, cfg: CheckpointConfig, *, rank: int, world: int, pin_memory: bool) -> None:
        self.root = root
        self.cfg = cfg
        self.rank = rank
        self.world = world
        self.pin_memory = pin_memory
        # Its own gloo group: the background writer's collectives must not share the training group.
        self.group = dist.new_group(backend="gloo")
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._staged: dict[str, Any] | None = None
        self.in_flight_step: int | None = None
        self.last_saved_step: int | None = None
        # What produced the checkpoints (provenance.build); written as meta.json before `.complete`.
        self.meta: dict[str, Any] | None = None

    # -- saving ---------------------------------------------------------------------------------
    def save(self, step: int, state: Callable[[], dict[str, Any]], *, block: bool = False) -> float:
        """Save `state()` as step-N; returns the seconds the caller (training thread) stalled."""
        t0 = time.perf_counter()
        self.wait()
        if self.rank == 0:
            self._drop_marker(ckptdir.step_dir(self.root, step))  # before anything else touches the directory
        sd = state()
        if self.cfg.async_save and not block:
            snapshot = self._snapshot(sd)
            self.in_flight_step = step
            self._thread = threading.Thread(target=self._run, args=(step, snapshot), name=f"ckpt-{step}")
            self._thread.start()
        else:
            self.in_flight_step = step
            self._write(step, sd)
            self.in_flight_step = None
        self.last_saved_step = step
        return time.perf_counter() - t0

    def _snapshot(self, sd: dict[str, Any]) -> dict[str, Any]:
        """Copy every tensor into reusable host buffers (pinned when an accelerator is used)."""
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

        if self._staged is None:
            self._staged = _create_cpu_state_dict(sd, pin_memory=self.pin_memory)
        out = _copy_state_dict(sd, self._staged, non_blocking=self.pin_memory)
        if self.pin_memory and torch.accelerator.is_available():
            torch.accelerator.synchronize()
        return out

    def _run(self, step: int, snapshot: dict[str, Any]) -> None:
        try:
            self._write(step, snapshot)
        except BaseException as exc:  # reported on the training thread at the next wait()
            self._error = exc
        finally:
            self.in_flight_step = None

    def _write(self, step: int, sd: dict[str, Any]) -> None:
        path = ckptdir.step_dir(self.root, step)
        if self.rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            self._drop_marker(path)
            if path.exists():
                shutil.rmtree(path)
            path.mkdir()
        dist.barrier(group=self.group)
        writer = ThrottledWriter(
            path,
            group=self.group,
            max_writers=self.cfg.max_writers,
            step=step,
            thread_count=self.cfg.thread_count,
        )
        try:
            dcp.save(sd, storage_writer=writer, process_group=self.group)
            # dcp.save returns only after every rank's (fsynced) write results reached the coordinator.
            gathered: list[dict[str, str]] = [{} for _ in range(dist.get_world_size(self.group))]
            dist.all_gather_object(gathered, writer.digests, group=self.group)
            if self.rank == 0:
                if self.meta is not None:
                    provenance.write(path, self.meta, step=step, world_size=self.world)
                digests: dict[str, str] = {}
                for d in gathered:
                    digests.update(d)
                digests[".metadata"] = file_sha256(path / ".metadata")
                if (path / provenance.META).is_file():  # provenance is pinned like the data it describes
                    digests[provenance.META] = file_sha256(path / provenance.META)
                _fsync_dir(path)
                _write_atomic(
                    path / COMPLETE, ckptdir.marker_record(step, world_size=self.world, sha256=digests)
                )
                self.prune()
        except BaseException as exc:
            if _disk_full(exc):
                raise AgptError(f"disk full: cannot write checkpoint {path}") from exc
            raise

    @staticmethod
    def _drop_marker(path: Path) -> None:
        """Never leave a `.complete` over files about to be replaced."""
        marker = path / COMPLETE
        if marker.exists():
            marker.unlink()
            _fsync_dir(path)

    def wait(self) -> None:
        """Block until the in-flight save (if any) ends; re-raise its failure here."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            exc, self._error = self._error, None
            why = str(exc) if isinstance(exc, AgptError) else one_line(exc)
            raise AgptError(f"checkpoint save failed: {why}") from exc

    def prune(self) -> None:
        """Keep the newest `keep` complete checkpoints; drop directories with no marker older than the newest.
        Never pruned: a checkpoint whose marker does not parse or whose data failed verification (what could
        not be read is evidence, and maybe the only copy), and those do not count toward `keep`."""
        dirs = ckptdir.step_dirs(self.root)
        done = [d for d in dirs if d.complete]
        if not done:
            return
        newest = done[-1].step
        good = [d for d in done if d.path not in SUSPECT and not d.unreadable]
        for d in good[: -self.cfg.keep]:
            if not (d.path / rundir.EVAL_HOLD).exists():  # held for an evaluation job (agpt.evals.due)
                shutil.rmtree(d.path, ignore_errors=True)
        for d in dirs:
            if d.step < newest and d.step != self.in_flight_step and not os.path.lexists(d.marker):
                shutil.rmtree(d.path, ignore_errors=True)


# -- loading ------------------------------------------------------------------------------------
def _flatten_shapes(sd: dict[str, Any], prefix: str = "") -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for k, v in sd.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten_shapes(v, key + "."))
        elif isinstance(v, torch.Tensor):
            out[key] = tuple(v.shape)
    return out


def read_metadata(path: Path) -> Metadata:
    """The DCP metadata: a pickle, so its digest is checked against `.complete` first (when pinned); a planted or
    corrupt `.metadata` is refused before it is deserialised."""
    meta_file = path / ".metadata"
    bad = _first_mismatch(path, [".metadata"], pins) if ".metadata" in (pins := pinned(path)) else ""
    if bad:
        SUSPECT.add(path)
        raise CheckpointError(bad)
    try:
        return FileSystemReader(path).read_metadata()
    except Exception as exc:
        raise CheckpointError(
            f"{meta_file}: unreadable checkpoint metadata ({type(exc).__name__}: {exc})"
        ) from None


def check_files(path: Path, meta: Metadata) -> None:
    """Every data file the metadata names exists and is long enough (a truncated write shows here)."""
    need: dict[str, int] = {}
    for info in (meta.storage_data or {}).values():
        rel = str(info.relative_path)
        need[rel] = max(need.get(rel, 0), int(info.offset) + int(info.length))
    for rel, size in sorted(need.items()):
        f = path / rel
        try:
            have = f.stat().st_size
        except OSError:
            SUSPECT.add(path)
            raise CheckpointError(f"{f}: checkpoint data file missing") from None
        if have < size:
            SUSPECT.add(path)
            raise CheckpointError(f"{f}: checkpoint data file truncated ({have} of {size} bytes)")


def check_model(path: Path, meta: Metadata, model_sd: dict[str, Any]) -> None:
    """The checkpoint holds exactly this model's tensors with the same shapes, else name the first one."""
    want = _flatten_shapes(model_sd, "model.")
    have = {
        k: tuple(v.size)
        for k, v in meta.state_dict_metadata.items()
        if k.startswith("model.") and isinstance(v, TensorStorageMetadata)
    }
    for key, shape in want.items():
        if key not in have:
            raise CheckpointError(f"{path}: tensor {key} is not in the checkpoint (a different model?)")
        if have[key] != shape:
            raise CheckpointError(
                f"{path}: tensor {key} has shape {list(have[key])} in the checkpoint, {list(shape)} in this model"
            )
    for key in have:
        if key not in want:
            raise CheckpointError(f"{path}: checkpoint tensor {key} does not exist in this model")


def one_line(exc: BaseException) -> str:
    """A failure on one line; DCP's CheckpointException carries every rank's traceback, keep the first cause."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        rank, pair = sorted(failures.items())[0]
        inner = pair[0] if isinstance(pair, tuple) else pair
        if isinstance(inner, BaseException):
            return f"rank {rank}: {one_line(inner)}"
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def find_corrupt_file(path: Path, meta: Metadata, budget_s: float = 120.0) -> Path | None:
    """The first data file holding an item that does not deserialize (None if none found in budget_s)."""
    t0 = time.monotonic()
    items: dict[str, set[tuple[int, int]]] = {}
    for info in (meta.storage_data or {}).values():
        items.setdefault(str(info.relative_path), set()).add((int(info.offset), int(info.length)))
    for rel in sorted(items):
        try:
            with open(path / rel, "rb") as f:
                for offset, length in sorted(items[rel]):
                    if time.monotonic() - t0 > budget_s:
                        return None
                    f.seek(offset)
                    torch.load(io.BytesIO(f.read(length)), map_location="cpu", weights_only=False)
        except Exception:
            return path / rel
    return None


def _disk_full(exc: BaseException) -> bool:
    """Whether ENOSPC (or EDQUOT) is behind EXC: its cause chain, or any rank's failure in DCP's wrapper."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        failures = getattr(e, "failures", None)
        if isinstance(failures, dict):
            for v in failures.values():
                todo += [x for x in (v if isinstance(v, tuple) else (v,)) if isinstance(x, BaseException)]
        todo += [x for x in (e.__cause__, e.__context__) if x is not None]
    return False


def load(
    path: Path, sd: dict[str, Any], group: Any, meta: Metadata | None = None, *, coop: bool = False
) -> None:
    """Load in place into `sd` (resharding as needed); META from verified_metadata, which checked every pinned
    file's digest first.  COOP (checkpoint.coop_load): an item several ranks need is read by one and broadcast."""
    from agpt.train.coopload import CoopReader

    reader = CoopReader(path, group) if coop else FileSystemReader(path)
    try:
        dcp.load(sd, storage_reader=reader, process_group=group)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # DCP's CheckpointException is a BaseException
        bad = find_corrupt_file(path, meta) if meta is not None and dist.get_rank() == 0 else None
        SUSPECT.add(path)
        if bad is not None:
            raise CheckpointError(f"{bad}: corrupt checkpoint data ({one_line(exc)})") from None
        raise CheckpointError(f"{path}: cannot load checkpoint ({one_line(exc)})") from None


def warn(msg: str) -> None:
    print(f"agpt: warning: {msg}", file=sys.stderr, flush=True)
