"""Input formats for `agpt tokenize`, and how a large input is cut into chunks that workers share.

A chunk is a byte range of a plain `.txt`/`.jsonl` file (one large sequential read each), a whole
compressed file (`.gz`, `.zst`: a stream cannot be entered in the middle), a whole JSON array, or one
parquet row group. Chunk boundaries depend only on the file and `chunk_bytes`, never on the number of
workers or ranks, so the document sequence, and therefore the shards, are the same for any split:

- `.jsonl`: a chunk owns the lines that start inside its range.
- `.txt`: a document is a maximal run of non-blank lines (blank = only spaces/tabs/CR); a boundary is
  placed just after the first blank line at or after the nominal offset, so no document is cut.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from agpt.errors import BadInput, DataError

TEXT_SUFFIXES = (".txt", ".text", ".md")
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSED = (".gz", ".zst")
_BLANK_AFTER = re.compile(rb"\n[ \t\r\f\v]*\n")
_SPLIT = re.compile(r"\n(?:[ \t\r\f\v]*\n)+")
_LEAD = re.compile(r"^(?:[ \t\r\f\v]*\n)+")
_TRAIL = re.compile(r"(?:\n[ \t\r\f\v]*)+$")


@dataclass(kw_only=True, slots=True, frozen=True)
class Chunk:
    """One unit of work: `kind` is txt, txt-file, jsonl, json-array or parquet."""

    path: str
    kind: str
    start: int = 0
    end: int = -1
    compression: str = ""
    row_group: int = -1
    nbytes: int = 0

    def where(self, loc: int) -> str:
        """`file:line` (or row/element) of a document, for one-line error messages."""
        if self.kind == "jsonl":
            return f"{self.path}:{self._line_before() + loc}"
        if self.kind == "json-array":
            return f"{self.path}: element {loc}"
        if self.kind == "parquet":
            return f"{self.path}: row group {self.row_group}, row {loc}"
        return self.path

    def _line_before(self) -> int:
        """Lines before this chunk (counted only when an error needs the number)."""
        if self.start == 0 or self.compression:
            return 0
        count = 0
        with open(self.path, "rb") as fh:
            left = self.start
            while left > 0:
                block = fh.read(min(left, 1 << 24))
                if not block:
                    break
                count += block.count(b"\n")
                left -= len(block)
        return count


def input_kind(path: Path, doc_per_file: bool, any_text: bool = False) -> tuple[str, str]:
    """(kind, compression) from the file name; unknown suffixes are a usage error naming the file."""
    name = path.name.lower()
    comp = ""
    for c in COMPRESSED:
        if name.endswith(c):
            comp = c[1:]
            name = name[: -len(c)]
    if name.endswith(".parquet"):
        if comp:
            raise BadInput(f"{path}: compressed parquet is not supported (parquet compresses itself)")
        return "parquet", ""
    if name.endswith(JSON_SUFFIXES):
        if name.endswith(".json") and not comp and _first_byte(path) == b"[":
            return "json-array", ""
        return "jsonl", comp
    if name.endswith(TEXT_SUFFIXES):
        return ("txt-file" if doc_per_file else "txt"), comp
    if any_text:
        return ("txt-file" if doc_per_file else "txt"), comp
    raise BadInput(f"{path}: unknown input type (use .txt, .jsonl, .json, .parquet, optionally .gz/.zst)")


def _first_byte(path: Path) -> bytes:
    with open(path, "rb") as fh:
        while True:
            block = fh.read(4096)
            if not block:
                return b""
            stripped = block.lstrip()
            if stripped:
                return stripped[:1]


def expand_inputs(inputs: list[str]) -> list[Path]:
    """Files in the order given; a directory contributes its files (recursively, hidden ones skipped)
    in sorted order, so the document order never depends on the filesystem's listing order."""
    files: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            files.extend(
                sorted(
                    f
                    for f in p.rglob("*")
                    if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts)
                )
            )
        elif p.is_file():
            files.append(p)
        else:
            raise BadInput(f"--input {item}: no such file or directory")
    if not files:
        raise BadInput("--input: no input files")
    return files


