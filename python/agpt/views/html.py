"""`agpt report RUN_DIR --html OUT`: one self-contained page about a run, to mail or attach to a ticket.

No server, no network, no script library: the plots are PNGs inside the page (data: URIs), the style is inline,
and the one small script only counts the plots that loaded (`data-plots-loaded` on <body>, what the headless
browser test reads).  The figures are `agpt failover report`'s (failover.report.build, summary_lines) and the
trainer's metrics.jsonl; the curves reuse `agpt plot`'s loss panel, failures marked the same way.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from agpt import figure, rundir, runplot, safewrite, shown
from agpt.errors import BadInput
from agpt.failover import report as freport
from agpt.observe import status as ostatus

CLASS_COLOURS = {"success": "#2ca02c", "walltime": "#7f7f7f", "node": "#d62728", "hang": "#9467bd",
                 "crash": "#ff7f0e", "system": "#8c564b", "app": "#e377c2"}  # fmt: skip
STYLE = """
body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.5em} h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em} td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;
vertical-align:top} th{background:#f3f3f3} pre{background:#f7f7f7;padding:.6em;font-size:.85em;white-space:pre-wrap}
img{max-width:100%;border:1px solid #eee} .note{color:#777;font-size:.85em}
"""
SCRIPT = """window.addEventListener('load',function(){var n=0;for(var i of document.images){
if(i.complete&&i.naturalWidth>0)n++}document.body.setAttribute('data-plots-loaded',n)});"""


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _pyplot() -> Any:
    return figure.pyplot()


def timeline_png(rep: freport.Report) -> str | None:
    """One bar per attempt on the wall clock, coloured by its class; the gaps are relaunches and queue waits."""
    rows = [a for a in rep.attempts if a.started is not None and a.ended is not None]
    if not rows:
        return None
    plt = _pyplot()
    t0 = min(a.started for a in rows if a.started is not None)
    unit, div = _unit(max(a.ended for a in rows if a.ended is not None) - t0)
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.4))
    for i, a in enumerate(rows):
        assert a.started is not None and a.ended is not None
        ax.barh(
            i,
            (a.ended - a.started) / div,
            left=(a.started - t0) / div,
            color=CLASS_COLOURS.get(a.cls, "#1f77b4"),
        )
        ax.text(
            (a.ended - t0) / div,
            i,
            f" {a.cls} on {a.nodes or '?'} nodes {runplot.swap_text(_swapped(a))}",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(range(len(rows)), [f"{a.jobid}.{a.attempt}" for a in rows])
    ax.invert_yaxis()
    ax.set_xlabel(f"{unit} since the first attempt started")
    ax.set_title("jobs and attempts")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def _unit(span_s: float) -> tuple[str, float]:
    """Seconds, minutes or hours for a time axis of this span."""
    return ("seconds", 1.0) if span_s < 600 else ("minutes", 60.0) if span_s < 36000 else ("hours", 3600.0)


def _swapped(a: freport.AttemptRow) -> dict[str, Any]:
    return {"out": a.swapped_out, "in": a.swapped_in, "blind": a.blind}


def curves_png(run_dir: Path) -> str | None:
    """Loss (agpt plot's panel) and tokens/s per device against the step, failures marked on both."""
    curve = runplot.read_run(run_dir)
    if not curve.loss:
        return None
    plt = _pyplot()
    xs, ys = runplot.series(curve.metrics, "step", "tokens_per_s_per_device")
    if not xs:  # no metrics.jsonl (a trainer of its own): the loss panel alone
        fig, ax_loss = plt.subplots(figsize=(11, 4.5))
        runplot.loss_panel(ax_loss, curve)
        runplot.nodes_panel(ax_loss, curve)
        fig.tight_layout()
        return _png(fig)
    fig, (ax_loss, ax_tps) = plt.subplots(2, 1, figsize=(11, 8), sharex=True)
    runplot.loss_panel(ax_loss, curve)
    ax_loss.set_title("loss, failures and recoveries")
    ax_tps.plot(xs, ys, color="#ff7f0e", lw=1.4)
    for ev in curve.events:
        cls = str(ev.get("class") or "")
        if ev.get("event") in (None, "attempt") and cls not in ("", "success") and "verdict" not in ev:
            step = ev.get("last_step")
            if isinstance(step, int | float):
                ax_tps.axvline(
                    float(step), color="#7f7f7f" if cls == "walltime" else "#d62728", ls="--", lw=1.2
                )
    runplot.nodes_panel(ax_tps, curve)
    ax_tps.set_xlabel("step")
    ax_tps.set_ylabel("tokens/s per device")
    ax_tps.set_title("throughput (dashed: failures and hand-overs)")
    ax_tps.grid(alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def goodput_parts(rep: freport.Report) -> list[tuple[str, float]]:
    """Where the wall time of the attempts went, in seconds: training kept, training lost after the last
    checkpoints, between attempts (detection, backoff, relaunch), and the rest (start-up, saves, logging)."""
    t = rep.totals()
    wall = t.get("wall_s")
    ratio = (rep.goodput or {}).get("effective_ratio")
    if not wall:
        return []
    kept = ratio * wall if ratio is not None else None
    lost = t.get("lost_s") or 0.0
    between = t.get("between_attempts_s") or 0.0
    parts = [("training kept", kept)] if kept is not None else []
    parts += [("lost after the last checkpoints", lost), ("between attempts", between)]
    rest = wall - sum(v for _, v in parts if v is not None)
    parts.append(
        ("start-up, saves and the rest" if kept is not None else "in attempts (not split)", max(0.0, rest))
    )
    return [(k, float(v)) for k, v in parts if v is not None]


def goodput_png(parts: list[tuple[str, float]]) -> str | None:
    if not parts:
        return None
    plt = _pyplot()
    unit, div = _unit(sum(v for _, v in parts))
    fig, ax = plt.subplots(figsize=(11, 2.2))
    left = 0.0
    colours = ["#2ca02c", "#d62728", "#ff7f0e", "#c7c7c7"]
    for (name, v), c in zip(parts, colours, strict=False):
        ax.barh(0, v / div, left=left / div, color=c, label=f"{name} {freport.fmt_duration(v)}")
        left += v
    ax.set_yticks([])
    ax.set_xlabel(f"{unit} of wall time over the attempts")
    ax.set_title("where the attempts' wall time went")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.15), ncol=4, fontsize=8, frameon=False)
    fig.tight_layout()
    return _png(fig)


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(uri: str | None, alt: str, why: str) -> str:
    if uri is None:
        return f'<p class="note">no {html.escape(alt)}: {html.escape(why)}</p>'
    return f'<p><img alt="{html.escape(alt)}" src="{uri}"></p>'


def _failure_rows(st: ostatus.Status) -> list[list[str]]:
    out = []
    for a in st.failures:
        swap = (
            f"{','.join(a.swapped_out)} -> {','.join(a.swapped_in) or '(none)'} [{a.why}]"
            if a.swapped_out
            else "-"
        )
        out.append([f"{a.jobid}.{a.attempt}", a.cls, "-" if a.rc is None else str(a.rc), str(a.last_step), swap,
                    a.evidence or "(no line named a host)"])  # fmt: skip
    return out


def page(run_dir: Path) -> str:
    st = ostatus.snapshot(run_dir)
    rep = st.report
    from agpt.views.monitor import training_rows  # the monitor's training figures, the same words

    parts = [f"<h1>agpt report: {html.escape(str(st.run_dir))}</h1>",
             f'<p class="note">written {freport.fmt_time(st.now)} UTC from the run directory</p>',
             "<h2>Training</h2>", _table(["", ""], [list(r) for r in training_rows(st)])]  # fmt: skip
    if rep is None:
        parts.append('<p class="note">no events.jsonl: this run has no failover record yet</p>')
    else:
        parts += [
            "<h2>Summary</h2>",
            f"<pre>{html.escape(chr(10).join(freport.summary_lines(rep)))}</pre>",
            "<h2>Timeline of jobs and attempts</h2>",
            _img(timeline_png(rep), "timeline", "no attempt ended"),
            _table([h.lower() for h in freport.HEADER], [list(freport.row_cells(a)) for a in rep.attempts]),
        ]
        if rep.jobs:
            parts.append(_table(["job", "started", "ended", "verdict", "next"], [
                [str(j.get("jobid")), freport.fmt_time(rundir.num(j.get("started"))),
                 freport.fmt_time(rundir.num(j.get("ended"))), str(j.get("verdict", "?")), str(j.get("next_jobid") or "-")]
                for j in rep.jobs]))  # fmt: skip
        parts += ["<h2>Failures and their evidence</h2>",
                  _table(["attempt", "class", "rc", "last step", "swap", "evidence"], _failure_rows(st))
                  if st.failures else '<p class="note">no failure</p>']  # fmt: skip
        if rep.bad:
            parts.append(_table(["host", "time (UTC)", "job", "evidence"], [
                [b["host"], freport.fmt_time(b["time"]), b["jobid"] or "?", "blind" if b["blind"] else b["evidence"]]
                for b in rep.bad]))  # fmt: skip
    parts += ["<h2>Loss and throughput</h2>", _img(curves_png(st.run_dir), "loss and throughput curves",
                                                  "no step=N loss=X line and no metrics.jsonl")]  # fmt: skip
    if rep is not None:
        gp = goodput_parts(rep)
        parts += ["<h2>Goodput</h2>", _img(goodput_png(gp), "goodput breakdown", "no attempt with a start and end"),
                  _table(["where the time went", "duration"], [[k, freport.fmt_duration(v)] for k, v in gp])]  # fmt: skip
    parts += [f'<p class="note">note: {html.escape(n)}</p>' for n in st.notes]
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>agpt report: "
            f"{html.escape(st.run_dir.name)}</title><style>{STYLE}</style><script>{SCRIPT}</script></head>"
            f"<body>{''.join(parts)}</body></html>\n")  # fmt: skip


def write(run_dir: Path, out: Path) -> Path:
    """Write the page (via a temporary name); BadInput when RUN_DIR is not a run directory."""
    rundir.refuse_own_file(out, run_dir, "--html")
    text = shown.text(page(Path(run_dir)))  # a run directory's name need not be UTF-8
    try:
        safewrite.replace(out, text)
    except safewrite.WriteError as e:
        raise BadInput(f"--html {e}") from None
    return out
