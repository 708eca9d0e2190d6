"""`--transport ssh`: a greedy fan-out tree for when no MPI is at hand.

The tarball goes from the head to a first few nodes; every node that has verified its copy becomes a source
too, so the number of copies in flight grows geometrically instead of saturating one head node's link (the
reference's 128-thread pool on one head node does exactly that past a few hundred nodes).  Rules:

- at most `fanout` (8) concurrent outbound copies per source; a new target goes to the least-busy source;
- a source sends to its child itself (`ssh SOURCE "ssh CHILD ... < tarball"`): the head only holds control
  connections, never the bytes, once the first wave is out;
- each copy is checked with sha256 on arrival before the node serves others; per-target timeout and retries
  (from another source when one is free); a source that fails twice in a row is retired;
- after arrival, the node extracts (same safe, atomic staging as every transport) while it already serves.

Nodes commit independently here (there is no collective to agree first), so `--min-success` sets the exit
code and the failed-host list, not whether the healthy nodes keep their new DEST.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from agpt import safewrite
from agpt.yeet.node import FAILED_HOSTS, NodeResult
from agpt.yeet.pack import Tarball, resolve_source
from agpt.yeet.report import failed_hosts, needed, node_name, render_dest, report_lines, spell
from agpt.yeet.settings import YeetSettings

HEAD = ""  # the source name of the head node itself
DEFAULT_SSH = "ssh -o BatchMode=yes -o ConnectTimeout=20"
MAX_EXTRACTS = 64  # concurrent control connections for extraction from the head


def ssh_argv() -> list[str]:
    return shlex.split(os.environ.get("AGPT_YEET_SSH") or DEFAULT_SSH)


def stage_file(dest: Path, sha256: str) -> Path:
    """Where a node keeps the tarball it received (node-local, beside DEST) so that it can serve it."""
    return dest.parent / f".{dest.name}.yeet-{sha256[:16]}.tar.zst"


def receive_command(dest: Path, tb: Tarball) -> str:
    """The shell command a target runs to take the tarball on stdin, check it, and keep it."""
    f = shlex.quote(str(stage_file(dest, tb.sha256)))
    parent = shlex.quote(str(dest.parent))
    return (
        f'mkdir -p {parent} && t={f}.part.$$ && cat > "$t" && '
        f'if echo "{tb.sha256}  $t" | sha256sum -c --status; then mv -f "$t" {f}; '
        f'else rm -f "$t"; echo "yeet: tarball digest mismatch on arrival" >&2; exit 3; fi'
    )


def extract_command(dest: Path, host: str, tb: Tarball, check: str | None) -> str:
    """The command a node runs to stage its received tarball into DEST (same Python and package as here)."""
    pkg_root = Path(__file__).resolve().parents[2]
    argv = [
        "env",
        f"PYTHONPATH={pkg_root}",
        sys.executable,
        "-m",
        "agpt.yeet.remote",
        "--tarball",
        str(stage_file(dest, tb.sha256)),
        "--dest",
        str(dest),
        "--host",
        host,
        "--sha256",
        tb.sha256,
        "--size",
        str(tb.size),
        "--compression",
        tb.compression,
        "--members",
        str(tb.members),
    ]
    if check:
        argv += ["--check", check]
    return shlex.join(argv)


@dataclass(kw_only=True, slots=True)
class _Tree:
    """The scheduler's state: who can serve, how busy, what is left."""

    fanout: int
    pending: deque[str]
    active: dict[str, int] = field(default_factory=lambda: {HEAD: 0})
    strikes: dict[str, int] = field(default_factory=dict)
    tries: dict[str, int] = field(default_factory=dict)

    def free_source(self) -> str | None:
        best = None
        for src, n in self.active.items():  # insertion order: older sources win ties
            if n < self.fanout and (best is None or n < self.active[best]):
                best = src
        return best


