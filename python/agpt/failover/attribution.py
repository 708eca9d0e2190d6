"""Attribution rules: from what the lines said (agpt.failover.evidence) to the hosts it points at.

The rules read only the evidence's common shape, never a launcher's format: every hit carries the hosts its
pattern named, the rank it named, and its reporter (the host and rank the line's labels named, whatever the
launcher: agpt.failover.labels), and `rank_map` places a rank on its host.  So each rule holds for srun, PALS,
hydra, Open MPI and torchrun alike, and a new structural rule belongs here, beside these:
- `place_node_ranks`: node evidence that named only a rank lands on that rank's host, learnt from the whole log;
- `place_before_first_exit`: a device fault a line reports with no host, no rank and no label, printed before
  the launcher's first exit or death notice, is the fault of the host that notice names (the one task that
  failed first: its runtime printed the line, then it exited);
- `app_verdict`: an app error counts when enough ranks or hosts printed it; one rank alone crashed, and so did
  the ranks of one host alone when the job has others (an application bug does not pick a node), and so did
  reporters whose error names another host of the job (they lost that host: `timed out reaching (nid5, 29500)`);
- `everywhere`: the same fault printed by most of the job's hosts is the application or the site, not a node;
- `outside_service`: the same failure printed by most of the job's hosts, naming an endpoint (a URL's host) that is
  no host of the job, is a service outside the job (an object store, a web service, a license server): the site's;
- `peer_culprit`: the far end of failed connections that several reporters name is the host at fault, and its
  reporters are its victims; so is a host of the job that failure lines name in their text (`connect to (GPU03,
  29500)`) while it blames no one itself (a silent host named by others);
- `suspect_hosts`: the hosts nearest the evidence, strongest first, then the first cause first: by the time
  stamps in front of the lines where they all carry one of the same kind, else by their order in the log;
- `last_heard`: the host of the last labelled line.

Standard library only.
"""

from __future__ import annotations

import re

from agpt.failover.evidence import STRENGTH, Evidence, Hit
from agpt.failover.labels import rank_name

# A URL's host (RFC 3986: scheme "://" [userinfo "@"] host): an endpoint a line names, whatever the library.
_URL_HOST = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://(?:[^/\s@\"']+@)?(\[[0-9A-Fa-f:.]+\]|[^/\s:\"'?#\]]+)")


def unplaced_ranks(ev: Evidence) -> list[int]:
    """Ranks that node evidence named and no line placed on a host yet."""
    return [r for r in ev.node_ranks if ev.host_of(None, r) is None]


def place_node_ranks(ev: Evidence) -> None:
    """Place node evidence that named a rank, once the whole log has taught us where the ranks ran."""
    for rank, hit in ev.node_ranks.items():
        host = ev.host_of(None, rank)
        if host is None and hit.reporter is not None and hit.reporter_rank == rank:
            host = hit.reporter  # the line's own label named the host that printed it
        if host is not None:
            if host not in ev.node_hosts or ev.node_hosts[host].lineno > hit.lineno:
                ev.node_hosts[host] = hit
            if host not in hit.hosts:
                hit.hosts.append(host)
        else:
            hit.kind = "crash"
            ev.suspects.append((STRENGTH["crash"], hit.lineno, None, rank))
            ev.keep("crash", hit)
            ev.notes.append(f"line {hit.lineno}: {rank_name(rank)} names no known host: counted as a crash")
    ev.node_hosts = dict(sorted(ev.node_hosts.items(), key=lambda kv: kv[1].lineno))
    ev.hits["node"] = [h for h in ev.hits["node"] if h.kind == "node"]
    ev.hits["crash"].sort(key=lambda h: h.lineno)


