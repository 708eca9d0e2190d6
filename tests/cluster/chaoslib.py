#!/usr/bin/env python3
"""Break a training run on the local Slurm cluster on a schedule, and judge how it recovered.

Why a library: `make demo` (a node failure and a hang while a chained job trains) and tests/cluster/chaos (the
full seeded schedule) must inject faults the same way and read the run directory the same way.  Standard
library only, so it runs with any python3.

Faults (`KIND@STEP`, comma separated; a fault fires in a later attempt than the one before it, once that
attempt's log reaches STEP):
  kill@S   `kill -9` of one rank                   stop@S   SIGSTOP of one rank (a silent hang)
  node@S   `tests/cluster/node fail` of one active host that is not the batch host (its slurmd and ranks die)
  ckpt@S   `kill -9` of every rank while ckpt/step-S has no `.complete` (the job must slow that save:
           AGPT_TEST_CKPT_WRITE_DELAY=S:SECONDS)
A rank is a `python ... train` process whose parent is a slurmstepd and whose environment holds the run's
AGPT_RUN_DIR (or, under the tests' fork server, the rank that such a client stands for); its host is its
SLURMD_NODENAME.  Hosts are picked by a random.Random(seed) among the candidates.

  chaoslib.py inject --run-dir R --cluster-dir C --schedule node@60,stop@150 [--seed N] [--log FILE]
  chaoslib.py judge --run-dir R --faults FILE   (prints the figures as JSON)
  chaoslib.py status|last --run-dir R           (a progress line | the chain's last verdict, job, attempt log)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KINDS = ("kill", "stop", "node", "ckpt")
# Progress lines, with or without the `0: ` label of `srun --label`.
STEP_RE = re.compile(rb"^(?:\d+: )?step=(\d+) .*?\btps=([0-9.eE+-]+)", re.M)
LOSS_RE = re.compile(r"^(?:\d+: )?step=(\d+) loss=(\S+)", re.M)


@dataclass(kw_only=True, slots=True)
class Rank:
    """One training process of the run."""

    pid: int
    node: str
    procid: int
    step_id: str  # JOBID.STEP


@dataclass(kw_only=True, slots=True)
class Fault:
    """A fault to inject, and what happened when it was."""

    kind: str
    step: int
    fired: bool = False
    time: float | None = None
    at_step: int | None = None
    hosts: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    log: str = ""
    note: str = ""


def parse_schedule(text: str) -> list[Fault]:
    """`node@60,stop@150` -> faults in step order; a bad item raises ValueError naming it."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        kind, sep, step = item.partition("@")
        if kind not in KINDS or not sep or not step.isdigit():
            raise ValueError(
                f"--schedule: bad fault {item!r} (want KIND@STEP, KIND one of {', '.join(KINDS)})"
            )
        out.append(Fault(kind=kind, step=int(step)))
    return out


# -- the run's processes and files -----------------------------------------------------------------
def _environ(pid: str) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def _comm(pid: str | int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _ppid(pid: str) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[1]


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _forked(pid: str, env: dict[str, str]) -> int | None:
    """The process that trains for the task PID: PID itself, or, where the tests' fork server started the rank
    (tests/python/agpt_zygote.py: PID is its client), the rank's own pid; None while a client has none yet."""
    sock = env.get("AGPT_TEST_ZYGOTE", "")
    if not sock or sock == "0" or "agpt_zygote.py" not in _cmdline(pid):
        return int(pid)
    try:
        rank = int((Path(sock).parent / "pids" / pid).read_text())
    except (OSError, ValueError):
        return None
    return rank if _running(rank) else None


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def ranks(run_dir: Path) -> list[Rank]:
    """The live training ranks of RUN_DIR, by SLURM_PROCID."""
    want = str(run_dir.resolve())
    out = []
    for p in Path("/proc").iterdir():
        pid = p.name
        if not pid.isdigit() or _comm(_ppid(pid)) != "slurmstepd":
            continue
        env = _environ(pid)
        if env.get("AGPT_RUN_DIR", "").rstrip("/") != want or "SLURMD_NODENAME" not in env:
            continue
        if not env.get("SLURM_STEP_ID", "").isdigit() or not _running(int(pid)):
            continue
        rank = _forked(pid, env)
        if rank is None:
            continue
        out.append(
            Rank(
                pid=rank,
                node=env["SLURMD_NODENAME"],
                procid=int(env.get("SLURM_PROCID", "-1")),
                step_id=f"{env.get('SLURM_JOB_ID', '?')}.{env.get('SLURM_STEP_ID', '?')}",
            )
        )
    return sorted(out, key=lambda r: r.procid)


def _attempt_key(p: Path) -> tuple[int, int]:
    job, _, n = p.stem.rpartition(".")
    return (int(job) if job.isdigit() else 0, int(n) if n.isdigit() else 0)


def attempt_logs(run_dir: Path) -> list[Path]:
    """attempts/JOBID.N.log in the order they ran."""
    return sorted((run_dir / "attempts").glob("*.log"), key=_attempt_key)


def last_step(log: Path) -> int | None:
    """The last `step=N` line of an attempt log (read from its tail)."""
    try:
        with log.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 8192))
            tail = fh.read()
    except OSError:
        return None
    found = STEP_RE.findall(tail)
    return int(found[-1][0]) if found else None