def run(s: YeetSettings, *, dest: str, hosts: list[str], emit: Callable[[str], None]) -> int:
    """Fan the tarball out over ssh to every host; return the exit code."""
    t0 = time.monotonic()
    need = needed(s.min_success, len(hosts))
    tb = resolve_source(s.src, progress=emit)
    dests = {h: render_dest(dest, rank=i, host=h) for i, h in enumerate(hosts)}
    ssh = ssh_argv()
    timeout = s.timeout_s
    emit(f"yeet: fanning out {tb.path} bytes={tb.size} to {len(hosts)} hosts over ssh (fanout {s.fanout})")
    tree = _Tree(fanout=s.fanout, pending=deque(hosts))
    started: dict[str, float] = {}
    results: dict[str, NodeResult] = {}

    def transfer(src: str, tgt: str) -> tuple[int, str]:
        recv = receive_command(dests[tgt], tb)
        if src == HEAD:
            argv = [*ssh, tgt, recv]
            with open(tb.path, "rb") as f:
                return _call(argv, timeout, stdin=f)
        inner = f"{shlex.join([*ssh, tgt, recv])} < {shlex.quote(str(stage_file(dests[src], tb.sha256)))}"
        return _call([*ssh, src, inner], timeout)

    def extract(tgt: str) -> tuple[int, str]:
        return _call([*ssh, tgt, extract_command(dests[tgt], tgt, tb, s.check)], timeout)

    inflight: dict[Future[tuple[int, str]], tuple[str, str, str]] = {}
    with ThreadPoolExecutor(max_workers=256) as copies, ThreadPoolExecutor(max_workers=MAX_EXTRACTS) as exts:
        while tree.pending or inflight:
            while tree.pending:
                src = tree.free_source()
                if src is None:
                    break
                tgt = tree.pending.popleft()
                tree.active[src] += 1
                started.setdefault(tgt, time.monotonic())
                inflight[copies.submit(transfer, src, tgt)] = ("copy", src, tgt)
            if not inflight:
                break
            done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
            for fut in done:
                kind, src, tgt = inflight.pop(fut)
                rc, err = fut.result()
                if kind == "copy":
                    _copied(tree, src, tgt, rc, err, s.retries, results, dests, emit)
                    if rc == 0:
                        inflight[exts.submit(extract, tgt)] = ("extract", src, tgt)
                    continue
                results[tgt] = _extracted(tgt, hosts.index(tgt), dests[tgt], rc, err, started[tgt])
                emit(
                    f"yeet: {tgt} {'ok' if results[tgt].committed else 'FAILED'} "
                    f"({len(results)}/{len(hosts)} done)"
                )
        # every copy is done: the tarballs the nodes kept to serve others only take space now (often RAM)
        holders = [h for h in hosts if h in tree.active or h in tree.strikes]  # every host that received
        for fut in [
            exts.submit(_call, [*ssh, h, f"rm -f {shlex.quote(str(stage_file(dests[h], tb.sha256)))}"], 60.0)
            for h in holders
        ]:
            fut.result()
    final = [results[h] for h in hosts]
    for line in report_lines(
        final, need=need, seconds=time.monotonic() - t0, nbytes=tb.size, verb="staged (ssh)"
    ):
        emit(line)
    bad = failed_hosts(final)
    committed = sum(r.committed for r in final)
    if bad and committed >= need:
        _record_failed(hosts, dests, bad, emit)
    return 0 if committed >= need else 1


def _call(argv: list[str], timeout: float, stdin: IO[bytes] | None = None) -> tuple[int, str]:
    """Run one ssh; (rc, last stderr/stdout lines).  A timeout kills it and counts as a failure."""
    try:
        proc = subprocess.run(
            argv,
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f}s"
    except OSError as exc:
        return 127, f"{argv[0]}: {exc.strerror}"
    out = proc.stdout.decode(errors="replace").strip()
    err = proc.stderr.decode(errors="replace").strip()
    return proc.returncode, out if proc.returncode == 0 else (err or out)[-300:]


def _copied(
    tree: _Tree,
    src: str,
    tgt: str,
    rc: int,
    err: str,
    retries: int,
    results: dict[str, NodeResult],
    dests: dict[str, Path],
    emit: Callable[[str], None],
) -> None:
    """Book a finished copy: the target becomes a source, or is retried, or fails."""
    tree.active[src] -= 1
    if rc == 0:
        tree.active[tgt] = 0
        tree.strikes[src] = 0
        return
    tree.tries[tgt] = tree.tries.get(tgt, 0) + 1
    emit(
        f"yeet: copy {src or 'head'} -> {tgt} failed (try {tree.tries[tgt]}, rc {rc}): {err.splitlines()[-1:]}"
    )
    if src != HEAD:
        tree.strikes[src] = tree.strikes.get(src, 0) + 1
        if tree.strikes[src] >= 2 and tree.active.get(src, 1) == 0:
            del tree.active[src]  # a source that keeps failing stops serving (it still has its own DEST)
    if tree.tries[tgt] <= retries:
        tree.pending.append(tgt)
    else:
        results[tgt] = NodeResult(
            rank=list(dests).index(tgt), host=tgt, dest=str(dests[tgt]), error=f"copy failed: {err[-200:]}"
        )


def _extracted(host: str, rank: int, dest: Path, rc: int, out: str, t_start: float) -> NodeResult:
    result = NodeResult(rank=rank, host=host, dest=str(dest), seconds=time.monotonic() - t_start)
    last = out.strip().splitlines()[-1:] if out else []
    try:
        info = json.loads(last[0]) if last else {}
    except ValueError:
        info = {}
    if rc == 0 and info.get("ok"):
        result.ok = result.committed = True
        result.files = int(info.get("files", 0))
    else:
        result.error = str(info.get("error") or out or f"exit {rc}")[-300:]
    return result


def _record_failed(
    hosts: list[str], dests: dict[str, Path], bad: list[str], emit: Callable[[str], None]
) -> None:
    """Write DEST/.yeet-failed-hosts on this (head) node when it is one of the hosts and was staged."""
    me = spell(node_name(), hosts)
    path = dests[me] / FAILED_HOSTS if me in dests else None
    if path is not None and path.parent.is_dir():
        safewrite.replace(path, "".join(f"{h}\n" for h in bad), sync=False)
        emit(f"yeet: failed hosts recorded in {path}")
    else:
        emit(f"yeet: failed hosts (not recorded: this node is not in the hostfile): {','.join(bad)}")
