"""The health sweep: when an attempt's log proves no host guilty, go and get evidence from the hosts themselves.

Standard library only (the recovery path).  After an attempt that ended as a crash without a culprit, a hang the
heartbeats cannot explain, or an unknown failure, `agpt failover plan` runs a sweep before it decides:

1. **probe** every active host at once, in one launch of the site's launcher with one rank per host, under one
   timeout (FAILOVER_SWEEP_TIMEOUT): `python -m agpt.probe` checks memory, /dev/shm and the node-local directory,
   the required mounts (three quarters of the timeout at most: a hung filesystem fails the host, naming the mount,
   instead of leaving it silent), the accelerator driver, initialises the devices and the collective backend, and
   runs the site's own check (SITE_SWEEP_CHECK).  Each host answers one line, `agpt-probe: HOST ok|FAILED|config:
   ...`; a host that has not answered when the timeout ends (its probe hung, or the host is gone) fails as silent.
   Each probe first prints `agpt-probe: HOST up`: once every host that did has answered, a host that showed no
   sign of life is gone (a dead node, a launch that never started there) when it has stayed silent after the
   last one did for as long again as the others' signs of life took to arrive (the launch's own skew, measured in
   this launch), 10 s at least and a quarter of the timeout at most, and the probe launch ends there instead of
   waiting out the timeout.
2. **collective** (mode `full`), when the probe named no host: the hosts run `python -m agpt.preflight --rank`
   together (a process group and an allreduce across hosts).  A host the probe names is the failure's evidence;
   what the probe cannot see on the others (a second fault at once, rare) is the next sweep's.  When the whole
   group fails, it is split in halves that run at once, and so on: a bad host is found in ceil(log2 N) + 1
   rounds, each a timeout at most, whatever N.  When both halves of a failing group pass, the fault is a link
   between them: it is reported, and nobody is evicted for it.

What comes out (SweepResult) is evidence, read by agpt.failover.policy.apply_sweep: the hosts that failed, each with
its failing line; or every host passed (no blind eviction: the class decides what follows); or a site-wide fault
(more hosts failed than FAILOVER_SWEEP_MAX_EVICT, or most of them: nobody is evicted and the reason is said); or
the sweep could not run (mode off, a probe command that is missing or not executable, a launcher that answers for
nobody): then, and only then, the blind rotation is the last resort.  A check command that cannot run on the hosts
is a configuration error, named once, never a reason to evict a host.

The launcher is a boundary: `Runner` runs a program on a set of hosts and returns its output; `LaunchRunner` does it
with bin/agpt-launch (the site's PALS, hydra, Open MPI or srun), the simulator (agpt.sim.engine) with its own.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agpt import rundir, safewrite
from agpt.errors import BadInput
from agpt.failover.hostmatch import HostMatcher

ROOT = Path(__file__).resolve().parents[3]
MODES = ("full", "probe", "off")  # SITE_SWEEP / FAILOVER_SWEEP
DEFAULT_TIMEOUT_S = 120.0  # FAILOVER_SWEEP_TIMEOUT: the probe launch, and each collective round
DEFAULT_MAX_EVICT = 8  # FAILOVER_SWEEP_MAX_EVICT
DEFAULT_MIN_FREE_MIB = 1024.0  # FAILOVER_SWEEP_MIN_FREE_MIB
VERDICT = re.compile(r"agpt-probe: (?P<host>\S+) (?P<state>ok|FAILED|config): (?P<line>.*)")
UP = re.compile(r"agpt-probe: (?P<host>\S+) up\s*$")  # a probe's sign of life, before its checks
GRACE_SHARE = 0.25  # of the timeout: the longest a silent host is waited for after the last sign of life
GONE_LEAST_S = 10.0  # the shortest: however close together the others' signs of life came
# Of the timeout: the probe's look at the mounts (--mount-timeout), as its device's; past it, the mount hangs.  Not
# less: a sweep that failed every host sooner in a site outage would spend FAILOVER_MAX_ATTEMPTS sooner, and a shorter
# outage would ask for a person (tests/python/test_sim.py, the long site outage).
MOUNT_SHARE = 0.75
OUTPUT_CHARS = 1 << 20  # of one launch's output kept for the log
CANNOT_RUN = (126, 127)  # the shell's "cannot execute", "not found"


@dataclass(kw_only=True, slots=True)
class SweepSettings:
    """FAILOVER_SWEEP* and the site keys the probe reads; validated here, once."""

    mode: str = "full"
    timeout: float = DEFAULT_TIMEOUT_S
    check: str = ""
    max_evict: int = DEFAULT_MAX_EVICT
    local_dir: str = ""
    mounts: tuple[str, ...] = ()
    min_free_mib: float = DEFAULT_MIN_FREE_MIB
    gpus: int = 0
    launch: tuple[
        str, ...
    ] = ()  # FAILOVER_SWEEP_LAUNCH: the launcher's words ('': bin/agpt-launch, the site's)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise BadInput(f"FAILOVER_SWEEP/SITE_SWEEP: '{self.mode}' is not one of {' | '.join(MODES)}")
        self.timeout = rundir.seconds(self.timeout, "FAILOVER_SWEEP_TIMEOUT")
        if self.timeout <= 0:
            raise BadInput("FAILOVER_SWEEP_TIMEOUT: must be more than 0 seconds")
        if not 1 <= self.max_evict <= 10**6:
            raise BadInput(f"FAILOVER_SWEEP_MAX_EVICT: must be at least 1, got {self.max_evict}")
        if not 0 <= self.min_free_mib <= 10**9:
            raise BadInput(f"FAILOVER_SWEEP_MIN_FREE_MIB: must be 0 or more MiB, got {self.min_free_mib}")
        if self.gpus < 0:
            raise BadInput(f"SITE_GPUS_PER_NODE: must be 0 or more, got {self.gpus}")


@dataclass(kw_only=True, slots=True)
class SweepResult:
    """What the sweep found.  `failed`: host -> its failing line; `evict()` is what the loop may act on."""

    ran: bool
    mode: str
    hosts: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    config: list[str] = field(default_factory=list)
    site_wide: bool = False
    deferred: bool = (
        False  # no time before the deadline for the sweep and an attempt after it: nobody guessed
    )
    link: str = ""
    note: str = ""
    rounds: int = 0
    cost_s: float = 0.0
    log: str = ""

    def evict(self) -> list[str]:
        return [] if not self.ran or self.site_wide else list(self.failed)

    def as_event(self) -> dict[str, Any]:
        """The attempt event's `sweep` field (docs/contract.md)."""
        return {
            "ran": self.ran,
            "mode": self.mode,
            "hosts": len(self.hosts),
            "failed": dict(self.failed),
            "config": list(self.config),
            "site_wide": self.site_wide,
            "deferred": self.deferred,
            "link": self.link,
            "note": self.note,
            "rounds": self.rounds,
            "cost_s": round(self.cost_s, 1),
            "log": self.log,
        }


