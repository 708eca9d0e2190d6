"""Property-based: every reader of a run directory takes arbitrary bytes, truncations and extreme numbers and
answers with a value, a documented fallback or BadInput (exit 2), never a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agpt import chain, rundir
from agpt.errors import AgptError, BadInput
from agpt.failover import hostmatch, hosts, plan, policy, report

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ_SLOW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

extreme_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from(["1e400", "-1e400", "NaN", "Infinity", "1e308", "-0", "9" * 40]),
)
json_scalars = st.one_of(st.none(), st.booleans(), st.text(max_size=20), extreme_numbers)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
FIELDS = ["event", "jobid", "attempt", "rc", "class", "swapped", "first_step", "last_step", "ckpt_step",
          "started", "ended", "bad_hosts", "evidence", "verdict", "exit", "reason", "time", "end_step",
          "start_step", "progress", "next_jobid", "cancelled_jobid"]  # fmt: skip
records = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=10).map(
    lambda d: {**d, "event": d.get("event", "attempt"), "jobid": d.get("jobid", "j")}
)


def _line(rec: dict[str, Any]) -> bytes:
    """A record as some writer may have left it: non-finite numbers as Python's json writes them."""
    return (json.dumps(rec, default=str) + "\n").encode()


@contextlib.contextmanager
def run_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "hosts").mkdir()
        (root / "hosts/active").write_text("h1\nh2\nh3\n")
        (root / "hosts/spare").write_text("h4\n")
        yield root


@FUZZ
@given(st.binary(max_size=2000))
def test_jsonl_reader_takes_any_bytes(data: bytes) -> None:
    with run_dir() as d:
        (d / "events.jsonl").write_bytes(data)
        notes: list[str] = []
        out = rundir.read_jsonl(d / "events.jsonl", notes=notes)
        assert all(isinstance(o, dict) for o in out)
        json.dumps(out, allow_nan=False).encode()  # every value read back is printable, finite JSON


@FUZZ
@given(st.binary(max_size=500), records)
def test_an_append_is_always_read_back_whatever_came_before(prefix: bytes, rec: dict[str, Any]) -> None:
    with run_dir() as d:
        p = d / "chain.jsonl"
        p.write_bytes(prefix)
        rundir.append_jsonl(p, rec)
        back = rundir.read_jsonl(p, notes=[])
        assert back and back[-1] == json.loads(json.dumps(rundir._finite(rec), default=str))


@FUZZ
@given(st.lists(records, min_size=1, max_size=6), st.data())
def test_truncated_event_files_and_odd_records_never_break_report_or_plan(
    recs: list[dict[str, Any]], data: Any
) -> None:
    text = b"".join(_line(r) for r in recs)
    cut = data.draw(st.integers(min_value=0, max_value=len(text)))
    with run_dir() as d:
        (d / "events.jsonl").write_bytes(text[:cut])
        (d / "chain.jsonl").write_bytes(text[: len(text) - cut])
        try:
            rep = report.build(d)
        except BadInput:
            pass
        else:
            report.render(rep)
            json.dumps(rep.as_dict(), allow_nan=False)
        args = plan._parser().parse_args(
            [
                "--run-dir",
                str(d),
                "--jobid",
                "j",
                "--attempt",
                "3",
                "--rc",
                "1",
                "--now",
                "1000",
                "--backoff",
                "0",
            ]
        )
        p = plan.run(args)
        assert p.action in ("relaunch", "stop")
        assert plan.next_attempt(d, "j") >= 1


@FUZZ
@given(st.binary(max_size=1500))
def test_chain_commands_take_any_chain_jsonl(data: bytes) -> None:
    with run_dir() as d:
        (d / "chain.jsonl").write_bytes(data)
        (d / "chain.lock").write_bytes(data[:40])
        for argv in (["status", str(d)], ["status", str(d), "--json"], ["start", str(d), "--job", "9",
                     "--predecessor", "8"], ["end", str(d), "--job", "9", "--rc", "75", "--started", "1",
                     "--start-step", "0", "--next", "10"]):  # fmt: skip
            with contextlib.redirect_stdout(io.StringIO()):
                assert chain.main(argv) == 0


@FUZZ
@given(st.binary(max_size=1500))
def test_hosts_bad_reader_takes_any_bytes(data: bytes) -> None:
    with run_dir() as d:
        (d / "hosts/bad").write_bytes(data)
        recs = hosts.read_bad(d / "hosts/bad")
        assert all(rundir.valid_host(r.host) and math.isfinite(r.time) for r in recs)
        hosts.append_bad(d / "hosts/bad", ["h9"], jobid="j\tx\n", evidence="ECC\nerror")
        assert hosts.read_bad(d / "hosts/bad")[-1].host == "h9"


