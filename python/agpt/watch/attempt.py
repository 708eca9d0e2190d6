"""One run of CMD under the watchdog: the poll loop and its states, from spawn to the Outcome.

One thread and one poll() over the child's two pipes plus the self-pipe that signals wake (agpt.watch.signals).
The poll timeout is the time to the next deadline (agpt.watch.idle, the grace period, the drain), so a quiet child
costs no CPU; output is passed on as it comes (agpt.watch.output).
"""

from __future__ import annotations

import math
import os
import re
import select
import signal
import time

from agpt.errors import EXIT_IDLE
from agpt.watch.child import Child
from agpt.watch.evidence import HeartbeatEvidence, LineEvidence, reap_detached
from agpt.watch.idle import Idle
from agpt.watch.output import Passthrough, Progress, Say
from agpt.watch.settings import EXIT_CANNOT_RUN, EXIT_NOT_FOUND, Outcome, WatchSettings
from agpt.watch.signals import STOPPING, Signals, signame

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

# After CMD exits, how long what it left behind may keep the pipes open before its process group is terminated.
DRAIN_S = 2.0
# After SIGKILL, how long to wait for the pipes to close (a process outside the group may hold them) before leaving.
REAP_S = 2.0
# While CMD has exited but its group still has members, how often to look whether they are gone (only in that state).
GROUP_CHECK_S = 0.1
# Without SIGCHLD (not the main thread), how often to look whether CMD has exited.
TICK_S = 0.2

# The longest single poll(): its timeout is a C int of milliseconds (24.8 days); a longer wait is several polls.
POLL_MAX_MS = 3_600_000

RUN, DRAIN, TERM, KILLED, DONE = range(5)


