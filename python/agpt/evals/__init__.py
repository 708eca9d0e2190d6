"""Downstream evaluation: multiple-choice tasks, bits per byte, eval.jsonl and the regression alarm.

Module by concern (docs/eval.md): `tasks` reads and checks task files, `score` scores them with any
causal model (the trainer's in the loop, an export's with `agpt eval --scorer agpt`), `records` is
RUN_DIR/eval.jsonl, `alarm` the regression rule, `harness` the lm-evaluation-harness driver, `cost` the
FLOPs of one evaluation against a training step, `due` which checkpoint the chain evaluates next.
Nothing here imports torch at module level, and `records`, `alarm`, `due` use the standard library
only (the chain's job script calls `due` without the training environment).
"""
