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
watchdog) -> app if every rank raised the same error, else hang; a crash pattern -> crash; an app error that
two ranks (or an unlabelled log) raised -> app; a collective timeout -> hang; a launcher's exit notice or one
rank's lone exception -> crash; nothing at all -> crash, by the exit code, with a note.  One line counts once,
as its strongest match; a node pattern that names only a rank is placed through the rank->host map learned from
the whole log (launcher labels, srun/PALS/hydra/Open MPI exit lines, NCCL prefixes).

Standard library only: it runs with a plain `python3` when the training environment is what broke.
"""

from __future__ import annotations

import argparse
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

DEFAULT_PROGRESS_RE = r"\bstep[=:] ?[0-9]+"
DEFAULT_MARGIN_S = 120.0
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

CLASSES = ("success", "walltime", "node", "hang", "crash", "system", "app")
# Strength of one line's evidence: a line counts once, as its strongest match.
_STRENGTH = {"node": 6, "system": 5, "crash": 4, "app": 3, "hang-hint": 2, "weak": 1, "cascade-ignore": 0}

# Launcher and runtime labels in front of a message, tried repeatedly (`x1000c0s0b0n0: 3: ...`).
_LABELS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^\s{0,8}(\d{1,7}): "), "rank"),  # srun --label, mpiexec --label
    (re.compile(r"^\[\d+,(\d{1,7})\]<std(?:out|err)>: ?"), "rank"),  # Open MPI --tag-output
    (re.compile(r"^\[rank(\d{1,7})\]: ?", re.IGNORECASE), "rank"),  # torch.distributed
    (re.compile(r"^\[(\d{1,7})\] "), "rank"),  # hydra -prepend-rank
    (re.compile(r"^\[([A-Za-z][\w.-]*):\d+\] "), "host"),  # Open MPI [host:pid]
    (re.compile(r"^\[([A-Za-z][\w.-]*)\] "), "host"),  # hydra -prepend-pattern "[%h] ", trainers' own
    (re.compile(r"^([A-Za-z][\w.-]*):\d+:\d+ (?:\[\d+\] )?"), "host"),  # NCCL/RCCL host:pid:tid [dev]
    (re.compile(r"^([A-Za-z][\w.-]*): "), "host"),  # PALS/pdsh host prefix
]


def split_labels(line: str, matcher: HostMatcher) -> tuple[str, str | None, int | None]:
    """(message, host, rank) of a line: the launcher labels in front, resolved to the job's hosts."""
    body = line
    host: str | None = None
    rank: int | None = None
    for _ in range(4):
        for rx, kind in _LABELS:
            m = rx.match(body)
            if not m:
                continue
            if kind == "rank":
                if rank is None:
                    rank = int(m.group(1))
            else:
                h = matcher.match(m.group(1))
                if h is None:
                    continue
                if host is None:
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
    """One attempt's verdict: CONTRACT.md's four fields, then what a blind swap can use.

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
        needles = sorted({n for p in patterns for n in (p.needles or ())}, key=len)
        kept: list[str] = []
        for n in needles:  # a needle that contains a kept one adds no line
            if not any(k in n for k in kept):
                kept.append(n)
        self.needles = [n.encode("utf-8", "replace") for n in kept]
        # kept needle -> the patterns one of whose needles contains it (a line holding none of them skips them)
        self.by_needle: list[tuple[int, ...]] = [
            tuple(i for i, p in enumerate(patterns) if p.needles and any(k in n for n in p.needles))
            for k in kept
        ]
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

    # --- streaming ---------------------------------------------------------------------------------------
    def scan_file(self, path: Path, max_bytes: int = 0) -> None:
        """Stream the log; past max_bytes (0: no limit) read only its head and its tail.

        Time must stay bounded too: the failure and its cascade sit at the end of an attempt's log (the launcher
        tears the job down within seconds, the watchdog fires after silence), and the head holds the launcher's
        rank-to-host lines.  What is skipped is said in a note.
        """
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
        self.lines += chunk.count(b"\n")
        self._progress(chunk)
        self._last_label(chunk)
        found: dict[int, set[int]] = {}
        if self.full:
            i = 0
            while i < len(chunk):
                found[i] = set()
                nl = chunk.find(b"\n", i)
                i = len(chunk) if nl == -1 else nl + 1
        else:
            low = chunk.lower()
            for idx, n in enumerate(self.needles):
                i = low.find(n)
                while i != -1:
                    s = low.rfind(b"\n", 0, i) + 1
                    found.setdefault(s, set()).add(idx)
                    e = low.find(b"\n", i)
                    if e == -1:
                        break
                    i = low.find(n, e)
        lineno = base
        prev = 0
        for s in sorted(found):
            lineno += chunk.count(b"\n", prev, s)
            prev = s
            e = chunk.find(b"\n", s)
            raw = chunk[s : e if e != -1 else len(chunk)]
            cands = None
            if not self.full:
                idx_set: set[int] = set()
                for k in found[s]:
                    idx_set.update(self.by_needle[k])
                cands = [self.patterns[i] for i in sorted(idx_set)]
            self.line(raw[: LINE_CAP * 4].decode("utf-8", "replace")[:LINE_CAP], lineno + 1, cands)

    def _progress(self, chunk: bytes) -> None:
        last: re.Match[bytes] | None = None
        for m in self.progress.finditer(chunk):
            if self.first_step is None:
                self.first_step = _step_of(m)
            last = m
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
        if kind == "app":
            self._app(p, hit, body, lhost, lrank)
            return
        if kind in ("crash", "weak"):
            self._suspect(kind, hit, lhost, lrank)
        elif kind == "cascade-ignore" and not self._cascade_seen:
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
        for rank, hit in self.node_ranks.items():
            host = self.rank_map.get(rank)
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
    elif sc.hits["crash"]:
        cls = "crash"
        decisive = sc.hits["crash"]
    elif qualified:
        cls = "app"
        decisive = qualified
    elif sc.hits["hang-hint"]:
        cls = "hang"
        decisive = sc.hits["hang-hint"]
    elif weak:
        cls = "crash"
        decisive = weak
    else:
        cls = "crash"
        notes.append(f"no failure line in the log: classified by exit code {rc}")
    evidence_hits = decisive[:MAX_EVIDENCE]
    evidence = [_cap(h.line) for h in evidence_hits]
    matches = [h.brief() for h in evidence_hits]
    return Classification(
        cls=cls,
        bad_hosts=bad,
        evidence=evidence,
        last_step=sc.last_step,
        first_step=sc.first_step,
        suspect_hosts=[] if cls in ("success", "walltime") else sc.suspect_hosts(),
        last_heard=sc.last_heard(),
        rank_hosts=dict(sc.rank_map),
        matches=matches,
        counts={("cascade" if k == "cascade-ignore" else k): v for k, v in sc.counts.items() if v},
        lines=sc.lines,
        rc=rc,
        notes=notes,
    )


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