class Attempt:
    """A small state machine driven by poll().

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
        sig: Signals,
        log_fd: int | None,
        env: Mapping[str, str] | None,
        out_fd: int,
        err_fd: int,
        say: Say,
    ) -> None:
        self.cmd = list(cmd)
        self.s = s
        self.sig = sig
        self.env = env
        self.say = say
        pattern = re.compile(s.progress_re.encode("utf-8", "surrogateescape"), re.MULTILINE)
        eager = s.startup_timeout is not None and s.startup_timeout != s.timeout
        self.progress = Progress(pattern, eager)
        self.out = Passthrough({1: out_fd, 2: err_fd}, log_fd, say, self.progress)
        self.idle = Idle(s, self.progress)
        # Kill on evidence (agpt.watch.evidence): a launcher's node-failure or task-death line, a stopped host.
        self.lines = LineEvidence.from_file(s.kill_on) if s.kill_on else None
        if self.lines is not None:
            self.out.zero_copy = False  # the bytes must pass through our memory to be read
            self.out.tap = self._tap
        self.hb = HeartbeatEvidence(s.heartbeat_dir, dict(env or os.environ)) if s.heartbeat_dir else None
        self.evidence: str | None = None
        self.evidence_at: float | None = None
        self.hb_evidence = False  # a stopped host ended it: reported as the watchdog's hang (124)
        self.phase = RUN
        self.rc: int | None = None
        self.idle_reason: str | None = None
        self.stop_signal: int | None = None
        self.kill_at = math.inf
        self.until = math.inf  # end of DRAIN or of KILLED
        self.idle_at: float | None = None  # when the idle limit fired, a stop signal came, CMD exited
        self.signal_at: float | None = None
        self.exited_at: float | None = None
        self.streams: dict[int, int] = {}  # our read end -> 1 or 2
        self.poller = select.poll()

    def run(self) -> Outcome:
        try:
            self.child = Child(self.cmd, self.env)
        except FileNotFoundError:
            self.say(f"{self.cmd[0]}: command not found")
            return Outcome(rc=EXIT_NOT_FOUND, reason="command not found", spawn_failed=True)
        except OSError as e:
            self.say(f"{self.cmd[0]}: cannot run: {e.strerror}")
            return Outcome(rc=EXIT_CANNOT_RUN, reason=f"cannot run: {e.strerror}", spawn_failed=True)
        self.streams = dict(self.child.streams)
        try:
            self._loop()
        except BaseException:
            self.child.signal_group(signal.SIGKILL)  # the child is ours to end, whatever broke here
            raise
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
                self._reap()
            self._advance(now)
            if self.phase == DONE:
                return
            wake = self._next_deadline(now)
            ms = -1 if wake == math.inf else min(POLL_MAX_MS, max(0, math.ceil((wake - now) * 1000)))
            for fd, _ev in poller.poll(ms):
                if fd == self.sig.rfd:
                    for num in self.sig.take():
                        self._on_signal(num)
                elif fd in self.streams:
                    self._read(fd)

    def _next_deadline(self, now: float) -> float:
        wake = math.inf
        if not self.sig.active and self.rc is None:
            wake = now + TICK_S  # no SIGCHLD off the main thread: look at the child on a tick
        if self.phase == RUN:
            wake = min(wake, self.idle.wake())
            if self.hb is not None:
                wake = min(wake, self.hb.due(now, self.idle.last_output))
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
                if (
                    self.phase == RUN
                    and self.hb is not None
                    and now >= self.hb.due(now, self.idle.last_output)
                ):
                    found = self.hb.check(now)
                    if found is not None:
                        self.hb_evidence = True
                        self._on_evidence(found, now)
        if self.phase == DRAIN and (not self.streams or now >= self.until):
            if self.child.group_alive():
                self.child.signal_group(signal.SIGTERM)
                self.phase, self.kill_at = TERM, now + self.s.grace
            else:
                self.phase = DONE
        if self.phase == TERM:
            if self.rc is not None and not self.streams and not self.child.group_alive():
                self.phase = DONE
            elif now >= self.kill_at:
                self.child.signal_group(signal.SIGKILL)
                self.phase, self.until = KILLED, now + REAP_S
        if self.phase == KILLED and ((self.rc is not None and not self.streams) or now >= self.until):
            self.phase = DONE

    def _check_idle(self, now: float) -> None:
        reason = self.idle.reason(now)
        if reason is None:
            return
        self.idle_reason = reason
        self.idle_at = now
        pgid = self.child.pgid
        self.say(f"{reason}; SIGTERM to process group {pgid}, SIGKILL after {self.s.grace:g} s")
        self.child.signal_group(signal.SIGTERM)
        self.phase, self.kill_at = TERM, now + self.s.grace

    def _on_evidence(self, line: str, now: float) -> None:
        """End the attempt now: the ranks left cannot make progress (no --grace: that is for saves)."""
        if self.evidence is not None or self.stop_signal is not None or self.phase not in (RUN, DRAIN):
            return
        self.evidence, self.evidence_at = line, now
        pgid = self.child.pgid
        self.say(
            f"evidence: {line}; SIGTERM to process group {pgid}, SIGKILL after {self.s.evidence_grace:g} s"
        )
        if self.rc is None or self.child.group_alive():  # else CMD and its group are gone: the pipes drain
            self.child.signal_group(signal.SIGTERM)
            self.phase, self.kill_at = TERM, now + min(self.s.evidence_grace, self.s.grace)
            if self.s.detach_teardown and reap_detached(self.child, min(self.s.evidence_grace, self.s.grace)):
                self.phase = DONE  # the caller plans the relaunch while the teardown runs

    def _tap(self, fd: int, data: memoryview) -> None:
        assert self.lines is not None
        found = self.lines.feed(fd, data)
        if found is not None:
            self._on_evidence(found, time.monotonic())

    # ---- events ------------------------------------------------------------------------------------------
    def _read(self, fd: int) -> None:
        at, done = self.out.pump(fd, self.streams[fd])
        if at is not None:
            self.idle.last_output = at
        if done:
            self._close(fd)

    def _close(self, fd: int) -> None:
        if self.streams.pop(fd, None) is not None:
            try:
                self.poller.unregister(fd)
            except KeyError:
                pass
            os.close(fd)

    def _reap(self) -> None:
        if self.rc is None:
            self.rc = self.child.poll()
            if self.rc is not None:
                self.exited_at = time.monotonic()

    def _on_signal(self, num: int) -> None:
        now = time.monotonic()
        if num == signal.SIGCHLD:
            self._reap()
            return
        pgid = self.child.pgid
        if num not in STOPPING:
            if self.phase not in (KILLED, DONE):
                self.child.signal_group(num)
                self.say(f"forwarded {signame(num)} to process group {pgid}")
            return
        if self.stop_signal is not None:  # asked twice: stop waiting out the grace period
            if self.phase == TERM:
                self.say(f"{signame(num)} again: SIGKILL to process group {pgid} now")
                self.kill_at = now
            return
        self.stop_signal = num  # recorded even while killing: no retry may follow
        self.signal_at = now
        if self.phase in (KILLED, DONE):
            return
        self.child.signal_group(num)
        self.say(
            f"{signame(num)} received: forwarded to process group {pgid}, SIGKILL after {self.s.grace:g} s"
        )
        if self.phase in (RUN, DRAIN):
            self.phase, self.kill_at = TERM, now + self.s.grace

    def times(self) -> dict[str, float | str]:
        """The attempt's end on the wall clock (epochs): its last progress line, when the end first showed (the
        first output after that line, the idle limit, a stop signal, evidence or CMD's exit) and now (torn
        down); `evidence`: the line that ended it at once, when one did."""
        shift = time.time() - time.monotonic()
        p = self.progress
        out = {"last_progress": p.at} if p.at is not None else {}
        signs = [p.after_at if p.at is not None else None, self.idle_at, self.signal_at, self.exited_at,
                 self.evidence_at]  # fmt: skip
        if any(t is not None for t in signs):
            out["detected"] = min(t for t in signs if t is not None)
        out["ended"] = time.monotonic()
        rec: dict[str, float | str] = {k: round(v + shift, 3) for k, v in out.items()}
        if self.evidence is not None:
            rec["evidence"] = self.evidence
        return rec

    def _outcome(self) -> Outcome:
        last = self.progress.line
        if self.stop_signal is not None:
            name = signame(self.stop_signal)
            return Outcome(
                rc=128 + self.stop_signal,
                reason=f"{name} received",
                stop_signal=self.stop_signal,
                last_progress=last,
            )
        if self.idle_reason is not None:
            return Outcome(rc=EXIT_IDLE, reason=self.idle_reason, idle=True, last_progress=last)
        if self.hb_evidence:  # a hang proven early: the watchdog's exit, so the heartbeats name the host
            return Outcome(rc=EXIT_IDLE, reason=f"evidence: {self.evidence}", idle=True, last_progress=last,
                           evidence=self.evidence)  # fmt: skip
        if self.evidence is not None:
            rc = 128 + signal.SIGKILL if self.rc is None else (128 - self.rc if self.rc < 0 else self.rc)
            return Outcome(
                rc=rc, reason=f"evidence: {self.evidence}", last_progress=last, evidence=self.evidence
            )
        if self.rc is None:  # SIGKILLed yet never reaped (stuck in the kernel): report it as killed
            return Outcome(rc=128 + signal.SIGKILL, reason="did not exit after SIGKILL", last_progress=last)
        if self.rc < 0:
            return Outcome(rc=128 - self.rc, reason=f"killed by {signame(-self.rc)}", last_progress=last)
        return Outcome(rc=self.rc, reason=f"exit {self.rc}", last_progress=last)
