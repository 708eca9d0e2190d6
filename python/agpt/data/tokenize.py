"""`agpt tokenize`: text in, Megatron `MMIDIDX` shards of a fixed token budget out, in parallel.

Two phases, so the output is byte-identical for any number of workers and ranks:

1. Inputs are cut into chunks (see `readers`) whose boundaries depend only on the files. Ranks take
   chunks by a deterministic longest-first assignment; each rank's worker processes tokenize them and
   write `DIR/.work/cNNNNNN.tok` (tokens) and `.len` (document lengths, written last = complete).
2. Rank 0 lays the documents, in input order, into shards of `shard_tokens` tokens (a shard closes
   after the document that reaches the budget; documents are never split). Each shard has exactly one
   writer, which copies its chunks' token bytes in large blocks into a temporary file beside `PREFIX.bin`
   (agpt.safewrite), writes the index, and renames (`.bin`, then `.idx`: an `.idx` means a complete shard).

A re-run with the same inputs and settings reuses finished chunks and shards; one with different
ones refuses to touch the directory (unless `overwrite`), so nothing already written is damaged.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agpt import rundir, safewrite, shellword
from agpt.data import mmidx, workdir
from agpt.data.dist import Comm, local_ranks, world
from agpt.data.readers import Chunk, expand_inputs, iter_documents, plan_chunks
from agpt.data.tokenizer import load
from agpt.digest import file_sha256
from agpt.errors import AgptError, BadInput, DataError
from agpt.progress import Progress

WORK = ".work"
META = "tokenize.json"
FILELIST = "filelist.txt"
ENCODE_BATCH = 512


@dataclass(kw_only=True, slots=True)
class TokenizeSettings:
    """Options of `agpt tokenize`; validated on construction so a bad flag fails before any work."""

    model: str
    inputs: list[str]
    output: str
    text_key: str = "text"
    workers: int = 0
    shard_tokens: int = 1 << 30
    append_eod: bool = True
    bos: bool = False
    doc_per_file: bool = False
    chunk_bytes: int = 64 << 20
    name: str = "data"
    corpus: str = ""
    skip_empty: bool = False
    overwrite: bool = False
    progress: bool | None = None
    quiet: bool = False

    def __post_init__(self) -> None:
        if self.shard_tokens < 1:
            raise BadInput(f"--shard-tokens {self.shard_tokens}: must be positive")
        if self.chunk_bytes < 1024:
            raise BadInput(f"--chunk-bytes {self.chunk_bytes}: must be at least 1024")
        if self.workers < 0:
            raise BadInput(f"--workers {self.workers}: must be 0 (auto) or more")
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise BadInput(f"--name {self.name!r}: must be a plain file name prefix")
        if not self.text_key:
            raise BadInput("--text-key: must not be empty")
        # filelist.txt holds `WEIGHT PREFIX CORPUS` lines that `agpt blend` splits on white space: a shard prefix
        # (the output folder's absolute path) or a corpus name with a space, a `#` or a control character in it
        # would write a list that blend refuses.
        for flag, value in (("--output", str(Path(self.output).resolve())), ("--corpus", self.corpus)):
            if any(c.isspace() or c == "#" for c in value) or shellword.CONTROL.search(value):
                raise BadInput(
                    f"{flag} {shellword.printable(value)!r}: holds a space, '#' or a control character; "
                    f"{FILELIST} lists 'WEIGHT PREFIX CORPUS' as words"
                )


@dataclass(kw_only=True, slots=True)
class _Job:
    """What a worker process needs for one chunk (picklable)."""

    index: int
    chunk: Chunk
    work: str
    model: str
    text_key: str
    append_eod: bool
    bos: bool
    skip_empty: bool
    dtype: str


@dataclass(kw_only=True, slots=True)
class _Piece:
    chunk: int
    first: int
    last: int  # exclusive


@dataclass(kw_only=True, slots=True)
class _ShardPlan:
    index: int
    prefix: str
    docs: int
    tokens: int
    pieces: list[_Piece] = field(default_factory=list)


_SP: dict[str, Any] = {}


def _processor(model: str) -> Any:
    if model not in _SP:
        _SP[model] = load(model)
    return _SP[model]


def _chunk_paths(work: str, index: int) -> tuple[Path, Path]:
    return Path(work) / f"c{index:06d}.tok", Path(work) / f"c{index:06d}.len"


def tokenize_chunk(job: _Job) -> tuple[int, int, int, int, int]:
    """Tokenize one chunk into its work files; returns (index, docs, tokens, bytes, skipped).
    Tokens and lengths stream to disk batch by batch, so memory stays flat however large the chunk."""
    sp = _processor(job.model)
    dtype = np.dtype(job.dtype)
    tok_path, len_path = _chunk_paths(job.work, job.index)
    docs = tokens = skipped = 0
    # agpt.safewrite.Pending: temporary names made exclusively, never a link followed; a full disk is one line
    out = safewrite.Pending(tok_path)
    try:
        out_len = safewrite.Pending(len_path)
    except BaseException:
        out.abort()
        raise
    try:
        batch: list[str] = []
        where: list[int] = []

        def flush() -> None:
            nonlocal docs, tokens
            ids = sp.encode(batch, add_bos=job.bos, add_eos=job.append_eod, num_threads=1)
            sizes = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
            if sizes.min() < 1:
                loc = where[int(np.argmin(sizes))]
                raise DataError(f"{job.chunk.where(loc)}: document encodes to no tokens")
            flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(sizes.sum()))
            out.write(flat.tobytes())
            out_len.write(sizes.astype("<i8").tobytes())
            docs += len(ids)
            tokens += int(sizes.sum())
            batch.clear()
            where.clear()

        for text, loc in iter_documents(job.chunk, job.text_key):
            if not text.strip():
                if job.skip_empty:
                    skipped += 1
                    continue
                raise DataError(f"{job.chunk.where(loc)}: empty document (pass --skip-empty to drop it)")
            batch.append(text)
            where.append(loc)
            if len(batch) >= ENCODE_BATCH:
                flush()
        if batch:
            flush()
        out.commit(sync=False)
        out_len.commit(sync=False)  # last: a .len means the chunk is complete
    except BaseException:
        out.abort()
        out_len.abort()
        raise
    return job.index, docs, tokens, job.chunk.nbytes, skipped


def _chunk_done(work: str, index: int, itemsize: int) -> bool:
    tok, ln = _chunk_paths(work, index)
    if not ln.exists() or not tok.exists():
        return False
    lens = np.fromfile(ln, dtype="<i8")
    return tok.stat().st_size == int(lens.sum()) * itemsize


def _assign(weights: list[int], ranks: int) -> list[int]:
    """Longest-first assignment of items to ranks (deterministic: ties go to the lower index)."""
    load = [0] * ranks
    owner = [0] * len(weights)
    for i in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        r = min(range(ranks), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += max(weights[i], 1)
    return owner


def _plan_shards(work: str, nchunks: int, shard_tokens: int, out: Path, name: str) -> list[_ShardPlan]:
    """Lay documents in input order into shards that close once they reach `shard_tokens`."""
    shards: list[_ShardPlan] = []
    cur: _ShardPlan | None = None
    for c in range(nchunks):
        lens = np.fromfile(_chunk_paths(work, c)[1], dtype="<i8")
        cum = np.cumsum(lens)  # tokens through document i of this chunk
        first = 0
        while first < lens.size:
            if cur is None:
                cur = _ShardPlan(
                    index=len(shards), prefix=str(out / f"{name}_{len(shards):05d}"), docs=0, tokens=0
                )
            before = int(cum[first - 1]) if first else 0
            need = shard_tokens - cur.tokens
            k = int(np.searchsorted(cum, before + need, side="left"))  # first doc reaching the budget
            last = min(k + 1, int(lens.size))
            cur.pieces.append(_Piece(chunk=c, first=first, last=last))
            cur.docs += last - first
            cur.tokens += int(cum[last - 1]) - before
            first = last
            if cur.tokens >= shard_tokens:
                shards.append(cur)
                cur = None
    if cur is not None and cur.docs:
        shards.append(cur)
    return shards


def _marker(work: str, plan: _ShardPlan) -> Path:
    return Path(work) / f"s{plan.index:06d}.done"


def _shard_done(plan: _ShardPlan, work: str) -> bool:
    """A shard is reused only if this run's work dir recorded it (never a stale one of other inputs)."""
    if not _marker(work, plan).exists():
        return False
    try:
        shard = mmidx.Shard(plan.prefix, check=False)
    except DataError:
        return False
    return len(shard) == plan.docs and int(shard.index.sizes.sum(dtype=np.int64)) == plan.tokens


