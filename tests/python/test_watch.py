"""`agpt watch`: the idle-output watchdog, with real child processes (no mocks).

Timing assertions are upper bounds with slack for a loaded 2-core machine; each test stays in the seconds.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agpt.errors import BadInput
from agpt.watch.attempt import DRAIN_S
from agpt.watch.output import Progress
from agpt.watch.run import watch
from agpt.watch.settings import WatchSettings
from conftest import BIN, agpt_env

PY = sys.executable
SLACK = 1.5  # scheduling noise on a loaded machine, on top of the bounds the tests assert


def watch_argv(*args: str) -> list[str]:
    return [PY, "-m", "agpt.watch", *args]


def run_watch(
    *args: str, timeout: float = 60, **kw: object
) -> tuple[subprocess.CompletedProcess[bytes], float]:
    t0 = time.monotonic()
    proc = subprocess.run(watch_argv(*args), capture_output=True, env=agpt_env(), timeout=timeout, **kw)  # type: ignore[call-overload]
    return proc, time.monotonic() - t0


def py(code: str) -> list[str]:
    """A child written in Python (no shell quoting games)."""
    return [PY, "-c", textwrap.dedent(code)]


def gone(pid: int, wait: float = 3.0) -> bool:
    """The pid no longer runs (a zombie counts as gone: where PID 1 does not reap, it never disappears)."""
    end = time.monotonic() + wait
    while True:
        try:
            os.kill(pid, 0)
            stat = Path(f"/proc/{pid}/stat").read_bytes()
            if stat[stat.rfind(b")") + 2 :].split()[0] == b"Z":
                return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


def stderr_lines(proc: subprocess.CompletedProcess[bytes]) -> list[str]:
    return proc.stderr.decode().splitlines()


# ---- the idle kill -----------------------------------------------------------------------------------------
def test_idle_child_is_killed_and_exit_is_124_within_timeout_plus_grace() -> None:
    proc, elapsed = run_watch("--timeout", "1", "--grace", "1", "--", "sh", "-c", "echo started; sleep 30")
    assert proc.returncode == 124
    assert proc.stdout == b"started\n"
    assert elapsed < 1 + 1 + 1 + SLACK
    (line,) = stderr_lines(proc)
    assert re.search(r"idle: no output on stdout/stderr for [0-9.]+ s \(--timeout 1\)", line)
    assert "no progress line seen" in line


def test_grandchild_holding_the_pipe_is_killed_too_even_when_it_ignores_sigterm() -> None:
    # The grandchild ignores SIGTERM and keeps stdout open: only the group SIGKILL after grace ends it.
    child = py("""
        import subprocess, sys, time
        g = subprocess.Popen(["sh", "-c", "trap '' TERM; exec sleep 60"])
        print(g.pid, flush=True)
        time.sleep(60)
    """)
    proc, elapsed = run_watch("--timeout", "1", "--grace", "1", "--", *child)
    assert proc.returncode == 124
    grandchild = int(proc.stdout.split()[0])
    assert gone(grandchild)
    assert elapsed < 1 + 1 + 1 + SLACK


def test_grandchild_left_behind_after_the_child_exits_does_not_keep_watch_alive() -> None:
    proc, elapsed = run_watch(
        "--timeout", "30", "--grace", "1", "--", "sh", "-c", "sleep 60 & echo $!; exit 5"
    )
    assert proc.returncode == 5  # the child's own status, not the cleanup's
    assert gone(int(proc.stdout.split()[0]))
    assert elapsed < DRAIN_S + 1 + SLACK


def test_child_that_ignores_sigterm_is_sigkilled_after_grace() -> None:
    child = py("""
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(os.getpid(), flush=True)
        time.sleep(60)
    """)
    proc, elapsed = run_watch("--timeout", "1", "--grace", "1", "--", *child)
    assert proc.returncode == 124
    assert gone(int(proc.stdout.split()[0]))
    assert 1 + 1 - 0.1 <= elapsed < 1 + 1 + 1 + SLACK  # grace was honoured, and no more


# ---- what counts as output -----------------------------------------------------------------------------------
def test_steady_output_every_200ms_is_never_killed() -> None:
    child = py("""
        import time
        for i in range(15):
            print("tick", i, flush=True)
            time.sleep(0.2)
    """)
    proc, _ = run_watch("--timeout", "1", "--grace", "1", "--", *child)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(b"tick") == 15
    assert proc.stderr == b""


def test_carriage_return_only_output_counts_as_activity() -> None:
    child = py("""
        import sys, time
        for i in range(12):
            sys.stdout.write(f"{i}%\\r"); sys.stdout.flush()
            time.sleep(0.2)
    """)
    proc, _ = run_watch("--timeout", "1", "--", *child)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"".join(f"{i}%\r".encode() for i in range(12))
    assert b"\n" not in proc.stdout


def test_stderr_only_output_counts_and_stays_on_stderr() -> None:
    child = py("""
        import sys, time
        for i in range(12):
            sys.stderr.write(f"warn {i}\\n"); sys.stderr.flush()
            time.sleep(0.2)
    """)
    proc, _ = run_watch("--timeout", "1", "--", *child)
    assert proc.returncode == 0
    assert proc.stdout == b""
    assert proc.stderr == b"".join(f"warn {i}\n".encode() for i in range(12))


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_5mb_of_random_bytes_pass_through_unchanged(tmp_path: Path, stream: str) -> None:
    data = os.urandom(5 * 1024 * 1024)
    src = tmp_path / "random.bin"
    src.write_bytes(data)
    log = tmp_path / "copy.log"
    redirect = "" if stream == "stdout" else " >&2"
    proc, _ = run_watch(
        "--timeout", "10", "--log", str(log), "--", "sh", "-c", f'cat "$0"{redirect}', str(src)
    )
    assert proc.returncode == 0
    got = proc.stdout if stream == "stdout" else proc.stderr
    other = proc.stderr if stream == "stdout" else proc.stdout
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest()
    assert other == b""
    assert hashlib.sha256(log.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()


def test_log_gets_both_streams_interleaved_and_is_appended(tmp_path: Path) -> None:
    child = py("""
        import sys, time
        for stream, text in ((sys.stdout, "out1"), (sys.stderr, "err1"), (sys.stdout, "out2")):
            stream.write(text + "\\n"); stream.flush(); time.sleep(0.1)
    """)
    log = tmp_path / "attempt.log"
    for _ in range(2):
        proc, _ = run_watch("--log", str(log), "--", *child)
        assert proc.returncode == 0
        assert proc.stdout == b"out1\nout2\n"
        assert proc.stderr == b"err1\n"
    assert log.read_text() == "out1\nerr1\nout2\n" * 2


# ---- exit status ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("script", "rc"),
    [("exit 0", 0), ("exit 7", 7), ("kill -TERM $$", 143), ("kill -KILL $$", 137), ("kill -SEGV $$", 139)],
)
def test_exit_code_and_signal_death_pass_through(script: str, rc: int) -> None:
    proc, _ = run_watch("--", "sh", "-c", script)
    assert proc.returncode == rc
    assert proc.stderr == b""


def test_sigterm_to_watch_reaches_the_child_and_exits_143(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    child = py(f"""
        import signal, sys, time
        def note(num, frame):
            with open({str(marks)!r}, "a") as f:
                f.write(signal.Signals(num).name + "\\n")
            if num == signal.SIGTERM:
                sys.exit(0)
        signal.signal(signal.SIGTERM, note)
        signal.signal(signal.SIGUSR1, note)
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
    """)
    t0 = time.monotonic()
    w = subprocess.Popen(
        watch_argv("--timeout", "30", "--grace", "5", "--", *child),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=agpt_env(),
    )
    try:
        assert w.stdout is not None
        assert w.stdout.readline() == b"ready\n"
        w.send_signal(signal.SIGUSR1)  # a pre-emption notice: forwarded, the run goes on
        deadline = time.monotonic() + 10
        while not (marks.exists() and "SIGUSR1" in marks.read_text()):
            assert time.monotonic() < deadline, "SIGUSR1 never reached the child"
            time.sleep(0.05)
        assert w.poll() is None
        w.send_signal(signal.SIGTERM)
        rc = w.wait(timeout=20)
    finally:
        if w.poll() is None:
            w.kill()
    assert rc == 143
    assert marks.read_text() == "SIGUSR1\nSIGTERM\n"
    assert time.monotonic() - t0 < 10  # it left once the child had gone, without waiting out the grace
    assert w.stderr is not None
    assert b"SIGTERM received" in w.stderr.read()


def test_sigint_to_watch_kills_a_stubborn_child_after_grace_and_exits_130() -> None:
    child = py("""
        import os, signal, time
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(os.getpid(), flush=True)
        time.sleep(60)
    """)
    # SIGINT at its default in the watch, as from a terminal: a suite started in the background (`cmd &`) hands
    # its children SIGINT ignored, and Python then installs no handler for it.
    w = subprocess.Popen(
        watch_argv("--timeout", "30", "--grace", "0.5", "--", *child), stdout=subprocess.PIPE, env=agpt_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert w.stdout is not None
    pid = int(w.stdout.readline())
    w.send_signal(signal.SIGINT)
    assert w.wait(timeout=20) == 130
    assert gone(pid)


# ---- retries -------------------------------------------------------------------------------------------------
def test_retries_run_exactly_n_plus_1_times_with_the_reason_logged(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    child = ["sh", "-c", 'echo "$AGPT_WATCH_ATTEMPT" >> "$0"; exit 3', str(runs)]
    proc, _ = run_watch("--retries", "2", "--backoff", "0.1", "--", *child)
    assert proc.returncode == 3
    assert runs.read_text() == "1\n2\n3\n"
    lines = stderr_lines(proc)
    assert lines == [
        "agpt watch: attempt 1/3 failed (exit 3); attempt 2/3 in 0.1 s",
        "agpt watch: attempt 2/3 failed (exit 3); attempt 3/3 in 0.1 s",
        "agpt watch: attempt 3/3 failed (exit 3); no retries left",
    ]


def test_retries_stop_at_the_first_success(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    child = ["sh", "-c", 'echo x >> "$0"; [ "$AGPT_WATCH_ATTEMPT" -ge 2 ]', str(runs)]
    proc, _ = run_watch("--retries", "5", "--backoff", "0.1,0.2", "--", *child)
    assert proc.returncode == 0
    assert runs.read_text() == "x\nx\n"
    assert len(stderr_lines(proc)) == 1


def test_an_idle_attempt_is_retried_too(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    child = ["sh", "-c", 'echo x >> "$0"; sleep 30', str(runs)]
    proc, elapsed = run_watch(
        "--timeout", "0.5", "--grace", "0.5", "--retries", "1", "--backoff", "0", "--", *child
    )
    assert proc.returncode == 124
    assert runs.read_text() == "x\nx\n"
    assert "attempt 1/2 failed (idle: no output" in proc.stderr.decode()
    assert elapsed < 2 * 0.5 + 2 * SLACK


def test_sigterm_during_the_backoff_ends_the_run_without_a_retry(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    child = ["sh", "-c", 'echo x >> "$0"; exit 1', str(runs)]
    w = subprocess.Popen(
        watch_argv("--retries", "3", "--backoff", "30", "--", *child), stderr=subprocess.PIPE, env=agpt_env()
    )
    assert w.stderr is not None
    assert b"attempt 2/4 in 30 s" in w.stderr.readline()
    t0 = time.monotonic()
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=20) == 143
    assert time.monotonic() - t0 < 5
    assert runs.read_text() == "x\n"
    assert b"not retrying" in w.stderr.read()


def test_backoff_schedule_repeats_its_last_value() -> None:
    s = WatchSettings(retries=7)
    assert [d for _, d in s.attempts()] == [0, 5, 10, 20, 40, 60, 60, 60]
    s = WatchSettings(retries=3, backoff=(1.0,))
    assert [n for n, _ in s.attempts()] == [1, 2, 3, 4]


# ---- startup timeout and progress ----------------------------------------------------------------------------
SLOW_START = """
    import time
    time.sleep(2)
    print("step=1 loss=9.9", flush=True)
    time.sleep(30)
