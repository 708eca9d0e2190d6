"""Launcher and runtime labels in front of a log line: which rank printed it, on which host.

Every launcher prefixes a rank's output its own way (`3: `, `nid001: `, `[1,3]<stderr>:`, `[rank3]:`, NCCL's
`host:pid:tid [dev] `); `split_labels` takes them off, tried repeatedly (`x1000c0s0b0n0: 3: ...`), and returns the
message with the host and the global rank they named, so every later rule (agpt.failover.attribution) sees one
shape whatever the launcher.  A host is returned only in the hostfile's spelling (agpt.failover.hostmatch).

Time stamps a runtime or a log collector puts in front (`[2025-06-06 09:52:01] `, glog's `E0227 17:39:41.510000
293816 api.py:732] `, c10d's `[E108 20:04:34.467 socket.cpp:957] `, ISO `2019-06-02T16:13:44.884Z: `, Open MPI's
`Mon Dec 10 08:18:05 2018[1,8]<stderr>:`) are labels too: taken off, so the launcher label behind them is seen,
and read by `stamp` so that a first cause can be told from its consequences by time where lines carry one.

The formats, per launcher option, are listed with their sources in docs/contract.md (the label-format matrix)
and tested one by one (tests/python/test_classify_formats.py::test_label_matrix).  Standard library only.
"""

from __future__ import annotations

import re

from agpt.failover.hostmatch import HostMatcher

# Named groups: `r` a global rank, `h` a host; a label with neither is only taken off.
_H = r"[A-Za-z][\w.-]*"
_HMS = r"\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
# Time stamps in front of a line; `t` is the time of day, `d` the date when there is one (`stamp` reads them).
TIME_LABELS: list[re.Pattern[str]] = [
    re.compile(rf"^\[(?P<d>\d{{4}}-\d{{2}}-\d{{2}})[ T](?P<t>{_HMS})\]\s"),  # `[2025-06-06 09:52:01] `
    re.compile(rf"^(?P<d>\d{{4}}-\d{{2}}-\d{{2}})T(?P<t>{_HMS})Z?:?\s"),  # ISO `2019-06-02T16:13:44.884Z: `
    re.compile(
        rf"^\[?[IWEF](?P<d>\d{{3,4}}) (?P<t>{_HMS})\s+[^\]]{{1,200}}\]\s?"
    ),  # glog / c10d `E0227 17:39:41.5 ...] `
    re.compile(
        rf"^[A-Z][a-z]{{2}} (?P<d>[A-Z][a-z]{{2}} [ \d]\d) (?P<t>{_HMS}) \d{{4}}(?=\[)"
    ),  # Open MPI date
]
LABELS: list[re.Pattern[str]] = [
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
    re.compile(
        r"^\[rank(?P<tr>\d{1,7})\]: ?", re.IGNORECASE
    ),  # torch.distributed: a training rank (TRAINING_RANK)
    re.compile(r"^\[[a-z_]+\d{1,5}\]: ?"),  # torchrun --tee `[default0]:` (a local rank: taken off only)
    re.compile(r"^\[(?P<r>\d{1,7})\] "),  # hydra -l / -prepend-rank
    re.compile(rf"^\[(?:proxy:[\d:]+|mpiexec)@(?P<h>{_H})\] "),  # hydra's own daemons `[proxy:0:1@host]`
    re.compile(rf"^slurmstepd-(?P<h>{_H}): "),  # slurmstepd on that node
    re.compile(rf"^\[(?P<h>{_H}):\d+\] "),  # Open MPI [host:pid]
    re.compile(rf"^\[(?P<h>{_H}):\d+(?::\d+){{1,2}}\]\s+"),  # UCX `[host:pid:0:tid]`, Open MPI's backtrace
    re.compile(rf"^\[(?P<h>{_H})\] "),  # hydra -prepend-pattern "[%h] ", trainers' own
    re.compile(rf"^(?P<h>{_H}):\d+:\d+ (?:\[\d+\] )?"),  # NCCL/RCCL host:pid:tid [dev]
    re.compile(rf"^(?P<h>{_H}): "),  # PALS --label / pdsh / DeepSpeed's pdsh runner `host: `
    *TIME_LABELS,
]
MAX_LABELS = 4  # labels taken off one line at most
# A trainer's own rank (torch's `[rankN]:`) is not the launcher's task id (srun's `N: `, `task N`): under torchrun
# one task holds several ranks.  It is kept apart as TRAINING_RANK + N, and reaches a host only through a line that
# states it: the rank's label beside a host, or beside the launcher's task label (agpt.failover.evidence.host_of).
TRAINING_RANK = 10**8


def stamp(line: str) -> tuple[str, float] | None:
    """(the date as the line spells it, seconds into that day) of a time-stamp label in front of a line, or None.

    Two stamps compare only when they carry the same date spelling (a glog month-day and an ISO date are not
    comparable); within a day the order of causes is the order of these seconds.
    """
    body = line
    for _ in range(MAX_LABELS):
        for rx in TIME_LABELS:
            m = rx.match(body)
            if m:
                h, mi, sec = m.group("t").replace(",", ".").split(":")
                return m.group("d"), int(h) * 3600 + int(mi) * 60 + float(sec)
        stripped = False
        for rx in LABELS:
            m = rx.match(body)
            if m and m.end() > 0:
                body = body[m.end() :]
                stripped = True
                break
        if not stripped:
            return None
    return None


def split_labels(line: str, matcher: HostMatcher) -> tuple[str, str | None, int | None]:
    """(message, host, rank) of a line: the launcher labels in front, resolved to the job's hosts.  The rank is the
    launcher's, else a trainer's own (TRAINING_RANK + N) when only that labels the line."""
    body, host, rank, train = split_all(line, matcher)
    if rank is None and train is not None:
        rank = TRAINING_RANK + train
    return body, host, rank


def rank_name(rank: int) -> str:
    """A rank as a person reads it: `rank N` (the launcher's) or `[rankN]` (the trainer's own label)."""
    return f"[rank{rank - TRAINING_RANK}]" if rank >= TRAINING_RANK else f"rank {rank}"


def split_all(line: str, matcher: HostMatcher) -> tuple[str, str | None, int | None, int | None]:
    """(message, host, launcher rank, training rank) of a line: the labels in front, resolved to the job's hosts.

    A label naming a host that is not one of the job's is not a label (the next format is tried): `error: `
    must not be taken for a host called `error`.
    """
    body = line
    host: str | None = None
    rank: int | None = None
    train: int | None = None
    for _ in range(MAX_LABELS):
        for rx in LABELS:
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
            if gd.get("tr") is not None and train is None:
                train = int(gd["tr"])
            if h is not None and host is None:
                host = h
            body = body[m.end() :]
            break
        else:
            break
    return body, host, rank, train