def chain_records(run_dir: Path) -> list[dict[str, Any]]:
    return _jsonl(run_dir / "chain.jsonl")


def chain_stopped(run_dir: Path) -> bool:
    """True once a job of the chain decided to stop it (done, stuck, repeat or a guard rail)."""
    return any(r.get("decision") == "stop" for r in chain_records(run_dir))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def batch_host(step_id: str, env: dict[str, str]) -> str:
    """The node running the job's batch script (failing it would end the whole job, not a step)."""
    job = step_id.split(".")[0]
    r = subprocess.run(["squeue", "-h", "-j", job, "-o", "%B"], env=env, capture_output=True, text=True)
    return r.stdout.strip()


# -- injection -------------------------------------------------------------------------------------
@dataclass(kw_only=True, slots=True)
class Injector:
    """Fires a schedule of faults into RUN_DIR's attempts, one per attempt, in step order."""

    run_dir: Path
    cluster_dir: Path
    faults: list[Fault]
    seed: int = 0
    log: Path | None = None
    world: int = 0  # ranks an attempt must have before a fault fires (0: any)
    poll_s: float = 0.1
    say: Any = None
    stop_min_left_s: float = 0.0  # a SIGSTOP waits for an attempt whose job has this long left (0: any)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.faults.sort(key=lambda f: f.step)

    def _env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.cluster_dir / "slurm.conf")}

    def _time_left(self, log: Path) -> float:
        """Seconds left to the job of attempt log JOBID.N.log (squeue %L); infinity when unknown."""
        r = subprocess.run(["squeue", "-h", "-j", log.name.split(".")[0], "-o", "%L"], env=self._env(),
                           capture_output=True, text=True)  # fmt: skip
        days, _, clock = r.stdout.strip().rpartition("-")
        try:
            parts = [int(x) for x in clock.split(":")]
        except ValueError:
            return float("inf")
        secs = 0
        for x in parts:
            secs = secs * 60 + x
        return secs + (int(days) * 86400 if days.isdigit() else 0)

    def _say(self, msg: str) -> None:
        if self.say is not None:
            self.say(msg)

    def run(self, timeout_s: float) -> list[Fault]:
        """Inject every fault (or give up at the timeout or when the chain stops); returns them."""
        deadline = time.monotonic() + timeout_s
        used_logs: set[str] = set()
        for f in self.faults:
            while time.monotonic() < deadline and not chain_stopped(self.run_dir):
                if self._try(f, used_logs):
                    break
                time.sleep(self.poll_s)
            if not f.fired:
                f.note = "not fired: the chain stopped or the injector timed out first"
                self._say(f"chaos: {f.kind}@{f.step}: {f.note}")
            self._record(f)
        return self.faults

    def _record(self, f: Fault) -> None:
        if self.log is not None:
            with self.log.open("a") as fh:
                fh.write(json.dumps(asdict(f)) + "\n")

    def _try(self, f: Fault, used_logs: set[str]) -> bool:
        logs = attempt_logs(self.run_dir)
        if not logs or logs[-1].name in used_logs:
            return False
        log = logs[-1]
        live = ranks(self.run_dir)
        if not live or (self.world and len(live) != self.world) or len({r.step_id for r in live}) != 1:
            return False
        step = last_step(log)
        if f.kind == "ckpt":
            d = self.run_dir / "ckpt" / f"step-{f.step}"
            if not d.is_dir() or (d / ".complete").exists():
                return False
        elif step is None or step < f.step:
            return False
        if f.kind == "stop" and self.stop_min_left_s and self._time_left(log) < self.stop_min_left_s:
            return False  # the job's walltime would end the hang before the watchdog could see it
        f.at_step, f.log, f.time = step, log.name, time.time()
        if f.kind in ("kill", "stop"):
            victim = self.rng.choice(live)
            os.kill(victim.pid, signal.SIGKILL if f.kind == "kill" else signal.SIGSTOP)
            f.hosts, f.pids = [victim.node], [victim.pid]
        elif f.kind == "ckpt":
            for r in live:
                os.kill(r.pid, signal.SIGKILL)
            f.hosts, f.pids = sorted({r.node for r in live}), [r.pid for r in live]
        else:  # node
            batch = batch_host(live[0].step_id, self._env())
            nodes = sorted({r.node for r in live} - {batch})
            if not nodes:
                return False
            victim_node = self.rng.choice(nodes)
            res = subprocess.run(
                [str(HERE / "node"), "--dir", str(self.cluster_dir), "fail", victim_node],
                env=self._env(),
                capture_output=True,
                text=True,
            )
            if res.returncode != 0:
                f.note = f"node fail exited {res.returncode}: {res.stderr.strip()}"
            f.hosts, f.pids = [victim_node], [x.pid for x in live if x.node == victim_node]
        f.fired = True
        used_logs.add(log.name)
        what = {"kill": "kill -9 of a rank", "stop": "SIGSTOP of a rank", "node": "node failure", "ckpt": ""}
        desc = what[f.kind] or f"kill -9 of every rank while ckpt/step-{f.step} has no .complete"
        self._say(f"chaos: {desc} on {','.join(f.hosts)} at step {step} ({log.name})")
        return True


