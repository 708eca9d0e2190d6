"""One way to write a file: every file agpt writes, whole or appended, goes through here.

Standard library only: the recovery path (failover, chain, watch) writes through this module.

The rules (docs/trust.md, "What writers never follow"):
- A whole file (`replace`, `replace_with`) is written under a temporary name in the target's own folder, made
  exclusively (O_CREAT|O_EXCL|O_NOFOLLOW, a random part in the name), so a file or a symbolic link planted at a
  predictable name is never opened, let alone written through; then fsync, then one rename.  A reader sees the
  old file or the new one, never half of one; a killed writer leaves at most its own temporary file.
- The target itself is never followed: the rename replaces a symbolic link at the target by the new file, it
  never writes into what the link points at.
- A file written over time (`Pending`: a token shard, an export's shard) takes the same way, its temporary file
  held open until `commit` renames it.
- An append (`append`) opens the file itself with O_APPEND|O_NOFOLLOW, without blocking, and writes only to a
  regular file: a link, a FIFO or a device at a record's path is refused; every byte is written (a short write
  on a full disk is continued until it fails), so a record is whole or torn, never silently cut.
- A failure of the environment (ENOSPC, EROFS, EACCES, a link) is `WriteError`: one line naming the file, exit 2
  (it is a BadInput), and still an OSError for callers that only note it.  Whatever was there is left as it was.
- `fault` is the one hook tests use to fill the disk or kill the writer at the N-th step (write or rename).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from pathlib import Path

from agpt.errors import BadInput

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the recovery path imports this module and starts fast
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO

TMP_SUFFIX = ".tmp"  # `.NAME.<pid>.<random>.tmp` beside NAME: what a killed writer may leave behind
_TRIES = 16  # names tried when one is taken (a planted file, a link, another writer)


class WriteError(BadInput, OSError):
    """A file that could not be written (full disk, read-only, a link refused): one line naming it, exit 2."""

    def __str__(self) -> str:  # the one line, whatever errno and filename say (OSError would prefix them)
        return str(self.args[0]) if self.args else ""


def fault(op: str, path: Path) -> None:
    """Called before each write, each commit's fsync and each rename (op "write", "sync", "rename", "append");
    tests replace it to raise
    ENOSPC or to stop the writer there, one step at a time.  Does nothing in a real run."""


def _why(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "is a symbolic link; refusing to follow it"
    if exc.errno == errno.ENXIO:
        return "not a regular file (a FIFO, socket or device)"
    return exc.strerror or str(exc)


def error(path: Path | str, exc: OSError) -> WriteError:
    """The one line for a file that could not be written: `PATH: cannot write (why)`."""
    if isinstance(exc, WriteError):
        return exc
    err = WriteError(f"{path}: cannot write ({_why(exc)})")
    err.errno, err.filename = exc.errno, str(path)
    return err


def _write_all(fd: int, data: bytes | bytearray | memoryview, path: Path) -> None:
    view = memoryview(data)
    while view:
        fault("write", path)
        view = view[os.write(fd, view) :]


def leftovers(folder: Path, name: str) -> list[Path]:
    """The temporary files killed writers of FOLDER/NAME left (NAME may be a glob): `.NAME.<pid>.<random>.tmp`,
    for the one writer of a folder to remove once it is done (a link among them is removed, never followed)."""
    return sorted(p for p in folder.glob(f".{name}.[0-9]*.*{TMP_SUFFIX}") if p.name.count(".") >= 4)


def _create_tmp(path: Path, mode: int) -> tuple[int, Path]:
    """An fd on a new file beside PATH, under a name nobody else had (never a link followed)."""
    for _ in range(_TRIES):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}{TMP_SUFFIX}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        except FileExistsError:
            continue
        return fd, tmp
    raise FileExistsError(errno.EEXIST, f"no free temporary name beside it after {_TRIES} tries", str(path))


class Pending:
    """A whole file written over time (a token shard, an export's shard, a figure): the bytes go to a temporary
    name made exclusively beside PATH (as `replace`: never a link followed), `commit` fsyncs it and renames it
    over PATH, `abort` removes it.  As a context manager it commits when the block ends and aborts when it
    raises.  Every failure of the environment is WriteError naming PATH, with PATH left as it was."""

    def __init__(self, path: Path | str, *, mode: int = 0o644) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, self.tmp = _create_tmp(self.path, mode)
        except OSError as exc:
            raise error(self.path, exc) from None
        self.file: BinaryIO = os.fdopen(fd, "wb")
        self._open = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Every byte of DATA, or WriteError naming PATH (the caller aborts)."""
        try:
            self.file.flush()
            _write_all(self.file.fileno(), data, self.path)
        except OSError as exc:
            raise error(self.path, exc) from None

    def size(self) -> int:
        """The bytes written so far."""
        self.file.flush()
        return os.fstat(self.file.fileno()).st_size

    def commit(self, *, sync: bool = True) -> None:
        try:
            self.file.flush()
            # where a full disk shows on filesystems that allocate late (NFS, Lustre)
            fault("sync", self.path)
            if sync:
                os.fsync(self.file.fileno())
            self.file.close()
            fault("rename", self.path)
            os.replace(self.tmp, self.path)
            self._open = False
        except OSError as exc:
            self.abort()
            raise error(self.path, exc) from None

    def abort(self) -> None:
        """Remove the temporary file (PATH is untouched); safe to call twice."""
        if not self._open:
            return
        self._open = False
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)

    def __enter__(self) -> Pending:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if kind is None:
            self.commit()
            return
        self.abort()
        if isinstance(exc, OSError):
            raise error(self.path, exc) from None


