"""`agpt watch`: kill a command whose output goes idle, and re-run it a bounded number of times.

Why: a collective hang makes every rank block in the same call; the job stays alive by `kill -0`, its output goes
silent, and it burns the whole allocation, while some collective backends ignore their own timeouts.  Silence on
stdout/stderr is the signal we can act on from outside.

This module is on the recovery path: standard library only, so it starts in milliseconds even when the training
environment is what broke (`python3 -m agpt.watch` works without the venv).

Design: one thread and one poll() over the child's two pipes plus a self-pipe that signal handlers write to
(signal.set_wakeup_fd, which also delivers SIGCHLD).  The poll timeout is the time to the next deadline, so a quiet
child costs no CPU; output is read in large chunks into one reused buffer and written straight through, so a
chatty child costs little.  The child runs in its own session, so one killpg() reaches every rank the launcher
started, and a grandchild that still holds the pipe cannot keep us waiting.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import math
import os
import re
import select
import signal
import subprocess
import sys
import time

from agpt import rundir
from agpt.errors import EXIT_IDLE, EXIT_USAGE, BadInput

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from types import FrameType
    from typing import NoReturn

DEFAULT_TIMEOUT = 600.0
DEFAULT_GRACE = 10.0
DEFAULT_BACKOFF: tuple[float, ...] = (5.0, 10.0, 20.0, 40.0, 60.0)
DEFAULT_PROGRESS_RE = rundir.PROGRESS_RE
EXIT_CANNOT_RUN = 126
EXIT_NOT_FOUND = 127

# After CMD exits, how long what it left behind may keep the pipes open before its process group is terminated.
DRAIN_S = 2.0
# After SIGKILL, how long to wait for the pipes to close (a process outside the group may hold them) before leaving.
REAP_S = 2.0
# While CMD has exited but its group still has members, how often to look whether they are gone (only in that state).
GROUP_CHECK_S = 0.1
CHUNK = 1 << 20  # one read; the pipes are enlarged to this size where the kernel allows
SCAN_EVERY = 0.05  # the progress regex runs at most this often on a chatty stream ...
SCAN_TAIL = 16384  # ... over at most the last this many bytes of complete lines
CARRY_MAX = 4096  # the longest partial line kept to match across chunk boundaries
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux; elsewhere the call fails and is skipped

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOPPING = (signal.SIGTERM, signal.SIGINT)


def _check_seconds(flag: str, value: float) -> float:
    """Seconds >= 0 and at most rundir.MAX_SECONDS (a year): a larger value would overflow the poll and the
    sleeps, after the child had started."""
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise BadInput(f"{flag}: must be a number of seconds >= 0, got {value!r}")
    if value > rundir.MAX_SECONDS:
        raise BadInput(f"{flag}: at most {rundir.MAX_SECONDS:.0f} seconds (a year), got {value!r}")
    return float(value)


class WatchSettings:
    """How long silence may last and what to do then.  Validates itself: bad values raise BadInput (exit 2).

    A plain slotted class rather than a dataclass: `dataclasses` pulls in `inspect`, a fifth of our start-up.
    """

    __slots__ = (
        "backoff",
        "grace",
        "progress_file",
        "progress_re",
        "retries",
        "startup_timeout",
        "timeout",
    )

    def __init__(
        self,
        *,
        timeout: float = DEFAULT_TIMEOUT,  # idle seconds on stdout+stderr (and the progress file); 0 disables
        startup_timeout: float | None = None,  # idle limit until the first progress line; None: timeout
        grace: float = DEFAULT_GRACE,  # SIGTERM, then this long, then SIGKILL
        retries: int = 0,
        backoff: Sequence[float] = DEFAULT_BACKOFF,  # before each retry; the last value repeats
        progress_re: str = DEFAULT_PROGRESS_RE,
        progress_file: str | None = None,
    ) -> None:
        self.timeout = _check_seconds("--timeout", timeout)
        self.startup_timeout = (
            None if startup_timeout is None else _check_seconds("--startup-timeout", startup_timeout)
        )
        self.grace = _check_seconds("--grace", grace)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise BadInput(f"--retries: must be an integer >= 0, got {retries!r}")
        self.retries = retries
        if not backoff:
            raise BadInput("--backoff: needs at least one number of seconds")
        self.backoff = tuple(_check_seconds("--backoff", b) for b in backoff)
        try:
            re.compile(progress_re)
        except re.error as e:
            raise BadInput(f"FAILOVER_PROGRESS_RE / --progress-re {progress_re!r}: {e}") from None
        self.progress_re = progress_re
        self.progress_file = progress_file

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in sorted(self.__slots__))
        return f"WatchSettings({fields})"

    def limit(self, progressed: bool) -> float:
        """The idle limit in force: the startup one until the first progress is seen."""
        if progressed or self.startup_timeout is None:
            return self.timeout
        return self.startup_timeout


class Outcome:
    """How one attempt ended; `rc` is what `agpt watch` exits with."""

    __slots__ = ("idle", "last_progress", "rc", "reason", "spawn_failed", "stop_signal")

    def __init__(
        self,
        *,
        rc: int,
        reason: str,  # one line: "exit 3", "killed by SIGSEGV", "idle: no output ...", "SIGTERM received"
        idle: bool = False,
        stop_signal: int | None = None,  # a SIGTERM/SIGINT sent to watch itself: never retried
        spawn_failed: bool = False,  # command not found / not executable: never retried
        last_progress: str | None = None,
    ) -> None:
        self.rc = rc
        self.reason = reason
        self.idle = idle
        self.stop_signal = stop_signal
        self.spawn_failed = spawn_failed
        self.last_progress = last_progress

    def __repr__(self) -> str:
        return f"Outcome(rc={self.rc!r}, reason={self.reason!r})"


def _signame(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _write_all(fd: int, data: memoryview | bytes) -> None:
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


class _Signals:
    """Route forwarded signals and SIGCHLD into `pending` and wake poll() through a self-pipe.

    Only the main thread can own signals; elsewhere `active` stays False and the attempt looks at the child on a
    short tick instead (and cannot forward signals).  Everything is restored on exit, so a Python caller (the
    failover loop) keeps its own handlers.
    """

    def __init__(self) -> None:
        self.pending: list[int] = []
        self.active = False
        self.rfd = -1
        self._wfd = -1
        self._old: dict[int, signal.Handlers | int | object] = {}
        self._old_wakeup = -1

    def __enter__(self) -> _Signals:
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        try:
            self._old_wakeup = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:  # not the main thread
            os.close(r)
            os.close(w)
            return self
        self.rfd, self._wfd, self.active = r, w, True
        for num in (*FORWARDED, signal.SIGCHLD):
            old = signal.getsignal(num)
            if num in (signal.SIGHUP, signal.SIGINT) and old == signal.SIG_IGN:
                continue  # nohup / a background job: respect the caller's choice
            self._old[num] = old
            signal.signal(num, self._handler)
        return self

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.pending.append(signum)

    def take(self) -> list[int]:
        """The signals received since the last call (drains the self-pipe)."""
        if self.active:
            try:
                while os.read(self.rfd, 512):
                    pass
            except BlockingIOError:
                pass
        got, self.pending = self.pending, []
        return got

    def sleep(self, seconds: float) -> int | None:
        """Sleep, but return early with SIGTERM/SIGINT if one arrives (a retry backoff must not outlive us)."""
        end = time.monotonic() + seconds
        while True:
            for num in self.take():
                if num in STOPPING:
                    return num
            left = end - time.monotonic()
            if left <= 0:
                return None
            if self.active:
                select.select([self.rfd], [], [], left)
            else:
                time.sleep(min(left, 0.2))

    def __exit__(self, *exc: object) -> None:
        if not self.active:
            return
        for num, old in self._old.items():
            signal.signal(num, old if old is not None else signal.SIG_DFL)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._old_wakeup)
        os.close(self.rfd)
        os.close(self._wfd)
        self.active = False


class _Progress:
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

    def feed(self, key: int, buf: bytearray, n: int, now: float) -> None:
        nl = buf.rfind(b"\n", 0, n)
        end = max(nl, buf.rfind(b"\r", nl + 1, n)) + 1  # a \r before the last \n changes nothing
        old = self.carry.get(key, b"")
        if end == 0:
            self.carry[key] = (old + bytes(buf[max(0, n - CARRY_MAX) : n]))[-CARRY_MAX:]
            return
        self.carry[key] = bytes(buf[max(end, n - CARRY_MAX) : n])
        if self.eager and not self.seen:
            self._scan(old + bytes(buf[:end]), now)
            return
        lo = max(0, end - SCAN_TAIL)
        if lo:
            lo = buf.find(b"\n", lo, end) + 1 or lo  # start on a line boundary
        else:
            self.pending += old
        self.pending += buf[lo:end]
        if len(self.pending) > SCAN_TAIL:
            del self.pending[:-SCAN_TAIL]
        self.pending_at = now
        if now - self.scanned_at >= SCAN_EVERY:
            self.flush(now)

    def flush(self, now: float, eof: int | None = None) -> None:
        """Scan what is deferred; with `eof`, that stream's last partial line counts as complete."""
        if eof is not None and self.carry.get(eof):
            self.pending += self.carry.pop(eof) + b"\n"
            self.pending_at = now
        if self.pending:
            self._scan(bytes(self.pending), self.pending_at)
            self.pending.clear()
        self.scanned_at = now

    def _scan(self, region: bytes, at: float) -> None:
        last = None
        for match in self.pattern.finditer(region):
            last = match
        if last is None:
            return
        start = max(region.rfind(b"\n", 0, last.start()), region.rfind(b"\r", 0, last.start())) + 1
        stops = [i for i in (region.find(b"\n", last.end()), region.find(b"\r", last.end())) if i >= 0]
        line = region[start : min(stops) if stops else len(region)]
        if not self.seen:
            self.seen, self.first_at = True, at
        self.at = at
        self.line = line.decode("utf-8", "replace").strip()[:200]


