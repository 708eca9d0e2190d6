"""`agpt blend`: token shards + a weighted file list -> a pinned index of `L+1`-token training samples.

How a blend is built (every step is deterministic, so the bytes depend only on the inputs):

1. The file list (`WEIGHT PREFIX CORPUS` lines) groups shards into corpora; a corpus' weight is the
   sum of its files' weights, a file's share inside its corpus is its weight over that sum.
2. Corpus first: the largest-deficit rule (`greedy`) picks the corpus of each of the N positions, so
   every window of G consecutive samples holds each corpus within two of `w * G` for any G. Then the
   same rule, inside each corpus, picks which file serves each of that corpus' positions. (Blending
   thousands of files flat lets a small corpus drift by many samples per batch; two levels do not.)
3. Per file, documents are concatenated in a shuffled order per epoch and cut into samples of L+1
   tokens that overlap by one (sample i is tokens [iL, iL+L]); as many epochs as the file's share of
   N needs, so a corpus asked for more than it holds is repeated, and the report says so. The file's
   samples are then shuffled (full epochs together, the last partial epoch separately, as Megatron
   does) and taken in that order.
4. Shuffles use `rng.permutation`: SplitMix64 keys of (seed, purpose, file, epoch), stable forever.

Distributed: step 3 is per file, so ranks share the files (longest-first) and write per-file arrays
to `DIR/.work`; rank 0 concatenates them into the index files and writes `manifest.json` last.
Index files (numpy `.npy`, memory-mapped by `BlendedDataset`):
- `blend_file.npy`   int32[N]    file of each sample
- `blend_sample.npy` int64[N]    row of that file's sample index
- `doc_order.npy`    int32[...]  per file, its documents in epoch order (file offsets in the manifest)
- `sample_idx.npy`   int64[...,2] per file, (position in doc order, token offset) of each sample start
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agpt import safewrite
from agpt.data import bytecount, mmidx, rng, workdir
from agpt.data import manifest as mf
from agpt.data.dist import Comm, world
from agpt.data.greedy import deficit_with_occurrence
from agpt.data.tokenizer import load as load_tokenizer
from agpt.digest import file_sha256
from agpt.errors import AgptError, BadInput, DataError
from agpt.progress import Progress

WORK = ".work"


@dataclass(kw_only=True, slots=True)
class BlendSettings:
    """Options of `agpt blend`, validated on construction."""

    file_list: str
    seq_len: int
    num_samples: int
    seed: int = 1234
    output: str
    tokenizer: str | None = None
    overwrite: bool = False
    quiet: bool = False

    def __post_init__(self) -> None:
        if self.seq_len < 1:
            raise BadInput(f"--seq-len {self.seq_len}: must be positive")
        if self.num_samples < 1:
            raise BadInput(f"--num-samples {self.num_samples}: must be positive")
        if not 0 <= self.seed < 2**63:
            raise BadInput(f"--seed {self.seed}: must be in 0..2^63-1")


@dataclass(kw_only=True, slots=True)
class Entry:
    """One line of a file list."""

    weight: float
    prefix: str
    corpus: str
    line: int


def parse_file_list(path: str | Path) -> list[Entry]:
    """`WEIGHT PREFIX CORPUS` lines (`#` comments, blank lines ignored); relative prefixes are relative
    to the list's directory. Errors name the file, line and field."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise BadInput(f"--file-list {p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"--file-list {p}: unreadable ({exc})") from None
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3:
            raise BadInput(f"{p}:{n}: expected 'WEIGHT PREFIX CORPUS', got {len(parts)} fields")
        try:
            weight = float(parts[0])
        except ValueError:
            raise BadInput(f"{p}:{n}: weight {parts[0]!r} is not a number") from None
        if not math.isfinite(weight) or weight <= 0:
            raise BadInput(f"{p}:{n}: weight {parts[0]!r} must be a positive finite number")
        prefix = Path(parts[1])
        if not prefix.is_absolute():
            prefix = p.parent / prefix
        prefix_s = str(prefix.resolve())
        if prefix_s in seen:
            raise BadInput(f"{p}:{n}: prefix {parts[1]} already listed on line {seen[prefix_s]}")
        seen[prefix_s] = n
        entries.append(Entry(weight=weight, prefix=prefix_s, corpus=parts[2], line=n))
    if not entries:
        raise BadInput(f"--file-list {p}: no entries")
    try:
        total = math.fsum(e.weight for e in entries)
    except OverflowError:
        total = math.inf
    if not math.isfinite(total):
        raise BadInput(f"--file-list {p}: the weights sum to more than a float holds; scale them down")
    if total / max(e.weight for e in entries) == 0.0 or not all(e.weight / total > 0 for e in entries):
        raise BadInput(f"--file-list {p}: weights span too wide a range (one is 0 next to the total)")
    return entries


