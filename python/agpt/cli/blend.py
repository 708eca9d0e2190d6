"""`agpt blend`: a weighted file list of shards into a pinned per-batch mixture of L+1-token samples."""

from __future__ import annotations

from typing import Any

import click

from agpt import numeric
from agpt.cli import params
from agpt.cli.output import show


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
def cli(as_json: bool, **opts: Any) -> None:
    """Blend corpora first, then files within each corpus, by the largest-deficit rule; `mpiexec -n R`
    shares the per-file index work across ranks (the output is byte-identical for any R)."""
    from agpt.data.blend import BlendSettings, build
    from agpt.data.dist import root_reports
    from agpt.data.report import format_report

    def text(manifest: dict[str, Any]) -> str:
        state = "up to date" if manifest.get("up_to_date") else f"built in {manifest.get('seconds', 0):.2f}s"
        return f"{opts['output']}: {state}, cache key {manifest['cache_key'][:16]}\n{format_report(manifest)}"

    settings = BlendSettings(**opts)
    show(root_reports(lambda: build(settings)), as_json, text)
