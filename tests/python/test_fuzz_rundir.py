"""Property-based: every reader of a run directory takes arbitrary bytes, truncations and extreme numbers and
answers with a value, a documented fallback or BadInput (exit 2), never a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agpt import chain, rundir
from agpt.errors import BadInput
from agpt.failover import hostmatch, hosts, plan, policy, report

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

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
