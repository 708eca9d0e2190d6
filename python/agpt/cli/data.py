"""`agpt data verify|inspect`: check a blend against its manifest, or show its mixture."""

from __future__ import annotations

import json

import click

from agpt.cli import params


@click.group(name="data")
def cli() -> None:
    """Verify a blended data set against its manifest, or inspect its mixture."""


@cli.command(name="verify")
@click.argument("directory")
@click.option("--level", default="full", show_default=True, help="sizes, idx or full (see the docs).")
@click.option("--tokenizer", default=None, help="Also require this tokenizer to be the pinned one.")
def verify_cmd(directory: str, level: str, tokenizer: str | None) -> None:
    """Check every pinned file of DIRECTORY; exit 2 naming the first mismatch."""
    from agpt.data.manifest import unpinned_bins, verify

    manifest = verify(directory, level, tokenizer)
    click.echo(
        f"{directory}: ok ({len(manifest['files'])} shards, {manifest.get('num_samples', '?')} samples, "
        f"cache key {str(manifest.get('cache_key', '?'))[:16]})"
    )
    n = unpinned_bins(manifest)
    if level == "full" and n:
        click.echo(
            f"{directory}: note: {n} of {len(manifest['files'])} shard .bin files have no digest pinned "
            "(manifest made before .bin digests were recorded): checked by size only; rebuild the blend "
            "to pin them"
        )


@cli.command(name="inspect")
@click.argument("directory")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--show", type=params.count(0, 10**6), default=0, help="Detokenize the first K samples.")
def inspect_cmd(directory: str, as_json: bool, show: int) -> None:
    """Per-corpus requested vs effective weight, epochs and tokens of a blend."""
    from agpt.data.report import format_report, inspect

    info = inspect(directory, show)
    if as_json:
        click.echo(json.dumps(info, indent=1))
        return
    click.echo(format_report(info))
    for s in info.get("samples", []):
        click.echo(f"--- sample {s['index']} ({s['corpus']}, {len(s['tokens'])} tokens)")
        click.echo(s["text"])
