"""Slurm hostlists: the Python expander (agpt.hostlist) and the Bash one job scripts run before any Python exists
(lib/sched.sh: sched_expand_nodelist) give the same hosts, in the same order, on generated hostlists."""

from __future__ import annotations

import subprocess

from hypothesis import example, given
from hypothesis import strategies as st

from agpt.hostlist import expand_hostlist
from conftest import ROOT
from fuzz_util import FUZZ

END = "--end--"


def bash_expand(exprs: list[str]) -> list[list[str]]:
    """sched_expand_nodelist on each expression, in one strict Bash (as a job script calls it)."""
    script = (
        f"set -euo pipefail; source {ROOT / 'lib' / 'sched.sh'}; "
        f'while IFS= read -r e; do sched_expand_nodelist "$e"; echo {END}; done'
    )
    out = subprocess.run(
        ["bash", "-c", script],
        input="".join(f"{e}\n" for e in exprs),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [block.split() for block in out.split(f"{END}\n")[:-1]]


@st.composite
def ranges(draw: st.DrawFn) -> str:
    """One bracket group's ranges, as Slurm prints them: `001-004,007`, padded or not."""
    width = draw(st.integers(1, 4))
    padded = draw(st.booleans())
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        lo = draw(st.integers(0, min(10**width - 1, 300)))
        hi = min(lo + draw(st.integers(0, 4)), 10**width - 1)
        fmt = f"{{:0{width}d}}" if padded else "{}"
        parts.append(fmt.format(lo) if hi == lo else f"{fmt.format(lo)}-{fmt.format(hi)}")
    return ",".join(parts)


NAME = st.from_regex(r"[a-z][a-z0-9-]{0,5}", fullmatch=True)
INFIX = st.from_regex(r"[a-z][a-z0-9]{0,2}", fullmatch=True)


@st.composite
def items(draw: st.DrawFn) -> str:
    """A host, or a name with one or two bracket groups (`x1000c0s[0-1]b0n[0-1]`)."""
    head = draw(NAME)
    groups = draw(st.integers(0, 2))
    if groups == 0:
        return head
    text = f"{head}[{draw(ranges())}]"
    if groups == 2:
        text += f"{draw(INFIX)}[{draw(ranges())}]"
    return text + draw(st.sampled_from(["", "-hsn0", ".ib"]))


HOSTLISTS = st.lists(items(), min_size=1, max_size=4).map(",".join)


@FUZZ
@given(st.lists(HOSTLISTS, min_size=1, max_size=20))
@example(["nid[001232-001235,001240]", "n[1-3],m5", "x1000c0s[0-1]b0n[0-1]", "n[8-12]", "n[08-12]", "nid001"])
def test_bash_and_python_expand_hostlists_alike(exprs: list[str]) -> None:
    assert bash_expand(exprs) == [expand_hostlist(e) for e in exprs]
