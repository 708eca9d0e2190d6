"""Evidence that the attempt cannot go on: end it now instead of waiting for silence (kill on evidence).

Two kinds, each optional:
  lines       a launcher's notice that a node failed or a task died of a signal (`srun: error: Node failure on
              n3`, PALS' `rank 5 died from signal 11`), read from a JSON file of {id, regex, flags, needles} that
              `agpt failover patterns --ends` writes from the pattern sets (the `ends` patterns).  The ranks
              left cannot make progress: each would only wait in a collective for its own timeout.
  heartbeats  RUN_DIR/heartbeat's records show a host `stopped` (agpt.heartbeat.reader): asked only once the
              output has been silent for two publish intervals (the other ranks then wait in a collective),
              once per interval, and only the same host found stopped by two looks in a row counts.
The watch then SIGTERMs the group and SIGKILLs it after --evidence-grace (default 2 s: the launcher's own
teardown, srun turns a SIGTERM into a SIGKILL of every task) rather than --grace, which stays for the
walltime and pre-emption saves.  Needles (lowercase literals) gate the regexes, so a chatty log costs a
lowercase copy and a few substring searches per chunk.  Standard library only.
"""

from __future__ import annotations

import os
import re
import signal
import time

from agpt import rundir
from agpt.errors import BadInput

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

CARRY_MAX = 4096  # the longest partial line kept to match across chunk boundaries


class LineEvidence:
    """The `ends` patterns over complete output lines; `feed` answers the first evidence line, once."""

    def __init__(self, entries: Sequence[tuple[str, re.Pattern[bytes], tuple[bytes, ...] | None]]) -> None:
        self.entries = list(entries)
        self.carry: dict[int, bytes] = {}

    @classmethod
    def from_file(cls, path: str) -> LineEvidence:
        """Read --kill-on FILE; a missing or malformed file is BadInput naming it (before the child starts)."""
        try:
            raw = rundir.read_record(path, limit=rundir.TEXT_MAX)  # the one reader: never a FIFO, bounded
        except OSError as e:
            raise BadInput(f"--kill-on {path}: {e.strerror or e}") from None
        except ValueError as e:
            raise BadInput(f"--kill-on {path}: not JSON ({e})") from None
        return cls.from_list(raw, f"--kill-on {path}")

    @classmethod
    def from_list(cls, raw: Any, where: str) -> LineEvidence:
        """The `ends` patterns as `agpt failover patterns --ends` lists them (agpt.failover.patterns.ends); a
        malformed list is BadInput starting with WHERE."""
        if not isinstance(raw, list):
            raise BadInput(f"{where}: expected a list of {{id, regex, flags, needles}}")
        entries = []
        for i, item in enumerate(raw):
            if not isinstance(item, dict) or not isinstance(item.get("regex"), str):
                raise BadInput(f"{where}: entry {i}: expected an object with a regex")
            flags = re.IGNORECASE if "i" in str(item.get("flags", "")) else 0
            try:
                rx = re.compile(item["regex"].encode("utf-8"), flags)
            except re.error as err:
                raise BadInput(f"{where}: entry {i} ({item.get('id')}): bad regex: {err}") from None
            needles = item.get("needles")
            nd = tuple(str(n).lower().encode("utf-8") for n in needles) if isinstance(needles, list) else None
            entries.append((str(item.get("id", i)), rx, nd or None))
        return cls(entries)

    def feed(self, key: int, data: bytes | memoryview) -> str | None:
        """The first evidence line among the complete lines of this chunk of stream KEY, else None."""
        if not self.entries:
            return None
        chunk = bytes(data)
        nl = chunk.rfind(b"\n")
        old = self.carry.get(key, b"")
        if nl < 0:
            self.carry[key] = (old + chunk)[-CARRY_MAX:]
            return None
        region = old + chunk[: nl + 1]
        self.carry[key] = chunk[nl + 1 :][-CARRY_MAX:]
        low = region.lower()
        for pid, rx, needles in self.entries:
            if needles is not None and not any(n in low for n in needles):
                continue
            m = rx.search(region)
            if m is not None:
                start = region.rfind(b"\n", 0, m.start()) + 1
                end = region.find(b"\n", m.end())
                line = region[start : end if end >= 0 else len(region)]
                return f"{line.decode('utf-8', 'replace').strip()[:200]} [{pid}]"
        return None


class HeartbeatEvidence:
    """A host the heartbeats show `stopped` in this attempt (AGPT_ATTEMPT_ID, hosts FAILOVER_HOSTS)."""

    def __init__(self, hb_dir: str, env: dict[str, str]) -> None:
        self.dir = hb_dir
        self.attempt = env.get("AGPT_ATTEMPT_ID") or None
        hosts = [h for h in env.get("FAILOVER_HOSTS", "").split(",") if h]
        self.hosts = hosts or None
        self.interval = _interval(env.get("AGPT_HEARTBEAT_INTERVAL_S"))  # until a record says its own
        self.next_at = 0.0
        self.last: str | None = None  # the stopped host of the previous look: two looks in a row must agree

    def quiet_s(self) -> float:
        """Silence on the output before the records are read: two publish intervals."""
        return 2 * self.interval

    def due(self, now: float, silent_since: float) -> float:
        """When to look next (monotonic): after quiet_s of silence, then once per interval."""
        return max(silent_since + self.quiet_s(), self.next_at)

    def check(self, now: float) -> str | None:
        """The stopped host's evidence line, or None; never raises (the records are data)."""
        self.next_at = now + self.interval
        previous = self.last
        try:
            from agpt.heartbeat import reader

            recs, _notes = reader.read_records(self.dir, self.hosts, self.attempt)
            if recs:
                self.interval = max(
                    reader.as_float(r.get("interval_s"), self.interval) for r in recs.values()
                )
            found = reader.attribute(self.dir, self.hosts, self.attempt)
        except Exception:  # a torn record must never kill a healthy attempt
            return None
        stopped = [h for h in found.bad_hosts if found.kinds.get(h) == "stopped"]
        host, self.last = (stopped[0] if stopped else None), (stopped[0] if stopped else None)
        if host is None or host != previous:
            return None  # one look is a moment; the same host stopped one interval later is evidence
        i = found.bad_hosts.index(host)
        return found.evidence[i] if i < len(found.evidence) else f"heartbeat: {host} stopped"


def reap_detached(child: Any, grace: float) -> bool:
    """--detach-teardown: a forked reaper SIGKILLs CHILD's group after GRACE unless it is gone by then, so the
    watch returns at once and the failover loop plans the relaunch while the teardown runs.  False when it cannot
    fork (the watch then waits as without it).  The watch is single-threaded, so the fork is safe."""
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid:
        return True
    try:  # the reaper: its own session, so the loop's end does not take it before the group is gone
        os.setsid()
        os.closerange(3, 65536)
        end = time.monotonic() + grace
        while time.monotonic() < end and child.group_alive():
            time.sleep(0.05)
        child.signal_group(signal.SIGKILL)
    finally:
        os._exit(0)


def _interval(text: str | None) -> float:
    """The trainer's publish interval as its environment sets it (heartbeat.interval_s), else its default."""
    from agpt.heartbeat.writer import DEFAULT_INTERVAL_S

    try:
        v = float(text or "")
    except ValueError:
        return DEFAULT_INTERVAL_S
    return v if 0.05 <= v <= 3600 else DEFAULT_INTERVAL_S
