"""Figures: one home for how agpt draws them (matplotlib, headless).

A title, a class, a corpus or task name, a job id or a run directory's name drawn in a figure is data: with `$`
in it matplotlib would parse it as mathematics (`$\\frac{$` ends the plot in a traceback).  Every figure agpt
draws comes from `pyplot()`, where no text is parsed as mathematics; text that may hold a path's non-UTF-8 bytes
goes through `agpt.shown.text` first.
"""

from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    """matplotlib's pyplot, headless (Agg), with no text parsed as mathematics: a title, a class, a corpus name or a
    job id with `$` in it is drawn as written."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt
