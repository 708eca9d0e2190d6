"""The output pass-through: the child's bytes to our stdout/stderr (and --log) as they come, at pipe speed.

Output is read in large chunks into one reused buffer and written straight through, so a chatty child costs
little; with no --log to feed and no startup regex to watch, splice(2) moves the bytes inside the kernel.  The
progress regex (`Progress`) runs on what passes, deferred and bounded, only to name the last progress line.
Also here: `agpt watch`'s own lines (`Say`) and the --log file (`LogFile`).
"""

from __future__ import annotations

import errno
import math
import os
import re
import select
import time

from agpt import safewrite
from agpt.errors import BadInput

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Callable

CHUNK = 1 << 20  # one read; the pipes are enlarged to this size where the kernel allows
SCAN_EVERY = 0.05  # the progress regex runs at most this often on a chatty stream ...
SCAN_TAIL = 16384  # ... over at most the last this many bytes of complete lines
CARRY_MAX = 4096  # the longest partial line kept to match across chunk boundaries


def write_all(fd: int, data: memoryview | bytes) -> None:
    try:
        n = os.write(fd, data)
    except BlockingIOError:
        n = 0
    if n == len(data):
        return
    view = memoryview(data)[n:]
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:  # someone else made the fd non-blocking: wait for room
            select.select([], [fd], [])
            continue
        view = view[n:]


class Progress:
    """The progress regex over complete lines (`\\n` or `\\r` ended), matched across chunk boundaries.

    Until the first match, when a separate startup limit makes that match change behaviour, every line is scanned.
    Otherwise the match only feeds the "last progress" of the idle message, so a chatty stream is scanned at most
    every SCAN_EVERY seconds over its last SCAN_TAIL bytes: output at GB/s costs no regex time.
    """

    def __init__(self, pattern: re.Pattern[bytes], eager: bool) -> None:
        self.pattern = pattern
        self.eager = eager
        self.carry: dict[int, bytes] = {}
        self.pending = bytearray()
        self.pending_at = 0.0
        self.scanned_at = -math.inf
        self.seen = False
        self.line: str | None = None
        self.at: float | None = None  # when the last progress line came
        self.first_at = -math.inf  # when the first one came
        self.after_at: float | None = None  # when the first output after the last progress line came
        self.marks: list[tuple[int, float]] = []  # (end offset in pending, when those bytes came)

    def feed(self, key: int, buf: bytearray, n: int, now: float) -> None:
        nl = buf.rfind(b"\n", 0, n)
        end = max(nl, buf.rfind(b"\r", nl + 1, n)) + 1  # a \r before the last \n changes nothing
        old = self.carry.get(key, b"")
        if end == 0:
            self.carry[key] = (old + bytes(buf[max(0, n - CARRY_MAX) : n]))[-CARRY_MAX:]
            return
        self.carry[key] = bytes(buf[max(end, n - CARRY_MAX) : n])
        if self.eager and not self.seen:
            region = old + bytes(buf[:end])
            self._scan(region, now, [(len(region), now)])
            return
        lo = max(0, end - SCAN_TAIL)
        if lo:
            lo = buf.find(b"\n", lo, end) + 1 or lo  # start on a line boundary
        else:
            self.pending += old
        self.pending += buf[lo:end]
        self.marks.append((len(self.pending), now))
        if len(self.pending) > SCAN_TAIL:
            cut = len(self.pending) - SCAN_TAIL
            del self.pending[:cut]
            self.marks = [(o - cut, t) for o, t in self.marks if o > cut]
        self.pending_at = now
        if now - self.scanned_at >= SCAN_EVERY:
            self.flush(now)

    def flush(self, now: float, eof: int | None = None) -> None:
        """Scan what is deferred; with `eof`, that stream's last partial line counts as complete."""
        if eof is not None and self.carry.get(eof):
            self.pending += self.carry.pop(eof) + b"\n"
            self.marks.append((len(self.pending), now))
            self.pending_at = now
        if self.pending:
            self._scan(bytes(self.pending), self.pending_at, self.marks)
            self.pending.clear()
        self.marks = []
        self.scanned_at = now

    def _scan(self, region: bytes, at: float, marks: list[tuple[int, float]]) -> None:
        """The last progress line of REGION; MARKS date its bytes (the recovery clock's detection: when the line
        came, and when the first output after it came)."""

        def came(offset: int) -> float:  # when the byte at OFFSET of REGION came
            return next((t for o, t in marks if o > offset), at)

        last = None
        for match in self.pattern.finditer(region):
            last = match
        if last is None:
            if self.seen and self.after_at is None and region.strip():
                self.after_at = came(0)
            return
        start = max(region.rfind(b"\n", 0, last.start()), region.rfind(b"\r", 0, last.start())) + 1
        stops = [i for i in (region.find(b"\n", last.end()), region.find(b"\r", last.end())) if i >= 0]
        end = min(stops) if stops else len(region)
        line = region[start:end]
        when = came(end - 1)
        if not self.seen:
            self.seen, self.first_at = True, when
        self.at = when
        self.after_at = came(end + 1) if region[end + 1 :].strip() else None
        self.line = line.decode("utf-8", "replace").strip()[:200]


