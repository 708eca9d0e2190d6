"""Click parameter types of the `agpt` commands: every numeric option is a `Number`, so it is parsed by
agpt.numeric.number (the one validator: NaN, infinities and values out of the stated range are one line naming the
flag, exit 2, before the command runs).  tests/python/test_fuzz_numbers.py holds every numeric option to it."""

from __future__ import annotations

from typing import Any

import click

from agpt import numeric
from agpt.errors import BadInput


class Number(click.ParamType):
    """A number within [lo, hi] (a whole one with integer=True), through agpt.numeric.number."""

    def __init__(
        self, *, lo: float | None = None, hi: float | None = None, integer: bool = False, unit: str = ""
    ) -> None:
        self.lo, self.hi, self.integer, self.unit = lo, hi, integer, unit
        self.name = "integer" if integer else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        flag = (param.opts[0] if param is not None and param.opts else None) or "value"
        try:
            return numeric.number(value, flag, lo=self.lo, hi=self.hi, integer=self.integer, unit=self.unit)
        except BadInput as e:
            raise click.UsageError(str(e), ctx) from None

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "N" if self.integer else "X"


def count(lo: int = 0, hi: int = numeric.MAX_COUNT) -> Number:
    """A whole number from LO to HI."""
    return Number(lo=lo, hi=hi, integer=True)


def seconds(lo: float = 0.0) -> Number:
    """Seconds from LO to a year (agpt.numeric.MAX_SECONDS)."""
    return Number(lo=lo, hi=numeric.MAX_SECONDS, unit="seconds")


SEED = count(0, 2**63 - 1)
