"""lm-evaluation-harness on an export, offline, on the same items the in-loop scorer reads.

Each task's fixed subset is written as a plain JSONL file (context, choices, answer: the strings
tasks.py made from the task's own format) with a task YAML beside it that points the harness's `json`
dataset builder at it (`dataset_path: json`, `dataset_kwargs.data_files`), found through the task
manager's `include_path`.  Nothing is downloaded: HF_DATASETS_OFFLINE, HF_HUB_OFFLINE and
TRANSFORMERS_OFFLINE are set before the harness is imported, and the model and tokenizer are the
export's local files.  lm-eval is an optional extra: `pip install 'agpt[eval]'`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agpt import safewrite
from agpt.errors import AgptError, BadInput
from agpt.evals.tasks import TARGET_DELIMITER, Prepared

VERSION = "0.4.13"  # the pinned lm-eval (pyproject.toml extra `eval`, requirements.lock)
INSTALL = f"pip install 'agpt[eval]' (lm-eval[hf]=={VERSION}), or in a checkout: .venv/bin/pip install 'lm-eval[hf]=={VERSION}'"
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
PREFIX = "agpt_"  # task names in the harness: agpt_NAME, apart from its built-in tasks

TASK_YAML = """\
# Written by `agpt eval`: the first {n} items of {source} ({fmt} format) as plain items.
task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: context
doc_to_choice: choices
doc_to_target: answer
target_delimiter: {delimiter}
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


class NotInstalled(BadInput):
    """lm-eval is not importable here."""


def require() -> Any:
    """The lm_eval module, or NotInstalled saying how to install the extra."""
    for key, value in OFFLINE.items():
        os.environ.setdefault(key, value)
    try:
        import lm_eval
        import lm_eval.models.huggingface
    except ImportError as exc:
        raise NotInstalled(f"lm-evaluation-harness is not installed ({exc.name or exc}): {INSTALL}") from None
    return lm_eval


def write_tasks(prep: Prepared, out_dir: Path) -> list[str]:
    """One `NAME.jsonl` + `NAME.yaml` per task in out_dir; returns the harness's task names."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = []
    for spec, items in zip(prep.specs, prep.items, strict=True):
        data = out_dir / f"{spec.name}.jsonl"
        rows = (json.dumps({"context": it.context, "choices": list(it.choices), "answer": it.answer}) + "\n"
                for it in items)  # fmt: skip
        safewrite.replace(data, "".join(rows), sync=False)  # agpt.safewrite: never through a planted link
        task = PREFIX + spec.name
        safewrite.replace(
            out_dir / f"{spec.name}.yaml",
            TASK_YAML.format(n=len(items), source=spec.path, fmt=spec.format, task=task,
                             data=json.dumps(str(data.resolve())), delimiter=json.dumps(TARGET_DELIMITER)),
            sync=False,
        )  # fmt: skip
        names.append(task)
    return names


def run(
    export: Path,
    prep: Prepared,
    tasks_dir: Path,
    *,
    max_length: int,
    dtype: str = "float32",
    batch_size: int = 8,
    device: str = "cpu",
) -> tuple[dict[str, dict[str, Any]], dict[str, list[list[float]]]]:
    """({name: {acc, acc_norm, n}}, {name: per item, each choice's log-likelihood}) from the harness."""
    lm_eval = require()
    from lm_eval.tasks import TaskManager

    names = write_tasks(prep, tasks_dir)
    os.environ.setdefault("HF_DATASETS_CACHE", str(tasks_dir / "hf-datasets"))
    model_args = {
        "pretrained": str(export),
        "dtype": dtype,
        "max_length": max_length,
        "add_bos_token": False,  # agpt trains without a BOS token (ckpt export: add_bos_token false)
        "trust_remote_code": False,
    }
    # Only agpt's own task files: indexing lm-eval's built-in tasks costs ~7 CPU-s a scoring and none is used.
    try:
        out = lm_eval.simple_evaluate(
            model="hf", model_args=model_args, tasks=names,
            task_manager=TaskManager(include_path=str(tasks_dir), include_defaults=False),
            batch_size=batch_size, device=device, log_samples=True, bootstrap_iters=0,
        )  # fmt: skip
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise AgptError(
            f"lm-eval on {export} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        ) from exc
    results: dict[str, dict[str, Any]] = {}
    per: dict[str, list[list[float]]] = {}
    for spec, task in zip(prep.specs, names, strict=True):
        res = out["results"][task]
        samples = sorted(out["samples"][task], key=lambda s: s["doc_id"])
        results[spec.name] = {
            "acc": float(res["acc,none"]),
            "acc_norm": float(res["acc_norm,none"]),
            "n": len(samples),
        }
        per[spec.name] = [[float(r[0][0]) for r in s["resps"]] for s in samples]
    return results, per
