"""The straggler monitor: rank 0 of the trainer reads the node records each publish interval.

Per host, the median over its ranks of the recent compute time per step (`compute_s`: the time the rank computed,
its waits for the others taken out, agpt.train.compute); a host slower than its peers' median by more than
FAILOVER_STRAGGLER_PCT (20) percent, by more than 5 median absolute deviations of the peers' times and by at least
a tenth of the step (measured between windows), for FAILOVER_STRAGGLER_WINDOWS (3) publish windows in a row is a
straggler: an event in events.jsonl, and with FAILOVER_STRAGGLER=swap a request (heartbeat/swap.json) on which
the trainer stops with exit 75 at its next local checkpoint (at once, with a global one, without the node-local
tier); `agpt failover classify --heartbeat-dir` then names it, class `node` (agpt.heartbeat.reader.apply).  A window
counts for a host only when its ranks completed steps since the last one: a host whose ranks wait (behind a
stopped or slow host) computes nothing new and is never named for it; the step time, which the collectives make
the same on every rank, is never compared between hosts.

Standard library only (it runs inside any trainer, through agpt.heartbeat.writer's on_publish).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from agpt import numeric, rundir
from agpt.errors import BadInput
from agpt.heartbeat.format import DIR, SWAP_FILE, write_atomic
from agpt.heartbeat.reader import as_float, read_records

DEFAULT_PCT = 20.0  # FAILOVER_STRAGGLER_PCT
DEFAULT_WINDOWS = 3  # FAILOVER_STRAGGLER_WINDOWS
MAD_FACTOR = 5.0  # a straggler's excess must also pass this many median absolute deviations of its peers'
MIN_STEP_SHARE = 0.1  # ... and hold every step back by this share of it (less is not worth a relaunch)
# FAILOVER_STRAGGLER: swap, or report (docs/goodput.md: swapping pays at 512-4,096 nodes)
DEFAULT_MODE = "swap"
# What FAILOVER_STRAGGLER may be: the trainer, the loop's check and `agpt sim` read these.
MODES = ("report", "swap")


def mode(text: str | None, name: str = "FAILOVER_STRAGGLER") -> str:
    """FAILOVER_STRAGGLER as every reader takes it: one of MODES (any case, spaces around); '' or unset is
    DEFAULT_MODE; anything else BadInput naming it (never read as `report`)."""
    value = (text or "").strip().lower()
    if not value:
        return DEFAULT_MODE
    if value not in MODES:
        raise BadInput(f"{name}: {(text or '')[:40]!r} is not one of {' | '.join(MODES)}")
    return value


def request_swap(run_dir: str | Path, attempt: str, host: str, evidence: str, when: float) -> None:
    """The swap request the trainer stops on (heartbeat/swap.json; agpt.heartbeat.reader.read_swap reads it)."""
    request = {"attempt": attempt, "host": host, "evidence": evidence, "time": round(when, 3)}
    (Path(run_dir) / DIR).mkdir(parents=True, exist_ok=True)
    write_atomic(Path(run_dir) / DIR / SWAP_FILE, json.dumps(request))


@dataclass(kw_only=True, slots=True)
class StragglerMonitor:
    """Rank 0's view of the node records, one poll per publish interval."""

    run_dir: Path
    attempt: str
    pct: float = DEFAULT_PCT
    windows: int = DEFAULT_WINDOWS
    swap: bool = False
    streak: dict[str, int] = field(default_factory=dict)
    last_seq: dict[str, int] = field(default_factory=dict)
    last_step: dict[str, int] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)
    swap_host: str | None = None
    _rate_mark: tuple[float, int] | None = None  # (monotonic time, top step) when steps last completed

    @classmethod
    def from_env(cls, run_dir: str | Path, attempt: str) -> StragglerMonitor:
        env = os.environ
        return cls(
            run_dir=Path(run_dir),
            attempt=attempt,
            pct=numeric.env_number(env, "FAILOVER_STRAGGLER_PCT", DEFAULT_PCT, lo=0, hi=10_000),
            windows=numeric.env_number(
                env, "FAILOVER_STRAGGLER_WINDOWS", DEFAULT_WINDOWS, lo=1, hi=10_000, integer=True
            ),
            swap=mode(os.environ.get("FAILOVER_STRAGGLER")) == "swap",
        )

    def poll(self) -> str | None:
        """Count one window; returns a host newly found a straggler (its event written), else None."""
        per_host = self._fresh_compute_times()
        step_s = self._step_time()
        if len(per_host) < 3 or step_s is None:  # a median of peers needs at least two of them
            return None
        found = None
        for h, v in per_host.items():
            others = [x for k, x in per_host.items() if k != h]
            peers = statistics.median(others)
            # An outlier: slower than the peers' median by PCT percent, by more than the peers' own spread
            # (MAD_FACTOR median absolute deviations) and by at least MIN_STEP_SHARE of the step, so that hosts
            # that take turns being a little slower (cores shared by many ranks) are never named while one that
            # holds every step back beyond them all is.
            spread = MAD_FACTOR * statistics.median(abs(x - peers) for x in others)
            excess = v - peers
            if (
                peers > 0
                and v > peers * (1 + self.pct / 100)
                and excess > spread
                and excess >= MIN_STEP_SHARE * step_s
            ):
                self.streak[h] = self.streak.get(h, 0) + 1
            else:
                self.streak[h] = 0
            if self.streak[h] >= self.windows and h not in self.reported:
                self.reported.add(h)
                self._report(h, v, peers)
                found = found or h
        return found

    def _step_time(self) -> float | None:
        """Seconds per step since the last window, on this process's clock (the collectives keep every rank at the
        same step rate); None until two windows saw steps complete."""
        now, top = time.monotonic(), max(self.last_step.values(), default=-1)
        prev = self._rate_mark
        if prev is not None and top <= prev[1]:
            return None  # no step completed: the mark stays
        self._rate_mark = (now, top)
        return None if prev is None else (now - prev[0]) / (top - prev[1])

    def _fresh_compute_times(self) -> dict[str, float]:
        """host -> the median compute time per step of its ranks, for the hosts whose record is new and whose ranks
        completed steps since the last window."""
        recs, _ = read_records(self.run_dir / DIR, None, self.attempt)
        per_host: dict[str, float] = {}
        for h, rec in recs.items():
            vals = [as_float(r.get("compute_s"), -1) for r in rec["ranks"]]
            vals = [v for v in vals if v > 0]
            seq = int(rec.get("seq") or 0)
            step = min(int(r["step"]) for r in rec["ranks"])  # parse_node checked that each is a whole number
            # A fresh record whose ranks completed steps since the last window: one window.
            if vals and seq != self.last_seq.get(h) and step > self.last_step.get(h, -1):
                per_host[h] = statistics.median(vals)
            self.last_seq[h] = seq
            self.last_step[h] = max(step, self.last_step.get(h, -1))
        return per_host

    def _report(self, h: str, v: float, peers: float) -> None:
        """The straggler event; the swap request too when swapping is on (one per attempt)."""
        slower, now = (v / peers - 1) * 100, time.time()
        evidence = (
            f"straggler: {h} computes {v:.3f} s/step, its peers' median {peers:.3f} s (+{slower:.0f}%, "
            f"over {self.pct:g}%) for {self.streak[h]} windows in a row"
        )
        ev = {
            "event": "straggler",
            "attempt": self.attempt,
            "host": h,
            "compute_s": round(v, 4),
            "peers_median_s": round(peers, 4),
            "slower_pct": round(slower, 1),
            "windows": self.streak[h],
            "action": "swap" if self.swap and self.swap_host is None else "report",
            "evidence": evidence,
            "time": round(now, 3),
        }
        rundir.append_jsonl(self.run_dir / rundir.EVENTS, ev)
        if ev["action"] == "swap":
            self.swap_host = h
            request_swap(self.run_dir, self.attempt, h, evidence, now)
