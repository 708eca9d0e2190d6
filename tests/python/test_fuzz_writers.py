"""Every writer, property-based (issue 37, item 8): a symbolic link planted at any name beside its file (the
temporary names the old writers used, the file itself, anything) is never written through, and a disk that
fills at any of its writes is one line naming the file with the file left as it was."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from agpt import chain, rundir, safewrite
from agpt.evals import due
from agpt.failover import each
from agpt.failover import hosts as hostlib
from agpt.failover import plan as P
from agpt.failover import shrink as shrinklib
from agpt.failover import sweep as sweeplib
from agpt.heartbeat import format as hbformat
from agpt.observe import markers, prom
from fuzz_util import FUZZ


def _layout(run: Path) -> Path:
    lay = shrinklib.Layout(nodes=2, ranks_per_node=1, global_batch=8, micro_batch=1)
    return shrinklib.write_layout(run, lay)


def _plan(run: Path) -> Path:
    """`plan --apply` after a node failure: journal, record, swap (hosts/active is the file looked at)."""
    (run / "attempts").mkdir(exist_ok=True)
    (run / "attempts/j.1.log").write_text("step=1 loss=2\n")
    cls = run / "c.json"
    cls.write_text(
        json.dumps({"class": "node", "bad_hosts": ["h2"], "evidence": ["ECC on h2"], "last_step": 1})
    )
    rc = P.main(["--run-dir", str(run), "--jobid", "j", "--attempt", "1", "--rc", "1", "--apply", "--now", "100",
                 "--backoff", "0", "--sweep", "off", "--classification", str(cls),
                 "--log", str(run / "attempts/j.1.log")])  # fmt: skip
    if rc != 0:
        raise safewrite.WriteError(f"plan exit {rc}")
    return run / "hosts/active"


def _sweep_log(run: Path) -> Path:
    """The sweep's log in attempts/ (its probe's output); a write that failed is a note there, made an error here."""
    res = sweeplib.for_attempt(run / "attempts/j.1.sweep.log", ["h1"], sweeplib.SweepSettings(mode="probe"),
                               ident="j.1", time_left=None, min_attempt_s=0,
                               prober=lambda hosts, _s: sweeplib.SweepResult(ran=True, mode="probe",
                                                                            hosts=list(hosts), log="[h1] ok"))  # fmt: skip
    if res.log != "attempts/j.1.sweep.log":
        raise safewrite.WriteError(f"{run / 'attempts'}: sweep log not written")
    return run / res.log


def _eval_due(run: Path) -> list[int]:
    """`chain eval-mark`: the step's hold, then the count in eval/due.json."""
    step = run / "ckpt/step-2"
    step.mkdir(parents=True, exist_ok=True)
    (step / ".complete").write_text(json.dumps({"step": 2, "time": 1, "world_size": 1, "files": {}}) + "\n")
    return due.mark(run, 1)


# (name, the file it writes under RUN, how to write it, whether it appends)
WRITERS: list[tuple[str, str, Callable[[Path], Any], bool]] = [
    ("hosts", "hosts/spare", lambda r: hostlib.write_hosts(r / "hosts/spare", ["h5", "h6"]), False),
    ("layout", "layout.json", _layout, False),
    ("events", "events.jsonl", lambda r: rundir.append_jsonl(r / rundir.EVENTS, {"event": "x"}), True),
    ("bad", "hosts/bad", lambda r: hostlib.append_bad(r / "hosts/bad", ["h9"], jobid="j", evidence="e"), True),
    ("chain", "chain.jsonl", lambda r: chain.append_record(r, {"jobid": "1"}), True),
    ("markers", "tb/markers.json", lambda r: markers.write_state(r / "tb", {"a": 1}), False),
    ("heartbeat", "heartbeat/n1.json", lambda r: hbformat.write_atomic(r / "heartbeat/n1.json", "{}"), False),
    ("prom", "metrics.prom", lambda r: prom.write_atomic(r / "metrics.prom", "x 1\n"), False),
    ("preflight log", "attempts/j.preflight.log",
     lambda r: each.write_prefixed(r / "attempts/j.preflight.log", ["h1"], {"h1": "ok"}, {}), False),
    ("plan --apply", "hosts/active", _plan, False),
    ("sweep log", "attempts/j.1.sweep.log", _sweep_log, False),
    ("eval due", "eval/due.json", _eval_due, False),
]  # fmt: skip

# Names a link may be planted at, beside the file NAME: the old writers' fixed temporary names, the file itself.
PLANTS = ["{name}", ".{name}.tmp", ".{name}.tmp.png", ".{name}.{pid}.tmp", "{name}.tmp", "{name}.{pid}.tmp",
          ".{name}.tmp.{pid}", "{name}.tmp.{pid}", ".{name}.{pid}"]  # fmt: skip


def _run_dir(root: Path) -> Path:
    run = root / "run"
    for sub in ("hosts", "tb", "heartbeat", "attempts", "eval"):
        (run / sub).mkdir(parents=True)
    (run / "hosts/active").write_text("h1\nh2\nh3\nh4\n")
    (run / "hosts/spare").write_text("h5\nh6\n")
    return run


@FUZZ
@given(
    writer=st.sampled_from(WRITERS),
    plant=st.one_of(st.sampled_from(PLANTS), st.text("._-abcdef0123456789", min_size=1, max_size=12)),
    full_at=st.integers(0, 5),
)
def test_no_writer_follows_a_planted_link_and_a_full_disk_is_one_line(
    writer: tuple[str, str, Callable[[Path], Any], bool], plant: str, full_at: int
) -> None:
    what, rel, write, appends = writer
    with tempfile.TemporaryDirectory() as tmp:
        run = _run_dir(Path(tmp))
        target = run / rel
        victim = Path(tmp) / "victim"
        victim.write_text("precious\n")
        name = plant.format(name=target.name, pid=os.getpid())
        link = target.parent / name
        if name in (".", "..") or link.exists() or link.is_symlink():
            return
        link.symlink_to(victim)

        def content() -> bytes | None:
            """The file's bytes; an empty record file reads as none (an append may create it, then fail)."""
            return (target.read_bytes() or None) if target.is_file() and not target.is_symlink() else None

        before = content()
        real, n = os.write, [0]

        def write_or_fill(fd: int, data: Any) -> int:
            n[0] += 1
            if n[0] == full_at:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(fd, data)

        err: safewrite.WriteError | None = None
        with mock.patch.object(os, "write", write_or_fill):
            try:
                write(run)
            except safewrite.WriteError as exc:
                err = exc
        assert victim.read_text() == "precious\n", (what, name)
        if err is not None:
            assert "\n" not in str(err), (what, str(err))
            if what != "plan --apply":
                assert str(target.parent) in str(err), (what, str(err))
                assert content() == before, what
        elif link == target:  # a link at the file itself: a whole file replaces it, an append refuses it
            assert not appends and target.is_file() and not target.is_symlink(), what
