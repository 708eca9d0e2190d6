"""A run's loss curve with its failures and recoveries marked, as a PNG.

Reads what every run directory already has (docs/contract.md): the progress lines in attempts/*.log
(`step=N loss=X ...`, with or without a launcher's rank or host prefix) and events.jsonl (one object
per attempt end and per stop).  Each failed attempt becomes a red dashed line at its last step,
labelled with its class and the hosts swapped; chain hand-overs (walltime, resubmit) are grey.
When the trainer's metrics.jsonl is there, three more panels show loss against tokens consumed,
tokens per second per device and MFU (docs/contract.md), with the nodes each attempt ran on when a shrink
(FAILOVER_SHRINK) changed them; when eval.jsonl is there, two more show bits
per byte per held-out corpus and each task's accuracy (in the loop, and lm-eval's on exports), with
every eval_regression of health.jsonl marked (docs/eval.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agpt import figure, rundir, safewrite, shown
from agpt.errors import BadInput
from agpt.evals import records
from agpt.train import health as thealth
from agpt.train import metrics as tmetrics

_STEP_RE = re.compile(rb"\bstep[=:] ?([0-9]+)\b.*?\bloss[=:] ?([-+0-9.eEnaif]+)")


@dataclass(kw_only=True, slots=True)
class RunCurve:
    """Loss per step (the last value seen wins: a replayed step after a resume overwrites) and events."""

    loss: dict[int, float] = field(default_factory=dict)
    events: list[dict[str, object]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)  # eval.jsonl
    alarms: list[dict[str, Any]] = field(default_factory=list)  # eval_regression events of health.jsonl


def _attempt_order(path: Path) -> tuple[str, int]:
    stem = path.name.removesuffix(".log")
    job, _, n = stem.rpartition(".")
    return (job, int(n) if n.isdigit() else 0)


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def read_run(run_dir: Path) -> RunCurve:
    if not run_dir.is_dir():
        raise BadInput(f"{run_dir}: no such run directory")
    curve = RunCurve()
    logs = sorted((run_dir / "attempts").glob("*.log"), key=lambda p: (_mtime(p), _attempt_order(p)))
    for log in logs:
        try:
            fh = rundir.open_regular(log)
        except OSError as e:  # a FIFO, a device, a dangling link: a note, never a block or a traceback
            rundir.note(f"{log}: skipped ({e.strerror or e})")
            continue
        with fh:
            for line in fh:
                m = _STEP_RE.search(line)
                if not m:
                    continue
                try:
                    curve.loss[int(m.group(1))] = float(m.group(2))
                except ValueError:
                    continue
    events = run_dir / "events.jsonl"
    if events.is_file():  # a torn or unreadable line is skipped with a note (docs/contract.md)
        curve.events.extend(rundir.read_jsonl(events))
    curve.metrics = tmetrics.read(run_dir / tmetrics.FILE)
    curve.evals = records.read(run_dir)
    health = run_dir / thealth.EVENTS
    if health.is_file():
        curve.alarms = [h for h in rundir.read_jsonl(health) if h.get("event") == "eval_regression"]
    if not curve.loss:  # a run started by hand (no attempt logs): the trainer's own record
        for rec in curve.metrics:
            if isinstance(rec.get("loss"), int | float):
                curve.loss[rec["step"]] = float(rec["loss"])
    return curve


def swap_text(swapped: Any) -> str:
    """`swap n3->n5` (or `blind swap ...`) from an event's `swapped`: the loop's {"out", "in", "blind"} record,
    or a plain list of hosts (anything else, a record of the wrong shape, shows no swap)."""
    if isinstance(swapped, dict):
        out = _host_list(swapped.get("out"))
        if not out:
            return ""
        new = _host_list(swapped.get("in"))
        return ("blind swap " if swapped.get("blind") else "swap ") + out + (f"->{new}" if new else "")
    if isinstance(swapped, list) and swapped:
        return "swap " + _host_list(swapped)
    return ""


def _host_list(hosts: Any) -> str:
    return ",".join(str(h) for h in hosts) if isinstance(hosts, list) else ""


def plot_run(run_dir: Path, out: Path, *, title: str | None = None) -> Path:
    """Write the PNG and return its path."""
    plt = figure.pyplot()

    curve = read_run(run_dir)
    if not curve.loss:
        raise BadInput(f"{run_dir}/attempts: no `step=N loss=X` lines to plot")
    if curve.metrics:
        rows = 3 if curve.evals else 2
        fig, axes = plt.subplots(rows, 2, figsize=(14, 4.5 * rows), dpi=110)
        ax = axes[0][0]
        _metric_panels(axes[0][1], axes[1][0], axes[1][1], curve.metrics)
        if curve.evals:
            _eval_panels(axes[2][0], axes[2][1], curve)
    else:
        fig, ax = plt.subplots(figsize=(10, 5), dpi=110)
    loss_panel(ax, curve)
    nodes_panel(ax, curve)
    ax.set_title(shown.text(title or f"{run_dir.name}: loss, failures and recoveries"))
    fig.tight_layout()
    try:  # one way to write a file (agpt.safewrite): a temporary name of its own, never through a link
        safewrite.replace_with(out, lambda f: fig.savefig(f, format="png"))
    finally:
        plt.close(fig)
    return out


def series(records: list[dict[str, Any]], x: str, y: str) -> tuple[list[float], list[float]]:
    pairs = [
        (float(r[x]), float(r[y]))
        for r in records
        if isinstance(r.get(x), int | float) and isinstance(r.get(y), int | float)
    ]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _metric_panels(ax_tok: Any, ax_tps: Any, ax_mfu: Any, records: list[dict[str, Any]]) -> None:
    """Loss against tokens consumed, tokens/s per device and MFU against step."""
    xs, ys = series(records, "tokens", "loss")
    ax_tok.plot(xs, ys, color="#1f77b4", lw=1.4)
    xs, ys = series(records, "tokens", "eval_loss")
    if xs:
        ax_tok.plot(xs, ys, "o-", color="#9467bd", lw=1.2, ms=3, label="held-out")
        ax_tok.legend(loc="upper right")
    ax_tok.set_xlabel("tokens consumed")
    ax_tok.set_ylabel("loss")
    ax_tok.set_title("loss against tokens")
    xs, ys = series(records, "step", "tokens_per_s_per_device")
    ax_tps.plot(xs, ys, color="#ff7f0e", lw=1.4)
    ax_tps.set_xlabel("step")
    ax_tps.set_ylabel("tokens/s per device")
    ax_tps.set_title("throughput per device")
    if len({r.get("devices") for r in records}) > 1:  # a shrink: what the whole job trained, on the right
        total = [(float(r["step"]), float(r["tokens_per_s_per_device"]) * float(r["devices"])) for r in records
                 if all(isinstance(r.get(k), int | float) for k in ("step", "tokens_per_s_per_device", "devices"))]  # fmt: skip
        twin = ax_tps.twinx()
        twin.plot([t[0] for t in total], [t[1] for t in total], color="#17becf", lw=1.2, ls="--")
        twin.set_ylim(0, max((t[1] for t in total), default=1.0) * 1.2)
        twin.set_ylabel("tokens/s, all devices (dashed)", color="#17becf")
    xs, ys = series(records, "step", "mfu")
    if xs:
        ax_mfu.plot(xs, [100 * y for y in ys], color="#2ca02c", lw=1.4)
    else:
        ax_mfu.text(0.5, 0.5, "no MFU: SITE_PEAK_TFLOPS not set", ha="center", va="center",
                    transform=ax_mfu.transAxes)  # fmt: skip
    ax_mfu.set_xlabel("step")
    ax_mfu.set_ylabel("MFU (%)")
    ax_mfu.set_title("model FLOPs utilisation")
    for a in (ax_tok, ax_tps, ax_mfu):
        a.grid(alpha=0.3)


def _eval_panels(ax_bpb: Any, ax_acc: Any, curve: RunCurve) -> None:
    """Bits per byte per corpus, and accuracy per task (solid: in the loop; markers: lm-eval on exports)."""
    loop = sorted((r for r in curve.evals if r.get("source", "loop") == "loop"), key=lambda r: r["step"])
    for corpus in sorted({c for r in loop for c in (r.get("bpb") or {})}):
        pts = [
            (r["step"], r["bpb"][corpus])
            for r in loop
            if isinstance((r.get("bpb") or {}).get(corpus), int | float)
        ]
        ax_bpb.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3, lw=1.3, label=corpus)
    ax_bpb.set_title("held-out bits per byte")
    ax_bpb.set_ylabel("bits per byte")
    for name in sorted({t for r in curve.evals for t in (r.get("tasks") or {})}):
        for source, style in (("loop", "o-"), ("lm-eval", "s"), ("agpt", "^")):
            pts = [
                (r["step"], r["tasks"][name]["acc_norm"])
                for r in curve.evals
                if r.get("source", "loop") == source
                and isinstance(((r.get("tasks") or {}).get(name) or {}).get("acc_norm"), int | float)
            ]
            if pts:
                pts.sort()
                label = name if source == "loop" else f"{name} ({source}, export)"
                ax_acc.plot([p[0] for p in pts], [p[1] for p in pts], style, ms=4, lw=1.3, label=label)
        chance = next(
            (r["tasks"][name].get("chance") for r in curve.evals if name in (r.get("tasks") or {})), None
        )
        if isinstance(chance, int | float):
            ax_acc.axhline(chance, color="#7f7f7f", ls=":", lw=1)
    ax_acc.set_title("task accuracy (acc_norm; dotted: chance)")
    ax_acc.set_ylim(0, 1)
    ax_acc.set_ylabel("accuracy")
    for a in (ax_bpb, ax_acc):
        for i, ev in enumerate(curve.alarms):  # the regression alarm (health.jsonl)
            if isinstance(ev.get("step"), int | float):
                a.axvline(
                    float(ev["step"]),
                    color="#d62728",
                    ls="--",
                    lw=1.2,
                    label=None if i else "eval regression",
                )
        a.set_xlabel("step")
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(loc="best", fontsize=8)


def node_spans(events: list[dict[str, Any]]) -> list[tuple[float, float, int]]:
    """(first step, last step, nodes) of every attempt that logged steps, from events.jsonl's `hosts`."""
    out = []
    for ev in events:
        first, last, hosts = (
            rundir.num(ev.get("first_step")),
            rundir.num(ev.get("last_step")),
            ev.get("hosts"),
        )
        if (
            ev.get("event") == "attempt"
            and isinstance(hosts, list)
            and first is not None
            and last is not None
        ):
            out.append((first, last, len(hosts)))
    return out


