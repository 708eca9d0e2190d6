"""An attempt's training on the simulator's virtual clock: the nodes' failure clocks, the steps and saves, and
what ends the attempt (a failure drawn from the model or scripted, the deadline, the horizon), stragglers included.

`Training` is the part of agpt.sim.engine.Sim that moves the clock inside one attempt; the engine around it runs
the jobs and attempts, calls the real classifier and planner on what ended each, and accounts the time.  The
engine's state it reads and moves is declared at the top of the class (Sim.__init__ sets it).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from agpt.sim import local as simlocal
from agpt.sim.model import FaultModel, ScriptedFault
from agpt.sim.result import FaultRecord
from agpt.train import ckpt_policy

INF = math.inf


@dataclass(kw_only=True, slots=True)
class AttemptEnd:
    """How one simulated attempt ended."""

    kind: str  # node, hang, crash, system, app, deadline, done, horizon (sim/logs.py writes each)
    bad: str | None  # the host its log names
    at: float  # when it ended, before detection
    step: int  # the step it reached
    first: int | None = None  # the first and last step it logged
    last: int | None = None
    fault: FaultRecord | None = None  # the failure that ended it


@dataclass(slots=True)
class _Run:
    """An attempt's position on the virtual clock."""

    step: int
    clock: float
    first: int | None = None
    # The last global save's step, or the step the attempt resumed from: the trainer's timer for
    # `checkpoint.interval_s` runs from there (agpt.train.trainer: `t_save`), whatever local saves came since.
    saved: int = 0

    @property
    def last(self) -> int | None:
        """The last step logged (None before the first)."""
        return self.step if self.first else None

    def advance(self, sim: Training, k: int, st: float) -> None:
        """K steps of ST seconds (the productive time into SIM's buckets)."""
        sim._steps(k, st)
        if k and self.first is None:
            self.first = self.step + 1
        self.step += k
        self.clock += k * st


