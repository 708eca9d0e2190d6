"""GNU tar as a child process: C reads or writes the files on another core while Python checks every header as
the stream passes.  A failure in Python kills and reaps tar; tar's own failure is raised with the last line it
wrote to standard error."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def running(
    argv: list[str], failed: Callable[[int, str], Exception], **popen: Any
) -> Iterator[subprocess.Popen[bytes]]:
    """`tar ARGV` for the block; when it exits non-zero after the block, FAILED(exit status, last stderr line)
    is raised."""
    with tempfile.TemporaryFile() as errf:
        proc = subprocess.Popen(argv, stderr=errf, **popen)
        try:
            yield proc
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if proc.wait() != 0:
            errf.seek(0)
            lines = errf.read().decode(errors="replace").strip().splitlines() or [""]
            raise failed(proc.returncode, lines[-1])
