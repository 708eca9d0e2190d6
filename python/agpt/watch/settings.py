"""`agpt watch`'s settings and what an attempt's end looks like: validated once, before any child starts.

Plain slotted classes rather than dataclasses: `dataclasses` pulls in `inspect`, a fifth of our start-up.
"""

from __future__ import annotations

import os
import re

from agpt import numeric, rundir
from agpt.errors import BadInput

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

DEFAULT_TIMEOUT = 600.0
DEFAULT_GRACE = 10.0
# Kill on evidence (agpt.watch.evidence): SIGTERM, then this long for the launcher's own teardown, then SIGKILL.
DEFAULT_EVIDENCE_GRACE = 2.0
KILL_ON_EVIDENCE = (
    True  # FAILOVER_KILL_ON_EVIDENCE: the failover loop hands the watch --kill-on/--heartbeat-dir
)
DEFAULT_BACKOFF: tuple[float, ...] = (5.0, 10.0, 20.0, 40.0, 60.0)
DEFAULT_PROGRESS_RE = rundir.PROGRESS_RE
EXIT_CANNOT_RUN = 126
EXIT_NOT_FOUND = 127


def _check_seconds(flag: str, value: float) -> float:
    """Seconds from 0 to a year (agpt.numeric): a larger value would overflow the poll and the sleeps, after the
    child had started."""
    return numeric.seconds(value, flag)


class WatchSettings:
    """How long silence may last and what to do then.  Validates itself: bad values raise BadInput (exit 2)."""

    __slots__ = (
        "backoff",
        "detach_teardown",
        "evidence_grace",
        "grace",
        "heartbeat_dir",
        "kill_on",
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
        progress_re: str | None = None,  # None: $FAILOVER_PROGRESS_RE, else DEFAULT_PROGRESS_RE
        progress_file: str | os.PathLike[str] | None = None,
        kill_on: str | os.PathLike[str] | None = None,  # JSON of the `ends` patterns (agpt.watch.evidence)
        heartbeat_dir: str | os.PathLike[str] | None = None,  # a host stopped in its records ends the attempt
        evidence_grace: float = DEFAULT_EVIDENCE_GRACE,  # SIGTERM to SIGKILL after evidence
        detach_teardown: bool = False,  # after evidence: return at once, a reaper ends the group (agpt.watch.evidence)
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
        if progress_re is None:
            progress_re = os.environ.get("FAILOVER_PROGRESS_RE") or DEFAULT_PROGRESS_RE
        try:
            re.compile(progress_re)
        except re.error as e:
            raise BadInput(f"FAILOVER_PROGRESS_RE / --progress-re {progress_re!r}: {e}") from None
        self.progress_re = progress_re
        self.progress_file = os.fspath(progress_file) if progress_file is not None else None
        self.kill_on = os.fspath(kill_on) if kill_on else None
        self.heartbeat_dir = os.fspath(heartbeat_dir) if heartbeat_dir else None
        self.evidence_grace = _check_seconds("--evidence-grace", evidence_grace)
        self.detach_teardown = bool(detach_teardown)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in sorted(self.__slots__))
        return f"WatchSettings({fields})"

    def limit(self, progressed: bool) -> float:
        """The idle limit in force: the startup one until the first progress is seen."""
        if progressed or self.startup_timeout is None:
            return self.timeout
        return self.startup_timeout

    def attempts(self) -> Iterator[tuple[int, float]]:
        """(attempt number, seconds to sleep before it): the backoff schedule, its last value repeated."""
        yield 1, 0.0
        for i in range(1, self.retries + 1):
            yield i + 1, self.backoff[min(i - 1, len(self.backoff) - 1)]


class Outcome:
    """How one attempt ended; `rc` is what `agpt watch` exits with."""

    __slots__ = ("evidence", "idle", "last_progress", "rc", "reason", "spawn_failed", "stop_signal")

    def __init__(
        self,
        *,
        rc: int,
        reason: str,  # one line: "exit 3", "killed by SIGSEGV", "idle: no output ...", "SIGTERM received"
        idle: bool = False,
        stop_signal: int | None = None,  # a SIGTERM/SIGINT sent to watch itself: never retried
        spawn_failed: bool = False,  # command not found / not executable: never retried
        last_progress: str | None = None,
        evidence: str | None = None,  # the line that ended the attempt (kill on evidence)
    ) -> None:
        self.rc = rc
        self.reason = reason
        self.idle = idle
        self.stop_signal = stop_signal
        self.spawn_failed = spawn_failed
        self.last_progress = last_progress
        self.evidence = evidence

    def __repr__(self) -> str:
        return f"Outcome(rc={self.rc!r}, reason={self.reason!r})"
