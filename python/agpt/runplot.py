"""A run's loss curve with its failures and recoveries marked, as a PNG.

Reads what every run directory already has (CONTRACT.md): the progress lines in attempts/*.log
(`step=N loss=X ...`, with or without a launcher's rank or host prefix) and events.jsonl (one object
per attempt end and per stop).  Each failed attempt becomes a red dashed line at its last step,
labelled with its class and the hosts swapped; chain hand-overs (walltime, resubmit) are grey.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agpt.errors import BadInput

_STEP_RE = re.compile(rb"\bstep[=:] ?([0-9]+)\b.*?\bloss[=:] ?([-+0-9.eEnaif]+)")


@dataclass(kw_only=True, slots=True)
class RunCurve:
    """Loss per step (the last value seen wins: a replayed step after a resume overwrites) and events."""

    loss: dict[int, float] = field(default_factory=dict)
    events: list[dict[str, object]] = field(default_factory=list)


def _attempt_order(path: Path) -> tuple[str, int]:
    stem = path.name.removesuffix(".log")
    job, _, n = stem.rpartition(".")
    return (job, int(n) if n.isdigit() else 0)


def read_run(run_dir: Path) -> RunCurve:
    if not run_dir.is_dir():
        raise BadInput(f"{run_dir}: no such run directory")
    curve = RunCurve()
    logs = sorted((run_dir / "attempts").glob("*.log"), key=lambda p: (p.stat().st_mtime, _attempt_order(p)))
    for log in logs:
        with log.open("rb") as fh:
            for line in fh:
                m = _STEP_RE.search(line)
                if not m:
                    continue
                try:
                    curve.loss[int(m.group(1))] = float(m.group(2))
                except ValueError:
                    continue
    events = run_dir / "events.jsonl"
    if events.is_file():
        for n, text in enumerate(events.read_text(errors="replace").splitlines(), 1):
            if not text.strip():
                continue
            try:
                curve.events.append(json.loads(text))
            except json.JSONDecodeError as exc:
                raise BadInput(f"{events}:{n}: not JSON ({exc.msg})") from exc
    return curve


def swap_text(swapped: Any) -> str:
    """`swap n3->n5` (or `blind swap ...`) from an event's `swapped`: the loop's {"out", "in", "blind"} record,
    or a plain list of hosts."""
    if isinstance(swapped, dict):
        out = ",".join(str(h) for h in swapped.get("out") or [])
        if not out:
            return ""
        new = ",".join(str(h) for h in swapped.get("in") or [])
        return ("blind swap " if swapped.get("blind") else "swap ") + out + (f"->{new}" if new else "")
    if isinstance(swapped, list) and swapped:
        return "swap " + ",".join(str(h) for h in swapped)
    return ""


def plot_run(run_dir: Path, out: Path, *, title: str | None = None) -> Path:
    """Write the PNG and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = read_run(run_dir)
    if not curve.loss:
        raise BadInput(f"{run_dir}/attempts: no `step=N loss=X` lines to plot")
    steps = sorted(curve.loss)
    fig, ax = plt.subplots(figsize=(10, 5), dpi=110)
    ax.plot(steps, [curve.loss[s] for s in steps], color="#1f77b4", lw=1.6, label="loss")
    ymax = max(curve.loss.values())
    seen_labels: set[str] = set()
    after_failure = False
    n_labels = 0
    for ev in curve.events:
        if ev.get("event") == "clock":  # the trainer's recovery clock, not an attempt
            continue
        first = ev.get("first_step")
        if after_failure and isinstance(first, int | float):
            lbl = "resumed"
            ax.axvline(
                float(first), color="#2ca02c", ls=":", lw=1.2, label=None if lbl in seen_labels else lbl
            )
            seen_labels.add(lbl)
        after_failure = str(ev.get("class") or "") not in ("", "success") and "verdict" not in ev
        cls = str(ev.get("class") or "")
        if "verdict" in ev or cls in ("", "success"):
            continue
        step = ev.get("last_step")
        x = float(step) if isinstance(step, int | float) else float(steps[0])
        color = "#7f7f7f" if cls in ("walltime",) else "#d62728"
        label = "chain hand-over" if color == "#7f7f7f" else "failure"
        ax.axvline(x, color=color, ls="--", lw=1.2, label=None if label in seen_labels else label)
        seen_labels.add(label)
        text = f"{cls}" + (f"\n{swap_text(ev.get('swapped'))}" if swap_text(ev.get("swapped")) else "")
        # Events a few steps apart would print over each other: stagger the labels down the plot.
        ax.annotate(
            text,
            (x, ymax),
            xytext=(3, -4 - 24 * (n_labels % 4)),
            textcoords="offset points",
            fontsize=8,
            va="top",
            color=color,
        )
        n_labels += 1
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title or f"{run_dir.name}: loss, failures and recoveries")
    ax.grid(alpha=0.3)
    # Lower left: a falling loss curve leaves it empty, and the event labels run along the top.
    ax.legend(loc="lower left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(out)
    return out