def write_shard(args: tuple[_ShardPlan, str, str]) -> int:
    """Copy a shard's documents from the work files into its `.bin`/`.idx` (the only writer)."""
    plan, work, dtype_s = args
    dtype = np.dtype(dtype_s)
    writer = mmidx.ShardWriter(plan.prefix, dtype)
    try:
        for piece in plan.pieces:
            tok, ln = _chunk_paths(work, piece.chunk)
            lens = np.fromfile(ln, dtype="<i8")
            start = int(lens[: piece.first].sum()) * dtype.itemsize
            left = int(lens[piece.first : piece.last].sum()) * dtype.itemsize
            with open(tok, "rb") as fh:
                fh.seek(start)
                while left > 0:
                    block = fh.read(min(left, 64 << 20))
                    if not block:
                        raise DataError(f"{tok}: truncated work file")
                    writer.write_raw(block)
                    left -= len(block)
            writer.add_sizes(lens[piece.first : piece.last])
        writer.close()
    except BaseException:
        writer.abort()
        raise
    # The .bin's digest, read back right after it was written (page cache): the blend manifest pins it.
    safewrite.replace(_marker(work, plan), file_sha256(mmidx.bin_path(plan.prefix)) + "\n", sync=False)
    return plan.index


def _bin_sha256(work: str, plan: _ShardPlan) -> str:
    """The digest write_shard recorded for a shard, else hashed now (a shard reused from an older run)."""
    try:
        text = _marker(work, plan).read_text().strip()
    except OSError:
        text = ""
    if len(text) == 64 and all(c in "0123456789abcdef" for c in text):
        return text
    return file_sha256(mmidx.bin_path(plan.prefix))


