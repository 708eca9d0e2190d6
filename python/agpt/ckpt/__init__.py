"""Checkpoints that leave the trainer: export to Hugging Face Llama, import from it, inspect any step.

`agpt.train.provenance` (standard library only, beside the trainer that writes it) writes and reads
`meta.json`, the record of what produced a checkpoint; `layout` opens and verifies a step directory and maps tensor names; `export`, `hfimport`
and `info` are the three commands' typed functions.
"""
