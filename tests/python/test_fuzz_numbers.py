"""Property-based: every number from outside goes through one validator (agpt.numeric).

- Every numeric option of every `agpt` click command is a params.Number (no bare int/float type is left), and on
  any text it gives a finite number within its stated range or a usage error naming the flag.
- The recovery-path tools (argparse, standard library only) take the same extreme values on their numeric
  flags: the documented result or one line, exit 2; never a traceback, never a hang.
- Every numeric environment variable a command reads refuses the same values naming the variable.
- No source reads a number from the environment or a flag with a bare int() or float().
"""

from __future__ import annotations

import contextlib
import io
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agpt import numeric
from agpt.cli import LazyGroup, cli, params
from agpt.errors import BadInput
from conftest import ROOT
from fuzz_util import FUZZ, FUZZ_SLOW

# Numbers as a user or a file spells them: the extremes, and any float or integer.
SPELLED = st.one_of(
    st.sampled_from(
        [
            "nan",
            "NaN",
            "inf",
            "-inf",
            "1e400",
            "-1e400",
            "1e308",
            "1e20",
            "100000000000000000000",
            "-1",
            "0",
            "-0",
            "0.5",
            "1",
            "2**63-1",
            "0x10",
            "1_000",
            " 7 ",
            "",
            "abc",
            "1e-400",
            "9" * 40,
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)


def walk(
    group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or (cmd.callback is None and not isinstance(cmd, click.Group)):
            continue
        if isinstance(cmd, click.Group):
            yield from walk(cmd, click.Context(cmd, parent=ctx), (*path, name))
        else:
            yield " ".join((*path, name)), cmd


def numeric_params() -> list[tuple[str, click.Parameter]]:
    ctx = click.Context(cli)
    assert isinstance(cli, LazyGroup)
    out = []
    for name, cmd in walk(cli, ctx):
        for p in cmd.params:
            if isinstance(p.type, (params.Number, click.types._NumberParamTypeBase)):
                out.append((name, p))
    return out


PARAMS = numeric_params()


def test_every_numeric_option_of_every_command_is_the_one_validator() -> None:
    assert len(PARAMS) > 30  # the walk reached the commands
    bare = [f"agpt {n} {p.opts[0]}" for n, p in PARAMS if not isinstance(p.type, params.Number)]
    assert not bare, f"numeric options not through agpt.numeric (use agpt.cli.params): {bare}"


@FUZZ
@given(st.sampled_from(PARAMS), SPELLED)
def test_a_numeric_option_gives_a_number_in_range_or_one_line_naming_it(
    named: tuple[str, click.Parameter], text: str
) -> None:
    name, p = named
    t = p.type
    assert isinstance(t, params.Number)
    try:
        v = t.convert(text, p, click.Context(click.Command(name)))
    except click.UsageError as e:
        msg = e.format_message()
        assert msg.startswith(p.opts[0] + ":") and "\n" not in msg, msg
        return
    assert not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    assert (t.lo is None or v >= t.lo) and (t.hi is None or v <= t.hi), (name, p.opts, text, v)
    if t.integer:
        assert isinstance(v, int)


# --- the recovery-path tools (argparse) -----------------------------------------------------------------------
def _run(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse's own exit (a usage error)
            rc = e.code if isinstance(e.code, int) else 2
    return rc, err.getvalue()


def recovery_cases(tmp: Path) -> list[tuple[str, Callable[[list[str]], int], Callable[[str], list[str]]]]:
    from agpt import chain
    from agpt.failover import classify, hosts, plan
    from agpt.watch import cli as watch

    (tmp / "hf").write_text("h1\n")
    (tmp / "log").write_text("step=3\nboom\n")
    run = str(tmp / "run")
    c = ["--rc", "1", "--hostfile", str(tmp / "hf")]
    log = str(tmp / "log")
    return [
        ("classify --max-mb", classify.main, lambda v: [*c, "--max-mb", v, log]),
        ("classify --deadline", classify.main, lambda v: [*c, "--deadline", v, log]),
        ("classify --now", classify.main, lambda v: [*c, "--now", v, log]),
        ("classify --walltime-margin", classify.main, lambda v: [*c, "--walltime-margin", v, log]),
        ("plan --now", plan.main, lambda v: ["--run-dir", run, "--before", "--now", v]),
        ("plan --deadline", plan.main, lambda v: ["--run-dir", run, "--before", "--deadline", v]),
        ("plan --max-attempts", plan.main, lambda v: ["--run-dir", run, "--before", "--max-attempts", v]),
        ("plan --min-attempt-s", plan.main, lambda v: ["--run-dir", run, "--before", "--min-attempt-s", v]),
        ("plan --backoff", plan.main, lambda v: ["--run-dir", run, "--before", "--backoff", v]),
        ("plan --attempt", plan.main, lambda v: ["--run-dir", run, "--before", "--attempt", v]),
        ("hosts init --spares-percent", hosts.main,
         lambda v: ["init", "--run-dir", run, "--hosts", "a,b", "--resolve-timeout", "0", "--spares-percent", v]),
        ("hosts init --spares", hosts.main,
         lambda v: ["init", "--run-dir", run, "--hosts", "a,b", "--resolve-timeout", "0", "--spares", v]),
        ("hosts init --resolve-timeout", hosts.main,
         lambda v: ["init", "--run-dir", run, "--hosts", "a", "--spares", "0", "--resolve-timeout", v]),
        ("watch --grace", watch.main, lambda v: ["--grace", v, "--", "true"]),
        ("watch --retries", watch.main, lambda v: ["--retries", v, "--backoff", "0", "--", "true"]),
        ("chain end --started", chain.main,
         lambda v: ["end", run, "--job", "1", "--rc", "0", "--start-step", "0", "--started", v]),
        ("chain end --start-step", chain.main,
         lambda v: ["end", run, "--job", "1", "--rc", "0", "--started", "5", "--start-step", v]),
    ]  # fmt: skip


@FUZZ_SLOW
@given(st.data())
def test_a_recovery_tools_numeric_flag_is_a_result_or_one_line(
    tmp_path_factory: Any, data: st.DataObject
) -> None:
    tmp = Path(tmp_path_factory.mktemp("rec"))
    name, main, argv = data.draw(st.sampled_from(recovery_cases(tmp)), label="flag")
    text = data.draw(SPELLED, label="value")
    if name.startswith("watch --retries"):  # every retry of `true` succeeds at once; bounded anyway
        text = text if len(text) < 8 else text[:8]
    rc, err = _run(main, argv(text))
    assert "Traceback" not in err, err
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and name.split()[-1].lstrip("-") in lines[0].lower().replace("_", "-"), err


# --- environment variables ------------------------------------------------------------------------------------
def env_cases(tmp: Path) -> dict[str, Callable[[], Any]]:
    from agpt import progress
    from agpt.failover import classify
    from agpt.heartbeat import writer
    from agpt.heartbeat.straggler import StragglerMonitor
    from agpt.train import metrics

    (tmp / "log").write_text("boom\n")

    def heartbeat() -> Any:
        hb = writer.start(tmp / "run", local_dir=str(tmp / "shm"))
        if hb is not None:
            hb.stop()

    loop = {n: (lambda n=n, k=k: _loop_setting(k, n)) for k, names in LOOP_SETTINGS.items() for n in names}
    return {
        "FAILOVER_CLASSIFY_MAX_MB": lambda: classify.classify(tmp / "log", 1, ["h1"]),
        "FAILOVER_STRAGGLER_PCT": lambda: StragglerMonitor.from_env(tmp, "j.1"),
        "FAILOVER_STRAGGLER_WINDOWS": lambda: StragglerMonitor.from_env(tmp, "j.1"),
        "AGPT_HEARTBEAT_INTERVAL_S": heartbeat,
        "AGPT_HEARTBEAT_DUMP_S": heartbeat,
        "AGPT_HEARTBEAT_TICK_S": heartbeat,
        "AGPT_PROGRESS_SECONDS": progress._every,
        "SITE_PEAK_TFLOPS": metrics.peak_tflops,
        **{n: (lambda n=n: yeet_field(n)) for n in YEET_FIELDS},
        **loop,
    }


# yeet's settings from the environment: name -> the YeetSettings field whose default reads it
YEET_FIELDS = {"AGPT_YEET_CHUNK_MB": "chunk_mb", "AGPT_YEET_TIMEOUT_S": "timeout_s",
               "AGPT_YEET_RETRIES": "retries", "AGPT_YEET_FANOUT": "fanout"}  # fmt: skip


def yeet_field(name: str) -> Any:
    import dataclasses

    from agpt.yeet.settings import YeetSettings

    f = next(f for f in dataclasses.fields(YeetSettings) if f.name == YEET_FIELDS[name])
    return f.default_factory()  # type: ignore[misc]


# lib/failover.sh's settings, checked by `python -m agpt.numeric` before the first attempt (_failover_check_settings)
LOOP_SETTINGS = {
    "seconds": ["FAILOVER_IDLE_TIMEOUT", "FAILOVER_STARTUP_TIMEOUT", "FAILOVER_GRACE", "FAILOVER_MIN_ATTEMPT_S",
                "FAILOVER_MIN_SAVE_S", "FAILOVER_CLEANUP_TIMEOUT", "FAILOVER_PREFLIGHT_TIMEOUT",
                "FAILOVER_RESOLVE_TIMEOUT"],
    "count": ["FAILOVER_MAX_ATTEMPTS", "FAILOVER_MAX_REPEAT", "FAILOVER_MAX_BLIND", "FAILOVER_SPARES",
              "FAILOVER_ACTIVE"],
    "epoch": ["AGPT_DEADLINE_EPOCH"],
}  # fmt: skip


def _loop_setting(kind: str, name: str) -> None:
    import os

    if numeric.main([f"{kind}:{name}={os.environ.get(name, '')}"]) != 0:
        raise BadInput(f"{name}: refused")


def test_failover_sh_checks_every_setting_this_test_lists() -> None:
    text = (ROOT / "lib" / "failover.sh").read_text()
    listed = {n: k for k, names in LOOP_SETTINGS.items() for n in names}
    assert {name: kind for kind, name in re.findall(r'"(seconds|count|epoch):([A-Z_]+)=', text)} == listed


@FUZZ
@given(data=st.data())
def test_a_numeric_environment_variable_is_a_value_or_one_line_naming_it(
    tmp_path_factory: Any, data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = Path(tmp_path_factory.mktemp("env"))
    cases = env_cases(tmp)
    name = data.draw(st.sampled_from(sorted(cases)), label="variable")
    text = data.draw(SPELLED, label="value")
    with monkeypatch.context() as m:
        m.setenv(name, text)
        m.setenv("AGPT_HEARTBEAT_LOCAL_DIR", str(tmp / "shm"))
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            try:
                cases[name]()
            except BadInput as e:
                assert name in str(e) and "\n" not in str(e), str(e)


# --- no bare conversions --------------------------------------------------------------------------------------
BARE = re.compile(
    r"\b(?:int|float)\(\s*(?:os\.)?(?:environ|env)(?:\.get)?[\[(]"  # int(os.environ.get(...)), float(env[...])
    r"|add_argument\([^)]*type=(?:int|float)\b"  # argparse
    r"|click\.option\([^)]*type=(?:int|float|click\.INT|click\.FLOAT)\b"  # click
)


def test_no_source_reads_a_number_with_a_bare_int_or_float() -> None:
    found = []
    for p in sorted((ROOT / "python" / "agpt").rglob("*.py")):
        text = p.read_text()
        for m in BARE.finditer(text):
            found.append(f"{p.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}")
    assert not found, "parse these with agpt.numeric:\n" + "\n".join(found)
