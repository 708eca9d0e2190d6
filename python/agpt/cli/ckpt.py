"""`agpt ckpt export|import|info|interval`: checkpoints out of and into the trainer's format, and how often to save."""

from __future__ import annotations

import json

import click

from agpt import numeric
from agpt.cli import params
from agpt.errors import BadInput


@click.group(name="ckpt")
def cli() -> None:
    """Export a checkpoint to Hugging Face, start a run from one, inspect any checkpoint, or size the save interval."""


def _size(text: str) -> int:
    """--max-shard-size: a size such as 5GB, 500MB or 2GiB, from a KB to a PiB (agpt.numeric)."""
    units = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
    t = text.strip().upper()
    num = t.rstrip("KMGIB")
    unit = t[len(num) :]
    if unit not in units:
        raise BadInput(f"--max-shard-size {text}: expected a size such as 5GB, 500MB or 2GiB")
    value = numeric.number(num, "--max-shard-size", lo=1e3 / units[unit], hi=2**50 / units[unit])
    return int(value * units[unit])


@cli.command(name="export")
@click.argument("step_dir")
@click.argument("out")
@click.option("--format", "fmt", type=click.Choice(["hf"]), default="hf", show_default=True,
              help="Output format: a Hugging Face LlamaForCausalLM folder.")  # fmt: skip
@click.option("--dtype", type=click.Choice(["bf16", "fp32"]), default="bf16", show_default=True,
              help="Weight dtype, converted from the fp32 master weights.")  # fmt: skip
@click.option("--config", default=None, help="The run's config (default: the one recorded in meta.json).")
@click.option("--tokenizer", default=None, help="SentencePiece model (default: the one the run's data pins).")
@click.option("--max-shard-size", default="5GB", show_default=True, help="Largest safetensors file.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a key of --config.")
def export_cmd(
    step_dir: str,
    out: str,
    fmt: str,
    dtype: str,
    config: str | None,
    tokenizer: str | None,
    max_shard_size: str,
    sets: tuple[str, ...],
) -> None:
    """Write checkpoint STEP_DIR (RUN_DIR/ckpt/step-N) as a Hugging Face folder OUT, one tensor at a time.

    OUT must not exist or be empty.  Exit 2 naming the file when the checkpoint is incomplete
    (no .complete, a missing or truncated data file) or does not match the config.
    """
    from agpt.ckpt.export import export_hf

    r = export_hf(
        step_dir,
        out,
        dtype=dtype,
        config=config,
        tokenizer=tokenizer,
        max_shard_bytes=_size(max_shard_size),
        sets=sets,
        progress=True,
    )
    tok = (
        f", tokenizer {r['tokenizer']}"
        if r["tokenizer"]
        else ", no tokenizer (synthetic data: pass --tokenizer)"
    )
    click.echo(
        f"wrote {r['out']}: step {r['step']}, {r['tensors']} tensors in {r['shards']} shards, "
        f"{r['bytes']:,} bytes {r['dtype']}{tok}"
    )


@cli.command(name="import")
@click.argument("hf_dir")
@click.option("--config", required=True, help="The new run's config; the folder must match its model.")
@click.option("--run-dir", required=True, help="The new run's directory (must hold no checkpoint yet).")
@click.option(
    "--step", type=params.count(0), default=0, show_default=True, help="Step the checkpoint starts at."
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
def import_cmd(hf_dir: str, config: str, run_dir: str, step: int, sets: tuple[str, ...]) -> None:
    """Write Hugging Face Llama weights HF_DIR as RUN_DIR/ckpt/step-STEP for `agpt train` to continue.

    Exit 2 naming the file or tensor when HF_DIR is another architecture or a shape differs from the
    config.  Large models: run it under the launcher; each rank keeps only its shard.
    """
    from agpt.ckpt.hfimport import import_hf
    from agpt.train.entry import run_and_exit

    def go() -> int:
        import_hf(hf_dir, config, run_dir, step=step, sets=sets)
        return 0

    run_and_exit(go)


@cli.command(name="info")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def info_cmd(path: str, as_json: bool) -> None:
    """Step, tokens, config, files and completeness of a checkpoint (a step-N or a run directory).

    Exit 0 when complete, 1 when not (the report names each missing or truncated file), 2 when PATH
    holds no checkpoint.
    """
    from agpt.ckpt.info import format_info, inspect

    info = inspect(path)
    click.echo(json.dumps(info, indent=1) if as_json else format_info(info))
    if not info["complete"]:
        raise SystemExit(1)


@cli.command(name="interval")
@click.option(
    "--nodes",
    type=params.count(1, numeric.MAX_NODES),
    required=True,
    help="nodes in the job (it dies when any one dies)",
)
@click.option(
    "--node-mtbf-h",
    type=params.Number(lo=1e-3, hi=1e9),
    required=True,
    help="one node's mean time between failures, hours",
)
@click.option(
    "--save-stall-s", type=params.seconds(1e-6), required=True, help="seconds a save stalls training"
)
@click.option(
    "--load-s", type=params.seconds(), default=0.0, show_default=True, help="seconds to load a checkpoint"
)
@click.option(
    "--restart-s",
    type=params.seconds(),
    default=0.0,
    show_default=True,
    help="seconds to detect and relaunch",
)
@click.option("--json", "as_json", is_flag=True, help="print the figures as JSON")
def interval_cmd(
    nodes: int, node_mtbf_h: float, save_stall_s: float, load_s: float, restart_s: float, as_json: bool
) -> None:
    """The optimum checkpoint interval (Young and Daly) and the expected loss per day.

    Example (the AuroraGPT 20B figures): agpt ckpt interval --nodes 512 --node-mtbf-h 8760 --save-stall-s 23.6
    --load-s 59
    """
    from agpt import goodput as iv

    r = iv.interval(
        nodes=nodes, node_mtbf_h=node_mtbf_h, save_stall_s=save_stall_s, load_s=load_s, restart_s=restart_s
    )
    click.echo(json.dumps(r.as_dict()) if as_json else iv.render_interval(r))
