"""`agpt failover classify`: what killed one attempt, and which hosts (if any) are proven guilty.

Evidence first, exit codes last.  The failover tool we replace trusted exit codes: it called every rc 143 a
walltime kill, skipped the log when its watchdog fired, and so made 123 blind swaps in 132.  Here:

- walltime is decided by the clock only (`--deadline`, minus a margin), never by a signal number;
- the log is read whatever the exit code (a watchdog kill included): a host named by a node pattern beats a guess;
- the innocent cascade (ranks SIGTERMed or aborted after the first death) is never evidence;
- a host is reported only in the hostfile's spelling, and only when it is one of the job's hosts;
- the log is streamed in bounded memory (gigabytes, any bytes), and a scraper bug degrades to "no evidence"
  with a note instead of killing the recovery loop.

Decision order (the first that holds): rc 0 -> success; killed within the margin of the deadline -> walltime;
hosts of the job named by node patterns -> node (unless they are most of the job: then system when the
scheduler named them, app when every rank saw the same device error); a system pattern -> system; rc 124 (the
watchdog) -> app if every rank raised the same error, else hang; one crash pattern printed by most of the job's
hosts -> app (nodes do not fail together); a crash pattern -> crash; an app error that two ranks (or an
unlabelled log) raised -> app; a collective timeout -> hang; a launcher's exit notice or one rank's lone
exception -> crash; nothing at all -> crash, by the exit code, with a note.  One line counts once, as its
strongest match; a node pattern that names only a rank is placed through the rank->host map learned from the
whole log (launcher labels of every option, srun/PALS/hydra/Open MPI exit lines, torchrun's failure table,
NCCL prefixes), looked up again in the log when no analysed line placed it.  A failed connection's far end
(an address resolved through hosts/ip) that several reporters name leads the suspects; its reporters do not.

Speed: a log is mostly a few line shapes repeated (progress, NCCL INFO).  Each chunk is lowercased with its digits
blanked into line *templates*; only a template never seen before is searched for the patterns' literal needles,
and only lines whose template holds one reach the regexes (tests prove the answers equal those of running every
pattern on every line).

Standard library only: it runs with a plain `python3` when the training environment is what broke.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from agpt.errors import BadInput
from agpt.failover import heartbeats
from agpt.failover import patterns as pat
from agpt.failover.hostmatch import HostMatcher, read_hostfile, read_ipmap
from agpt.rundir import CLASSES as CLASSES
from agpt.rundir import PROGRESS_RE as DEFAULT_PROGRESS_RE
from agpt.rundir import WALLTIME_MARGIN_S as DEFAULT_MARGIN_S

CHUNK_BYTES = 1 << 20
MIB = 1 << 20
HEAD_BYTES = 32 * MIB
DEFAULT_MAX_MB = 256  # FAILOVER_CLASSIFY_MAX_MB: beyond it, the head and the tail of the log are read
LINE_CAP = 4096  # characters of one line that are analysed; the rest of a longer line is skipped
EVIDENCE_CHARS = 400
MAX_EVIDENCE = 20
MAX_KEEP = 32  # hits kept per kind (the counts go on)
MAX_RANKS = 65536
MAX_SIGNATURES = 256
MAX_REPORTERS = 16
LAST_HEARD_LOOKBACK = 64
TEMPLATE_CAP = 512  # longer line templates are searched each time, not remembered
TEMPLATE_BYTES = 16 * MIB  # the templates remembered, in all (bounded memory on any log)
LABEL_KEY_CAP = 256  # a label-only line's prefix longer than this is analysed every time
PROGRESS_WINDOW = 16384
# a line's template: ASCII lowercased, every digit 0 (needles are translated the same way)
_TEMPLATE = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", b"abcdefghijklmnopqrstuvwxyz0000000000")

# Strength of one line's evidence: a line counts once, as its strongest match.
_STRENGTH = {"node": 6, "system": 5, "crash": 4, "app": 3, "hang-hint": 2, "weak": 1, "cascade-ignore": 0}

# Launcher and runtime labels in front of a message, tried repeatedly (`x1000c0s0b0n0: 3: ...`).  Named groups:
# `r` a global rank, `h` a host; a label with neither is only taken off.  The formats, per launcher option, are
# listed with their sources in docs/contract.md (the label-format matrix) and tested one by one.
_H = r"[A-Za-z][\w.-]*"
_LABELS: list[re.Pattern[str]] = [
    re.compile(r"^\s{0,8}(?P<r>\d{1,7}): "),  # srun --label (padded), PALS mpiexec --label
    re.compile(rf"^(?P<h>{_H}) (?P<r>\d{{1,7}}): "),  # PALS --label behind the host: `FQDN RANK: `
    re.compile(rf"^\[(?P<r>\d{{1,7}})@(?P<h>{_H})\] "),  # hydra -prepend-pattern "[%r@%h] "
    re.compile(rf"^\[(?P<h>{_H})@(?P<r>\d{{1,7}})\] "),  # hydra -prepend-pattern "[%h@%r] "
    # Open MPI --tag-output `[jobid,rank]<stdout>:`, PRRTE --output tag-detailed `[ns,rank][host:pid]<stdout>:`
    re.compile(rf"^\[[\w.@:-]+,(?P<r>\d{{1,7}})\]\[(?P<h>{_H}):\d+\]<std(?:out|err|diag)>: ?"),
    re.compile(r"^\[[\w.@:-]+,(?P<r>\d{1,7})\]<std(?:out|err|diag)>: ?"),
    re.compile(r"^\[(?P<r>\d{1,7})\]<std(?:out|err|diag)>: ?"),  # horovodrun `[rank]<stdout>:`
    re.compile(
        r"^\[[A-Z][a-z]{2} [^\]]{8,40}\]<std(?:out|err|diag)>: ?"
    ),  # --timestamp-output `[date]<stdout>:`
    re.compile(r"^\[rank(?P<r>\d{1,7})\]: ?", re.IGNORECASE),  # torch.distributed
    re.compile(r"^\[[a-z_]+\d{1,5}\]: ?"),  # torchrun --tee `[default0]:` (a local rank: taken off only)
    re.compile(r"^\[(?P<r>\d{1,7})\] "),  # hydra -l / -prepend-rank
    re.compile(rf"^\[(?:proxy:[\d:]+|mpiexec)@(?P<h>{_H})\] "),  # hydra's own daemons `[proxy:0:1@host]`
    re.compile(rf"^slurmstepd-(?P<h>{_H}): "),  # slurmstepd on that node
    re.compile(rf"^\[(?P<h>{_H}):\d+\] "),  # Open MPI [host:pid]
    re.compile(rf"^\[(?P<h>{_H})\] "),  # hydra -prepend-pattern "[%h] ", trainers' own
    re.compile(rf"^(?P<h>{_H}):\d+:\d+ (?:\[\d+\] )?"),  # NCCL/RCCL host:pid:tid [dev]
    re.compile(rf"^(?P<h>{_H}): "),  # PALS --label / pdsh / DeepSpeed's pdsh runner `host: `
]


def split_labels(line: str, matcher: HostMatcher) -> tuple[str, str | None, int | None]:
    """(message, host, rank) of a line: the launcher labels in front, resolved to the job's hosts."""
    body = line
    host: str | None = None
    rank: int | None = None
    for _ in range(4):
        for rx in _LABELS:
            m = rx.match(body)
            if not m:
                continue
            gd = m.groupdict()
            h = None
            if gd.get("h") is not None:
                h = matcher.match(gd["h"])
                if h is None:
                    continue
            if gd.get("r") is not None and rank is None:
                rank = int(gd["r"])
            if h is not None and host is None:
                host = h
            body = body[m.end() :]
            break
        else:
            break
    return body, host, rank


