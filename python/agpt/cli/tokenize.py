"""`agpt tokenize`: text, JSONL or parquet into Megatron MMIDIDX shards, in parallel (workers x ranks)."""

from __future__ import annotations

import json

import click

from agpt.cli import params


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
@click.option(
    "--shard-tokens",
    type=params.count(1, 1 << 40),
    default=1 << 30,
    show_default=True,
    help="Tokens per shard.",
)
@click.option("--append-eod/--no-append-eod", default=True, show_default=True, help="End documents with EOD.")
@click.option("--bos", is_flag=True, help="Start documents with BOS.")
@click.option(
    "--doc-per-file", is_flag=True, help="A .txt file is one document (default: blank-line blocks)."
)
@click.option(
    "--chunk-bytes",
    type=params.count(1, 1 << 40),
    default=64 << 20,
    show_default=True,
    help="Work unit size.",
)
@click.option("--name", default="data", show_default=True, help="Shard name prefix: NAME_00000.bin/.idx.")
@click.option("--corpus", default="", help="Corpus name in filelist.txt (default: the output dir's name).")
@click.option("--skip-empty", is_flag=True, help="Drop empty documents instead of failing.")
@click.option("--overwrite", is_flag=True, help="Replace shards of other inputs in --output.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
def cli(
    model: str,
    inputs: tuple[str, ...],
    output: str,
    text_key: str,
    workers: int,
    shard_tokens: int,
    append_eod: bool,
    bos: bool,
    doc_per_file: bool,
    chunk_bytes: int,
    name: str,
    corpus: str,
    skip_empty: bool,
    overwrite: bool,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Tokenize --input into fixed-size MMIDIDX shards; `mpiexec -n R agpt tokenize ...` spreads the
    work across ranks. Output is identical for any number of workers and ranks; a re-run skips
    finished work."""
    from agpt.data.dist import root_reports
    from agpt.data.tokenize import TokenizeSettings, format_table, run

    settings = TokenizeSettings(
        model=model,
        inputs=list(inputs),
        output=output,
        text_key=text_key,
        workers=workers,
        shard_tokens=shard_tokens,
        append_eod=append_eod,
        bos=bos,
        doc_per_file=doc_per_file,
        chunk_bytes=chunk_bytes,
        name=name,
        corpus=corpus,
        skip_empty=skip_empty,
        overwrite=overwrite,
        progress=progress,
    )
    report = root_reports(lambda: run(settings))
    if not report:
        return  # not rank 0
    if as_json:
        click.echo(json.dumps(report, indent=1))
        return
    if report.get("skipped"):
        click.echo(f"{output}: up to date ({len(report['shards'])} shards)")
    click.echo(format_table(report))
