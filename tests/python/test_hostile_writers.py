"""Writers never follow a link, never replace the run's own records, and a full or read-only disk is one line
that leaves the state as it was (issue 37: one way to write a file, record before change, environment failures).
Every instance the hostile-input sweep reproduced by hand is a test here."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agpt import chain, rundir
from agpt.errors import BadInput
from agpt.failover import hosts as hostlib
from agpt.failover import plan as P
from agpt.failover import shrink as shrinklib
from agpt.failover import sweep as sweeplib
from conftest import ROOT, agpt_env
from failover_util import run_with_attempt

ECC = "step=1 loss=3\nstep=2 loss=2\nCUDA error: uncorrectable ECC error encountered on h2\n"
ACTIVE, SPARE = ["h1", "h2", "h3", "h4"], ["h5", "h6"]


def agpt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agpt", *args], capture_output=True, text=True,
                          env=agpt_env(), timeout=300)  # fmt: skip


def a_run(tmp_path: Path) -> Path:
    """A run directory with one attempt's log and a metrics line: enough for the views."""
    run, _ = run_with_attempt(tmp_path, ACTIVE, SPARE, ECC)
    (run / rundir.EVENTS).write_text('{"event": "attempt", "jobid": "j", "attempt": 1, "class": "node"}\n')
    (run / rundir.METRICS).write_text('{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.0}\n')
    return run


