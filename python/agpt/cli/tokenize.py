"""`agpt tokenize`: text, JSONL or parquet into Megatron MMIDIDX shards, in parallel (workers x ranks)."""

from __future__ import annotations

from typing import Any

import click

from agpt.cli import params
from agpt.cli.output import show


def _size(flag: str, default: int, what: str) -> Any:
    """A size option: a whole number from 1 to 2**40."""
    return click.option(flag, type=params.count(1, 1 << 40), default=default, show_default=True, help=what)


@click.command(name="tokenize")
@click.option("--model", required=True, help="SentencePiece .model file.")
@click.option("--input", "inputs", multiple=True, required=True, help="Input file or directory (repeatable).")
@click.option("--output", required=True, help="Directory for the shards, filelist.txt and tokenize.json.")
@click.option(
    "--text-key", default="text", show_default=True, help="JSON field / parquet column of the text."
)
@click.option(
    "--workers", type=params.count(0, 1024), default=0, help="Worker processes per rank (0: one per CPU)."
)
@_size("--shard-tokens", 1 << 30, "Tokens per shard.")
@click.option("--append-eod/--no-append-eod", default=True, show_default=True, help="End documents with EOD.")
@click.option("--bos", is_flag=True, help="Start documents with BOS.")
@click.option(
    "--doc-per-file", is_flag=True, help="A .txt file is one document (default: blank-line blocks)."
)
@_size("--chunk-bytes", 64 << 20, "Work unit size.")
@click.option("--name", default="data", show_default=True, help="Shard name prefix: NAME_00000.bin/.idx.")
@click.option("--corpus", default="", help="Corpus name in filelist.txt (default: the output dir's name).")
@click.option("--skip-empty", is_flag=True, help="Drop empty documents instead of failing.")
@click.option("--overwrite", is_flag=True, help="Replace shards of other inputs in --output.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
def cli(as_json: bool, **opts: Any) -> None:
    """Tokenize --input into fixed-size MMIDIDX shards; `mpiexec -n R agpt tokenize ...` spreads the
    work across ranks. Output is identical for any number of workers and ranks; a re-run skips
    finished work."""
    from agpt.data.dist import root_reports
    from agpt.data.tokenize import TokenizeSettings, format_table, run

    def text(report: dict[str, Any]) -> str:
        head = (
            f"{opts['output']}: up to date ({len(report['shards'])} shards)\n"
            if report.get("skipped")
            else ""
        )
        return head + format_table(report)

    settings = TokenizeSettings(**{**opts, "inputs": list(opts["inputs"])})
    show(root_reports(lambda: run(settings)), as_json, text)