@FUZZ
@given(st.binary(max_size=800))
def test_hostfile_parsers_answer_hosts_or_bad_input(data: bytes) -> None:
    with run_dir() as d:
        f = d / "hostfile"
        f.write_bytes(data)
        for read in (rundir.read_hostfile, hostmatch.read_hostfile, hostmatch.read_ipmap):
            try:
                out = read(f)
            except BadInput as e:
                assert str(f) in str(e)
                continue
            assert isinstance(out, list)
        try:
            names = rundir.read_hostfile(f)
        except BadInput:
            return
        assert all(rundir.valid_host(h) for h in names)


@FUZZ
@given(st.one_of(st.binary(max_size=600), records.map(_line)))
def test_class_json_of_any_content_gives_a_class(data: bytes) -> None:
    with run_dir() as d:
        (d / "c.json").write_bytes(data)
        c = plan.load_classification(str(d / "c.json"), rc=1, now=0, deadline=None)
        assert c["class"] in rundir.CLASSES


@FUZZ
@given(extreme_numbers)
def test_durations_counts_and_epochs_are_bounded_or_refused(v: Any) -> None:
    for check in (
        lambda x: rundir.seconds(x, "FLAG"),
        lambda x: rundir.whole(x, "FLAG"),
        lambda x: rundir.epoch(x, "FLAG"),
        lambda x: policy.Settings(min_attempt_s=x),
        lambda x: policy.Settings(min_save_s=x),
        lambda x: policy.Settings(backoff=(x,)),
    ):
        try:
            out = check(v)
        except BadInput:
            continue
        if isinstance(out, float):
            assert math.isfinite(out) and 0 <= out <= max(rundir.MAX_SECONDS, 1e11)
    assert rundir.num(v) is None or math.isfinite(rundir.num(v))  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["1e400", "nan", "-inf", "1e300", "-1"])
def test_plan_cli_refuses_extreme_settings_with_exit_2(value: str) -> None:
    with run_dir() as d:
        for flag in ("--backoff", "--min-attempt-s", "--deadline", "--now"):
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = plan.main(["--run-dir", str(d), "--attempt", "1", "--before", flag, value])
            assert (
                rc == 2
                and len(err.getvalue().strip().splitlines()) == 1
                and flag.strip("-") in err.getvalue().lower().replace("_", "-")
            )


@pytest.mark.parametrize("value", ["1e400", "nan", "-inf", "1e300", "-1", "x"])
@pytest.mark.parametrize(
    "flag", ["--spares-percent", "--spares-min", "--resolve-timeout", "--spares", "--active"]
)
def test_hosts_init_refuses_extreme_settings_with_exit_2(flag: str, value: str) -> None:
    with run_dir() as d:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = hosts.main(["init", "--run-dir", str(d), "--hosts", "h1,h2,h3", flag, value])
        assert rc == 2 and len(err.getvalue().strip().splitlines()) == 1, err.getvalue()


# ----------------------------------------------------------------------------------------------- not a file
# Every reader of the run directory, keyed by the file it reads (issue 37): a FIFO, a link to /dev/zero, a dangling
# link or a folder there must give its documented fallback or BadInput, never block, never read without end.
def _readers() -> dict[str, Any]:
    from agpt import ckptdir, site, textfile
    from agpt.evals import due, records, tasks
    from agpt.failover import patterns, score, shrink
    from agpt.heartbeat import reader as hb
    from agpt.observe import status
    from agpt.sim import model as simmodel
    from agpt.train import metrics as tmetrics
    from agpt.train import provenance
    from agpt.watch.evidence import LineEvidence

    return {
        "ckpt/step-2/.complete": lambda d: ckptdir.read_marker(d / "ckpt/step-2"),
        "layout.json": lambda d: shrink.read_layout(d),
        "metrics.jsonl": lambda d: (
            tmetrics.read(d / "metrics.jsonl"),
            status.tail_records(d / "metrics.jsonl"),
        ),
        "heartbeat/h1.json": lambda d: hb.read_records(d / "heartbeat", None, None),
        "heartbeat/swap.json": lambda d: hb.read_swap(d / "heartbeat", None),
        "eval/due.json": lambda d: due._load(d),  # the eval watcher's reader of its state
        "attempts/j.1.times.json": lambda d: rundir.times_of(d / "attempts/j.1.log"),
        "attempts/j.1.log": lambda d: plan.asked_resubmit(d / "attempts/j.1.log"),
        "events.jsonl": lambda d: rundir.read_jsonl(d / "events.jsonl", notes=[]),
        "chain.lock": lambda d: chain.read_lock(d),
        "chain.jsonl": lambda d: chain.read_chain(d),
        "eval.jsonl": lambda d: records.read(d, notes=[]),
        "hosts/active": lambda d: rundir.read_hostfile(d / "hosts/active"),
        "hosts/bad": lambda d: hosts.read_bad(d / "hosts/bad"),
        "hosts/.pending": lambda d: hosts.settle(d),  # the journal `plan --apply` and `hosts` settle first
        "task.jsonl": lambda d: tasks.read_items(
            tasks.TaskSpec(name="t", path=str(d / "task.jsonl"), format="")
        ),
        "case/s/c.json": lambda d: score._load(d / "case/s/c.json"),
        "mysite.json": lambda d: patterns.load_file(d / "mysite.json", "mysite"),
        "config.yaml": lambda d: textfile.read_utf8(d / "config.yaml", "config.yaml"),
        "profile.sh": lambda d: _no_read(site.parse_profile(d / "profile.sh").errors),
        "model.yaml": lambda d: simmodel.load(d / "model.yaml"),
        "meta.json": lambda d: provenance.read(d),
        "attempts/j.ends.json": lambda d: LineEvidence.from_file(str(d / "attempts/j.ends.json")),
    }


