"""Heartbeats: where every rank is, published to the run directory at a bounded rate.

Why: a silent hang is otherwise found by blind rotation, one host per attempt; on a big job that is minutes of
watchdog and restart per guess.  Each rank keeps a small record (step, phase, time in it, recent compute time per
step, a tick counter a background thread advances) and writes it every `tick_s` to a node-local file (/dev/shm:
memory, not the shared file system).  The node's local rank 0 collects them and publishes ONE small file per node
per `interval_s` under RUN_DIR/heartbeat/<host>.json (a temporary file, then os.replace), so 4,096 nodes cost
4,096 creates+renames per interval, whatever the ranks per node.  A rank whose tick stops shows in its node's
record (the publisher measures on its own monotonic clock how long the tick has not moved); a publisher that
froze shows as a node record that stopped while the others went on (agpt.heartbeat.reader reads that).
The files and their fields are agpt.heartbeat.format's.

Any trainer, in a few lines (standard library only):

    from agpt.heartbeat import writer as heartbeat
    hb = heartbeat.start()                 # reads AGPT_RUN_DIR, the launcher's rank variables; None when off
    hb.phase("forward"); ...; hb.phase("collective"); ...; hb.step(n, compute_s=...)
    hb.stop()

A rank whose step has not advanced for `dump_after_s` writes its Python stacks (faulthandler, every thread) once
per step; its node's publisher gathers them into RUN_DIR/attempts/<attempt>.stacks/<host>.txt, so the watchdog's
kill leaves one file per node that says where every live rank was.  On rank 0, the straggler monitor
(agpt.heartbeat.straggler.StragglerMonitor) reads the node records each interval.
"""

from __future__ import annotations

import faulthandler
import json
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from agpt import nodelocal, numeric, rundir, safewrite
from agpt.errors import BadInput
from agpt.heartbeat.format import DIR, FORMAT, node_file, stacks_dir, write_atomic
from agpt.nodelocal import host_name
from agpt.rundir import LOCAL_RANK_VARS, LOCAL_SIZE_VARS, RANK_VARS, SLURM_TASKS_PER_NODE

DEFAULT_INTERVAL_S = 15.0
RECENT_STEPS = 8
# A node-local rank record written this long before the publisher started is another launch's leftover (the
# ranks of one launch start within seconds of each other).
STALE_LAUNCH_S = 60.0

_LOCAL_SIZE = (*LOCAL_SIZE_VARS, SLURM_TASKS_PER_NODE)  # the launchers' table: agpt.rundir.LAUNCHERS


def _env_int(env: Mapping[str, str], names: tuple[str, ...], default: int) -> int:
    for n in names:
        v = env.get(n, "")
        if v.strip().isdigit():
            return int(v)
        if n == SLURM_TASKS_PER_NODE and v[:1].isdigit():  # "2(x6)"
            return int(v.split("(")[0])
    return default


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    """Seconds from NAME (agpt.numeric: a bad value is BadInput naming it); unset, empty or 0: DEFAULT."""
    v = float(numeric.env_number(env, name, default, lo=0, hi=numeric.MAX_SECONDS))
    return v if v > 0 else default


def attempt_id(env: Mapping[str, str] | None = None) -> str:
    """`JOBID.N`, the name of the attempt's log (attempts/JOBID.N.log) that the failover loop exports."""
    env = os.environ if env is None else env
    if env.get("AGPT_ATTEMPT_ID"):
        return env["AGPT_ATTEMPT_ID"]
    return f"{rundir.job_id(env) or 'local'}.{env.get('FAILOVER_ATTEMPT', '0')}"