class Training:
    """An attempt's steps, saves and end on the virtual clock (a part of agpt.sim.engine.Sim)."""

    m: FaultModel
    rng: random.Random
    t: float
    horizon: float
    time: dict[str, float]
    ckpts: list[tuple[int, float]]
    ckpt: int  # the newest complete global checkpoint
    local: simlocal.Tier | None
    faults: list[FaultRecord]
    slow: float
    pace: float
    straggler: tuple[str, FaultRecord] | None
    straggler_stop: float
    next_fail: dict[str, float]
    down_until: dict[str, float]
    hung_until: dict[str, float]
    outage_until: float
    app_bug_step: int | None
    random_failures: bool
    scripted: list[ScriptedFault]
    scripted_fired_attempt: int
    attempt_serial: int
    weibull_scale: float

    def _settle(self, now: float) -> None:  # the engine's: checkpoints complete by NOW become resumable
        raise NotImplementedError

    # ---------------------------------------------------------------------------------- failure clocks
    def _sample(self, now: float) -> float:
        f = self.m.failures
        if f.distribution == "weibull":
            return now + self.rng.weibullvariate(self.weibull_scale, f.weibull_shape)
        return now + self.rng.expovariate(1.0 / (f.node_mtbf_h * 3600.0))

    def _fail_time(self, host: str) -> float:
        t = self.next_fail.get(host)
        if (
            t is None or t < self.t
        ):  # never used, or it failed while idle (and was repaired since): a new clock
            t = self.next_fail[host] = self._sample(self.t)
        return t

    def _draw_class(self) -> str:
        x = self.rng.random()
        acc = 0.0
        for cls, p in self.m.mix.items():
            acc += p
            if x < acc:
                return cls
        return next(c for c, p in reversed(self.m.mix.items()) if p > 0)

    def _train(
        self, active: list[str], launch: float, ready: float, resumed: int, deadline: float,
        save_only: bool = False,
    ) -> AttemptEnd:  # fmt: skip
        """Run one attempt on the virtual clock, segment by segment (to the next save, the end of training, a
        scripted fault or the recurring bug), until a failure, the deadline or the horizon ends it.  SAVE_ONLY:
        the loop's save before a stop (checkpoint.save_and_stop): the restored step saved globally, no step."""
        c, tr = self.m.costs, self.m.train
        if launch < self.outage_until:
            return AttemptEnd(kind="system", bad=None, at=launch + c.launcher_start_s, step=resumed)
        dead = [h for h in active if self.down_until.get(h, 0.0) > launch]
        if dead:  # a failed node left in the allocation: the launcher cannot start there, and says so
            return AttemptEnd(kind="node", bad=dead[0], at=launch + c.launcher_start_s, step=resumed)
        hung = [h for h in active if self.hung_until.get(h, 0.0) > launch]
        if hung:
            return AttemptEnd(kind="hang", bad=hung[0], at=ready, step=resumed)
        if save_only:
            return self._save_and_stop(ready, resumed, deadline)
        self._straggler_watch(active, ready)
        run = _Run(step=resumed, clock=ready, saved=resumed)
        stop_at = deadline - tr.deadline_margin_s
        failer = min(active, key=self._fail_time) if self.random_failures else None
        while True:
            st = tr.step_s * self.slow * self.pace
            nxt = ckpt_policy.next_save(
                run.saved, interval=tr.checkpoint_interval, interval_s=tr.checkpoint_interval_s, step_s=st
            )
            if nxt is not None:  # a straggler's slower steps: a save already due is the next step's
                nxt = max(nxt, run.step + 1)
            nxt_local = ckpt_policy.next_save(run.step, interval=tr.local_interval, interval_s=tr.local_interval_s,
                                              step_s=st) if self.local is not None else None  # fmt: skip
            sf = self._scripted_next()
            saves = [x for x in (nxt, nxt_local) if x is not None]
            bound = self._bound(run.step, min(saves) if saves else None, sf)
            seg_end = run.clock + (bound - run.step) * st if bound < INF else INF
            tf = self._fail_time(failer) if failer else INF
            tev = min(tf, stop_at, self.horizon, self.straggler_stop)
            if tev < seg_end:
                end = self._interrupted(run, st, tev, stop_at, failer, active)
                if end is not None:
                    return end
                failer = min(active, key=self._fail_time)  # a straggler: slower from now on, and on
                continue
            if seg_end == INF:
                raise RuntimeError(
                    "no save, no failure, no deadline and no horizon: nothing ends the attempt"
                )
            end = self._segment_done(run, st, int(bound), seg_end, nxt, sf, active, nxt_local)
            if end is not None:
                return end

    def _straggler_watch(self, active: list[str], since: float) -> None:
        """The straggler in an attempt that starts (or goes on) at SINCE: gone with its host (the slowdown too);
        with FAILOVER_STRAGGLER=swap and heartbeats, rank 0's monitor asks for its swap after
        FAILOVER_STRAGGLER_WINDOWS publish windows (agpt.heartbeat.straggler), each attempt counting anew."""
        if self.straggler is None:
            return
        if self.straggler[0] not in active:
            self.slow, self.straggler, self.straggler_stop = 1.0, None, INF
            return
        fo = self.m.failover
        if self.m.heartbeats and fo.straggler == "swap":
            self.straggler_stop = since + fo.straggler_windows * self.m.costs.heartbeat_interval_s

    def _straggler_save(self, run: _Run, st: float) -> float:
        """The save a straggler's swap stops at; when the attempt ends.  With the local tier: its next local save (a
        full local interval on, the worst case), complete on every node before the trainer exits, and the relaunch
        restores from node memory; without: one more step and a blocking global save (the deadline's)."""
        tr = self.m.train
        if self.local is not None:
            nxt = ckpt_policy.next_save(run.step, interval=tr.local_interval, interval_s=tr.local_interval_s,
                                        step_s=st)  # fmt: skip
            run.advance(self, max(1, (nxt or run.step + 1) - run.step), st)
            stall = self.local.costs.stall_s
            self.time["checkpoint_stalls"] += (
                stall + self.local.costs.write_s
            )  # the trainer waits for it whole
            self.local.save(run.step, run.clock + stall)
            return run.clock + stall + self.local.costs.write_s
        run.advance(self, 1, st)
        stall = self.m.costs.save_stall_s
        self.time["checkpoint_stalls"] += stall
        self.ckpts.append((run.step, run.clock + stall))
        return run.clock + stall

    def _save_and_stop(self, ready: float, resumed: int, deadline: float) -> AttemptEnd:
        """The trainer's save_and_stop: a blocking global save of the restored step when the global tier does not
        hold it yet (not written when the walltime ends first), then exit 75 (its stop line, no step)."""
        at = ready
        if resumed > self.ckpt:
            stall = self.m.costs.save_stall_s
            if ready + stall > deadline:
                return AttemptEnd(kind="deadline", bad=None, at=deadline, last=resumed, step=resumed)
            at = ready + stall
            self.time["checkpoint_stalls"] += stall
            self.ckpts.append((resumed, at))
        return AttemptEnd(kind="deadline", bad=None, at=at, last=resumed, step=resumed)

    def _bound(self, step: int, nxt: int | None, sf: ScriptedFault | None) -> float:
        """Where the segment from STEP ends: the next save, the last step, the recurring bug, a scripted fault."""
        bound: float = INF if nxt is None else nxt
        if self.m.train.steps:
            bound = min(bound, self.m.train.steps)
        if self.app_bug_step is not None and self.app_bug_step > step:
            bound = min(bound, self.app_bug_step)
        if sf is not None and not sf.during_save:
            # as the chaos test fires it: at the first step at or past its own, in an attempt after the last fault's
            # (one that resumed past it, after a walltime hand-over's last-step save, fires at its first step)
            bound = min(bound, max(sf.step, step + 1))
        return bound

    def _interrupted(self, run: _Run, st: float, tev: float, stop_at: float, failer: str | None,
                     active: list[str]) -> AttemptEnd | None:  # fmt: skip
        """The segment ends early at TEV: the horizon, the trainer's deadline stop, or a node's failure clock.
        None for a straggler (the attempt goes on, slower)."""
        m = self.m
        run.advance(self, max(0, int((tev - run.clock) / st)) if tev > run.clock else 0, st)
        partial = max(0.0, tev - run.clock)  # the step under way when the attempt ends is never finished
        if tev == self.horizon:
            self.time["lost_work"] += partial
            return AttemptEnd(kind="horizon", bad=None, at=self.horizon, first=run.first, last=run.last,
                              step=run.step)  # fmt: skip
        if tev == stop_at:  # the trainer's deadline stop: one more step, a blocking save, exit 75
            run.advance(self, 1, st)
            stall = m.costs.save_stall_s
            walltime = stop_at + m.train.deadline_margin_s
            # a save attempt started too late: the scheduler ends the job before its save is written
            if run.clock + stall > walltime:
                self.time["lost_work"] += walltime - run.clock
                return AttemptEnd(kind="deadline", bad=None, at=walltime, first=run.first, last=run.step,
                                  step=run.step)  # fmt: skip
            self.time["checkpoint_stalls"] += stall
            self.ckpts.append((run.step, run.clock + stall))
            return AttemptEnd(kind="deadline", bad=None, at=run.clock + stall, first=run.first, last=run.step,
                              step=run.step)  # fmt: skip
        if tev == self.straggler_stop and self.straggler:  # the monitor's swap request: save and 75
            at = self._straggler_save(run, st)
            self.straggler_stop = INF
            host, rec = self.straggler
            return AttemptEnd(kind="straggler", bad=host, at=at, first=run.first, last=run.step,
                              step=run.step, fault=rec)  # fmt: skip
        assert failer is not None  # a node's clock ran out
        cls = self._draw_class()
        self.next_fail[failer] = self._sample(tev)
        if cls == "straggler":
            self.slow = max(self.slow, m.behaviour.straggler_slowdown)
            rec = FaultRecord(cls=cls, time_s=tev, step=run.step)
            self.faults.append(rec)
            if self.straggler is None:
                self.straggler = (failer, rec)
                self._straggler_watch(active, tev)
            return None
        self.time["lost_work"] += partial
        rec = FaultRecord(cls=cls, time_s=tev, step=run.step)
        self.faults.append(rec)
        end = AttemptEnd(kind=cls, bad=None, at=tev, first=run.first, last=run.last, step=run.step, fault=rec)
        if cls == "node":
            self.down_until[failer] = tev + m.failures.repair_h * 3600.0
            end.bad = failer
        elif cls == "hang":
            if self.rng.random() < m.behaviour.hang_persists:
                self.hung_until[failer] = tev + m.failures.repair_h * 3600.0
            end.bad = failer
        elif cls == "system":
            self.outage_until = tev + m.behaviour.system_outage_s
        elif self.rng.random() < m.behaviour.app_deterministic:
            self.app_bug_step = run.step + 1
        return end

    def _segment_done(self, run: _Run, st: float, end_step: int, seg_end: float, nxt: int | None,
                      sf: ScriptedFault | None, active: list[str], nxt_local: int | None = None,
                      ) -> AttemptEnd | None:  # fmt: skip
        """The segment ran to END_STEP: the recurring bug strikes, a scripted fault fires, or a save starts (the
        last one ends training).  None: train on."""
        tr, c = self.m.train, self.m.costs
        run.advance(self, end_step - run.step, st)
        run.clock = seg_end
        s = run.step
        if self.app_bug_step is not None and s == self.app_bug_step:
            self._steps(-1, st)  # the step that fails is not done
            self.time["lost_work"] += st
            run.step -= 1
            first = run.first if run.first is not None and run.first <= run.step else None
            return AttemptEnd(kind="app", bad=None, at=run.clock, first=first, last=run.step if first else None,
                              step=run.step)  # fmt: skip
        saving = (nxt is not None and s == nxt) or bool(tr.steps and s >= tr.steps)
        strike = sf if sf is not None and s >= sf.step and not sf.during_save else None
        if strike is not None and not saving:
            return self._strike(strike, run, s, active)
        if self.local is not None and s in (nxt_local, nxt):  # a local save (with each global one too)
            stall = self.local.costs.stall_s
            self.time["checkpoint_stalls"] += stall
            run.clock += stall
            self.local.save(s, run.clock)
        if not saving:
            return None
        if sf is not None and sf.during_save and s >= sf.step:
            rec = self._fire(sf, run.clock, s)
            return AttemptEnd(
                kind="crash", bad=None, at=run.clock, first=run.first, last=s, step=s, fault=rec
            )
        stall = c.async_stall_s if tr.async_save else c.save_stall_s
        written = run.clock + stall + (c.save_stall_s if tr.async_save else 0.0)
        self.time["checkpoint_stalls"] += stall
        self.ckpts.append((s, written))
        run.clock += stall
        run.saved = s
        if tr.steps and s >= tr.steps:
            self._settle(written)
            return AttemptEnd(kind="done", bad=None, at=written, first=run.first, last=s, step=s)
        if strike is not None:  # the injector acts on the step's line, after the step's save began
            return self._strike(strike, run, s, active)
        return None

    def _strike(self, sf: ScriptedFault, run: _Run, s: int, active: list[str]) -> AttemptEnd:
        """A scripted fault (not one during a save) fires INJECT_LATENCY after step S's line."""
        at = run.clock + self.m.costs.inject_latency_s
        rec = self._fire(sf, at, s)
        kind = self._scripted_kind(sf, active)
        return AttemptEnd(kind=kind, bad=self._scripted_host(sf, active), at=at, first=run.first, last=s, step=s,
                          fault=rec)  # fmt: skip

    def _steps(self, k: int, st: float) -> None:
        self.time["productive"] += k * self.m.train.step_s
        self.time["slow_steps"] += k * (st - self.m.train.step_s)

    # Scripted faults (the chaos test's schedule): one per attempt, each in a later attempt than the last.
    def _scripted_next(self) -> ScriptedFault | None:
        if not self.scripted or self.scripted_fired_attempt == self.attempt_serial:
            return None
        return self.scripted[0]

    def _fire(self, sf: ScriptedFault, when: float, step: int) -> FaultRecord:
        self.scripted.pop(0)
        self.scripted_fired_attempt = self.attempt_serial
        rec = FaultRecord(cls=sf.cls + ("-during-save" if sf.during_save else ""), time_s=when, step=step)
        self.faults.append(rec)
        return rec

    def _scripted_kind(self, sf: ScriptedFault, active: list[str]) -> str:
        if sf.cls == "node":
            h = self._scripted_host(sf, active)
            if h:
                self.down_until[h] = INF
        return sf.cls

    def _scripted_host(self, sf: ScriptedFault, active: list[str]) -> str | None:
        if sf.cls in ("node", "crash", "hang") and len(active) > 1:
            return active[1 + (sf.step % (len(active) - 1))]  # not the batch host, as the chaos test
        return None
