"""Text for people: one home for how a value read from data is shown on a terminal and in a figure.

A log line, a host name from a record, an attempt log's name are data: they may hold ESC and the other control
characters that a terminal obeys (clear the screen, set the title, write the clipboard: OSC 52), or `$...$` that
matplotlib would parse as mathematics (`$\\frac{$` ends the plot in a traceback).  Everything agpt prints for a
person goes through `terminal` (each control character shown as an escape such as `\\x1b`, so the line keeps
its meaning and does nothing); every figure is drawn by `agpt.figure.pyplot`, where no text is parsed as
mathematics.  Standard library only: the recovery path prints through it.
"""

from __future__ import annotations

import re

# C0 controls (newline and tab included: a field is one line), DEL, C1 controls (a terminal reads 0x9b as CSI),
# and the bidirectional overrides that reorder what is shown.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def text(value: object) -> str:
    """VALUE as text that can be encoded: a path's bytes that are not UTF-8 (Python's lone surrogates, from a run
    directory whose name is not UTF-8) shown as U+FFFD instead of failing where the text is written or drawn."""
    s = str(value)
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace") if _SURROGATE.search(s) else s


def terminal(value: object) -> str:
    """VALUE as one line that is safe on a terminal: every control character escaped, no lone surrogate."""
    return _CONTROL.sub(_escape, text(value))


def lines(text: str) -> str:
    """A block of lines (a report) safe on a terminal: each line cleaned, the newlines kept."""
    return "\n".join(terminal(line) for line in text.split("\n"))