def _txt_boundary(fh: IO[bytes], t: int, size: int) -> int:
    """The first offset >= t that follows a blank line (or the end of the file)."""
    window = 1 << 20
    while True:
        fh.seek(t)
        data = fh.read(window)
        m = _BLANK_AFTER.search(data)
        if m:
            return t + m.end()
        if t + len(data) >= size:
            return size
        window *= 4


def _line_boundary(fh: IO[bytes], t: int) -> int:
    """The first line start >= t."""
    if t == 0:
        return 0
    fh.seek(t - 1)
    fh.readline()
    return fh.tell()


def plan_chunks(
    files: list[Path], chunk_bytes: int, doc_per_file: bool = False, any_text: bool = False
) -> list[Chunk]:
    """All chunks of all files, in document order (file order, then offset)."""
    chunks: list[Chunk] = []
    for path in files:
        kind, comp = input_kind(path, doc_per_file, any_text)
        size = path.stat().st_size
        if kind == "parquet":
            import pyarrow.parquet as pq

            try:
                groups = pq.ParquetFile(path).metadata.num_row_groups
            except Exception as exc:
                raise DataError(f"{path}: not a readable parquet file ({exc})") from None
            per = size // max(groups, 1)
            chunks += [Chunk(path=str(path), kind=kind, row_group=g, nbytes=per) for g in range(groups)]
            continue
        if comp or kind in {"txt-file", "json-array"} or size <= chunk_bytes:
            chunks.append(Chunk(path=str(path), kind=kind, start=0, end=size, compression=comp, nbytes=size))
            continue
        bounds = [0]
        with open(path, "rb") as fh:
            t = chunk_bytes
            while t < size:
                b = _txt_boundary(fh, t, size) if kind == "txt" else _line_boundary(fh, t)
                if b > bounds[-1] and b < size:
                    bounds.append(b)
                t = max(t + chunk_bytes, b)
        bounds.append(size)
        chunks += [
            Chunk(path=str(path), kind=kind, start=a, end=b, nbytes=b - a)
            for a, b in itertools.pairwise(bounds)
        ]
    return chunks


def _open_stream(path: str, compression: str) -> IO[bytes]:
    if compression == "gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if compression == "zst":
        import zstandard

        fh = open(path, "rb")  # noqa: SIM115 (owned by the returned stream)
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(fh, closefd=True), 1 << 20)
    return open(path, "rb")


STREAM_BLOCK = 16 << 20


def _read_range(chunk: Chunk) -> bytes:
    """The whole chunk (a byte range of a plain file, or a whole compressed file)."""
    return b"".join(block for _, block in _blocks(chunk, whole=True))


def _cut(kind: str, buf: bytes) -> int:
    """Offset just after the last document boundary in `buf` (0 if none yet)."""
    if kind == "jsonl":
        return buf.rfind(b"\n") + 1
    last = 0
    for m in _BLANK_AFTER.finditer(buf):
        last = m.end()
    return last


