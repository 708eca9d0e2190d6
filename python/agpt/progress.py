"""Progress for the helpers that run for minutes (tokenize, blend, yeet, ckpt export/import, sim table).

On a terminal: a tqdm bar with the rate and the ETA.  Anywhere else (a batch job's log): one plain line every
`AGPT_PROGRESS_SECONDS` (10) seconds and one at the end, `LABEL: DONE/TOTAL UNIT (P%), RATE/s, ETA T`, so a
log shows progress without a wall of carriage returns.  One library (tqdm) for every helper; it is imported only
when a bar is drawn.
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, Any

from agpt import numeric

EVERY_ENV = "AGPT_PROGRESS_SECONDS"
EVERY_DEFAULT = 10.0


def _every() -> float:
    """AGPT_PROGRESS_SECONDS through agpt.numeric (a bad value is refused naming it)."""
    return float(numeric.env_number(os.environ, EVERY_ENV, EVERY_DEFAULT, lo=0, hi=numeric.MAX_SECONDS))


def _size(n: float, unit: str, scale: bool) -> str:
    """1.5 MB with scale (powers of 1000, as tqdm's unit_scale), else a whole count."""
    if not scale:
        return f"{n:,.0f} {unit}"
    for prefix in ("", "k", "M", "G", "T"):
        if abs(n) < 1000 or prefix == "T":
            return f"{n:.1f} {prefix}{unit}" if prefix else f"{n:.0f} {unit}"
        n /= 1000
    return f"{n:.1f} P{unit}"


def duration(s: float) -> str:
    s = round(s)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s" if m else f"{sec}s"


class Progress:
    """`update(n)` as work completes; `close()` (or a `with` block) at the end."""

    def __init__(
        self,
        total: float | None,
        label: str,
        *,
        unit: str = "items",
        scale: bool = False,
        bar: bool | None = None,
        quiet: bool = False,
        every: float | None = None,
        stream: IO[str] | None = None,
    ) -> None:
        self.total, self.label, self.unit, self.scale, self.quiet = total, label, unit, scale, quiet
        self.stream = stream if stream is not None else sys.stderr
        self.every = _every() if every is None else every
        self.done = 0.0
        self._shown = 0.0  # `done` when the last plain line was printed
        self.t0 = self.last = time.monotonic()
        self._bar: Any = None
        tty = self.stream.isatty() if bar is None else bar
        if tty and not quiet:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=label, unit=unit, unit_scale=scale, file=self.stream,
                             dynamic_ncols=True, mininterval=0.5)  # fmt: skip

    def update(self, n: float = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if not self.quiet and now - self.last >= self.every and self.done != self._shown:
            self.last = now
            self._line(now)

    def line(self, now: float | None = None) -> str:
        """The plain line: done/total, percent, rate and ETA."""
        now = time.monotonic() if now is None else now
        took = max(now - self.t0, 1e-9)
        rate = self.done / took
        text = f"{self.label}: {_size(self.done, self.unit, self.scale)}"
        if self.total:
            done = (
                text if self.scale else f"{self.label}: {self.done:,.0f}"
            )  # "1.2 MB of 2.0 MB", "3 of 9 files"
            text = (
                f"{done} of {_size(self.total, self.unit, self.scale)} ({100 * self.done / self.total:.0f}%)"
            )
        text += f", {_size(rate, self.unit, self.scale) if self.scale else f'{rate:.3g} {self.unit}'}/s"
        if self.total and rate > 0 and self.done < self.total:
            text += f", ETA {duration((self.total - self.done) / rate)}"
        elif self.done and self.total and self.done >= self.total:
            text += f", done in {duration(took)}"
        return text

    def write(self, text: str) -> None:
        """A line of its own (a result as it comes), above the bar on a terminal."""
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
            return
        try:
            print(text, file=self.stream, flush=True)
        except (OSError, ValueError):
            pass

    def _line(self, now: float) -> None:
        self._shown = self.done
        try:
            print(self.line(now), file=self.stream, flush=True)
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif not self.quiet and self.done and self.done != self._shown:
            self._line(time.monotonic())
        self.quiet = True  # a second close prints nothing

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
