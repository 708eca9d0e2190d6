"""Megatron `MMIDIDX` version 1 token shards: a `.bin` of tokens and an `.idx` that locates each document.

Layout of `PREFIX.idx` (little endian), as Megatron-LM's `IndexedDataset` reads it::

    9 bytes   magic b"MMIDIDX\\x00\\x00"
    u64       version (1)
    u8        dtype code (8 = uint16, 4 = int32)
    u64       sequence count S
    u64       document count D (= S + 1 here: every sequence is one document)
    int32[S]  sizes: tokens per sequence, the EOD token included
    int64[S]  pointers: byte offset of each sequence in `.bin`
    int64[D]  document index: 0, 1, ..., S

The EOD is counted in the size (a reader that trusted sizes without it would read every later
document shifted), so `pointers[-1] + sizes[-1] * itemsize == size of .bin` for a valid shard; the
reader checks that on open and names the file when it does not hold.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from agpt import safewrite
from agpt.errors import DataError

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_BYTES = len(MAGIC) + 8 + 1 + 8 + 8  # 34
DTYPE_CODES: dict[int, type[np.generic]] = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}
CODE_OF = {np.dtype(v): k for k, v in DTYPE_CODES.items()}
UINT16_VOCAB_LIMIT = 65500


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 below a 65,500 vocabulary (Megatron's rule), int32 above."""
    return np.dtype(np.uint16) if vocab_size < UINT16_VOCAB_LIMIT else np.dtype(np.int32)


def idx_path(prefix: str | Path) -> Path:
    return Path(f"{prefix}.idx")


def bin_path(prefix: str | Path) -> Path:
    return Path(f"{prefix}.bin")


def encode_index(sizes: np.ndarray, dtype: np.dtype) -> bytes:
    """The complete `.idx` bytes for documents of `sizes` tokens stored as `dtype`."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.size and (sizes.min() < 1 or sizes.max() > np.iinfo(np.int32).max):
        raise DataError("a document has a length outside 1..2^31-1 tokens")
    count = int(sizes.size)
    pointers = np.zeros(count, dtype=np.int64)
    if count > 1:
        np.cumsum(sizes[:-1] * np.dtype(dtype).itemsize, out=pointers[1:])
    head = MAGIC + struct.pack("<Q", VERSION) + struct.pack("<B", CODE_OF[np.dtype(dtype)])
    head += struct.pack("<Q", count) + struct.pack("<Q", count + 1)
    return b"".join(
        [
            head,
            sizes.astype("<i4").tobytes(),
            pointers.astype("<i8").tobytes(),
            np.arange(count + 1, dtype="<i8").tobytes(),
        ]
    )


def _fsync_dir(path: Path) -> None:
    """Make renames in `path` durable (best effort: some parallel filesystems refuse a dir fsync)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class ShardWriter:
    """Write one shard: tokens stream into a temporary file beside `PREFIX.bin` (agpt.safewrite.Pending: a name
    made exclusively, never a link followed); `close()` renames it, then writes the index the same way.

    `.bin` is renamed before `.idx`, so an `.idx` on disk means a complete shard: a crash leaves only
    temporary files (or a `.bin` without `.idx`), which a re-run ignores and rewrites.  A full disk is one
    line naming the file (WriteError).
    """

    def __init__(self, prefix: str | Path, dtype: np.dtype) -> None:
        self.prefix = Path(prefix)
        self.dtype = np.dtype(dtype)
        self._bin = safewrite.Pending(bin_path(self.prefix))
        self._sizes: list[np.ndarray] = []
        self.tokens = 0

    def add_documents(self, tokens: np.ndarray, sizes: np.ndarray) -> None:
        """Append documents given as one flat token array and their lengths (EOD included)."""
        tokens = np.ascontiguousarray(tokens, dtype=self.dtype)
        if int(np.sum(sizes, dtype=np.int64)) != tokens.size:
            raise DataError(f"{self.prefix}: sizes do not add up to the token count")
        self._bin.write(tokens.tobytes())
        self._sizes.append(np.asarray(sizes, dtype=np.int64))
        self.tokens += int(tokens.size)

    def write_raw(self, data: bytes | memoryview) -> None:
        """Append already-encoded token bytes (their sizes are given later with `add_sizes`)."""
        self._bin.write(data)

    def add_sizes(self, sizes: np.ndarray) -> None:
        self._sizes.append(np.asarray(sizes, dtype=np.int64))
        self.tokens += int(np.sum(sizes, dtype=np.int64))

    def close(self) -> None:
        sizes = np.concatenate(self._sizes) if self._sizes else np.zeros(0, dtype=np.int64)
        if self._bin.size() != int(sizes.sum()) * self.dtype.itemsize:
            self._bin.abort()
            raise DataError(f"{self.prefix}.bin: size does not match its documents")
        self._bin.commit()
        safewrite.replace(idx_path(self.prefix), encode_index(sizes, self.dtype))
        _fsync_dir(self.prefix.parent)

    def abort(self) -> None:
        self._bin.abort()


