"""`agpt blend`: a weighted file list of shards into a pinned per-batch mixture of L+1-token samples."""

from __future__ import annotations

import json

import click

from agpt import numeric
from agpt.cli import params


@click.command(name="blend")
@click.option("--file-list", required=True, help="Lines 'WEIGHT PREFIX CORPUS' (Megatron-DeepSpeed format).")
@click.option(
    "--seq-len", type=params.count(1, numeric.MAX_SEQ_LEN), required=True, help="L: samples hold L+1 tokens."
)
@click.option(
    "--num-samples",
    type=params.count(1, numeric.MAX_SAMPLES),
    required=True,
    help="Samples in the blend (steps x global batch).",
)
@click.option("--seed", type=params.SEED, default=1234, show_default=True, help="Shuffle seed.")
@click.option("--output", required=True, help="Blend directory (index files + manifest.json).")
@click.option("--tokenizer", default=None, help="Tokenizer model (default: the one tokenize recorded).")
@click.option("--overwrite", is_flag=True, help="Replace another blend in --output.")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def cli(
    file_list: str,
    seq_len: int,
    num_samples: int,
    seed: int,
    output: str,
    tokenizer: str | None,
    overwrite: bool,
    as_json: bool,
) -> None:
    """Blend corpora first, then files within each corpus, by the largest-deficit rule; `mpiexec -n R`
    shares the per-file index work across ranks (the output is byte-identical for any R)."""
    from agpt.data.blend import BlendSettings, build
    from agpt.data.dist import root_reports
    from agpt.data.report import format_report

    settings = BlendSettings(
        file_list=file_list,
        seq_len=seq_len,
        num_samples=num_samples,
        seed=seed,
        output=output,
        tokenizer=tokenizer,
        overwrite=overwrite,
    )
    manifest = root_reports(lambda: build(settings))
    if not manifest:
        return  # not rank 0
    if as_json:
        click.echo(json.dumps(manifest, indent=1))
        return
    state = "up to date" if manifest.get("up_to_date") else f"built in {manifest.get('seconds', 0):.2f}s"
    click.echo(f"{output}: {state}, cache key {manifest['cache_key'][:16]}")
    click.echo(format_report(manifest))