class Runner(Protocol):
    """Runs the sweep's programs on hosts (the launcher boundary)."""

    def probe(self, hosts: Sequence[str]) -> tuple[str, int, bool]:
        """Launch the per-host probe on every host at once: (output, rc, timed out)."""
        ...

    def group(self, hosts: Sequence[str], tag: str) -> tuple[str, int, bool]:
        """Launch the cross-host collective on these hosts: (output, rc, timed out)."""
        ...


# --------------------------------------------------------------------------------------------- reading answers
def read_probe(hosts: Sequence[str], output: str) -> dict[str, tuple[str, str]]:
    """host -> (state, line) from the probe's output, host names mapped to the hostfile's spelling."""
    matcher = HostMatcher(hosts=list(hosts))
    out: dict[str, tuple[str, str]] = {}
    for raw in output.splitlines():
        m = VERDICT.search(raw)
        if not m:
            continue
        host = matcher.match(m.group("host"))
        if host is None:
            continue
        state = m.group("state")
        if host not in out or state == "FAILED" or out[host][0] == "ok":
            out[host] = (state, f"agpt-probe: {m.group('host')} {state}: {m.group('line')}".strip()[:400])
    return out


def read_up(hosts: Sequence[str], output: str) -> set[str]:
    """The hosts whose probe printed its sign of life (`agpt-probe: HOST up`), in the hostfile's spelling."""
    matcher = HostMatcher(hosts=list(hosts))
    found = (matcher.match(m.group("host")) for m in map(UP.search, output.splitlines()) if m)
    return {h for h in found if h is not None}


