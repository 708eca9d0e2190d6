"""`DIR/manifest.json` of a blend: what it was built from, pinned by content, and how to check it.

The manifest pins the tokenizer's sha256, each shard's `.idx` sha256 and `.bin` size, the file list
(weights, corpora), seed, sequence length, sample count, and the sha256 and size of every index file
the blend wrote. The cache key is the sha256 of the canonical JSON of the *inputs* only (content
hashes, weights, seed, lengths: not paths), so moving the data keeps the key while changing any byte
of a shard, a weight or the tokenizer changes it.

Verification levels (each includes the previous):
- `sizes`: every file exists with the recorded size (cheap: for ranks other than the first).
- `idx`: plus each shard's `.idx` sha256 (a re-tokenized shard is caught).
- `full`: plus the tokenizer's and every index file's sha256, each shard's `.bin` sha256 (a same-size
  change is caught), and the file list's when it still exists at its recorded path (an edited weight is
  named) (`agpt data verify`).  A manifest from before `.bin` digests were pinned stays readable: its
  `.bin` files are checked by size and `agpt data verify` says how many were not pinned.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

from agpt.data import mmidx
from agpt.digest import file_sha256
from agpt.errors import BadInput, DataError

FORMAT = "agpt-blend-1"
MANIFEST = "manifest.json"
INDEX_FILES = ("blend_file.npy", "blend_sample.npy", "doc_order.npy", "sample_idx.npy")
LEVELS = ("sizes", "idx", "full")


def cache_key(
    *, tokenizer_sha256: str, files: list[dict[str, Any]], seq_len: int, num_samples: int, seed: int
) -> str:
    """sha256 of everything the index bytes depend on, by content."""
    inputs = {
        "format": FORMAT,
        "tokenizer_sha256": tokenizer_sha256,
        "files": [{k: f[k] for k in ("idx_sha256", "bin_bytes", "weight", "corpus")} for f in files],
        "seq_len": seq_len,
        "num_samples": num_samples,
        "seed": seed,
    }
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def load(directory: str | Path) -> dict[str, Any]:
    """The manifest, checked for shape: every field verification reads has the type it needs."""
    path = Path(directory) / MANIFEST
    try:
        manifest = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise DataError(f"{path}: missing (not a blend built by `agpt blend`)") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory") from None
    except OSError as exc:
        raise DataError(f"{path}: unreadable ({exc.strerror})") from None
    except (ValueError, RecursionError) as exc:
        why = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise DataError(f"{path}: not JSON ({why})") from None
    if not isinstance(manifest, dict):
        raise DataError(f"{path}: must be a JSON object, not {type(manifest).__name__}")
    if manifest.get("format") != FORMAT:
        raise DataError(f"{path}: field 'format' is {_short(manifest.get('format'))}, expected {FORMAT!r}")
    _check_shape(path, manifest)
    return manifest


def _short(value: Any) -> str:
    text = ascii(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_shape(path: Path, m: dict[str, Any]) -> None:
    """Refuse a manifest whose fields do not have the types verification and loading rely on."""

    def need(ok: bool, field: str, what: str) -> None:
        if not ok:
            raise DataError(f"{path}: field {field!r} must be {what}")

    def is_int(v: Any) -> bool:
        return type(v) is int and v >= 0

    def is_num(v: Any) -> bool:
        return type(v) in (int, float) and math.isfinite(v) and v >= 0

    tok: Any = m.get("tokenizer")
    need(isinstance(tok, dict) and isinstance(tok.get("sha256"), str), "tokenizer", "an object with sha256")
    need(isinstance(tok.get("path"), str), "tokenizer.path", "a string")
    need(isinstance(m.get("file_list", {}), dict), "file_list", "an object")
    files: Any = m.get("files")
    need(isinstance(files, list) and len(files) > 0, "files", "a non-empty list")
    for i, f in enumerate(files):
        where = f"files[{i}]"
        need(isinstance(f, dict), where, "an object")
        need(isinstance(f.get("prefix"), str), f"{where}.prefix", "a string")
        need(
            f.get("prefix_rel") is None or isinstance(f.get("prefix_rel"), str),
            f"{where}.prefix_rel",
            "a string",
        )
        need(is_int(f.get("bin_bytes")), f"{where}.bin_bytes", "a whole number >= 0")
        need(isinstance(f.get("idx_sha256"), str), f"{where}.idx_sha256", "a string")
        need(
            f.get("bin_sha256") is None or isinstance(f.get("bin_sha256"), str),
            f"{where}.bin_sha256",
            "a string",
        )
    index: Any = m.get("index_files")
    need(isinstance(index, dict), "index_files", "an object")
    for name, rec in index.items():
        need(name in INDEX_FILES, f"index_files.{name}", f"one of {', '.join(INDEX_FILES)}")
        need(
            isinstance(rec, dict) and is_int(rec.get("bytes")), f"index_files.{name}.bytes", "a whole number"
        )
        need(isinstance(rec.get("sha256"), str), f"index_files.{name}.sha256", "a string")
    # The fields `agpt data inspect` (agpt.data.report) reads: when present, of the type every reader needs (a
    # hand-made manifest may leave them out; inspect then shows them as unknown).
    for key in ("num_samples", "seq_len", "seed"):
        if key in m:
            need(is_int(m[key]), key, "a whole number >= 0")
    for key in ("cache_key", "dtype"):
        if key in m:
            need(isinstance(m[key], str), key, "a string")
    for i, f in enumerate(files):
        if "corpus" in f:
            need(isinstance(f["corpus"], str), f"files[{i}].corpus", "a string")
        for k in ("docs", "tokens", "samples"):
            if k in f:
                need(is_int(f[k]), f"files[{i}].{k}", "a whole number >= 0")
        for k in ("weight", "epochs"):
            if k in f:
                need(is_num(f[k]), f"files[{i}].{k}", "a finite number >= 0")
    corpora: Any = m.get("corpora", [])
    need(isinstance(corpora, list), "corpora", "a list")
    for i, c in enumerate(corpora):
        need(isinstance(c, dict) and isinstance(c.get("name"), str), f"corpora[{i}].name", "a string")
        for k in ("samples", "tokens"):
            need(is_int(c.get(k)), f"corpora[{i}].{k}", "a whole number >= 0")
        for k in ("weight_requested", "weight_effective", "epochs"):
            need(is_num(c.get(k)), f"corpora[{i}].{k}", "a finite number >= 0")


def unpinned_bins(manifest: dict[str, Any]) -> int:
    """How many shards have no `.bin` digest pinned (a manifest from before digests were recorded)."""
    return sum(1 for f in manifest["files"] if not f.get("bin_sha256"))


def shard_prefix(directory: str | Path, f: dict[str, Any]) -> str:
    """Where a pinned shard is now: beside the blend at its recorded relative path when that exists
    (blend and shards copied together, e.g. staged to node-local disk), else its absolute path.
    Either way its content is what the manifest pins, so a move never changes what is read."""
    rel = f.get("prefix_rel")
    if rel:
        moved = os.path.normpath(Path(directory) / rel)
        if mmidx.idx_path(moved).exists():
            return moved
    return str(f["prefix"])


def tokenizer_path(directory: str | Path, tok: dict[str, Any]) -> Path:
    """The pinned tokenizer, found the same way as the shards."""
    rel = tok.get("path_rel")
    if rel and (Path(directory) / rel).is_file():
        return Path(os.path.normpath(Path(directory) / rel))
    return Path(tok["path"])


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def first_mismatch(
    directory: str | Path, manifest: dict[str, Any], level: str = "full", tokenizer: str | None = None
) -> str | None:
    """The first thing that does not match the manifest, as one line; None when all match."""
    if level not in LEVELS:
        raise BadInput(f"verify level {level!r}: use one of {', '.join(LEVELS)}")
    d = Path(directory)
    deep = LEVELS.index(level)
    tok = manifest["tokenizer"]
    tok_path = Path(tokenizer) if tokenizer else tokenizer_path(d, tok)
    if tokenizer is not None or deep >= 2:
        if not tok_path.is_file():
            return f"tokenizer {tok_path}: missing (manifest pins sha256 {tok['sha256'][:16]}...)"
        got = file_sha256(tok_path)
        if got != tok["sha256"]:
            return f"tokenizer {tok_path}: sha256 {got[:16]}... differs from the manifest's {tok['sha256'][:16]}..."
    lst = manifest.get("file_list", {})
    list_path = Path(lst["path"]) if lst.get("path") else None
    if (
        deep >= 2
        and list_path is not None
        and list_path.is_file()
        and file_sha256(list_path) != lst["sha256"]
    ):
        return f"file list {lst['path']}: changed since this blend (weights or shards differ)"
    for f in manifest["files"]:
        prefix = shard_prefix(d, f)
        ip, bp = mmidx.idx_path(prefix), mmidx.bin_path(prefix)
        size = _size(bp)
        if size is None:
            return f"shard {bp}: missing"
        if size != f["bin_bytes"]:
            return f"shard {bp}: {size} bytes, manifest says {f['bin_bytes']}"
        if _size(ip) is None:
            return f"shard {ip}: missing"
        if deep >= 1:
            got = file_sha256(ip)
            if got != f["idx_sha256"]:
                return (
                    f"shard {ip}: sha256 {got[:16]}... differs from the manifest's {f['idx_sha256'][:16]}..."
                )
        if deep >= 2 and f.get("bin_sha256"):
            got = file_sha256(bp)
            if got != f["bin_sha256"]:
                return (
                    f"shard {bp}: sha256 {got[:16]}... differs from the manifest's {f['bin_sha256'][:16]}... "
                    "(same size, different bytes)"
                )
    for name, rec in manifest["index_files"].items():
        p = d / name
        size = _size(p)
        if size is None:
            return f"index {p}: missing"
        if size != rec["bytes"]:
            return f"index {p}: {size} bytes, manifest says {rec['bytes']}"
        if deep >= 2 and file_sha256(p) != rec["sha256"]:
            return f"index {p}: sha256 differs from the manifest"
    return None


def verify(directory: str | Path, level: str = "full", tokenizer: str | None = None) -> dict[str, Any]:
    """Load and check a blend's manifest; DataError (exit 2) naming the first mismatch."""
    manifest = load(directory)
    problem = first_mismatch(directory, manifest, level, tokenizer)
    if problem:
        raise DataError(f"{Path(directory) / MANIFEST}: {problem}")
    return manifest
