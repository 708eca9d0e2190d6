"""Helpers for the data tests: a small real SentencePiece model trained on text already on the machine,
documents made from Python's own sources, an independent MMIDIDX reader, and a CLI runner."""

from __future__ import annotations

import json
import struct
import subprocess
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import ROOT, agpt_env

STDLIB = Path(sysconfig.get_paths()["stdlib"])
SOURCES = [
    "json/encoder.py",
    "json/decoder.py",
    "textwrap.py",
    "shlex.py",
    "fnmatch.py",
    "string.py",
    "bisect.py",
]


def stdlib_documents(limit: int = 300) -> list[str]:
    """Blank-line-separated blocks of stdlib sources, stripped: realistic code-and-prose documents."""
    docs: list[str] = []
    for name in SOURCES:
        text = (STDLIB / name).read_text()
        for block in text.split("\n\n"):
            block = block.strip("\n")
            if block.strip() and "\n\n" not in block:
                docs.append("\n".join(line.rstrip() for line in block.split("\n") if line.strip()))
    docs = [d for d in docs if d]
    return docs[:limit]


@pytest.fixture(scope="session")
def sp_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 600-piece BPE model trained in well under a second (vocab < 65,500: uint16 shards)."""
    d = tmp_path_factory.mktemp("tok")
    text = d / "train.txt"
    text.write_text("\n".join((STDLIB / n).read_text() for n in SOURCES))
    r = run_agpt(
        "tokenizer", "train", "--input", str(text), "--vocab-size", "600", "--output", str(d / "m.model")
    )
    assert r.returncode == 0, r.stderr
    return d / "m.model"


# The commands that import torch: a fork of the trainer tests' server (train_util.agpt_cmd) saves each its start.
# (Not those that use MPI through mpi4py, tokenize and yeet: a fork would not have its launcher's PMI socket.)
TORCH_COMMANDS = ("ckpt", "eval", "check", "train", "smoke", "lr-find")


def run_agpt(
    *args: str, mpi: int = 0, cwd: Path | None = None, timeout: int = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    from train_util import agpt_cmd, forked_env

    forked = args[:1] != () and args[0] in TORCH_COMMANDS
    cmd = [*agpt_cmd(), *args] if forked else [str(ROOT / "bin" / "agpt"), *args]
    if mpi:
        cmd = [str(ROOT / ".venv" / "bin" / "mpiexec"), "-n", str(mpi), *cmd]
    run_env = forked_env(env) if forked else agpt_env(env)
    return subprocess.run(cmd, capture_output=True, text=True, env=run_env, cwd=cwd, timeout=timeout)


def tokenize_cli(model: str | Path, inputs: Sequence[str | Path], out: str | Path, *extra: str,
                 **kw: Any) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`agpt tokenize --model MODEL --input I... --output OUT EXTRA...`."""
    args = ["tokenize", "--model", str(model), "--output", str(out)]
    for f in inputs:
        args += ["--input", str(f)]
    return run_agpt(*args, *extra, **kw)


def blend_cli(
    file_list: str | Path, out: str | Path, *extra: str, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """`agpt blend --file-list FILE_LIST --output OUT EXTRA...`."""
    return run_agpt("blend", "--file-list", str(file_list), "--output", str(out), *extra, **kw)


def independent_read(prefix: str | Path) -> list[np.ndarray]:
    """Documents of a shard, decoded from the MMIDIDX v1 byte layout with struct, sharing no code
    with agpt.data.mmidx."""
    idx = Path(f"{prefix}.idx").read_bytes()
    assert idx[:9] == b"MMIDIDX\x00\x00"
    (version,) = struct.unpack_from("<Q", idx, 9)
    assert version == 1
    code = idx[17]
    dtype = {8: np.uint16, 4: np.int32}[code]
    count, docs = struct.unpack_from("<QQ", idx, 18)
    off = 34
    sizes = struct.unpack_from(f"<{count}i", idx, off)
    off += 4 * count
    pointers = struct.unpack_from(f"<{count}q", idx, off)
    off += 8 * count
    doc_idx = struct.unpack_from(f"<{docs}q", idx, off)
    assert off + 8 * docs == len(idx)
    assert list(doc_idx) == list(range(count + 1))
    data = Path(f"{prefix}.bin").read_bytes()
    item = np.dtype(dtype).itemsize
    assert pointers[-1] + sizes[-1] * item == len(data), "last offset + length x itemsize != .bin size"
    return [np.frombuffer(data, dtype=dtype, count=n, offset=p) for n, p in zip(sizes, pointers, strict=True)]


def shard_prefixes(out: Path) -> list[str]:
    meta = json.loads((out / "tokenize.json").read_text())
    return [s["prefix"] for s in meta["shards"]]


def tree_bytes(d: Path, patterns: tuple[str, ...] = ("*.bin", "*.idx", "*.npy")) -> dict[str, bytes]:
    """name -> bytes of every output file, for byte-identity checks."""
    return {p.name: p.read_bytes() for pat in patterns for p in sorted(d.glob(pat))}


def read_json(p: Path) -> Any:
    return json.loads(p.read_text())
