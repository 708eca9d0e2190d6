"""`agpt eval EXPORT_DIR`: score a Hugging Face export offline, above the trainer (docs/eval.md).

`offline` runs one evaluation of an export and appends it to RUN_DIR/eval.jsonl, `export` makes the export of a
checkpoint the chain's evaluation job scores, `harness` drives lm-evaluation-harness on local task files, `cost`
gives the FLOPs of one evaluation against a training step.  The task formats, the scorer, eval.jsonl and the
alarm they use are `agpt.evals`, which the trainer imports too.
"""
