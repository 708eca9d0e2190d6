"""`agpt warm serve`: one per node, for the whole job: keeps K parked processes (agpt.warm.parked), one per slot.

Each parked process is a fresh interpreter (subprocess, never a fork of one that imported torch).  It says `ready`
once it waits for a claim and `assigned` once a rank took it; the agent then parks a replacement in that slot
REPLACE_S later (after the rank's own start), so the next relaunch finds one while this rank trains.  A parked process that dies before its claim is
replaced; one that dies before it is ready three times in a row leaves its slot empty, said once (claims of that
slot then use the normal launch).  SIGTERM ends the agent and every process it started.  Standard library only.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

from agpt import nodelocal

MAX_EARLY_DEATHS = 3  # in a row, before ready: the slot is given up (an environment that cannot import)
TICK_S = 0.5
# After an assignment, the replacement is parked this much later: its imports (seconds of CPU) would otherwise
# compete with the rank's own start (model build, first step) on the node's cores.
REPLACE_S = 5.0


class Slot:
    def __init__(self, n: int) -> None:
        self.n = n
        self.proc: subprocess.Popen[bytes] | None = None
        self.rfd = -1
        self.ready = False
        self.early = 0  # deaths before ready, in a row
        self.given_up = False
        self.replace_at: float | None = None  # when to park the replacement of an assigned process


def serve(slots: int, cmd: list[str]) -> int:
    host = nodelocal.host_name()
    if not os.environ.get("AGPT_RUN_DIR"):
        print("agpt warm: error: AGPT_RUN_DIR is not set (the parked processes are named after the run directory)",
              file=sys.stderr, flush=True)  # fmt: skip
        return 2
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda s, f: stop.append(s))
    signal.signal(signal.SIGINT, lambda s, f: stop.append(s))
    table = [Slot(i) for i in range(slots)]
    busy: list[subprocess.Popen[bytes]] = []  # assigned: training ranks, reaped when they end
    for s in table:
        _spawn(s, cmd)
    print(f"agpt warm: agent on {host} (pid {os.getpid()}) parks {slots} slot(s) for {' '.join(cmd[:2])}",
          file=sys.stderr, flush=True)  # fmt: skip
    while not stop:
        fds = [s.rfd for s in table if s.rfd >= 0]
        try:
            ready, _, _ = select.select(fds, [], [], TICK_S)
        except InterruptedError:
            ready = []
        for s in table:
            if s.rfd in ready:
                _read(s, busy, cmd)
        now = time.monotonic()
        for s in table:
            if s.proc is not None and s.proc.poll() is not None:
                _died(s, host, cmd)
            if s.proc is None and s.replace_at is not None and now >= s.replace_at:
                s.replace_at = None
                _spawn(s, cmd)
        busy = [p for p in busy if p.poll() is None]
    for p in [s.proc for s in table if s.proc is not None] + busy:
        p.kill()
    return 0


def _spawn(s: Slot, cmd: list[str]) -> None:
    r, w = os.pipe()
    s.proc = subprocess.Popen([sys.executable, "-m", "agpt.warm.parked", "--slot", str(s.n), "--notify-fd", str(w),
                               "--", *cmd], pass_fds=(w,))  # fmt: skip
    os.close(w)
    if s.rfd >= 0:
        os.close(s.rfd)
    s.rfd, s.ready = r, False


def _read(s: Slot, busy: list[subprocess.Popen[bytes]], cmd: list[str]) -> None:
    try:
        data = os.read(s.rfd, 4096).decode(errors="replace")
    except OSError:
        data = ""
    if not data:  # its end closed: it exited, or was assigned and closed it
        os.close(s.rfd)
        s.rfd = -1
        return
    if "ready" in data:
        s.ready, s.early = True, 0
    if "assigned" in data and s.proc is not None:
        busy.append(s.proc)
        s.proc = None
        s.replace_at = (
            time.monotonic() + REPLACE_S
        )  # the next relaunch finds one parked while this rank trains


def _died(s: Slot, host: str, cmd: list[str]) -> None:
    assert s.proc is not None
    rc = s.proc.returncode
    s.proc = None
    if not s.ready:
        s.early += 1
    if s.early >= MAX_EARLY_DEATHS:
        if not s.given_up:
            print(f"agpt warm: slot {s.n} on {host}: the parked process exited {s.early} times before it was "
                  f"ready (last rc {rc}): no warm rank in this slot; its claims use the normal launch",
                  file=sys.stderr, flush=True)  # fmt: skip
            s.given_up = True
        return
    print(f"agpt warm: slot {s.n} on {host}: parked process exited (rc {rc}); parking another",
          file=sys.stderr, flush=True)  # fmt: skip
    time.sleep(min(5.0, 0.5 * s.early))
    _spawn(s, cmd)
