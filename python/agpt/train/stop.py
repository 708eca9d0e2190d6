"""Why the training loop stops early or saves: named requests that every rank agrees on.

A request reaches one rank at a time (SIGTERM and SIGUSR1 land on some ranks first, the job's deadline is each
rank's own clock, a time-based save is due by rank 0's clock), so each step's all-reduce carries every rank's
request beside the loss, and all ranks act on the same step.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agpt import numeric, rundir
from agpt.errors import EXIT_RESUBMIT

DEADLINE_ENV = "AGPT_DEADLINE_EPOCH"  # the job's end (epoch), exported by the job script


@dataclass(frozen=True, slots=True)
class Stop:
    """What a rank asks for at this step (or, after the all-reduce, what some rank asked for)."""

    term: bool = False  # SIGTERM: the scheduler ends the job; save, exit 143
    resubmit: bool = False  # SIGUSR1, a straggler swap or the deadline: save, exit 75 (the chain resubmits)
    save: bool = False  # a time-based save is due: save and go on
    local: bool = False  # a time-based save of the local tier is due (checkpoint.local_interval_s)
    swap: bool = False  # a straggler swap: exit 75 at the next local checkpoint (the tier is on)

    def encode(self) -> list[float]:
        """The request as numbers to sum over the ranks (in the step's all-reduce)."""
        return [float(self.term), float(self.resubmit), float(self.save), float(self.local), float(self.swap)]

    @classmethod
    def decode(cls, sums: Sequence[float]) -> Stop:
        """The agreed request from the summed numbers: any rank's request counts."""
        term, resubmit, save, local, swap = (float(x) > 0 for x in sums)
        return cls(term=term, resubmit=resubmit, save=save, local=local, swap=swap)

    @property
    def ends_run(self) -> bool:
        return self.term or self.resubmit

    @property
    def exit_code(self) -> int:
        return 128 + signal.SIGTERM if self.term else EXIT_RESUBMIT

    @property
    def reason(self) -> str:
        return "SIGTERM" if self.term else rundir.RESUBMIT_REASON


NO_STOP = Stop()


def deadline(env: Mapping[str, str] | None = None) -> float | None:
    """The job's end (AGPT_DEADLINE_EPOCH) through agpt.numeric, None when unset or empty: a bad value (nan,
    text) is refused naming it; train/run.py asks once before training, so a typo is not silently no deadline."""
    return numeric.epoch((os.environ if env is None else env).get(DEADLINE_ENV), DEADLINE_ENV)


def deadline_near(margin_s: float, env: Mapping[str, str] | None = None) -> bool:
    """Whether the job's deadline (AGPT_DEADLINE_EPOCH) is less than MARGIN_S away."""
    end = deadline(env)
    return end is not None and time.time() >= end - margin_s
