"""A Hugging Face export (`agpt ckpt export`) read back: its tokenizer, its length, its weights in agpt's model.

`agpt eval` scores an export two ways: with lm-evaluation-harness (harness.py, transformers'
LlamaForCausalLM) and with the in-loop scorer on agpt's own Transformer holding the same weights
(`--scorer agpt`), which is how the two are shown to agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agpt.errors import BadInput

TOKENIZER = "tokenizer.model"  # the SentencePiece model `agpt ckpt export` copies beside the weights


@dataclass(frozen=True, slots=True)
class Export:
    path: Path
    config: dict[str, Any]  # config.json
    tokenizer: Path

    @property
    def max_length(self) -> int:
        return int(self.config.get("max_position_embeddings") or 0)


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
    try:
        mc = ModelConfig(
            vocab_size=int(hc["vocab_size"]),
            dim=int(hc["hidden_size"]),
            n_layers=int(hc["num_hidden_layers"]),
            n_heads=int(hc["num_attention_heads"]),
            n_kv_heads=int(hc.get("num_key_value_heads") or hc["num_attention_heads"]),
            ffn_dim=int(hc["intermediate_size"]),
            max_seq_len=int(hc["max_position_embeddings"]),
            rope_theta=float(
                hc.get("rope_theta") or (hc.get("rope_parameters") or {}).get("rope_theta", 10000.0)
            ),
            norm_eps=float(hc.get("rms_norm_eps", 1e-5)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInput(f"{ex.path / 'config.json'}: {exc} is missing or not a number") from None
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
