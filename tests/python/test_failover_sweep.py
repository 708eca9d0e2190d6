"""The health sweep: the per-host probe (agpt.probe), the sweep over hosts (agpt.failover.sweep) with its bad inputs,
what its evidence makes the loop do (agpt.failover.policy), and the plan that runs it (agpt.failover.plan).

The launcher is the boundary: without a cluster, tests/fixtures/fake_launch.sh starts one process per host (each
told its host name) and fake_probe.sh / fake_collective.sh answer as the real programs do.  The real launcher
(srun) with the real probe runs in tests/bats/cluster_sweep.bats."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agpt.errors import BadInput
from agpt.failover import plan as P
from agpt.failover import policy
from agpt.failover import sweep as S
from conftest import ROOT, agpt_env

FIX = ROOT / "tests" / "fixtures"
HOSTS = [f"h{i}" for i in range(1, 9)]
FAST = policy.Settings(backoff=(5, 10), min_attempt_s=60)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> S.SweepSettings:
    """Sweeps through the fake launcher with the fake probe and collective; PROBE_*/GROUP_* pick the faults."""
    monkeypatch.setenv("FAKE_LAUNCH_NAME_HOSTS", "1")
    monkeypatch.setenv("AGPT_SWEEP_PROGRAM", str(FIX / "fake_probe.sh"))
    monkeypatch.setenv("AGPT_PREFLIGHT_PROGRAM", str(FIX / "fake_collective.sh"))
    for k in (
        "PROBE_FAIL_HOSTS",
        "PROBE_HANG_HOSTS",
        "PROBE_GONE_HOSTS",
        "PROBE_CONFIG_HOSTS",
        "GROUP_FAIL_HOSTS",
        "GROUP_LINK_HOSTS",
    ):
        monkeypatch.delenv(k, raising=False)
    return S.SweepSettings(timeout=8, launch=(str(FIX / "fake_launch.sh"),))


# --- the probe on this host --------------------------------------------------------------------------------------
def probe(*args: str, env: dict[str, str] | None = None) -> str:
    r = subprocess.run([sys.executable, "-m", "agpt.probe", *args], env=agpt_env(env), capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr  # whatever it finds: a launcher must not cut the other hosts short
    up, verdict = r.stdout.splitlines()  # its sign of life, then its verdict: two lines, nothing else
    assert up == f"agpt-probe: {verdict.split()[1]} up" and verdict.startswith("agpt-probe: "), r.stdout
    return verdict + "\n"


def test_probe_passes_a_healthy_host_and_names_what_it_checked(tmp_path: Path) -> None:
    out = probe(
        "--no-device",
        "--local-dir",
        str(tmp_path),
        "--mount",
        str(tmp_path),
        env={"AGPT_HEARTBEAT_HOST": "n7"},
    )
    assert out.startswith("agpt-probe: n7 ok: mem ") and "/dev/shm" in out and "1 mount(s)" in out


@pytest.mark.parametrize(
    ("args", "failed"),
    [
        (["--min-free-mib", "1e9"], "FAILED: memory: "),
        (["--mount", "/no/such/lus"], "FAILED: mount /no/such/lus: not a readable directory on this host"),
        (["--local-dir", "/no/such/local"], "FAILED: local dir /no/such/local: not a directory on this host"),
        (["--gpus", "4"], "FAILED: driver: no accelerator device node"),
        (
            ["--check", "echo 'nhc: ERROR: disk /local failed'; exit 1"],
            "FAILED: site check exit 1: nhc: ERROR: disk",
        ),
        (["--check", "/no/such/nhc -q"], "config: SITE_SWEEP_CHECK: "),
        (["--check", "sleep 30", "--check-timeout", "1"], "FAILED: site check did not finish within 1 s"),
    ],
)
def test_probe_fails_with_the_failing_line(args: list[str], failed: str) -> None:
    if args[:2] == ["--gpus", "4"] and any(
        Path(p).exists() for p in ("/dev/nvidia0", "/dev/kfd", "/dev/dri")
    ):
        pytest.skip("this machine has an accelerator driver")
    assert failed in probe("--no-device", *args)


def test_a_hung_mount_fails_the_host_at_its_deadline_and_the_probe_exits(tmp_path: Path) -> None:
    """A shared filesystem that stops answering blocks stat() and readdir() in the kernel, where nothing cancels
    them: the probe looks at the mounts in a thread, fails the host at --mount-timeout naming the mount, and exits
    without waiting for the look (here a listdir that never returns, patched in at interpreter start: a real hung
    Lustre or NFS mount needs root to make)."""
    lus = tmp_path / "lus"
    lus.mkdir()
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, threading\n"
        "_listdir = os.listdir\n"
        f"def listdir(p='.'):\n"
        f"    if str(p) == {str(lus)!r}:\n"
        "        threading.Event().wait()  # never answers\n"
        "    return _listdir(p)\n"
        "os.listdir = listdir\n"
    )
    pythonpath = f"{hook}:{agpt_env()['PYTHONPATH']}"
    out = probe("--no-device", "--mount", str(tmp_path), "--mount", str(lus), "--mount-timeout", "1",
                env={"PYTHONPATH": pythonpath, "AGPT_HEARTBEAT_HOST": "n3"})  # fmt: skip
    assert f"agpt-probe: n3 FAILED: mount {lus}: no answer within 1 s (the filesystem hangs)" in out


def test_the_sweep_gives_the_probe_three_quarters_of_its_timeout_for_the_mounts() -> None:
    words = S.LaunchRunner(settings=S.SweepSettings(timeout=120, mounts=("/lus/flare",))).probe_program()
    assert words[words.index("--mount-timeout") + 1] == "90" and "/lus/flare" in words


def test_a_site_check_past_its_timeout_is_killed_with_what_it_started(tmp_path: Path) -> None:
    """The timeout ends the check's whole session: a process it left running would hold the probe's pipes open
    (the probe past its timeout) and keep a sick node's check running after the sweep moved on."""
    pid_file = tmp_path / "pid"
    out = probe("--no-device", "--check", f"sh -c 'echo $$ > {pid_file}; exec sleep 300' & wait",
                "--check-timeout", "2")  # fmt: skip
    assert "FAILED: site check did not finish within 2 s" in out
    status = Path(f"/proc/{pid_file.read_text().strip()}/status")
    for _ in range(50):  # killed at once; reaped by whoever inherited it a moment later
        if not status.exists() or "State:\tZ" in status.read_text():
            break
        time.sleep(0.1)
    assert not status.exists() or "State:\tZ" in status.read_text(), (
        "the site check's child outlived the timeout"
    )


