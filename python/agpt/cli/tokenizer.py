"""`agpt tokenizer train`: make a pinned SentencePiece tokenizer from local text."""

from __future__ import annotations

import json

import click

from agpt import numeric
from agpt.cli import params


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
def train_cmd(
    inputs: tuple[str, ...],
    vocab_size: int,
    output: str,
    model_type: str,
    character_coverage: float,
    max_sentences: int,
    text_key: str,
    threads: int,
    as_json: bool,
) -> None:
    """Train OUTPUT.model on the lines of every --input document."""
    from agpt.data.tokenizer import TrainSettings, train

    result = train(
        TrainSettings(
            inputs=list(inputs),
            output=output,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            max_sentences=max_sentences,
            text_key=text_key,
            threads=threads,
        )
    )
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        click.echo(
            f"wrote {result['model']} (vocab {result['vocab_size']}, {result['sentences']} lines, "
            f"sha256 {result['sha256']})"
        )
