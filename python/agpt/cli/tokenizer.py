"""`agpt tokenizer train`: make a pinned SentencePiece tokenizer from local text."""

from __future__ import annotations

from typing import Any

import click

from agpt import numeric
from agpt.cli import params
from agpt.cli.output import show


@click.group(name="tokenizer")
def cli() -> None:
    """Train a SentencePiece tokenizer from local text (nothing is downloaded)."""


@cli.command(name="train")
@click.option(
    "--input",
    "inputs",
    multiple=True,
    required=True,
    help="Text/JSONL/parquet file or directory (repeatable).",
)
@click.option(
    "--vocab-size", type=params.count(1, numeric.MAX_VOCAB), required=True, help="Number of pieces."
)
@click.option("--output", required=True, help="Model path, ending in .model (a .vocab is written beside it).")
@click.option("--model-type", default="bpe", show_default=True, help="bpe, unigram, char or word.")
@click.option("--character-coverage", type=params.Number(lo=0, hi=1), default=0.9995, show_default=True)
@click.option(
    "--max-sentences",
    type=params.count(1, 10**10),
    default=2_000_000,
    show_default=True,
    help="Lines used at most.",
)
@click.option("--text-key", default="text", show_default=True, help="JSON field holding the text.")
@click.option(
    "--threads", type=params.count(0, 1024), default=0, help="Training threads (0: all CPUs, at most 16)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def train_cmd(as_json: bool, **opts: Any) -> None:
    """Train OUTPUT.model on the lines of every --input document."""
    from agpt.data.tokenizer import TrainSettings, train

    def text(result: dict[str, Any]) -> str:
        return (f"wrote {result['model']} (vocab {result['vocab_size']}, {result['sentences']} lines, "
                f"sha256 {result['sha256']})")  # fmt: skip

    show(train(TrainSettings(**{**opts, "inputs": list(opts["inputs"])})), as_json, text)
