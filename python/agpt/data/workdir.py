"""`--output DIR` and its `DIR/.work` scratch folder: made, claimed and removed only by the tool that made it.

`agpt tokenize` and `agpt blend` keep intermediate files in `DIR/.work` and delete it when done or when it
holds another run's leftovers.  A `.work` that some other program (or a person) put there is not theirs to
delete: the tools write MARKER into every `.work` they create and refuse a non-empty one without it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from agpt import safewrite
from agpt.errors import BadInput
from agpt.ours import ours_or_empty

WORK = ".work"
MARKER = ".agpt-work"
LOCK = ".agpt-lock"  # flock'ed by the one run writing DIR


def ensure_output(out: Path, flag: str = "--output") -> None:
    """OUT is a directory (created when missing); anything else is one line naming the flag."""
    try:
        st = os.stat(out)
    except FileNotFoundError:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"{flag} {out}: cannot create it ({exc.strerror})") from None
        return
    except OSError as exc:
        raise BadInput(f"{flag} {out}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{flag} {out}: exists and is not a directory")
    if not os.access(out, os.W_OK | os.X_OK):
        raise BadInput(f"{flag} {out}: not writable")


def claim(out: Path, tool: str, *, also_ours: tuple[str, ...] = ()) -> Path:
    """OUT/.work, when it is ours to replace: missing, empty, or holding MARKER (or a file in ALSO_OURS that
    only TOOL writes).  Otherwise BadInput: someone else's folder is never deleted."""
    work = out / WORK
    if not os.path.lexists(work):
        return work
    if work.is_symlink() or not work.is_dir():
        raise BadInput(
            f"--output {out}: {work} exists and is not a directory {tool} made; remove it yourself"
        )
    try:
        ours = ours_or_empty(work, MARKER, *also_ours)
    except OSError as exc:
        raise BadInput(f"--output {out}: cannot read {work} ({exc.strerror})") from None
    if not ours:
        raise BadInput(
            f"--output {out}: {work} was not made by {tool} (no {MARKER}); it would be deleted: "
            "remove it yourself or use another --output"
        )
    return work


def make(work: Path, tool: str) -> None:
    """Create WORK (if missing) and mark it as this tool's.  A link or a file planted at WORK since `claim` is
    refused, never entered: everything the tool writes there goes into a real folder."""
    try:
        os.mkdir(work)
    except FileExistsError:
        pass
    except OSError as exc:
        raise BadInput(f"{work}: cannot create it ({exc.strerror})") from None
    if not stat.S_ISDIR(os.lstat(work).st_mode):
        raise BadInput(
            f"{work}: exists and is not a directory {tool} made (a link or a file); remove it yourself"
        )
    safewrite.replace(work / MARKER, f"scratch space of {tool}: deleted when it finishes\n", sync=False)


@contextlib.contextmanager
def lock(out: Path, tool: str) -> Iterator[None]:
    """Hold OUT/.agpt-lock (flock, exclusive) while TOOL writes OUT: a second `agpt tokenize` or `agpt blend` on
    the same --output is refused at once with one line, instead of both writing its files and one crashing.
    The kernel drops the lock when its holder dies, so a killed run never leaves it held."""
    ensure_output(out)
    path = out / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise BadInput(f"--output {out}: cannot open its lock {path} ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BadInput(
                f"--output {out}: another {tool} is writing it ({path} is held); wait for it to finish, "
                "or use another --output"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{tool} pid {os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def locked_run(out: Path, tool: str, body: Callable[[Callable[[], None]], Any]) -> Any:
    """BODY(take): rank 0 calls take() once its inputs are checked and before it writes OUT (inside the block
    whose errors every rank learns); from then until BODY returns it holds OUT's lock (lock())."""
    with contextlib.ExitStack() as stack:
        return body(lambda: stack.enter_context(lock(out, tool)))