def nodes_panel(ax: Any, curve: RunCurve) -> None:
    """The nodes each attempt trained on (a right-hand axis over AX's steps) and each shrink with the throughput
    it kept; drawn only when the node count changed (FAILOVER_SHRINK)."""
    spans = node_spans(curve.events)
    shrinks = [e for e in curve.events if e.get("event") == "shrink"]
    if len({n for _, _, n in spans}) < 2 and not shrinks:
        return
    twin = ax.twinx()
    for i, (a, b, n) in enumerate(spans):
        twin.hlines(n, a, b, color="#17becf", lw=3, alpha=0.8, label=None if i else "nodes")
    for k, ev in enumerate(curve.events):
        if ev.get("event") != "shrink":
            continue
        after = node_spans(curve.events[k:])  # the attempts from this shrink on: the first one resumed shrunk
        step = after[0][0] if after else (spans[-1][1] if spans else 0.0)
        twin.annotate(f"{ev.get('nodes_before')}->{ev.get('nodes_after')} nodes\n"
                      f"{rundir.num(ev.get('throughput')) or 0:.2f} of full throughput",
                      (step, rundir.integer(ev.get("nodes_after")) or 0),
                      xytext=(4, -22), textcoords="offset points", fontsize=8, color="#17becf")  # fmt: skip
    top = max([n for _, _, n in spans] + [rundir.integer(e.get("nodes_before")) or 0 for e in shrinks] + [1])
    twin.set_ylim(0, top * 1.25)
    twin.set_ylabel("nodes", color="#17becf")
    twin.legend(loc="upper right", fontsize=8)


def loss_panel(ax: Any, curve: RunCurve) -> None:
    """Loss against step with failures (red), hand-overs (grey) and resumes (green) marked."""
    steps = sorted(curve.loss)
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
    ex, ey = series(curve.metrics, "step", "eval_loss")  # held-out loss (eval.interval)
    if ex:
        ax.plot(ex, ey, "o-", color="#9467bd", lw=1.2, ms=3, label="held-out loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    # Lower left: a falling loss curve leaves it empty, and the event labels run along the top.
    ax.legend(loc="lower left")
