"""`agpt watch` without its command line: run CMD under the watchdog, re-run it a bounded number of times.

Each attempt sees AGPT_WATCH_ATTEMPT=N in its environment.  A retry follows any non-zero exit (124 included)
except a command that cannot start or a SIGTERM/SIGINT sent to us, which end the run at once.  The signal
handlers are ours only while this runs: a Python caller keeps its own.
"""

from __future__ import annotations

import os

from agpt import safewrite
from agpt.errors import BadInput
from agpt.watch.attempt import Attempt
from agpt.watch.output import LogFile, Say
from agpt.watch.settings import Outcome, WatchSettings
from agpt.watch.signals import Signals, signame

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any


def run_settings(
    cmd: Sequence[str],
    settings: WatchSettings,
    *,
    log: str | os.PathLike[str] | int | None = None,
    env: Mapping[str, str] | None = None,
    out_fd: int = 1,
    err_fd: int = 2,
    times: str | os.PathLike[str] | None = None,
) -> Outcome:
    """Run CMD under the watchdog with retries; the Outcome of the last attempt.  TIMES: a file for the last
    attempt's end on the wall clock (Attempt.times, JSON), the recovery clock's detection and teardown."""
    if not cmd:
        raise BadInput("no command given: agpt watch [OPTIONS] -- CMD [ARGS...]")
    base = dict(os.environ if env is None else env)
    total = settings.retries + 1
    with Signals() as sig, LogFile(log) as log_fd:
        say = Say(err_fd, log_fd)
        outcome = Outcome(rc=1, reason="not run")
        for n, delay in settings.attempts():
            if n > 1:
                say(f"attempt {n - 1}/{total} failed ({outcome.reason}); attempt {n}/{total} in {delay:g} s")
                stop = sig.sleep(delay)
                if stop is not None:
                    say(f"{signame(stop)} received while waiting to retry; not retrying")
                    return Outcome(rc=128 + stop, reason=f"{signame(stop)} received", stop_signal=stop)
            base["AGPT_WATCH_ATTEMPT"] = str(n)
            attempt = Attempt(
                cmd, settings, sig=sig, log_fd=log_fd, env=base, out_fd=out_fd, err_fd=err_fd, say=say
            )
            outcome = attempt.run()
            if times is not None:
                _write_times(times, attempt, say)
            if outcome.rc == 0 or outcome.stop_signal is not None or outcome.spawn_failed:
                break
        if outcome.rc != 0 and total > 1 and not outcome.spawn_failed and outcome.stop_signal is None:
            say(f"attempt {total}/{total} failed ({outcome.reason}); no retries left")
        return outcome


def _write_times(path: str | os.PathLike[str], attempt: Attempt, say: Say) -> None:
    """TIMES as one JSON object, replaced whole; a failure is said, never fatal."""
    import json

    try:
        safewrite.replace(os.fspath(path), json.dumps(attempt.times()) + "\n")
    except OSError as e:
        say(f"--times: {e}")


def watch(
    cmd: Sequence[str],
    *,
    log: str | os.PathLike[str] | int | None = None,
    env: Mapping[str, str] | None = None,
    times: str | os.PathLike[str] | None = None,
    **settings: Any,
) -> int:
    """Run CMD under the idle watchdog; its exit status (124 on idle, 128+N on a signal), of the last attempt
    when `retries` > 0.

    `settings` are WatchSettings' keywords: timeout, startup_timeout, grace, retries (default 0), backoff,
    progress_re (default $FAILOVER_PROGRESS_RE, else DEFAULT_PROGRESS_RE), progress_file.  Raises BadInput on a
    bad value, before anything runs.
    """
    return run_settings(cmd, WatchSettings(**settings), log=log, env=env, times=times).rc
