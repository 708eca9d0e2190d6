"""A step directory opened for reading, and the name map between agpt's and Hugging Face Llama's tensors.

Our Transformer (agpt.train.model) is the Hugging Face Llama layout under other names: RoPE rotates the
halves (x[:h/2], x[h/2:]) of each head, which is HF's `rotate_half`, so q/k need no permutation (the
permutation in HF's convert_llama_weights_to_hf.py exists for Meta's interleaved-pair checkpoints);
GQA repeats each KV head for consecutive query heads (`repeat_interleave`, as HF's `repeat_kv`); the
SwiGLU is w2(silu(w1 x) * w3 x) = down(silu(gate x) * up x); embeddings and output are untied.
https://github.com/huggingface/transformers/blob/main/src/transformers/models/llama/modeling_llama.py
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agpt import ckptdir
from agpt.errors import CheckpointError, ConfigError
from agpt.train import provenance
from agpt.train.config import Config, ModelConfig, load_config

_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn.wq.weight": "self_attn.q_proj.weight",
    "attn.wk.weight": "self_attn.k_proj.weight",
    "attn.wv.weight": "self_attn.v_proj.weight",
    "attn.wo.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn.w1.weight": "mlp.gate_proj.weight",
    "ffn.w3.weight": "mlp.up_proj.weight",
    "ffn.w2.weight": "mlp.down_proj.weight",
}


def tensor_plan(mc: ModelConfig) -> list[tuple[str, str, tuple[int, ...]]]:
    """(HF name, agpt module name, shape) for every weight, in HF's file order."""
    head = mc.dim // mc.n_heads
    hidden = mc.hidden_dim
    shapes: dict[str, tuple[int, ...]] = {
        "attn_norm.weight": (mc.dim,),
        "attn.wq.weight": (mc.n_heads * head, mc.dim),
        "attn.wk.weight": (mc.n_kv_heads * head, mc.dim),
        "attn.wv.weight": (mc.n_kv_heads * head, mc.dim),
        "attn.wo.weight": (mc.dim, mc.n_heads * head),
        "ffn_norm.weight": (mc.dim,),
        "ffn.w1.weight": (hidden, mc.dim),
        "ffn.w3.weight": (hidden, mc.dim),
        "ffn.w2.weight": (mc.dim, hidden),
    }
    out: list[tuple[str, str, tuple[int, ...]]] = [
        ("model.embed_tokens.weight", "tok_embeddings.weight", (mc.vocab_size, mc.dim))
    ]
    for i in range(mc.n_layers):
        for ours, theirs in _LAYER.items():
            out.append((f"model.layers.{i}.{theirs}", f"layers.{i}.{ours}", shapes[ours]))
    out.append(("model.norm.weight", "norm.weight", (mc.dim,)))
    out.append(("lm_head.weight", "output.weight", (mc.vocab_size, mc.dim)))
    return out


def model_config_from(data: dict[str, Any], origin: str) -> ModelConfig:
    fields = set(ModelConfig.__dataclass_fields__)
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ConfigError(f"{origin}: unknown key 'model.{unknown[0]}'")
    mc = ModelConfig(**data)
    mc.validate()
    return mc


@dataclass(kw_only=True, slots=True)
class StepDir:
    path: Path
    step: int
    world_size: int | None
    meta: dict[str, Any] | None
    metadata: Any  # torch.distributed.checkpoint.metadata.Metadata


def open_step(path: Path) -> StepDir:
    """A complete, intact step directory, or a CheckpointError naming the file that is not."""
    from agpt.train import checkpoint as ck

    if not path.is_dir():
        raise CheckpointError(f"{path}: not a checkpoint directory")
    d = ckptdir.read_step_dir(path)
    if not d.marked:
        raise CheckpointError(f"{d.marker}: missing (an incomplete checkpoint: its save never finished)")
    rec = d.record
    if rec is None:
        raise CheckpointError(f"{d.marker}: unreadable (expected JSON with an integer step)")
    if d.names_another_step is not None:
        raise CheckpointError(f"{d.marker}: says step {rec['step']}, the directory is {path.name}")
    meta = ck.verified_metadata(path)  # every pinned file's digest, before anything is unpickled
    ck.check_files(path, meta)
    ws = rec.get("world_size")
    return StepDir(
        path=path,
        step=int(rec["step"]),
        world_size=ws if isinstance(ws, int) else None,
        meta=provenance.read(path),
        metadata=meta,
    )


def run_config(sd: StepDir, config: str | None, sets: tuple[str, ...] | list[str] = ()) -> Config:
    """The run's config: --config (with --set overrides) when given, else the one recorded in meta.json."""
    if config is not None:
        return load_config(config, list(sets), environ={})
    if sets:
        raise ConfigError("--set: only with --config (meta.json holds the run's resolved config)")
    rec = (sd.meta or {}).get("config")
    if not isinstance(rec, dict):
        raise ConfigError(
            f"{sd.path / provenance.META}: missing (a checkpoint saved before agpt recorded its config): "
            f"pass --config with the run's config"
        )
    cfg = Config()
    cfg.model = model_config_from(dict(rec.get("model", {})), str(sd.path / provenance.META))
    cfg.train.seq_len = int(rec.get("train", {}).get("seq_len", cfg.train.seq_len))
    cfg.data.path = str(rec.get("data", {}).get("path", ""))
    return cfg


def check_shapes(sd: StepDir, mc: ModelConfig) -> None:
    """Every model tensor of the config is in the checkpoint with its shape, and nothing else is."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    have = {
        k: tuple(v.size)
        for k, v in sd.metadata.state_dict_metadata.items()
        if k.startswith("model.") and isinstance(v, TensorStorageMetadata)
    }
    plan = tensor_plan(mc)
    for _hf, ours, shape in plan:
        key = f"model.{ours}"
        if key not in have:
            raise CheckpointError(f"{sd.path}: tensor {key} is not in the checkpoint (a different model?)")
        if have[key] != shape:
            raise CheckpointError(
                f"{sd.path}: tensor {key} has shape {list(have[key])}, the config says {list(shape)}"
            )
    extra = sorted(set(have) - {f"model.{ours}" for _, ours, _ in plan})
    if extra:
        raise CheckpointError(f"{sd.path}: tensor {extra[0]} is not part of this model (a different config?)")
