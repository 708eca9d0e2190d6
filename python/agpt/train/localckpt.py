"""The local checkpoint tier: every rank's shard of the full training state in its node's memory, and a copy of it
on a partner node, so a lost node costs the steps since the last local save and a reload from memory.

The rules (folders, markers, who holds whose copy, which step a relaunch restores) are agpt.localtier's; this
module moves the bytes.  A save (every `checkpoint.local_interval` steps or `local_interval_s` seconds) copies the
rank's state into one reused host buffer laid out as a shard file (the only stall: the same copy today's async
save makes), then a background thread on the tier's own gloo group hashes it, writes it to the node folder, sends
it to the partner's rank of the same place on its node while receiving its ward's, writes that replica, and
agrees with every rank: the node's first rank writes the node's marker, and once every node has, older steps are
pruned to `local_keep`.  One save in flight at most: the next one waits for it, as the global saves do.

A relaunch in the same job restores from the newest step every rank can get (agpt.localtier.choose): its own
node's file, else the partner's copy sent over the tier's group; every byte is hashed against the marker before
anything is parsed, every header is checked against this run, job, world size, layout and each tensor's shape,
and only when all ranks agree are the tensors copied in.  Anything else (a missing shard, a digest that differs,
another layout, a new job of the chain) leaves the state untouched and the caller resumes from the global tier,
with the reason in the log.  A folder that is missing, full or not writable turns the tier off with one warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from agpt import localtier, nodelocal, rundir, safewrite
from agpt.ckptdir import step_dir
from agpt.train import ckpt_policy, faults
from agpt.train.config import CheckpointConfig

Buffer = bytearray | mmap.mmap  # a shard's bytes: received (bytearray) or this node's file, mapped
SEP = "/"  # joins a state's nested keys into one (a parameter's name holds dots, never a slash)
_TUPLE = "__tuple__"


def warn(msg: str) -> None:
    print(f"agpt: warning: local checkpoint tier: {msg}", file=sys.stderr, flush=True)


def say(msg: str) -> None:
    print(f"{rundir.LOCAL_TIER}{msg}", flush=True)


# -- a state as a flat list -----------------------------------------------------------------------------------
def flatten(sd: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(key, leaf) of a nested state dict; a leaf is a tensor or a JSON-able value (lists, numbers, strings)."""
    out: list[tuple[str, Any]] = []
    for k, v in sd.items():
        if SEP in str(k):
            raise ValueError(f"state key {k!r} holds {SEP!r}")
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out += flatten(v, key + SEP)
        else:
            out.append((key, v))
    return out


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return {_TUPLE: [_jsonable(x) for x in v]}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if v is None or isinstance(v, bool | int | float | str):
        return v
    raise ValueError(f"a {type(v).__name__} in the state is neither a tensor nor a plain value")


def _value(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) == {_TUPLE}:
            return tuple(_value(x) for x in v[_TUPLE])
        return {k: _value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_value(x) for x in v]
    return v


def _set(sd: dict[str, Any], key: str, value: Any) -> None:
    *path, last = key.split(SEP)
    for p in path:
        sd = sd[p]
    sd[last] = value


def sha256(buf: Buffer | bytes | memoryview) -> str:
    return hashlib.sha256(buf).hexdigest()


