"""`agpt ckpt export`: a checkpoint's weights as a Hugging Face Llama folder, one tensor in memory at a time.

Each weight is read from the DCP files on its own (torch.distributed.checkpoint reassembles the
ranks' shards of that one tensor), converted to the output dtype and written into its place in a
safetensors shard whose header was laid out beforehand from the checkpoint's metadata, so the peak
memory is one tensor (plus its converted copy) whatever the model's size.  The folder is built
beside OUT, in a folder made exclusively under a new name (mkdtemp: nothing planted there is entered), and
renamed into place at the end, so a failed export leaves nothing that looks finished.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from agpt import safewrite
from agpt.ckpt import layout, stfile
from agpt.digest import file_sha256
from agpt.errors import BadInput, CheckpointError, DataError
from agpt.progress import Progress
from agpt.train import provenance
from agpt.train.config import Config

DTYPES = {"bf16": ("BF16", 2), "fp32": ("F32", 4)}
TORCH_DTYPE_NAME = {"bf16": "bfloat16", "fp32": "float32"}
DEFAULT_SHARD_BYTES = 5 * 1024**3  # transformers' save_pretrained default max_shard_size "5GB"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_out(out: Path) -> None:
    if out.is_symlink():
        raise BadInput(f"{out}: is a symbolic link; choose a new output folder")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"{out}: exists and is not empty (choose a new output folder)")


def plan_shards(
    tensors: list[tuple[str, str, tuple[int, ...]]], itemsize: int, max_bytes: int
) -> list[list[tuple[str, str, tuple[int, ...]]]]:
    """Consecutive tensors grouped into shards of at most max_bytes (a larger tensor gets its own)."""
    shards: list[list[tuple[str, str, tuple[int, ...]]]] = [[]]
    size = 0
    for t in tensors:
        n = itemsize
        for d in t[2]:
            n *= d
        if shards[-1] and size + n > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += n
    return shards


class TensorReader:
    """One tensor at a time out of a DCP step directory, in the dtype it was saved in."""

    def __init__(self, sd: layout.StepDir) -> None:
        self.sd = sd

    def read(self, key: str) -> Any:
        import torch
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FileSystemReader

        from agpt.train import checkpoint as ck

        md = self.sd.metadata.state_dict_metadata[key]
        target = {key: torch.empty(tuple(md.size), dtype=md.properties.dtype)}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dcp.load(target, storage_reader=FileSystemReader(self.sd.path), no_dist=True)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # DCP's CheckpointException is a BaseException
            bad = ck.find_corrupt_file(self.sd.path, self.sd.metadata)
            if bad is not None:
                raise CheckpointError(f"{bad}: corrupt checkpoint data (tensor {key} unreadable)") from None
            raise CheckpointError(f"{self.sd.path}: cannot read tensor {key} ({ck.one_line(exc)})") from None
        return target[key]


def tokenizer_source(cfg: Config, sd: layout.StepDir, explicit: str | None) -> Path | None:
    """The SentencePiece model the run's blend pins (checked by sha256), or --tokenizer."""
    if explicit:
        p = Path(explicit)
        if not p.is_file():
            raise DataError(f"--tokenizer {p}: not found")
        return p
    data = (sd.meta or {}).get("data") or None
    if data is None and cfg.data.path:
        data = provenance.data_record(cfg.data.path)
    if not data:
        return None
    tok = data.get("tokenizer") or {}
    if not tok.get("path"):
        raise DataError(f"{data.get('path')}/manifest.json: unreadable, cannot find the run's tokenizer")
    p = Path(tok["path"])
    if not p.is_file():
        raise DataError(f"{p}: the run's tokenizer is missing (pass --tokenizer)")
    if tok.get("sha256") and file_sha256(p) != tok["sha256"]:
        raise DataError(f"{p}: sha256 differs from the one the run's data manifest pins")
    return p


def _write_json(path: Path, obj: Any) -> None:
    safewrite.replace(path, json.dumps(obj, indent=2, sort_keys=True) + "\n", sync=False)


def hf_config(cfg: Config, dtype: str, bos: int, eos: int) -> dict[str, Any]:
    mc = cfg.model
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": mc.vocab_size,
        "hidden_size": mc.dim,
        "intermediate_size": mc.hidden_dim,
        "num_hidden_layers": mc.n_layers,
        "num_attention_heads": mc.n_heads,
        "num_key_value_heads": mc.n_kv_heads,
        "head_dim": mc.dim // mc.n_heads,
        "hidden_act": "silu",
        "max_position_embeddings": mc.max_seq_len,
        "rms_norm_eps": mc.norm_eps,
        "rope_theta": mc.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": mc.init_std,
        "pretraining_tp": 1,
        "use_cache": True,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": TORCH_DTYPE_NAME[dtype],
    }