@dataclass(slots=True)
class GoneWatch:
    """When a probe launch may end before its timeout: every host has answered (a probe the kernel holds on a hung
    mount after its answer must not hold the launch); or some hosts showed a sign of life and every one of them
    has answered, and no other host has shown one for `wait()` seconds since the last did: as long again as the
    signs of life took to arrive, first to last (the launcher's start-up skew in this launch: a host that lags
    4,095 others by their whole spread again is not slow but gone), `least` at least, `grace` at most.  Called
    with the output so far (agpt.failover.sweep.run_bounded's `enough`), it reads only the lines added since its
    last look (10,000 hosts' lines: 0.2 s to read whole); the launcher itself keeps waiting for a host that is
    gone."""

    hosts: Sequence[str]
    grace: float
    least: float = GONE_LEAST_S
    clock: Callable[[], float] = time.monotonic
    _matcher: HostMatcher | None = None
    _pos: int = 0
    _up: set[str] = field(default_factory=set)
    _answered: set[str] = field(default_factory=set)
    _first_up: float | None = None
    _last_up: float = 0.0

    def wait(self) -> float:
        """How long a silent host is waited for after the last sign of life."""
        spread = self._last_up - self._first_up if self._first_up is not None else 0.0
        return wait_for_gone(spread, self.grace, self.least)

    def __call__(self, output: str) -> bool:
        end = output.rfind("\n") + 1  # whole lines only: a line still being written is read next time
        if end > self._pos:
            if self._matcher is None:
                self._matcher = HostMatcher(hosts=list(self.hosts))
            ups = len(self._up)
            for line in output[self._pos : end].splitlines():
                m = UP.search(line) or VERDICT.search(line)
                host = self._matcher.match(m.group("host")) if m else None
                if host is not None:
                    (self._up if m and m.re is UP else self._answered).add(host)
            self._pos = end
            if len(self._up) != ups:
                self._last_up = self.clock()
                if self._first_up is None:
                    self._first_up = self._last_up
        # Every verdict is in: a probe left blocked in the kernel on a hung mount (agpt.probe) must not hold the launch.
        if len(self._answered) >= len(self.hosts):
            return True
        settled = 0 < len(self._up) < len(self.hosts) and self._up <= self._answered
        return settled and self.clock() - self._last_up >= self.wait()


def wait_for_gone(spread: float, grace: float, least: float = GONE_LEAST_S) -> float:
    """GoneWatch's wait after the last sign of life, for signs of life that arrived SPREAD seconds apart."""
    return min(grace, max(least, spread))


