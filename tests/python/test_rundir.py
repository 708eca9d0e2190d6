"""The run directory's shared rules: torn lines, host names, spares, locked swaps, bounded durations."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agpt import chain, rundir, runplot, site
from agpt.errors import BadInput
from agpt.failover import hostmatch, hosts, plan
from agpt.yeet import report as yeet_report
from conftest import BIN, ROOT, agpt_env
from failover_util import plan_cli, run_with_attempt


def test_an_append_after_a_torn_line_starts_on_a_fresh_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ev = tmp_path / "events.jsonl"
    ev.write_text('{"event": "attempt", "attempt": 1}\n{"event": "att')  # killed mid-write
    plan.append_event(ev, {"event": "attempt", "attempt": 2})
    assert [e["attempt"] for e in plan.read_events(ev)] == [1, 2]
    assert "1 unreadable line(s) skipped" in capsys.readouterr().err


def test_hosts_bad_keeps_a_proven_bad_host_after_a_torn_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "hosts" / "bad"
    bad.parent.mkdir()
    bad.write_text("h1\t100\tj1\tECC on h1\nh2\t10")  # torn
    hosts.append_bad(bad, ["h3"], jobid="j2", evidence="Xid 79 on h3")
    recs = hosts.read_bad(bad)
    assert [r.host for r in recs] == ["h1", "h3"]
    assert hosts.proven_bad(recs) == {"h1", "h3"}
    assert "skipped" in capsys.readouterr().err


def test_chain_records_after_a_torn_line_all_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "chain.jsonl").write_text('{"jobid": "1", "verdict": "resubmit"}\n{"jobid": "2", "ver')
    chain.append_record(tmp_path, {"jobid": "3", "verdict": "resubmit"})
    assert [r["jobid"] for r in chain.read_chain(tmp_path)] == ["1", "3"]
    assert "skipped" in capsys.readouterr().err


def test_plot_reader_skips_a_torn_events_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "attempts").mkdir()
    (tmp_path / "events.jsonl").write_text('{"event": "attempt", "attempt": 1}\n{"eve')
    curve = runplot.read_run(tmp_path)
    assert len(curve.events) == 1 and "skipped" in capsys.readouterr().err


def test_out_of_range_numbers_and_lone_surrogates_are_unreadable_lines(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 1e400}\n{"a": NaN}\n{"a": "\\ud800"}\n[1]\n{"a": 2}\n')
    notes: list[str] = []
    assert rundir.read_jsonl(p, notes=notes) == [{"a": 2}]
    assert "4 unreadable line(s)" in notes[0]
    rundir.append_jsonl(p, {"t": float("nan"), "u": [float("inf")]})
    assert rundir.read_jsonl(p, notes=[])[-1] == {"t": None, "u": [None]}


@pytest.mark.parametrize(
    "parse",
    [
        lambda lines: hosts.clean_hosts(lines),
        lambda lines: hostmatch.parse_hosts(lines),
        lambda lines: rundir.parse_hostfile(lines),
    ],
)
def test_every_hostfile_reader_has_one_rule(parse: object) -> None:
    lines = ["# comment", "n1 slots=4", "n2:4", "", "n1", "10.0.0.7", "fe80::1", "n3.example.org  # tail"]
    assert parse(lines) == ["n1", "n2", "10.0.0.7", "fe80::1", "n3.example.org"]  # type: ignore[operator]


def test_yeet_reads_hostfiles_by_the_same_rule(tmp_path: Path) -> None:
    f = tmp_path / "hf"
    f.write_text("n1 slots=4\nn2:4\nn1\n")
    assert yeet_report.read_hostfile(f) == ["n1", "n2"]


@pytest.mark.parametrize("line", ["n1;touch x", "$(touch x)", "`id`", "n1|sh", "a'b", "n1&&id", "é1"])
def test_a_hostile_hostfile_line_is_refused_naming_file_and_line(tmp_path: Path, line: str) -> None:
    f = tmp_path / "alloc"
    f.write_text(f"n0\n{line}\n")
    with pytest.raises(BadInput, match=rf"{f}:2: not a host name"):
        rundir.read_hostfile(f)


def test_hosts_init_refuses_a_hostile_allocation_with_exit_2(tmp_path: Path) -> None:
    alloc = tmp_path / "alloc"
    alloc.write_text("n1\n$(touch pwned)\n")
    r = subprocess.run(
        [
            str(BIN / "agpt-failover"),
            "hosts",
            "init",
            "--run-dir",
            str(tmp_path / "run"),
            "--hostfile",
            str(alloc),
        ],
        capture_output=True,
        text=True,
        env=agpt_env(),
        cwd=tmp_path,
    )
    assert r.returncode == 2 and f"{alloc}:2: not a host name" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "pwned").exists()


def _jobgen_spares(active: int, percent: int | None, minimum: int | None) -> int:
    env = agpt_env({"SITE_SPARES_PERCENT": str(percent), "SITE_SPARES_MIN": str(minimum)})
    for key, v in (("SITE_SPARES_PERCENT", percent), ("SITE_SPARES_MIN", minimum)):
        if v is None:
            del env[key]
    out = subprocess.run(
        ["bash", "-c", f'source "{ROOT}/lib/jobgen.sh"; jobgen_spares {active}'],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return int(out.stdout)


def test_unset_site_spares_fall_back_to_one_python_default_in_the_job_and_the_loop(tmp_path: Path) -> None:
    """lib/jobgen.sh fell back to 0% and 0 spares, lib/failover.sh to 2% and 4: both ask agpt.rundir now."""
    want = rundir.spares_for(256, percent=rundir.SPARES_PERCENT, minimum=rundir.SPARES_MIN)
    assert want == 6 and _jobgen_spares(256, None, None) == want
    alloc = tmp_path / "alloc"
    alloc.write_text("".join(f"n{i}\n" for i in range(256 + want)))
    script = f'source "{ROOT}/lib/failover.sh"; failover_init'
    env = agpt_env({"AGPT_RUN_DIR": str(tmp_path / "run"), "FAILOVER_HOSTS_FROM": str(alloc)})
    for key in ("SITE_SPARES_PERCENT", "SITE_SPARES_MIN", "FAILOVER_SPARES", "FAILOVER_ACTIVE"):
        env.pop(key, None)
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert len(hosts.read_hosts(tmp_path / "run/hosts/spare")) == want


@pytest.mark.parametrize(
    ("active", "percent", "minimum"),
    [(1, 2, 4), (2, 2, 4), (7, 2, 4), (11, 2, 4), (12, 2, 4), (256, 2, 4), (5, 0, 2)],
)
def test_the_job_asks_for_the_spares_the_loop_keeps(active: int, percent: int, minimum: int) -> None:
    spares = _jobgen_spares(active, percent, minimum)
    assert spares == rundir.spares_for(active, percent=percent, minimum=minimum)
    split = hosts.split_hosts([f"n{i}" for i in range(active + spares)], percent=percent, minimum=minimum)
    assert (len(split.active), len(split.spare)) == (active, spares)


def _case_arms(text: str, word: str) -> tuple[str, ...]:
    """The arms of lib/launch.sh's `case "$WORD" in ... esac`."""
    block = text.split(f'case "${word}" in', 1)[1].split("esac", 1)[0]
    return tuple(re.findall(r"^ {4}([a-z-]+)\)$", block, re.M))


