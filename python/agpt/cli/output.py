"""What the data commands print: their result as JSON with --json, else as text, and only on rank 0 (under
`mpiexec` every rank runs the command; the others return an empty result)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click


def show(result: dict[str, Any], as_json: bool, text: Callable[[dict[str, Any]], str]) -> None:
    """RESULT as JSON, or as TEXT writes it; nothing for an empty result (a rank other than 0)."""
    if result:
        click.echo(json.dumps(result, indent=1) if as_json else text(result))
