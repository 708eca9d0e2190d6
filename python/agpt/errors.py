"""Exceptions that library code raises; only the CLI turns them into exit codes.

Standard library only: the recovery path imports this module.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_STUCK = 3
EXIT_REPEAT = 4
EXIT_RESUBMIT = 75
EXIT_IDLE = 124


class AgptError(Exception):
    """A failure the user can act on; the CLI prints it on one line."""

    exit_code = EXIT_FAILURE


class BadInput(AgptError):
    """Bad input (file, field or flag): exit 2 with one line naming it."""

    exit_code = EXIT_USAGE


class ConfigError(BadInput):
    """A configuration file or key is wrong."""


class DataError(BadInput):
    """A data file (shard, index, manifest) is missing, corrupt or does not match."""


class CheckpointError(BadInput):
    """A checkpoint is missing, corrupt or belongs to another model."""