def test_probe_initialises_the_backend_and_names_why_it_cannot() -> None:
    """The device init of the preflight, per host: gloo pointed at an interface that does not exist fails here."""
    assert " ok: " in probe("--local-dir", "/tmp") and "gloo" in probe("--local-dir", "/tmp")
    out = probe("--local-dir", "/tmp", env={"GLOO_SOCKET_IFNAME": "agpt-no-such-if0"})
    assert "FAILED: device: exit 1: " in out and "agpt-no-such-if0" in out


# --- the sweep over hosts ---------------------------------------------------------------------------------------
def test_failing_hosts_are_named_with_their_line_and_a_bad_host_is_bisected(
    fake: S.SweepSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROBE_FAIL_HOSTS", "h3")
    monkeypatch.setenv("GROUP_FAIL_HOSTS", "h6")
    r = S.sweep_hosts(HOSTS, fake, ident="j.1")
    # The probe named h3: that is the evidence, and no collective runs (h6's fault is the next sweep's).
    assert r.ran and not r.site_wide and r.evict() == ["h3"] and r.rounds == 1
    assert r.failed["h3"] == "agpt-probe: h3 FAILED: /dev/shm /dev/shm: 3 MiB free, less than 1024 MiB"
    assert "# collective" not in r.log
    # With h3 gone, the probe names nobody: the collective finds h6 among 7 hosts in ceil(log2 7) + 1 = 4 rounds
    r = S.sweep_hosts([h for h in HOSTS if h != "h3"], fake, ident="j.2")
    assert r.evict() == ["h6"] and r.failed["h6"].startswith("collective: rc 1: ") and "h6" in r.failed["h6"]
    assert r.rounds == 1 + S.max_rounds(7) == 5
    assert "# probe on 7 host(s)" in r.log and "# collective r4g" in r.log


def test_every_host_passing_is_evidence_too(fake: S.SweepSettings) -> None:
    r = S.sweep_hosts(HOSTS, fake, ident="j.1")
    assert r.ran and r.failed == {} and r.evict() == [] and r.rounds == 2 and not r.note


def test_a_hung_probe_ends_at_the_timeout_and_names_that_host(
    fake: S.SweepSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROBE_HANG_HOSTS", "h5")
    fake.timeout = 3
    r = S.sweep_hosts([*HOSTS[:4], "h5"], fake, ident="j.1")
    assert r.evict() == ["h5"]
    assert r.failed["h5"] == "no answer within 3 s: its probe started, then hung or died"


def test_a_host_that_is_gone_is_named_once_the_others_answered_not_at_the_timeout(
    fake: S.SweepSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead node shows no sign of life: the probe launch ends a quarter of the timeout after the last host that
    showed one, once all of those answered, and names it (the launcher would wait for it to the timeout)."""
    monkeypatch.setenv("PROBE_GONE_HOSTS", "h3")
    fake.timeout = 30  # the launch ends 7.5 s after the last sign of life, not at 30 s
    r = S.sweep_hosts(HOSTS[:5], fake, ident="j.1")
    assert r.evict() == ["h3"] and r.rounds == 1  # the probe named it: no collective
    assert r.failed["h3"] == (
        "no sign of life: 4 other host(s) started their probe and answered, this one never started it "
        "(the host is gone, or the launcher could not reach it)"
    )
    assert "(timed out)" not in r.log.split("\n")[0]


def test_the_gone_watch_waits_for_every_live_probe_and_the_least_wait() -> None:
    now = [0.0]
    w = S.GoneWatch(hosts=["a", "b", "c"], grace=30, clock=lambda: now[0])
    up = "agpt-probe: a up\nagpt-probe: b up\n"
    assert not w("")  # nothing yet: the launch may be slow everywhere
    assert not w("agpt-probe: a u")  # a line still being written is read when it is whole
    assert not w(up)  # a and b still probing
    now[0] = 5
    assert not w(up + "agpt-probe: a ok: x\n")
    now[0] = 8
    done = up + "agpt-probe: a ok: x\nagpt-probe: b FAILED: y\n"
    assert not w(done)  # 8 s after the last sign of life, less than the least wait (they came together)
    now[0] = 10.5
    assert w.wait() == S.GONE_LEAST_S == 10 and w(done)
    assert not w(done + "agpt-probe: c up\n")  # c was only late: wait for its answer
    every = done + "agpt-probe: c up\nagpt-probe: c ok: z\n"
    assert w(every)  # every host answered: nothing left to wait for (a probe on a hung mount may never exit)


def test_the_gone_watch_waits_as_long_again_as_the_signs_of_life_took_to_arrive_up_to_the_grace() -> None:
    """A launch whose hosts started over 18 s (a slow launcher) waits 18 s more for a silent host, not 10; one that
    spread over a minute waits the grace (a quarter of the timeout), as before the spread was measured."""
    now = [0.0]
    hosts = [f"n{i}" for i in range(5)]
    w = S.GoneWatch(hosts=hosts, grace=30, clock=lambda: now[0])
    out = ""
    for i, t in enumerate((0.0, 6.0, 12.0, 18.0)):
        now[0] = t
        out += f"agpt-probe: n{i} up\nagpt-probe: n{i} ok: fine\n"
        assert not w(out)
    now[0] = 18 + 17.5
    assert w.wait() == 18 and not w(out)
    now[0] = 18 + 18
    assert w(out)
    assert S.wait_for_gone(60, 30) == 30 and S.wait_for_gone(0.2, 30) == 10 and S.wait_for_gone(0, 7.5) == 7.5


def test_a_missing_probe_program_is_one_configuration_error_never_an_eviction(
    fake: S.SweepSettings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGPT_SWEEP_PROGRAM", "/no/such/probe --x")
    r = S.sweep_hosts(HOSTS, fake)
    assert (
        not r.ran
        and r.evict() == []
        and r.note == "configuration error: the probe: /no/such/probe: not found"
    )
    script = tmp_path / "probe.sh"
    script.write_text("echo hi\n")
    monkeypatch.setenv("AGPT_SWEEP_PROGRAM", str(script))
    r = S.sweep_hosts(HOSTS, fake)
    assert not r.ran and r.note.endswith("probe.sh: not executable")


def test_a_check_command_missing_everywhere_is_named_once_and_evicts_nobody(
    fake: S.SweepSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROBE_CONFIG_HOSTS", " ".join(HOSTS))
    r = S.sweep_hosts(HOSTS, fake)
    assert r.ran and r.evict() == [] and len(r.config) == 1 and "cannot run" in r.config[0]
    assert r.note.startswith("configuration error on every host, named once: ")


def test_more_failing_hosts_than_the_limit_is_site_wide_and_evicts_nobody(
    fake: S.SweepSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROBE_FAIL_HOSTS", "h1 h2 h3")
    fake.max_evict = 2
    r = S.sweep_hosts(HOSTS, fake)
    assert r.site_wide and r.evict() == [] and sorted(r.failed) == ["h1", "h2", "h3"]
    assert r.note.startswith(
        "3 of 8 hosts failed the sweep, more than FAILOVER_SWEEP_MAX_EVICT=2: a site-wide fault"
    )
    monkeypatch.setenv("PROBE_FAIL_HOSTS", " ".join(HOSTS[:5]))
    fake.max_evict = 8
    r = S.sweep_hosts(HOSTS, fake)
    assert r.site_wide and "more than half" in r.note


def test_a_bad_link_between_two_halves_is_reported_and_evicts_nobody(
    fake: S.SweepSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUP_LINK_HOSTS", "h2 h7")
    r = S.sweep_hosts(HOSTS, fake)
    assert r.ran and r.evict() == [] and r.link.startswith("a link between h1..h4 (4) <-> h5..h8 (4)")


def test_a_launcher_that_answers_for_nobody_means_the_sweep_could_not_run(
    fake: S.SweepSettings, tmp_path: Path
) -> None:
    broken = tmp_path / "launch"
    broken.write_text("#!/bin/sh\necho 'launch: cannot reach the launcher daemon' >&2\nexit 1\n")
    broken.chmod(0o755)
    fake.launch = (str(broken),)
    r = S.sweep_hosts(HOSTS, fake)
    assert (
        not r.ran
        and r.note == "the probe launch answered for no host (rc 1): launch: cannot reach the launcher daemon"
    )


def test_settings_are_validated_naming_the_setting() -> None:
    for kw, name in (({"mode": "sometimes"}, "FAILOVER_SWEEP/SITE_SWEEP"), ({"timeout": 0}, "FAILOVER_SWEEP_TIMEOUT"),
                     ({"max_evict": 0}, "FAILOVER_SWEEP_MAX_EVICT"), ({"min_free_mib": -1}, "FAILOVER_SWEEP_MIN_FREE_MIB")):  # fmt: skip
        with pytest.raises(BadInput, match=name):
            S.SweepSettings(**kw)  # type: ignore[arg-type]
    assert S.sweep_hosts(HOSTS, S.SweepSettings(mode="off")).note == "the sweep is off (FAILOVER_SWEEP=off)"


def test_max_rounds_grow_with_log2_of_the_hosts() -> None:
    assert [S.max_rounds(n) for n in (1, 2, 4, 512, 4096)] == [1, 2, 3, 10, 13]


# --- what the evidence makes the loop do -------------------------------------------------------------------------
def crash(n: int = 1, **kw: object) -> policy.Attempt:
    return policy.Attempt(attempt=n, rc=1, cls="crash", first_step=1, last_step=3, suspects=["h1"], **kw)  # type: ignore[arg-type]


def decide(a: policy.Attempt, history: list[dict[str, object]] | None = None) -> policy.Plan:
    return policy.decide(a, active=HOSTS[:4], spare=["h5", "h6"], history=history or [], settings=FAST, now=0)


def test_a_failing_host_is_evicted_on_the_sweeps_evidence_not_blind() -> None:
    r = S.SweepResult(ran=True, mode="full", hosts=HOSTS[:4], failed={"h3": "agpt-probe: h3 FAILED: x"})
    a = policy.apply_sweep(crash(), r, active=HOSTS[:4])
    assert (a.cls, a.bad_hosts, a.evidence[0]) == ("node", ["h3"], "sweep: h3: agpt-probe: h3 FAILED: x")
    p = decide(a)
    assert (p.action, p.swap_out, p.swap_in, p.blind) == ("relaunch", ["h3"], ["h5"], False)


def test_every_host_passing_means_no_blind_eviction_and_a_deterministic_crash_is_a_repeat() -> None:
    r = S.SweepResult(ran=True, mode="full", hosts=HOSTS[:4])
    a = policy.apply_sweep(crash(), r, active=HOSTS[:4])
    p = decide(a)
    assert (p.action, p.swap_out, p.blind) == ("relaunch", [], False)
    assert "the health sweep passed every host" in p.reason
    # The same failure again: one reproduction after the sweep passed is the evidence a person is needed.
    again = dataclasses.replace(crash(2), signature="3 boom")
    same = {"event": "attempt", "class": "crash", "first_step": 1, "last_step": 3, "swapped": {},
            "signature": "3 boom", "passed": a.passed}  # fmt: skip
    assert not policy.wants_sweep(again, active=HOSTS[:4], history=[dict(same, attempt=1)], settings=FAST)
    p = decide(again, [dict(same, attempt=1)])
    assert (p.action, p.verdict) == ("stop", "repeat")
    assert (
        "on attempts 1 and 2, every host passed the sweep (probe + collective): a person is needed"
        in p.reason
    )


def test_only_a_sweep_that_could_not_run_leaves_the_blind_rotation() -> None:
    r = S.SweepResult(ran=False, mode="full", note="configuration error: the probe: x: not found")
    p = decide(policy.apply_sweep(crash(), r, active=HOSTS[:4]))
    assert p.blind and p.swap_out == ["h1"]
    assert p.reason.endswith("(the health sweep could not run: configuration error: the probe: x: not found)")


def test_no_time_for_the_sweep_before_the_deadline_is_no_guess_either(tmp_path: Path) -> None:
    seen: list[str] = []
    r = S.for_attempt(tmp_path / "x.log", HOSTS[:4], S.SweepSettings(timeout=60), ident="j.1", time_left=100,
                      min_attempt_s=60, prober=lambda h, s: seen.append("ran") or S.SweepResult(ran=True, mode="full"))  # type: ignore[func-returns-value]  # fmt: skip
    assert (
        r.deferred
        and not r.ran
        and not seen
        and r.note.startswith("100 s left before the deadline, 120 s needed")
    )
    p = decide(policy.apply_sweep(crash(), r, active=HOSTS[:4]))
    assert (p.action, p.swap_out, p.blind) == ("relaunch", [], False) and "no guess, same hosts" in p.reason


def test_no_time_for_the_sweep_pages_nobody_the_next_job_sweeps() -> None:
    """A site outage near the end of a job that trained, its log read as crashes naming nobody (2,048 simulated
    nodes, seed 2): with no time left for the sweep, two attempts without progress used to stop the chain as
    `stuck`, 8 hours for a person. The sweep is the next job's, so the counts page nobody (nor does the trainer's
    rollback limit): same hosts, and the deadline hands over. A job that never trained keeps the counts' guard
    (a config that fails at start-up: tests/bats/cluster_chain.bats), as does a sweep that is off."""
    late = S.SweepResult(ran=False, mode="full", hosts=HOSTS[:4], deferred=True,
                         note="458 s left before the deadline, 720 s needed for the probe and an attempt")  # fmt: skip
    trained = {
        "event": "attempt",
        "attempt": 1,
        "class": "system",
        "first_step": 100,
        "last_step": 900,
        "swapped": {},
    }
    for cls in ("crash", "app"):
        first = {
            "event": "attempt",
            "attempt": 2,
            "class": cls,
            "first_step": None,
            "last_step": None,
            "swapped": {},
        }
        again = policy.apply_sweep(policy.Attempt(attempt=3, rc=1, cls=cls), late, active=HOSTS[:4])
        p = decide(again, [trained, first])
        assert (p.action, p.swap_out, p.blind) == ("relaunch", [], False), (cls, p.reason)
        assert decide(again, [first]).verdict == "stuck"  # the job never trained
    off = S.SweepResult(ran=False, mode="off", note="FAILOVER_SWEEP=off")
    first = {
        "event": "attempt",
        "attempt": 2,
        "class": "app",
        "first_step": None,
        "last_step": None,
        "swapped": {},
    }
    p = decide(
        policy.apply_sweep(policy.Attempt(attempt=3, rc=1, cls="app"), off, active=HOSTS[:4]),
        [trained, first],
    )
    assert (p.verdict, p.reason) == ("stuck", "2 attempts in a row made no progress (app, app) (the health sweep "
                                     "could not run: FAILOVER_SWEEP=off)")  # fmt: skip
    rollbacks = policy.Attempt(attempt=1, rc=4, cls="app", first_step=1, last_step=3)
    assert decide(policy.apply_sweep(rollbacks, late, active=HOSTS[:4])).action == "relaunch"
    assert decide(policy.apply_sweep(rollbacks, off, active=HOSTS[:4])).verdict == "repeat"


class SlowGroups:
    """A collective that takes 0.3 s a round and fails with h6 in it (the launcher boundary, timed)."""

    def probe(self, hosts: list[str]) -> tuple[str, int, bool]:
        raise AssertionError("bisect only runs groups")

    def group(self, hosts: list[str], tag: str) -> tuple[str, int, bool]:
        time.sleep(0.3)
        return ("preflight: FAILED: h6 timed out", 1, False) if "h6" in hosts else ("ok", 0, False)


def test_a_bisection_the_deadline_cuts_short_evicts_nobody_it_did_not_isolate() -> None:
    logs: list[str] = []
    bad, link, rounds = S.bisect(HOSTS, SlowGroups(), logs, budget_s=1.2, round_s=1.0)
    assert (
        bad == {}
        and rounds == 1
        and link.startswith("not localised before the deadline (the bisection stopped at")
    )
    bad, link, rounds = S.bisect(HOSTS, SlowGroups(), logs)
    assert list(bad) == ["h6"] and rounds == S.max_rounds(8) and link == ""


def test_a_site_wide_sweep_is_a_system_fault_nobody_evicted() -> None:
    r = S.SweepResult(ran=True, mode="full", hosts=HOSTS[:4], failed={h: "x" for h in HOSTS[:3]}, site_wide=True,
                      note="3 of 4 hosts failed the sweep, more than half: a site-wide fault, nobody evicted (first: x)")  # fmt: skip
    a = policy.apply_sweep(crash(), r, active=HOSTS[:4])
    p = decide(a)
    assert a.cls == "system" and p.swap_out == [] and p.action == "relaunch"
    assert a.evidence[0].startswith("sweep: 3 of 4 hosts failed the sweep")


@pytest.mark.parametrize(
    ("cls", "bad", "rc", "wanted"),
    [("crash", [], 1, True), ("hang", [], 124, True), ("node", ["h2"], 1, False), ("app", [], 1, True),
     ("system", [], 1, False), ("walltime", [], 143, False), ("crash", [], 127, True), ("crash", [], 0, False)],
)  # fmt: skip
def test_the_sweep_runs_only_when_the_log_proves_nobody(
    cls: str, bad: list[str], rc: int, wanted: bool
) -> None:
    a = policy.Attempt(attempt=1, rc=rc, cls=cls, bad_hosts=bad, first_step=1, last_step=3)
    assert policy.wants_sweep(a, active=HOSTS[:4], history=[], settings=FAST) is wanted


# --- the plan runs it, records it, and hosts/bad holds the evidence ---------------------------------------------
def plan_args(run: Path, cls_file: Path, **kw: str) -> argparse.Namespace:
    argv = ["--run-dir", str(run), "--jobid", "j", "--attempt", "1", "--rc", "1", "--classification", str(cls_file),
            "--started", "1000", "--ended", "1010", "--now", "1010", "--apply"]  # fmt: skip
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", v]
    return P._parser().parse_args(argv)


def test_plan_sweeps_a_crash_that_names_nobody_and_evicts_on_evidence(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "hosts").mkdir(parents=True)
    (run / "hosts" / "active").write_text("h1\nh2\nh3\nh4\n")
    (run / "hosts" / "spare").write_text("h5\n")
    cls_file = tmp_path / "c.json"
    cls_file.write_text(
        json.dumps({"class": "crash", "bad_hosts": [], "evidence": [], "suspect_hosts": ["h1"]})
    )
    seen: list[tuple[list[str], S.SweepSettings]] = []

    def prober(hosts: list[str], s: S.SweepSettings) -> S.SweepResult:
        seen.append((list(hosts), s))
        return S.SweepResult(ran=True, mode=s.mode, hosts=list(hosts), failed={"h3": "agpt-probe: h3 FAILED: gloo"},
                             rounds=3, cost_s=41.0, log="# probe\nh3: agpt-probe: h3 FAILED: gloo")  # fmt: skip

    plan = P.run(plan_args(run, cls_file, sweep_check="nhc -q", sweep_mounts="/lus:/home"), prober=prober)
    assert (plan.action, plan.swap_out, plan.blind) == ("relaunch", ["h3"], False)
    hosts, s = seen[0]
    assert hosts == ["h1", "h2", "h3", "h4"] and s.check == "nhc -q"
    assert s.mounts == ("/lus", "/home", str(run.resolve()))  # the run directory is always a required mount
    bad = (run / "hosts" / "bad").read_text().split("\t")
    assert bad[0] == "h3" and bad[3].startswith("sweep: h3: agpt-probe: h3 FAILED: gloo")
    ev = json.loads((run / "events.jsonl").read_text().splitlines()[0])
    assert ev["class"] == "node" and ev["sweep"]["failed"] == {"h3": "agpt-probe: h3 FAILED: gloo"}
    assert ev["sweep"]["cost_s"] == 41.0 and ev["sweep"]["log"] == "attempts/j.1.sweep.log"
    assert (run / "attempts" / "j.1.sweep.log").read_text().startswith("# probe")
    r = subprocess.run([str(ROOT / "bin" / "agpt"), "failover", "report", str(run)], env=agpt_env(),
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (
        "sweep after j.1: 4 host(s), 3 round(s), 41s: h3 failed: agpt-probe: h3 FAILED: gloo" in r.stdout
    ), r.stdout


def test_plan_refuses_a_bad_sweep_setting_naming_it(tmp_path: Path) -> None:
    r = subprocess.run([str(ROOT / "bin" / "agpt"), "failover", "plan", "--run-dir", str(tmp_path), "--attempt", "1",
                        "--rc", "1", "--sweep", "maybe"], env=agpt_env(), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (
        r.returncode == 2
        and "FAILOVER_SWEEP/SITE_SWEEP: 'maybe' is not one of full | probe | off" in r.stderr
    )


def test_the_defaults_are_one_fact_in_bash_and_python() -> None:
    names = ["FAILOVER_SWEEP_TIMEOUT", "FAILOVER_SWEEP_MAX_EVICT", "FAILOVER_SWEEP_MIN_FREE_MIB"]
    script = f"source {ROOT / 'lib' / 'failover.sh'}; " + "; ".join(f'printf "%s\\n" "${n}"' for n in names)
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True, env={}
    ).stdout.split()
    d = S.SweepSettings()
    assert out == [f"{d.timeout:g}", str(d.max_evict), f"{d.min_free_mib:g}"]


# --- a person only on evidence: the sweep, then one reproduction (issue 35) -------------------------------------
def _app_run(tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    (run / "hosts").mkdir(parents=True)
    (run / "hosts" / "active").write_text("h1\nh2\nh3\nh4\n")
    (run / "hosts" / "spare").write_text("h5\n")
    log = run / "attempts" / "j.1.log"
    log.parent.mkdir()
    log.write_text("".join(f"[rank{r}]: step=1200 loss=2.9\n" for r in range(4)) + "".join(
        f"[rank{r}]: ValueError: shape mismatch (4096, {r})\n" for r in range(4)))  # fmt: skip
    return run, log


def log_args(run: Path, log: Path, attempt: int = 1, **kw: str) -> argparse.Namespace:
    """`agpt failover plan` after an attempt whose log the plan classifies itself."""
    argv = ["--run-dir", str(run), "--jobid", "j", "--attempt", str(attempt), "--rc", "1", "--log", str(log),
            "--started", "1000", "--ended", "1010", "--now", "1010", "--apply"]  # fmt: skip
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", v]
    return P._parser().parse_args(argv)


def test_an_app_error_on_one_host_whose_probe_fails_is_that_host_evicted_not_a_stop(tmp_path: Path) -> None:
    run, log = _app_run(tmp_path)
    failing = {"h2": "agpt-probe: h2 FAILED: device 0: cudaGetDeviceCount: unknown error"}

    def prober(hosts: list[str], s: S.SweepSettings) -> S.SweepResult:
        return S.SweepResult(ran=True, mode=s.mode, hosts=list(hosts), failed=failing, rounds=1)

    plan = P.run(log_args(run, log), prober=prober)
    assert (plan.action, plan.swap_out) == ("relaunch", ["h2"])
    ev = json.loads((run / "events.jsonl").read_text().splitlines()[0])
    assert ev["class"] == "node" and ev["evidence"][0].startswith("sweep: h2: agpt-probe: h2 FAILED")


def test_an_app_error_stops_only_after_the_sweep_passed_and_one_reproduction(tmp_path: Path) -> None:
    run, log = _app_run(tmp_path)
    seen: list[int] = []

    def prober(hosts: list[str], s: S.SweepSettings) -> S.SweepResult:
        seen.append(len(hosts))
        return S.SweepResult(ran=True, mode=s.mode, hosts=list(hosts), rounds=1)

    first = P.run(log_args(run, log), prober=prober)
    assert (first.action, first.swap_out) == ("relaunch", [])
    assert (
        "every host passed the sweep (probe + collective): same hosts, to see whether it reproduces"
        in first.reason
    )
    ev = json.loads((run / "events.jsonl").read_text().splitlines()[0])
    assert ev["passed"] == "probe + collective" and ev["signature"].startswith(
        "1200 [rankN]: ValueError: shape"
    )
    log2 = log.with_name("j.2.log")
    log2.write_text(log.read_text())
    p = P.run(log_args(run, log2, 2), prober=prober)
    assert seen == [4]  # one sweep per signature per job
    assert (p.action, p.verdict, p.exit) == ("stop", "repeat", 4)
    assert p.reason.startswith("app: `[rank0]: ValueError: shape mismatch (4096, 0)` at step 1200 on attempts "
                               "1 and 2, every host passed the sweep (probe + collective): a person is needed")  # fmt: skip


def test_a_failure_its_sweep_put_down_to_the_site_is_no_occurrence_of_a_reproduction(tmp_path: Path) -> None:
    """A site outage whose log reads as an application error: the sweep after it fails every host (the site), the
    one after the next attempt passes them all (the outage ended in between).  The first occurrence had its
    cause: no person yet, a relaunch to see whether it reproduces on healthy hosts; a third one does."""
    run, log = _app_run(tmp_path)
    outage = [True]

    def prober(hosts: list[str], s: S.SweepSettings) -> S.SweepResult:
        failed = (
            {h: "agpt-probe: FAILED: mount /lus: no answer within 90 s" for h in hosts} if outage[0] else {}
        )
        res = S.SweepResult(ran=True, mode=s.mode, hosts=list(hosts), failed=failed, rounds=1)
        S.guard(res, s)  # as run_sweep does: every host failing is one shared cause
        return res

    first = P.run(log_args(run, log), prober=prober)
    assert first.action == "relaunch" and "site-wide" in first.reason
    outage[0] = False
    for n in (2, 3):
        log.with_name(f"j.{n}.log").write_text(log.read_text())
    second = P.run(log_args(run, log.with_name("j.2.log"), 2), prober=prober)
    assert (second.action, second.verdict) == ("relaunch", None), second.reason
    third = P.run(log_args(run, log.with_name("j.3.log"), 3), prober=prober)
    assert (third.action, third.verdict) == ("stop", "repeat")
    assert "on attempts 2 and 3, every host passed the sweep" in third.reason


def test_a_failure_that_does_not_reproduce_is_a_transient_and_training_goes_on(tmp_path: Path) -> None:
    run, log = _app_run(tmp_path)

    def prober(hosts: list[str], s: S.SweepResult | S.SweepSettings) -> S.SweepResult:
        return S.SweepResult(ran=True, mode="full", hosts=list(hosts), rounds=1)

    P.run(log_args(run, log), prober=prober)  # type: ignore[arg-type]
    log2 = log.with_name("j.2.log")
    log2.write_text(
        log.read_text().replace("step=1200", "step=1300")
    )  # it trained past it, then failed later
    p = P.run(log_args(run, log2, 2), prober=prober)  # type: ignore[arg-type]
    assert p.action == "relaunch"


def test_a_sweep_that_cannot_run_falls_back_to_todays_rule_and_says_so(tmp_path: Path) -> None:
    run, log = _app_run(tmp_path)
    for n in (1, 2, 3):
        p = P.run(log_args(run, log, n, sweep="off"))
    assert (p.action, p.verdict) == ("stop", "repeat")
    assert "3 times in a row" in p.reason and p.reason.endswith(
        "(the health sweep could not run: the sweep is off (FAILOVER_SWEEP=off))"
    )


def test_an_empty_log_has_no_signature_and_never_counts_as_reproduced() -> None:
    assert policy.signature("", hosts=["h1"], where=3) is None
    a = dataclasses.replace(crash(2), passed="probe")
    same = {"event": "attempt", "class": "crash", "first_step": 1, "last_step": 3, "swapped": {}, "signature": None,
            "passed": "probe"}  # fmt: skip
    assert decide(a, [dict(same, attempt=1)]).action == "relaunch"


def test_a_signature_blanks_numbers_and_the_jobs_host_names() -> None:
    hosts = ["x3006c0s13b1n0.hsn.cm.polaris.alcf.anl.gov", "nid001234"]
    a = policy.signature("x3006c0s13b1n0: rank 7 ECC 0x1f at 10.1.2.3 nid001234", hosts=hosts, where=1200)
    b = policy.signature("x3006c0s13b1n0: rank 2 ECC 0x3a at 10.1.2.9 nid001234", hosts=hosts, where=1200)
    assert a == b == "1200 HOST: rank N ECC N at N.N.N.N HOST"
    assert policy.signature("same", hosts=[], where=None) != policy.signature("same", hosts=[], where=5)


def test_a_site_fault_is_backed_off_on_first_sight_and_swept_when_it_comes_back() -> None:
    a = policy.Attempt(
        attempt=2, rc=1, cls="system", first_step=1, last_step=3, signature="3 Input/output error"
    )
    assert not policy.wants_sweep(
        dataclasses.replace(a, attempt=1), active=HOSTS[:4], history=[], settings=FAST
    )
    prior = {"event": "attempt", "attempt": 1, "class": "system", "first_step": 1, "last_step": 3, "swapped": {},
             "signature": "3 Input/output error", "passed": ""}  # fmt: skip
    assert policy.wants_sweep(a, active=HOSTS[:4], history=[prior], settings=FAST)


def test_bench_probe_times_the_probe_against_a_trainers_cold_start_and_prints_the_ratio(
    tmp_path: Path,
) -> None:
    """tests/bench/bench_probe.py: the ground for the simulator's probe cost (agpt.sim.model.Probe.launch_s)."""
    r = subprocess.run([sys.executable, str(ROOT / "tests/bench/bench_probe.py"), "--repeat", "1"],
                       env=agpt_env({"TMPDIR": str(tmp_path)}), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("probe (python -m agpt.probe): ") and "its sign of life after" in lines[0]
    assert lines[1].startswith("trainer's cold start to its first step (jobs/configs/tiny.yaml): ")
    assert float(lines[2].removeprefix("ratio probe / trainer's start: ")) > 0
    assert not list(tmp_path.glob("bench_probe.*")), "the benchmark cleans up what it wrote"
    bad = subprocess.run([sys.executable, str(ROOT / "tests/bench/bench_probe.py"), "--repeat", "0"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode != 0 and "--repeat must be at least 1" in bad.stderr