def _no_read(errors: list[str]) -> None:
    assert errors, "a profile that is not a file read as one"


READERS = _readers()
NOT_A_FILE = ["fifo", "zero", "dangling", "folder"]


@contextlib.contextmanager
def _bounded(seconds: int = 20) -> Iterator[None]:
    """A reader that blocks (a FIFO) is interrupted, one that reads without end (/dev/zero) runs out of memory:
    the property fails instead of hanging the suite or taking the machine."""
    import resource
    import signal

    def _alarm(*_: object) -> None:
        raise TimeoutError("the reader blocked")

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    vm = next(
        int(x.split()[1]) * 1024
        for x in Path("/proc/self/status").read_text().splitlines()
        if x.startswith("VmSize")
    )
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    resource.setrlimit(resource.RLIMIT_AS, (vm + (2 << 30), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("kind", NOT_A_FILE)
@pytest.mark.parametrize("rel", sorted(READERS))
def test_every_reader_refuses_what_is_not_a_regular_file(rel: str, kind: str) -> None:  # every pair
    with run_dir() as d:
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.exists():
            p.unlink()
        if kind == "fifo":
            os.mkfifo(p)
        elif kind == "zero":
            p.symlink_to("/dev/zero")
        elif kind == "dangling":
            p.symlink_to(d / "nowhere")
        else:
            p.mkdir()
        from agpt.failover.patterns import PatternError

        with _bounded():
            try:
                READERS[rel](d)
            except AgptError as e:
                assert e.exit_code == 2 and "\n" not in str(e), str(e)
            except PatternError as e:  # a pattern set's one line, which classify turns into a note
                assert "\n" not in str(e) and rel in str(e), str(e)


# ----------------------------------------------------------------------------------------------- text for people
CONTROL = st.text(st.characters(min_codepoint=0, max_codepoint=0x20) | st.sampled_from("\x7f\x9b\u202e\u2066"),
                  min_size=1, max_size=8)  # fmt: skip
FIELD_TEXT = st.tuples(st.text(max_size=10), CONTROL, st.text(max_size=10)).map("".join)


def _no_control(out: str) -> None:
    from agpt.shown import _CONTROL

    for line in out.split("\n"):
        assert not _CONTROL.search(line), repr(line)


@FUZZ
@given(FIELD_TEXT)
def test_terminal_text_is_one_line_without_control_characters(text: str) -> None:
    from agpt.shown import terminal

    out = terminal(text)
    _no_control(out)
    assert "\n" not in out


@FUZZ_SLOW
@given(st.fixed_dictionaries({k: FIELD_TEXT for k in ("jobid", "class", "evidence", "reason", "host", "log",
                                                      "verdict", "attempt", "phase")}))  # fmt: skip
def test_every_printed_field_is_shown_without_control_characters(f: dict[str, str]) -> None:
    import io

    from rich.console import Console

    from agpt.observe import status
    from agpt.views import monitor

    with run_dir() as d:
        ev = {"event": "attempt", "jobid": f["jobid"], "attempt": 1, "rc": 1, "class": f["class"],
              "bad_hosts": [f["host"]], "evidence": [f["evidence"]], "reason": f["reason"], "started": 1e9,
              "ended": 1e9 + 5, "log": f["log"], "swapped": {"out": [f["host"]], "in": ["h4"]}, "hosts": ["h1"]}  # fmt: skip
        stop = {"event": "stop", "jobid": f["jobid"], "attempt": 1, "verdict": f["verdict"], "exit": 3,
                "reason": f["reason"], "time": 1e9 + 6}  # fmt: skip
        (d / "events.jsonl").write_text(json.dumps(ev) + "\n" + json.dumps(stop) + "\n")
        (d / "chain.jsonl").write_text(
            json.dumps({"job": f["jobid"], "verdict": f["verdict"], "reason": f["reason"]}) + "\n"
        )
        (d / "heartbeat").mkdir()
        (d / "heartbeat/h1.json").write_text(json.dumps({"format": 1, "attempt": f["attempt"], "host": "h1", "time": 1e9,
                                                         "ranks": [{"rank": 0, "step": 1, "step_s": 0.1, "phase_s": 0.1,
                                                                    "phase": f["phase"]}]}))  # fmt: skip
        buf = io.StringIO()
        Console(file=buf, width=120, force_terminal=False, color_system=None).print(
            monitor.frame(status.snapshot(d), boxes=False)
        )
        _no_control(buf.getvalue())
        _no_control(report.render(report.build(d)))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            chain.main(["status", str(d)])
        _no_control(out.getvalue())