def _config_errors(answers: dict[str, tuple[str, str]]) -> list[str]:
    """Each configuration error once, with how many hosts reported it: `SITE_SWEEP_CHECK: ... (on 8 host(s))`."""
    seen: dict[str, int] = {}
    for state, line in answers.values():
        if state == "config":
            msg = line.split(" config: ", 1)[-1]
            seen[msg] = seen.get(msg, 0) + 1
    return [f"{msg} (on {n} host(s))" for msg, n in seen.items()]


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def _named_by_launcher(hosts: Sequence[str], output: str) -> dict[str, str]:
    """Hosts the launcher's own failure lines name (srun's `Node failure on nK`, PALS' forward failures): the
    classifier's node patterns, run on the probe launch's output."""
    from agpt.failover import classify as cl  # only when the launch answered for nobody

    with tempfile.TemporaryDirectory(prefix="agpt-sweep.") as tmp:
        log = Path(tmp) / "probe.log"
        safewrite.replace(log, output, sync=False)
        try:
            c = cl.classify(log, 1, list(hosts), pattern_sets=None)
        except Exception:  # the sweep's evidence must never depend on a scraper bug
            return {}
    if c.cls != "node":
        return {}
    line = c.evidence[0] if c.evidence else "named by the launcher"
    return {h: f"launcher: {line}"[:400] for h in c.bad_hosts if h in hosts}


# ---------------------------------------------------------------------------------------------------- the sweep
def run_sweep(
    hosts: Sequence[str], settings: SweepSettings, runner: Runner, *, budget_s: float | None = None
) -> SweepResult:
    """Probe every host, then (mode `full`) localise a bad host or link by bisection; never raises on what the hosts
    answer.  `budget_s`: the time the deadline leaves it; a collective round that might not fit is not started.
    The caller checks mode `off` and that the probe fits before calling."""
    t0 = time.monotonic()
    res = SweepResult(ran=True, mode=settings.mode, hosts=list(hosts))
    logs: list[str] = []
    output, rc, timed_out = runner.probe(hosts)
    res.rounds = 1
    logs.append(f"# probe on {len(hosts)} host(s): rc {rc}{' (timed out)' if timed_out else ''}\n{output}")
    answers = read_probe(hosts, output)
    ups = read_up(hosts, output)
    res.config = _config_errors(answers)
    if not answers:
        named = {} if timed_out else _named_by_launcher(hosts, output)
        if named:
            res.failed = named
        elif timed_out:
            res.failed = {
                h: f"no answer within {settings.timeout:g} s (its probe hung, or the host is gone)"
                for h in hosts
            }
        else:
            res.ran = False
            how = "cannot run the probe" if rc in CANNOT_RUN else "the probe launch answered for no host"
            res.note = f"{how} (rc {rc}): {_last_line(output)}"
    else:
        for h in hosts:
            state, line = answers.get(h, ("silent", ""))
            if state == "FAILED":
                res.failed[h] = line
            elif state == "silent" and ups and h not in ups:
                res.failed[h] = (
                    f"no sign of life: {len(ups)} other host(s) started their probe and answered, this one "
                    "never started it (the host is gone, or the launcher could not reach it)"
                )
            elif state == "silent":
                why = (
                    f"no answer within {settings.timeout:g} s" if timed_out else f"no answer (launch rc {rc})"
                )
                how = (
                    "its probe started, then hung or died"
                    if h in ups
                    else "its probe hung or died, or the host is gone"
                )
                res.failed[h] = f"{why}: {how}"
        if res.config and len(res.config) and all(answers.get(h, ("",))[0] == "config" for h in hosts):
            res.note = f"configuration error on every host, named once: {res.config[0]}"
    if res.ran and settings.mode == "full" and len(hosts) >= 2 and not res.failed:
        left = None if budget_s is None else budget_s - (time.monotonic() - t0)
        bad, link, rounds = bisect(list(hosts), runner, logs, budget_s=left, round_s=settings.timeout)
        res.rounds += rounds
        res.failed.update(bad)
        res.link = link
    guard(res, settings)
    res.cost_s = time.monotonic() - t0
    res.log = "\n".join(logs)[-OUTPUT_CHARS:]
    return res


def too_many(res: SweepResult, settings: SweepSettings) -> bool:
    n = len(res.failed)
    return n > settings.max_evict or (n >= 2 and n > len(res.hosts) / 2)