def replace_with(
    path: Path | str, fill: Callable[[BinaryIO], None], *, mode: int = 0o644, sync: bool = True
) -> None:
    """Replace PATH by what FILL writes into the binary file it is handed (see the module's rules)."""
    pending = Pending(path, mode=mode)
    try:
        fill(pending.file)
    except BaseException as exc:
        pending.abort()
        if isinstance(exc, OSError):
            raise error(pending.path, exc) from None
        raise
    pending.commit(sync=sync)


def replace(
    path: Path | str, data: str | bytes | bytearray | memoryview, *, mode: int = 0o644, sync: bool = True
) -> None:
    """Replace PATH by DATA (text as UTF-8): temporary name made exclusively beside it, fsync, rename."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    path = Path(path)

    def fill(f: BinaryIO) -> None:
        f.flush()
        _write_all(f.fileno(), raw, path)

    replace_with(path, fill, mode=mode, sync=sync)


def open_append(path: Path | str, *, mode: int = 0o644, mkdir: bool = True) -> int:
    """An O_APPEND fd on PATH (created when missing, with its folder when MKDIR), opened without following a
    link and without blocking; only a regular file is taken.  Raises WriteError."""
    path = Path(path)
    try:
        if mkdir:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(
            path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode
        )
    except OSError as exc:
        raise error(path, exc) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.ENXIO, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except OSError as exc:
        os.close(fd)
        raise error(path, exc) from None
    return fd


def append(path: Path | str, text: str | bytes, *, sync: bool = True, fresh_line: bool = True) -> None:
    """Append TEXT to PATH in one O_APPEND write under an exclusive flock.  FRESH_LINE: when the file does not
    end in a newline (a writer killed mid-line), a newline goes first, so a record is never glued onto a torn
    one.  Raises WriteError (the file is left as it was, or with a torn last line that readers skip)."""
    path = Path(path)
    raw = text.encode("utf-8", errors="replace") if isinstance(text, str) else bytes(text)
    if not raw:
        return
    fd = open_append(path)
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if fresh_line and size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            raw = b"\n" + raw
        fault("append", path)
        _write_all(fd, raw, path)
        if sync:
            with contextlib.suppress(OSError):
                os.fsync(fd)
    except OSError as exc:
        raise error(path, exc) from None
    finally:
        os.close(fd)  # closing drops the flock
