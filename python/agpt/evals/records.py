"""RUN_DIR/eval.jsonl: every evaluation of a run, the trainer's and lm-eval's, one JSON object per line.

The in-loop scorer (source "loop") and `agpt eval` (source "lm-eval" or "agpt", usually a job of its
own) append to the same file with one O_APPEND write under an flock (rundir.append_jsonl), each record
naming the training step it belongs to.  A resumed or rolled-back trainer first drops the records of
the steps it is about to train again (`drop_after`), so each step's evaluation is in the file once.
Standard library only: the chain's eval job and the failover report read it.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import time
from pathlib import Path
from typing import Any

from agpt import rundir, safewrite

FILE = "eval.jsonl"
SOURCES = ("loop", "lm-eval", "agpt")


def path(run_dir: Path) -> Path:
    return Path(run_dir) / FILE


def bits_per_byte(nats_per_token: float, bytes_per_token: float) -> float:
    """Cross-entropy in nats per token -> bits per UTF-8 byte of the text those tokens spell."""
    return nats_per_token / math.log(2) / bytes_per_token


def append(run_dir: Path, rec: dict[str, Any]) -> None:
    rec = {
        "step": rec["step"],
        "time": round(time.time(), 3),
        **{k: v for k, v in rec.items() if k != "step"},
    }
    rundir.append_jsonl(path(run_dir), rec)


def read(run_dir: Path, *, notes: list[str] | None = None) -> list[dict[str, Any]]:
    """The records with an integer step, in file order (torn or unreadable lines skipped with a note)."""
    recs = rundir.read_jsonl(path(run_dir), notes=notes)
    return [r for r in recs if isinstance(r.get("step"), int) and not isinstance(r.get("step"), bool)]


def drop_after(run_dir: Path, step: int) -> int:
    """Remove every record of a step after `step` (they belong to training that is about to be redone);
    returns how many.  Rewritten in place under the appenders' flock, so a concurrent append is never lost;
    a copy of the old file is kept until the new one is written, and restored first if a crash left it."""
    target = path(run_dir)
    backup = target.with_name(f".{FILE}.rewrite")
    if not target.exists() and not backup.exists():
        return 0
    fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            _write_all(fd, backup.read_bytes())  # the previous rewrite did not finish: start from its copy
        data = _read_all(fd)
        kept, dropped = [], 0
        for line in data.split(b"\n"):
            at = _step_of(line)
            if at is not None and at > step:
                dropped += 1
            elif line:
                kept.append(line)
        if dropped:
            safewrite.replace(backup, data)
            _write_all(fd, b"".join(line + b"\n" for line in kept))
        with contextlib.suppress(FileNotFoundError):
            backup.unlink()
        return dropped
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0) if size else b""


def _write_all(fd: int, data: bytes) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    with contextlib.suppress(OSError):
        os.fsync(fd)


def _step_of(line: bytes) -> int | None:
    try:
        rec = rundir.parse_json_line(line.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError, UnicodeError):
        return None
    step = rec.get("step") if isinstance(rec, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def scores(rec: dict[str, Any]) -> dict[str, tuple[float, bool]]:
    """The figures of one record the alarm watches: name -> (value, higher is better).

    `bpb/CORPUS` (lower is better) and `TASK/acc`, `TASK/acc_norm` (higher is better); a record of lm-eval
    prefixes its task names with `lm-eval:` so the two sources never share a best."""
    out: dict[str, tuple[float, bool]] = {}
    bpb = rec.get("bpb")
    if isinstance(bpb, dict):
        for corpus, v in bpb.items():
            if _finite(v):
                out[f"bpb/{corpus}"] = (float(v), False)
    tasks = rec.get("tasks")
    prefix = "" if rec.get("source", "loop") == "loop" else f"{rec.get('source')}:"
    if isinstance(tasks, dict):
        for name, res in tasks.items():
            if not isinstance(res, dict):
                continue
            for metric in ("acc", "acc_norm"):
                if _finite(res.get(metric)):
                    out[f"{prefix}{name}/{metric}"] = (float(res[metric]), True)
    return out


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def summary(run_dir: Path, *, notes: list[str] | None = None) -> dict[str, Any] | None:
    """The newest record of each source and the best of every figure (None without eval.jsonl)."""
    if not path(run_dir).exists():
        return None
    recs = read(run_dir, notes=notes)
    newest: dict[str, dict[str, Any]] = {}
    best: dict[str, list[Any]] = {}
    for rec in sorted(recs, key=lambda r: r["step"]):
        newest[str(rec.get("source", "loop"))] = rec
        for name, (value, higher) in scores(rec).items():
            old = best.get(name)
            if old is None or (value > old[0] if higher else value < old[0]):
                best[name] = [value, rec["step"]]
    return {"records": len(recs), "newest": newest, "best": best}


def describe(rec: dict[str, Any]) -> str:
    """`bits per byte B (CORPUS X, ...); TASK acc A acc_norm N; ...` of one record."""
    parts = []
    bpb = rec.get("bpb")
    if isinstance(bpb, dict) and bpb:
        overall = rec.get("eval_bpb")
        head = f"bits per byte {overall:.4g} " if _finite(overall) else "bits per byte "
        parts.append(head + "(" + ", ".join(f"{k} {v:.4g}" for k, v in bpb.items() if _finite(v)) + ")")
    tasks = rec.get("tasks")
    for name, r in (tasks or {}).items() if isinstance(tasks, dict) else ():
        if isinstance(r, dict) and _finite(r.get("acc")) and _finite(r.get("acc_norm")):
            parts.append(f"{name} acc {r['acc']:.4f} acc_norm {r['acc_norm']:.4f}")
    return "; ".join(parts) or "no figures"


def render(summ: dict[str, Any]) -> list[str]:
    lines = [f"evaluation ({FILE}, {summ['records']} records):"]
    for source, rec in summ["newest"].items():
        lines.append(f"  step {rec['step']} ({source}): {describe(rec)}")
    if summ["best"]:
        lines.append(
            "  best: " + ", ".join(f"{k} {v:.4g} at step {s}" for k, (v, s) in sorted(summ["best"].items()))
        )
    return lines
