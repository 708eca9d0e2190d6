"""A Hugging Face export (`agpt ckpt export`) read back: its tokenizer, its length, its weights in agpt's model.

`agpt eval` scores an export two ways: with lm-evaluation-harness (harness.py, transformers'
LlamaForCausalLM) and with the in-loop scorer on agpt's own Transformer holding the same weights
(`--scorer agpt`), which is how the two are shown to agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agpt import numeric
from agpt.errors import BadInput

TOKENIZER = "tokenizer.model"  # the SentencePiece model `agpt ckpt export` copies beside the weights


@dataclass(frozen=True, slots=True)
class Export:
    path: Path
    config: dict[str, Any]  # config.json
    tokenizer: Path

    @property
    def max_length(self) -> int:
        if self.config.get("max_position_embeddings") is None:
            return 0
        return _size(self, "max_position_embeddings", numeric.MAX_SEQ_LEN)


def _size(ex: Export, key: str, bound: float) -> int:
    """config.json's KEY as a whole number from 1 to BOUND (not true, not 1e30); BadInput naming the file and key."""
    if key not in ex.config:
        raise BadInput(f"{ex.path / 'config.json'}: {key}: missing")
    n: int = numeric.number(ex.config[key], f"{ex.path / 'config.json'}: {key}", lo=1, hi=bound, integer=True)
    return n


def open_export(path: str | Path) -> Export:
    d = Path(path)
    if not d.is_dir():
        raise BadInput(f"{d}: no such export folder (make one with `agpt ckpt export STEP_DIR OUT`)")
    from agpt.ckpt.hfimport import _read_json  # the one reader of an HF folder's JSON files

    config = _read_json(d / "config.json")
    tok = d / TOKENIZER
    if not tok.is_file():
        raise BadInput(
            f"{tok}: missing: the tasks need the run's tokenizer (an export of a run on synthetic data has "
            f"none; pass --tokenizer to `agpt ckpt export`)"
        )
    return Export(path=d, config=config, tokenizer=tok)


def model_config(ex: Export) -> Any:
    """agpt's ModelConfig for the export's config.json (the inverse of ckpt.export.hf_config)."""
    from agpt.train.config import ModelConfig

    hc = ex.config
    rope: dict[str, Any] = hc["rope_parameters"] if isinstance(hc.get("rope_parameters"), dict) else {}
    heads = _size(ex, "num_attention_heads", numeric.MAX_COUNT)
    mc = ModelConfig(
        vocab_size=_size(ex, "vocab_size", numeric.MAX_VOCAB),
        dim=_size(ex, "hidden_size", numeric.MAX_COUNT),
        n_layers=_size(ex, "num_hidden_layers", numeric.MAX_LAYERS),
        n_heads=heads,
        n_kv_heads=_size(ex, "num_key_value_heads", numeric.MAX_COUNT)
        if hc.get("num_key_value_heads")
        else heads,
        ffn_dim=_size(ex, "intermediate_size", numeric.MAX_COUNT),
        max_seq_len=_size(ex, "max_position_embeddings", numeric.MAX_SEQ_LEN),
        rope_theta=numeric.number(
            hc.get("rope_theta") or rope.get("rope_theta", 10000.0),
            f"{ex.path / 'config.json'}: rope_theta",
            lo=1e-6,
            hi=1e12,
        ),
        norm_eps=numeric.number(
            hc.get("rms_norm_eps", 1e-5), f"{ex.path / 'config.json'}: rms_norm_eps", lo=0, hi=1
        ),
    )
    mc.validate()
    return mc


def load_model(ex: Export, dtype: str = "fp32") -> Any:
    """agpt's Transformer with the export's weights (checked by `agpt ckpt import`'s rules), on the CPU."""
    import torch

    from agpt.ckpt import hfimport, layout, stfile
    from agpt.train.config import Config
    from agpt.train.model import Transformer
    from agpt.train.trainer import DTYPE

    cfg = Config(model=model_config(ex))
    hc = hfimport.check_config(ex.path, cfg)
    files = hfimport.check_weights(ex.path, cfg, bool(hc.get("tie_word_embeddings", False)))
    model = Transformer(cfg.model)
    model.init_weights()  # the RoPE tables; every weight is overwritten below
    params = dict(model.named_parameters())
    with torch.no_grad():
        for hf, ours, _shape in layout.tensor_plan(cfg.model):
            path, start, entry, name = files[hf]
            params[ours].copy_(stfile.read_tensor(path, start, entry, name).float())
    model.to(dtype=DTYPE[dtype])
    model.rope = model.rope.float()
    model.eval()
    return model