class Index:
    """A parsed `.idx`: sizes, pointers and the token dtype, memory-mapped; validated on open."""

    def __init__(self, prefix: str | Path) -> None:
        self.prefix = Path(prefix)
        path = idx_path(prefix)
        try:
            file_size = path.stat().st_size
            with open(path, "rb") as fh:
                head = fh.read(HEADER_BYTES)
        except FileNotFoundError:
            raise DataError(f"{path}: missing index file") from None
        except OSError as exc:
            raise DataError(f"{path}: cannot read ({exc.strerror})") from None
        if len(head) < HEADER_BYTES:
            raise DataError(f"{path}: truncated index header ({len(head)} of {HEADER_BYTES} bytes)")
        if head[:9] != MAGIC:
            raise DataError(f"{path}: not an MMIDIDX index (bad magic)")
        (version,) = struct.unpack("<Q", head[9:17])
        if version != VERSION:
            raise DataError(f"{path}: unsupported MMIDIDX version {version} (expected 1)")
        code = head[17]
        if code not in DTYPE_CODES:
            raise DataError(f"{path}: unknown dtype code {code}")
        self.dtype = np.dtype(DTYPE_CODES[code])
        count, docs = struct.unpack("<QQ", head[18:34])
        expected = HEADER_BYTES + count * 4 + count * 8 + docs * 8
        if file_size != expected:
            raise DataError(f"{path}: truncated or corrupt index ({file_size} bytes, header says {expected})")
        self.count = int(count)
        mm = np.memmap(path, dtype=np.uint8, mode="r") if file_size else np.zeros(0, np.uint8)
        off = HEADER_BYTES
        self.sizes = mm[off : off + 4 * count].view("<i4")
        off += 4 * count
        self.pointers = mm[off : off + 8 * count].view("<i8")
        off += 8 * count
        self.doc_idx = mm[off : off + 8 * docs].view("<i8")
        self.itemsize = self.dtype.itemsize

    @property
    def bin_bytes(self) -> int:
        """The `.bin` size these sizes and pointers imply."""
        if self.count == 0:
            return 0
        return int(self.pointers[-1]) + int(self.sizes[-1]) * self.itemsize

    def check(self) -> None:
        """Sizes positive and pointers contiguous: a shifted `.idx` is caught here, not in training."""
        path = idx_path(self.prefix)
        if self.count == 0:
            return
        sizes = np.asarray(self.sizes, dtype=np.int64)
        if sizes.min() < 1:
            raise DataError(f"{path}: document {int(np.argmin(sizes))} has length {int(sizes.min())}")
        expect = np.zeros(self.count, dtype=np.int64)
        np.cumsum(sizes[:-1] * self.itemsize, out=expect[1:])
        bad = np.flatnonzero(expect != self.pointers)
        if bad.size:
            raise DataError(f"{path}: pointer of document {int(bad[0])} does not follow the sizes")


class Shard:
    """Read a `.bin`/`.idx` pair by memory map: `shard[i]` is document i, `get(i, off, n)` a slice."""

    def __init__(self, prefix: str | Path, check: bool = True) -> None:
        self.prefix = Path(prefix)
        self.index = Index(prefix)
        if check:
            self.index.check()
        bpath = bin_path(prefix)
        try:
            size = bpath.stat().st_size
        except FileNotFoundError:
            raise DataError(f"{bpath}: missing token file") from None
        if size != self.index.bin_bytes:
            raise DataError(f"{bpath}: {size} bytes, but its index describes {self.index.bin_bytes}")
        self.dtype = self.index.dtype
        self.tokens = np.memmap(bpath, dtype=self.dtype, mode="r") if size else np.zeros(0, dtype=self.dtype)

    def __len__(self) -> int:
        return self.index.count

    def __getitem__(self, i: int) -> np.ndarray:
        return self.get(i)

    def get(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        start = int(self.index.pointers[i]) // self.index.itemsize + offset
        n = int(self.index.sizes[i]) - offset if length is None else length
        return self.tokens[start : start + n]