def guard(res: SweepResult, settings: SweepSettings) -> None:
    """More hosts failing than the loop may evict at once, or most of them, is one shared cause: say so, evict none."""
    if res.ran and res.failed and too_many(res, settings):
        res.site_wide = True
        first = next(iter(res.failed.values()))
        res.note = (
            f"{len(res.failed)} of {len(res.hosts)} hosts failed the sweep, more than "
            f"{'FAILOVER_SWEEP_MAX_EVICT=' + str(settings.max_evict) if len(res.failed) > settings.max_evict else 'half'}"
            f": a site-wide fault, nobody evicted (first: {first})"
        )


def bisect(
    hosts: Sequence[str],
    runner: Runner,
    logs: list[str],
    *,
    budget_s: float | None = None,
    round_s: float = DEFAULT_TIMEOUT_S,
) -> tuple[dict[str, str], str, int]:
    """(bad host -> line, a link between two halves or '', rounds) of the collective over `hosts`.

    Round 1 runs all of them; each failing group is split in two halves that run at once in the next round.  A
    single host that fails alone is bad; two halves that both pass while their union failed point at a link.  With
    `budget_s`, a round that might not end (`round_s`, the timeout) before the budget does is not started: the
    groups still failing are then named in the link note, and nobody in them is evicted."""
    t0 = time.monotonic()
    if budget_s is not None and budget_s < round_s:
        return {}, "", 0
    rounds = 1
    ok, line = _group(runner, list(hosts), "r1g0", logs)
    if ok:
        return {}, "", rounds
    bad: dict[str, str] = {}
    links: list[str] = []
    pending: list[tuple[list[str], str]] = [(list(hosts), line)]
    while pending:
        rounds += 1
        tests: list[list[str]] = []
        for g, why in pending:
            if len(g) == 1:
                bad[g[0]] = f"collective: {why}"
            else:
                half = (len(g) + 1) // 2
                tests += [g[:half], g[half:]]
        if not tests:
            rounds -= 1
            break
        if budget_s is not None and budget_s - (time.monotonic() - t0) < round_s:
            rounds -= 1
            left = "; ".join(_span(t) for t in tests)
            links.append(f"not localised before the deadline (the bisection stopped at {left})")
            break
        tags = [f"r{rounds}g{i}" for i in range(len(tests))]
        with ThreadPoolExecutor(max_workers=min(len(tests), 32)) as pool:
            found = list(pool.map(lambda g, t: _group(runner, g, t, logs), tests, tags))
        pending = []
        for i in range(0, len(tests), 2):
            (ok_a, line_a), (ok_b, line_b) = found[i], found[i + 1]
            if not ok_a:
                pending.append((tests[i], line_a))
            if not ok_b:
                pending.append((tests[i + 1], line_b))
            if ok_a and ok_b:
                links.append(f"{_span(tests[i])} <-> {_span(tests[i + 1])}")
    cut = [lk for lk in links if lk.startswith("not localised")]
    pairs = [lk for lk in links if not lk.startswith("not localised")]
    link = ""
    if pairs:
        link = "a link between " + "; ".join(pairs[:4]) + ": each half passes alone, together they fail"
    if cut:
        link = "; ".join([*([link] if link else []), *cut])
    return bad, link, rounds


_LOG_LOCK = threading.Lock()


def _group(runner: Runner, hosts: list[str], tag: str, logs: list[str]) -> tuple[bool, str]:
    output, rc, timed_out = runner.group(hosts, tag)
    with _LOG_LOCK:
        logs.append(
            f"# collective {tag} on {','.join(hosts)}: rc {rc}{' (timed out)' if timed_out else ''}\n{output}"
        )
    if rc == 0 and not timed_out:
        return True, ""
    failed = [ln for ln in output.splitlines() if "FAILED" in ln]
    why = failed[0].strip() if failed else _last_line(output)
    return False, (f"timed out: {why}" if timed_out else f"rc {rc}: {why}")[:400]


