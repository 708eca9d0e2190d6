"""One line's evidence, and the bounded stores a whole log's evidence is kept in.

`Evidence.line` analyses one line the reader (agpt.failover.scan) hands it: the launcher labels come off
(agpt.failover.labels), every candidate pattern runs on the message, and the line counts once, as its strongest
match.  What it names goes to the store it belongs in:
- node evidence naming a host of the job -> `node_hosts`; naming only a rank -> `node_ranks` (placed on a host
  once the whole log has taught where the ranks ran: agpt.failover.attribution.place_node_ranks);
- app errors -> `app`, one entry per message signature, with the hosts or ranks that printed it;
- crash-like lines -> `suspects`, the hosts (or ranks) the evidence points nearest to;
- a failed connection's far end -> `peer_hits`; a host of the job a failure line names in its text, other than
  the host that printed it -> `mentions` (whatever the wording: `connect to (GPU03, 29500)`);
- the time stamp in front of a failure line (agpt.failover.labels.stamp) -> `stamps`, so a first cause can be
  told from its consequences by time;
- every rank->host pair a label or a launcher's line names -> `rank_map`.
Every store is bounded (a log may hold millions of matching lines); the counts go on.

Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agpt.failover import patterns as pat
from agpt.failover.hostmatch import HostMatcher
from agpt.failover.labels import TRAINING_RANK, split_all, stamp

MAX_KEEP = 32  # hits kept per kind (the counts go on)
MAX_RANKS = 65536
MAX_SIGNATURES = 256
MAX_REPORTERS = 16
MAX_NOTED = 16  # hosts outside the job that get a note
MAX_MENTIONS = 4096  # (named host, reporter) pairs kept; a host named in a failure line's own text
# Kinds whose lines may name a peer in their text (an exit notice names its own host; a node hit is already placed);
# a lost peer's line that names the host it lost is evidence about that host too.
MENTION_KINDS = ("crash", "weak", "app", "hang-hint", "system", "cascade-ignore")

# Strength of one line's evidence: a line counts once, as its strongest match.
STRENGTH = {
    "preempt": 7,
    "node": 6,
    "system": 5,
    "crash": 4,
    "app": 3,
    "hang-hint": 2,
    "weak": 1,
    "cascade-ignore": 0,
}


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


@dataclass(slots=True)
class AppSig:
    """One app-error message (its digits blanked): the first hit, and who printed it."""

    first: Hit
    reporters: set[str] = field(default_factory=set)
    unlabeled: bool = False
    min_reporters: int = 1
    names_peer: bool = False  # a line of it names another host of the job: its reporters lost that host


def _kind(p: pat.Pattern) -> str:
    """The kind a match of `p` counts as: a launcher's exit notice is a weak crash."""
    return "weak" if (p.cls == "crash" and p.weak) else p.cls


