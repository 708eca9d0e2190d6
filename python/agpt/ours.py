"""The one rule for a folder agpt may delete or replace: one it made (its marker file is inside) or an empty one.
Anything else is someone's data: refused, never deleted (README, trust model: output folders).  `agpt yeet`'s
DEST and the `.work` folders of `agpt tokenize` and `agpt blend` follow it."""

from __future__ import annotations

import os
from pathlib import Path


def ours_or_empty(path: Path, *markers: str) -> bool:
    """PATH holds one of MARKERS (a link counts: it is there) or nothing at all; OSError when it cannot be read."""
    if any(os.path.lexists(path / m) for m in markers):
        return True
    with os.scandir(path) as it:
        return next(it, None) is None