def _span(g: Sequence[str]) -> str:
    return g[0] if len(g) == 1 else f"{g[0]}..{g[-1]} ({len(g)})"


def max_rounds(n: int) -> int:
    """The collective's worst case for one bad host among n: ceil(log2 n) + 1 rounds."""
    return 1 + (math.ceil(math.log2(n)) if n > 1 else 0)


# ------------------------------------------------------------------------------------------- the real launcher
def program(var: str, default: Sequence[str]) -> list[str]:
    """A program's words: the environment variable's (shell words) when set, else the default."""
    raw = os.environ.get(var, "")
    return shlex.split(raw) if raw.strip() else list(default)


def missing(words: Sequence[str]) -> str:
    """'' when the program can run here, else why not (a configuration error, named once)."""
    if not words:
        return "empty command"
    exe = words[0]
    if "/" in exe:
        if not os.path.isfile(exe):
            return f"{exe}: not found"
        if not os.access(exe, os.X_OK):
            return f"{exe}: not executable"
        return ""
    return "" if shutil.which(exe) else f"{exe}: not found on PATH"


@dataclass(kw_only=True, slots=True)
class LaunchRunner:
    """Runs the probe and the collective with bin/agpt-launch (the site's launcher), one rank per host."""

    settings: SweepSettings
    ident: str = ""  # jobid.attempt: spreads the collective's ports

    @property
    def launch(self) -> list[str]:
        return list(self.settings.launch) or [str(ROOT / "bin" / "agpt-launch")]

    def _python(self) -> str:
        return os.environ.get("AGPT_PYTHON") or "python3"

    def probe_program(self) -> list[str]:
        s = self.settings
        words = program("AGPT_SWEEP_PROGRAM", [self._python(), "-m", "agpt.probe"])
        words += ["--min-free-mib", f"{s.min_free_mib:g}", "--gpus", str(s.gpus)]
        words += [
            "--mount-timeout",
            f"{s.timeout * MOUNT_SHARE:g}",
            "--device-timeout",
            f"{max(10.0, s.timeout * 0.75):g}",
            "--check-timeout",
            f"{s.timeout / 2:g}",
        ]
        if s.local_dir:
            words += ["--local-dir", s.local_dir]
        for m in s.mounts:
            words += ["--mount", m]
        if s.check.strip():
            words += ["--check", s.check]
        return words

    def group_program(self) -> list[str]:
        return program("AGPT_PREFLIGHT_PROGRAM", [self._python(), "-m", "agpt.preflight", "--rank"])

    def probe(self, hosts: Sequence[str]) -> tuple[str, int, bool]:
        gone = GoneWatch(hosts=hosts, grace=self.settings.timeout * GRACE_SHARE)
        return self._run(hosts, self.probe_program(), {}, enough=gone)

    def group(self, hosts: Sequence[str], tag: str) -> tuple[str, int, bool]:
        port = rundir.derived_port(f"{self.ident}.{tag}")
        init = str(max(5, int(self.settings.timeout * 0.8)))
        extra = {"MASTER_PORT": str(port), "AGPT_PREFLIGHT_INIT_TIMEOUT_S": init}
        return self._run(hosts, self.group_program(), extra)

    def _run(
        self,
        hosts: Sequence[str],
        words: list[str],
        extra: dict[str, str],
        enough: Callable[[str], bool] | None = None,
    ) -> tuple[str, int, bool]:
        with tempfile.TemporaryDirectory(prefix="agpt-sweep.") as tmp:
            hostfile = Path(tmp) / "hosts"
            safewrite.replace(hostfile, "".join(f"{h}\n" for h in hosts), sync=False)
            env = dict(os.environ, FAILOVER_HOSTFILE=str(hostfile), LAUNCH_PPN="1", **extra)
            env["PYTHONPATH"] = str(ROOT / "python") + (
                os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
            )
            return run_bounded([*self.launch, *words], env, self.settings.timeout, enough=enough)