def _stat_sig(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_ino)


def _has_live_member(pgid: int) -> bool:
    """Whether group `pgid` has a member that is not a zombie.

    killpg(pgid, 0) also succeeds for zombies, and where PID 1 does not reap orphans (a container's init) a dead
    grandchild would make us wait out the whole grace period.  Linux /proc tells them apart; elsewhere assume
    alive.  Only called while CMD has exited and its group lingers, so the scan is rare.
    """
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] != b"Z":
            return True
    return False


RUN, DRAIN, TERM, KILLED, DONE = range(5)


class _Attempt:
    """One run of CMD under the watchdog: a small state machine driven by poll().

    RUN     the child runs; idle deadlines apply.
    DRAIN   the child exited by itself; its pipes get DRAIN_S to close (a grandchild may still hold them).
    TERM    SIGTERM went to the group (idle, a signal to us, or leftovers after DRAIN); SIGKILL at `kill_at`.
    KILLED  SIGKILL went to the group; wait up to REAP_S for the child and the pipes, then leave.
    """

    def __init__(
        self,
        cmd: Sequence[str],
        s: WatchSettings,
        *,
        sig: _Signals,
        log_fd: int | None,
        env: Mapping[str, str] | None,
        out_fd: int,
        err_fd: int,
        say: _Say,
    ) -> None:
        self.cmd = list(cmd)
        self.s = s
        self.sig = sig
        self.log_fd = log_fd
        self.env = env
        self.say = say
        self.dest = {1: out_fd, 2: err_fd}
        pattern = re.compile(s.progress_re.encode("utf-8", "surrogateescape"), re.MULTILINE)
        eager = s.startup_timeout is not None and s.startup_timeout != s.timeout
        self.progress = _Progress(pattern, eager)
        # Zero copy: with no --log to feed and no startup regex to watch, the bytes need not pass through our
        # memory: splice(2) moves them from the child's pipe to our stdout/stderr inside the kernel.  Only the
        # "last progress" of the idle message is lost, and the failover loop always passes --log.
        self.zero_copy = hasattr(os, "splice") and log_fd is None and not eager
        self.buf = bytearray(CHUNK)
        self.view = memoryview(self.buf)
        self.phase = RUN
        self.rc: int | None = None
        self.idle_reason: str | None = None
        self.stop_signal: int | None = None
        self.kill_at = math.inf
        self.until = math.inf  # end of DRAIN or of KILLED
        self.streams: dict[int, int] = {}  # our read end -> 1 or 2
        self.poller = select.poll()
        self.pgid = -1
        self.t0 = self.last_output = time.monotonic()
        self.pf_sig = _stat_sig(s.progress_file) if s.progress_file else None
        self.pf_changed = self.pf_checked = self.t0
        self.pf_seen = False

    # ---- spawn -------------------------------------------------------------------------------------------
    def run(self) -> Outcome:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        for fd in (out_r, err_r):
            try:
                fcntl.fcntl(fd, F_SETPIPE_SZ, CHUNK)
            except OSError:
                pass  # the default 64 KiB pipe still works, with more wake-ups
        try:
            self.proc = subprocess.Popen(
                self.cmd, stdout=out_w, stderr=err_w, start_new_session=True, env=self.env
            )
        except FileNotFoundError:
            os.close(out_r)
            os.close(err_r)
            self.say(f"{self.cmd[0]}: command not found")
            return Outcome(rc=EXIT_NOT_FOUND, reason="command not found", spawn_failed=True)
        except OSError as e:
            os.close(out_r)
            os.close(err_r)
            self.say(f"{self.cmd[0]}: cannot run: {e.strerror}")
            return Outcome(rc=EXIT_CANNOT_RUN, reason=f"cannot run: {e.strerror}", spawn_failed=True)
        finally:
            os.close(out_w)
            os.close(err_w)
        self.pgid = self.proc.pid  # start_new_session: the child leads its own session and group
        self.streams = {out_r: 1, err_r: 2}
        try:
            self._loop()
        finally:
            for fd in list(self.streams):
                self._close(fd)
        return self._outcome()

    # ---- the loop ----------------------------------------------------------------------------------------
    def _loop(self) -> None:
        poller = self.poller
        for fd in self.streams:
            poller.register(fd, select.POLLIN)
        if self.sig.active:
            poller.register(self.sig.rfd, select.POLLIN)
        for num in self.sig.take():  # arrived before the child existed
            self._on_signal(num)
        while True:
            now = time.monotonic()
            if not self.sig.active:
                self._reap(now)
            self._advance(now)
            if self.phase == DONE:
                return
            wake = self._next_deadline(now)
            if wake == math.inf:
                ms = -1
            else:
                ms = max(0, math.ceil((wake - now) * 1000))
            for fd, _ev in poller.poll(ms):
                if fd == self.sig.rfd:
                    for num in self.sig.take():
                        self._on_signal(num)
                elif fd in self.streams:
                    self._read(fd)

    def _next_deadline(self, now: float) -> float:
        wake = math.inf
        if not self.sig.active and self.rc is None:
            wake = now + 0.2  # no SIGCHLD off the main thread: look at the child on a tick
        if self.phase == RUN:
            limit = self.s.limit(self._progressed())
            if limit > 0:
                wake = min(wake, self.last_output + limit)
                if self.s.progress_file:
                    wake = min(wake, self._pf_base() + limit)
        elif self.phase == DRAIN or self.phase == KILLED:
            wake = min(wake, self.until)
        elif self.phase == TERM:
            wake = min(wake, self.kill_at)
            if self.rc is not None and not self.streams:
                wake = min(wake, now + GROUP_CHECK_S)
        return wake

    def _advance(self, now: float) -> None:
        if self.phase == RUN:
            if self.rc is not None:
                self.phase, self.until = DRAIN, now + DRAIN_S
            else:
                self._check_idle(now)
        if self.phase == DRAIN and (not self.streams or now >= self.until):
            if self._group_alive():
                self._signal_group(signal.SIGTERM)
                self.phase, self.kill_at = TERM, now + self.s.grace
            else:
                self.phase = DONE
        if self.phase == TERM:
            if self.rc is not None and not self.streams and not self._group_alive():
                self.phase = DONE
            elif now >= self.kill_at:
                self._signal_group(signal.SIGKILL)
                self.phase, self.until = KILLED, now + REAP_S
        if self.phase == KILLED and ((self.rc is not None and not self.streams) or now >= self.until):
            self.phase = DONE

    def _progressed(self) -> bool:
        return self.progress.seen or self.pf_seen

    def _check_idle(self, now: float) -> None:
        limit = self.s.limit(self._progressed())
        if limit <= 0:
            return
        what = None
        if now >= self.last_output + limit:
            what = f"no output on stdout/stderr for {now - self.last_output:.1f} s"
        elif self.s.progress_file and now >= self._pf_base() + limit:
            self._check_progress_file(now)
            limit = self.s.limit(self._progressed())
            if now >= self._pf_base() + limit:
                state = "not updated" if self.pf_seen or self.pf_sig is not None else "not written"
                what = f"progress file {self.s.progress_file} {state} for {now - self.pf_changed:.1f} s"
        if what is None:
            return
        flag = "--timeout" if limit == self.s.timeout else "--startup-timeout"
        self.progress.flush(now)
        if self.progress.line is not None and self.progress.at is not None:
            seen = f"last progress {now - self.progress.at:.0f} s ago: {self.progress.line!r}"
        else:
            seen = "no progress line seen"
        self.idle_reason = f"idle: {what} ({flag} {limit:g}); {seen}"
        self.say(
            f"{self.idle_reason}; SIGTERM to process group {self.pgid}, SIGKILL after {self.s.grace:g} s"
        )
        self._signal_group(signal.SIGTERM)
        self.phase, self.kill_at = TERM, now + self.s.grace

    def _pf_base(self) -> float:
        """Since when the progress file counts as idle: its last change, but never before the first progress
        line, which switches to the (shorter) steady limit while the file may be written a moment later."""
        return max(self.pf_changed, self.progress.first_at)

    def _check_progress_file(self, now: float) -> None:
        assert self.s.progress_file is not None
        sig = _stat_sig(self.s.progress_file)
        if sig is not None and sig != self.pf_sig:
            # Credit the change at its mtime, but never outside the window since the last look: a skewed
            # file-server clock can then delay the verdict by one window at most, never fire it early.
            age = max(0.0, time.time() - sig[0] / 1e9)
            self.pf_changed = min(now, max(self.pf_checked, now - age))
            self.pf_seen = True
        self.pf_sig = sig
        self.pf_checked = now

    # ---- events ------------------------------------------------------------------------------------------
    def _read(self, fd: int) -> None:
        if self.zero_copy and self._splice(fd):
            return
        try:
            n = os.readv(fd, [self.buf])
        except BlockingIOError:
            return
        except OSError:
            n = 0
        now = time.monotonic()
        if n == 0:
            self.progress.flush(now, eof=fd)
            self._close(fd)
            return
        self.last_output = now
        data = self.view[:n]
        try:
            _write_all(self.dest[self.streams[fd]], data)
        except OSError:
            # Our own stdout/stderr is gone (a closed pipe): pass that on, so the child gets EPIPE/SIGPIPE
            # as it would without us, instead of blocking or writing into nothing forever.
            self._close(fd)
        if self.log_fd is not None:
            try:
                _write_all(self.log_fd, data)
            except OSError as e:
                self.log_fd = None
                self.say(f"--log: write failed ({e.strerror}); no longer logging")
        self.progress.feed(fd, self.buf, n, now)

    def _splice(self, fd: int) -> bool:
        """Pass a chunk through with splice(2); False when the destination cannot take it (then copy)."""
        try:
            n = os.splice(fd, self.dest[self.streams[fd]], CHUNK)
        except BlockingIOError:
            return True
        except OSError as e:
            if e.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF):
                self.zero_copy = False  # e.g. a terminal, or an old kernel: copy from now on
                return False
            self._close(fd)  # our own stdout/stderr is gone: as in _read
            return True
        now = time.monotonic()
        if n == 0:
            self.progress.flush(now, eof=fd)
            self._close(fd)
        else:
            self.last_output = now
        return True

    def _close(self, fd: int) -> None:
        if self.streams.pop(fd, None) is not None:
            try:
                self.poller.unregister(fd)
            except KeyError:
                pass
            os.close(fd)

    def _reap(self, now: float) -> None:
        if self.rc is None:
            self.rc = self.proc.poll()

    def _on_signal(self, num: int) -> None:
        now = time.monotonic()
        if num == signal.SIGCHLD:
            self._reap(now)
            return
        if num not in STOPPING:
            if self.phase not in (KILLED, DONE):
                self._signal_group(num)
                self.say(f"forwarded {_signame(num)} to process group {self.pgid}")
            return
        if self.stop_signal is not None:  # asked twice: stop waiting out the grace period
            if self.phase == TERM:
                self.say(f"{_signame(num)} again: SIGKILL to process group {self.pgid} now")
                self.kill_at = now
            return
        self.stop_signal = num  # recorded even while killing: no retry may follow
        if self.phase in (KILLED, DONE):
            return
        self._signal_group(num)
        self.say(
            f"{_signame(num)} received: forwarded to process group {self.pgid}, SIGKILL after {self.s.grace:g} s"
        )
        if self.phase in (RUN, DRAIN):
            self.phase, self.kill_at = TERM, now + self.s.grace

    def _signal_group(self, num: int) -> None:
        try:
            os.killpg(self.pgid, num)
        except (ProcessLookupError, PermissionError):
            pass

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return _has_live_member(self.pgid)

    def _outcome(self) -> Outcome:
        last = self.progress.line
        if self.stop_signal is not None:
            name = _signame(self.stop_signal)
            return Outcome(
                rc=128 + self.stop_signal,
                reason=f"{name} received",
                stop_signal=self.stop_signal,
                last_progress=last,
            )
        if self.idle_reason is not None:
            return Outcome(rc=EXIT_IDLE, reason=self.idle_reason, idle=True, last_progress=last)
        if self.rc is None:  # SIGKILLed yet never reaped (stuck in the kernel): report it as killed
            return Outcome(rc=128 + signal.SIGKILL, reason="did not exit after SIGKILL", last_progress=last)
        if self.rc < 0:
            return Outcome(rc=128 - self.rc, reason=f"killed by {_signame(-self.rc)}", last_progress=last)
        return Outcome(rc=self.rc, reason=f"exit {self.rc}", last_progress=last)


