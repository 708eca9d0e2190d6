"""Downstream evaluation: multiple-choice tasks, bits per byte, eval.jsonl and the regression alarm.

Module by concern (docs/eval.md): `tasks` reads and checks task files, `score` scores them with any
causal model (the trainer's in the loop, an export's with `agpt eval --scorer agpt`), `records` is
RUN_DIR/eval.jsonl, `alarm` the regression rule, `due` which checkpoint the chain evaluates next.  What
runs above the trainer (`agpt eval` on an export, lm-evaluation-harness, the cost figure) is
`agpt.evalexport`.
Nothing here imports torch at module level, and `records`, `alarm`, `due` use the standard library
only (the chain's job script calls `due` without the training environment).
"""
