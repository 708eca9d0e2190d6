"""Every subprocess we start is ours to end: a command runs as the leader of its own process group, and a timeout,
an error or a signal ends the whole group, not only its first process (a hook's `ssh`, a launcher's ranks).

Standard library only: the failover loop's hooks and preflight run through it on the recovery path.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the recovery path imports this module and starts fast
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

GRACE_S = 5.0  # SIGTERM to the group, then this long, then SIGKILL
_LIVE: set[int] = set()  # process groups run_group has started and not yet ended
_LOCK = threading.RLock()  # re-entrant: the signal handler may run while this thread holds it


def end_group(pgid: int, *, grace: float = GRACE_S, leader: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM to process group PGID, then SIGKILL once GRACE seconds pass with any of it left (an empty group:
    nothing to do, no wait).  LEADER, when given, is reaped meanwhile (a zombie would count as left)."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if leader is not None:
            leader.poll()
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_group(
    argv: Sequence[str],
    *,
    timeout: float | None,
    env: Mapping[str, str] | None = None,
    grace: float = GRACE_S,
) -> tuple[int | None, bytes]:
    """Run ARGV in a new session (its own process group), stdin from /dev/null, stdout and stderr together.

    Returns (exit status, output); the status is None when TIMEOUT (seconds; None or 0: none) ran out.  At the
    timeout, on an exception (KeyboardInterrupt included) and after the leader exits, whatever is left of its
    group gets SIGTERM, then SIGKILL after GRACE seconds: nothing it started outlives the call.
    """
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=None if env is None else dict(env),
    )
    with _LOCK:
        _LIVE.add(proc.pid)
    rc: int | None = None
    chunks: list[bytes] = []
    try:
        out, _ = proc.communicate(timeout=timeout or None)
        chunks.append(out)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        end_group(proc.pid, grace=grace, leader=proc)
        out, _ = proc.communicate()
        chunks.append(out)
    except BaseException:
        end_group(proc.pid, grace=0)
        proc.communicate()
        raise
    finally:
        with _LOCK:
            _LIVE.discard(proc.pid)
    end_group(proc.pid, grace=grace)  # what the leader left behind in its group (a daemon holding nothing)
    return rc, b"".join(chunks)


def end_all_on_signals() -> None:
    """From now on SIGTERM, SIGINT and SIGHUP sent to this process end every process group run_group started
    (SIGTERM, SIGKILL a second later) and then this process, with 128+N: a tool killed while its hooks run (threads
    included) leaves none of them behind, and its own `with` blocks (temporary folders) still clean up."""

    def handler(num: int, _frame: object) -> None:
        with _LOCK:
            groups = list(_LIVE)
        for pgid in groups:
            end_group(pgid, grace=1.0)
        sys.exit(128 + num)

    for num in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(num, handler)
