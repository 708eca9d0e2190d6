"""The optimizer: AdamW over the fp32 master shards, weight decay on matrices only, a rate per parameter group.

Norms and biases (1-D) take no weight decay; `optim.lr_scale` gives a parameter group (agpt.train.health's
groups: embeddings, attention, feed-forward, norms, output) its own multiple of the scheduled rate, kept as
`lr_scale` in each optimizer group so the trainer's schedule applies it every step.
"""

from __future__ import annotations

from typing import Any

import torch

from agpt.train import health as thealth
from agpt.train.config import OptimConfig


def build(model: torch.nn.Module, oc: OptimConfig) -> torch.optim.Optimizer:
    """AdamW over MODEL's parameters with OC's settings and groups."""
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    groups: list[dict[str, Any]] = [
        {"params": decay, "weight_decay": oc.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if oc.lr_scale:  # one group per (parameter group, decay) so each can have its own rate
        by: dict[tuple[str, bool], list[torch.nn.Parameter]] = {}
        for n, p in model.named_parameters():
            by.setdefault((thealth.param_group(n), p.ndim >= 2), []).append(p)
        groups = [
            {
                "params": ps,
                "weight_decay": oc.weight_decay if decay_it else 0.0,
                "lr_scale": float(oc.lr_scale.get(g, 1.0)),
            }
            for (g, decay_it), ps in by.items()
        ]
    return torch.optim.AdamW(groups, lr=oc.lr, betas=(oc.beta1, oc.beta2), eps=oc.eps, foreach=True)
