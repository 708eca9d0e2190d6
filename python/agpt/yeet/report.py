"""Names, `--min-success`, and the report: what a job log and the failover loop read after a yeet.

Hosts are reported as the hostfile spells them, because the failover loop matches `DEST/.yeet-failed-hosts`
against its own host lists line by line; a node that calls itself `x1000c0s0b0n0` while the hostfile says
`x1000c0s0b0n0.hsn.cm.site` must still match.
"""

from __future__ import annotations

import math
import os
import socket
import statistics
from collections.abc import Sequence
from pathlib import Path

from agpt import numeric, rundir
from agpt.errors import BadInput
from agpt.textfile import read_utf8
from agpt.yeet.node import NodeResult

DETAIL_MAX = 64  # above this many nodes, report a summary and the slowest, not every node


def node_name() -> str:
    """This node's name for reports: AGPT_YEET_HOST, else Slurm's node name, else the hostname."""
    return os.environ.get("AGPT_YEET_HOST") or os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def read_hostfile(path: Path) -> list[str]:
    """Hosts, one per line (agpt.rundir.parse_hostfile: a `host slots=N` or `host:N` tail is ignored),
    de-duplicated, in order."""
    text = read_utf8(path, f"--hostfile {path}")
    # A host becomes an ssh argument: the shared rule refuses anything but host-name characters, and a
    # leading '-' (it would read as an option).
    hosts = rundir.parse_hostfile(text.splitlines(), where=f"--hostfile {path}")
    if not hosts:
        raise BadInput(f"--hostfile {path}: no hosts in it")
    return hosts


def spell(name: str, hosts: Sequence[str]) -> str:
    """NAME as the hostfile spells it: exact, else the entry that shares its first DNS label."""
    if not hosts or name in hosts:
        return name
    short = name.split(".", 1)[0]
    for h in hosts:
        hs = h.split(".", 1)[0]
        if hs == short or hs.removesuffix("-hsn0") == short or short.removesuffix("-hsn0") == hs:
            return h
    return name


def render_dest(template: str, *, rank: int, host: str) -> Path:
    """DEST with `{rank}` and `{host}` filled in (tests stage several trees on one machine this way)."""
    return Path(os.path.abspath(template.replace("{rank}", str(rank)).replace("{host}", host)))


def parse_min_success(text: str | None) -> tuple[str, float] | None:
    """`--min-success N` (a count) or `F` (a fraction 0<F<=1, or a percentage such as `90%`)."""
    if text is None:
        return None
    raw = text.strip()
    try:
        if raw.endswith("%"):
            kind, value = "fraction", float(numeric.number(raw[:-1], "--min-success", lo=0, hi=100)) / 100.0
        elif "." in raw:
            kind, value = "fraction", float(numeric.number(raw, "--min-success", lo=0, hi=1))
        else:
            kind, value = "count", float(numeric.whole(raw, "--min-success", maximum=numeric.MAX_NODES))
    except BadInput:
        raise BadInput(f"--min-success {text!r}: expected a count N or a fraction like 0.9") from None
    if kind == "fraction" and not 0.0 < value <= 1.0:
        raise BadInput(f"--min-success {text!r}: a fraction must be in (0, 1]")
    if kind == "count" and value < 1:
        raise BadInput(f"--min-success {text!r}: a count must be at least 1")
    return kind, value


def needed(spec: str | None, n: int) -> int:
    """How many of N nodes must succeed for the job to go on (default: all of them)."""
    parsed = parse_min_success(spec)
    if parsed is None:
        return n
    kind, value = parsed
    if kind == "fraction":
        return max(1, math.ceil(value * n - 1e-9))
    if value > n:
        raise BadInput(f"--min-success {spec}: more than the {n} nodes there are")
    return int(value)


def failed_hosts(results: Sequence[NodeResult]) -> list[str]:
    out: list[str] = []
    for r in results:
        if not r.committed and r.host not in out:
            out.append(r.host)
    return out


def report_lines(
    results: Sequence[NodeResult], *, need: int, seconds: float, nbytes: int, verb: str = "staged"
) -> list[str]:
    """Per-node seconds and failures, then one summary line (the last line is the verdict)."""
    results = sorted(results, key=lambda r: r.rank)
    lines: list[str] = []
    ok = [r for r in results if r.committed]
    bad = [r for r in results if not r.committed]
    shown = results if len(results) <= DETAIL_MAX else sorted(ok, key=lambda r: -r.seconds)[:10] + bad
    for r in shown:
        status = "ok" if r.committed else "failed"
        line = f"yeet: rank={r.rank} host={r.host} seconds={r.seconds:.2f} entries={r.files} status={status}"
        if r.error:
            line += f" error={r.error!r}"
        lines.append(line)
    if ok:
        secs = [r.seconds for r in ok]
        lines.append(
            f"yeet: node seconds min={min(secs):.2f} median={statistics.median(secs):.2f} max={max(secs):.2f}"
        )
    rate = nbytes / seconds / 1e6 if seconds > 0 else 0.0
    verdict = "ok" if len(ok) >= need else "FAILED"
    tail = "" if len(ok) >= need else "; DEST left unchanged on every node"
    lines.append(
        f"yeet: {verdict}: {verb} on {len(ok)}/{len(results)} nodes (need {need}) bytes={nbytes} "
        f"seconds={seconds:.2f} MB/s={rate:.1f} failed={','.join(failed_hosts(results)) or '-'}{tail}"
    )
    return lines