def _blocks(chunk: Chunk, whole: bool = False) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) blocks of the chunk, each ending at a document boundary. A plain file's chunk
    is one large read; a compressed file is streamed in ~16 MB blocks, so a 100 GB `.jsonl.zst`
    never has to fit in memory."""
    if not chunk.compression:
        with open(chunk.path, "rb") as fh:
            fh.seek(chunk.start)
            yield chunk.start, fh.read(chunk.end - chunk.start)
        return
    offset = 0
    buf = b""
    try:
        with _open_stream(chunk.path, chunk.compression) as fh:
            if whole:
                buf = fh.read()
            while not whole:
                data = fh.read(STREAM_BLOCK)
                if not data:
                    break
                buf += data
                cut = _cut(chunk.kind, buf)
                if cut:
                    yield offset, buf[:cut]
                    offset += cut
                    buf = buf[cut:]
    except _decompress_errors(chunk.compression) as exc:
        raise DataError(f"{chunk.path}: cannot decompress ({exc})") from None
    if buf:
        yield offset, buf


def _decompress_errors(compression: str) -> tuple[type[BaseException], ...]:
    errors: tuple[type[BaseException], ...] = (OSError, EOFError, ValueError)
    if compression == "zst":
        import zstandard

        errors += (zstandard.ZstdError,)
    return errors


def _decode(chunk: Chunk, data: bytes, offset: int = 0) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{chunk.path}: invalid UTF-8 at byte {offset + exc.start}"
            + (" (after decompression)" if chunk.compression else "")
        ) from None


def _text_of(chunk: Chunk, obj: Any, key: str, loc: int) -> str:
    if not isinstance(obj, dict):
        raise DataError(f"{chunk.where(loc)}: expected a JSON object")
    if key not in obj:
        raise DataError(f"{chunk.where(loc)}: no '{key}' field (set --text-key)")
    text = obj[key]
    if not isinstance(text, str):
        raise DataError(f"{chunk.where(loc)}: field '{key}' is {type(text).__name__}, not a string")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise DataError(
                f"{chunk.where(loc)}: field '{key}' holds a lone surrogate "
                f"(\\u{ord(text[exc.start]):04x}), which is not text"
            ) from None
    return text


def iter_documents(chunk: Chunk, text_key: str = "text") -> Iterator[tuple[str, int]]:
    """(text, loc) for every document of the chunk; `chunk.where(loc)` names it in errors."""
    if chunk.kind == "parquet":
        yield from _iter_parquet(chunk, text_key)
        return
    if chunk.kind == "txt-file":
        yield _decode(chunk, _read_range(chunk)), 0
    elif chunk.kind == "json-array":
        try:
            items = json.loads(_decode(chunk, _read_range(chunk)))
        except json.JSONDecodeError as exc:
            raise DataError(f"{chunk.path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
        except RecursionError:
            raise DataError(f"{chunk.path}: invalid JSON (nested too deeply)") from None
        if not isinstance(items, list):
            raise DataError(f"{chunk.path}: expected a JSON array of objects")
        for i, obj in enumerate(items):
            yield _text_of(chunk, obj, text_key, i), i
    elif chunk.kind == "txt":
        # Every block starts just after a blank line (or at the file start), so splitting block by
        # block gives the same documents as splitting the whole file.
        for offset, block in _blocks(chunk):
            pieces = _SPLIT.split(_decode(chunk, block, offset))
            if pieces:
                pieces[0] = _LEAD.sub("", pieces[0])
                pieces[-1] = _TRAIL.sub("", pieces[-1])
            for piece in pieces:
                if piece:
                    yield piece, 0
    else:
        n = 0
        for _, block in _blocks(chunk):
            lines = block.split(b"\n")
            if block.endswith(b"\n"):
                lines.pop()
            for raw in lines:
                n += 1
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                except UnicodeDecodeError:
                    raise DataError(f"{chunk.where(n)}: invalid UTF-8") from None
                except json.JSONDecodeError as exc:
                    raise DataError(f"{chunk.where(n)}: invalid JSON ({exc.msg})") from None
                except RecursionError:
                    raise DataError(f"{chunk.where(n)}: invalid JSON (nested too deeply)") from None
                yield _text_of(chunk, obj, text_key, n), n


def _iter_parquet(chunk: Chunk, key: str) -> Iterator[tuple[str, int]]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(chunk.path)
    if key not in pf.schema_arrow.names:
        raise DataError(f"{chunk.path}: no '{key}' column (set --text-key)")
    column = pf.read_row_group(chunk.row_group, columns=[key]).column(0).to_pylist()
    for i, text in enumerate(column):
        if not isinstance(text, str):
            raise DataError(f"{chunk.where(i)}: column '{key}' is {type(text).__name__}, not a string")
        yield text, i
