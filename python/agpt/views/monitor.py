"""`agpt monitor RUN_DIR`: a live terminal view of a run for a login node, drawn with rich; `--once`: one frame.

No service: it reads the run directory every `--interval` seconds (agpt.observe.status).  What a person watching
a long run asks first is on it: how far (step and tokens against the target, an ETA), how fast (tokens/s, MFU),
what runs now (job, attempt), what the last failure cost (its class, evidence and recovery clock), and where the
hosts are (active, spare, bad; the oldest heartbeats, which point at a hung rank).  The recovery lines are
`agpt failover report`'s own (failover.report.summary_lines), so the two never disagree.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from agpt import shown
from agpt.failover.report import fmt_duration, fmt_time, summary_lines
from agpt.observe import status as ostatus

HEARTBEATS_SHOWN = 5
HEARTBEATS_EVERY_S = 15.0  # the live view rereads heartbeat/ (a file per node) at most this often


def _n(v: float | None, fmt: str = ",.0f") -> str:
    return "-" if v is None else format(v, fmt)


def _pct(a: float | None, b: float | None) -> str:
    return f" ({100 * a / b:.1f}%)" if a is not None and b else ""


def training_rows(st: ostatus.Status) -> list[tuple[str, str]]:
    if not st.recent:
        return [("training", "no logged step yet (metrics.jsonl)")]
    eta = "-" if st.eta_s is None else fmt_duration(st.eta_s)
    step_s = "" if st.step_s is None else f" at {st.step_s:.3g} s/step"
    mfu = st.num("mfu")
    tps_dev = st.num("tokens_per_s_per_device")
    rows = [
        ("step", f"{_n(st.step)} / {_n(st.target_steps)}{_pct(st.step, st.target_steps)}   ETA {eta}{step_s}"),
        ("tokens", f"{_n(st.num('tokens'))} / {_n(st.target_tokens)}{_pct(st.num('tokens'), st.target_tokens)}"),
        ("throughput", f"{_n(st.tokens_per_s, ',.1f')} tokens/s on {_n(st.num('devices'))} devices "
                       f"({_n(tps_dev, ',.1f')} per device)   MFU {'-' if mfu is None else f'{100 * mfu:.1f}%'}"),
        ("loss", f"{_n(st.num('loss'), '.4f')}" + (f"   held-out {ev:.4f}" if (ev := _eval(st)) is not None else "")),
        ("last step", f"{fmt_duration(st.since_step_s)} ago ({fmt_time(st.num('time'))} UTC)"),
    ]  # fmt: skip
    return rows


def _eval(st: ostatus.Status) -> float | None:
    rec = next((r for r in reversed(st.recent) if "eval_loss" in r), None)
    return None if rec is None else ostatus.rundir.num(rec.get("eval_loss"))


def attempt_rows(st: ostatus.Status) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    cur = st.current
    if cur is not None:
        state = "running" if cur["running"] else "ended"
        rows.append(("attempt", f"job {cur['jobid']}, attempt {cur['attempt']} {state} "
                                f"(its log written {fmt_duration(cur['log_age_s'])} ago)"))  # fmt: skip
    a = st.last_failure
    if a is not None:
        swap = (
            f"; {','.join(a.swapped_out)} -> {','.join(a.swapped_in) or '(none)'} [{a.why}]"
            if a.swapped_out
            else ""
        )
        rows.append(("last failure", f"{a.jobid}.{a.attempt} {a.cls} at step {a.last_step} (rc {a.rc}){swap}, "
                                     f"lost {fmt_duration(a.lost_s)}"))  # fmt: skip
        if a.evidence:
            rows.append(("evidence", a.evidence[:200]))
    if st.report is not None:
        rows += [("", line) for line in summary_lines(st.report)]
    elif not rows:
        rows.append(("attempts", "none recorded (events.jsonl: no failover loop, or no attempt ended yet)"))
    if st.rollbacks:
        rows.append(("rollbacks", str(st.rollbacks)))
    return rows


def host_rows(st: ostatus.Status) -> list[tuple[str, str]]:
    h = st.hosts
    rows = [
        ("hosts", f"active {h['active']}, spare {h['spare']}, bad {h['bad']} (proven), blind {h['blind']}")
    ]
    shrinks = [e for j in (st.report.nodes.values() if st.report is not None else ()) for e in j.shrinks]
    if shrinks:  # the newest shrink (FAILOVER_SHRINK): the node count it left and what that costs
        e = shrinks[-1]
        rows.append(("shrunk", f"job {e.get('jobid')}: {e.get('nodes_before')} -> {e.get('nodes_after')} nodes "
                               f"(job: {e.get('nodes_full')}), {e.get('throughput')} of full throughput"))  # fmt: skip
    current = f"{st.current['jobid']}.{st.current['attempt']}" if st.current else None
    beats = [b for b in st.beats if current is None or b.attempt == current] or st.beats
    if beats:
        shown = ", ".join(f"{b.host} {fmt_duration(max(0.0, st.now - b.mtime))} (step {_n(b.step)} {b.phase})"
                          for b in beats[:HEARTBEATS_SHOWN])  # fmt: skip
        rows.append(("heartbeats", f"oldest first: {shown}" + (f" (+{len(beats) - HEARTBEATS_SHOWN} more)"
                                                                 if len(beats) > HEARTBEATS_SHOWN else "")))  # fmt: skip
    return rows


def frame(st: ostatus.Status, *, boxes: bool = True) -> Any:
    """One frame: a title and three panels of label/value rows (without `boxes`: titled blocks, for a pipe)."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text  # values are plain text: a log line's "[blind]" is not markup

    def panel(title: str, rows: list[tuple[str, str]]) -> Any:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        for k, v in rows:
            grid.add_row(Text(shown.terminal(k)), Text(shown.terminal(v)))
        if not boxes:
            return Group(Text(f"{title}:", style="bold"), Padding(grid, (0, 0, 0, 2), expand=False))
        return Panel(grid, title=title, title_align="left")

    title = Text.assemble(("agpt monitor ", "bold"), shown.terminal(f"{st.run_dir}   {fmt_time(st.now)} UTC"))
    parts: list[Any] = [title, panel("training", training_rows(st)), panel("attempts", attempt_rows(st)),
                        panel("hosts", host_rows(st))]  # fmt: skip
    parts += [Text(shown.terminal(f"note: {n}"), style="dim") for n in st.notes[:5]]
    return Group(*parts)