@dataclass(kw_only=True, slots=True)
class Hit:
    """One line's evidence, kept only while the bounded stores have room."""

    lineno: int
    pattern: str
    kind: str
    line: str
    hosts: list[str] = field(default_factory=list)
    rank: int | None = None
    reporter: str | None = None
    reporter_rank: int | None = None
    named: bool = False  # the pattern named the host (vs the host that printed the line)

    def brief(self) -> dict[str, Any]:
        d: dict[str, Any] = {"line": self.lineno, "pattern": self.pattern, "kind": self.kind}
        if self.hosts:
            d["hosts"] = self.hosts
        if self.rank is not None:
            d["rank"] = self.rank
        if self.reporter:
            d["reporter"] = self.reporter
        return d


@dataclass(kw_only=True, slots=True)
class Classification:
    """One attempt's verdict: docs/contract.md's four fields, then what a blind swap can use.

    suspect_hosts: hosts the evidence points nearest to, best first (crash lines, then launcher exit notices in
    log order, then the first killed follower); last_heard: the host of the last labelled line; rank_hosts: the
    rank->host map learned from launcher labels.  All in hostfile spelling, all hints, never proof.
    """

    cls: str
    bad_hosts: list[str]
    evidence: list[str]
    last_step: int | None
    first_step: int | None = None
    suspect_hosts: list[str] = field(default_factory=list)
    last_heard: str | None = None
    rank_hosts: dict[int, str] = field(default_factory=dict)
    matches: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    lines: int = 0
    rc: int = 0
    pattern_sets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "class": self.cls,
            "bad_hosts": self.bad_hosts,
            "evidence": self.evidence,
            "last_step": self.last_step,
            "first_step": self.first_step,
            "suspect_hosts": self.suspect_hosts,
            "last_heard": self.last_heard,
            "rank_hosts": {str(k): v for k, v in sorted(self.rank_hosts.items())},
            "rc": self.rc,
            "lines": self.lines,
            "counts": self.counts,
            "matches": self.matches,
            "pattern_sets": self.pattern_sets,
            "notes": self.notes,
        }


@dataclass(slots=True)
class _AppSig:
    first: Hit
    reporters: set[str] = field(default_factory=set)
    unlabeled: bool = False
    min_reporters: int = 1


