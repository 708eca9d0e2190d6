"""The 2-D layout: data parallel (FSDP2) × tensor parallel (DTensor), and the numbers that depend on it.

Ranks form a (dp, tp) mesh with tp the inner dimension, so a tensor-parallel group is `tp` consecutive
ranks.  Launchers number the ranks of a node consecutively (block placement), hence a tp that divides
the ranks per node keeps every tensor-parallel group, and its all-reduce in every layer, inside a node.

Each Llama block is split the Megatron way: wq/wk/wv and w1/w3 column-wise (each rank owns whole
query heads and the KV heads they read: grouped-query attention stays local), wo and w2 row-wise
(one all-reduce per sublayer).  With `parallel.sequence_parallel` the norms and the residual stream
are split along the sequence instead of replicated (the all-reduce becomes reduce-scatter + all-gather);
the embedding and output layer are then split too, so every parameter lives on the 2-D mesh.  Without
it, embedding, norms and output are replicated over the tensor-parallel group and sharded by FSDP over
the data-parallel group only.

The gradient norm is computed here rather than by torch.nn.utils.clip_grad_norm_, which cannot stack
norms of DTensors on different meshes (the replicated layers live on the dp mesh, the split ones on
the 2-D mesh): each rank sums the squares of its local shards, divided by how many ranks hold the same
values, and one all-reduce makes the global sum.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from agpt.train.config import Config


@dataclass(kw_only=True, slots=True)
class Layout:
    """Where this rank sits in the (dp, tp) mesh."""

    dp: int
    tp: int
    dp_rank: int
    tp_rank: int


def layout(cfg: Config, rank: int, world: int, ranks_per_node: int) -> Layout:
    """The layout of this job, or a ConfigError naming parallel.tp and the numbers it must divide."""
    cfg.check_layout(world, ranks_per_node)
    tp = cfg.parallel.tp
    return Layout(dp=world // tp, tp=tp, dp_rank=rank // tp, tp_rank=rank % tp)


def make_mesh(device_type: str, lay: Layout) -> DeviceMesh:
    """1-D (all ranks) when tp is 1, as before; else 2-D ("dp", "tp") with tp consecutive ranks."""
    if lay.tp == 1:
        return init_device_mesh(device_type, (lay.dp,))
    return init_device_mesh(device_type, (lay.dp, lay.tp), mesh_dim_names=("dp", "tp"))


def dp_mesh(mesh: DeviceMesh) -> DeviceMesh:
    return mesh if mesh.ndim == 1 else mesh["dp"]


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh, *, sequence_parallel: bool) -> None:
    """Split every block (and with sequence parallelism the embedding, final norm and output) over tp_mesh."""
    if sequence_parallel:
        parallelize_module(
            model,
            tp_mesh,
            {
                "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
                "norm": SequenceParallel(),
                "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
            },
        )
    stream = Shard(1) if sequence_parallel else Replicate()
    for block in model.layers:  # type: ignore[union-attr]
        plan: dict[str, object] = {
            "attn.wq": ColwiseParallel(),
            "attn.wk": ColwiseParallel(),
            "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(output_layouts=stream),
            "ffn.w1": ColwiseParallel(),
            "ffn.w3": ColwiseParallel(),
            "ffn.w2": RowwiseParallel(output_layouts=stream),
        }
        if sequence_parallel:
            plan |= {
                "attn_norm": SequenceParallel(),
                "attn": PrepareModuleInput(
                    input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)
                ),
                "ffn_norm": SequenceParallel(),
                "ffn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            }
        parallelize_module(block, tp_mesh, plan)  # type: ignore[arg-type]


def _copies(t: DTensor, world: int) -> int:
    """How many ranks hold each element of t's local shard (replicated mesh dims and ranks off the mesh)."""
    mesh = t.device_mesh
    n = world // mesh.size()
    for i, p in enumerate(t.placements):
        if isinstance(p, Replicate):
            n *= mesh.size(i)
    return n


def clip_grad_norm(params: Iterable[torch.Tensor], max_norm: float, world: int) -> torch.Tensor:
    """The global L2 norm of all gradients (one all-reduce); scale them to max_norm when above it."""
    grads = [p.grad for p in params if p.grad is not None]
    locals_ = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
    total = torch.zeros((), dtype=torch.float32, device=locals_[0].device if locals_ else "cpu")
    for g, loc in zip(grads, locals_, strict=True):
        sq = loc.detach().float().pow(2).sum()
        copies = _copies(g, world) if isinstance(g, DTensor) else world
        total += sq / copies
    dist.all_reduce(total)
    norm = total.sqrt()
    if max_norm != float("inf") and locals_:
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        torch._foreach_mul_(locals_, coef.to(locals_[0].dtype))
    return norm