def _find_tokenizer(entries: list[Entry], explicit: str | None, file_list: str = "") -> tuple[str, str]:
    """(path, sha256) of the tokenizer: --tokenizer, else the one `agpt tokenize` recorded beside the
    shards (all shards must agree)."""
    found: dict[str, str] = {}
    recorded: dict[Path, dict[str, str] | None] = {}
    for e in entries:
        if not Path(mmidx.idx_path(e.prefix)).is_file():  # before its folder's tokenize.json is looked for
            raise DataError(
                f"{mmidx.idx_path(e.prefix)}: missing (the shard on line {e.line} of --file-list {file_list})"
            )
        meta = Path(e.prefix).parent / "tokenize.json"
        if meta not in recorded:
            try:
                recorded[meta] = json.loads(meta.read_text())["tokenizer"]
            except (OSError, json.JSONDecodeError, KeyError):
                recorded[meta] = None
        tok = recorded[meta]
        if tok is None:
            if explicit:
                continue
            raise BadInput(f"{meta}: no tokenizer recorded for {e.prefix} (pass --tokenizer MODEL)")
        found.setdefault(tok["sha256"], tok["path"])
    if explicit:
        if not Path(explicit).is_file():
            raise BadInput(f"--tokenizer {explicit}: no such file")
        sha = file_sha256(explicit)
        for other, path in found.items():
            if other != sha:
                raise DataError(
                    f"--tokenizer {explicit}: the shards were made with another tokenizer ({path})"
                )
        return str(Path(explicit).resolve()), sha
    if len(found) > 1:
        raise DataError(f"file list mixes shards of {len(found)} different tokenizers")
    sha, path = next(iter(found.items()))
    if not Path(path).is_file():
        raise BadInput(f"tokenizer {path} (recorded by tokenize) is missing: pass --tokenizer")
    if file_sha256(path) != sha:
        raise DataError(f"tokenizer {path}: sha256 differs from the one the shards were made with")
    return path, sha


