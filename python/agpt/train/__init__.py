"""Training: a Llama-style model under FSDP2 with fp32 master weights, async checkpoints and exact resume.

Modules: `config` (validated settings), `dist` (launcher-agnostic rank/world and device), `model`,
`data` (stateless sample index), `checkpoint` (DCP, async, `.complete` marker), `provenance` (`meta.json`,
standard library only), `trainer` (the loop), `smoke` (bit-exact gate) and `lrfind` (LR sweep).  Importing
this package does not import torch.
"""