def place_before_first_exit(ev: Evidence) -> None:
    """Place node evidence that named nothing (no host, no rank, no label) on the host of the launcher's first exit
    or death notice, when it was printed before that notice: the task that failed first printed it.  Node
    patterns that could not be placed were kept as crash hits (agpt.failover.evidence); they become node hits."""
    node_ids = {p.id for p in ev.patterns if p.cls == "node"}
    deaths = {p.id for p in ev.patterns if p.death}
    notices = [h for h in ev.hits["weak"] if len(h.hosts) == 1 and h.rank is not None]
    notices += [h for h in ev.hits["cascade-ignore"] if h.pattern in deaths and len(h.hosts) == 1]
    if not notices:
        return
    first = min(notices, key=lambda h: h.lineno)
    host = first.hosts[0]
    placed = [
        h
        for h in ev.hits["crash"]
        if h.pattern in node_ids
        and not h.hosts
        and h.reporter is None
        and h.reporter_rank is None
        and h.rank is None
        and h.lineno < first.lineno
    ]
    for hit in placed:
        hit.kind, hit.hosts = "node", [host]
        ev.node_hosts.setdefault(host, hit)
        ev.hits["node"].append(hit)
        ev.notes.append(
            f"line {hit.lineno}: a device fault naming no host, printed before the first exit notice (line "
            f"{first.lineno}, {host}): that host's"
        )
    if placed:
        ev.hits["crash"] = [h for h in ev.hits["crash"] if h not in placed]


def app_verdict(ev: Evidence, job: int = 1) -> tuple[list[Hit], list[Hit]]:
    """(qualified app hits, app hits that only one rank printed, or, for an error that several ranks must print to
    count, only the ranks of one host of a job of several: a crash there, not a bug of all)."""
    qualified: list[Hit] = []
    lone: list[Hit] = []
    for entry in ev.app.values():
        enough = entry.unlabeled or len(entry.reporters) >= entry.min_reporters
        several = entry.min_reporters >= 2 and job >= 2 and not entry.unlabeled
        if enough and several and len(_hosts_of(ev, entry.reporters)) == 1:
            enough = False  # the ranks that must agree all run on one host: that host, not the code
        if enough and entry.names_peer and not entry.unlabeled:
            enough = (
                False  # its lines name another host of the job: the reporters lost it, the code did not fail
            )
        if enough:
            qualified.append(entry.first)
        else:
            lone.append(entry.first)
    return sorted(qualified, key=lambda h: h.lineno), sorted(lone, key=lambda h: h.lineno)


def _hosts_of(ev: Evidence, reporters: set[str]) -> set[str]:
    """The hosts a set of reporters (`host` or `rank N`) ran on; a rank the map cannot place counts as itself."""
    out: set[str] = set()
    for who in reporters:
        if who.startswith("rank "):
            out.add(ev.host_of(None, int(who[5:])) or who)
        else:
            out.add(who)
    return out


def everywhere(hits: list[Hit], ev: Evidence, job: int) -> list[Hit]:
    """The hits of the one pattern that hosts making up more than half of the job (two at least) printed themselves.

    A hit counts for the host that printed it (its label, or its rank's host) or, for a launcher's exit notice, the
    host the notice names; never for a lost peer (everybody sees one host die) or a line naming another host.
    """
    peers = {p.id for p in ev.patterns if p.peer}
    by: dict[str, tuple[set[str], list[Hit]]] = {}
    for hit in hits:
        if hit.pattern in peers:
            continue
        host = ev.host_of(hit.reporter, hit.reporter_rank)
        if host is None and len(hit.hosts) == 1 and hit.rank is not None:
            host = hit.hosts[0]  # `srun: error: HOST: task N: ...`: the task's own host
        if host is None:
            continue
        hosts, kept = by.setdefault(hit.pattern, (set(), []))
        hosts.add(host)
        kept.append(hit)
    spread = [(len(h), k) for h, k in by.values() if len(h) >= 2 and len(h) > job / 2]
    return max(spread, key=lambda t: t[0])[1] if spread else []


def outside_service(ev: Evidence, job: int, hits: list[Hit]) -> list[Hit]:
    """The hits of one failure that hosts making up more than half of the job (two at least) printed, each naming
    an endpoint (a URL's host) that is no host of the job: what failed is a service the job reaches, not a rank of
    it nor its own code.  Empty when no such failure is that widespread."""
    outside = [h for h in hits if _names_outside(ev, h.line)]
    if not outside:
        return []
    spread = everywhere(outside, ev, job)
    if spread:
        return spread
    by: dict[str, set[str]] = {}  # app errors are kept once per message: their reporters say who printed them
    for entry in ev.app.values():
        if any(h is entry.first for h in outside) and not entry.unlabeled:
            by[entry.first.pattern] = _hosts_of(ev, entry.reporters)
    wide = [h for h in outside if len(by.get(h.pattern, ())) >= 2 and len(by[h.pattern]) > job / 2]
    return wide