def _file_index(seed: int, f: int, sizes: np.ndarray, n_samples: int, seq_len: int) -> dict[str, Any]:
    """One file's epochs, doc order, sample starts and shuffled sample order (pure function)."""
    tokens = int(sizes.sum(dtype=np.int64))
    docs = int(sizes.size)
    if n_samples == 0:
        z = np.zeros(0, dtype=np.int64)
        return {"epochs": 0, "doc_order": z.astype(np.int32), "sample_idx": z.reshape(0, 2), "shuffle": z}
    epochs = -(-(n_samples * seq_len + 1) // tokens)
    order = np.concatenate(
        [rng.permutation(rng.stream_key(seed, "docs", f, e), docs) for e in range(epochs)]
    ).astype(np.int32)
    cum = np.zeros(order.size + 1, dtype=np.int64)
    np.cumsum(sizes.astype(np.int64)[order], out=cum[1:])
    n_total = (epochs * tokens - 1) // seq_len
    starts = np.arange(n_total + 1, dtype=np.int64) * seq_len
    pos = np.searchsorted(cum, starts, side="right") - 1
    sample_idx = np.stack([pos, starts - cum[pos]], axis=1).astype(np.int64)
    full = ((epochs - 1) * tokens - 1) // seq_len if epochs > 1 else 0
    shuffle = np.concatenate(
        [
            rng.permutation(rng.stream_key(seed, "samples", f, "full"), full),
            full + rng.permutation(rng.stream_key(seed, "samples", f, "last"), n_total - full),
        ]
    )[:n_samples]
    return {"epochs": epochs, "doc_order": order, "sample_idx": sample_idx, "shuffle": shuffle}


def _work(out: Path, f: int, what: str) -> Path:
    return out / WORK / f"f{f:06d}.{what}.npy"


def _save(path: Path, array: np.ndarray) -> None:
    """PATH replaced by ARRAY (agpt.safewrite: a temporary name of its own, never a link followed)."""
    safewrite.replace_with(path, lambda f: np.save(f, array, allow_pickle=False), sync=False)


COPY_BYTES = 64 << 20  # _concat copies at most this much at a time


def _concat(path: Path, parts: list[Path], dtype: np.dtype, width: int | None) -> dict[str, Any]:
    """Concatenate per-file arrays into one `.npy` (deterministic header) without holding them all."""
    arrays = [np.load(p, mmap_mode="r") for p in parts]
    total = sum(int(a.shape[0]) for a in arrays)
    shape: tuple[int, ...] = (total,) if width is None else (total, width)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    with safewrite.Pending(path) as out:  # a temporary name of its own; a full disk is one line naming PATH
        np.lib.format.write_array_header_1_0(out.file, header)  # the header np.lib.format.open_memmap writes
        for a in arrays:
            rows = max(1, COPY_BYTES // max(1, dtype.itemsize * (width or 1)))
            for at in range(0, int(a.shape[0]), rows):
                out.write(np.ascontiguousarray(a[at : at + rows], dtype=dtype).tobytes())
    return {"bytes": path.stat().st_size}


def _bin_sha256(prefix: str, idx_sha: str, bin_bytes: int) -> str:
    """A shard's `.bin` digest: the one `agpt tokenize` recorded beside it when its record matches this
    shard (same `.idx` digest and `.bin` size), else hashed here."""
    meta = Path(prefix).parent / "tokenize.json"
    try:
        shards = json.loads(meta.read_text()).get("shards", [])
        for rec in shards:
            if (
                isinstance(rec, dict)
                and os.path.abspath(str(rec.get("prefix"))) == os.path.abspath(prefix)
                and rec.get("idx_sha256") == idx_sha
                and rec.get("bin_bytes") == bin_bytes
                and isinstance(rec.get("bin_sha256"), str)
            ):
                return str(rec["bin_sha256"])
    except (OSError, ValueError, AttributeError, RecursionError):
        pass
    return file_sha256(mmidx.bin_path(prefix))


def _inspect_files(entries: list[Entry], comm: Comm) -> list[dict[str, Any]]:
    """Open, check and hash every shard, ranks sharing the work; errors name the shard."""
    mine: dict[int, dict[str, Any]] = {}
    err: BaseException | None = None
    try:
        for i, e in enumerate(entries):
            if i % comm.size != comm.rank:
                continue
            shard = mmidx.Shard(e.prefix)
            if len(shard) == 0:
                raise DataError(f"{mmidx.idx_path(e.prefix)}: shard has no documents")
            idx_sha = file_sha256(mmidx.idx_path(e.prefix))
            bin_bytes = mmidx.bin_path(e.prefix).stat().st_size
            mine[i] = {
                "idx_sha256": idx_sha,
                "bin_bytes": bin_bytes,
                "bin_sha256": _bin_sha256(e.prefix, idx_sha, bin_bytes),
                "docs": len(shard),
                "tokens": int(shard.index.sizes.sum(dtype=np.int64)),
                "dtype": shard.dtype.name,
            }
    except AgptError as exc:
        err = exc
    err = comm.first_error(err)
    if err is not None:
        raise err
    merged: dict[int, dict[str, Any]] = {}
    for part in comm.allgather(mine):
        merged.update(part)
    return [merged[i] for i in range(len(entries))]


def plan(entries: list[Entry], num_samples: int) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(corpora, file of each position, its occurrence in that file, corpus weights): corpus first,
    then files within the corpus; O(N) numpy after the two sequential deficit passes."""
    corpora: list[str] = []
    for e in entries:
        if e.corpus not in corpora:
            corpora.append(e.corpus)
    cw = np.array([sum(e.weight for e in entries if e.corpus == c) for c in corpora], dtype=np.float64)
    cw_norm = cw / cw.sum()
    corpus_seq, corpus_occ = deficit_with_occurrence(cw_norm, num_samples)
    n_c = np.bincount(corpus_seq, minlength=len(corpora))
    files_by_pick: list[np.ndarray] = []
    occ_by_pick: list[np.ndarray] = []
    for k, c in enumerate(corpora):
        members = np.asarray([i for i, e in enumerate(entries) if e.corpus == c], dtype=np.int32)
        fw = np.array([entries[i].weight for i in members], dtype=np.float64)
        choice, occ = deficit_with_occurrence(fw / fw.sum(), int(n_c[k]))
        files_by_pick.append(members[choice])
        occ_by_pick.append(occ)
    offsets = np.zeros(len(corpora), dtype=np.int64)
    np.cumsum(n_c[:-1], out=offsets[1:])
    # The r-th pick of corpus k is served by the r-th entry of that corpus' file sequence.
    at = offsets[corpus_seq] + corpus_occ
    file_of = np.concatenate(files_by_pick)[at].astype(np.int32)
    file_occ = np.concatenate(occ_by_pick)[at]
    return corpora, file_of, file_occ, cw_norm


def build(s: BlendSettings, comm: Comm | None = None) -> dict[str, Any]:
    """Build the blend, rank 0 holding --output's lock (agpt.data.workdir.lock): two runs on one
    --output are refused, not raced."""
    return workdir.locked_run(Path(s.output).resolve(), "agpt blend", lambda take: _build(s, comm, take))


def _build(s: BlendSettings, comm: Comm | None, take_lock: Callable[[], None]) -> dict[str, Any]:
    """Build the blend into `s.output`; every rank calls this; rank 0 returns the report."""
    comm = comm or world()
    t0 = time.monotonic()
    out = Path(s.output).resolve()
    entries = parse_file_list(s.file_list)
    tok = comm.on_root(lambda: _find_tokenizer(entries, s.tokenizer, str(s.file_list)))

    def say(msg: str) -> None:
        """Plain stage lines on stderr (rank 0): a blend of millions of samples takes a while."""
        if comm.rank == 0 and not s.quiet:
            print(f"blend: {msg} ({time.monotonic() - t0:.1f}s)", file=sys.stderr, flush=True)

    say(f"checking {len(entries)} shards on {comm.size} rank(s)")
    files = _checked_files(entries, comm)
    key = mf.cache_key(
        tokenizer_sha256=tok[1], files=files, seq_len=s.seq_len, num_samples=s.num_samples, seed=s.seed
    )
    if comm.on_root(lambda: _prepare(out, key, s.overwrite, take_lock)) == "done":
        if comm.rank != 0:
            return {}
        done = mf.load(out)
        done["up_to_date"] = True
        return done
    picks = Picks()
    if comm.rank == 0:
        say("shards ok; choosing corpus then file for each sample")
        picks = Picks(*plan(entries, s.num_samples))
        say("per-file sample indices")
    counts: list[int] = comm.bcast(np.bincount(picks.file_of, minlength=len(files)).tolist())
    epochs = _file_indices(s, comm, out, files, counts)
    report: dict[str, Any] = {}
    if comm.rank == 0:
        say("writing index files and manifest")
        report = _write(s, out, key, tok, files, counts, epochs, picks, t0)
    comm.barrier()
    return report


@dataclass(slots=True)
class Picks:
    """Rank 0's plan (`plan`): the corpora, then for each sample its file and that file's use count."""

    corpora: list[str] = field(default_factory=list)
    file_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    file_occ: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the corpora's normalised weights


def _checked_files(entries: list[Entry], comm: Comm) -> list[dict[str, Any]]:
    """The file list's shards with what their indices say (docs, tokens, dtype): one tokenizer's dtype."""
    infos = _inspect_files(entries, comm)
    dtypes = {i["dtype"] for i in infos}
    if len(dtypes) > 1:
        raise DataError(f"file list mixes token dtypes {sorted(dtypes)} (shards of different tokenizers?)")
    return [
        {"prefix": e.prefix, "corpus": e.corpus, "weight": e.weight, "line": e.line, **info}
        for e, info in zip(entries, infos, strict=True)
    ]


def _file_indices(s: BlendSettings, comm: Comm, out: Path, files: list[dict[str, Any]],
                  counts: list[int]) -> dict[int, int]:  # fmt: skip
    """Each file's document order, sample index and shuffle in the work folder, the files shared across the
    ranks (largest first); file -> the epochs it needs."""
    from agpt.data.tokenize import _assign

    owner = _assign([int(f["docs"]) * max(1, c) for f, c in zip(files, counts, strict=True)], comm.size)
    epochs_mine: dict[int, int] = {}
    mine = [f for f in range(len(files)) if owner[f] == comm.rank]
    with Progress(len(mine), "blend: per-file indices", unit="files", quiet=s.quiet or comm.rank != 0) as bar:
        for f in mine:
            sizes = np.asarray(mmidx.Index(files[f]["prefix"]).sizes, dtype=np.int64)
            res = _file_index(s.seed, f, sizes, counts[f], s.seq_len)
            for what in ("doc_order", "sample_idx", "shuffle"):
                _save(_work(out, f, what), res[what])
            epochs_mine[f] = res["epochs"]
            bar.update()
    epochs: dict[int, int] = {}
    for part in comm.allgather(epochs_mine):
        epochs.update(part)
    comm.barrier()
    return epochs


def _prepare(out: Path, key: str, overwrite: bool, take_lock: Callable[[], None]) -> str:
    """Rank 0: 'done' when `out` already holds this exact blend; refuse to clobber another one."""
    take_lock()  # --output is this run's from here (agpt.data.workdir.lock)
    workdir.ensure_output(out)
    if (out / mf.MANIFEST).exists():
        try:
            old = mf.load(out)
        except DataError:
            old = {}
        if old.get("cache_key") == key and mf.first_mismatch(out, old, "idx") is None:
            if all("bytes_per_token" in c for c in old.get("corpora") or [{}]):
                return "done"
            # else made before bytes per token were pinned: the same blend is made again, with them
        elif not overwrite:
            raise BadInput(
                f"--output {out}: holds another blend (cache key {str(old.get('cache_key'))[:12]}...); "
                "pass --overwrite or use a new dir"
            )
        (out / mf.MANIFEST).unlink()
    workdir.ensure_output(out)
    work = workdir.claim(out, "agpt blend")
    shutil.rmtree(work, ignore_errors=True)
    workdir.make(work, "agpt blend")
    return "run"


def _write_indices(out: Path, files: list[dict[str, Any]], counts: list[int], epochs: dict[int, int],
                   picks: Picks) -> dict[str, Any]:  # fmt: skip
    """The per-file arrays concatenated, each sample mapped to its file's sample row; FILES gain their offsets.
    Returns the index files' records (bytes, sha256) for the manifest."""
    nf = len(files)
    # The j-th use of file f takes the j-th sample of f's shuffled order.
    shuffles = [np.load(_work(out, f, "shuffle")) for f in range(nf)]
    shuffle_off = np.zeros(nf, dtype=np.int64)
    np.cumsum([a.size for a in shuffles[:-1]], out=shuffle_off[1:])
    blend_sample = np.concatenate(shuffles).astype(np.int64)[shuffle_off[picks.file_of] + picks.file_occ]
    del shuffles
    doc_off = sample_off = 0
    for f in range(nf):
        n_doc = int(np.load(_work(out, f, "doc_order"), mmap_mode="r").shape[0])
        n_smp = int(np.load(_work(out, f, "sample_idx"), mmap_mode="r").shape[0])
        files[f].update(
            prefix_rel=os.path.relpath(files[f]["prefix"], out),
            samples=counts[f],
            epochs=epochs[f],
            doc_order_offset=doc_off,
            doc_order_count=n_doc,
            sample_idx_offset=sample_off,
            sample_idx_count=n_smp,
        )
        doc_off += n_doc
        sample_off += n_smp
    index: dict[str, Any] = {}
    for name, arr in (("blend_file.npy", picks.file_of.astype(np.int32)), ("blend_sample.npy", blend_sample)):
        _save(out / name, arr)
        index[name] = {"bytes": (out / name).stat().st_size}
    index["doc_order.npy"] = _concat(
        out / "doc_order.npy", [_work(out, f, "doc_order") for f in range(nf)], np.dtype(np.int32), None
    )
    index["sample_idx.npy"] = _concat(
        out / "sample_idx.npy", [_work(out, f, "sample_idx") for f in range(nf)], np.dtype(np.int64), 2
    )
    for name in index:
        index[name]["sha256"] = file_sha256(out / name)
    return index


def _corpus_rows(s: BlendSettings, files: list[dict[str, Any]], counts: list[int], epochs: dict[int, int],
                 picks: Picks, sp: Any) -> list[dict[str, Any]]:  # fmt: skip
    """Per corpus: the weight asked for and the one the samples give, samples, tokens, epochs and bytes per
    token (tokenizer SP)."""
    nf = len(files)
    per_byte = bytecount.count(files, picks.corpora, sp)  # pinned here: bits per byte of the held-out loss
    corpus_rows = []
    for k, c in enumerate(picks.corpora):
        members = [f for f in range(nf) if files[f]["corpus"] == c]
        n_c = sum(counts[f] for f in members)
        tokens = sum(int(files[f]["tokens"]) for f in members)
        corpus_rows.append(
            {
                "name": c,
                "weight_requested": float(picks.weights[k]),
                "weight_effective": n_c / s.num_samples,
                "samples": n_c,
                "tokens": tokens,
                "epochs": n_c * s.seq_len / max(tokens, 1),
                "max_file_epochs": max((epochs[f] for f in members), default=0),
                "bytes_per_token": per_byte[c],
            }
        )
    return corpus_rows


def _write(
    s: BlendSettings,
    out: Path,
    key: str,
    tok: tuple[str, str],
    files: list[dict[str, Any]],
    counts: list[int],
    epochs: dict[int, int],
    picks: Picks,
    t0: float,
) -> dict[str, Any]:
    """Rank 0: the index files, then the manifest that pins them (written last), then the work folder goes."""
    index = _write_indices(out, files, counts, epochs, picks)
    sp = load_tokenizer(tok[0])
    corpus_rows = _corpus_rows(s, files, counts, epochs, picks, sp)
    manifest = {
        "format": mf.FORMAT,
        "cache_key": key,
        "tokenizer": {
            "path": tok[0],
            "path_rel": os.path.relpath(tok[0], out),
            "sha256": tok[1],
            "vocab_size": sp.GetPieceSize(),
            "eod_id": sp.eos_id(),
        },
        "dtype": files[0]["dtype"],
        "seq_len": s.seq_len,
        "num_samples": s.num_samples,
        "seed": s.seed,
        "shuffle": "splitmix64 counter keys, stable argsort (agpt.data.rng)",
        "file_list": {"path": str(Path(s.file_list).resolve()), "sha256": file_sha256(s.file_list)},
        "corpora": corpus_rows,
        "files": [{k: v for k, v in f.items() if k != "dtype"} for f in files],
        "index_files": index,
    }
    safewrite.replace(out / mf.MANIFEST, json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(out / WORK, ignore_errors=True)
    manifest["up_to_date"] = False
    manifest["seconds"] = round(time.monotonic() - t0, 3)
    return manifest
