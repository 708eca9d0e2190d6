"""Signals to `agpt watch`: forwarded to the child's process group, and woken on through a self-pipe.

One thread and one poll(): signal handlers only append to `pending` and write a byte to a pipe
(signal.set_wakeup_fd, which also delivers SIGCHLD), so the poll loop wakes for them like for output.
"""

from __future__ import annotations

import os
import select
import signal
import time

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs start-up time
if TYPE_CHECKING:
    from types import FrameType

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOPPING = (signal.SIGTERM, signal.SIGINT)


def signame(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


class Signals:
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

    def __enter__(self) -> Signals:
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