def _run_jobs(
    fn: Any, jobs: list[Any], workers: int, comm: Comm, progress: Progress | None, weight: Any
) -> list[Any]:
    """fn(job) for every job, in WORKERS processes (`spawn` under MPI: forking an MPI process is unsafe on many
    fabrics); the results in the order they finish.  The first failure cancels the jobs not yet started, lets
    the running ones end, and is raised.  (concurrent.futures, not multiprocessing.Pool: Pool.terminate() kills
    workers that may hold its queues' locks and then can wait forever: 1 bad-input run in 40 did, on 2 loaded
    cores; a worker killed outright, by the kernel's OOM killer say, left Pool waiting for good too.)"""
    results: list[Any] = []
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            results.append(fn(job))
            if progress:
                progress.update(weight(job))
        return results
    ctx = mp.get_context("spawn" if comm.mpi is not None else "fork")
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
        futures = [pool.submit(fn, job) for job in jobs]
        try:
            for done in as_completed(futures):
                res = done.result()
                results.append(res)
                if progress:
                    progress.update(weight(res))
        except BaseException as e:
            pool.shutdown(wait=True, cancel_futures=True)
            if isinstance(e, BrokenProcessPool):
                raise AgptError(
                    f"a worker process died ({e}): killed by the system (out of memory?); "
                    "the work done so far is kept, run the same command again to go on"
                ) from None
            raise
    return results


def _identity(s: TokenizeSettings, files: list[Path], model_sha: str) -> dict[str, Any]:
    """What the output depends on: a re-run with the same identity may reuse partial results."""
    inputs = [
        {"path": str(f.resolve()), "bytes": f.stat().st_size, "mtime_ns": f.stat().st_mtime_ns} for f in files
    ]
    opts = {
        k: getattr(s, k)
        for k in (
            "text_key",
            "shard_tokens",
            "append_eod",
            "bos",
            "doc_per_file",
            "chunk_bytes",
            "name",
            "skip_empty",
        )
    }
    return {"tokenizer_sha256": model_sha, "inputs": inputs, "options": opts}


def _default_workers(comm: Comm) -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // (local_ranks() if comm.mpi is not None else 1))


def _prepare(s: TokenizeSettings, out: Path, ident: dict[str, Any]) -> str:
    """Rank 0: check the output dir; returns 'done' when it already holds this exact result."""
    workdir.ensure_output(out)
    meta = out / META
    work = workdir.claim(out, "agpt tokenize", also_ours=("identity.json",))
    if meta.exists():
        try:
            old = rundir.read_record(meta)
        except (OSError, ValueError, RecursionError):
            raise DataError(f"{meta}: unreadable; remove it or use another --output") from None
        if not isinstance(old, dict) or not isinstance(old.get("shards", []), list):
            raise DataError(f"{meta}: not a tokenize record; remove it or use another --output")
        same = old.get("identity") == ident
        if same and all(mmidx.idx_path(x["prefix"]).exists() for x in old.get("shards", [])):
            return "done"
        if not same and not s.overwrite:
            raise BadInput(
                f"--output {out}: holds shards of other inputs or settings (pass --overwrite or use a new dir)"
            )
    elif any(out.glob(f"{s.name}_*.idx")) and not (work / "identity.json").exists() and not s.overwrite:
        raise BadInput(
            f"--output {out}: holds shards this tool did not record (pass --overwrite or use a new dir)"
        )
    ident_file = work / "identity.json"
    if work.exists():
        try:
            same = rundir.read_record(ident_file) == ident  # the one reader: a FIFO there is never opened
        except (OSError, ValueError, RecursionError):
            same = False
        if not same:
            shutil.rmtree(work)
    workdir.make(work, "agpt tokenize")
    safewrite.replace(ident_file, json.dumps(ident, indent=1))
    return "run"