class Passthrough:
    """Moves one chunk at a time from the child's pipe to where that stream goes, and to the log."""

    def __init__(self, dest: dict[int, int], log_fd: int | None, say: Say, progress: Progress) -> None:
        self.dest = dest  # 1 or 2 -> our stdout or stderr
        self.log_fd = log_fd
        self.say = say
        self.progress = progress
        # Zero copy: with no --log to feed and no startup regex to watch, the bytes need not pass through our
        # memory: splice(2) moves them from the child's pipe to our stdout/stderr inside the kernel.  Only the
        # "last progress" of the idle message is lost, and the failover loop always passes --log.
        self.zero_copy = hasattr(os, "splice") and log_fd is None and not progress.eager
        self.buf = bytearray(CHUNK)
        self.view = memoryview(self.buf)
        self.tap: Callable[[int, memoryview], None] | None = None  # also shown each chunk (kill on evidence)

    def pump(self, fd: int, stream: int) -> tuple[float | None, bool]:
        """Pass on what `fd` holds: (when output came, or None; whether `fd` is done and must be closed).

        Done: end of file, or our own stdout/stderr is gone (a closed pipe): that is passed on, so the child gets
        EPIPE/SIGPIPE as it would without us, instead of blocking or writing into nothing forever.
        """
        if self.zero_copy:
            moved = self._splice(fd, stream)
            if moved is not None:
                return moved
        try:
            n = os.readv(fd, [self.buf])
        except BlockingIOError:
            return None, False
        except OSError:
            n = 0
        now = time.monotonic()
        if n == 0:
            self.progress.flush(now, eof=fd)
            return None, True
        data = self.view[:n]
        gone = False
        try:
            write_all(self.dest[stream], data)
        except OSError:
            gone = True
        if self.log_fd is not None:
            try:
                write_all(self.log_fd, data)
            except OSError as e:
                self.log_fd = None
                self.say(f"--log: write failed ({e.strerror}); no longer logging")
        self.progress.feed(fd, self.buf, n, now)
        if self.tap is not None:
            self.tap(fd, data)
        return now, gone

    def _splice(self, fd: int, stream: int) -> tuple[float | None, bool] | None:
        """pump's answer with splice(2); None when the destination cannot take it (then copy, from now on)."""
        try:
            n = os.splice(fd, self.dest[stream], CHUNK)
        except BlockingIOError:
            return None, False
        except OSError as e:
            if e.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF):
                self.zero_copy = False  # e.g. a terminal, or an old kernel
                return None
            return None, True  # our own stdout/stderr is gone
        now = time.monotonic()
        if n == 0:
            self.progress.flush(now, eof=fd)
            return None, True
        return now, False


class Say:
    """One `agpt watch: ...` line on stderr, and in the log so the attempt's record says what happened."""

    def __init__(self, err_fd: int, log_fd: int | None) -> None:
        self.err_fd = err_fd
        self.log_fd = log_fd

    def __call__(self, msg: str) -> None:
        line = f"agpt watch: {msg}\n".encode("utf-8", "replace")
        for fd in (self.err_fd, self.log_fd):
            if fd is not None:
                try:
                    write_all(fd, line)
                except OSError:
                    pass


class LogFile:
    """The --log file, opened once in append mode (several attempts and jobs share one file)."""

    def __init__(self, log: str | os.PathLike[str] | int | None) -> None:
        self.log = log
        self.fd: int | None = None
        self._owned = False

    def __enter__(self) -> int | None:
        if self.log is None or isinstance(self.log, int):
            self.fd = self.log
            return self.fd
        try:
            self.fd = safewrite.open_append(os.fspath(self.log), mkdir=False)  # never through a link
        except OSError as e:
            raise BadInput(f"--log {e}") from None
        self._owned = True
        return self.fd

    def __exit__(self, *exc: object) -> None:
        if self._owned and self.fd is not None:
            os.close(self.fd)
