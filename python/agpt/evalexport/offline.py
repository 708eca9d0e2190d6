"""`agpt eval`: score an export (lm-eval, or agpt's in-loop scorer on the same weights), record it, alarm.

An evaluation job (jobs/agpt_eval_*.{pbs,slurm}, submitted by the chain) runs `held`: every checkpoint
the chain held for evaluation is exported, scored, appended to RUN_DIR/eval.jsonl with its step, and
released.  Regressions against the best earlier record of the same scorer are `eval_regression`
health events, as in the loop (no rollback: training runs elsewhere).
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agpt import rundir
from agpt.errors import BadInput
from agpt.evalexport import export
from agpt.evals import alarm, due, records, score, tasks
from agpt.train.health import EVENTS as HEALTH

SCORERS = ("lm-eval", "agpt")
EXPORTS = "exports"  # RUN_DIR/exports/step-N: where `held` writes the exports it scores


@dataclass(kw_only=True, slots=True)
class Options:
    specs: list[tasks.TaskSpec]
    limit: int = 0  # items per task (0: all)
    scorer: str = "lm-eval"
    dtype: str = "fp32"  # the weights as scored (the export's own dtype is kept on disk)
    batch_size: int = 8
    device: str = "auto"  # auto: cuda, else xpu, else cpu (what torch finds on the eval job's node)
    max_length: int = 0  # 0: the export's max_position_embeddings
    tasks_dir: Path | None = None  # keep lm-eval's task YAMLs here (default: a temporary folder)

    def check(self) -> None:
        if not self.specs:
            raise BadInput("--task: no tasks (pass --task PATH, or --config with eval.tasks)")
        if self.scorer not in SCORERS:
            raise BadInput(f"--scorer {self.scorer}: use one of {', '.join(SCORERS)}")
        if self.batch_size < 1 or self.limit < 0 or self.max_length < 0:
            raise BadInput("--batch-size must be >= 1; --limit and --max-length >= 0")


def pick_device(name: str) -> str:
    if name != "auto":
        return name
    import torch

    if torch.cuda.is_available():
        return "cuda"
    xpu = getattr(torch, "xpu", None)
    return "xpu" if xpu is not None and xpu.is_available() else "cpu"


def evaluate_export(path: str | Path, opts: Options) -> dict[str, Any]:
    """{source, export, tasks: {name: {acc, acc_norm, n, chance}}, per_item, items, seconds}."""
    from agpt.data.tokenizer import load

    opts.check()
    if opts.scorer == "lm-eval":
        from agpt.evalexport import harness

        harness.require()  # not installed: say how before reading anything
    t0 = time.monotonic()
    ex = export.open_export(path)
    max_length = opts.max_length or ex.max_length
    sp = load(ex.tokenizer)
    prep = tasks.prepare(opts.specs, sp.encode, max_length, opts.limit)
    if opts.scorer == "agpt":
        model = export.load_model(ex, opts.dtype)
        lls = score.loglikelihoods(
            model, prep.rows, device="cpu", budget=opts.batch_size * max_length, seq_len=max_length
        )
        res, per = score.results(prep, lls), score.per_item(prep, lls)
    else:
        import tempfile

        from agpt.evalexport import harness

        with tempfile.TemporaryDirectory(prefix="agpt-eval-") as tmp:
            where = opts.tasks_dir or Path(tmp)
            res, per = harness.run(ex.path, prep, where, max_length=max_length, batch_size=opts.batch_size,
                                   device=pick_device(opts.device), dtype={"fp32": "float32", "bf16": "bfloat16"}[opts.dtype])  # fmt: skip
        for t, spec in enumerate(prep.specs):
            res[spec.name]["chance"] = round(tasks.chance(prep.items[t]), 6)
    return {
        "source": opts.scorer,
        "export": str(ex.path),
        "tasks": res,
        "per_item": per,
        "items": opts.limit,
        "seconds": round(time.monotonic() - t0, 3),
    }


def record(
    run_dir: Path, step: int, rec: dict[str, Any], *, acc_margin: float, bpb_margin: float
) -> list[alarm.Regression]:
    """Append `rec` (without its per-item detail) to eval.jsonl as step `step`; regressions become health events."""
    rec = {"step": step, **{k: v for k, v in rec.items() if k != "per_item"}}
    watch = alarm.Alarm(
        acc_margin=acc_margin, bpb_margin=bpb_margin, history=records.read(run_dir), source=rec["source"]
    )
    regs = watch.observe(rec)
    records.append(run_dir, rec)
    for r in regs:
        sys.stdout.write(f"agpt: {r.line()}\n")
        rundir.append_jsonl(
            Path(run_dir) / HEALTH, {"event": "eval_regression", "time": round(time.time(), 3), **r.fields()}
        )
    return regs


def step_of(path: str | Path) -> int | None:
    """The step an export belongs to, from its folder name `step-N` (as `held` names them)."""
    name = Path(path).resolve().name
    digits = name.removeprefix("step-")
    return int(digits) if name.startswith("step-") and digits.isdigit() else None


def held(
    run_dir: Path, opts: Options, *, config: str | None, sets: tuple[str, ...] = (), keep_exports: bool = False,
    export_dtype: str = "bf16", acc_margin: float = 0.0, bpb_margin: float = 0.0,
) -> list[dict[str, Any]]:  # fmt: skip
    """Export, score and record every checkpoint held for evaluation, oldest first; release each."""
    from agpt.ckpt.export import export_hf

    done = []
    for step in due.pending(run_dir):
        out = Path(run_dir) / EXPORTS / f"step-{step}"
        if not (out / "config.json").exists():
            print(f"agpt: eval: exporting step {step} to {out}", flush=True)
            export_hf(
                Path(run_dir) / rundir.CKPT / f"step-{step}",
                out,
                dtype=export_dtype,
                config=config,
                sets=sets,
            )
        rec = evaluate_export(out, opts)
        record(run_dir, step, rec, acc_margin=acc_margin, bpb_margin=bpb_margin)
        due.release(run_dir, step)
        if not keep_exports:
            shutil.rmtree(out, ignore_errors=True)
        done.append({"step": step, **rec})
    return done