def run_bounded(
    argv: list[str], env: dict[str, str], timeout: float, *, enough: Callable[[str], bool] | None = None
) -> tuple[str, int, bool]:
    """(output, rc, timed out): the command in its own process group, killed whole at the timeout, or earlier
    when `enough(output so far)` says its answer is in (then rc is what the command exited with once stopped)."""
    try:
        p = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    except OSError as e:
        return f"{argv[0]}: {e.strerror or e}", 127, False
    chunks: list[bytes] = []
    assert p.stdout is not None
    fd = p.stdout.fileno()

    def pump() -> None:
        for b in iter(lambda: os.read(fd, 1 << 16), b""):
            chunks.append(b)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    end = time.monotonic() + timeout
    timed_out = stopped = False
    while p.poll() is None and not stopped:
        if time.monotonic() >= end:
            timed_out = stopped = True
        elif enough is not None and enough(b"".join(chunks).decode(errors="replace")):
            stopped = True
        else:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=0.25)
    if stopped:
        _kill_group(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _kill_group(p.pid, signal.SIGKILL)
            p.wait()
    reader.join(timeout=10)  # a grandchild still holding the pipe must not hold the sweep
    if not reader.is_alive():
        p.stdout.close()
    out = b"".join(chunks).decode(errors="replace")[-OUTPUT_CHARS:]
    return out, 124 if timed_out else p.returncode, timed_out


def _kill_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def sweep_hosts(
    hosts: Sequence[str],
    settings: SweepSettings,
    *,
    ident: str = "",
    runner: Runner | None = None,
    budget_s: float | None = None,
) -> SweepResult:
    """The sweep as the loop runs it: off, or a probe program that cannot run here, is `ran: false` with the reason;
    else run_sweep with the real launcher (or `runner`)."""
    if settings.mode == "off":
        return SweepResult(
            ran=False, mode="off", hosts=list(hosts), note="the sweep is off (FAILOVER_SWEEP=off)"
        )
    if not hosts:
        return SweepResult(ran=False, mode=settings.mode, note="no active host to sweep")
    if runner is None:
        real = LaunchRunner(settings=settings, ident=ident)
        for words in (real.launch, real.probe_program()[:1]):
            why = missing(words)
            if why:
                return SweepResult(
                    ran=False,
                    mode=settings.mode,
                    hosts=list(hosts),
                    note=f"configuration error: the probe: {why}",
                )
        runner = real
    return run_sweep(hosts, settings, runner, budget_s=budget_s)


Prober = Callable[[Sequence[str], SweepSettings], SweepResult]


# ------------------------------------------------------------------------------- as `agpt failover plan` runs it
def add_options(ap: argparse.ArgumentParser) -> None:
    """The sweep's settings on `agpt failover plan` (lib/failover.sh passes FAILOVER_SWEEP* and the site keys as
    given; '' is the default)."""
    ap.add_argument("--sweep", help=f"FAILOVER_SWEEP / SITE_SWEEP: {' | '.join(MODES)} (default full)")
    ap.add_argument("--sweep-timeout", help=f"FAILOVER_SWEEP_TIMEOUT (default {DEFAULT_TIMEOUT_S:g})")
    ap.add_argument(
        "--sweep-check", default="", help="FAILOVER_SWEEP_CHECK / SITE_SWEEP_CHECK: a per-host command"
    )
    ap.add_argument("--sweep-max-evict", help=f"FAILOVER_SWEEP_MAX_EVICT (default {DEFAULT_MAX_EVICT})")
    ap.add_argument(
        "--sweep-mounts", default="", help="SITE_SWEEP_MOUNTS, ':' separated (the run dir is added)"
    )
    ap.add_argument("--sweep-local-dir", default="", help="SITE_LOCAL_DIR: the node-local directory checked")
    ap.add_argument(
        "--sweep-min-free-mib", help=f"FAILOVER_SWEEP_MIN_FREE_MIB (default {DEFAULT_MIN_FREE_MIB:g})"
    )
    ap.add_argument(
        "--sweep-gpus", default="", help="SITE_GPUS_PER_NODE: a host must show an accelerator driver"
    )
    ap.add_argument(
        "--sweep-launch", default="", help="FAILOVER_SWEEP_LAUNCH: launcher words (default agpt launch)"
    )


def _opt(v: str | None, parse: Callable[[str], Any], default: Any) -> Any:
    return default if v is None or str(v).strip() == "" else parse(str(v).strip())


def settings_from(args: argparse.Namespace, run_dir: Path) -> SweepSettings:
    """SweepSettings from add_options' flags; BadInput names the setting that is wrong."""
    d = SweepSettings()
    mounts = [m for m in (getattr(args, "sweep_mounts", "") or "").split(":") if m.strip()]
    return SweepSettings(
        mode=_opt(getattr(args, "sweep", None), str, d.mode),
        timeout=_opt(
            getattr(args, "sweep_timeout", None),
            lambda v: rundir.seconds(v, "FAILOVER_SWEEP_TIMEOUT"),
            d.timeout,
        ),
        check=getattr(args, "sweep_check", "") or "",
        max_evict=_opt(
            getattr(args, "sweep_max_evict", None),
            lambda v: rundir.whole(v, "FAILOVER_SWEEP_MAX_EVICT"),
            d.max_evict,
        ),
        local_dir=getattr(args, "sweep_local_dir", "") or "",
        mounts=tuple(dict.fromkeys([*mounts, str(run_dir.resolve())])),
        min_free_mib=_opt(
            getattr(args, "sweep_min_free_mib", None),
            lambda v: rundir.seconds(v, "FAILOVER_SWEEP_MIN_FREE_MIB"),
            d.min_free_mib,
        ),
        gpus=_opt(getattr(args, "sweep_gpus", None), lambda v: rundir.whole(v, "SITE_GPUS_PER_NODE"), d.gpus),
        launch=tuple(words(getattr(args, "sweep_launch", "") or "", "FAILOVER_SWEEP_LAUNCH")),
    )


def words(text: str, name: str) -> list[str]:
    """TEXT as shell words (FAILOVER_SWEEP_LAUNCH, AGPT_SWEEP_PROGRAM); an unclosed quote is BadInput naming NAME."""
    try:
        return shlex.split(text)
    except ValueError as e:
        raise BadInput(f"{name}: not shell words ({e}): {text!r}") from None


def for_attempt(
    log: Path,
    active: Sequence[str],
    settings: SweepSettings,
    *,
    ident: str,
    time_left: float | None,
    min_attempt_s: float,
    prober: Prober | None = None,
) -> SweepResult:
    """The sweep after an attempt: deferred (`ran: false, deferred: true`) when the deadline leaves no time for its
    probe and an attempt after it, its collective rounds bounded by what is left; else `prober` (the simulator's) or
    the real one.  Its output goes to `log`, named in `result.log`."""
    need = min_attempt_s + settings.timeout
    if settings.mode != "off" and time_left is not None and time_left < need:
        note = f"{time_left:.0f} s left before the deadline, {need:.0f} s needed for the probe and an attempt"
        return SweepResult(ran=False, mode=settings.mode, hosts=list(active), note=note, deferred=True)
    budget = None if time_left is None else time_left - min_attempt_s
    if prober is not None and settings.mode != "off":
        result = prober(active, settings)
    else:
        result = sweep_hosts(active, settings, ident=ident, budget_s=budget)
    if result.log:
        try:  # never through a link planted at the log's name (agpt.safewrite); a full disk is a note
            safewrite.replace(log, result.log + "\n")
            result.log = f"{log.parent.name}/{log.name}"
        except OSError as exc:
            sys.stderr.write(f"failover: {exc}\n")
    return result