"""


def test_startup_timeout_applies_until_the_first_progress_line() -> None:
    proc, elapsed = run_watch(
        "--timeout", "1", "--startup-timeout", "5", "--grace", "0.5", "--", *py(SLOW_START)
    )
    assert proc.returncode == 124
    assert proc.stdout == b"step=1 loss=9.9\n"  # the silent start was allowed
    assert 2 + 1 - 0.1 <= elapsed < 2 + 1 + 0.5 + SLACK  # then the steady limit applied
    (line,) = stderr_lines(proc)
    assert "(--timeout 1)" in line
    assert "'step=1 loss=9.9'" in line


def test_without_startup_timeout_the_silent_start_is_killed() -> None:
    proc, elapsed = run_watch("--timeout", "1", "--grace", "0.5", "--", *py(SLOW_START))
    assert proc.returncode == 124
    assert proc.stdout == b""
    assert elapsed < 1 + 0.5 + SLACK


def test_startup_timeout_fires_before_the_first_progress_line() -> None:
    child = ["sh", "-c", "echo loading model; sleep 30"]
    proc, _ = run_watch("--timeout", "30", "--startup-timeout", "1", "--grace", "0.5", "--", *child)
    assert proc.returncode == 124
    assert "(--startup-timeout 1); no progress line seen" in proc.stderr.decode()


@pytest.mark.parametrize("eager", [True, False])
def test_progress_line_is_matched_across_chunk_boundaries_and_carriage_returns(eager: bool) -> None:
    prog = Progress(re.compile(rb"\bstep[=:] ?[0-9]+", re.MULTILINE), eager)

    def feed(key: int, data: bytes, now: float) -> None:
        buf = bytearray(data)
        prog.feed(key, buf, len(buf), now)
        prog.flush(now)

    feed(1, b"loading...\nbuilding model, ste", 1.0)
    assert not prog.seen
    feed(2, b"warning: step size is small\n", 2.0)  # another stream: its own line, no match
    assert not prog.seen
    feed(1, b"p=12 loss=3.1\n", 3.0)
    assert prog.seen
    assert prog.line == "building model, step=12 loss=3.1"
    assert prog.first_at == 3.0
    feed(1, b"  3%|#  | tqdm step: 13\r", 3.5)
    assert prog.line == "3%|#  | tqdm step: 13"
    assert prog.at == 3.5
    feed(1, b"x" * 100_000 + b"\n", 4.0)  # a long non-progress line does not erase what was seen
    assert prog.line == "3%|#  | tqdm step: 13"


def test_progress_regex_comes_from_the_environment(tmp_path: Path) -> None:
    child = py("""
        import time
        time.sleep(2)
        print("iter 5", flush=True)
        time.sleep(30)
    """)
    env = agpt_env({"FAILOVER_PROGRESS_RE": r"^iter [0-9]+"})
    t0 = time.monotonic()
    proc = subprocess.run(
        watch_argv("--timeout", "1", "--startup-timeout", "5", "--grace", "0.5", "--", *child),
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 124
    assert time.monotonic() - t0 < 2 + 1 + 0.5 + SLACK
    assert "last progress 1 s ago: 'iter 5'" in proc.stderr.decode()


def test_progress_file_that_does_not_advance_is_idle_despite_output(tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    progress.write_text("step=1\n")
    child = py("""
        import time
        while True:
            print("warning: still alive", flush=True)
            time.sleep(0.2)
    """)
    proc, elapsed = run_watch(
        "--timeout", "1", "--grace", "0.5", "--progress-file", str(progress), "--", *child
    )
    assert proc.returncode == 124
    assert elapsed < 1 + 0.5 + SLACK
    assert f"progress file {progress} not updated for" in proc.stderr.decode()


def test_progress_file_that_advances_keeps_the_run_alive(tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    child = py(f"""
        import os, time
        for i in range(10):
            tmp = {str(progress)!r} + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"step={{i}} time={{time.time()}}\\n")
            os.replace(tmp, {str(progress)!r})
            print("step", i, flush=True)
            time.sleep(0.3)
    """)
    proc, _ = run_watch("--timeout", "1", "--progress-file", str(progress), "--", *child)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b""


# ---- bad input -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "names"),
    [
        ([], "'--'"),
        (["--"], "'--'"),
        (["--timeout", "5"], "'--'"),
        (["true"], "'--'"),
        (["--timeout", "-1", "--", "true"], "--timeout"),
        (["--timeout", "soon", "--", "true"], "--timeout"),
        (["--startup-timeout", "nan", "--", "true"], "--startup-timeout"),
        (["--grace=-2", "--", "true"], "--grace"),
        (["--retries", "-1", "--", "true"], "--retries"),
        (["--retries", "two", "--", "true"], "--retries"),
        (["--backoff", "5,,10", "--", "true"], "--backoff"),
        (["--backoff", "5,-1", "--", "true"], "--backoff"),
        (["--progress-re", "step(", "--", "true"], "--progress-re"),
        (["--log", "/nonexistent/dir/x.log", "--", "true"], "--log"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_flag(args: list[str], names: str) -> None:
    proc, _ = run_watch(*args)
    assert proc.returncode == 2
    (line,) = stderr_lines(proc)
    assert line.startswith("agpt watch: error:")
    assert names in line


def test_bad_progress_regex_in_the_environment_is_named() -> None:
    env = agpt_env({"FAILOVER_PROGRESS_RE": "step["})
    proc = subprocess.run(watch_argv("--", "true"), capture_output=True, env=env, timeout=30)
    assert proc.returncode == 2
    assert "FAILOVER_PROGRESS_RE" in proc.stderr.decode()


def test_missing_command_exits_127_with_its_name() -> None:
    proc, _ = run_watch("--retries", "3", "--", "no-such-command-xyz", "arg")
    assert proc.returncode == 127
    assert stderr_lines(proc) == ["agpt watch: no-such-command-xyz: command not found"]


def test_help_teaches_with_examples() -> None:
    proc, _ = run_watch("--help")
    assert proc.returncode == 0
    out = proc.stdout.decode()
    for word in ("--timeout", "--startup-timeout", "--progress-file", "--retries", "examples:", "124"):
        assert word in out


# ---- entry points --------------------------------------------------------------------------------------------
def test_agpt_watch_dispatches_through_bin() -> None:
    proc = subprocess.run(
        [str(BIN / "agpt"), "watch", "--timeout", "5", "--", "sh", "-c", "echo via-bin; exit 4"],
        capture_output=True,
        env=agpt_env(),
        timeout=30,
    )
    assert proc.returncode == 4
    assert proc.stdout == b"via-bin\n"


def test_python_api_runs_with_retries_and_restores_signal_handlers(tmp_path: Path) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)}
    runs = tmp_path / "runs"
    log = tmp_path / "api.log"
    rc = watch(
        ["sh", "-c", 'echo "try $AGPT_WATCH_ATTEMPT"; echo x >> "$0"; exit 9', str(runs)],
        retries=1,
        backoff=[0.1],
        timeout=5,
        log=log,
    )
    assert rc == 9
    assert runs.read_text() == "x\nx\n"
    text = log.read_text()
    assert "try 1\n" in text and "try 2\n" in text and "attempt 1/2 failed (exit 9)" in text
    assert {s: signal.getsignal(s) for s in before} == before
    assert watch(["true"], timeout=5) == 0
    with pytest.raises(BadInput, match="--grace"):
        watch(["true"], grace=-1)


def test_bench_runs_small(root: Path) -> None:
    proc = subprocess.run(
        [PY, str(root / "tests/bench/bench_watch.py"), "--size", "8M", "--sleep", "0.5", "--repeat", "1"],
        capture_output=True,
        text=True,
        env=agpt_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "throughput ratio" in proc.stdout
    assert "cpu seconds" in proc.stdout


@pytest.mark.parametrize("with_log", [False, True], ids=["zero-copy", "copy+log"])
def test_pass_through_to_a_file_is_byte_identical_with_and_without_log(
    tmp_path: Path, with_log: bool
) -> None:
    """Without --log the bytes go through splice(2) (no copy through our memory); with it, through a buffer.
    Both give the same bytes, to a regular file as to a pipe."""
    data = os.urandom(3 * 1024 * 1024 + 7)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    out = tmp_path / "out.bin"
    log = tmp_path / "w.log"
    extra = ["--log", str(log)] if with_log else []
    with out.open("wb") as fh:
        proc = subprocess.run(
            watch_argv(*extra, "--", "cat", str(src)), stdout=fh, env=agpt_env(), timeout=60
        )
    assert proc.returncode == 0
    assert hashlib.sha256(out.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
    if with_log:
        assert log.read_bytes() == data
