"""The one rule for a value written into shell text: a generated job script, a hook's command, Bash arithmetic.

A value is one line of printable text: a control character (newline, carriage return, tab, NUL, ESC, DEL, the
C1 controls, the Unicode line and paragraph separators) is refused with BadInput naming where the value came
from, because a newline in a job script, even inside a comment or a scheduler directive, starts a live line.
A value that becomes a shell word is quoted unless it is plainly safe ([A-Za-z0-9_@%+=:,./-]: no glob, no brace,
no tilde, no `$`).  A count that Bash does arithmetic on is plain decimal digits, so `$(( ))` never evaluates
text (`PWD[$(id)]` runs `id` there).

The job script is written by Bash (lib/jobgen.sh), so the rule is spelled twice: here for the Python side (hook
commands, the job config's assignments) and as `env_quote` in lib/env.sh; tests/python/test_shellword.py holds
the two equal on generated text.  Standard library only (the failover loop's hooks go through it).
"""

from __future__ import annotations

import re
import shlex

from agpt.errors import BadInput

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
COUNT = re.compile(r"[0-9]{1,18}")


def printable(text: str) -> str:
    """TEXT with its control characters escaped (\\n, \\x1b, \\u2028), for a one-line message."""
    return CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode(), text)


def line(value: str, where: str) -> str:
    """VALUE as it is, for a comment or a scheduler directive; BadInput naming WHERE on a control character."""
    m = CONTROL.search(value)
    if m:
        raise BadInput(
            f"{where}: holds the control character {m.group(0)!r}; a value in a script must be one line of "
            f"printable text: {printable(value)[:80]!r}"
        )
    return value


def word(value: str, where: str) -> str:
    """VALUE as one shell word: as it is when plainly safe, else single-quoted; refused like line()."""
    line(value, where)
    return value if PLAIN.fullmatch(value) else shlex.quote(value)


def count(value: str, where: str, *, maximum: int) -> str:
    """VALUE for Bash arithmetic: plain decimal digits, at most MAXIMUM (leading zeros dropped: 010 is not 8)."""
    if not COUNT.fullmatch(value) or int(value) > maximum:
        raise BadInput(f"{where}: must be a whole number from 0 to {maximum}, got {printable(value)[:40]!r}")
    return str(int(value))
