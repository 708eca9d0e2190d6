"""The discrete-event simulation behind `agpt sim`: a virtual clock, and the real recovery code deciding.

What is simulated: when nodes fail (each node's own exponential or Weibull clock), what a failure looks like
(a crash naming the host, a silent hang, a straggler, a site-wide fault, an application fault), how long each
step of a recovery takes (the fault model's costs), and training itself (steps of `step_s`, saves when the
trainer's checkpoint policy says so, an async save complete only once written).

What decides is the code that runs on the machine, called in-process in the order lib/failover.sh and
lib/chain.sh call it, on a real run directory in a temporary folder:
  job start  an allocation of the nodes + agpt.rundir.spares_for (what job generation asks for),
             agpt.failover.hosts.init_run_hosts (hosts/all, active, spare; proven-bad hosts left out),
             layout.json as `agpt check --run-dir` writes it (the model's `layout`), agpt.chain.cmd_start
  attempt    agpt.failover.plan.run --before --apply;  the attempt (simulated: its log written in the
             launcher's format);  agpt.failover.classify.classify on that log;
             agpt.failover.plan.run --apply (swaps in hosts/active|spare, hosts/bad, events.jsonl)
  job end    agpt.chain.cmd_end (chain.jsonl, the verdict: keep or stop)
  saves      agpt.train.ckpt_policy.next_save, markers ckpt/step-N/.complete as the trainer writes them
A stop that the chain does not continue from (stuck, repeat, no progress, the job limit) waits for a person
(`costs.person_response_h`), who removes what broke and starts the chain again.

An attempt's steps on the virtual clock (failure clocks, saves, scripted faults, stragglers) are
agpt.sim.training's part of Sim; this module runs the jobs and attempts around them and decides.

A shrink (FAILOVER_SHRINK, no spare left) runs the next attempts on fewer hosts, each step longer by
micro-steps(n) / micro-steps(full) (agpt.failover.shrink's throughput); that extra time counts as slow steps.

Heartbeats: the hung host is named as the classifier's heartbeat evidence names it (`node`, that host: what
agpt.failover.classify.apply_heartbeats does), and a hang is detected after `heartbeat_timeout_s` instead of the
idle watchdog.

Misreads: a share of each class's failures is misread, per what the reading costs (`misread[class][kind]`, the
consequences `agpt failover score` measures on the held-out corpora, agpt.failover.consequence).  Each kind is
written as the log the loop would be given, and what follows is the real classifier's and planner's decision:
  recoverable  a log the classifier cannot read: the loop sees a crash that names nobody and sweeps
               (agpt.failover.sweep, run through `Sim._probe`, which sees what the model lets it see: a failed
               node with `probe.finds_node`, a host that hangs every attempt with `probe.finds_hung`, every host
               failing during a site outage; its cost on the clock as detection), swaps blind when the sweep is
               off, or relaunches on the same hosts.
  stopped      an exception every rank raises (logs `app_error`): the loop reads an application error, sweeps,
               relaunches on the same hosts, and stops for a person when the sweep passed every host and the same
               signature reproduces; the stop waits `costs.person_response_h` as any stop does.  A site fault read
               so is one outside what the probe checks (the measured cases: a DNS failure, an object store that
               does not answer), so the sweep passes every host while it lasts, as agpt.failover.consequence
               assumes.
  evicted      the launcher's node-failure line naming a healthy active host: the planner swaps it out, and the
               bad node stays (its next launch fails, and the log names the evicted host again, by then out of
               the allocation: the planner sweeps).
  unresolved   a log read as a site fault (logs `system`; one of the measured cases, an application fault read so):
               the loop backs off and relaunches on the same hosts, sweeps once the signature recurs, and never
               stops for a person on a site fault: a fault that keeps recurring (a deterministic bug) runs into
               FAILOVER_MAX_ATTEMPTS and the chain's no-progress guard; one that does not is simply relaunched.
A fault recurs (a node left in the allocation fails the next launch, a site outage every launch while it lasts, a
hung host or a deterministic bug each attempt it is in); its kind is drawn (self.rng) at its first reading, and a
recurrence is read the same way when the misread's consequence rests on that (stopped, evicted, unresolved: as
agpt.failover.consequence replays a case's one reading attempt after attempt), else drawn again for
`recoverable` alone, as before the kinds: the sim's unreadable log has no failing line, so read so on every
recurrence a deterministic bug would never reproduce, where the measured recoverable cases did.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import math
import os
import random
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agpt import chain as chainlib
from agpt import ckptdir, rundir
from agpt.failover import classify as classifylib
from agpt.failover import hosts as hostlib
from agpt.failover import patterns as patlib
from agpt.failover import plan as planlib
from agpt.failover import shrink as shrinklib
from agpt.failover import sweep as sweeplib
from agpt.heartbeat import format as heartbeat_format
from agpt.heartbeat import straggler
from agpt.sim import local as simlocal
from agpt.sim import logs
from agpt.sim import model as simmodel
from agpt.sim.model import FaultModel
from agpt.sim.result import BUCKETS, FaultRecord, Result
from agpt.sim.training import INF, AttemptEnd, Training
from agpt.watch.evidence import LineEvidence

# the misreads a fault's recurrences are read as again (Sim._misread)
STICKY = ("stopped", "evicted", "unresolved")
EPOCH = 1_800_000_000.0  # the virtual clock's zero, as an epoch (events.jsonl and the planner want epochs)
__all__ = ["BUCKETS", "FaultRecord", "Result", "Sim", "simulate"]


@contextlib.contextmanager
def _cached_patterns() -> Any:
    """Pattern files are read and compiled once per simulation instead of once per attempt (the classifier
    itself is unchanged; on the machine each attempt is a fresh process that pays this once)."""
    orig = patlib.load
    cached = functools.lru_cache(maxsize=8)(lambda names: orig(list(names)))
    patlib.load = lambda names: cached(tuple(names))  # type: ignore[assignment]
    try:
        yield
    finally:
        patlib.load = orig  # type: ignore[assignment]


class Sim(Training):
    def __init__(self, m: FaultModel, *, seed: int, workdir: Path) -> None:
        # the intervals and the local tier as the job's `agpt check --run-dir` plans them
        m = simmodel.planned(m)
        self.m = m
        self.rng = random.Random(seed)
        self.seed = seed
        self.run_dir = workdir / "run"
        self.run_dir.mkdir(parents=True)
        self.pool = logs.host_names(m.machine_nodes, m.launcher)
        self._ends: LineEvidence | None = None  # the `ends` patterns, compiled once (Sim._ends_on)
        # FAILOVER_SPARES unset: what job generation asks for (agpt.rundir.spares_for, the fallback SITE_SPARES_*),
        # which the failover loop's split gives back.
        asked = rundir.spares_for(m.nodes, percent=rundir.SPARES_PERCENT, minimum=rundir.SPARES_MIN)
        self.spares: int = asked if m.spares is None else m.spares
        lay = m.layout
        self.layout = shrinklib.Layout(nodes=m.nodes, ranks_per_node=lay.ranks_per_node, tp=lay.tp,
                                       global_batch=m.nodes * lay.ranks_per_node // lay.tp * lay.micro_batch * lay.accum,
                                       micro_batch=lay.micro_batch, config=f"sim:{m.name}")  # fmt: skip
        self.pace = 1.0  # step time on the attempt's nodes over the step time on the job's (a shrink)
        self.shrinks = 0
        self.shrunk_s = 0.0
        self.t = 0.0
        self.horizon = m.horizon_days * 86400.0
        self.next_fail: dict[str, float] = {}
        self.down_until: dict[str, float] = {}
        self.hung_until: dict[str, float] = {}  # hosts that hang every attempt they are in
        self.outage_until = 0.0
        self.outage_unseen = False  # the site outage is one the health sweep's probe does not see (a misread)
        # a fault's cause -> how its log is misread (None: read right) and the host the log names
        self.misreads: dict[tuple[str, Any], tuple[str | None, str | None]] = {}
        self.app_bug_step: int | None = None
        self.save_first = False  # the last plan was a save before a stop: the next attempt only saves
        self.slow = 1.0
        # FAILOVER_STRAGGLER=swap: the slow host, its fault, and when the trainer's monitor stops the attempt
        self.straggler: tuple[str, FaultRecord] | None = None
        self.straggler_stop = INF
        self.ckpts: list[tuple[int, float]] = []  # (step, complete at)
        self.ckpt = 0
        self.scripted = list(m.faults)
        self.random_failures = not m.faults
        self.scripted_fired_attempt = -1
        self.attempt_serial = 0
        self.time = {k: 0.0 for k in BUCKETS}
        self.allocated = 0.0
        self.faults: list[FaultRecord] = []
        self.open: list[FaultRecord] = []  # failures not yet back to training
        self.classes: dict[str, int] = {}
        self.person: dict[str, int] = {}
        self.jobs = 0
        self.job_start = 0.0  # the current job's start (its allocation granted)
        self.cold_starts: list[dict[str, float]] = []  # each job's first attempt, its start-up by stage
        self.attempts = 0
        self.sweep_s = 0.0  # the health sweep's time after the attempt just planned
        self.probe_now = 0.0  # the sweep's moment on the virtual clock (the attempt's end)
        self.sweeps = 0
        self.verdict = ""
        self.first_start: float | None = None
        self.done = False
        if m.train.local_daly and not (m.train.local_interval or m.train.local_interval_s):
            m.train.local_interval_s = round(simlocal.daly_interval_s(m), 1)
        self.local = simlocal.Tier(simlocal.costs(m)) if m.train.local else None
        scale = 1.0
        if m.failures.distribution == "weibull":
            scale = 1.0 / math.gamma(1.0 + 1.0 / m.failures.weibull_shape)
        self.weibull_scale = scale * m.failures.node_mtbf_h * 3600.0

    # ------------------------------------------------------------------------------------------ glue
    def _args(self, **kw: Any) -> argparse.Namespace:
        fo = self.m.failover
        base: dict[str, Any] = {
            "run_dir": str(self.run_dir),
            "jobid": "",
            "attempt": None,
            "next_attempt": False,
            "before": False,
            "rc": None,
            "log": None,
            "classification": None,
            "started": None,
            "ended": None,
            "now": None,
            "deadline": "",
            "progress_re": planlib.DEFAULT_PROGRESS_RE,
            "max_attempts": fo.max_attempts,
            "max_repeat": fo.max_repeat,
            "max_blind": fo.max_blind,
            "min_attempt_s": fo.min_attempt_s,
            "min_save_s": fo.min_save_s,
            "backoff": " ".join(f"{b:g}" for b in fo.backoff),
            "shrink": "1" if fo.shrink else "0",
            "min_nodes": fo.min_nodes,
            "apply": True,
            "shell": False,
            "sweep": "full" if self.m.sweep else "off",
            "sweep_timeout": f"{self.m.probe.timeout_s:g}",
        }
        base.update(kw)
        return argparse.Namespace(**base)

    def _chain(self, fn: Any, **kw: Any) -> str:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            fn(argparse.Namespace(run_dir=str(self.run_dir), **kw))
        return buf.getvalue().strip()

    def _mark_complete(self, step: int, when: float) -> None:
        """The marker the trainer writes last (agpt.ckptdir), then the trainer's pruning to `checkpoint_keep`."""
        root = self.run_dir / rundir.CKPT
        d = ckptdir.step_dir(root, step)
        d.mkdir(parents=True, exist_ok=True)
        (d / rundir.COMPLETE).write_text(ckptdir.marker_record(step, when=EPOCH + when))
        for old in ckptdir.complete(root)[: -self.m.train.checkpoint_keep]:
            shutil.rmtree(old.path, ignore_errors=True)

    def _settle(self, now: float) -> None:
        """Saves whose write finished by `now` become complete (their marker is written)."""
        keep = []
        for step, at in self.ckpts:
            if at <= now:
                if step > self.ckpt:
                    self.ckpt = step
                    self._mark_complete(step, at)
            else:
                keep.append((step, at))
        self.ckpts = keep

    # ------------------------------------------------------------------------------------------ the run
    def run(self) -> Result:
        m = self.m
        with _cached_patterns():
            while not self.done and self.t < self.horizon:
                self._job()
        self._settle(self.t)
        ideal = int(self.allocated / m.train.step_s)
        return Result(
            model=m.name,
            nodes=m.nodes,
            spares=self.spares,
            heartbeats=m.heartbeats,
            async_save=m.train.async_save,
            seed=self.seed,
            horizon_s=self.horizon,
            steps=self.ckpt,
            ideal_steps=ideal,
            allocated_s=self.allocated,
            elapsed_s=self.t,
            time=dict(self.time),
            faults=self.faults,
            classes=self.classes,
            person_stops=self.person,
            jobs=self.jobs,
            attempts=self.attempts,
            verdict=self.verdict,
            first_start_s=self.first_start or 0.0,
            cold_starts=self.cold_starts,
            local=None if self.local is None else simlocal.summary(m, self.local.costs),
            shrinks=self.shrinks,
            shrunk_s=self.shrunk_s,
        )

    def _allocation(self) -> list[str]:
        proven = set(chainlib.proven_bad_hosts(self.run_dir))
        ok = [h for h in self.pool if self.down_until.get(h, 0.0) <= self.t and h not in proven]
        want = self.m.nodes + self.spares
        if len(ok) < want:
            raise RuntimeError(f"the machine has {len(ok)} usable nodes, the job needs {want}")
        return self.rng.sample(ok, want)

    def _job(self) -> None:
        m = self.m
        wait = m.costs.queue_wait_s
        self.t += wait
        self.time["queue"] += wait
        if self.t >= self.horizon:
            return
        self.jobs += 1
        jobid = str(1000 + self.jobs)
        start = self.job_start = self.t
        if self.first_start is None:
            self.first_start = start
        deadline = start + m.costs.walltime_h * 3600.0
        self.slow, self.straggler, self.straggler_stop = 1.0, None, INF
        if self.local is not None:
            self.local.reset()
        # FAILOVER_SPARES unset: the loop splits the allocation itself; else the model's count.
        hostlib.init_run_hosts(self.run_dir, self._allocation(), spares=m.spares, resolve_timeout=0)
        shrinklib.write_layout(self.run_dir, self.layout)  # the job script's `agpt check --run-dir`
        self._chain(chainlib.cmd_start, job=jobid, predecessor="", max_jobs=m.chain.max_jobs)
        start_step = chainlib.latest_step(self.run_dir)
        self.t += m.costs.job_start_s  # on the allocation's clock: the walltime runs from `start`
        self.time["restarts"] += m.costs.job_start_s
        rc = self._attempts(jobid, deadline)
        end = self.t
        self.allocated += end - start
        self._settle(end)
        self._forget_node_memory(end)
        out = self._chain(
            chainlib.cmd_end,
            job=jobid,
            rc=rc,
            start_step=start_step,
            started=EPOCH + start,
            ended=EPOCH + end,
            next="next",
            max_jobs=m.chain.max_jobs,
            max_no_progress=m.chain.max_no_progress,
        )
        words = out.split()
        keep, verdict, reason = words[0], words[1], words[2]
        if keep == "keep":
            return
        self.verdict = verdict
        if verdict == "done":
            self.done = True
            return
        why = reason if reason != "-" else verdict
        why = why.split("(")[0]
        if verdict in ("repeat", "stuck"):  # which class the planner saw repeat: `'system' at step N ...`
            stops = [
                e for e in planlib.read_events(self.run_dir / "events.jsonl") if e.get("event") == "stop"
            ]
            m_cls = re.match(r"'(\w+)'|(\w+): ", str(stops[-1].get("reason", ""))) if stops else None
            if m_cls:
                why = f"{why} {m_cls.group(1) or m_cls.group(2)}"
        if self.app_bug_step is not None:  # the model's deterministic bug: the one stop that is right
            why = f"{why} (bug)"
        self.person[why] = self.person.get(why, 0) + 1
        wait = m.costs.person_response_h * 3600.0
        self.t += wait
        self.time["waiting_for_a_person"] += wait
        # The person finds what broke, takes it out, and starts the chain again.
        for h in list(self.hung_until):
            self.down_until[h] = self.t + m.failures.repair_h * 3600.0
            del self.hung_until[h]
        self.app_bug_step = None
        self.misreads.clear()
        chain_file = self.run_dir / "chain.jsonl"
        if chain_file.exists():
            chain_file.rename(self.run_dir / f"chain.{self.jobs}.jsonl")

    def _forget_node_memory(self, end: float) -> None:
        """The job ended at END and its allocation goes with it: steps only node memory held (the local tier's
        newest past the newest global checkpoint) were counted as trained, and the next job trains them again."""
        if self.local is None or end >= self.horizon:
            return
        newest = self.local.newest(end)
        if newest is not None and newest > self.ckpt:
            lost = (newest - self.ckpt) * self.m.train.step_s
            self.time["lost_work"] += lost
            self.time["productive"] -= lost

    def _attempts(self, jobid: str, deadline: float) -> int:
        n = 0
        while True:
            n += 1
            before = planlib.run(
                self._args(
                    jobid=jobid, attempt=n, before=True, now=EPOCH + self.t, deadline=str(EPOCH + deadline)
                )
            )
            if before.action == "stop":
                return before.exit or 0
            _rc, plan = self._attempt(jobid, n, deadline)
            self.t += self.sweep_s  # the sweep ran between the attempt's end and the decision
            self.time["detection"] += self.sweep_s
            if plan.action == "stop":
                return plan.exit or 0
            self.save_first = plan.then is not None
            wait = self.m.costs.classify_s + plan.backoff_s
            self.t += wait
            self.time["backoff"] += wait
            if self.t >= self.horizon:
                return 75

    def _attempt(self, jobid: str, n: int, deadline: float) -> tuple[int, planlib.Plan]:
        """One attempt: launch, train until something ends it, detection; then the real classifier and planner
        on its log, as lib/failover.sh calls them."""
        c = self.m.costs
        self.attempts += 1
        self.attempt_serial += 1
        self.sweep_s = 0.0
        active = hostlib.read_hosts(self.run_dir / "hosts" / "active")
        self.pace = (
            1.0 / shrinklib.fit(self.layout, len(active)).throughput if len(active) < self.m.nodes else 1.0
        )
        launch = self.t
        for f in self.open:
            if f.relaunched_s is None:
                f.relaunched_s = launch - f.time_s
            f.attempts += 1
        resumed, restore, tier = self._resume_point(launch)
        ready = launch + c.start_s(first=n == 1, ranks=len(active) * self.layout.ranks_per_node) + restore
        for f in self.open:
            if f.back_s is None:  # what this attempt would cost, if it comes back
                f.tier, f.stages = tier, simlocal.stages(self.m, f, launch, restore)
        end = self._train(active, launch, ready, resumed, deadline, save_only=self.save_first)
        self.save_first = False
        if n == 1 and end.first is not None:  # a job's cold start: its first attempt's first step
            self.cold_starts.append(self._cold_start(launch, restore, len(active)))
        read = self._misread(end, active)  # how its log reads: what evidence the watch can end it on
        log = self._write_log(jobid, n, end, active, resumed, read) if end.kind != "horizon" else None
        ended = self._detected(end, launch, ready, deadline, read[0], log is not None and self._ends_on(log))
        self._account(end, launch, ready, ended)
        if self.pace > 1.0:
            self.shrunk_s += ended - launch
        self.t = ended
        if log is None:  # the horizon
            self.done = True
            return 75, planlib.Plan(action="stop", verdict="resubmit", exit=75)
        return self._classify_and_plan(jobid, n, end, active, launch, ended, deadline, log, read[0])

    def _cold_start(self, launch: float, restore: float, hosts: int) -> dict[str, float]:
        """A chained job's first attempt by stage, the job's start to its first step done: the job script's
        own start (`costs.job_start_s`), the launcher, a cold rank's imports and model build, the communicator's
        init, the state restore (the global checkpoint: node memory holds nothing in a new allocation)."""
        c = self.m.costs
        ranks = hosts * self.layout.ranks_per_node
        return {"job start": launch - self.job_start, "process start": c.launcher_start_s,
                "imports": c.imports_s, "model build": c.model_build_s, "communicator": c.comm_init_s(ranks),
                "state restore": restore, "first step": self.m.train.step_s}  # fmt: skip

    def _resume_point(self, t: float) -> tuple[int, float, str | None]:
        """(step, restore seconds, tier) of an attempt launched at T: the newest complete local step of this job
        when it is at least as new as the newest global checkpoint (sim.local), else the global one."""
        c = self.m.costs
        step = self.local.newest(t) if self.local is not None else None
        if step is not None and step >= self.ckpt:
            assert self.local is not None
            return step, self.local.costs.restore_s, "local"
        return self.ckpt, c.load_s if self.ckpt else 0.0, "global" if self.ckpt else None

    def _detected(self, end: AttemptEnd, launch: float, ready: float, deadline: float,
                  misread: str | None = None, line_evidence: bool = False) -> float:  # fmt: skip
        """When the failover loop sees the attempt over: the watchdog, the heartbeats or the launcher's
        teardown after the failure, never past the job's deadline.  Kill on evidence (FAILOVER_KILL_ON_EVIDENCE,
        agpt.watch.evidence): an attempt whose log holds a line the real `ends` patterns match (LINE_EVIDENCE,
        Sim._ends_on: a node failure, a task's death or error exit, whatever the classifier later makes of the
        log) ends after the evidence grace, not the launcher's teardown; a hung host the heartbeats show stopped,
        after two publish intervals of silence and a second look one interval later."""
        c = self.m.costs
        evidence = self.m.failover.kill_on_evidence
        if end.kind == "hang":
            if self.m.heartbeats and evidence and misread is None:
                at = max(end.at, ready) + 3 * c.heartbeat_interval_s + c.evidence_grace_s
            elif self.m.heartbeats:
                at = max(end.at, ready) + c.heartbeat_timeout_s + c.grace_s
            elif end.first is None:
                at = launch + c.startup_timeout_s + c.grace_s
            else:
                at = end.at + c.watchdog_timeout_s + c.grace_s
        elif end.kind in ("deadline", "done", "horizon", "straggler"):  # the trainer's own stop: no teardown
            at = end.at
        elif evidence and line_evidence:
            at = end.at + min(c.evidence_grace_s, c.teardown_s)
        else:
            at = end.at + c.teardown_s
        return min(max(at, end.at), max(deadline, end.at))

    def _account(self, end: AttemptEnd, launch: float, ready: float, ended: float) -> None:
        """The attempt's time into the buckets; its failure opened, the failures it recovered from closed."""
        tr = self.m.train
        self.time["restarts"] += max(0.0, min(ready, end.at) - launch)
        if end.kind not in ("deadline", "done", "horizon"):
            self.time["detection"] += ended - end.at
        self._settle(ended)
        if self.local is not None:
            self.local.lost_at(end.at)  # a local save still being written died with the job
        kept = self._resume_point(ended)[0]
        fault = end.fault
        if fault is not None:
            fault.job = self.jobs
            fault.detected_s = ended - fault.time_s
            fault.steps_lost = max(0, end.step - kept)
            self.open.append(fault)
        if end.first is not None:  # back to training: close the failures this attempt recovered from
            for f in self.open:
                if f is not fault and f.back_s is None:
                    f.back_s = ready + tr.step_s - f.time_s  # the first step back done
                    f.next_job = f.job != self.jobs
            self.open = [f for f in self.open if f is fault]
        lost = end.step - kept  # steps past the newest complete checkpoint (of either tier): done again
        if lost > 0 and end.kind not in ("done", "horizon"):
            self.time["lost_work"] += lost * tr.step_s * self.slow * self.pace
            self.time["productive"] -= lost * tr.step_s
            self.time["slow_steps"] -= lost * tr.step_s * (self.slow * self.pace - 1.0)

    def _write_log(self, jobid: str, n: int, end: AttemptEnd, active: list[str], resumed: int,
                   read: tuple[str | None, str | None]) -> tuple[Path, int]:  # fmt: skip
        """The attempt's log in the launcher's format, as its misread (READ) makes it; (path, exit status)."""
        log = self.run_dir / "attempts" / f"{jobid}.{n}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        misread, named = read
        # A straggler's swap stops the trainer as the deadline does: the same log.
        kind = "deadline" if end.kind == "straggler" else end.kind
        if misread == "recoverable":
            kind = "unreadable"
        elif misread == "unresolved":
            kind = "system"
        elif misread == "stopped":
            kind = "app_error"
        elif misread == "evicted":
            kind = "node"
        rc = logs.write(log, launcher=self.m.launcher, kind=kind, hosts=active, bad=named, resumed=resumed or None,
                        first=end.first, last=end.last,
                        local_tier=self.local is not None and end.first is not None)  # fmt: skip
        return log, rc

    def _ends_on(self, written: tuple[Path, int]) -> bool:
        """Whether the watch's kill on evidence ends this attempt at once: the real `ends` patterns (`agpt failover
        patterns --ends`, what lib/failover.sh hands `agpt watch --kill-on`) run over its log by the watch's own
        matcher (agpt.watch.evidence.LineEvidence)."""
        if self._ends is None:
            self._ends = LineEvidence.from_list(
                patlib.ends(patlib.load(patlib.DEFAULT_SETS)), "ends patterns"
            )
        return LineEvidence(self._ends.entries).feed(0, written[0].read_bytes()) is not None  # a fresh carry

    def _classify_and_plan(self, jobid: str, n: int, end: AttemptEnd, active: list[str], launch: float,
                           ended: float, deadline: float, written: tuple[Path, int],
                           misread: str | None) -> tuple[int, planlib.Plan]:  # fmt: skip
        """The real classifier on the attempt's log, the real planner's decision."""
        m = self.m
        log, rc = written
        found = classifylib.classify(
            log, rc, active, None, EPOCH + deadline, EPOCH + ended, None,
            margin_s=m.failover.walltime_margin_s,
        )  # fmt: skip
        if end.kind == "straggler" and end.bad:  # the monitor's request, read as the loop's classify reads it
            slower = (m.behaviour.straggler_slowdown - 1) * 100
            evidence = (f"straggler: {end.bad} computes +{slower:.0f}% per step over its peers' median for "
                        f"{m.failover.straggler_windows} windows in a row")  # fmt: skip
            straggler.request_swap(self.run_dir, f"{jobid}.{n}", end.bad, evidence, EPOCH + end.at)
            hb_dir = self.run_dir / heartbeat_format.DIR
            classifylib.apply_heartbeats(found, hb_dir, active, f"{jobid}.{n}", rc)
        cls = found.to_json()
        if end.kind == "hang" and m.heartbeats and end.bad and not misread:
            cls.update({"class": "node", "bad_hosts": [end.bad]})  # what apply_heartbeats makes of a hang
            cls["evidence"] = [f"heartbeat: {end.bad} stopped", *cls.get("evidence", [])]
        self.classes[cls["class"]] = self.classes.get(cls["class"], 0) + 1
        cls_path = log.with_suffix(".class.json")
        cls_path.write_text(json.dumps(cls))
        self.sweep_s = 0.0
        self.probe_now = ended
        plan = planlib.run(
            self._args(jobid=jobid, attempt=n, rc=rc, log=str(log), classification=str(cls_path),
                       started=EPOCH + launch, ended=EPOCH + ended, now=EPOCH + ended, deadline=str(EPOCH + deadline)),
            prober=self._probe,
        )  # fmt: skip
        for h in plan.swap_out:
            if not plan.blind:
                self.down_until[h] = ended + m.failures.repair_h * 3600.0
        self.shrinks += plan.shrink is not None
        return rc, plan

    def _misread(self, end: AttemptEnd, active: list[str]) -> tuple[str | None, str | None]:
        """How this attempt's failure is misread (a kind of FaultModel.misread, None when it is read right), and
        the host its log names.  Drawn at the fault's first reading; its recurrences (the same cause failing the
        attempts after it) are read the same way when that reading was `stopped`, `evicted` (the log names the same
        healthy host, by then out of the allocation) or `unresolved`, and drawn again for `recoverable` alone
        otherwise, as before the kinds (a relaunch's log is another look)."""
        if end.kind not in ("node", "hang", "system", "app"):
            return None, end.bad
        cause = (end.kind, self.outage_until if end.kind == "system" else
                 self.app_bug_step if end.kind == "app" else end.bad)  # fmt: skip
        x = self.rng.random()  # one draw per attempt read, as before the kinds: no misreads, the same run
        shares = self.m.misread.get(end.kind, {})
        kind, named = self.misreads.get(cause, (None, end.bad)) if end.fault is None else (None, end.bad)
        if kind in STICKY:
            return kind, named
        if end.fault is None and cause in self.misreads:  # a recurrence of a fault read right or recoverably
            return ("recoverable" if x < shares.get("recoverable", 0.0) else None), end.bad
        acc, kind = 0.0, None
        for k, share in shares.items():
            acc += share
            if x < acc:
                kind = k
                break
        healthy = [h for h in active if h != end.bad]
        if kind == "evicted" and not healthy:
            kind = "recoverable"
        named = self.rng.choice(healthy) if kind == "evicted" else end.bad
        self.misreads[cause] = (kind, named)
        if end.kind == "system":
            self.outage_unseen = kind == "stopped"
        return kind, named

    def _probe(self, hosts: Sequence[str], settings: sweeplib.SweepSettings) -> sweeplib.SweepResult:
        """The health sweep as the model sees it: a failed node whose host is gone (`probe.gone`) shows no sign of
        life and is always found, a failed device on a live host fails its probe with `finds_node`, a host that
        hangs every attempt fails the probe or the collective with `finds_hung`, every host fails during a site
        outage.  Its cost: the probe launch (`Probe.launch_s`), every host answering (in an outage, at the mounts'
        deadline: `MOUNT_SHARE` of the timeout); with a host gone, the others' signs of life (the launcher's start,
        which is also their spread at most) and the wait for a silent host that spread sets
        (agpt.failover.sweep.GoneWatch) when that is later; a probe that hangs on a live host, the whole timeout.
        Then, as the real sweep does, a collective only when the probe named nobody: one round
        (`Probe.round_for`), or ceil(log2 N) + 1 of them when it has a bad host to localise."""
        p, now = self.m.probe, self.probe_now
        launch = p.launch_s(self.m.costs)
        gone = False
        self.sweeps += 1
        res = sweeplib.SweepResult(ran=True, mode=settings.mode, hosts=list(hosts), rounds=1)
        hung: list[str] = []
        outage = now < self.outage_until and not self.outage_unseen
        if outage:
            res.failed = {h: "mount: the shared filesystem does not answer" for h in hosts}
        else:
            for h in hosts:
                down = self.down_until.get(h, 0.0) > now
                if down and (p.gone >= 1.0 or (p.gone > 0.0 and self.rng.random() < p.gone)):
                    res.failed[h], gone = "no sign of life: the host is gone", True  # silence is never missed
                elif down and self.rng.random() < p.finds_node:
                    res.failed[h] = f"agpt-probe: {h} FAILED: device: the accelerator does not initialise"
                elif self.hung_until.get(h, 0.0) > now and self.rng.random() < p.finds_hung:
                    hung.append(h)
        if outage:  # a hung mount: every probe fails its mounts' look at the deadline (agpt.probe)
            cost = launch + p.timeout_s * sweeplib.MOUNT_SHARE
        elif gone:
            start = self.m.costs.launcher_start_s
            cost = max(launch, start + sweeplib.wait_for_gone(start, p.timeout_s * sweeplib.GRACE_SHARE))
        else:
            cost = launch
        if settings.mode == "full" and len(hosts) >= 2 and not res.failed:
            res.rounds += sweeplib.max_rounds(len(hosts)) if hung else 1
            res.failed.update({h: "collective: timed out" for h in hung})
        elif hung:  # no collective: only a probe that hangs on that host names it
            res.failed.update({h: "agpt-probe: no answer within the timeout" for h in hung})
            cost = p.timeout_s
        cost += p.round_for(self.m.costs, len(hosts)) * (res.rounds - 1)
        sweeplib.guard(res, settings)
        res.cost_s = cost
        self.sweep_s = cost
        return res


def simulate(m: FaultModel, *, seed: int = 1, workdir: Path | None = None) -> Result:
    """Run the model on the virtual clock; deterministic for a seed.  The run directory lives in a temporary
    folder (in memory where /dev/shm exists) unless `workdir` is given."""
    if workdir is not None:
        return Sim(m, seed=seed, workdir=Path(workdir)).run()
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="agpt-sim-", dir=base) as d:
        return Sim(m, seed=seed, workdir=Path(d)).run()