class Evidence:
    """What the lines of one log showed, in bounded stores; filled by `line`, read by the attribution rules."""

    def __init__(self, patterns: list[pat.Pattern], matcher: HostMatcher) -> None:
        self.patterns = patterns
        self.matcher = matcher
        self.lines = 0
        self.first_step: int | None = None
        self.last_step: int | None = None
        self.last_label: tuple[str | None, int | None] = (None, None)  # of the last labelled line
        self.rank_map: dict[int, str] = {}
        self.counts: dict[str, int] = {k: 0 for k in STRENGTH}
        self.hits: dict[str, list[Hit]] = {k: [] for k in STRENGTH}
        self.node_hosts: dict[str, Hit] = {}
        self.node_ranks: dict[int, Hit] = {}
        self.app: dict[str, AppSig] = {}
        self.suspects: list[tuple[int, int, str | None, int | None]] = []  # (strength, lineno, host, rank)
        self.peer_hits: list[
            tuple[str, str | None, int | None, int]
        ] = []  # (peer, reporter host, rank, line)
        self.mentions: list[
            tuple[str, str | None, int | None, int]
        ] = []  # (named host, reporter host, rank, line)
        self.stamps: dict[int, tuple[str, float]] = {}  # line -> (date spelling, seconds into it)
        self.stated: dict[int, int] = {}  # a trainer's rank -> the launcher's task a line shows printing it
        self.task_map: dict[int, str] = {}  # a launcher's task id -> its host (srun's `task N` notices)
        self.notes: list[str] = []
        self._outside: set[str] = set()
        self._cascade_seen = False
        self._row_host: tuple[list[str], int] | None = None
        self._root_cause = -100

    # --- one line ----------------------------------------------------------------------------------------
    def line(self, text: str, lineno: int, candidates: list[pat.Pattern] | None = None) -> None:
        """Analyse one line; candidates: the patterns the chunk scan's needles allow (None: all)."""
        low = text.lower()
        pool = self.patterns if candidates is None else candidates
        cands = [p for p in pool if p.needles is None or any(n in low for n in p.needles)]
        if not cands:
            return
        body, lhost, lrank, ltrain = split_all(text, self.matcher)
        if ltrain is not None:
            lrank = self.training_label(ltrain, lhost, lrank)
        if lhost is not None and lrank is not None:
            self.map_rank(lrank, lhost)
        best: tuple[int, pat.Pattern, re.Match[str]] | None = None
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
            if best is None or STRENGTH[_kind(p)] > best[0]:
                best = (STRENGTH[_kind(p)], p, m)
        if best is None and fallback is not None:
            best = (STRENGTH[_kind(fallback[0])], *fallback)
        if best is None:
            return
        _, p, m = best
        self._record(p, m, _kind(p), text, lineno, lhost, lrank, body)

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
                self.suspect("weak", hit, lhost, lrank)
                self.keep("weak", hit)
        elif p.table == "rank" and gd.get("rank") and self._row_host is not None:
            hosts, at = self._row_host
            if len(hosts) == 1 and lineno - at <= 3:
                self.map_rank(int(gd["rank"]), hosts[0])

    def training_label(self, train: int, host: str | None, task: int | None) -> int:
        """A trainer's own rank label on a line: what the line states about it (its host, the launcher's task that
        printed it); the reporter's rank: the launcher's task when the line names one, else TRAINING_RANK + N."""
        if task is not None and train not in self.stated and len(self.stated) < MAX_RANKS:
            self.stated[train] = task
        if host is not None:
            self.map_rank(TRAINING_RANK + train, host)
        return task if task is not None else TRAINING_RANK + train

    def map_rank(self, rank: int, host: str) -> None:
        """Learn where a rank runs; the first answer stands."""
        if rank not in self.rank_map and len(self.rank_map) < MAX_RANKS:
            self.rank_map[rank] = host

    def _map_match(self, p: pat.Pattern, m: re.Match[str], lhost: str | None, lrank: int | None) -> None:
        gd = m.groupdict()
        hosts = self.matcher.match_all(gd["host"]) if gd.get("host") else ([lhost] if lhost else [])
        rank = int(gd["rank"]) if gd.get("rank") else lrank
        if rank is not None and len(hosts) == 1 and hosts[0]:
            if p.task and gd.get("rank"):  # srun's `task N`: where the task ran, not a trainer's rank N
                if rank not in self.task_map and len(self.task_map) < MAX_RANKS:
                    self.task_map[rank] = hosts[0]
                return
            self.map_rank(rank, hosts[0])

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
        if raw_host and not named_hosts and raw_host not in self._outside and len(self._outside) < MAX_NOTED:
            self._outside.add(raw_host)
            self.notes.append(f"line {lineno}: '{raw_host}' is not a host of this job: not reported")
        if len(self.stamps) < MAX_RANKS:
            st = stamp(text)
            if st is not None:
                self.stamps[lineno] = st
        if kind == "node":
            self._record_node(p, hit, raw_host, named_hosts, lhost, lrank)
            return
        hit.hosts = named_hosts
        peer_named = False
        if kind in MENTION_KINDS and not p.peer and (lhost is not None or lrank is not None):
            peer_named = self._mention(body, named_hosts, lhost, lrank, lineno)
        if p.peer and len(named_hosts) == 1 and len(self.peer_hits) < MAX_RANKS:
            self.peer_hits.append((named_hosts[0], lhost, lrank, lineno))
        if kind == "app":
            self._app(p, hit, body, lhost, lrank, peer_named)
            return
        if kind in ("crash", "weak") and not (p.peer and not named_hosts):
            # a lost peer that names no host of the job says nothing against the host that reported it
            self.suspect(kind, hit, lhost, lrank)
        elif kind == "cascade-ignore" and not self._cascade_seen and p.guess:
            # Never evidence; but when nothing else names anyone, the first rank killed (an OOM kill, say)
            # is a better first guess for a blind swap than none.
            before = len(self.suspects)
            self.suspect(kind, hit, lhost, lrank)
            self._cascade_seen = len(self.suspects) > before
        self.keep(kind, hit)

    def _record_node(
        self,
        p: pat.Pattern,
        hit: Hit,
        raw_host: str | None,
        named_hosts: list[str],
        lhost: str | None,
        lrank: int | None,
    ) -> None:
        """Node evidence: the host the pattern named, else the host that printed the line (blame reporter), else
        the rank it named, placed later; a node fault that cannot be placed is a crash (or weak, outside the job)."""
        rank = hit.rank
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
                self.keep("node", hit)
                return
            # a node fault we cannot place (or placed outside the job): something died, no proof of where
            kind = "crash" if not raw_host else "weak"
            hit.kind = kind
            self.suspect(kind, hit, lhost, lrank)
            self.keep(kind, hit)
            return
        hit.hosts = hosts
        hit.named = named
        for h in hosts:
            self.node_hosts.setdefault(h, hit)
        self.keep("node", hit)

    def _mention(
        self, body: str, named: list[str], lhost: str | None, lrank: int | None, lineno: int
    ) -> bool:
        """Hosts of the job a failure line names in its text, other than its own: who the reporter blames.
        True when the line names one."""
        if len(self.mentions) >= MAX_MENTIONS:
            return False
        found = False
        for h in self.matcher.find(body):
            if h != lhost and h not in named:
                self.mentions.append((h, lhost, lrank, lineno))
                found = True
        return found

    def keep(self, kind: str, hit: Hit) -> None:
        self.counts[kind] += 1
        if len(self.hits[kind]) < MAX_KEEP:
            self.hits[kind].append(hit)

    def suspect(self, kind: str, hit: Hit, lhost: str | None, lrank: int | None) -> None:
        """The hosts a hit points at (else its rank, else the line's own labels), at the hit's strength."""
        if len(self.suspects) >= MAX_RANKS:
            return
        strength = STRENGTH[kind]
        if hit.hosts:
            for h in hit.hosts:
                self.suspects.append((strength, hit.lineno, h, None))
        elif hit.rank is not None:
            self.suspects.append((strength, hit.lineno, None, hit.rank))
        elif lhost is not None or lrank is not None:
            self.suspects.append((strength, hit.lineno, lhost, lrank))

    def _app(
        self,
        p: pat.Pattern,
        hit: Hit,
        body: str,
        lhost: str | None,
        lrank: int | None,
        peer_named: bool = False,
    ) -> None:
        sig = p.id + ":" + re.sub(r"0x[0-9a-fA-F]+|\d+", "N", body.strip())[:200]
        entry = self.app.get(sig)
        if entry is None:
            if len(self.app) >= MAX_SIGNATURES:
                self.keep("app", hit)
                return
            entry = self.app[sig] = AppSig(first=hit, min_reporters=p.min_reporters)
        entry.names_peer = entry.names_peer or peer_named
        who = lhost if lhost is not None else (f"rank {lrank}" if lrank is not None else None)
        if who is None:
            entry.unlabeled = True
        elif len(entry.reporters) < MAX_REPORTERS:
            entry.reporters.add(who)
        self.keep("app", hit)

    def host_of(self, host: str | None, rank: int | None) -> str | None:
        """A reporter's host: its label's, else its rank's through the rank->host map.  A trainer's own rank
        (TRAINING_RANK + N) is placed only where the log states it: beside a host, or beside the launcher's task
        label (then the task's host); never by taking the launcher's task N for the trainer's rank N."""
        if host is not None:
            return host
        if rank is None:
            return None
        if rank < TRAINING_RANK:  # a launcher's label: the same numbering as its notices
            return self.rank_map.get(rank) or self.task_map.get(rank)
        train = rank - TRAINING_RANK
        task = self.stated.get(train)
        if task is not None:
            return self.rank_map.get(task) or self.task_map.get(task)
        # Placed by a line with its host, or by an MPI launcher's or the trainer's own rank (the same numbering);
        # never by an srun task id of the same number.
        return self.rank_map.get(rank) or self.rank_map.get(train)