def _proc_state(pid: int) -> str | None:
    """The kernel's state letter of a local process (T: stopped, D: uninterruptible), None when unknown."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()[0] if ")" in text else None


class Heartbeat:
    """One rank's heartbeat.  phase()/step() are cheap attribute updates; a daemon thread does all the I/O."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        attempt: str,
        rank: int,
        host: str,
        local_rank: int = 0,
        local_size: int = 1,
        interval_s: float = DEFAULT_INTERVAL_S,
        tick_s: float | None = None,
        dump_after_s: float | None = 600.0,
        local_dir: str | Path | None = None,
        on_publish: Callable[[Heartbeat], None] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.attempt = attempt
        self.rank = rank
        self.host = host
        self.local_rank = local_rank
        self.local_size = max(1, local_size)
        self.interval_s = interval_s
        self.tick_s = tick_s if tick_s else min(1.0, interval_s / 3)
        self.dump_after_s = dump_after_s
        self.local_base = nodelocal.base(str(local_dir or ""), os.environ.get("AGPT_HEARTBEAT_LOCAL_DIR"))
        self.local_dir = nodelocal.folder(
            self.local_base, "heartbeat", self.run_dir, attempt, host
        )  # agpt.nodelocal's rule
        self.on_publish = on_publish
        self.tick = 0
        self.seq = 0
        self._step = 0
        self._phase = "start"
        now = time.monotonic()
        self._t_start = now
        self._t_phase = now
        self._t_step = now
        self._compute: deque[float] = deque(maxlen=RECENT_STEPS)
        self._wait: deque[float] = deque(maxlen=RECENT_STEPS)
        self._dumped_step = -1
        self._seen: dict[int, tuple[int, float]] = {}  # rank -> (tick, monotonic time it last changed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_publish = 0.0

    # -- what the trainer calls -------------------------------------------------------------------------------
    def phase(self, name: str) -> None:
        self._phase = name
        self._t_phase = time.monotonic()

    def step(self, n: int, compute_s: float | None = None, wait_s: float | None = None) -> None:
        """Step n is complete; compute_s: its compute time without waiting (what a straggler inflates), wait_s: its
        time in collectives that wait for the others (what a rank behind a slow or stopped host inflates)."""
        now = time.monotonic()
        self._step = n
        self._t_step = now
        if compute_s is not None and compute_s >= 0:
            self._compute.append(float(compute_s))
        if wait_s is not None and wait_s >= 0:
            self._wait.append(float(wait_s))

    def start(self) -> Heartbeat:
        self.local_base.mkdir(parents=True, exist_ok=True)  # what is under it, private_dir makes private
        nodelocal.private_dir(self.local_dir)
        if self.local_rank == 0:
            (self.run_dir / DIR).mkdir(parents=True, exist_ok=True)
            self._clean_earlier_attempts()
        self._write_local()
        self._thread = threading.Thread(target=self._loop, name="agpt-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self, phase: str = "done") -> None:
        self.phase(phase)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self._write_local()
            if self.local_rank == 0:
                self.publish()
        except OSError:
            pass

    def _clean_earlier_attempts(self) -> None:
        """Node-local folders of this job's earlier attempts on this host (a killed attempt leaves its own)."""
        job = self.attempt.rsplit(".", 1)[0]
        tag = self.local_dir.name.split(".")[1]
        for d in self.local_dir.parent.glob(f"heartbeat.{tag}.{job}.*.{self.host}"):
            if d != self.local_dir and d.is_dir() and not d.is_symlink():
                shutil.rmtree(d, ignore_errors=True)

    # -- the thread -------------------------------------------------------------------------------------------
    def record(self) -> dict[str, Any]:
        now = time.monotonic()
        recent, waits = list(self._compute), list(self._wait)
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "pid": os.getpid(),
            "step": self._step,
            "phase": self._phase,
            "phase_s": round(now - self._t_phase, 3),
            "step_s": round(now - self._t_step, 3),
            "compute_s": round(sum(recent) / len(recent), 4) if recent else None,
            "wait_s": round(sum(waits) / len(waits), 4) if waits else None,
            "tick": self.tick,
            "mono": now,
        }

    def _write_local(self) -> None:
        write_atomic(self.local_dir / f"rank{self.rank}.json", json.dumps(self.record()))

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.tick += 1
            try:
                self._write_local()
                self._maybe_dump()
                if self.local_rank == 0 and time.monotonic() - self._last_publish >= self.interval_s:
                    self.publish()
            except Exception:
                pass

    def _maybe_dump(self) -> None:
        if self.dump_after_s is None or self._dumped_step == self._step:
            return
        if time.monotonic() - self._t_step < self.dump_after_s:
            return
        self._dumped_step = self._step
        head = (
            f"# rank {self.rank} pid {os.getpid()} on {self.host}: step {self._step} not advanced for "
            f"{time.monotonic() - self._t_step:.1f} s, in phase {self._phase}\n"
        )

        def fill(f: BinaryIO) -> None:
            f.write(head.encode())
            f.flush()
            faulthandler.dump_traceback(file=f, all_threads=True)

        # agpt.safewrite: a link planted at the stack file's name is replaced, never written through
        safewrite.replace_with(self.local_dir / f"stacks.rank{self.rank}.txt", fill, sync=False)

    def publish(self) -> None:
        """Local rank 0: gather the node's rank records into one atomic file in the run directory."""
        now = time.monotonic()
        self._last_publish = now
        self.seq += 1
        ranks: list[dict[str, Any]] = []
        missing: list[str] = []
        stacks: list[str] = []
        for p in sorted(self.local_dir.glob("rank*.json")):
            try:
                rec = rundir.read_record(p)
                r = int(rec["rank"])
                written = float(rec["mono"])
            except (OSError, ValueError, KeyError, TypeError):
                missing.append(p.name)
                continue
            if (
                written < self._t_start - STALE_LAUNCH_S
            ):  # left by an earlier launch, not a frozen rank of ours
                continue
            tick = int(rec.get("tick", 0))
            prev = self._seen.get(r)
            if prev is None or prev[0] != tick:
                self._seen[r] = (tick, now if prev is not None else float(rec.get("mono", now)))
            rec["stalled_s"] = round(now - self._seen[r][1], 3)
            rec["age_s"] = round(now - float(rec.pop("mono", now)), 3)
            state = _proc_state(int(rec.get("pid", 0)))
            if state:
                rec["state"] = state
            ranks.append(rec)
        for p in sorted(self.local_dir.glob("stacks.rank*.txt")):
            try:
                stacks.append(rundir.read_text(p, what="stacks"))
            except (OSError, BadInput):
                continue
        node = {
            "format": FORMAT,
            "attempt": self.attempt,
            "host": self.host,
            "seq": self.seq,
            "interval_s": self.interval_s,
            "tick_s": self.tick_s,
            "up_s": round(now - self._t_start, 3),
            "time": round(time.time(), 3),
            "local_size": self.local_size,
            "ranks": sorted(ranks, key=lambda x: x["rank"]),
        }
        if missing:
            node["unreadable"] = missing
        write_atomic(self.run_dir / DIR / node_file(self.host), json.dumps(node, separators=(",", ":")))
        if stacks:
            d = stacks_dir(self.run_dir, self.attempt)
            d.mkdir(parents=True, exist_ok=True)
            target = d / f"{self.host}.txt"
            text = "\n".join(stacks)
            try:  # the one reader: a FIFO or a link to /dev/zero planted there is never read
                same = rundir.read_text(target, what="stacks", missing_ok=True) == text
            except (OSError, BadInput):
                same = False
            if not same:
                write_atomic(target, text)
        if self.on_publish is not None:
            self.on_publish(self)