def write_tokenizer(out: Path, model: Path, max_len: int) -> tuple[int, int]:
    """tokenizer.model plus the configs AutoTokenizer reads; returns (bos, eos) ids.

    No tokenizer_class of a named model: transformers then builds the tokenizer from the
    SentencePiece model's own normalizer spec, so it encodes as SentencePieceProcessor.encode does
    (its Llama class applies Llama's fixed normalization instead).  No BOS is added: the trainer's
    shards hold documents without one (agpt tokenize appends only the EOD).
    """
    from agpt.data.tokenizer import load

    sp = load(model)
    shutil.copyfile(model, out / "tokenizer.model")
    specials = {
        "bos_token": sp.id_to_piece(sp.bos_id()) if sp.bos_id() >= 0 else None,
        "eos_token": sp.id_to_piece(sp.eos_id()) if sp.eos_id() >= 0 else None,
        "unk_token": sp.id_to_piece(sp.unk_id()) if sp.unk_id() >= 0 else None,
    }
    specials = {k: v for k, v in specials.items() if v is not None}
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": max_len,
            **specials,
        },
    )
    _write_json(out / "special_tokens_map.json", specials)
    return int(sp.bos_id()), int(sp.eos_id())


def _write_folder(
    tmp: Path,
    sd: layout.StepDir,
    cfg: Config,
    shards: list[list[tuple[str, str, tuple[int, ...]]]],
    dtype: str,
    tok: Path | None,
    progress: bool,
) -> int:
    """Shards, index, config and tokenizer into tmp; returns the weight bytes written."""
    import torch

    st_dtype, _itemsize = DTYPES[dtype]
    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    n_tensors = sum(len(e) for e in shards)
    bar = Progress(n_tensors, "export", unit="tensors", quiet=not progress)
    reader = TensorReader(sd)
    weight_map: dict[str, str] = {}
    total = 0
    for i, entries in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        with safewrite.Pending(tmp / name) as f:  # a full disk: one line naming the shard
            f.write(stfile.header_bytes([(hf, shape) for hf, _ours, shape in entries], st_dtype))
            for hf, ours, _shape in entries:
                t = reader.read(f"model.{ours}").to(torch_dtype).contiguous()
                raw = t.view(torch.int16) if dtype == "bf16" else t
                data = raw.numpy()  # little-endian: checked at the start
                f.write(memoryview(data).cast("B"))  # no bytes copy of the tensor
                total += data.nbytes
                weight_map[hf] = name
                del t, raw, data
                bar.update()
    bar.close()
    _write_json(
        tmp / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map}
    )
    bos, eos = (1, 2)
    if tok is not None:
        bos, eos = write_tokenizer(tmp, tok, cfg.model.max_seq_len)
    _write_json(tmp / "config.json", hf_config(cfg, dtype, bos, eos))
    _write_json(tmp / "generation_config.json", {"bos_token_id": bos, "eos_token_id": eos})
    return total


def export_hf(
    step_path: str | Path,
    out: str | Path,
    *,
    dtype: str = "bf16",
    config: str | None = None,
    tokenizer: str | None = None,
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
    sets: tuple[str, ...] | list[str] = (),
    progress: bool = False,
) -> dict[str, Any]:
    """Write OUT as a Hugging Face LlamaForCausalLM folder; returns a summary of what was written."""

    if sys.byteorder != "little":
        raise BadInput("export: safetensors holds little-endian data; run it on a little-endian host")
    if dtype not in DTYPES:
        raise BadInput(f"--dtype {dtype}: use bf16 or fp32")
    if max_shard_bytes <= 0:
        raise BadInput(f"--max-shard-size {max_shard_bytes}: must be positive")
    src = Path(step_path)
    dst = Path(out)
    check_out(dst)
    sd = layout.open_step(src)
    cfg = layout.run_config(sd, config, sets)
    layout.check_shapes(sd, cfg.model)
    tok = tokenizer_source(cfg, sd, tokenizer)

    _st_dtype, itemsize = DTYPES[dtype]
    plan = layout.tensor_plan(cfg.model)
    shards = plan_shards(plan, itemsize, max_shard_bytes)
    try:  # a folder of our own beside OUT, made exclusively under a new name: nothing planted is entered
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", suffix=".partial", dir=dst.parent))
    except OSError as exc:
        raise safewrite.error(dst, exc) from None
    try:
        total = _write_folder(tmp, sd, cfg, shards, dtype, tok, progress)
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's folder is 0700; OUT is made as mkdir would make it
        if dst.exists():
            dst.rmdir()  # checked empty above
        os.replace(tmp, dst)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing half-written is left behind
        if isinstance(exc, OSError):  # a full disk, a read-only folder: one line naming the file
            raise safewrite.error(exc.filename or dst, exc) from None
        raise
    return {
        "out": str(dst),
        "step": sd.step,
        "tensors": len(plan),
        "shards": len(shards),
        "bytes": total,
        "dtype": dtype,
        "tokenizer": str(tok) if tok is not None else None,
    }