class _Scanner:
    """Streams a log and keeps bounded evidence; `finish` turns it into a class."""

    def __init__(
        self, patterns: list[pat.Pattern], matcher: HostMatcher, progress: re.Pattern[bytes]
    ) -> None:
        self.patterns = patterns
        self.matcher = matcher
        self.progress = progress
        self.full = any(p.needles is None for p in patterns)
        # Needles are looked for in line *templates*: the line lowercased with every digit made 0.  A big log is
        # a few templates repeated (progress lines, NCCL INFO lines differ only in their numbers), so each chunk
        # costs a translate, a split and set look-ups; only a template never seen before is searched for needles.
        # A line holding a needle still holds it, translated, in its template: the prefilter loses no line.
        needles = sorted(
            {n.encode("utf-8", "replace").translate(_TEMPLATE) for p in patterns for n in (p.needles or ())},
            key=len,
        )
        kept: list[bytes] = []
        for n in needles:  # a needle that contains a kept one adds no line
            if not any(k in n for k in kept):
                kept.append(n)
        self.needles = kept
        # kept needle -> the patterns one of whose needles contains it (a line holding none of them skips them)
        tneedles = [
            [n.encode("utf-8", "replace").translate(_TEMPLATE) for n in (p.needles or ())] for p in patterns
        ]
        self.by_needle: list[tuple[int, ...]] = [
            tuple(i for i, tn in enumerate(tneedles) if any(k in n for n in tn)) for k in kept
        ]
        # patterns whose only effect is the line's launcher labels (info, no named group): a line that only they
        # may match repeats its labels, so it is analysed once per distinct label prefix
        self.label_only = {i for i, p in enumerate(patterns) if p.cls == "info" and not p.groups}
        self.templates: dict[bytes, tuple[tuple[int, ...], int] | None] = {}
        self.hot: set[bytes] = set()
        self._template_bytes = 0
        self.label_seen: set[bytes] = set()
        self.lines = 0
        self.first_step: int | None = None
        self.last_step: int | None = None
        self.rank_map: dict[int, str] = {}
        self.last_label: tuple[str | None, int | None] = (None, None)
        self.counts: dict[str, int] = {k: 0 for k in _STRENGTH}
        self.hits: dict[str, list[Hit]] = {k: [] for k in _STRENGTH}
        self.node_hosts: dict[str, Hit] = {}
        self.node_ranks: dict[int, Hit] = {}
        self.app: dict[str, _AppSig] = {}
        self.suspects: list[tuple[int, int, str | None, int | None]] = []  # (strength, lineno, host, rank)
        self.labeled = False
        self.notes: list[str] = []
        self._outside: set[str] = set()
        self._cascade_seen = False
        self.path: Path | None = None
        self.max_bytes = 0
        self.peer_hits: list[
            tuple[str, str | None, int | None, int]
        ] = []  # (peer, reporter host, rank, line)
        self._row_host: tuple[list[str], int] | None = None
        self._root_cause = -100

    # --- streaming ---------------------------------------------------------------------------------------
    def scan_file(self, path: Path, max_bytes: int = 0) -> None:
        """Stream the log; past max_bytes (0: no limit) read only its head and its tail.

        Time must stay bounded too: the failure and its cascade sit at the end of an attempt's log (the launcher
        tears the job down within seconds, the watchdog fires after silence), and the head holds the launcher's
        rank-to-host lines.  What is skipped is said in a note.
        """
        self.path = path
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if not max_bytes or size <= max_bytes:
                self._scan(f, None, skipping=False)
                return
            head = min(HEAD_BYTES, max_bytes // 8)
            self._scan(f, head, skipping=False)
            f.seek(size - (max_bytes - head))
            self._scan(f, None, skipping=True)  # from the first whole line of the tail
            self.notes.append(
                f"log is {size / MIB:.0f} MiB: read its first {head / MIB:.0f} MiB and last "
                f"{(max_bytes - head) / MIB:.0f} MiB (FAILOVER_CLASSIFY_MAX_MB); line numbers skip the middle"
            )

    def _scan(self, f: Any, limit: int | None, *, skipping: bool) -> None:
        carry = b""
        left = limit
        while True:
            block = f.read(CHUNK_BYTES if left is None else min(CHUNK_BYTES, left))
            if not block:
                break
            if left is not None:
                left -= len(block)
            if skipping:
                nl = block.find(b"\n")
                if nl == -1:
                    continue
                block = block[nl + 1 :]
                skipping = False
            data = carry + block
            cut = data.rfind(b"\n")
            if cut == -1:
                if len(data) >= CHUNK_BYTES:  # one endless line: analyse its head, skip the rest
                    self.feed(data[:LINE_CAP] + b"\n")
                    carry = b""
                    skipping = True
                else:
                    carry = data
                continue
            self.feed(data[: cut + 1])
            carry = data[cut + 1 :]
        if carry and limit is None:  # the last line of a head is cut: dropped, not misread
            self.feed(carry + b"\n")

    def feed(self, chunk: bytes) -> None:
        """Analyse whole lines (the chunk ends with a newline)."""
        chunk = chunk.replace(b"\r", b"\n")  # progress bars redraw with CR: each redraw is a line
        base = self.lines
        self._progress(chunk)
        self._last_label(chunk)
        if self.full:
            olines = chunk.split(b"\n")
            self.lines += len(olines) - 1
            if olines[-1] == b"":
                olines.pop()
            for i, raw in enumerate(olines):
                self.line(_text(raw), base + i + 1, None)
            return
        tlines = chunk.translate(_TEMPLATE).split(b"\n")  # same lengths as the lines: offsets carry over
        self.lines += len(tlines) - 1
        last = len(tlines) - 1 if tlines[-1] == b"" else len(tlines)  # the piece after the final newline
        uniq = set(tlines)
        new = [t for t in uniq if t not in self.templates]
        local = self._learn(new) if new else {}
        hot = uniq & self.hot
        for t, info in local.items():
            if info is not None:
                hot.add(t)
            if len(t) <= TEMPLATE_CAP and self._template_bytes < TEMPLATE_BYTES:
                self._template_bytes += len(t) + 64
                self.templates[t] = info
                if info is not None:
                    self.hot.add(t)
        if not hot:
            return
        if len(hot) <= 8:  # a few hot templates: let list.index walk the lines in C
            where: list[int] = []
            for t in hot:
                i = -1
                try:
                    while True:
                        i = tlines.index(t, i + 1)
                        where.append(i)
                except ValueError:
                    pass
            where.sort()
        else:
            where = [i for i, t in enumerate(tlines) if t in hot]
        pos = 0
        prev = 0
        for i in where:
            if i >= last:
                break
            pos += sum(map(len, tlines[prev:i])) + (i - prev)
            prev = i
            t = tlines[i]
            info = local[t] if t in local else self.templates[t]
            if info is None:
                continue
            idx, label_pos = info
            raw = chunk[pos : pos + len(t)]
            if 0 <= label_pos <= LABEL_KEY_CAP:
                key = raw[:label_pos]
                if key in self.label_seen:
                    continue
                if len(self.label_seen) < MAX_RANKS:
                    self.label_seen.add(key)
            self.line(_text(raw), base + i + 1, [self.patterns[k] for k in idx])

    def _learn(self, new: list[bytes]) -> dict[bytes, tuple[tuple[int, ...], int] | None]:
        """Which needles each new template holds: (candidate pattern indices, label-only needle position or -1)."""
        joined = b"\n".join(new) + b"\n"
        starts: list[int] = []
        pos = 0
        for t in new:
            starts.append(pos)
            pos += len(t) + 1
        found: dict[int, dict[int, int]] = {}  # template index -> kept needle index -> first position
        for k, n in enumerate(self.needles):
            i = joined.find(n)
            while i != -1:
                j = bisect.bisect_right(starts, i) - 1
                hits = found.setdefault(j, {})
                if k not in hits:
                    hits[k] = i - starts[j]
                e = joined.find(b"\n", i)
                if e == -1:
                    break
                i = joined.find(n, e)
        out: dict[bytes, tuple[tuple[int, ...], int] | None] = dict.fromkeys(new)
        for j, hits in found.items():
            idx: set[int] = set()
            for k in hits:
                idx.update(self.by_needle[k])
            label_pos = max(hits[k] + len(self.needles[k]) for k in hits) if idx <= self.label_only else -1
            out[new[j]] = (tuple(sorted(idx)), label_pos)
        return out

    def _progress(self, chunk: bytes) -> None:
        if self.first_step is None:
            for m in self.progress.finditer(chunk):
                self.first_step = _step_of(m)
                if self.first_step is not None:
                    break
        # the last match: looked for in a tail window (from a line start) that doubles until one is found
        size = len(chunk)
        window = PROGRESS_WINDOW
        while True:
            start = 0 if window >= size else chunk.rfind(b"\n", 0, size - window) + 1
            last: re.Match[bytes] | None = None
            for m in self.progress.finditer(chunk, start):
                last = m
            if last is not None or start == 0:
                break
            window *= 4
        if last is not None:
            step = _step_of(last)
            if step is not None:
                self.last_step = step

    def _last_label(self, chunk: bytes) -> None:
        e = len(chunk) - 1 if chunk.endswith(b"\n") else len(chunk)
        for _ in range(LAST_HEARD_LOOKBACK):
            s = chunk.rfind(b"\n", 0, e) + 1
            text = chunk[s:e][:LINE_CAP].decode("utf-8", "replace")
            _, host, rank = split_labels(text, self.matcher)
            if host is not None or rank is not None:
                self.last_label = (host, rank)
                self.labeled = True
                return
            if s == 0:
                return
            e = s - 1

    # --- one line ----------------------------------------------------------------------------------------
    def line(self, text: str, lineno: int, candidates: list[pat.Pattern] | None = None) -> None:
        """Analyse one line; candidates: the patterns the chunk scan's needles allow (None: all)."""
        low = text.lower()
        pool = self.patterns if candidates is None else candidates
        cands = [p for p in pool if p.needles is None or any(n in low for n in p.needles)]
        if not cands:
            return
        body, lhost, lrank = split_labels(text, self.matcher)
        if lhost is not None or lrank is not None:
            self.labeled = True
        if lhost is not None and lrank is not None:
            self._map(lrank, lhost)
        best: tuple[int, pat.Pattern, re.Match[str], str] | None = None
        fallback: tuple[pat.Pattern, re.Match[str]] | None = None
        for p in cands:
            m = p.regex.search(body)
            if m is None:
                continue
            if p.rank_hosts:
                self._map_match(p, m, lhost, lrank)
            if p.table:
                self._table_row(p, m, text, lineno, lhost, lrank)
            if p.cls == "info":
                continue
            if p.fallback:
                fallback = fallback or (p, m)
                continue
            kind = "weak" if (p.cls == "crash" and p.weak) else p.cls
            if best is None or _STRENGTH[kind] > best[0]:
                best = (_STRENGTH[kind], p, m, kind)
        if best is None and fallback is not None:
            p, m = fallback
            kind = "weak" if (p.cls == "crash" and p.weak) else p.cls
            best = (_STRENGTH[kind], p, m, kind)
        if best is None:
            return
        _, p, m, kind = best
        self._record(p, m, kind, text, lineno, lhost, lrank, body)

    def _table_row(
        self, p: pat.Pattern, m: re.Match[str], text: str, lineno: int, lhost: str | None, lrank: int | None
    ) -> None:
        """torchrun's failure table: `host : H` then `rank : R` rows; the first row after `Root Cause`."""
        gd = m.groupdict()
        if p.table == "root-cause":
            self._root_cause = lineno
        elif p.table == "host" and gd.get("host"):
            hosts = [h for h in self.matcher.match_all(gd["host"]) if h]
            self._row_host = (hosts, lineno)
            if hosts and lineno - self._root_cause <= 4:
                hit = Hit(
                    lineno=lineno, pattern=p.id, kind="weak", line=text, reporter=lhost, reporter_rank=lrank
                )
                hit.hosts = hosts[:1]
                self._suspect("weak", hit, lhost, lrank)
                self._keep("weak", hit)
        elif p.table == "rank" and gd.get("rank") and self._row_host is not None:
            hosts, at = self._row_host
            if len(hosts) == 1 and lineno - at <= 3:
                self._map(int(gd["rank"]), hosts[0])

    def _map(self, rank: int, host: str) -> None:
        if rank not in self.rank_map and len(self.rank_map) < MAX_RANKS:
            self.rank_map[rank] = host

    def _map_match(self, p: pat.Pattern, m: re.Match[str], lhost: str | None, lrank: int | None) -> None:
        gd = m.groupdict()
        hosts = self.matcher.match_all(gd["host"]) if gd.get("host") else ([lhost] if lhost else [])
        rank = int(gd["rank"]) if gd.get("rank") else lrank
        if rank is not None and len(hosts) == 1 and hosts[0]:
            self._map(rank, hosts[0])

    def _record(
        self,
        p: pat.Pattern,
        m: re.Match[str],
        kind: str,
        text: str,
        lineno: int,
        lhost: str | None,
        lrank: int | None,
        body: str,
    ) -> None:
        gd = m.groupdict()
        raw_host = gd.get("host")
        named_hosts = self.matcher.match_all(raw_host) if raw_host else []
        rank = int(gd["rank"]) if gd.get("rank") else None
        hit = Hit(
            lineno=lineno, pattern=p.id, kind=kind, line=text, rank=rank, reporter=lhost, reporter_rank=lrank
        )
        if raw_host and not named_hosts and raw_host not in self._outside and len(self._outside) < 16:
            self._outside.add(raw_host)
            self.notes.append(f"line {lineno}: '{raw_host}' is not a host of this job: not reported")
        if kind == "node":
            if raw_host:
                hosts, named = named_hosts, True
            elif p.blame == "reporter" and lhost is not None and rank is None:
                hosts, named = [lhost], False
            else:
                hosts, named = [], rank is not None
            if not hosts:
                pending = rank if rank is not None else (lrank if p.blame == "reporter" else None)
                if pending is not None and not raw_host:
                    hit.rank = pending
                    hit.named = named
                    if pending not in self.node_ranks and len(self.node_ranks) < MAX_RANKS:
                        self.node_ranks[pending] = hit
                    self._keep("node", hit)
                    return
                # a node fault we cannot place (or placed outside the job): something died, no proof of where
                kind = "crash" if not raw_host else "weak"
                hit.kind = kind
                self._suspect(kind, hit, lhost, lrank)
                self._keep(kind, hit)
                return
            hit.hosts = hosts
            hit.named = named
            for h in hosts:
                self.node_hosts.setdefault(h, hit)
            self._keep("node", hit)
            return
        hit.hosts = named_hosts
        if p.peer and len(named_hosts) == 1 and len(self.peer_hits) < MAX_RANKS:
            self.peer_hits.append((named_hosts[0], lhost, lrank, lineno))
        if kind == "app":
            self._app(p, hit, body, lhost, lrank)
            return
        if kind in ("crash", "weak") and not (p.peer and not named_hosts):
            # a lost peer that names no host of the job says nothing against the host that reported it
            self._suspect(kind, hit, lhost, lrank)
        elif kind == "cascade-ignore" and not self._cascade_seen and p.guess:
            # Never evidence; but when nothing else names anyone, the first rank killed (an OOM kill, say)
            # is a better first guess for a blind swap than none.
            before = len(self.suspects)
            self._suspect(kind, hit, lhost, lrank)
            self._cascade_seen = len(self.suspects) > before
        self._keep(kind, hit)

    def _keep(self, kind: str, hit: Hit) -> None:
        self.counts[kind] += 1
        if len(self.hits[kind]) < MAX_KEEP:
            self.hits[kind].append(hit)

    def _suspect(self, kind: str, hit: Hit, lhost: str | None, lrank: int | None) -> None:
        if len(self.suspects) >= MAX_RANKS:
            return
        strength = _STRENGTH[kind]
        if hit.hosts:
            for h in hit.hosts:
                self.suspects.append((strength, hit.lineno, h, None))
        elif hit.rank is not None:
            self.suspects.append((strength, hit.lineno, None, hit.rank))
        elif lhost is not None or lrank is not None:
            self.suspects.append((strength, hit.lineno, lhost, lrank))

    def _app(self, p: pat.Pattern, hit: Hit, body: str, lhost: str | None, lrank: int | None) -> None:
        sig = p.id + ":" + re.sub(r"0x[0-9a-fA-F]+|\d+", "N", body.strip())[:200]
        entry = self.app.get(sig)
        if entry is None:
            if len(self.app) >= MAX_SIGNATURES:
                self._keep("app", hit)
                return
            entry = self.app[sig] = _AppSig(first=hit, min_reporters=p.min_reporters)
        who = lhost if lhost is not None else (f"rank {lrank}" if lrank is not None else None)
        if who is None:
            entry.unlabeled = True
        elif len(entry.reporters) < MAX_REPORTERS:
            entry.reporters.add(who)
        self._keep("app", hit)

    # --- verdict -----------------------------------------------------------------------------------------
    def resolve(self) -> None:
        """Place node evidence that named a rank, once the whole log has taught us where the ranks ran."""
        missing = [r for r in self.node_ranks if r not in self.rank_map]
        if missing and self.path is not None:
            self._find_ranks(missing)
        for rank, hit in self.node_ranks.items():
            host = self.rank_map.get(rank)
            if host is None and hit.reporter is not None and hit.reporter_rank == rank:
                host = hit.reporter  # the line's own label named the host that printed it
            if host is not None:
                if host not in self.node_hosts or self.node_hosts[host].lineno > hit.lineno:
                    self.node_hosts[host] = hit
                if host not in hit.hosts:
                    hit.hosts.append(host)
            else:
                hit.kind = "crash"
                self.suspects.append((_STRENGTH["crash"], hit.lineno, None, rank))
                self._keep("crash", hit)
                self.notes.append(f"line {hit.lineno}: rank {rank} names no known host: counted as a crash")
        self.node_hosts = dict(sorted(self.node_hosts.items(), key=lambda kv: kv[1].lineno))
        self.hits["node"] = [h for h in self.hits["node"] if h.kind == "node"]
        self.hits["crash"].sort(key=lambda h: h.lineno)

    def _find_ranks(self, ranks: list[int]) -> None:
        """Node evidence named a rank that no analysed line placed: look for a labelled line of that rank.

        The prefilter hands only candidate lines to `line`, so a rank that printed nothing alarming has not been
        placed yet; this pass reads the log again (bounded: the same bytes limit, a few look-ups per rank and
        chunk) only when such evidence exists.
        """
        assert self.path is not None
        want = set(ranks[:64])
        probes = {
            r: [
                f"{r}: ".encode(),
                f"[{r}]".encode(),
                f"[rank{r}]".encode(),
                f",{r}]".encode(),
                f"[{r}@".encode(),
            ]
            for r in want
        }
        try:
            with self.path.open("rb") as f:
                read = 0
                carry = b""
                while want and (not self.max_bytes or read < self.max_bytes):
                    block = f.read(CHUNK_BYTES)
                    if not block:
                        break
                    read += len(block)
                    data = carry + block
                    cut = data.rfind(b"\n") + 1
                    data, carry = data[:cut], data[cut:][-LINE_CAP:]
                    for r in list(want):
                        for probe in probes[r]:
                            i = data.find(probe)
                            tries = 0
                            while i != -1 and tries < 32 and r in want:
                                tries += 1
                                s0 = data.rfind(b"\n", 0, i) + 1
                                e0 = data.find(b"\n", i)
                                _, host, rank = split_labels(
                                    _text(data[s0 : e0 if e0 != -1 else len(data)]), self.matcher
                                )
                                if host is not None and rank == r:
                                    self._map(r, host)
                                    want.discard(r)
                                i = data.find(probe, i + 1)
        except OSError as e:
            self.notes.append(f"looking for the hosts of ranks {sorted(want)} failed: {e}")

    def peer_culprit(self) -> tuple[str, set[str], int] | None:
        """The one host that failed connections point at: named by two or more reporters, or present in every one.

        Returns (host, the reporters' hosts, how many reporters); None when the evidence does not single one out.
        """
        if not self.peer_hits:
            return None
        blamers: dict[str, set[str]] = {}
        conns: list[set[str]] = []
        reporters: set[str] = set()
        for peer, rhost, rrank, _ in self.peer_hits:
            host = rhost if rhost is not None else (self.rank_map.get(rrank) if rrank is not None else None)
            who = host if host is not None else (f"rank {rrank}" if rrank is not None else "?")
            if host == peer:
                continue
            blamers.setdefault(peer, set()).add(who)
            if host is not None:
                reporters.add(host)
            conns.append({peer} | ({host} if host is not None else set()))
        many = [p for p, who in blamers.items() if len(who) >= 2]
        if len(many) == 1:
            return many[0], reporters - {many[0]}, len(blamers[many[0]])
        if len(conns) >= 2:
            common = set.intersection(*conns)
            if len(common) == 1:
                host = next(iter(common))
                return host, reporters - {host}, len(conns)
        return None

    def app_verdict(self) -> tuple[list[Hit], list[Hit]]:
        """(qualified app hits, app hits that only one rank printed: a crash of that rank, not a bug of all)."""
        qualified: list[Hit] = []
        lone: list[Hit] = []
        for entry in self.app.values():
            if entry.unlabeled or len(entry.reporters) >= entry.min_reporters:
                qualified.append(entry.first)
            else:
                lone.append(entry.first)
        return sorted(qualified, key=lambda h: h.lineno), sorted(lone, key=lambda h: h.lineno)

    def suspect_hosts(self) -> list[str]:
        out: list[str] = []
        for _, _, host, rank in sorted(self.suspects, key=lambda s: (-s[0], s[1])):
            h = host if host is not None else (self.rank_map.get(rank) if rank is not None else None)
            if h is not None and h not in out:
                out.append(h)
        return out

    def last_heard(self) -> str | None:
        host, rank = self.last_label
        if host is not None:
            return host
        return self.rank_map.get(rank) if rank is not None else None


def _text(raw: bytes) -> str:
    return raw[: LINE_CAP * 4].decode("utf-8", "replace")[:LINE_CAP]


def _step_of(m: re.Match[bytes]) -> int | None:
    if "step" in m.re.groupindex and m.group("step") is not None:
        text = m.group("step")
    elif m.re.groups and m.group(1) is not None:
        text = m.group(1)
    else:
        text = m.group(0)
    digits = re.findall(rb"\d+", text)
    return int(digits[-1]) if digits else None


def compile_progress(source: str, where: str) -> re.Pattern[bytes]:
    try:
        return re.compile(source.encode("utf-8"), re.MULTILINE)
    except re.error as e:
        raise BadInput(f"{where}: bad progress regex '{source}': {e}") from None


def classify(
    log_path: str | Path,
    rc: int,
    hosts: list[str],
    ipmap: list[tuple[str, str]] | None = None,
    deadline: float | None = None,
    now: float | None = None,
    pattern_sets: list[str] | None = None,
    *,
    margin_s: float = DEFAULT_MARGIN_S,
    progress_re: str | None = None,
    max_mb: float | None = None,
) -> Classification:
    """Classify one attempt.  Raises BadInput for a missing log or unknown set; never for what the log holds."""
    log = Path(log_path)
    if not log.is_file():
        raise BadInput(f"log not found: {log}")
    sets = pattern_sets if pattern_sets is not None else pat.select_sets(None)
    if not progress_re:  # unset or empty: an empty regex would match everywhere
        progress = compile_progress(
            os.environ.get("FAILOVER_PROGRESS_RE") or DEFAULT_PROGRESS_RE, "FAILOVER_PROGRESS_RE"
        )
    else:
        progress = compile_progress(progress_re, "--progress-re")
    if max_mb is None:
        max_mb = _number(os.environ.get("FAILOVER_CLASSIFY_MAX_MB") or None, "FAILOVER_CLASSIFY_MAX_MB")
        max_mb = DEFAULT_MAX_MB if max_mb is None else max_mb
    if max_mb < 0:
        raise BadInput(f"FAILOVER_CLASSIFY_MAX_MB/--max-mb: must be >= 0 (0: read it all), got {max_mb:g}")
    max_bytes = int(max_mb * MIB)
    matcher = HostMatcher(hosts=list(hosts), ipmap=list(ipmap or []))
    now = time.time() if now is None else now
    notes: list[str] = []
    scanner: _Scanner | None = None
    try:
        scanner = _Scanner(pat.load(sets), matcher, progress)
        scanner.max_bytes = max_bytes
        scanner.scan_file(log, max_bytes)
        scanner.resolve()
    except Exception as e:  # a scraper bug must not kill the recovery loop
        notes.append(
            f"scraper error ({type(e).__name__}: {e}): no evidence used, classified by exit code and clock"
        )
        scanner = _Scanner([], matcher, progress)
        try:  # progress still counts: the loop needs it to tell a stuck run from a moving one
            scanner.scan_file(log, max_bytes)
        except Exception as e2:
            notes.append(f"progress scan failed too ({type(e2).__name__}: {e2})")
            scanner = _Scanner([], matcher, progress)
    result = _decide(rc, scanner, matcher, deadline, now, margin_s)
    result.notes = notes + scanner.notes + result.notes
    result.pattern_sets = list(sets)
    return result


def _decide(
    rc: int, sc: _Scanner, matcher: HostMatcher, deadline: float | None, now: float, margin_s: float
) -> Classification:
    notes: list[str] = []
    qualified, lone = sc.app_verdict()
    for h in lone:  # an exception only one rank raised: that rank crashed; its host is the nearest suspect
        sc.suspects.append((_STRENGTH["weak"], h.lineno, h.reporter, h.reporter_rank))
    weak = sorted(sc.hits["weak"] + lone, key=lambda h: h.lineno)
    node = list(sc.node_hosts)
    cls: str
    bad: list[str] = []
    decisive: list[Hit] = []
    if rc == 0:
        cls = "success"
        if sc.counts["node"] or sc.counts["crash"] or sc.counts["system"]:
            notes.append("rc 0: failure lines in the log ignored (the attempt finished)")
    elif deadline is not None and now >= deadline - margin_s:
        cls = "walltime"
        notes.append(f"killed {deadline - now:.0f} s before the deadline (margin {margin_s:.0f} s)")
        if node:
            notes.append(f"node evidence ignored at walltime: {', '.join(node)}")
    elif node and len(node) >= 2 and len(node) > len(matcher.hosts) / 2:
        # Swapping most of the job is never the fix: a scheduler naming them all is a site outage, every rank
        # seeing the same device error is the environment or the configuration.
        named = any(h.named for h in sc.node_hosts.values())
        cls = "system" if named else "app"
        decisive = _unique(sc.node_hosts.values())
        notes.append(
            f"{len(node)} of {len(matcher.hosts)} hosts named: not a node fault "
            + ("(a site-wide outage)" if named else "(every rank sees it: environment or configuration)")
        )
    elif node:
        cls = "node"
        bad = node
        decisive = _unique(sc.node_hosts.values())
    elif sc.hits["system"]:
        cls = "system"
        decisive = sc.hits["system"]
    elif rc == 124:
        if qualified:
            cls = "app"
            decisive = qualified
        else:
            cls = "hang"
            decisive = sc.hits["hang-hint"] + sc.hits["crash"] + weak
            notes.append("the idle-output watchdog fired and no line names a host")
    elif sc.hits["crash"] and (everywhere := _everywhere(sc.hits["crash"], sc, matcher)):
        # The same fault on most of the job's hosts (a memory access fault at step 1, host memory exhausted while
        # loading): nodes do not fail together; the code, the data or the configuration does.
        cls = "app"
        decisive = everywhere
        notes.append(
            f"{everywhere[0].pattern} on most of the {len(matcher.hosts)} hosts: the same fault everywhere "
            "is the application or its configuration, not a node"
        )
    elif sc.hits["crash"]:
        cls = "crash"
        decisive = sc.hits["crash"]
    elif qualified:
        cls = "app"
        decisive = qualified
    elif sc.hits["hang-hint"]:
        cls = "hang"
        decisive = sc.hits["hang-hint"]
    elif weak and (everywhere := _everywhere(weak, sc, matcher)):
        cls = "app"
        decisive = everywhere
        notes.append(
            f"{everywhere[0].pattern} on most of the {len(matcher.hosts)} hosts: the same fault everywhere "
            "is the application or its configuration, not a node"
        )
    elif weak:
        cls = "crash"
        decisive = weak
    else:
        cls = "crash"
        notes.append(f"no failure line in the log: classified by exit code {rc}")
    suspects = [] if cls in ("success", "walltime") else sc.suspect_hosts()
    culprit = sc.peer_culprit()
    if culprit is not None and cls not in ("success", "walltime"):
        host, reporters, n = culprit
        # the peer that every failing connection names goes first; hosts that only reported a lost peer are
        # victims of it, not suspects
        suspects = [host] + [h for h in suspects if h != host and h not in reporters]
        notes.append(f"{n} failed connection(s) point at {host}: its reporters are not suspected")
    evidence_hits = decisive[:MAX_EVIDENCE]
    evidence = [_cap(h.line) for h in evidence_hits]
    matches = [h.brief() for h in evidence_hits]
    return Classification(
        cls=cls,
        bad_hosts=bad,
        evidence=evidence,
        last_step=sc.last_step,
        first_step=sc.first_step,
        suspect_hosts=suspects,
        last_heard=sc.last_heard(),
        rank_hosts=dict(sc.rank_map),
        matches=matches,
        counts={("cascade" if k == "cascade-ignore" else k): v for k, v in sc.counts.items() if v},
        lines=sc.lines,
        rc=rc,
        notes=notes,
    )


def _everywhere(hits: list[Hit], sc: _Scanner, matcher: HostMatcher) -> list[Hit]:
    """The hits of the one pattern that hosts making up more than half of the job (two at least) printed themselves.

    A hit counts for the host that printed it (its label, or its rank's host) or, for a launcher's exit notice, the
    host the notice names; never for a lost peer (everybody sees one host die) or a line naming another host.
    """
    peers = {p.id for p in sc.patterns if p.peer}
    by: dict[str, tuple[set[str], list[Hit]]] = {}
    for hit in hits:
        if hit.pattern in peers:
            continue
        host = hit.reporter
        if host is None and hit.reporter_rank is not None:
            host = sc.rank_map.get(hit.reporter_rank)
        if host is None and len(hit.hosts) == 1 and hit.rank is not None:
            host = hit.hosts[0]  # `srun: error: HOST: task N: ...`: the task's own host
        if host is None:
            continue
        hosts, kept = by.setdefault(hit.pattern, (set(), []))
        hosts.add(host)
        kept.append(hit)
    job = len(matcher.hosts)
    spread = [(len(h), k) for h, k in by.values() if len(h) >= 2 and len(h) > job / 2]
    return max(spread, key=lambda t: t[0])[1] if spread else []


def _unique(hits: Any) -> list[Hit]:
    seen: set[int] = set()
    out: list[Hit] = []
    for h in hits:
        if id(h) not in seen:
            seen.add(id(h))
            out.append(h)
    return out


def _cap(line: str) -> str:
    line = line.rstrip()
    return line if len(line) <= EVIDENCE_CHARS else line[: EVIDENCE_CHARS - 3] + "..."


# --- command line --------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadInput(message)


def _parser() -> _Parser:
    p = _Parser(
        prog="agpt failover classify",
        description="Classify one attempt's log: prints one JSON object "
        '{"class", "bad_hosts", "evidence", "last_step", ...}. Exit 0 whatever the class; 2 on bad input.',
    )
    p.add_argument("log", metavar="LOG", help="the attempt's full output")
    p.add_argument("--rc", required=True, help="the attempt's exit status (128+N: signal N; 124: watchdog)")
    p.add_argument("--hostfile", required=True, help="the attempt's hosts, one per line (hosts/active)")
    p.add_argument("--ipmap", help="`IP HOST` lines (hosts/ip) so an address in the log names a host")
    p.add_argument("--deadline", help="the job's end, epoch seconds: a kill within the margin is walltime")
    p.add_argument("--now", help="the time of the kill, epoch seconds (default: now)")
    p.add_argument(
        "--walltime-margin",
        help=f"seconds before --deadline that count as walltime (FAILOVER_WALLTIME_MARGIN, default {DEFAULT_MARGIN_S:.0f})",
    )
    p.add_argument(
        "--patterns",
        help="pattern sets, comma or space separated (FAILOVER_PATTERN_SETS; default all: "
        + ",".join(pat.DEFAULT_SETS)
        + ")",
    )
    p.add_argument(
        "--progress-re", help=f"progress regex (FAILOVER_PROGRESS_RE, default {DEFAULT_PROGRESS_RE})"
    )
    p.add_argument(
        "--max-mb",
        help=f"read at most this many MiB of a bigger log, its head and its tail (FAILOVER_CLASSIFY_MAX_MB, "
        f"default {DEFAULT_MAX_MB}; 0: all)",
    )
    p.add_argument(
        "--heartbeat-dir",
        help="RUN_DIR/heartbeat: a hang that names no host is attributed from the node records (agpt.heartbeat)",
    )
    p.add_argument(
        "--attempt-id", help="the attempt the heartbeats must come from (default: LOG's name, JOBID.N)"
    )
    p.add_argument("--pretty", action="store_true", help="indent the JSON")
    return p


def _number(text: str | None, flag: str, *, allow_empty: bool = False) -> float | None:
    if text is None or (allow_empty and text.strip() in ("", "0")):
        return None
    try:
        value = float(text)
    except ValueError:
        raise BadInput(f"{flag}: not a number: '{text}'") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise BadInput(f"{flag}: not a finite number: '{text}'")
    return value


def parse_rc(text: str) -> int:
    """An exit status as the shell reports it (0-255); a negative one (Python's -N for signal N) is 128+N."""
    try:
        rc = int(text.strip())
    except ValueError:
        raise BadInput(f"--rc: not an exit status: '{text}'") from None
    if rc < 0:
        rc = 128 - rc
    if rc > 255:
        raise BadInput(f"--rc: exit status out of range 0-255: {text}")
    return rc


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        rc = parse_rc(args.rc)
        deadline = _number(args.deadline, "--deadline", allow_empty=True)
        now = _number(args.now, "--now")
        margin_text = args.walltime_margin
        margin_flag = "--walltime-margin"
        if margin_text is None and os.environ.get("FAILOVER_WALLTIME_MARGIN"):
            margin_text, margin_flag = os.environ["FAILOVER_WALLTIME_MARGIN"], "FAILOVER_WALLTIME_MARGIN"
        margin = _number(margin_text, margin_flag)
        if margin is not None and margin < 0:
            raise BadInput(f"{margin_flag}: must be >= 0, got {margin_text}")
        if not Path(args.log).is_file():
            raise BadInput(f"log not found: {args.log}")
        hosts = read_hostfile(args.hostfile)
        ipmap: list[tuple[str, str]] = []
        ipmap_note = ""
        if args.ipmap:
            try:
                ipmap = read_ipmap(args.ipmap)
            except BadInput as e:  # a missing address map costs the addresses, not the whole classification
                ipmap_note = f"--ipmap: {e}: addresses in the log name no host"
        sets = pat.select_sets(args.patterns)  # None: FAILOVER_PATTERN_SETS, else every set
        result = classify(
            args.log,
            rc,
            hosts,
            ipmap,
            deadline,
            now,
            sets,
            margin_s=DEFAULT_MARGIN_S if margin is None else margin,
            progress_re=args.progress_re,
            max_mb=_number(args.max_mb, "--max-mb"),
        )
        if ipmap_note:
            result.notes.insert(0, ipmap_note)
        if args.heartbeat_dir:
            attempt = args.attempt_id or Path(args.log).name.removesuffix(".log")
            heartbeats.apply(result, args.heartbeat_dir, hosts, attempt, rc)
    except BadInput as e:
        sys.stderr.write(f"agpt failover classify: error: {e}\n")
        return 2
    sys.stdout.write(json.dumps(result.to_json(), indent=2 if args.pretty else None) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