class _Say:
    """One `agpt watch: ...` line on stderr, and in the log so the attempt's record says what happened."""

    def __init__(self, err_fd: int, log_fd: int | None) -> None:
        self.err_fd = err_fd
        self.log_fd = log_fd

    def __call__(self, msg: str) -> None:
        line = f"agpt watch: {msg}\n".encode("utf-8", "replace")
        for fd in (self.err_fd, self.log_fd):
            if fd is not None:
                try:
                    _write_all(fd, line)
                except OSError:
                    pass


class _LogFile:
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
            self.fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise BadInput(f"--log {os.fspath(self.log)}: {e.strerror}") from None
        self._owned = True
        return self.fd

    def __exit__(self, *exc: object) -> None:
        if self._owned and self.fd is not None:
            os.close(self.fd)


def _attempts(s: WatchSettings) -> Iterator[tuple[int, float]]:
    """(attempt number, seconds to sleep before it): the backoff schedule, its last value repeated."""
    yield 1, 0.0
    for i in range(1, s.retries + 1):
        yield i + 1, s.backoff[min(i - 1, len(s.backoff) - 1)]


def run_settings(
    cmd: Sequence[str],
    settings: WatchSettings,
    *,
    log: str | os.PathLike[str] | int | None = None,
    env: Mapping[str, str] | None = None,
    out_fd: int = 1,
    err_fd: int = 2,
) -> Outcome:
    """Run CMD under the watchdog with retries; the Outcome of the last attempt.

    Each attempt sees AGPT_WATCH_ATTEMPT=N in its environment.  A retry follows any non-zero exit (124
    included) except a command that cannot start or a SIGTERM/SIGINT sent to us, which end the run at once.
    """
    if not cmd:
        raise BadInput("no command given: agpt watch [OPTIONS] -- CMD [ARGS...]")
    base = dict(os.environ if env is None else env)
    total = settings.retries + 1
    with _Signals() as sig, _LogFile(log) as log_fd:
        say = _Say(err_fd, log_fd)
        outcome = Outcome(rc=1, reason="not run")
        for n, delay in _attempts(settings):
            if n > 1:
                say(f"attempt {n - 1}/{total} failed ({outcome.reason}); attempt {n}/{total} in {delay:g} s")
                stop = sig.sleep(delay)
                if stop is not None:
                    say(f"{_signame(stop)} received while waiting to retry; not retrying")
                    return Outcome(rc=128 + stop, reason=f"{_signame(stop)} received", stop_signal=stop)
            base["AGPT_WATCH_ATTEMPT"] = str(n)
            attempt = _Attempt(
                cmd, settings, sig=sig, log_fd=log_fd, env=base, out_fd=out_fd, err_fd=err_fd, say=say
            )
            outcome = attempt.run()
            if outcome.rc == 0 or outcome.stop_signal is not None or outcome.spawn_failed:
                break
        if outcome.rc != 0 and total > 1 and not outcome.spawn_failed and outcome.stop_signal is None:
            say(f"attempt {total}/{total} failed ({outcome.reason}); no retries left")
        return outcome