class Staged:
    """A rank's shard laid out as a file in one host buffer (pinned when an accelerator is used, so the copy
    from the device is asynchronous until one synchronize): the header, then each tensor at its offset."""

    def __init__(self, sd: dict[str, Any], head: dict[str, Any], *, pin_memory: bool = False) -> None:
        self.tensors: list[list[Any]] = []  # [key, dtype, shape, offset, nbytes]
        values: dict[str, Any] = {}
        off = 0
        for key, v in flatten(sd):
            if isinstance(v, torch.Tensor):
                t = _local(v)
                n = t.numel() * t.element_size()
                self.tensors.append([key, str(t.dtype).removeprefix("torch."), list(t.shape), off, n])
                off += n + (-n % localtier.ALIGN)
            else:
                values[key] = _jsonable(v)
        self.values = values
        self.head = head
        sizing = self._header(step=10**15)
        self.start = len(localtier.pack_header(sizing, len(localtier.pack_header(sizing)) + 256))
        self.pin = pin_memory
        self.host = torch.empty(self.start + off, dtype=torch.uint8, pin_memory=pin_memory)
        self.buf = self.host.numpy().data

    def _header(self, step: int) -> dict[str, Any]:
        return {**self.head, "step": step, "tensors": self.tensors, "values": self.values}

    def fits(self, sd: dict[str, Any]) -> bool:
        """Whether SD has this buffer's layout (the same keys, dtypes and shapes, in order)."""
        return layout_of(sd) == [(t[0], t[1], list(t[2])) for t in self.tensors]

    def fill(self, sd: dict[str, Any], step: int) -> torch.Tensor:
        """Copy SD (this layout) into the buffer as the shard of STEP; the training thread's stall."""
        leaves = dict(flatten(sd))
        self.values = {k: _jsonable(v) for k, v in leaves.items() if not isinstance(v, torch.Tensor)}
        self.buf[: self.start] = localtier.pack_header(self._header(step), self.start)
        for key, dtype, shape, off, n in self.tensors:
            if n:
                at = self.start + off
                dst = self.host[at : at + n].view(getattr(torch, dtype)).view(shape)
                dst.copy_(_local(leaves[key]), non_blocking=self.pin)
        if self.pin and torch.accelerator.is_available():
            torch.accelerator.synchronize()
        return self.host


def layout_of(sd: dict[str, Any]) -> list[tuple[str, str, list[int]]]:
    """(key, dtype, local shape) of every tensor of SD, in order: what a shard must match to be loaded."""
    return [(k, str(_local(v).dtype).removeprefix("torch."), list(_local(v).shape))
            for k, v in flatten(sd) if isinstance(v, torch.Tensor)]  # fmt: skip


def _itemsize(dtype: str) -> int:
    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


def check_shard(buf: Buffer, want_sha: str, pinned: dict[str, Any], step: int, rank: int,
                sd: dict[str, Any]) -> tuple[dict[str, Any], int]:  # fmt: skip
    """Verify BUF before anything in it is used: the digest first, then the header against the pins, the step,
    the rank and SD's every tensor (key, dtype, shape).  ValueError says what differs."""
    got = sha256(buf)
    if got != want_sha:
        raise ValueError(f"sha256 {got[:16]}... differs from the marker's {want_sha[:16]}...")
    head, start = localtier.unpack_header(memoryview(buf))
    off = [k for k, v in pinned.items() if head.get(k) != v]
    if off:
        raise ValueError("of another " + ", ".join(f"{k} ({head.get(k)!r}, now {pinned[k]!r})" for k in off))
    if head.get("step") != step or head.get("rank") != rank:
        raise ValueError(
            f"holds rank {head.get('rank')} step {head.get('step')}, not rank {rank} step {step}"
        )
    mine = layout_of(sd)
    theirs = [(t[0], t[1], list(t[2])) for t in head["tensors"]]
    if mine != theirs:
        diff = next((f"{a} vs {b}" for a, b in zip(mine, theirs, strict=False) if a != b), "tensor count")
        raise ValueError(f"another layout of the state (first difference: {diff})")
    end = max((start + int(t[3]) + int(t[4]) for t in head["tensors"]), default=start)
    if end > len(buf):
        raise ValueError(f"truncated ({len(buf)} of {end} bytes)")
    return head, start


def apply_shard(sd: dict[str, Any], head: dict[str, Any], buf: Buffer, start: int) -> None:
    """Copy a checked shard into SD in place (sharded tensors into their local part)."""
    leaves = dict(flatten(sd))
    for key, dtype, shape, off, n in head["tensors"]:
        src = torch.frombuffer(buf, dtype=getattr(torch, dtype), count=int(n) // _itemsize(dtype),
                               offset=start + int(off)) if n else torch.empty(0, dtype=getattr(torch, dtype))  # fmt: skip
        dst = leaves[key]
        if isinstance(dst, DTensor):
            dst = dst.to_local()
        if isinstance(dst, torch.Tensor) and list(dst.shape) == list(shape) and dst.dtype == src.dtype:
            with torch.no_grad():  # in place, as the global load: no fresh memory to fault in
                dst.copy_(src.view(shape))
        else:  # a value of another shape or kind (a step counter, the RNG state): the saved one
            _set(sd, key, src.view(shape).clone())
    for key, v in head.get("values", {}).items():
        _set(sd, key, _value(v))