def test_the_launcher_names_a_site_may_give_are_the_ones_lib_launch_starts() -> None:
    text = (ROOT / "lib" / "launch.sh").read_text()
    assert _case_arms(text, "launcher") == rundir.LAUNCH_NAMES
    assert f"({', '.join(rundir.LAUNCH_NAMES)})" in text  # the refusal names them
    # and the container runtimes a site may give (SITE_CONTAINER) are the ones it wraps a rank's command in
    assert _case_arms(text, "how") == tuple(c for c in site.CONTAINERS if c != "none")


def test_split_inverts_spares_for_every_size() -> None:
    for pct, mn in ((2, 4), (5, 2), (0, 0), (10, 1)):
        for a in range(1, 1500):
            s = rundir.spares_for(a, percent=pct, minimum=mn)
            assert rundir.split_counts(a + s, percent=pct, minimum=mn) == (a, s)


def test_concurrent_swaps_never_lose_an_update(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "hosts").mkdir(parents=True)
    n = 8
    (run / "hosts/active").write_text("".join(f"a{i}\n" for i in range(n)))
    (run / "hosts/spare").write_text("".join(f"s{i}\n" for i in range(n)))
    argv = [sys.executable, "-m", "agpt.failover", "hosts", "swap", "--run-dir", str(run), "--evidence", "x"]
    procs = [
        subprocess.Popen(
            [*argv, "--out", f"a{i}"], env=agpt_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for i in range(n)
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    active = hosts.read_hosts(run / "hosts/active")
    assert sorted(active) == sorted(f"s{i}" for i in range(n))  # every bad host out, each spare used once
    assert hosts.read_hosts(run / "hosts/spare") == []
    assert sorted(r.host for r in hosts.read_bad(run / "hosts/bad")) == sorted(f"a{i}" for i in range(n))


@pytest.mark.parametrize("flag", ["--timeout", "--grace", "--startup-timeout", "--backoff"])
@pytest.mark.parametrize("value", ["1e300", "1e400", "nan", "-1"])
def test_watch_refuses_a_huge_duration_before_starting_the_child(
    tmp_path: Path, flag: str, value: str
) -> None:
    marker = tmp_path / "started"
    r = subprocess.run(
        [str(BIN / "agpt-watch"), flag, value, "--", "touch", str(marker)],
        capture_output=True,
        text=True,
        env=agpt_env(),
        timeout=60,
    )
    assert r.returncode == 2 and flag in r.stderr and "Traceback" not in r.stderr
    assert not marker.exists()


_plan = plan_cli


def _run_dir(tmp_path: Path) -> tuple[Path, Path]:
    log = "step=1 loss=3\nstep=2 loss=2\n[h2] CUDA error: uncorrectable ECC error encountered\n"
    return run_with_attempt(tmp_path, ["h1", "h2"], ["h3"], log)


def test_plan_classifies_in_process_and_writes_class_json(tmp_path: Path) -> None:
    run, log = _run_dir(tmp_path)
    common = ("--jobid", "j", "--attempt", "1", "--rc", "1", "--log", str(log), "--apply", "--shell")
    r = _plan(run, *common, "--backoff", "0", "--report")
    assert r.returncode == 0, r.stderr
    action, code, _backoff, attempt = r.stdout.split()
    assert (action, code, attempt) == ("relaunch", "-", "1")
    cls = json.loads((run / "attempts/j.1.class.json").read_text())
    assert cls["class"] == "node" and cls["bad_hosts"] == ["h2"] and cls["first_step"] == 1
    assert (run / "hosts/active").read_text() == "h1\nh3\n"


def test_plan_passes_classify_options_through_and_falls_back_when_they_are_bad(tmp_path: Path) -> None:
    run, log = _run_dir(tmp_path)
    r = _plan(
        run, "--jobid", "j", "--attempt", "1", "--rc", "1", "--log", str(log), "--", "--patterns", "nosuch"
    )
    assert r.returncode == 0 and "deciding from the exit code" in r.stderr
    assert json.loads((run / "attempts/j.1.class.json").read_text())["class"] == "crash"


def test_plan_before_gives_the_attempt_number_and_prints_the_report_at_a_stop(tmp_path: Path) -> None:
    run, _ = _run_dir(tmp_path)
    plan.append_event(run / "events.jsonl", {"event": "attempt", "jobid": "j", "attempt": 4, "class": "hang"})
    r = _plan(run, "--jobid", "j", "--before", "--apply", "--shell", "--report", "--now", "1000",
              "--deadline", "1100")  # fmt: skip
    assert r.stdout.split() == ["stop", "75", "0", "5"]
    assert "not starting attempt 5" in r.stderr and "failover report:" in r.stderr


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--deadline", "nan"),
        ("--deadline", "1e400"),
        ("--rc", "1e400"),
        ("--rc", "999"),
        ("--attempt", "-3"),
        ("--backoff", "1e400"),
        ("--backoff", "-5"),
        ("--min-attempt-s", "inf"),
        ("--max-attempts", "1e9"),
        ("--now", "-1"),
    ],
)
def test_plan_refuses_bad_numbers_in_one_line(tmp_path: Path, flag: str, value: str) -> None:
    run, log = _run_dir(tmp_path)
    args = {"--attempt": "1", "--rc": "1", flag: value}
    flat = [x for kv in args.items() for x in kv]
    r = _plan(run, "--jobid", "j", *flat, "--log", str(log))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_plan_reads_history_records_of_any_shape(tmp_path: Path) -> None:
    run, log = _run_dir(tmp_path)
    ev = run / "events.jsonl"
    for rec in (
        {"event": "attempt", "jobid": "j", "attempt": "x", "swapped": "h1", "class": 5},
        {
            "event": "attempt",
            "jobid": "j",
            "attempt": 1e300,
            "swapped": {"out": 3, "blind": 1},
            "last_step": [],
        },
        {"event": "attempt", "jobid": "j", "attempt": None, "first_step": "7"},
    ):
        plan.append_event(ev, rec)
    r = _plan(run, "--jobid", "j", "--attempt", "2", "--rc", "1", "--log", str(log), "--backoff", "0")
    assert r.returncode == 0, r.stderr