def run(s: TokenizeSettings, comm: Comm | None = None) -> dict[str, Any]:
    """Tokenize, rank 0 holding --output's lock (agpt.data.workdir.lock): two runs on one
    --output are refused, not raced."""
    return workdir.locked_run(Path(s.output).resolve(), "agpt tokenize", lambda take: _run(s, comm, take))


def _run(s: TokenizeSettings, comm: Comm | None, take_lock: Callable[[], None]) -> dict[str, Any]:
    """Tokenize `s.inputs` into `s.output`; every rank calls this; rank 0 returns the full report."""
    comm = comm or world()
    t0 = time.monotonic()
    out = Path(s.output).resolve()
    state = comm.on_root(lambda: _plan(s, out, take_lock))
    if state["status"] == "done":
        if comm.rank != 0:
            return {}
        done: dict[str, Any] = json.loads((out / META).read_text())
        done["skipped"] = True
        return done
    chunks: list[Chunk] = state["chunks"]
    dtype = np.dtype(state["dtype"])
    work = str(out / WORK)
    workers = s.workers or _default_workers(comm)
    bytes_done, skipped_docs = _tokenize_chunks(s, comm, chunks, work, dtype, workers)
    t1 = time.monotonic()
    plans = _write_shards(s, comm, len(chunks), work, dtype, workers, out)
    report: dict[str, Any] = {}
    if comm.rank == 0:
        report = _finish(s, out, plans, state, bytes_done, skipped_docs, t0, t1)
    comm.barrier()
    return report


def _plan(s: TokenizeSettings, out: Path, take_lock: Callable[[], None]) -> dict[str, Any]:
    """Rank 0: check the tokenizer and the output, and plan the chunks (none when the output is up to date)."""
    sp = load(s.model)
    if s.append_eod and sp.eos_id() < 0:
        raise DataError(f"{s.model}: the model has no eos id, so no EOD can be appended")
    if s.bos and sp.bos_id() < 0:
        raise DataError(f"{s.model}: the model has no bos id (--bos)")
    model_sha = file_sha256(s.model)
    files = expand_inputs(s.inputs)
    ident = _identity(s, files, model_sha)
    take_lock()  # --output is this run's from here (agpt.data.workdir.lock)
    status = _prepare(s, out, ident)
    return {
        "status": status,
        "chunks": plan_chunks(files, s.chunk_bytes, s.doc_per_file) if status == "run" else [],
        "dtype": mmidx.token_dtype(sp.GetPieceSize()).str,
        "model_sha": model_sha,
        "ident": ident,
        "vocab": sp.GetPieceSize(),
        "eos": sp.eos_id(),
        "bos": sp.bos_id(),
    }


def _tokenize_chunks(s: TokenizeSettings, comm: Comm, chunks: list[Chunk], work: str, dtype: np.dtype[Any],
                     workers: int) -> tuple[int, int]:  # fmt: skip
    """Phase 1, chunks -> work files, each rank its share (largest first); (input bytes, skipped documents)."""
    owner = _assign([c.nbytes for c in chunks], comm.size)
    model = str(Path(s.model).resolve())

    def job(i: int, c: Chunk) -> _Job:
        return _Job(index=i, chunk=c, work=work, model=model, text_key=s.text_key, append_eod=s.append_eod,
                    bos=s.bos, skip_empty=s.skip_empty, dtype=dtype.str)  # fmt: skip

    mine = [
        job(i, c)
        for i, c in enumerate(chunks)
        if owner[i] == comm.rank and not _chunk_done(work, i, dtype.itemsize)
    ]
    label = "tokenize" if comm.size == 1 else f"tokenize[rank {comm.rank}/{comm.size}]"
    total = sum(j.chunk.nbytes for j in mine)
    progress = Progress(total, label, unit="B", scale=True, bar=s.progress, quiet=s.quiet or comm.rank != 0)

    def weight(r: Any) -> int:  # bytes done: a result (tuple) or, without a pool, the job itself
        return int(r[3] if isinstance(r, tuple) else r.chunk.nbytes)

    def tokenize_mine() -> list[Any]:
        try:
            return _run_jobs(tokenize_chunk, mine, workers, comm, progress, weight)
        finally:
            progress.close()

    results = comm.on_every_rank(tokenize_mine) or []
    stats = comm.allgather((sum(r[3] for r in results), sum(r[4] for r in results)))
    return sum(x[0] for x in stats), sum(x[1] for x in stats)


