"""The child: CMD started in its own session with its stdout and stderr on two pipes, and its process group.

The child leads its own session, so one killpg() reaches every rank the launcher started, and a grandchild
that still holds a pipe cannot keep us waiting: what is left of the group once CMD exits is terminated too.
"""

from __future__ import annotations

import fcntl
import os
import subprocess

from agpt.watch.output import CHUNK

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux; elsewhere the call fails and is skipped


class Child:
    """CMD running: `streams` maps our read end of each pipe to 1 (its stdout) or 2 (its stderr).

    Raises what Popen raises (FileNotFoundError: not found; OSError: cannot run), with no pipe left open.
    """

    def __init__(self, cmd: Sequence[str], env: Mapping[str, str] | None) -> None:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        for fd in (out_r, err_r):
            try:
                fcntl.fcntl(fd, F_SETPIPE_SZ, CHUNK)
            except OSError:
                pass  # the default 64 KiB pipe still works, with more wake-ups
        try:
            self.proc = subprocess.Popen(cmd, stdout=out_w, stderr=err_w, start_new_session=True, env=env)
        except OSError:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        self.pgid = self.proc.pid  # start_new_session: the child leads its own session and group
        self.streams = {out_r: 1, err_r: 2}

    def poll(self) -> int | None:
        """CMD's exit status once it has exited (-N: killed by signal N), else None."""
        return self.proc.poll()

    def signal_group(self, num: int) -> None:
        try:
            os.killpg(self.pgid, num)
        except (ProcessLookupError, PermissionError):
            pass

    def group_alive(self) -> bool:
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return _has_live_member(self.pgid)


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
