"""One rule for reading a user's text file: strict UTF-8, and one line naming the file when it cannot be read.

The bytes come from `agpt.rundir.read_bytes`, the one reader: a regular file only (a FIFO or a device is
refused, never read), at most TEXT_MAX bytes.  (`agpt.rundir.read_text` is the lenient reader for the run
directory's own files, which a crash can leave half-written: it replaces bad bytes instead of refusing them.)
Standard library only.
"""

from __future__ import annotations

from pathlib import Path

from agpt.errors import BadInput
from agpt.rundir import TEXT_MAX, read_bytes


def read_utf8(path: Path, what: str, *, error: type[BadInput] = BadInput, hint: str = "") -> str:
    """PATH's text; unreadable or not UTF-8: ERROR(`WHAT: cannot read (why)HINT` or `WHAT: not UTF-8 text (byte
    N)`).  WHAT names the file as the user gave it: the path itself, or the flag and the path."""
    try:
        return read_bytes(path, limit=TEXT_MAX).decode("utf-8")
    except OSError as exc:
        raise error(f"{what}: cannot read ({exc.strerror or exc}){hint}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{what}: not UTF-8 text (byte {exc.start})") from None
