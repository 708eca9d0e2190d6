"""Slurm hostlists (`nid[001232-001235,001240]`, `n[1-3],m5`, `x1000c0s[0-1]b0n[0-1]`): the one Python expander.

Zero padding is kept (`n[08-10]` is n08 n09 n10), several bracket groups expand first group first, as Slurm
orders them.  Bounded: at most `limit` names, whatever the expression says.  Job scripts expand the same lists in
Bash before any Python exists (lib/sched.sh: sched_expand_nodelist); tests/python/test_hostlist.py holds the two
equal on generated hostlists.

Standard library only (the recovery path and the trainer's rendezvous read it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# A Slurm hostlist expression: prefix[ranges]suffix, e.g. nid[001234-001236,001240].
_HOSTLIST = re.compile(r"^([^\[\],]*)\[([0-9,\-]+)\](.*)$")
MAX_EXPANDED = 65536


def expand_hostlist(expr: str, limit: int = MAX_EXPANDED) -> list[str]:
    """Expand a Slurm hostlist (`nid[001-003,007]`, `a,b`) into names, keeping zero padding; bounded by limit."""
    out: list[str] = []
    for part in _split_top(expr):
        for name in _expand_one(part):
            out.append(name)
            if len(out) >= limit:
                return out
    return out


def _split_top(expr: str) -> Iterator[str]:
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            if expr[start:i]:
                yield expr[start:i]
            start = i + 1
    if expr[start:]:
        yield expr[start:]


def _expand_one(part: str) -> Iterator[str]:
    m = _HOSTLIST.match(part)
    if not m:
        yield part
        return
    prefix, ranges, suffix = m.groups()
    for rng in ranges.split(","):
        if not rng:
            continue
        lo, _, hi = rng.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            continue
        width = len(lo)
        a, b = int(lo), int(hi) if hi else int(lo)
        for i in range(a, min(b, a + MAX_EXPANDED) + 1):
            for rest in _expand_one(suffix) if "[" in suffix else (suffix,):
                yield f"{prefix}{i:0{width}d}{rest}"