# ------------------------------------------------------------------------------------ links at temporary names
@pytest.mark.parametrize(
    ("what", "tmp_names"),
    [("report", [".page.html.tmp"]), ("plot", [".loss.png.tmp.png"])],
)
def test_a_link_planted_at_a_views_temporary_name_is_never_written_through(
    tmp_path: Path, what: str, tmp_names: list[str]
) -> None:
    run = a_run(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    for name in tmp_names:
        (out_dir / name).symlink_to(victim)
    out = out_dir / ("page.html" if what == "report" else "loss.png")
    r = (
        agpt("report", str(run), "--html", str(out))
        if what == "report"
        else agpt("plot", str(run), "-o", str(out))
    )
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "precious\n" and out.is_file() and not out.is_symlink()


def test_layout_json_is_never_written_through_a_link_at_its_temporary_name(tmp_path: Path) -> None:
    """`agpt check --run-dir` writes layout.json through shrink.write_layout (it wrote `.layout.json.tmp`)."""
    run = tmp_path / "run"
    run.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (run / ".layout.json.tmp").symlink_to(victim)
    lay = shrinklib.Layout(nodes=2, ranks_per_node=1, tp=1, global_batch=8, micro_batch=1, config="c", site="s",
                           state_bytes=1.0, fixed_bytes=1.0, usable_bytes=10.0)  # fmt: skip
    shrinklib.write_layout(run, lay)
    assert victim.read_text() == "precious\n"
    assert shrinklib.read_layout(run).nodes == 2


def test_the_sweeps_log_in_attempts_is_never_written_through_a_link(tmp_path: Path) -> None:
    log = tmp_path / "run" / "attempts" / "j.1.sweep.log"
    log.parent.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    log.symlink_to(victim)

    def prober(hosts: Any, settings: Any) -> sweeplib.SweepResult:
        return sweeplib.SweepResult(ran=True, mode="probe", hosts=list(hosts), log="[h1] probe ok")

    res = sweeplib.for_attempt(log, ["h1"], sweeplib.SweepSettings(mode="probe"), ident="j.1", time_left=None,
                               min_attempt_s=0, prober=prober)  # fmt: skip
    assert victim.read_text() == "precious\n"
    assert (
        not log.is_symlink() and log.read_text() == "[h1] probe ok\n" and res.log == "attempts/j.1.sweep.log"
    )


@pytest.mark.parametrize("name", ["events.jsonl", "hosts/bad", "chain.jsonl"])
def test_an_append_never_follows_a_link_at_a_record(tmp_path: Path, name: str) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    path = tmp_path / "run" / name
    path.parent.mkdir(parents=True)
    path.symlink_to(victim)
    with pytest.raises(BadInput, match="symbolic link") as err:
        rundir.append_jsonl(path, {"event": "x"})
    assert str(path) in str(err.value) and victim.read_text() == "precious\n"


def test_an_append_to_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "events.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="not a regular file"):
        rundir.append_jsonl(fifo, {"event": "x"})


# ------------------------------------------------------------------------------------ the run's own records
@pytest.mark.parametrize(
    ("cmd", "name"),
    [(["report", "{run}", "--html", "{run}/events.jsonl"], "events.jsonl"),
     (["plot", "{run}", "-o", "{run}/metrics.jsonl"], "metrics.jsonl"),
     (["report", "{run}", "--html", "{run}/hosts/active"], "hosts/active"),
     (["plot", "{run}", "-o", "{run}/layout.json"], "layout.json")],
)  # fmt: skip
def test_a_view_never_replaces_the_records_it_is_drawn_from(
    tmp_path: Path, cmd: list[str], name: str
) -> None:
    run = a_run(tmp_path)
    (run / rundir.LAYOUT).write_text("{}\n")
    before = (run / name).read_bytes()
    r = agpt(*(c.format(run=run) for c in cmd))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert cmd[2] in r.stderr and f"{run}/{name}" in r.stderr and "Traceback" not in r.stderr
    assert (run / name).read_bytes() == before


def test_the_run_directorys_record_names_are_the_code_names() -> None:
    from agpt.evals import due, records

    assert records.FILE in rundir.OWN_FILES and due.STATE.split("/")[0] in rundir.OWN_DIRS
    assert hostlib.PENDING.split("/")[0] in rundir.OWN_DIRS
    contract = (Path(__file__).resolve().parents[2] / "docs" / "contract.md").read_text()
    assert f"\n{hostlib.PENDING} " in contract  # the journal is a file of the run directory's contract


# ------------------------------------------------------------------------------------ record before change
class Killed(BaseException):
    """The writer's process ended here (kill -9): nothing after this point runs, no cleanup either."""


class Faults:
    """arm(kind, n): the N-th step of kind's steps fails.  "full": os.write raises ENOSPC; "rofs": an os.open
    that creates or an os.replace raises EROFS; "kill": at the N-th os.write or os.replace the process is gone
    (every later write, rename and unlink fails too).  `count`: the steps seen since arm()."""

    def __init__(self) -> None:
        self.count, self.at, self.kind, self.dead = 0, 0, "", False

    def arm(self, kind: str, n: int = 10**6) -> None:
        self.count, self.at, self.kind, self.dead = 0, n, kind, False

    def step(self, name: str, args: tuple[Any, ...]) -> None:
        if self.dead:
            raise Killed
        counts = {"full": name == "write", "kill": name in ("write", "replace"),
                  "rofs": name == "replace" or (name == "open" and bool(args[1] & os.O_CREAT))}  # fmt: skip
        if not counts.get(self.kind):
            return
        self.count += 1
        if self.count != self.at:
            return
        if self.kind == "kill":
            self.dead = True
            raise Killed
        code = errno.ENOSPC if self.kind == "full" else errno.EROFS
        raise OSError(code, os.strerror(code))


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[Faults]:
    f = Faults()
    for name in ("write", "replace", "unlink", "open"):
        real = getattr(os, name)

        def op(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            f.step(_name, a)
            return _real(*a, **k)

        monkeypatch.setattr(os, name, op)
    yield f
    f.arm("", 0)


def _plan(run: Path, cls: Path, *extra: str) -> list[str]:
    return ["--run-dir", str(run), "--jobid", "j", "--rc", "1", "--started", "10", "--ended", "20", "--apply",
            "--backoff", "0", "--now", "100", "--log", str(run / "attempts/j.1.log"), "--classification", str(cls),
            "--sweep", "off", *extra]  # fmt: skip


def _state(run: Path) -> tuple[list[str], list[str], list[str], list[dict[str, Any]]]:
    bad = [ln.split("\t")[0] for ln in rundir.read_lines(run / "hosts/bad") if ln]
    evs = [e for e in rundir.read_jsonl(run / rundir.EVENTS) if e.get("event") == "attempt"]
    return hostlib.read_hosts(run / "hosts/active"), hostlib.read_hosts(run / "hosts/spare"), bad, evs


def _node_failure(tmp_path: Path) -> tuple[Path, Path]:
    run, _ = run_with_attempt(tmp_path, ACTIVE, SPARE, ECC)
    cls = tmp_path / "c.json"
    cls.write_text(
        json.dumps({"class": "node", "bad_hosts": ["h2"], "evidence": ["ECC on h2"], "last_step": 2})
    )
    return run, cls


SWAPPED = (["h1", "h5", "h3", "h4"], ["h6"], ["h2"])


@pytest.mark.parametrize("kind", ["full", "kill", "rofs"])
def test_plan_apply_cut_at_every_write_leaves_record_and_hosts_consistent_and_the_next_plan_completes_it(
    tmp_path: Path, faults: Faults, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Issue 37: `plan --apply` swapped hosts/active before it appended the attempt; on a full disk the swap
    happened, the record did not, and the plan ended in a traceback.  Now, cut at each of its writes: one line,
    exit 2 (or the kill), and either nothing recorded and nothing changed, or the attempt recorded and its swap
    finished by the next plan; the next plan of the same attempt then records and swaps exactly once."""
    run, cls = _node_failure(tmp_path / "count")
    faults.arm(kind)
    assert P.main(_plan(run, cls, "--attempt", "1")) == 0 and _state(run)[:3] == SWAPPED
    steps = faults.count
    assert steps >= 5  # journal, record, spare, active, bad: each a place to cut it
    for at in range(1, steps + 1):
        run, cls = _node_failure(tmp_path / f"{kind}{at}")
        faults.arm(kind, at)
        capsys.readouterr()
        try:
            rc = P.main(_plan(run, cls, "--attempt", "1"))
        except Killed:
            rc = None
        faults.arm("", 0)
        err = capsys.readouterr().err
        if kind != "kill":
            assert rc == 2 and len(err.strip().splitlines()) == 1 and "cannot write" in err, (at, err)
            assert str(run) in err, err
        # The next plan (the next job's first call) settles what was cut short.
        assert P.main(["--run-dir", str(run), "--jobid", "j2", "--before", "--apply", "--now", "100"]) == 0
        active, spare, bad, evs = _state(run)
        assert not (run / hostlib.PENDING).exists()
        if evs:
            assert (active, spare, bad) == SWAPPED and len(evs) == 1, (kind, at)
        else:
            assert (active, spare, bad) == (ACTIVE, SPARE, []), (kind, at)
            assert (
                P.main(_plan(run, cls, "--attempt", "1")) == 0
            )  # the loop asks again: recorded and done once
            active, spare, bad, evs = _state(run)
            assert (active, spare, bad) == SWAPPED and len(evs) == 1, (kind, at)


# ------------------------------------------------------------------------------------ one line on a full disk
@pytest.mark.parametrize("kind", ["full", "rofs"])
def test_chain_end_mark_bad_and_eval_mark_on_a_full_or_read_only_run_directory_are_one_line(
    tmp_path: Path, faults: Faults, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Issue 37: tracebacks in `chain end`, `hosts mark-bad`, `eval mark` on a full or read-only run directory."""
    run, _ = _node_failure(tmp_path)
    step = run / "ckpt" / "step-2"
    step.mkdir(parents=True)
    (step / ".complete").write_text(json.dumps({"step": 2, "time": 1, "world_size": 1, "files": {}}) + "\n")
    why = "No space left on device" if kind == "full" else "Read-only file system"
    calls: list[tuple[Callable[[list[str]], int], list[str], str]] = [
        (chain.main, ["end", str(run), "--job", "1", "--rc", "0", "--started", "1", "--start-step", "0"],
         "chain.jsonl"),
        (hostlib.main, ["mark-bad", "--run-dir", str(run), "--hosts", "h3"], "hosts/bad"),
        (chain.main, ["eval-mark", str(run), "--every", "1"], "eval/"),
    ]  # fmt: skip

    def files() -> dict[
        Path, bytes
    ]:  # the state: every file but the locks (an empty record file reads as none)
        return {p: p.read_bytes() for p in run.rglob("*")
                if p.is_file() and not p.name.endswith(".lock") and p.stat().st_size}  # fmt: skip

    for fn, argv, name in calls:
        before = files()
        faults.arm(kind, 1)
        rc = fn(argv)
        faults.arm("", 0)
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1 and why in err and name in err, (argv[0], err)
        assert files() == before, argv[0]


# ------------------------------------------------------------------------------------ every other writer
def _shard(out: Path) -> Path:
    """agpt tokenize's shard writer (agpt.data.mmidx): `.bin` streamed, then `.idx`."""
    import numpy as np

    from agpt.data import mmidx

    w = mmidx.ShardWriter(out / "data_00000", np.dtype(np.uint16))
    try:
        w.add_documents(np.arange(6, dtype=np.uint16), np.array([2, 4]))
        w.close()
    except BaseException:
        w.abort()
        raise
    return out / "data_00000.bin"


def _blend_index(out: Path) -> Path:
    """agpt blend's index files: per-file arrays saved in .work, then concatenated into OUT/NAME.npy."""
    import numpy as np

    from agpt.data import blend

    (out / ".work").mkdir(exist_ok=True)
    part = out / ".work" / "f000000.doc_order.npy"
    blend._save(part, np.arange(5, dtype=np.int32))
    blend._concat(out / "doc_order.npy", [part], np.dtype(np.int32), None)
    assert list(np.load(out / "doc_order.npy")) == [0, 1, 2, 3, 4]
    return out / "doc_order.npy"


def _eval_tasks(out: Path) -> Path:
    """The harness's task files (agpt.evalexport.harness.write_tasks): NAME.jsonl and NAME.yaml."""
    from agpt.evalexport import harness
    from agpt.evals.tasks import Item, Prepared, TaskSpec

    prep = Prepared(specs=(TaskSpec(name="t", path="t.jsonl", format="jsonl"),),
                    items=((Item(context="2+2=", choices=("4", "5"), answer=0, line=1),),), rows=())  # fmt: skip
    harness.write_tasks(prep, out)
    return out / "t.jsonl"


def _stacks(out: Path) -> Path:
    """A heartbeat's stack dump in its node-local folder (stacks.rankN.txt)."""
    from agpt.heartbeat import writer as hb

    w = hb.Heartbeat(out / "run", attempt="j.1", rank=0, host="n1", dump_after_s=0.0, local_dir=out)
    w._maybe_dump()
    path = w.local_dir / "stacks.rank0.txt"
    assert path.read_text().startswith("# rank 0 pid")
    return path


def _lrfind_plot(out: Path) -> Path:
    from agpt.train import lrfind

    sweep = lrfind.Sweep(
        lrs=[1e-4, 1e-3], losses=[3.0, 2.0], smoothed=[3.0, 2.0], steepest_lr=1e-3, blowup_lr=None
    )
    lrfind.plot(sweep, out / "lr.png")
    return out / "lr.png"


def _chunk(out: Path) -> Path:
    """agpt tokenize's first phase: one chunk's tokens (`c000000.tok`) then lengths (`.len`, last) in .work."""
    from agpt.data import tokenize, tokenizer
    from agpt.data.readers import plan_chunks
    from data_util import SOURCES, STDLIB

    text = out.parent / "tok" / "docs.txt"
    text.parent.mkdir(exist_ok=True)
    text.write_text(
        "\n".join((STDLIB / n).read_text() for n in SOURCES)
    )  # also the tokenizer's training text
    model = text.parent / "m.model"
    tokenizer.train(tokenizer.TrainSettings(inputs=[str(text)], output=str(model), vocab_size=600))
    job = tokenize._Job(index=0, chunk=plan_chunks([text], 1 << 20)[0], work=str(out), model=str(model),
                        text_key="text", append_eod=True, bos=False, skip_empty=True, dtype="<u2")  # fmt: skip
    assert tokenize.tokenize_chunk(job)[2] > 0
    return out / "c000000.len"


@contextlib.contextmanager
def _trainer_here() -> Iterator[None]:
    """A trainer run in this process (smoke, lr-find), on one thread (as smoke runs: a shared machine's cores are
    oversubscribed otherwise); the process-wide settings it changes are put back."""
    import torch

    from agpt.train import dist as tdist

    threads, omp = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    det = torch.are_deterministic_algorithms_enabled()
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    try:
        yield
    finally:
        tdist.finish()
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det)
        os.environ.pop("OMP_NUM_THREADS", None) if omp is None else os.environ.update(OMP_NUM_THREADS=omp)


def _smoke_baseline(out: Path) -> Path:
    """`agpt smoke --record` (it wrote BASELINE.tmp, then renamed it)."""
    from agpt.train import smoke

    with _trainer_here():
        assert smoke.smoke(None, baseline=str(out / "base.txt"), steps=2, record=True) == 0
    return out / "base.txt"


def _lrfind_json(out: Path) -> Path:
    """`agpt lr-find`'s JSON beside its plot (it wrote NAME.json.tmp, then renamed it)."""
    from agpt.train import lrfind

    with _trainer_here():
        assert lrfind.lr_find(str(ROOT / "jobs/configs/smoke.yaml"), out=str(out / "lr.png"), steps=3) == 0
    return out / "lr.json"


TOOL_WRITERS: list[tuple[str, Callable[[Path], Path], list[str]]] = [
    ("tokenize shard", _shard, ["data_00000.bin.tmp", "data_00000.idx.tmp", "data_00000.bin", "data_00000.idx"]),
    ("tokenize chunk", _chunk, ["c000000.tok.tmp", "c000000.len.tmp", "c000000.tok", "c000000.len"]),
    ("blend index", _blend_index, ["doc_order.tmp.npy", ".work/f000000.doc_order.tmp.npy", "doc_order.npy"]),
    ("eval task files", _eval_tasks, ["t.jsonl", "t.yaml"]),
    ("heartbeat stacks", _stacks, ["{local}/stacks.rank0.txt"]),
    ("lr-find plot", _lrfind_plot, ["lr.png"]),
    ("lr-find json", _lrfind_json, ["lr.json.tmp", "lr.json"]),
    ("smoke baseline", _smoke_baseline, ["base.txt.tmp", "base.txt"]),
]  # fmt: skip


def _local(out: Path) -> Path:
    from agpt import nodelocal

    folder = nodelocal.folder(out, "heartbeat", out / "run", "j.1", "n1")
    nodelocal.private_dir(folder)
    return folder


@pytest.mark.parametrize(("what", "write", "plants"), TOOL_WRITERS, ids=[w[0] for w in TOOL_WRITERS])
def test_no_tools_output_is_written_through_a_link_at_its_name_or_its_old_temporary_name(
    tmp_path: Path, what: str, write: Callable[[Path], Path], plants: list[str]
) -> None:
    """Issue 37, item 1: these wrote through a link planted at the file (open "w", savefig) or at their fixed
    temporary name (`PREFIX.bin.tmp`, `NAME.tmp.npy`); the link's target must stay as it was."""
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    for name in plants:
        link = Path(name.format(local=_local(out))) if "{local}" in name else out / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(victim)
    written = write(out)
    assert victim.read_bytes() == b"precious\n", what  # (a token chunk written through it is binary)
    assert written.is_file() and not written.is_symlink(), what


@pytest.mark.parametrize(("what", "write", "plants"), TOOL_WRITERS, ids=[w[0] for w in TOOL_WRITERS])
def test_a_full_disk_under_a_tools_output_is_one_line_naming_it_and_leaves_nothing_half_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    what: str,
    write: Callable[[Path], Path],
    plants: list[str],
) -> None:
    """Issue 37, item 4: ENOSPC while one of these is written is one line naming the file (WriteError: exit 2
    from the CLI), no temporary file is left and the output is not there half-written."""
    from agpt import safewrite

    out = tmp_path / "out"
    out.mkdir()

    def full(op: str, path: Path) -> None:
        if op in ("write", "sync"):  # a figure or a stack dump is written by a library: full at its commit
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(safewrite, "fault", full)
    with pytest.raises(safewrite.WriteError) as err:
        write(out)
    line = str(err.value)
    assert "\n" not in line and "No space left on device" in line and str(out) in line, line
    named = Path(line.split(": cannot write (")[0])
    assert not named.exists() and not list(out.rglob(".*.tmp")), (what, sorted(out.rglob("*")))


@pytest.mark.parametrize("target", ["folder", "file"])
def test_a_work_folder_that_became_a_link_is_refused_never_entered(tmp_path: Path, target: str) -> None:
    """Issue 37, item 1: `workdir.make` (agpt tokenize's and agpt blend's `.work`) ran `mkdir(exist_ok=True)`,
    which takes a link to a folder for the folder, and wrote its marker (then every chunk) into what the link
    pointed at; a link to a file was a traceback.  Both are now one line naming `.work`, the target untouched."""
    from agpt.data import workdir

    victim = tmp_path / "victim"
    victim.mkdir() if target == "folder" else victim.write_text("precious\n")
    work = tmp_path / "out" / ".work"
    work.parent.mkdir()
    work.symlink_to(victim)
    with pytest.raises(BadInput, match="a link or a file") as err:
        workdir.make(work, "agpt tokenize")
    assert str(err.value).startswith(f"{work}:") and "\n" not in str(err.value)
    assert (list(victim.iterdir()) == []) if target == "folder" else victim.read_text() == "precious\n"


def test_a_node_local_folder_is_never_entered_through_a_link_at_any_level(tmp_path: Path) -> None:
    """Issue 37, item 2: only the last folder was opened with O_NOFOLLOW, so a node folder swapped for a link
    (or any folder between agpt-UID and step-N) was entered and step-N made inside whatever it pointed at."""
    from agpt import nodelocal

    node = nodelocal.folder(tmp_path / "shm", "ckpt", tmp_path / "run", "n1")
    (tmp_path / "shm").mkdir()
    nodelocal.private_dir(node)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    node.rmdir()
    node.symlink_to(elsewhere)
    with pytest.raises(nodelocal.NodeLocalError, match="is a symbolic link") as err:
        nodelocal.private_dir(node / "step-3")
    assert str(err.value).startswith(f"{node}:") and list(elsewhere.iterdir()) == []
    uid_dir = node.parent
    node.unlink()
    uid_dir.rename(tmp_path / "shm" / "moved")
    uid_dir.symlink_to(tmp_path / "shm" / "moved")  # agpt-UID itself a link
    with pytest.raises(nodelocal.NodeLocalError, match="is a symbolic link") as err:
        nodelocal.private_dir(node / "step-3")
    assert str(err.value).startswith(f"{uid_dir}:")
    assert not (tmp_path / "shm" / "moved" / node.name).exists()


@pytest.mark.parametrize(
    ("name", "settings", "cmd", "holds"),
    [("j1.ends.json", "FAILOVER_KILL_ON_EVIDENCE=1", "true", '"regex"'),
     ("j1.warm.log", "FAILOVER_WARM=echo", "{warm} true", "agpt-warm serve -- true")],
    ids=["ends.json", "warm.log"],
)  # fmt: skip
def test_the_failover_loops_bash_writes_never_follow_a_link_planted_in_attempts(
    tmp_path: Path, name: str, settings: str, cmd: str, holds: str
) -> None:
    """Issue 37, item 3: `failover_run` wrote the kill-on-evidence patterns with `>"$ends"` and the warm ranks' log
    with `>>"$wlog"`, writing into whatever a link planted at attempts/JOBID.ends.json or JOBID.warm.log pointed
    at; now mktemp + mv, and rm then a create with noclobber."""
    run = tmp_path / "run"
    (run / "attempts").mkdir(parents=True)
    (tmp_path / "alloc").write_text("h1\nh2\n")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (run / "attempts" / name).symlink_to(victim)
    job = tmp_path / "job.sh"
    job.write_text(f"""set -euo pipefail
source '{ROOT}/lib/failover.sh'
export AGPT_RUN_DIR='{run}'
FAILOVER_HOSTS_FROM='{tmp_path / "alloc"}' FAILOVER_SPARES=1 FAILOVER_BACKOFF=0 FAILOVER_JOBID=j1
{settings} FAILOVER_SWEEP=off failover_run {cmd}
""")
    r = subprocess.run(["bash", str(job)], env=agpt_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert victim.read_text() == "precious\n"
    written = run / "attempts" / name
    assert written.is_file() and not written.is_symlink() and holds in written.read_text(), (
        r.stdout + r.stderr
    )
    assert [p.name for p in (run / "attempts").glob(f"{name}.*")] == []  # no temporary file left
