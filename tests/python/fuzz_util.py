"""Shared strategies and checks for the property-based input tests (tests/python/test_fuzz_*.py).

Every reader of a file the tools read back gets arbitrary bytes, truncations of a valid file and extreme
numbers.  What may happen: the documented result, or an AgptError whose exit code is 2 and whose message is
one line.  What may not: any other exception (a traceback for the user), or a partial write.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from agpt.errors import AgptError

T = TypeVar("T")

# Modest budgets: the whole fuzz suite stays well under a minute on a loaded 2-core machine.
# AGPT_FUZZ_EXAMPLES=N raises them for a deeper search (the slow properties get N/2.4).
_N = int(os.environ.get("AGPT_FUZZ_EXAMPLES") or 60)
FUZZ = settings(max_examples=_N, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FUZZ_SLOW = settings(
    max_examples=max(1, int(_N / 2.4)),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
# A property whose every example runs whole commands (a job script generated and run): a tenth of the budget.
FUZZ_HEAVY = settings(
    max_examples=max(1, _N // 10),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

EXTREME_NUMBERS = st.one_of(
    st.sampled_from(
        [0, -1, 1, 2**31, 2**63, -(2**63), 10**400, math.inf, -math.inf, math.nan, 1e-320, 1e308]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
)
YAML_EXTREMES = st.sampled_from(
    [
        ".nan",
        ".inf",
        "-.inf",
        "1e400",
        "-1",
        "0",
        "1e-400",
        "99999999999999999999999",
        "0x7fffffffffffffff",
        "~",
        "''",
    ]
)


def truncations(data: bytes) -> st.SearchStrategy[bytes]:
    """DATA cut at any point, or with one byte changed."""
    cut = st.integers(min_value=0, max_value=len(data)).map(lambda n: data[:n])
    flip = st.tuples(st.integers(min_value=0, max_value=max(len(data) - 1, 0)), st.integers(1, 255)).map(
        lambda p: data[: p[0]] + bytes([data[p[0]] ^ p[1]]) + data[p[0] + 1 :] if data else data
    )
    return st.one_of(cut, flip)


def one_line_exit_2(fn: Callable[[], T]) -> T | AgptError:
    """Run FN: its result, or the AgptError it raised, which must be exit 2 with a one-line message."""
    try:
        return fn()
    except AgptError as exc:
        assert exc.exit_code == 2, f"{type(exc).__name__} exit {exc.exit_code}: {exc}"
        text = str(exc)
        assert text and "\n" not in text and "\r" not in text, repr(text)
        return exc


def is_error(x: Any) -> bool:
    return isinstance(x, AgptError)


# Sidecars shaped like the real one, with forged or garbage fields (FINGERPRINT: replaced by SRC's real one).
JSONISH_SIDECAR = st.fixed_dictionaries(
    {},
    optional={
        "format": st.sampled_from([2, 1, "2", None]),
        "fingerprint": st.sampled_from(["FINGERPRINT", "", "0:0:0"]),
        "sha256": st.one_of(st.text(max_size=64), st.sampled_from(["0" * 64])),
        "members": st.one_of(st.integers(-5, 10**20), st.text(max_size=3)),
        "validated": st.booleans(),
        "size": st.integers(-1, 10**20),
    },
)
