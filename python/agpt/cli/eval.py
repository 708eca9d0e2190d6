"""`agpt eval`: multiple-choice tasks on a Hugging Face export, the held checkpoints of a run, or the cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from agpt import numeric
from agpt.cli import params
from agpt.errors import BadInput


def _specs(task: tuple[str, ...], cfg: Any) -> list[Any]:
    from agpt.evals.tasks import parse_specs

    if task:
        entries = [{"name": t.split("=", 1)[0], "path": t.split("=", 1)[1]} if "=" in t else t for t in task]
        return parse_specs(entries, "--task")
    return parse_specs(cfg.eval.tasks) if cfg is not None else []


def _table(rec: dict[str, Any]) -> str:
    rows = [("task", "items", "acc", "acc_norm", "chance")]
    for name, r in rec["tasks"].items():
        rows.append(
            (name, str(r["n"]), f"{r['acc']:.4f}", f"{r['acc_norm']:.4f}", f"{r.get('chance', 0):.4f}")
        )
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)


@click.command(name="eval")
@click.argument("export_dir", required=False)
@click.option("--task", "task", multiple=True, metavar="[NAME=]PATH",
              help="A task file (JSONL: plain, hellaswag, arc or piqa; told apart by its fields). Repeatable; "
                   "default: the config's eval.tasks.")  # fmt: skip
@click.option("--config", default=None, type=click.Path(dir_okay=False),
              help="The run's config: eval.tasks, eval.task_items, train.seq_len and the alarm's margins.")  # fmt: skip
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a key of --config.")
@click.option(
    "--limit", type=params.count(0), default=None, help="Items per task (default: eval.task_items, else all)."
)
@click.option("--scorer", type=click.Choice(["lm-eval", "agpt"]), default="lm-eval", show_default=True,
              help="lm-evaluation-harness (transformers), or agpt's in-loop scorer on the same weights.")  # fmt: skip
@click.option("--run-dir", default=None, type=click.Path(file_okay=False),
              help="Append the result to RUN_DIR/eval.jsonl (with --step) and raise the regression alarm.")  # fmt: skip
@click.option(
    "--step",
    type=params.count(0),
    default=None,
    help="The training step of EXPORT_DIR (default: from a step-N name).",
)
@click.option(
    "--held", is_flag=True, help="Evaluate every checkpoint of --run-dir held for evaluation (the eval job)."
)
@click.option("--keep-exports", is_flag=True, help="With --held: keep RUN_DIR/exports/step-N after scoring.")
@click.option("--dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
              help="The dtype the weights are scored in.")  # fmt: skip
@click.option(
    "--batch-size", type=params.count(1, 1 << 20), default=8, show_default=True, help="Sequences per forward."
)
@click.option(
    "--device",
    default="auto",
    show_default=True,
    help="lm-eval's device: auto (cuda, else xpu, else cpu), cpu, cuda, ...",
)
@click.option("--max-length", type=params.count(0, numeric.MAX_SEQ_LEN), default=0,
              help="Tokens a row may hold (default: train.seq_len with --config, else the export's).")  # fmt: skip
@click.option("--tasks-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep the task YAMLs and JSONL written for lm-eval here (reusable with lm_eval --include_path).")  # fmt: skip
@click.option(
    "--cost", is_flag=True, help="Print what one in-loop evaluation of --config costs against a step."
)
@click.option("--ranks", type=params.count(0, numeric.MAX_NODES * numeric.MAX_RANKS_PER_NODE), default=0,
              help="With --cost: ranks of the job (default: job.nodes x job.ranks_per_node, else 1).")  # fmt: skip
@click.option(
    "--rows",
    type=params.count(0, 1 << 40),
    default=0,
    help="With --cost and no task files: rows (items x choices) ...",
)
@click.option(
    "--row-tokens", type=params.count(0, numeric.MAX_SEQ_LEN), default=0, help="... of this many tokens each."
)
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
def cli(export_dir: str | None, task: tuple[str, ...], config: str | None, sets: tuple[str, ...], limit: int | None,
        scorer: str, run_dir: str | None, step: int | None, held: bool, keep_exports: bool, dtype: str,
        batch_size: int, device: str, max_length: int, tasks_dir: Path | None, cost: bool, ranks: int, rows: int,
        row_tokens: int, as_json: bool) -> None:  # fmt: skip
    """Score multiple-choice tasks on EXPORT_DIR, a Hugging Face folder from `agpt ckpt export`.

    \b
    agpt eval EXPORT_DIR --task hellaswag=val.jsonl [--run-dir RUN --step N]
    agpt eval --held --run-dir RUN --config CONFIG        (the chain's eval job)
    agpt eval --cost --config CONFIG [--rows R --row-tokens T]

    Runs lm-evaluation-harness offline (an optional extra: pip install 'agpt[eval]') on the task files'
    first --limit items, the same items and strings the trainer's in-loop scorer reads
    (eval.tasks); `--scorer agpt` scores the same export with that in-loop scorer instead.  With
    --run-dir the result is appended to RUN_DIR/eval.jsonl with its step, and a score that fell more
    than eval.regression_acc below its best is an eval_regression event in RUN_DIR/health.jsonl.
    Exit 2 naming the file, line and field for a bad task file; exit 2 with how to install when lm-eval
    is missing.  Details: docs/eval.md.
    """
    from agpt.evalexport import offline
    from agpt.train.config import load_config

    cfg = load_config(config, list(sets), environ={}) if config else None
    if sets and cfg is None:
        raise BadInput("--set: only with --config")
    if cost:
        return _cost(cfg, str(config), task, ranks, rows, row_tokens)
    opts = offline.Options(
        specs=_specs(task, cfg),
        limit=limit if limit is not None else (cfg.eval.task_items if cfg is not None else 0),
        scorer=scorer, dtype=dtype, batch_size=batch_size, device=device, tasks_dir=tasks_dir,
        max_length=max_length or (cfg.train.seq_len if cfg is not None else 0),
    )  # fmt: skip
    acc_margin = cfg.eval.regression_acc if cfg is not None else 0.0
    bpb_margin = cfg.eval.regression_bpb if cfg is not None else 0.0
    if held:
        if run_dir is None or export_dir is not None:
            raise BadInput("--held: needs --run-dir and no EXPORT_DIR (it exports each held checkpoint)")
        done = offline.held(Path(run_dir), opts, config=config, sets=sets, keep_exports=keep_exports,
                            acc_margin=acc_margin, bpb_margin=bpb_margin)  # fmt: skip
        for rec in done:
            click.echo(json.dumps({k: v for k, v in rec.items() if k != "per_item"}) if as_json else
                       f"step {rec['step']}:\n{_table(rec)}")  # fmt: skip
        if not done:
            click.echo(f"agpt: eval: no checkpoint of {run_dir} is held for evaluation")
        return None
    if export_dir is None:
        raise BadInput("EXPORT_DIR: missing (or --held --run-dir RUN, or --cost --config C)")
    rec = offline.evaluate_export(export_dir, opts)
    if run_dir is not None:
        at = step if step is not None else offline.step_of(export_dir)
        if at is None:
            raise BadInput(
                f"--step: needed to record {export_dir} in {run_dir}/eval.jsonl (its name is not step-N)"
            )
        offline.record(Path(run_dir), at, rec, acc_margin=acc_margin, bpb_margin=bpb_margin)
    click.echo(json.dumps({k: v for k, v in rec.items() if k != "per_item"}) if as_json else _table(rec))
    return None


def _job_ranks(config: str) -> int:
    """job.nodes x job.ranks_per_node of the config (1 when the site decides the ranks per node)."""
    from agpt import jobconf

    jc = jobconf.load(Path(config))
    return jc.nodes * jc.ranks_per_node if jc.ranks_per_node else 1


def _cost(cfg: Any, cfg_path: str, task: tuple[str, ...], ranks: int, rows: int, row_tokens: int) -> None:
    from agpt.evalexport import cost
    from agpt.evals import tasks

    if cfg is None:
        raise BadInput("--cost: needs --config")
    specs = _specs(task, cfg)
    if rows or row_tokens:
        if rows < 1 or row_tokens < 1:
            raise BadInput("--rows and --row-tokens: both, and both >= 1")
        lengths = [min(row_tokens, cfg.train.seq_len)] * rows
    elif specs:
        from agpt.train.evaluate import task_tokenizer

        prep = tasks.prepare(specs, task_tokenizer(cfg).encode, cfg.train.seq_len, cfg.eval.task_items)
        lengths = [len(r.tokens) - 1 for r in prep.rows]
    else:
        raise BadInput("--cost: no tasks (eval.tasks, --task, or --rows with --row-tokens)")
    world = ranks or _job_ranks(cfg_path)
    dp = max(1, world // cfg.parallel.tp)
    res = cost.evaluation(cfg, lengths, dp=dp)
    click.echo(cost.render(cfg, res, dp))