def run(run_dir: Path, *, once: bool, interval: float, console: Any = None) -> int:
    """Draw until Ctrl-C (or one frame with `once`).  BadInput when RUN_DIR is not a run directory."""
    from rich.console import Console
    from rich.live import Live

    ostatus.check_run_dir(run_dir)
    if console is None:  # a pipe or a file gets whole lines without boxes: a script reads them as they are
        console = Console(highlight=False, width=None if sys.stdout.isatty() else 1000)
    if console.is_terminal and once:
        console.print(frame(ostatus.snapshot(run_dir)))
        return 0
    if not console.is_terminal:  # one frame, no trailing blanks
        with console.capture() as cap:
            console.print(frame(ostatus.snapshot(run_dir), boxes=False))
        sys.stdout.write("".join(line.rstrip() + "\n" for line in cap.get().splitlines()))
        return 0
    st = ostatus.snapshot(run_dir)
    beats_at = time.monotonic()
    try:
        with Live(frame(st), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                fresh = (
                    time.monotonic() - beats_at >= HEARTBEATS_EVERY_S
                )  # one file per node: not every frame
                beats = st.beats
                st = ostatus.snapshot(run_dir, beats=fresh)
                if fresh:
                    beats_at = time.monotonic()
                else:
                    st.beats = beats
                live.update(frame(st), refresh=True)
    except KeyboardInterrupt:
        return 0
