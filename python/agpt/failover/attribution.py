"""Attribution rules: from what the lines said (agpt.failover.evidence) to the hosts it points at.

The rules read only the evidence's common shape, never a launcher's format: every hit carries the hosts its
pattern named, the rank it named, and its reporter (the host and rank the line's labels named, whatever the
launcher: agpt.failover.labels), and `rank_map` places a rank on its host.  So each rule holds for srun, PALS,
hydra, Open MPI and torchrun alike, and a new structural rule belongs here, beside these:
- `place_node_ranks`: node evidence that named only a rank lands on that rank's host, learnt from the whole log;
- `app_verdict`: an app error counts when enough ranks or hosts printed it; one rank alone crashed;
- `everywhere`: the same fault printed by most of the job's hosts is the application or the site, not a node;
- `peer_culprit`: the far end of failed connections that several reporters name is the host at fault, and its
  reporters are its victims;
- `suspect_hosts`: the hosts nearest the evidence, strongest first, then first in the log (a first cause comes
  before its consequences);
- `last_heard`: the host of the last labelled line.

Standard library only.
"""

from __future__ import annotations

from agpt.failover.evidence import STRENGTH, Evidence, Hit


def unplaced_ranks(ev: Evidence) -> list[int]:
    """Ranks that node evidence named and no line placed on a host yet."""
    return [r for r in ev.node_ranks if r not in ev.rank_map]


def place_node_ranks(ev: Evidence) -> None:
    """Place node evidence that named a rank, once the whole log has taught us where the ranks ran."""
    for rank, hit in ev.node_ranks.items():
        host = ev.rank_map.get(rank)
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
            ev.notes.append(f"line {hit.lineno}: rank {rank} names no known host: counted as a crash")
    ev.node_hosts = dict(sorted(ev.node_hosts.items(), key=lambda kv: kv[1].lineno))
    ev.hits["node"] = [h for h in ev.hits["node"] if h.kind == "node"]
    ev.hits["crash"].sort(key=lambda h: h.lineno)


def app_verdict(ev: Evidence) -> tuple[list[Hit], list[Hit]]:
    """(qualified app hits, app hits that only one rank printed: a crash of that rank, not a bug of all)."""
    qualified: list[Hit] = []
    lone: list[Hit] = []
    for entry in ev.app.values():
        if entry.unlabeled or len(entry.reporters) >= entry.min_reporters:
            qualified.append(entry.first)
        else:
            lone.append(entry.first)
    return sorted(qualified, key=lambda h: h.lineno), sorted(lone, key=lambda h: h.lineno)


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


def peer_culprit(ev: Evidence) -> tuple[str, set[str], int] | None:
    """The one host that failed connections point at: named by two or more reporters, or present in every one.

    Returns (host, the reporters' hosts, how many reporters); None when the evidence does not single one out.
    """
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


def suspect_hosts(ev: Evidence) -> list[str]:
    """The hosts the evidence points nearest to: strongest first, then in log order; each once."""
    out: list[str] = []
    for _, _, host, rank in sorted(ev.suspects, key=lambda s: (-s[0], s[1])):
        h = ev.host_of(host, rank)
        if h is not None and h not in out:
            out.append(h)
    return out


def last_heard(ev: Evidence) -> str | None:
    """The host of the last labelled line (a hint for a silent hang)."""
    return ev.host_of(*ev.last_label)
