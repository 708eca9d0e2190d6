"""`DIR/manifest.json` of a blend: what it was built from, pinned by content, and how to check it.

The manifest pins the tokenizer's sha256, each shard's `.idx` sha256 and `.bin` size, the file list
(weights, corpora), seed, sequence length, sample count, and the sha256 and size of every index file
the blend wrote. The cache key is the sha256 of the canonical JSON of the *inputs* only (content
hashes, weights, seed, lengths: not paths), so moving the data keeps the key while changing any byte
of a shard, a weight or the tokenizer changes it.

Verification levels (each includes the previous):
- `sizes`: every file exists with the recorded size (cheap: for ranks other than the first).
- `idx`: plus each shard's `.idx` sha256 (a re-tokenized shard is caught).
- `full`: plus the tokenizer's and every index file's sha256, and the file list's when it still
  exists at its recorded path (an edited weight is named) (`agpt data verify`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from agpt.data import mmidx
from agpt.data.tokenizer import sha256_file
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
    path = Path(directory) / MANIFEST
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: missing (not a blend built by `agpt blend`)") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: unreadable ({exc})") from None
    if manifest.get("format") != FORMAT:
        raise DataError(f"{path}: field 'format' is {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest


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
        got = sha256_file(tok_path)
        if got != tok["sha256"]:
            return f"tokenizer {tok_path}: sha256 {got[:16]}... differs from the manifest's {tok['sha256'][:16]}..."
    lst = manifest.get("file_list", {})
    list_path = Path(lst["path"]) if lst.get("path") else None
    if (
        deep >= 2
        and list_path is not None
        and list_path.is_file()
        and sha256_file(list_path) != lst["sha256"]
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
            got = sha256_file(ip)
            if got != f["idx_sha256"]:
                return (
                    f"shard {ip}: sha256 {got[:16]}... differs from the manifest's {f['idx_sha256'][:16]}..."
                )
    for name, rec in manifest["index_files"].items():
        p = d / name
        size = _size(p)
        if size is None:
            return f"index {p}: missing"
        if size != rec["bytes"]:
            return f"index {p}: {size} bytes, manifest says {rec['bytes']}"
        if deep >= 2 and sha256_file(p) != rec["sha256"]:
            return f"index {p}: sha256 differs from the manifest"
    return None


def verify(directory: str | Path, level: str = "full", tokenizer: str | None = None) -> dict[str, Any]:
    """Load and check a blend's manifest; DataError (exit 2) naming the first mismatch."""
    manifest = load(directory)
    problem = first_mismatch(directory, manifest, level, tokenizer)
    if problem:
        raise DataError(f"{Path(directory) / MANIFEST}: {problem}")
    return manifest