# -- watching the checkpoints ------------------------------------------------------------------------
@dataclass(kw_only=True, slots=True)
class CkptWatch:
    """Polls RUN_DIR/ckpt: every checkpoint seen complete, and how each one that vanished went."""

    run_dir: Path
    poll_s: float = 0.1
    seen: dict[int, dict[str, int]] = field(default_factory=dict)  # step -> {file: size} when complete
    # step -> the complete steps present when it vanished
    gone: dict[int, list[int]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _complete_now(self) -> dict[int, Path]:
        out: dict[int, Path] = {}
        try:
            entries = list((self.run_dir / "ckpt").iterdir())
        except OSError:
            return out
        for p in entries:
            if p.name.startswith("step-") and p.name[5:].isdigit() and (p / ".complete").exists():
                out[int(p.name[5:])] = p
        return out

    @staticmethod
    def _files(p: Path) -> dict[str, int]:
        out = {}
        try:
            for f in p.iterdir():
                if f.is_file():
                    out[f.name] = f.stat().st_size
        except OSError:
            pass
        return out

    def poll(self) -> None:
        now = self._complete_now()
        for step, p in now.items():
            if step not in self.seen:
                self.seen[step] = self._files(p)
        for step in self.seen:
            if step not in now and step not in self.gone:
                self.gone[step] = sorted(now)

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                self.poll()
                self._stop.wait(self.poll_s)

        self._thread = threading.Thread(target=loop, name="ckpt-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.poll()

    def problems(self, keep: int) -> list[str]:
        """Complete checkpoints lost other than by the keep policy, or changed since they were complete."""
        out = []
        now = self._complete_now()
        for step, files in sorted(self.seen.items()):
            if step in now:
                have = self._files(now[step])
                changed = [n for n, size in files.items() if have.get(n) != size]
                if changed:
                    out.append(f"ckpt/step-{step}: files changed after .complete: {', '.join(changed)}")
            else:
                newer = [s for s in self.gone.get(step, []) if s > step]
                if len(newer) < keep:
                    out.append(
                        f"ckpt/step-{step}: complete, then removed with only {len(newer)} newer (keep {keep})"
                    )
        return out


# -- judging ---------------------------------------------------------------------------------------
def losses(text: str) -> dict[int, str]:
    """step -> loss, as printed (text, so equality is bit equality)."""
    return {int(s): loss for s, loss in LOSS_RE.findall(text)}


def bad_hosts(run_dir: Path) -> tuple[list[str], list[str]]:
    """(proven, blind) hosts of RUN_DIR/hosts/bad."""
    proven: list[str] = []
    blind: list[str] = []
    try:
        lines = (run_dir / "hosts" / "bad").read_text().splitlines()
    except OSError:
        return proven, blind
    for line in lines:
        parts = line.split("\t")
        if len(parts) >= 4 and parts[0]:
            (blind if parts[3] == "blind" else proven).append(parts[0])
    return proven, blind


def _log_steps(path: Path) -> tuple[int | None, int | None]:
    """(first, last) step logged in an attempt log."""
    found = STEP_RE.findall(path.read_bytes())
    return (int(found[0][0]), int(found[-1][0])) if found else (None, None)


def figures(
    run_dir: Path, faults: list[Fault], tokens_per_step: int, *, started: float | None = None
) -> dict[str, Any]:
    """Effective training time ratio and steps lost per fault, from the attempt logs, events and chain.

    Wall time runs from `started` (the submission; default the first start recorded) to the last job's end.
    """
    events = [e for e in _jsonl(run_dir / "events.jsonl") if e.get("event") == "attempt"]
    chain = chain_records(run_dir)
    logs = attempt_logs(run_dir)
    # Productive time: each step's time (tokens / tps) in the last attempt that ran it.
    step_s: dict[int, float] = {}
    for path in logs:
        for s, tps in STEP_RE.findall(path.read_bytes()):
            t = float(tps)
            if t > 0:
                step_s[int(s)] = tokens_per_step / t
    productive = sum(step_s.values())
    starts = [float(r["started"]) for r in [*chain, *events] if isinstance(r.get("started"), int | float)]
    ends = [float(r["ended"]) for r in [*chain, *events] if isinstance(r.get("ended"), int | float)]
    if started is None and starts:
        started = min(starts)
    wall = (max(ends) - started) if started is not None and ends else None
    # Steps lost by an attempt: its last step minus the step the next attempt resumed from (both read from
    # the logs, so an attempt whose job was killed before it recorded an event still counts).
    spans = [(p.name, *_log_steps(p)) for p in logs]
    lost_by_log: dict[str, int | None] = {}
    for i, (name, _first, last) in enumerate(spans):
        nxt_first = next((f for _n, f, _l in spans[i + 1 :] if f is not None), None)
        lost_by_log[name] = (
            max(0, last - (nxt_first - 1)) if last is not None and nxt_first is not None else None
        )
    rows = []
    for f in faults:
        rows.append({"fault": f"{f.kind}@{f.step}", "fired": f.fired, "at_step": f.at_step,
                     "hosts": f.hosts, "attempt": f.log, "steps_lost": lost_by_log.get(f.log) if f.fired else None})  # fmt: skip
    faulted = {f.log for f in faults if f.fired}
    # Walltime hand-overs: a job that stopped with `resubmit` because of its deadline (the trainer saved at
    # it, or too little time was left for another attempt), not for want of spares; or a job the scheduler
    # killed at its time limit before it could record an end (the next job of the chain took over).  Steps an
    # injected fault lost in the same attempt are counted against the fault, not the walltime.
    by_attempt = {(str(e.get("jobid")), e.get("attempt")): e for e in events}
    for stop in _jsonl(run_dir / "events.jsonl"):
        reason = str(stop.get("reason", ""))
        if stop.get("event") != "stop" or stop.get("verdict") != "resubmit":
            continue
        if "deadline" not in reason and "FAILOVER_MIN_ATTEMPT_S" not in reason:
            continue
        ev = by_attempt.get((str(stop.get("jobid")), stop.get("attempt")), {})
        log = str(ev.get("log", "")).rsplit("/", 1)[-1]
        lost = 0 if log in faulted else lost_by_log.get(log)
        rows.append({"fault": "walltime", "fired": True, "at_step": ev.get("last_step"), "hosts": [],
                     "attempt": log or f"{stop.get('jobid')}.-", "steps_lost": lost, "why": reason})  # fmt: skip
    for name, _first, last in spans:
        if b"DUE TO TIME LIMIT" in (run_dir / "attempts" / name).read_bytes():
            rows.append({"fault": "walltime", "fired": True, "at_step": last, "hosts": [], "attempt": name,
                         "steps_lost": 0 if name in faulted else lost_by_log.get(name),
                         "why": "the scheduler killed the job at its time limit; the next job took over"})  # fmt: skip
    return {
        "productive_s": round(productive, 2),
        "wall_s": round(wall, 2) if wall is not None else None,
        "effective_ratio": round(productive / wall, 4) if wall else None,
        "jobs": len(chain),
        "attempts": len(logs),
        "faults": rows,
    }


def table(fig: dict[str, Any]) -> str:
    lines = [f"{'FAULT':<12} {'AT STEP':>7}  {'HOSTS':<12} {'ATTEMPT':<10} {'STEPS LOST':>10}"]
    for r in fig["faults"]:
        lost = "-" if r["steps_lost"] is None else str(r["steps_lost"])
        at = "-" if r["at_step"] is None else str(r["at_step"])
        lines.append(
            f"{r['fault']:<12} {at:>7}  {','.join(r['hosts']) or '-':<12} {r['attempt'] or '-':<10} {lost:>10}"
        )
    lines.append(
        f"effective training time ratio: {fig['effective_ratio']} (productive {fig['productive_s']} s / wall "
        f"{fig['wall_s']} s); {fig['jobs']} job(s), {fig['attempts']} attempt(s)"
    )
    return "\n".join(lines)


def status(run_dir: Path) -> str:
    """One progress line for a person watching: step, jobs, attempts, faults."""
    try:
        step = Path(run_dir / "progress").read_text().split()[0].partition("=")[2]
    except (OSError, IndexError):
        step = "0"
    logs = attempt_logs(run_dir)
    jobs = sorted({p.stem.rpartition(".")[0] for p in logs}, key=lambda j: (len(j), j))
    return f"step {step}, job {jobs[-1] if jobs else '-'} ({len(jobs)} so far), attempt {len(logs)}"


def last(run_dir: Path) -> str:
    """`VERDICT JOBID LOG`: the chain's last verdict and job, and the newest attempt log ("-" when unknown)."""
    recs = chain_records(run_dir)
    logs = attempt_logs(run_dir)
    verdict = str(recs[-1].get("verdict", "-")) if recs else "-"
    job = str(recs[-1].get("jobid", "-")) if recs else "-"
    return f"{verdict} {job} {logs[-1] if logs else '-'}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    inj = sub.add_parser("inject", help="fire a schedule of faults into a running chain")
    inj.add_argument("--run-dir", required=True, type=Path)
    inj.add_argument("--cluster-dir", required=True, type=Path)
    inj.add_argument("--schedule", required=True)
    inj.add_argument("--seed", type=int, default=0)
    inj.add_argument("--world", type=int, default=0, help="ranks an attempt must have before a fault fires")
    inj.add_argument("--log", type=Path, help="append each fault as a JSON line")
    inj.add_argument("--timeout", type=float, default=900.0)
    for name, what in (("status", "one progress line"), ("last", "VERDICT JOBID NEWEST_ATTEMPT_LOG")):
        sub.add_parser(name, help=what).add_argument("--run-dir", required=True, type=Path)
    jd = sub.add_parser("judge", help="print the figures of a run as JSON")
    jd.add_argument("--run-dir", required=True, type=Path)
    jd.add_argument("--faults", type=Path, help="the --log of inject")
    jd.add_argument("--tokens-per-step", type=int, default=512)
    args = ap.parse_args(argv)
    if args.cmd == "inject":
        try:
            faults = parse_schedule(args.schedule)
        except ValueError as exc:
            print(f"chaoslib: {exc}", file=sys.stderr)
            return 2
        inj_ = Injector(run_dir=args.run_dir, cluster_dir=args.cluster_dir.resolve(), faults=faults,
                        seed=args.seed, log=args.log, world=args.world, say=lambda m: print(m, flush=True))  # fmt: skip
        done = inj_.run(args.timeout)
        return 0 if all(f.fired for f in done) else 1
    if args.cmd in ("status", "last"):
        print(status(args.run_dir) if args.cmd == "status" else last(args.run_dir))
        return 0
    faults = [Fault(**r) for r in _jsonl(args.faults)] if args.faults else []
    fig = figures(args.run_dir, faults, args.tokens_per_step)
    print(json.dumps(fig, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