def test_chain_status_reads_records_without_a_verdict_or_with_odd_values(tmp_path: Path) -> None:
    (tmp_path / "chain.jsonl").write_text(
        '{"jobid": "1"}\n{"jobid": {"a": 1}, "started": 1e300, "next_jobid": [1]}\n{"end_step": 1e400}\n'
    )
    r = subprocess.run(
        [str(BIN / "agpt-chain"), "status", str(tmp_path)], capture_output=True, text=True, env=agpt_env()
    )
    assert r.returncode == 0 and "last verdict ?" in r.stdout and "Traceback" not in r.stderr
    r = subprocess.run(
        [str(BIN / "agpt-chain"), "start", str(tmp_path), "--job", "9", "--predecessor", "8"],
        capture_output=True,
        text=True,
        env=agpt_env(),
    )
    assert r.returncode == 0 and r.stdout.strip() == "submit"


@pytest.mark.parametrize(
    "args",
    [["--rc", "abc"], ["--rc", "1e400"], ["--rc", "1", "--started", "nan"], ["--rc", "1", "--max-jobs", "x"]],
)
def test_chain_end_refuses_bad_values_in_one_line(tmp_path: Path, args: list[str]) -> None:
    base = ["end", str(tmp_path), "--job", "1", "--started", "100", "--start-step", "0"]
    r = subprocess.run(
        [str(BIN / "agpt-chain"), *base, *args], capture_output=True, text=True, env=agpt_env()
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