def estimate_bytes(model: torch.nn.Module) -> int:
    """This rank's shard, before there is optimizer state to measure: its parameters and AdamW's two moments."""
    return sum(3 * _local(p).numel() * p.element_size() for p in model.parameters())


def _wait(reqs: list[Any]) -> None:
    """Wait for posted sends and receives (a None is one that had nothing to do)."""
    for req in reqs:
        if req is not None:
            req.wait()


def _gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB"


def _read(path: Path) -> Buffer:
    """A file's bytes, never through a symbolic link: mapped, not copied (a node-local shard is in memory
    already: a copy would fault in and fill as many fresh pages again, twice the restore's time on a loaded
    node, `tests/bench/bench_localckpt.py`).  A private mapping, so the bytes are writable for torch.frombuffer
    and never written back.  Safe against the tier's own pruning: an unlinked file's pages stay mapped; nothing
    truncates a shard in place (they are written to a new name and renamed)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return bytearray()
        return mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


def _write(path: Path, data: bytes | bytearray | memoryview) -> None:
    """Write a file in the node folder (mode 0600, never through a link): a temporary name, then the real one
    (agpt.safewrite; no fsync: the tier is memory)."""
    safewrite.replace(path, data, mode=0o600, sync=False)


class LocalTier:
    """The tier on this rank; construct on every rank (the set-up is collective on the tier's own gloo group)."""

    def __init__(self, cfg: CheckpointConfig, run_dir: Path, *, rank: int, world: int, layout: str,
                 state: Callable[[], dict[str, Any]], state_bytes: int, pin_memory: bool = False,
                 env: Mapping[str, str] | None = None) -> None:  # fmt: skip
        env = os.environ if env is None else env
        self.cfg = cfg
        self.rank, self.world = rank, world
        self.state = state
        self.pin_memory = pin_memory
        self.group = dist.new_group(backend="gloo")  # its own: the save thread must not share a group
        self.host = nodelocal.host_name(env)
        self.root = nodelocal.base(cfg.local_dir, env.get(localtier.SETTING_ENV))
        self.run_dir = run_dir
        self.folder = localtier.node_folder(self.root, run_dir, self.host)
        job = rundir.job_id(env)
        self.pins = localtier.pins(run=nodelocal.run_tag(run_dir), job=job, world_size=world, layout=layout)
        self.on = False
        self.last_saved_step: int | None = None
        self.t_saved = time.perf_counter()
        self._thread: threading.Thread | None = None
        self._result: str | None = None  # the last save's outcome on every rank: "" saved, else why it failed
        self._staged: Staged | None = None
        self._setup(state_bytes, env.get(localtier.DOMAIN_ENV, ""))

    # -- set-up ---------------------------------------------------------------------------------------------
    def _gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def _probe(self) -> tuple[str, int, int]:
        """(what is wrong with this node's folder or "", bytes free, bytes our earlier steps hold there)."""
        if not self.root.is_dir():
            return f"{self.root}: missing (checkpoint.local_dir, SITE_LOCAL_CKPT_DIR)", 0, 0
        try:
            nodelocal.private_dir(self.folder)
            _write(self.folder / f".probe.{self.rank}", b"ok\n")
            os.unlink(self.folder / f".probe.{self.rank}")
            st = os.statvfs(self.folder)
            used = sum(p.stat().st_size for p in self.folder.glob(f"*/*{localtier.SHARD_SUFFIX}"))
            return "", st.f_bavail * st.f_frsize, used
        except OSError as exc:
            return f"{exc.filename or self.folder}: {exc.strerror or exc}", 0, 0

    def _setup(self, state_bytes: int, domain_re: str) -> None:
        """Who is on which node, each node's folder checked and sized, the partners; off with one warning."""
        problem, free, used = self._probe()
        rows = self._gather((self.host, problem, free, used, state_bytes))
        self.hosts = list(dict.fromkeys(r[0] for r in rows))  # the nodes, in rank order
        self.rank_node = [self.hosts.index(r[0]) for r in rows]
        self.members = [[i for i, k in enumerate(self.rank_node) if k == n] for n in range(len(self.hosts))]
        keep = self.cfg.local_keep
        problems = [f"{r[0]}: {r[1]}" for r in rows if r[1]]
        if len(self.hosts) < 2:
            problems.insert(
                0, f"needs 2 nodes or more for a partner's copy; this job runs on 1 ({self.hosts[0]})"
            )
        elif len({len(m) for m in self.members}) > 1:
            problems.insert(0, "the nodes run different numbers of ranks (" + ", ".join(
                f"{h} {len(m)}" for h, m in zip(self.hosts, self.members, strict=True)) + ")")  # fmt: skip
        for n, members in enumerate(self.members):
            need = 2 * (keep + 1) * sum(rows[i][4] for i in members)  # own + replica, keep + the one written
            _, why, free, used, _ = rows[members[0]]
            if not why and free + used < need:
                problems.append(f"{self.hosts[n]}: {self.folder.parent}: full ({_gb(free)} free; the tier needs "
                                f"{_gb(need)} for checkpoint.local_keep {keep})")  # fmt: skip
        if problems:
            if self.rank == 0:
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                warn(f"off: {problems[0]}{more}; training goes on with the global tier")
            return
        self.node = self.rank_node[self.rank]
        index = self.members[self.node].index(self.rank)
        partner = localtier.partners(self.hosts, domain_re)
        self.ward = partner.index(self.node)  # the node whose replica this one holds
        self.to_rank = self.members[partner[self.node]][index]
        self.from_rank = self.members[self.ward][index]
        self.leader = self.members[self.node][0] == self.rank
        self.on = True
        if self.rank == 0:
            node = 2 * sum(rows[i][4] for i in self.members[0])
            print(f"{rundir.LOCAL_TIER_ON}{self.folder.parent}/{self.folder.name.rsplit('.', 1)[0]}.HOST, every "
                f"{self.cfg.local_interval or '-'} steps / {self.cfg.local_interval_s or '-'} s, keeping "
                f"{keep}; {self.hosts[0]}'s copy on {self.hosts[partner[0]]}; up to "
                f"{_gb(localtier.memory_per_node(node / 2, keep))} per node", flush=True)  # fmt: skip

    # -- saving ---------------------------------------------------------------------------------------------
    def due_by_time(self) -> bool:
        """A time-based save is due (rank 0 asks; the step's all-reduce tells every rank)."""
        return self.on and ckpt_policy.due_by_time(
            time.perf_counter() - self.t_saved, self.cfg.local_interval_s
        )

    def due(self, step: int, asked: bool) -> bool:
        """A local save at STEP: every `local_interval` steps, or ASKED (by time, or with a global save, so that a
        relaunch after it restores from memory)."""
        return (
            self.on
            and self.last_saved_step != step
            and (ckpt_policy.due_by_step(step, self.cfg.local_interval) or asked)
        )

    def save(self, step: int) -> float:
        """Stage this rank's shard of STEP and write it in the background; the seconds training stalled."""
        t0 = time.perf_counter()
        self.wait()
        if not self.on:
            return time.perf_counter() - t0
        sd = self.state()
        if self._staged is None or not self._staged.fits(sd):
            self._staged = Staged(sd, {**self.pins, "rank": self.rank}, pin_memory=self.pin_memory)
        buf = self._staged.fill(sd, step)
        d = step_dir(self.folder, step)
        if self.leader:  # never a marker over files about to be replaced
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                os.unlink(d / localtier.NODE_MARKER)
        self._result = None
        self._thread = threading.Thread(target=self._run, args=(step, buf), name=f"local-ckpt-{step}")
        self._thread.start()
        self.last_saved_step = step
        self.t_saved = time.perf_counter()
        return self.t_saved - t0

    def wait(self) -> None:
        """Block until the in-flight save ends; a failed one (every rank knows it) turns the tier off."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._result:
            if self.rank == 0:
                warn(f"off: a save failed: {self._result}; training goes on with the global tier")
            self.on = False
        self._result = None

    def _run(self, step: int, buf: torch.Tensor) -> None:
        try:
            self._result = self._write_step(step, buf)
        except Exception as exc:  # a peer gone in a collective: the job is ending; report it at wait()
            self._result = f"{self.host}: {type(exc).__name__}: {exc}"

    def _write_step(self, step: int, host: torch.Tensor) -> str:
        """Own shard, replica both ways, then the node markers: "" when the step is complete on every node."""
        d = step_dir(self.folder, step)
        buf = host.numpy().data
        sha = sha256(buf)
        err = ""
        try:
            nodelocal.private_dir(d)  # never entered through a link planted at step-N
            faults.local_write(step, d)
            _write(d / localtier.shard_name(self.rank), buf)
        except OSError as exc:
            err = f"{self.host}: {exc.filename or d}: {exc.strerror or exc}"
        replica = self._exchange(None if err else host)
        infos = self._gather((err, sha, len(buf)))
        ward_err, ward_sha, _ = infos[self.from_rank]
        if not err and not ward_err:
            if replica is None or sha256(replica) != ward_sha:
                err = f"{self.host}: the copy of rank {self.from_rank}'s shard arrived incomplete or changed"
            else:
                try:
                    _write(d / localtier.shard_name(self.from_rank), replica)
                except OSError as exc:
                    err = f"{self.host}: {exc.filename or d}: {exc.strerror or exc}"
        first = next((e for e in self._gather(err or ward_err) if e), "")
        if not first and self.leader:
            first = self._mark(d, step, infos)
        first = next((e for e in self._gather(first) if e), "")
        if self.leader:
            if first:
                shutil.rmtree(d, ignore_errors=True)
            else:
                self._prune()
        return first

    def _exchange(self, buf: torch.Tensor | None) -> memoryview | None:
        """Send BUF to the partner's rank while receiving the ward's (None: nothing to send / nothing came)."""
        size = torch.tensor([buf.numel() if buf is not None else -1], dtype=torch.int64)
        got = torch.empty(1, dtype=torch.int64)
        _wait([dist.isend(size, dst=self.to_rank, group=self.group),
               dist.irecv(got, src=self.from_rank, group=self.group)])  # fmt: skip
        out = torch.empty(int(got), dtype=torch.uint8) if int(got) > 0 else None
        reqs = []
        if buf is not None:
            reqs.append(dist.isend(buf, dst=self.to_rank, group=self.group))
        if out is not None:
            reqs.append(dist.irecv(out, src=self.from_rank, group=self.group))
        _wait(reqs)
        return out.numpy().data if out is not None else None

    def _mark(self, d: Path, step: int, infos: list[Any]) -> str:
        """The node's marker: its own ranks' shards and its ward's, with the digests their owners computed."""
        shards: dict[int, dict[str, Any]] = {}
        for node in (self.node, self.ward):
            for r in self.members[node]:
                shards[r] = {"sha256": infos[r][1], "bytes": infos[r][2], "owner": self.hosts[node]}
        try:
            text = localtier.marker_record(step, host=self.host, pinned=self.pins, shards=shards)
            _write(d / localtier.NODE_MARKER, text.encode())
            return ""
        except OSError as exc:
            return f"{self.host}: {exc.filename or d}: {exc.strerror or exc}"

    def _prune(self) -> None:
        """Keep the newest `local_keep` steps this launch can use; drop the rest (older, unmarked, of another
        job or layout: what no restore of this job would load)."""
        held = localtier.inventory(self.folder, self.host, self.pins)
        mine = set(self.members[self.node])
        usable = sorted(s for s, shards in held.steps.items() if mine <= set(shards))
        keep = set(usable[-self.cfg.local_keep :])
        for s, path in localtier.step_dirs(self.folder):
            if s not in keep:
                shutil.rmtree(path, ignore_errors=True)

    # -- restoring ------------------------------------------------------------------------------------------
    def restore(self, newest_global: int | None) -> tuple[dict[str, Any], localtier.Choice] | None:
        """The state of the newest step every rank can restore from the local tier, checked on every rank and
        not yet applied; None (the reason in the log) when the global tier is to be used."""
        if not self.on:
            return None
        held = localtier.inventory(self.folder, self.host, self.pins) if self.leader else None
        holdings = [h for h in self._gather(held) if h is not None]  # the leaders, in node order
        notes = [n for h in holdings for n in h.notes]
        choice, why = localtier.choose(holdings, self.rank_node)
        if self.rank == 0:
            for line in (notes + why)[:3]:
                say(line)
            if len(notes + why) > 3:
                say(f"... and {len(notes + why) - 3} more")
        if choice is None:
            if self.rank == 0 and any(h.steps for h in holdings):
                say("no step every rank can restore; resuming from the global tier")
            return None
        if newest_global is not None and newest_global > choice.step:
            if self.rank == 0:
                say(
                    f"the global step {newest_global} is newer than local step {choice.step}; resuming from it"
                )
            return None
        buf, err = self._fetch(choice)
        sd = self.state()
        head: dict[str, Any] = {}
        start = 0
        if buf is not None:
            try:
                head, start = check_shard(
                    buf, choice.sha256[self.rank], self.pins, choice.step, self.rank, sd
                )
            except ValueError as exc:
                err = f"{self._where(choice, self.rank)}: {exc}"
        bad = [e for e in self._gather(err) if e]
        if bad:
            if self.rank == 0:
                more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
                warn(
                    f"local step {choice.step} cannot be restored: {bad[0]}{more}; resuming from the global tier"
                )
            return None
        assert buf is not None
        apply_shard(sd, head, buf, start)
        return sd, choice

    def resumed_line(self, choice: localtier.Choice) -> str:
        """The line a person reads: the step, and which ranks came from a partner's copy, from where."""
        moved = choice.from_partner
        where = "".join(f"; rank {r} from {self.hosts[choice.holder[r]]}" for r in moved[:4])
        return (
            f"agpt: resumed from the local tier (step {choice.step}: {self.world - len(moved)} rank(s) from "
            f"their node's memory, {len(moved)} from a partner's copy{where}{'; ...' if len(moved) > 4 else ''})"
        )

    def _where(self, choice: localtier.Choice, rank: int) -> str:
        """Where RANK's shard of the chosen step is: HOST:PATH."""
        host = self.hosts[choice.holder[rank]]
        d = step_dir(localtier.node_folder(self.root, self.run_dir, host), choice.step)
        return f"{host}:{d / localtier.shard_name(rank)}"

    def _fetch(self, choice: localtier.Choice) -> tuple[Buffer | None, str]:
        """This rank's shard: its own node's file, else sent by a rank of the node holding the copy (each such
        rank sends the shards of the ranks in its place on their nodes)."""
        d = step_dir(self.folder, choice.step)
        sends: list[tuple[int, Buffer | None]] = []
        for r in range(self.world):
            h = choice.holder[r]
            if h == self.node and h != self.rank_node[r]:
                place = self.members[self.rank_node[r]].index(r) % len(self.members[h])
                if self.members[h][place] == self.rank:
                    try:
                        sends.append((r, _read(d / localtier.shard_name(r))))
                    except OSError:
                        sends.append((r, None))
        mine = choice.holder[self.rank]
        src = None if mine == self.node else self.members[mine][
            self.members[self.node].index(self.rank) % len(self.members[mine])]  # fmt: skip
        sizes = {r: torch.tensor([len(b) if b is not None else -1], dtype=torch.int64) for r, b in sends}
        got = torch.empty(1, dtype=torch.int64)
        reqs = [dist.isend(sizes[r], dst=r, group=self.group) for r, _ in sends]
        if src is not None:
            reqs.append(dist.irecv(got, src=src, group=self.group))
        _wait(reqs)
        reqs = [dist.isend(torch.frombuffer(b, dtype=torch.uint8), dst=r, group=self.group)
                for r, b in sends if b is not None]  # fmt: skip
        buf: Buffer | None = None
        err = ""
        if src is None:
            try:
                buf = _read(d / localtier.shard_name(self.rank))
            except OSError as exc:
                err = f"{self._where(choice, self.rank)}: unreadable ({exc.strerror or exc})"
        elif int(got) > 0:
            buf = bytearray(int(got))
            reqs.append(dist.irecv(torch.frombuffer(buf, dtype=torch.uint8), src=src, group=self.group))
        else:
            err = f"{self._where(choice, self.rank)}: unreadable on its holder"
        _wait(reqs)
        return buf, err
