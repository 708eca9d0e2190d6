"""How a training process ends: one error line, the right exit code, and `os._exit`.

gloo workers on torch 2.13 can abort at interpreter exit ("terminate called without an active
exception") after a clean run, turning success into a crash for the failover classifier; leaving the
process group and ending with os._exit avoids it.  Errors every rank hits alike are printed by rank 0
only, so a 1,000-rank job's log shows one line, not a thousand.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

from agpt.errors import AgptError, CheckpointError, ConfigError
from agpt.train.dist import env_rank


class NonFinite(AgptError):
    """A NaN/Inf loss or gradient: every rank would hit it again (the `app` failure class)."""


class SilentCorruption(AgptError):
    """A rank computed wrong numbers without an error (agpt.train.sdc): its host is named on an `sdc:` line, which
    the failover classifier reads as a node fault (pattern app.sdc), so the loop evicts it."""


# Raised alike on every rank (same config, same shared checkpoint, globally reduced numbers).
_COLLECTIVE_ERRORS: tuple[type[BaseException], ...] = (ConfigError, CheckpointError, NonFinite,
                                                       SilentCorruption)  # fmt: skip


def run_and_exit(
    fn: Callable[[], int], *, same_on_all_ranks: tuple[type[BaseException], ...] = ()
) -> NoReturn:
    """Run fn; print an AgptError as `agpt: error: ...`; leave the process group; os._exit(code)."""
    quiet = (*_COLLECTIVE_ERRORS, *same_on_all_ranks)
    clean = True
    try:
        code = fn()
    except AgptError as exc:
        if env_rank() == 0 or not isinstance(exc, quiet):
            print(f"agpt: error: {exc}", file=sys.stderr, flush=True)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            traceback.print_exc()
        else:  # the run directory's filesystem is full (progress, metrics): say where, in one line
            where = exc.filename or "the run directory"
            print(f"agpt: error: disk full: cannot write {where} ({os.strerror(exc.errno)})", file=sys.stderr)
        code = 1
        clean = False
    except BaseException:
        traceback.print_exc()
        code = 1
        clean = False  # another rank may sit in a collective: do not wait on it, let the launcher reap us
    sys.stdout.flush()
    sys.stderr.flush()
    if clean and "torch.distributed" in sys.modules:  # config errors end before torch is imported
        from agpt.train import dist

        dist.finish()
    os._exit(code)