def _settings(
    *,
    timeout: float,
    startup_timeout: float | None,
    grace: float,
    retries: int,
    backoff: Sequence[float],
    progress_re: str | None,
    progress_file: str | os.PathLike[str] | None,
) -> WatchSettings:
    return WatchSettings(
        timeout=timeout,
        startup_timeout=startup_timeout,
        grace=grace,
        retries=retries,
        backoff=tuple(backoff),
        progress_re=progress_re if progress_re is not None else _env_progress_re(),
        progress_file=os.fspath(progress_file) if progress_file is not None else None,
    )


def watch(
    cmd: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    startup_timeout: float | None = None,
    grace: float = DEFAULT_GRACE,
    progress_re: str | None = None,
    progress_file: str | os.PathLike[str] | None = None,
    log: str | os.PathLike[str] | int | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run CMD once under the idle watchdog; its exit status (124 on idle, 128+N on a signal).

    `progress_re` defaults to $FAILOVER_PROGRESS_RE, else DEFAULT_PROGRESS_RE.  Raises BadInput on bad values.
    """
    return run_with_retries(
        cmd,
        retries=0,
        timeout=timeout,
        startup_timeout=startup_timeout,
        grace=grace,
        progress_re=progress_re,
        progress_file=progress_file,
        log=log,
        env=env,
    )


def run_with_retries(
    cmd: Sequence[str],
    *,
    retries: int = 0,
    backoff: Sequence[float] = DEFAULT_BACKOFF,
    timeout: float = DEFAULT_TIMEOUT,
    startup_timeout: float | None = None,
    grace: float = DEFAULT_GRACE,
    progress_re: str | None = None,
    progress_file: str | os.PathLike[str] | None = None,
    log: str | os.PathLike[str] | int | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """`watch`, re-run up to `retries` times on a non-zero exit after the `backoff` schedule; the last status."""
    s = _settings(
        timeout=timeout,
        startup_timeout=startup_timeout,
        grace=grace,
        retries=retries,
        backoff=backoff,
        progress_re=progress_re,
        progress_file=progress_file,
    )
    return run_settings(cmd, s, log=log, env=env).rc


def _env_progress_re() -> str:
    return os.environ.get("FAILOVER_PROGRESS_RE") or DEFAULT_PROGRESS_RE


# ---- command line ------------------------------------------------------------------------------------------
DESCRIPTION = """\
Run CMD and kill it when its output goes idle: no byte on its stdout or stderr (any process it started counts,
a partial line or a lone \\r counts) for --timeout seconds.  Then SIGTERM goes to CMD's whole process group,
SIGKILL follows after --grace seconds, and agpt watch exits 124 with one line on stderr saying why.

Until the first output line that matches the progress regex ($FAILOVER_PROGRESS_RE, default
'\\bstep[=:] ?[0-9]+'), --startup-timeout applies instead: model build, compile and checkpoint load can take
many minutes before the first step.  With --progress-file, idle also means that file's mtime has not advanced
(a job whose ranks still print warnings but make no step progress is caught too).

Output passes through byte for byte, stdout to stdout and stderr to stderr.  SIGTERM, SIGINT, SIGHUP, SIGUSR1
and SIGUSR2 sent to agpt watch are forwarded to CMD's process group; after SIGTERM or SIGINT it waits --grace
seconds, SIGKILLs the group and exits 128+N.  When CMD exits, whatever it left behind in its group gets
{drain:g} s to close the pipes, then SIGTERM (and SIGKILL after --grace): a rank that outlives its launcher
would hold the node.
"""

EPILOG = """\
exit status:
  CMD's own; 128+N when a signal N killed it or was sent to agpt watch; 124 when it went idle;
  127 when CMD does not exist, 126 when it cannot run; 2 on a bad flag (one line naming it).
  With --retries, the status of the last attempt; each attempt sees AGPT_WATCH_ATTEMPT=N.

examples:
  # kill the launcher after 10 idle minutes, allowing 30 minutes before the first step
  agpt watch --timeout 600 --startup-timeout 1800 -- mpiexec -n 8 python -m agpt train cfg.yaml

  # also idle when the trainer's progress file stops advancing; keep a copy of both streams
  agpt watch --timeout 600 --progress-file "$AGPT_RUN_DIR/progress" --log attempt.log -- srun ...

  # a flaky copy: up to 3 retries after 5, 10 and 20 s; any failure, 124 included, is retried
  agpt watch --timeout 120 --retries 3 --backoff 5,10,20 -- rsync -a src/ dst/

  # when the training environment itself is broken (standard library only)
  PYTHONPATH=python python3 -m agpt.watch --timeout 60 -- ./job.sh
"""


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def _schedule(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(p) for p in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(v) and v >= 0 for v in values):
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of seconds >= 0 (like 5,10,20): {text!r}"
        )
    return values


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line naming the flag, exit 2 (argparse would print the usage block too)."""
        self.exit(EXIT_USAGE, f"agpt watch: error: {message}\n")


def _parser() -> _Parser:
    p = _Parser(
        prog="agpt watch",
        usage="agpt watch [OPTIONS] -- CMD [ARGS...]",
        description=DESCRIPTION.format(drain=DRAIN_S),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"idle seconds before the kill; 0 disables (default {DEFAULT_TIMEOUT:g})",
    )
    p.add_argument(
        "--startup-timeout",
        type=_seconds,
        default=None,
        metavar="S",
        help="idle limit until the first progress line; 0 disables (default: --timeout)",
    )
    p.add_argument(
        "--grace",
        type=_seconds,
        default=DEFAULT_GRACE,
        metavar="S",
        help=f"seconds between SIGTERM and SIGKILL (default {DEFAULT_GRACE:g})",
    )
    p.add_argument(
        "--retries",
        type=_count,
        default=0,
        metavar="N",
        help="re-run up to N times on a non-zero exit, 124 included (default 0)",
    )
    p.add_argument(
        "--backoff",
        type=_schedule,
        default=DEFAULT_BACKOFF,
        metavar="S,S,...",
        help="seconds to wait before each retry, the last repeated (default 5,10,20,40,60)",
    )
    p.add_argument(
        "--log", metavar="FILE", help="also append both streams, interleaved as they came, to FILE"
    )
    p.add_argument(
        "--progress-file",
        metavar="FILE",
        help="idle also when FILE's mtime has not advanced for the idle limit",
    )
    p.add_argument(
        "--progress-re",
        metavar="REGEX",
        default=None,
        help="a progress line (default $FAILOVER_PROGRESS_RE, else '\\bstep[=:] ?[0-9]+')",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    cmd: list[str] | None = None
    if "--" in args:
        cut = args.index("--")
        args, cmd = args[:cut], args[cut + 1 :]
    parser = _parser()
    try:
        ns, extra = parser.parse_known_args(args)
        if extra:
            parser.error(f"unexpected {extra[0]!r}: put the command after '--': agpt watch [OPTIONS] -- CMD")
        if cmd is None:
            parser.error("missing '--' and the command: agpt watch [OPTIONS] -- CMD [ARGS...]")
        if not cmd:
            parser.error("no command after '--': agpt watch [OPTIONS] -- CMD [ARGS...]")
    except SystemExit as e:  # --help, or a usage error already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    try:
        settings = _settings(
            timeout=ns.timeout,
            startup_timeout=ns.startup_timeout,
            grace=ns.grace,
            retries=ns.retries,
            backoff=ns.backoff,
            progress_re=ns.progress_re,
            progress_file=ns.progress_file,
        )
        return run_settings(cmd, settings, log=ns.log).rc
    except BadInput as e:
        sys.stderr.write(f"agpt watch: error: {e}\n")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
