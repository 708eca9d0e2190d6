"""When silence means a hang: the idle deadlines of one attempt.

Idle is no byte on stdout/stderr for the limit in force, or (with --progress-file) that file's mtime not
advancing for it.  The limit in force is --startup-timeout until the first progress line (or the first change of
the progress file), --timeout after; 0 disables.  The poll loop sleeps until `wake()`, so a quiet child costs no
CPU, and asks `reason()` whether it is time to kill.
"""

from __future__ import annotations

import math
import os
import time

from agpt.watch.output import Progress
from agpt.watch.settings import WatchSettings


def _stat_sig(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_ino)


class Idle:
    """The last output, the progress file's last change, and the limits they are held to."""

    def __init__(self, s: WatchSettings, progress: Progress) -> None:
        self.s = s
        self.progress = progress
        self.last_output = time.monotonic()
        self.pf_sig = _stat_sig(s.progress_file) if s.progress_file else None
        self.pf_changed = self.pf_checked = self.last_output
        self.pf_seen = False

    def limit(self) -> float:
        return self.s.limit(self.progress.seen or self.pf_seen)

    def wake(self) -> float:
        """When the next idle verdict may be due (inf: never)."""
        limit = self.limit()
        if limit <= 0:
            return math.inf
        wake = self.last_output + limit
        if self.s.progress_file:
            wake = min(wake, self._pf_base() + limit)
        return wake

    def reason(self, now: float) -> str | None:
        """The idle verdict at `now` (`idle: ...`, naming the flag and the last progress line), or None."""
        limit = self.limit()
        if limit <= 0:
            return None
        what = None
        if now >= self.last_output + limit:
            what = f"no output on stdout/stderr for {now - self.last_output:.1f} s"
        elif self.s.progress_file and now >= self._pf_base() + limit:
            self._check_progress_file(now)
            limit = self.limit()
            if now >= self._pf_base() + limit:
                state = "not updated" if self.pf_seen or self.pf_sig is not None else "not written"
                what = f"progress file {self.s.progress_file} {state} for {now - self.pf_changed:.1f} s"
        if what is None:
            return None
        flag = "--timeout" if limit == self.s.timeout else "--startup-timeout"
        self.progress.flush(now)
        if self.progress.line is not None and self.progress.at is not None:
            seen = f"last progress {now - self.progress.at:.0f} s ago: {self.progress.line!r}"
        else:
            seen = "no progress line seen"
        return f"idle: {what} ({flag} {limit:g}); {seen}"

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