def enabled(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get("AGPT_HEARTBEAT", "1").strip().lower() not in ("0", "off", "false", "no")


def start(
    run_dir: str | Path | None = None,
    *,
    interval_s: float | None = None,
    env: Mapping[str, str] | None = None,
    on_publish: Callable[[Heartbeat], None] | None = None,
    tick_s: float = 0.0,
    dump_s: float = 0.0,
    host: str = "",
    local_dir: str = "",
) -> Heartbeat | None:
    """A started Heartbeat for this rank, from the environment; None when off or when there is no run dir.

    AGPT_HEARTBEAT=0 turns it off; AGPT_HEARTBEAT_INTERVAL_S overrides `interval_s` (heartbeat.interval_s,
    default 15); AGPT_HEARTBEAT_DUMP_S is the stuck time before a stack dump (default: half of
    FAILOVER_IDLE_TIMEOUT when the failover loop exports it, else 600; 0: never).
    """
    env = os.environ if env is None else env
    rd = run_dir or env.get("AGPT_RUN_DIR")
    if not rd or not enabled(env):
        return None
    interval = _env_float(env, "AGPT_HEARTBEAT_INTERVAL_S", interval_s or DEFAULT_INTERVAL_S)
    idle = _env_float(env, "FAILOVER_IDLE_TIMEOUT", 0.0)
    dump: float | None = dump_s or _env_float(env, "AGPT_HEARTBEAT_DUMP_S", idle / 2 if idle else 600.0)
    if env.get("AGPT_HEARTBEAT_DUMP_S", "").strip() == "0":
        dump = None
    rank = _env_int(env, RANK_VARS, 0)
    hb = Heartbeat(
        rd,
        attempt=attempt_id(env),
        rank=rank,
        host=host or host_name(env),
        local_rank=_env_int(env, LOCAL_RANK_VARS, 0),
        local_size=_env_int(env, _LOCAL_SIZE, 1),
        interval_s=interval,
        tick_s=tick_s or _env_float(env, "AGPT_HEARTBEAT_TICK_S", 0.0) or None,
        dump_after_s=dump,
        local_dir=local_dir or env.get("AGPT_HEARTBEAT_LOCAL_DIR") or None,
        on_publish=on_publish,
    )
    try:
        return hb.start()
    except OSError as e:
        print(f"agpt: heartbeat off: {e}", flush=True)
        return None
