"""The sha256 of a file: the digest every pin in agpt holds (`.complete` markers, `meta.json`, blend manifests,
tokenizer and shard records, yeet's tarballs).  Standard library only.

Read in 4 MiB chunks into one reused buffer: a checkpoint shard or a tarball of gigabytes hashes at the
speed of the hash, without a new bytes object per chunk.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 4 << 20


def file_sha256(path: str | Path) -> str:
    """The hex sha256 of PATH's bytes (OSError when it cannot be read)."""
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
