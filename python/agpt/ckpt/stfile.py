"""The safetensors file format, read and written here so the runtime needs no extra package.

Layout (https://github.com/huggingface/safetensors#format): an 8-byte little-endian unsigned header
length N, N bytes of JSON mapping each tensor name to {dtype, shape, data_offsets: [begin, end]}
(offsets into the data that follows; an optional `__metadata__` of strings), then the raw
little-endian row-major bytes of every tensor, with no holes.  Writing lays out the header from
shapes alone, so tensors can be streamed in one at a time; reading takes one tensor at a time.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from agpt.errors import BadInput

ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
MAX_HEADER = 100 * 1024 * 1024  # the reference reader's limit


def header_bytes(entries: list[tuple[str, tuple[int, ...]]], st_dtype: str) -> bytes:
    """The 8-byte length and JSON header for tensors of one dtype written in this order."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in entries:
        n = ITEMSIZE[st_dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned, as the reference writer does
    return struct.pack("<Q", len(raw)) + raw


def read_header(path: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    """(data start, {name: {dtype, shape, data_offsets}}); BadInput naming the file when malformed."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise BadInput(f"{path}: not a safetensors file (shorter than its header)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER:
                raise BadInput(f"{path}: not a safetensors file (header length {n})")
            raw = f.read(n)
            size = f.seek(0, 2)
    except FileNotFoundError:
        raise BadInput(f"{path}: missing") from None
    except OSError as exc:
        raise BadInput(f"{path}: unreadable ({exc.strerror})") from None
    try:
        header = json.loads(raw)
    except ValueError:
        raise BadInput(f"{path}: not a safetensors file (header is not JSON)") from None
    if not isinstance(header, dict):
        raise BadInput(f"{path}: not a safetensors file (header is not a JSON object)")
    header.pop("__metadata__", None)
    start = 8 + n
    for name, info in header.items():
        try:
            begin, end = (int(x) for x in info["data_offsets"])
            dtype = info["dtype"]
            shape = [int(d) for d in info["shape"]]
        except (KeyError, TypeError, ValueError):
            raise BadInput(f"{path}: tensor {name} has a malformed header entry") from None
        n_el = 1
        for d in shape:
            n_el *= d
        if dtype in ITEMSIZE and end - begin != n_el * ITEMSIZE[dtype]:
            raise BadInput(f"{path}: tensor {name} has {end - begin} bytes for shape {shape} {dtype}")
        if start + end > size:
            raise BadInput(f"{path}: truncated (tensor {name} ends past the end of the file)")
    return start, header


def read_tensor(path: Path, start: int, info: dict[str, Any], name: str) -> Any:
    """One tensor, read into a fresh CPU tensor of its dtype."""
    import torch

    dtype = info["dtype"]
    if dtype not in ST_DTYPES:
        raise BadInput(f"{path}: tensor {name} has dtype {dtype}; floating-point weights expected")
    begin, end = (int(x) for x in info["data_offsets"])
    t = torch.empty(tuple(int(d) for d in info["shape"]), dtype=getattr(torch, ST_DTYPES[dtype]))
    buf = t.view(-1).view(torch.uint8).numpy() if t.numel() else None
    with open(path, "rb") as f:
        f.seek(start + begin)
        if buf is not None and f.readinto(buf.data) != end - begin:
            raise BadInput(f"{path}: truncated in tensor {name}")
    return t