def _names_outside(ev: Evidence, line: str) -> bool:
    """Whether a line names a URL whose host is not a host of the job (by any spelling or address)."""
    hosts = [m.group(1).strip("[]") for m in _URL_HOST.finditer(line)]
    return bool(hosts) and all(not ev.matcher.find(h) for h in hosts)


def peer_culprit(ev: Evidence) -> tuple[str, set[str], int] | None:
    """The one host that failed connections point at: named by two or more reporters, or present in every one;
    else the one host that failure lines name in their text while it blames no one itself.

    Returns (host, the reporters' hosts, how many reporters); None when the evidence does not single one out.
    """
    found = _named_by_connections(ev)
    return found if found is not None else _named_and_silent(ev)


def _named_and_silent(ev: Evidence) -> tuple[str, set[str], int] | None:
    """A host of the job that failure lines of other hosts name in their text, while no line of its own names
    anyone: the reporters lost it; it did not lose them.  Two hosts naming each other single out neither."""
    blamers: dict[str, set[str]] = {}
    for named, rhost, rrank, _ in ev.mentions:
        who = ev.host_of(rhost, rrank)
        if who is not None and who != named:
            blamers.setdefault(named, set()).add(who)
    accusers = {w for ws in blamers.values() for w in ws}
    silent = {h: ws for h, ws in blamers.items() if h not in accusers}
    if not silent:
        return None
    top = max(len(ws) for ws in silent.values())
    best = [h for h, ws in silent.items() if len(ws) == top]
    if len(best) != 1:
        return None
    return best[0], silent[best[0]], top


def _named_by_connections(ev: Evidence) -> tuple[str, set[str], int] | None:
    """The far end of failed connections (a pattern's `peer` group) that several reporters name."""
    if not ev.peer_hits:
        return None
    blamers: dict[str, set[str]] = {}
    conns: list[set[str]] = []
    reporters: set[str] = set()
    for peer, rhost, rrank, _ in ev.peer_hits:
        host = ev.host_of(rhost, rrank)
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


def _host(ev: Evidence, hit: Hit) -> str | None:
    return ev.host_of(hit.reporter, hit.reporter_rank) or (hit.hosts[0] if len(hit.hosts) == 1 else None)


def before(ev: Evidence, a: list[Hit], b: list[Hit]) -> bool:
    """Whether the earliest of `a` happened before the earliest of `b`: by their time stamps when every line of
    both carries one of the same kind, else by their order in the log."""
    both = [*a, *b]
    stamps = [ev.stamps.get(h.lineno) for h in both]
    if all(st is not None for st in stamps) and len({st[0] for st in stamps if st is not None}) == 1:
        first_a = min(ev.stamps[h.lineno][1] for h in a)
        first_b = min(ev.stamps[h.lineno][1] for h in b)
        return first_a < first_b
    return min(h.lineno for h in a) < min(h.lineno for h in b)


def consequences_of_a_crash(ev: Evidence) -> bool:
    """Whether the system hits followed a crash on one host and came from other hosts only: a rank died first, and
    the ranks that lost it report the launcher's service (PMI) or their peers unreachable.  The same error block on
    every host (a PMI fence failing everywhere, its MPI header a crash line) is not."""
    crash, system = ev.hits["crash"], ev.hits["system"]
    if not crash or not system or not before(ev, crash, system):
        return False
    first = min(crash, key=lambda h: h.lineno)
    host = _host(ev, first)
    reporters = {_host(ev, h) for h in system}
    return host is not None and None not in reporters and host not in reporters


def suspect_hosts(ev: Evidence) -> list[str]:
    """The hosts the evidence points nearest to: strongest first, then the first cause first (by time stamp where
    every suspect line carries one of the same kind, else in log order); each once."""
    out: list[str] = []
    stamps = [ev.stamps.get(s[1]) for s in ev.suspects]
    kinds = {st[0] for st in stamps if st is not None}
    timed = bool(stamps) and all(st is not None for st in stamps) and len(kinds) == 1

    def when(s: tuple[int, int, str | None, int | None]) -> float:
        st = ev.stamps.get(s[1])
        return st[1] if timed and st is not None else float(s[1])

    for _, _, host, rank in sorted(ev.suspects, key=lambda s: (-s[0], when(s), s[1])):
        h = ev.host_of(host, rank)
        if h is not None and h not in out:
            out.append(h)
    return out


def last_heard(ev: Evidence) -> str | None:
    """The host of the last labelled line (a hint for a silent hang)."""
    return ev.host_of(*ev.last_label)
