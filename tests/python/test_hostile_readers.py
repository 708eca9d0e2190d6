"""Every reader of the run directory under a FIFO, a link to /dev/zero and records of the wrong shape (issue 37):
it answers promptly with its documented note, fallback or one-line error (exit 2), never blocks, never reads
without end, never a traceback.  Each test is one instance found from outside.  A regression must fail, not
hang the suite: every command runs with a timeout, and in a process whose memory is bounded."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BIN, ROOT, agpt_env
from observe_util import loop_run

TIMEOUT = int(
    os.environ.get("T_TIMEOUT", 60)
)  # a command that blocks on a FIFO fails here instead of hanging the suite
MEMORY = 3 << 30  # a reader reading /dev/zero without end fails here instead of taking the machine


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=agpt_env(env), timeout=TIMEOUT,
                              preexec_fn=_bounded)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(argv)}: still running after {TIMEOUT}s (blocked on a FIFO?)")


def agpt(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run([str(BIN / "agpt"), *args], env)


def plant(path: Path, kind: str) -> None:
    """A FIFO (`fifo`) or a link to /dev/zero (`zero`) where a file of the run directory belongs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


def no_traceback(r: subprocess.CompletedProcess[str], *rcs: int) -> None:
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode in rcs, (r.returncode, r.stdout, r.stderr)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory the real failover loop wrote (a node failure, then success), with the files a trainer, the
    heartbeats, `agpt check --run-dir` and the eval watcher add."""
    tmp = tmp_path_factory.mktemp("base")
    r = loop_run(tmp)
    recs = [{"step": s, "loss": 5.0 - s / 10, "time": 1e9 + s, "tokens": 100 * s, "target_steps": 12,
             "tokens_per_s_per_device": 10.0, "devices": 4, "step_s": 0.05} for s in range(1, 13)]  # fmt: skip
    (r / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    hb = r / "heartbeat"
    hb.mkdir(exist_ok=True)
    (hb / "h1.json").write_text(json.dumps({"format": 1, "attempt": "j1.2", "host": "h1", "time": 1e9,
                                            "ranks": [{"rank": 0, "step": 12, "step_s": 0.05, "phase_s": 0.1}]}))  # fmt: skip
    (hb / "swap.json").write_text(json.dumps({"host": "h3", "attempt": "j1.2"}))
    (r / "eval").mkdir()
    (r / "eval/due.json").write_text(json.dumps({"last": -1, "count": 0}))
    return r


@pytest.fixture
def rd(base: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(base, dst, symlinks=True)
    return dst


KINDS = ["fifo", "zero"]
COMPLETE = "ckpt/step-12/.complete"


@pytest.mark.parametrize("kind", KINDS)
def test_chain_step_skips_a_marker_that_is_not_a_regular_file(rd: Path, kind: str) -> None:
    plant(rd / COMPLETE, kind)
    r = run([sys.executable, "-m", "agpt.chain", "step", str(rd)])
    no_traceback(r, 0)
    assert r.stdout.strip() == "10"


@pytest.mark.parametrize("kind", KINDS)
def test_the_eval_watcher_takes_a_fifo_at_its_state_and_markers(rd: Path, kind: str) -> None:
    plant(rd / "eval/due.json", kind)
    plant(rd / COMPLETE, kind)
    r = run([sys.executable, "-m", "agpt.chain", "eval-mark", str(rd), "--every", "1"])
    no_traceback(r, 0, 2)


@pytest.mark.parametrize("kind", KINDS)
def test_monitor_shows_a_frame_whatever_sits_at_its_inputs(rd: Path, kind: str) -> None:
    for rel in ("metrics.jsonl", "heartbeat/h1.json", "heartbeat/swap.json", "attempts/j1.2.log",
                "attempts/j1.2.times.json", COMPLETE):  # fmt: skip
        plant(rd / rel, kind)
    no_traceback(agpt("monitor", str(rd), "--once"), 0)


@pytest.mark.parametrize("kind", KINDS)
def test_failover_report_takes_a_fifo_at_an_attempts_files(rd: Path, kind: str) -> None:
    for rel in ("attempts/j1.2.log", "attempts/j1.1.times.json", "attempts/j1.2.class.json", COMPLETE):
        plant(rd / rel, kind)
    no_traceback(agpt("failover", "report", str(rd)), 0)


def test_plot_and_the_html_report_take_a_fifo_at_the_log_and_metrics(rd: Path, tmp_path: Path) -> None:
    plant(rd / "attempts/j1.2.log", "fifo")  # both kinds at once: each command is seconds of matplotlib
    plant(rd / "metrics.jsonl", "zero")
    no_traceback(agpt("plot", str(rd), "-o", str(tmp_path / "p.png")), 0)
    no_traceback(agpt("report", str(rd), "--html", str(tmp_path / "r.html")), 0)


@pytest.mark.parametrize("kind", KINDS)
def test_the_plan_decides_with_a_fifo_at_every_file_it_reads(rd: Path, kind: str) -> None:
    (rd / "attempts/j9.1.log").write_text("step=12\n")
    for rel in (
        "heartbeat/h1.json",
        "heartbeat/swap.json",
        "layout.json",
        COMPLETE,
        "attempts/j9.1.times.json",
    ):
        plant(rd / rel, kind)
    r = run([sys.executable, "-m", "agpt.failover", "plan", "--run-dir", str(rd), "--jobid", "j9", "--attempt", "1",
             "--rc", "1", "--log", str(rd / "attempts/j9.1.log"), "--started", "1", "--ended", "2",
             "--shrink", "1", "--min-nodes", "0.5", "--apply", "--shell", "--",
             "--heartbeat-dir", str(rd / "heartbeat")])  # fmt: skip
    no_traceback(r, 0)
    assert r.stdout.split()[0] in ("relaunch", "stop"), r.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_classify_refuses_a_log_that_is_not_a_regular_file(rd: Path, kind: str) -> None:
    plant(rd / "attempts/j1.2.log", kind)
    r = agpt(
        "failover",
        "classify",
        "--rc",
        "1",
        "--hostfile",
        str(rd / "hosts/active"),
        str(rd / "attempts/j1.2.log"),
    )
    no_traceback(r, 2)
    assert "j1.2.log" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_failover_score_refuses_a_case_that_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    case = tmp_path / "corpus/site/c1"
    case.parent.mkdir(parents=True)
    case.with_suffix(".log").write_text("srun: error: Node failure on n3\n")
    plant(case.with_suffix(".json"), kind)
    r = agpt("failover", "score", str(tmp_path / "corpus"))
    no_traceback(r, 2)
    assert "c1.json" in r.stderr and "not a regular file" in r.stderr, r.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_a_site_pattern_file_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    plant(tmp_path / "pat/mysite.json", kind)
    r = agpt(
        "failover",
        "patterns",
        "--quiet",
        "--sets",
        "mysite",
        env={"FAILOVER_PATTERN_PATH": str(tmp_path / "pat")},
    )
    no_traceback(r, 2)
    assert "mysite" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_check_run_dir_refuses_nothing_it_cannot_read(rd: Path) -> None:
    plant(rd / COMPLETE, "fifo")  # both kinds at once: agpt check is seconds of start-up
    plant(rd / "layout.json", "zero")
    r = agpt("check", str(ROOT / "jobs/configs/smoke.yaml"), "--no-data", "--run-dir", str(rd))
    no_traceback(r, 0, 2)


def test_check_run_dir_warns_on_a_garbage_marker_and_exits_0_so_the_chain_goes_on(tmp_path: Path) -> None:
    """Issue 37, item 6 (decided): a `.complete` that does not parse is the trainer's resume step (data checked by
    size, an older complete step if that fails), and the job script ends the chain when check fails, so check
    does not fail: it warns, a WARN row and one line on standard error naming the file, exit 0."""
    step = tmp_path / "run" / "ckpt" / "step-30"
    step.mkdir(parents=True)
    (step / ".complete").write_bytes(b"\x00garbage{")
    r = agpt("check", str(ROOT / "jobs/configs/smoke.yaml"), "--no-data", "--run-dir", str(tmp_path / "run"))
    no_traceback(r, 0)
    assert f"  WARN run dir     {step}/.complete: unreadable; the trainer tries step 30" in r.stdout, r.stdout
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("agpt check: warning: ")]
    assert len(warnings) == 1 and f"{step}/.complete: unreadable" in warnings[0], r.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_a_task_file_that_is_not_a_regular_file_is_one_line(tmp_path: Path, kind: str) -> None:
    plant(tmp_path / "t.jsonl", kind)
    code = ("from agpt.evals import tasks; from agpt.errors import BadInput\n"
            f"try: tasks.read_items(tasks.TaskSpec(name='t', path='{tmp_path / 't.jsonl'}', format=''))\n"
            "except BadInput as e: print(e)\n")  # fmt: skip
    r = run([sys.executable, "-c", code])
    no_traceback(r, 0)
    assert "t.jsonl" in r.stdout and "not a regular file" in r.stdout, r.stdout


# ----------------------------------------------------------------------------------------------- record schemas
HOSTILE_METRICS = [
    '{"step": true, "loss": 1.0}',
    '{"step": ' + "9" * 400 + ', "loss": 1.0}',
    '{"step": 13, "loss": 1e308, "tokens": ' + "9" * 30 + "}",
    '{"step": 14, "loss": "--1", "devices": true, "step_s": [1], "target_steps": 1e308}',
    '{"step": 15, "loss": NaN}',
    '{"step": 17, "update": "\\ud800"}',
    '{"step": 16, "x": ' + "[" * 5000 + "]" * 5000 + "}",
    "[" * 100000,
]


def test_metrics_records_are_read_by_their_schema() -> None:
    from agpt import rundir

    got = [rundir.metrics_record(line) for line in HOSTILE_METRICS]
    assert got[0] is None and got[1] is None and got[5] is None and got[6] is None and got[7] is None
    assert got[2] == {"step": 13}  # 1e308 is no loss, a 30-digit count no count: dropped, the step kept
    assert got[3] == {"step": 14}
    assert got[4] == {"step": 15, "loss": None}  # a diverged loss as the trainer writes it


def test_the_views_take_metrics_records_of_any_shape(rd: Path, tmp_path: Path) -> None:
    with (rd / "metrics.jsonl").open("a") as f:
        f.write("\n".join(HOSTILE_METRICS) + "\n")
    no_traceback(agpt("monitor", str(rd), "--once"), 0)
    no_traceback(agpt("report", str(rd), "--html", str(tmp_path / "r.html")), 0)
    no_traceback(agpt("plot", str(rd), "-o", str(tmp_path / "p.png")), 0)


HOSTILE_EVENTS = [
    '{"event": "attempt", "jobid": "j1", "attempt": true, "rc": "--1", "class": ["node"], "bad_hosts": "h3", '
    '"evidence": 5, "swapped": {"out": 1, "in": [[]]}, "hosts": {"h1": 1}, "log": 7}',
    '{"event": "attempt", "jobid": "j1", "attempt": ' + "9" * 400 + ', "rc": 1}',
    '{"event": "attempt", "jobid": "j1", "attempt": 4, "rc": 1e308, "started": 1e308, "ended": -1e308, '
    '"first_step": 1e308, "last_step": "\u00b2", "ckpt_step": ' + "9" * 30 + "}",
    '{"event": "stop", "jobid": "j1\\ud800", "verdict": {"x": 1}, "exit": 1e308, "time": "x", "reason": [1]}',
    '{"event": "shrink", "jobid": "j1", "from": "x", "to": true, "nodes": -1e308}',
    '{"event": "attempt", "x": ' + "[" * 5000 + "]" * 5000 + "}",
    "[1, 2]",
    "null",
]


def test_the_views_and_the_plan_take_events_records_of_any_shape(rd: Path, tmp_path: Path) -> None:
    """Issue 37: events.jsonl records of the wrong type, 400-digit integers, 1e308, lone surrogates, deep nesting."""
    with (rd / "events.jsonl").open("a") as f:
        f.write("\n".join(HOSTILE_EVENTS) + "\n")
    for argv in (["monitor", str(rd), "--once"], ["failover", "report", str(rd)], ["chain", "status", str(rd)],
                 ["report", str(rd), "--html", str(tmp_path / "r.html")],
                 ["plot", str(rd), "-o", str(tmp_path / "p.png")]):  # fmt: skip
        no_traceback(agpt(*argv), 0)
    plan = [sys.executable, "-m", "agpt.failover", "plan", "--run-dir", str(rd), "--jobid", "j1"]
    r = run([*plan, "--next-attempt"])  # the loop's count of this job's attempts, read from the same records
    no_traceback(r, 0)
    n = r.stdout.strip()
    assert n.isdigit() and int(n) >= 3, r.stdout
    (rd / f"attempts/j1.{n}.log").write_text("step=12\n")
    r = run([*plan, "--attempt", n, "--rc", "1", "--log", str(rd / f"attempts/j1.{n}.log"), "--started", "1",
             "--ended", "2", "--apply", "--shell"])  # fmt: skip
    no_traceback(r, 0)
    assert r.stdout.split()[0] in ("relaunch", "stop"), r.stdout


BAD_CASES = [
    ({"rc": True}, "rc"),
    ({"rc": 1e308}, "rc"),
    ({"rc": "--1"}, "rc"),
    ({"hosts": [["n3"]]}, "hosts"),
    ({"deadline": True, "now": "x"}, "deadline"),
    ({"ipmap": 5}, "ipmap"),
    ({"hostfile_text": 5}, "hostfile_text"),
    ({"expect": {"class": "node", "bad_hosts": [1]}}, "expect.bad_hosts"),
]


@pytest.mark.parametrize(("bad", "field"), BAD_CASES, ids=[f for _, f in BAD_CASES])
def test_a_score_case_of_the_wrong_shape_is_one_line_naming_the_field(
    tmp_path: Path, bad: dict[str, object], field: str
) -> None:
    case = tmp_path / "corpus/site/c1.json"
    case.parent.mkdir(parents=True)
    case.with_suffix(".log").write_text("srun: error: Node failure on n3\n")
    case.write_text(json.dumps({"rc": 1, "hosts": ["n3"], "expect": {"class": "node"}, **bad}))
    code = (
        "import sys; from pathlib import Path; from agpt.failover import score; from agpt.errors import BadInput\n"
        f"try: score.score_case(Path('{case}'))\n"
        "except BadInput as e: print(e); sys.exit(2)\n"
    )
    r = run([sys.executable, "-c", code])
    no_traceback(r, 2)
    assert f"c1.json: {field}: " in r.stdout, r.stdout


@pytest.mark.parametrize("answer", ["--1", "²", "9" * 400, True, 1e308])
def test_a_task_answer_that_is_not_a_choice_index_is_one_line(tmp_path: Path, answer: object) -> None:
    from agpt.errors import BadInput
    from agpt.evals import tasks

    (tmp_path / "t.jsonl").write_text(
        json.dumps({"context": "c", "choices": ["a", "b"], "answer": answer}) + "\n"
    )
    with pytest.raises(BadInput, match=r"t.jsonl:1: answer: must be a choice index"):
        tasks.read_items(tasks.TaskSpec(name="t", path=str(tmp_path / "t.jsonl"), format=""))


BAD_PATTERNS = [
    ({"weak": "yes"}, "weak must be true or false"),
    ({"ends": 1}, "ends must be true or false"),
    ({"min_reporters": True}, "min_reporters must be a whole number"),
    ({"min_reporters": 1e308}, "min_reporters must be a whole number"),
    ({"min_reporters": 10**400}, "not JSON"),
    ({"positive": [{"line": "aaaa", "rank": "--1"}]}, "positive example rank must be a whole number"),
    ({"positive": [{"line": "aaaa", "host": ["h1"]}]}, "positive example host must be a string"),
    ({"negative": "b"}, "negative must be a list of strings"),
    ({"regex": "a\ud800"}, "not JSON"),
    ({"x": json.loads("[" * 100 + "]" * 100)}, "not JSON"),
]


@pytest.mark.parametrize(("bad", "why"), BAD_PATTERNS, ids=[next(iter(b)) for b, _ in BAD_PATTERNS])
def test_a_site_pattern_of_the_wrong_shape_is_one_line_naming_the_file(
    tmp_path: Path, bad: dict[str, object], why: str
) -> None:
    """Issue 37: a pattern file's booleans, min_reporters and example ranks of the wrong type, a 400-digit integer,
    a lone surrogate or nesting past 64 are one line naming the file (classify falls back with a note)."""
    from agpt.failover import patterns

    pattern = {
        "id": "mysite.x",
        "class": "node",
        "regex": "aaaa",
        "positive": ["aaaa"],
        "negative": ["b"],
        **bad,
    }
    path = tmp_path / "mysite.json"
    path.write_text(json.dumps({"set": "mysite", "patterns": [pattern]}))
    with pytest.raises(patterns.PatternError) as err:
        patterns.load_file(path, "mysite")
    assert str(err.value).startswith(f"{path}: ") and why in str(err.value) and "\n" not in str(err.value), (
        err.value
    )


BAD_TASK_LINES = [
    ('{"context": "a\\ud800", "choices": ["a", "b"], "answer": 0}', "line: not one JSON object"),
    ('{"context": "c", "choices": ' + "[" * 100 + "]" * 100 + ', "answer": 0}', "line: not one JSON object"),
    ('{"context": 5, "choices": ["a", "b"], "answer": 0}', "context: must be a string"),
    (
        '{"context": "c", "choices": [1e308, "b"], "answer": 0}',
        "choices: must be a list of at least 2 strings",
    ),
]


@pytest.mark.parametrize(("line", "why"), BAD_TASK_LINES, ids=["surrogate", "nested", "type", "1e308"])
def test_a_task_line_of_the_wrong_shape_is_one_line_naming_the_field(
    tmp_path: Path, line: str, why: str
) -> None:
    from agpt.errors import BadInput
    from agpt.evals import tasks

    (tmp_path / "t.jsonl").write_text(line + "\n")
    with pytest.raises(BadInput, match=rf"t.jsonl:1: {why}"):
        tasks.read_items(tasks.TaskSpec(name="t", path=str(tmp_path / "t.jsonl"), format=""))


# ----------------------------------------------------------------------------------------------- bounded matching
def _site_set(folder: Path, regex: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pattern = {"id": "mysite.slow", "class": "node", "regex": regex, "description": "x", "positive": ["aaaa"],
               "negative": ["b"]}  # fmt: skip
    (folder / "mysite.json").write_text(json.dumps({"set": "mysite", "patterns": [pattern]}))
    return folder


@pytest.mark.parametrize("regex", ["^(a+)+$", "^(a*)*b", r"^(\w+\s?)*$", "^(aa|a+a+)+$"])
def test_a_catastrophic_site_pattern_does_not_stop_classify(tmp_path: Path, regex: str) -> None:
    folder = _site_set(tmp_path / "pat", regex)
    log = tmp_path / "log"
    log.write_text("a" * 60 + "!\n")
    (tmp_path / "hosts").write_text("n1\n")
    env = {"FAILOVER_PATTERN_PATH": str(folder)}
    r = agpt("failover", "classify", "--rc", "1", "--hostfile", str(tmp_path / "hosts"), "--patterns", "mysite",
             str(log), env=env)  # fmt: skip
    no_traceback(r, 0)
    assert json.loads(r.stdout)["class"] == "crash"
    r = agpt("failover", "patterns", "--quiet", "--sets", "mysite", env=env)
    no_traceback(r, 2)
    assert "mysite.json: mysite.slow: regex" in r.stderr and "a repeat inside a repeat" in r.stderr, r.stderr


@pytest.mark.parametrize("regex", [r"^(?:[A-Za-z_]\w*\.)*Error", r"(?:\d+\.)+\d+", r"(?:ab|cd)+"])
def test_a_repeat_whose_repetitions_are_separated_is_allowed(regex: str) -> None:
    from agpt.failover import patterns

    assert not patterns.nested_quantifier(regex)


# ----------------------------------------------------------------------------------------------- text for people
ESC = "\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\x9b31m\u202e"  # a clipboard write, a screen clear, C1 CSI, a bidi override


def _hostile_text(rd: Path) -> None:
    """Control characters in every field a person is shown: evidence, hosts' records, an attempt log's name."""
    ev = {"event": "attempt", "jobid": "j1" + ESC, "attempt": 3, "rc": 1, "class": "node", "bad_hosts": ["h3"],
          "evidence": [f"h3: {ESC} NCCL error"], "reason": f"'node': {ESC}", "started": 1e9, "ended": 1e9 + 5,
          "log": f"attempts/j1{ESC}.3.log", "swapped": {"out": ["h3"], "in": ["h6"]}, "hosts": ["h1", "h3"]}  # fmt: skip
    with (rd / "events.jsonl").open("a") as f:
        f.write(json.dumps(ev) + "\n")
    (rd / f"attempts/j1{ESC}.3.log").write_text(f"step=13 loss=1.0 {ESC}\n")
    (rd / "heartbeat/h1.json").write_text(json.dumps({"format": 1, "attempt": ESC, "host": "h1", "time": 1e9,
                                                      "ranks": [{"rank": 0, "step": 12, "step_s": 0.05,
                                                                 "phase_s": 0.1, "phase": ESC}]}))  # fmt: skip
    with (rd / "chain.jsonl").open("a") as f:
        f.write(
            json.dumps({"job": "j1" + ESC, "verdict": ESC, "reason": ESC, "start": 1e9, "end": 1e9 + 9})
            + "\n"
        )


def _clean(out: str) -> None:
    for c in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert c not in out, repr(out)


def test_monitor_escapes_control_characters_from_the_run_directory(rd: Path) -> None:
    _hostile_text(rd)
    r = agpt("monitor", str(rd), "--once")
    no_traceback(r, 0)
    _clean(r.stdout + r.stderr)
    assert "\\x1b]52;c;" in r.stdout, r.stdout  # shown, escaped: the evidence keeps its meaning


def test_failover_report_and_chain_status_escape_control_characters(rd: Path) -> None:
    _hostile_text(rd)
    for argv in (["failover", "report", str(rd)], ["chain", "status", str(rd)]):
        r = agpt(*argv)
        no_traceback(r, 0)
        _clean(r.stdout + r.stderr)


MATH = "$\\frac{$"


def test_text_drawn_in_a_figure_is_never_parsed_as_mathematics(rd: Path, tmp_path: Path) -> None:
    ev = {"event": "attempt", "jobid": MATH, "attempt": 1, "rc": 1, "class": MATH, "first_step": 3, "last_step": 5,
          "started": 1e9, "ended": 1e9 + 5, "swapped": {"out": [MATH], "in": ["h6"]}}  # fmt: skip
    with (rd / "events.jsonl").open("a") as f:
        f.write(json.dumps(ev) + "\n")
    (rd / "eval.jsonl").write_text(json.dumps({"step": 6, "source": "loop", "bpb": {MATH: 1.2},
                                               "tasks": {MATH: {"acc_norm": 0.3, "chance": 0.25}}}) + "\n")  # fmt: skip
    no_traceback(agpt("plot", str(rd), "-o", str(tmp_path / "p.png"), "--title", MATH), 0)
    no_traceback(agpt("report", str(rd), "--html", str(tmp_path / "r.html")), 0)


def test_a_run_directory_whose_name_is_not_utf8_is_shown_and_drawn(rd: Path, tmp_path: Path) -> None:
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/run\xff\xfe"))
    rd.rename(odd)
    for argv in (["monitor", str(odd), "--once"], ["failover", "report", str(odd)], ["chain", "status", str(odd)],
                 ["plot", str(odd), "-o", str(tmp_path / "p.png")],
                 ["report", str(odd), "--html", str(tmp_path / "r.html")]):  # fmt: skip
        no_traceback(agpt(*argv), 0)


@pytest.mark.parametrize("value", ["1e30", "1e400", "true", '"--1"', "4.5", "0"])
def test_an_exports_config_of_the_wrong_shape_is_one_line_naming_the_key(tmp_path: Path, value: str) -> None:
    from agpt.errors import AgptError
    from agpt.evalexport import export

    cfg = {"architectures": ["LlamaForCausalLM"], "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 172}  # fmt: skip
    text = json.dumps(cfg)[:-1] + f', "max_position_embeddings": {value}}}'
    (tmp_path / "config.json").write_text(text)
    (tmp_path / "tokenizer.model").write_text("x")
    with pytest.raises(
        AgptError, match=r"config.json: (max_position_embeddings: |unreadable \(number out of range)"
    ):
        export.model_config(export.open_export(tmp_path))
