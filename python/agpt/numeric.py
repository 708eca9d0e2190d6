"""Every number that comes from outside (a flag, an environment variable, a config or profile key, a record read
back) is parsed by `number()`: one rule, one message, one home for the bounds.

NaN, infinities, values that do not parse and values outside the stated range are refused with BadInput (exit 2)
naming the flag, variable or key, before anything runs: a NaN compares false with every limit and would slip
past a `<` check, an infinity or 10^20 in a size turns a loop or an allocation endless, and a number too large
for a C int or a clock fails deep inside the standard library with a traceback.  So every size that drives a loop
or memory has an upper bound here, stated once and quoted by --help and docs/contract.md.

Standard library only, and imports nothing of ours but the errors: the recovery path (watch, failover, chain,
heartbeats) and the login-node tools use it alike.
"""

from __future__ import annotations

import math
import re

from agpt.errors import BadInput

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: `agpt watch` imports this module and starts fast
if TYPE_CHECKING:
    from typing import Any

# ----------------------------------------------------------------------------------------------- the bounds
# Durations: a year.  Larger values (1e400 is inf) overflow the clocks, polls and sleeps they feed.
MAX_SECONDS = 365 * 86400.0
# An epoch time (a deadline, a record's time): up to the year 5138.
MAX_EPOCH = 1e11
# Sizes that drive loops or memory.  Each is far above any real job (the largest machines have ~10,000 nodes,
# the largest open models ~130 layers, vocabularies ~256k pieces, contexts ~1M tokens) and far below where a
# loop or an allocation would never end.
MAX_NODES = 100_000  # nodes (and hosts) of one job
MAX_RANKS_PER_NODE = 1024  # ranks per node (one per core on the widest CPU nodes)
MAX_LAYERS = 4096  # transformer layers
MAX_VOCAB = 1 << 24  # tokenizer pieces (token ids are stored as uint32)
MAX_SEQ_LEN = 1 << 24  # tokens per sample
MAX_DAYS = 3650.0  # simulated days
MAX_SAMPLES = 1 << 40  # samples of a blend (its index holds 8 bytes each)
MAX_COUNT = 1 << 53  # any other count: exact as a float, so JSON and every reader agree

_INT = re.compile(r"[+-]?[0-9]+")


def _bound(x: float) -> str:
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    return f"{x:g}" if isinstance(x, float) else str(x)


def number(
    value: Any,
    where: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    integer: bool = False,
    unit: str = "",
) -> Any:
    """VALUE (a string as typed, or a number as a parser gave it) as a finite int (INTEGER) or float within
    [LO, HI]; BadInput naming WHERE (the flag, variable or key) otherwise.  UNIT ("seconds") words the message."""
    kind = ("a whole number" if integer else "a number") + (f" of {unit}" if unit else "")
    v: Any = None
    if isinstance(value, str):
        text = value.strip()
        try:
            if integer:
                if _INT.fullmatch(text) and len(text) <= 30:
                    v = int(text)
            else:
                v = float(text) if len(text) <= 400 else None
        except (ValueError, OverflowError):
            v = None
    elif isinstance(value, bool) or value is None:
        v = None
    elif isinstance(value, int):
        v = value
        if not integer:
            try:
                v = float(value)
            except OverflowError:  # 10**400: beyond a float, so beyond any range we state
                v = math.inf if value > 0 else -math.inf
    elif isinstance(value, float):
        v = value
        if integer and math.isfinite(value) and value.is_integer():
            v = int(value)  # YAML 1e3 for a count
        elif integer:
            v = None if math.isfinite(value) else value
    if v is None:
        raise BadInput(f"{where}: not {kind}: {_short(value)}")
    if isinstance(v, float) and not math.isfinite(v):
        finite = kind if _range(lo, hi) else "a finite " + kind.removeprefix("a ")
        raise BadInput(f"{where}: must be {finite}{_range(lo, hi)}, got {_short(value)}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise BadInput(f"{where}: must be {kind}{_range(lo, hi)}, got {_short(value)}")
    return v


def _range(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f" from {_bound(lo)} to {_bound(hi)}"
    if lo is not None:
        return f" >= {_bound(lo)}"
    if hi is not None:
        return f" <= {_bound(hi)}"
    return ""


def _short(value: Any) -> str:
    """VALUE for a one-line message: repr, control characters escaped by repr, cut at 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def seconds(value: Any, where: str, *, minimum: float = 0.0) -> float:
    """A duration in seconds: finite, >= minimum, at most MAX_SECONDS (a year)."""
    return float(number(value, where, lo=minimum, hi=MAX_SECONDS, unit="seconds"))


def whole(value: Any, where: str, *, minimum: int = 0, maximum: int = 1_000_000) -> int:
    """A count: a whole number within [minimum, maximum]."""
    return int(number(value, where, lo=minimum, hi=maximum, integer=True))


def epoch(value: Any, where: str) -> float | None:
    """An epoch time (a deadline): None for '' or None, else a number from 0 to MAX_EPOCH."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return float(number(value, where, lo=0, hi=MAX_EPOCH, unit="epoch seconds"))


def flag(where: str, **bounds: Any) -> Any:
    """number() as an argparse `type=` for the flag WHERE (BadInput, exit 2, reaches the command's handler)."""
    return lambda text: number(text, where, **bounds)


def env_number(environ: Any, name: str, default: Any, **bounds: Any) -> Any:
    """Environment variable NAME through number() (unset or empty: DEFAULT, returned as given)."""
    text = environ.get(name)
    if text is None or not str(text).strip():
        return default
    return number(text, name, **bounds)


_KINDS = {
    "seconds": lambda v, name: seconds(v, name),
    "count": lambda v, name: whole(v, name, maximum=MAX_COUNT),
    "epoch": lambda v, name: epoch(v, name),
}


def main(argv: list[str] | None = None) -> int:
    """`python -m agpt.numeric KIND:NAME=VALUE...` (KIND: seconds, count, epoch; an empty VALUE is unset): exit 0
    when every VALUE passes, else one line naming the first bad NAME and exit 2.  lib/failover.sh checks its
    settings so, once, before the first attempt: a bad one is refused, not found out by a failing attempt."""
    import sys

    for arg in sys.argv[1:] if argv is None else argv:
        kind, _, rest = arg.partition(":")
        name, eq, value = rest.partition("=")
        try:
            if kind not in _KINDS or not eq:
                raise BadInput(
                    f"usage: python -m agpt.numeric KIND:NAME=VALUE... (KIND: {', '.join(_KINDS)})"
                )
            if value.strip():
                _KINDS[kind](value, name)
        except BadInput as e:
            sys.stderr.write(f"agpt: error: {e}\n")
            return e.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
