"""Launcher and runtime labels in front of a log line: which rank printed it, on which host.

Every launcher prefixes a rank's output its own way (`3: `, `nid001: `, `[1,3]<stderr>:`, `[rank3]:`, NCCL's
`host:pid:tid [dev] `); `split_labels` takes them off, tried repeatedly (`x1000c0s0b0n0: 3: ...`), and returns the
message with the host and the global rank they named, so every later rule (agpt.failover.attribution) sees one
shape whatever the launcher.  A host is returned only in the hostfile's spelling (agpt.failover.hostmatch).

The formats, per launcher option, are listed with their sources in docs/contract.md (the label-format matrix)
and tested one by one (tests/python/test_classify_formats.py::test_label_matrix).  Standard library only.
"""

from __future__ import annotations

import re

from agpt.failover.hostmatch import HostMatcher

# Named groups: `r` a global rank, `h` a host; a label with neither is only taken off.
_H = r"[A-Za-z][\w.-]*"
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
MAX_LABELS = 4  # labels taken off one line at most


def split_labels(line: str, matcher: HostMatcher) -> tuple[str, str | None, int | None]:
    """(message, host, rank) of a line: the launcher labels in front, resolved to the job's hosts.

    A label naming a host that is not one of the job's is not a label (the next format is tried): `error: `
    must not be taken for a host called `error`.
    """
    body = line
    host: str | None = None
    rank: int | None = None
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
            if h is not None and host is None:
                host = h
            body = body[m.end() :]
            break
        else:
            break
    return body, host, rank