def _write_shards(s: TokenizeSettings, comm: Comm, nchunks: int, work: str, dtype: np.dtype[Any], workers: int,
                  out: Path) -> list[_ShardPlan]:  # fmt: skip
    """Phase 2, work files -> shards, one writer each; the previous result's record goes once phase 1 is done
    (it stops describing the output)."""
    plans = comm.bcast(_plan_shards(work, nchunks, s.shard_tokens, out, s.name) if comm.rank == 0 else None)
    assert plans is not None
    if comm.rank == 0:
        (out / META).unlink(missing_ok=True)
    comm.barrier()
    todo = [p for i, p in enumerate(plans) if i % comm.size == comm.rank and not _shard_done(p, work)]
    jobs = [(p, work, dtype.str) for p in todo]
    comm.on_every_rank(lambda: _run_jobs(write_shard, jobs, workers, comm, None, lambda _: 0))
    comm.barrier()
    return plans


def _finish(
    s: TokenizeSettings,
    out: Path,
    plans: list[_ShardPlan],
    state: dict[str, Any],
    bytes_done: int,
    skipped_docs: int,
    t0: float,
    t1: float,
) -> dict[str, Any]:
    """Rank 0: the file list, `tokenize.json` (written last), and the work dir removed."""
    corpus = s.corpus or out.name
    for stale in out.glob(f"{s.name}_*.idx"):  # shards of an overwritten, longer result
        tail = stale.stem[len(s.name) + 1 :]
        if tail.isdigit() and int(tail) >= len(plans):
            stale.unlink()
            stale.with_suffix(".bin").unlink(missing_ok=True)
    for left in safewrite.leftovers(out, f"{s.name}_*"):  # a killed writer's half shard
        left.unlink(missing_ok=True)
    total_tokens = sum(p.tokens for p in plans)
    shards = [
        {
            "prefix": p.prefix,
            "docs": p.docs,
            "tokens": p.tokens,
            "idx_sha256": file_sha256(mmidx.idx_path(p.prefix)),
            "bin_bytes": mmidx.bin_path(p.prefix).stat().st_size,
            "bin_sha256": _bin_sha256(str(out / WORK), p),
        }
        for p in plans
    ]
    lines = [f"{p.tokens / max(total_tokens, 1):.12g} {p.prefix} {corpus}\n" for p in plans]
    safewrite.replace(out / FILELIST, "".join(lines))
    elapsed = time.monotonic() - t0
    report = {
        "identity": state["ident"],
        "tokenizer": {
            "path": str(Path(s.model).resolve()),
            "sha256": state["model_sha"],
            "vocab_size": state["vocab"],
            "eod_id": state["eos"],
            "bos_id": state["bos"],
        },
        "dtype": np.dtype(state["dtype"]).name,
        "corpus": corpus,
        "shards": shards,
        "totals": {
            "docs": sum(p.docs for p in plans),
            "tokens": total_tokens,
            "skipped_empty": skipped_docs,
            "input_bytes": sum(int(i["bytes"]) for i in state["ident"]["inputs"]),
            "bytes_this_run": bytes_done,
            "seconds": round(elapsed, 3),
            "tokenize_seconds": round(t1 - t0, 3),
        },
        "settings": {k: v for k, v in asdict(s).items() if k not in {"progress", "quiet", "overwrite"}},
    }
    safewrite.replace(out / META, json.dumps(report, indent=1) + "\n")
    shutil.rmtree(out / WORK, ignore_errors=True)
    report["skipped"] = False
    return report


def format_table(report: dict[str, Any]) -> str:
    """The closing table: documents, tokens, MB/s and tokens/s."""
    t = report["totals"]
    secs = max(float(t["seconds"]), 1e-9)
    rows = [
        ("shards", f"{len(report['shards'])}"),
        ("documents", f"{t['docs']:,}"),
        ("tokens", f"{t['tokens']:,}"),
        ("input MB", f"{t['input_bytes'] / 1e6:,.2f}"),
        ("seconds", f"{secs:,.2f}"),
        ("MB/s", f"{t['bytes_this_run'] / 1e6 / secs:,.2f}"),
        ("tokens/s", f"{t['tokens'] / secs:,.0f}" if t["bytes_this_run"] else "0 (all up to date)"),
    ]
    if report.get("skipped"):
        rows = rows[:3]
    if t.get("skipped_empty"):
        rows.append(("skipped empty", f"{t['skipped_empty']:,}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
