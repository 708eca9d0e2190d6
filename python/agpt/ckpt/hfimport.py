"""`agpt ckpt import`: a Hugging Face Llama folder as RUN_DIR/ckpt/step-N, so `agpt train` continues from it.

The run's config decides the model; the folder must match it exactly (architecture, every tensor's
name and shape), checked from config.json and the safetensors headers before any weight is read.
The checkpoint is written by the trainer's own code path (model, fresh AdamW state, schedule and data
position, meta.json, `.complete`), so resuming from it is an ordinary resume.  Run it under the
launcher (mpiexec/srun) with as many ranks as needed to hold the model: each rank keeps only its FSDP
shard, reading one full tensor at a time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agpt import ckptdir, rundir
from agpt.ckpt import layout, stfile
from agpt.errors import BadInput, CheckpointError, ConfigError
from agpt.progress import Progress
from agpt.rundir import CKPT
from agpt.train import provenance
from agpt.train.config import Config, load_config

ARCH = "LlamaForCausalLM"
IGNORED = ("rotary_emb.inv_freq",)  # buffers some older exports wrote; recomputed from rope_theta


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = rundir.read_record(path, limit=rundir.TEXT_MAX)  # bounded, finite JSON; never a FIFO
    except FileNotFoundError:
        raise BadInput(f"{path}: missing (not a Hugging Face model folder)") from None
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: expected a JSON object")
    return data


def check_config(hf_dir: Path, cfg: Config) -> dict[str, Any]:
    """config.json names a Llama with the dimensions of the run's config, else BadInput naming the field."""
    path = hf_dir / "config.json"
    hc = _read_json(path)
    archs = hc.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise BadInput(f"{path}: architectures must be a list of names, got {archs!r:.60}")
    if not isinstance(hc.get("rope_parameters") or {}, dict):
        raise BadInput(f"{path}: rope_parameters must be an object, got {hc['rope_parameters']!r:.60}")
    if ARCH not in archs and hc.get("model_type") != "llama":
        raise BadInput(
            f"{path}: architecture {', '.join(archs) or hc.get('model_type') or '?'} is not {ARCH} "
            f"(only Llama-style models can be imported)"
        )
    if hc.get("rope_scaling"):
        raise BadInput(f"{path}: rope_scaling {hc['rope_scaling']} is not supported (plain RoPE only)")
    rope_type = (hc.get("rope_parameters") or {}).get("rope_type", "default")
    if rope_type != "default":
        raise BadInput(f"{path}: rope_parameters.rope_type {rope_type!r} is not supported (plain RoPE only)")
    for flag in ("attention_bias", "mlp_bias"):
        if hc.get(flag):
            raise BadInput(f"{path}: {flag} is true; the model has no biases")
    if hc.get("hidden_act", "silu") != "silu":
        raise BadInput(f"{path}: hidden_act {hc['hidden_act']!r}, the model uses silu")
    mc = cfg.model
    want = {
        "vocab_size": ("model.vocab_size", mc.vocab_size),
        "hidden_size": ("model.dim", mc.dim),
        "intermediate_size": ("model.ffn_dim", mc.hidden_dim),
        "num_hidden_layers": ("model.n_layers", mc.n_layers),
        "num_attention_heads": ("model.n_heads", mc.n_heads),
        "num_key_value_heads": ("model.n_kv_heads", mc.n_kv_heads),
        "head_dim": ("model.dim / model.n_heads", mc.dim // mc.n_heads),
        "rope_theta": ("model.rope_theta", mc.rope_theta),
        "rms_norm_eps": ("model.norm_eps", mc.norm_eps),
    }
    for key, (ours, value) in want.items():
        have = hc.get(key)
        if key == "num_key_value_heads" and have is None:
            have = hc.get("num_attention_heads")
        if key == "rope_theta" and have is None:
            have = (hc.get("rope_parameters") or {}).get("rope_theta")
        if have is None and key in ("head_dim", "rope_theta", "rms_norm_eps"):
            continue
        if have != value and not (isinstance(have, float) and abs(have - value) <= 1e-12 * abs(value)):
            raise BadInput(f"{path}: {key} is {have}, the config's {ours} is {value}")
    return hc


def weight_files(hf_dir: Path) -> dict[str, Path]:
    """HF tensor name -> safetensors file holding it (from the index, or the single model.safetensors)."""
    index = hf_dir / "model.safetensors.index.json"
    single = hf_dir / "model.safetensors"
    if index.exists():
        data = _read_json(index)
        wm = data.get("weight_map")
        if not isinstance(wm, dict):
            raise BadInput(f"{index}: no weight_map")
        return {name: hf_dir / str(f) for name, f in wm.items()}
    if single.exists():
        _start, header = stfile.read_header(single)
        return {name: single for name in header}
    bins = sorted(p.name for p in hf_dir.glob("*.bin"))
    extra = f" ({bins[0]} is a pickle checkpoint: convert it to safetensors first)" if bins else ""
    raise BadInput(f"{index}: missing, and no {single.name} either{extra}")


Located = dict[
    str, tuple[Path, int, dict[str, Any], str]
]  # HF name -> (file, data start, entry, name in file)


def check_weights(hf_dir: Path, cfg: Config, tied: bool) -> Located:
    """Every tensor the config needs is there with its shape, and nothing else is; returns where each is."""
    files = weight_files(hf_dir)
    plan = layout.tensor_plan(cfg.model)
    needed = {hf for hf, _, _ in plan}
    for name in sorted(set(files) - needed):
        if not name.endswith(IGNORED):
            raise BadInput(f"{files[name]}: tensor {name} is not part of a Llama of this config")
    headers: dict[Path, tuple[int, dict[str, dict[str, Any]]]] = {}
    out: Located = {}
    for hf, _ours, shape in plan:
        src = hf
        if hf == "lm_head.weight" and tied and hf not in files:
            src = "model.embed_tokens.weight"  # tied embeddings: the output layer is the embedding
        if src not in files:
            raise BadInput(f"{hf_dir}: tensor {src} is missing (the config needs it)")
        path = files[src]
        if path not in headers:
            headers[path] = stfile.read_header(path)
        start, header = headers[path]
        if src not in header:
            raise BadInput(f"{path}: tensor {src} is not in the file its index names")
        have = tuple(int(d) for d in header[src]["shape"])
        if have != shape:
            raise BadInput(f"{path}: tensor {src} has shape {list(have)}, the config needs {list(shape)}")
        if header[src]["dtype"] not in stfile.ST_DTYPES:
            raise BadInput(f"{path}: tensor {src} has dtype {header[src]['dtype']}; floating point expected")
        out[hf] = (path, start, header[src], src)
    return out


def import_hf(
    hf_dir: str | Path,
    config: str,
    run_dir: str | Path,
    *,
    step: int = 0,
    sets: tuple[str, ...] | list[str] = (),
) -> Path:
    """Write RUN_DIR/ckpt/step-STEP from HF_DIR; returns the step directory."""
    src = Path(hf_dir)
    rd = Path(run_dir)
    if step < 0:
        raise BadInput(f"--step {step}: must be >= 0")
    cfg = load_config(config, list(sets), flags={"train.run_dir": str(rd)})
    if not src.is_dir():
        raise BadInput(f"{src}: not a folder")
    hc = check_config(src, cfg)
    tied = bool(hc.get("tie_word_embeddings", False))
    files = check_weights(src, cfg, tied)
    done = ckptdir.complete(rd / CKPT)
    if done:
        raise CheckpointError(
            f"{done[-1].path}: the run already has checkpoints; import into a new run directory"
        )
    if step > cfg.train.steps:
        raise ConfigError(f"--step {step}: beyond train.steps {cfg.train.steps}")
    (rd / "ckpt").mkdir(parents=True, exist_ok=True)
    return _write(src, cfg, rd, files, step)


def _write(src: Path, cfg: Config, rd: Path, files: Located, step: int) -> Path:
    import torch
    from torch.distributed.tensor import DTensor, distribute_tensor

    from agpt.train.trainer import DTYPE, Trainer

    trainer = Trainer(cfg, rd)
    assert trainer.ckpt is not None
    if trainer.rank == 0:
        meta = provenance.build(cfg.to_dict())
        meta["source"] = {
            "hf_dir": str(src.resolve()),
            "config_json": json.loads((src / "config.json").read_text()),
        }
        trainer.ckpt.meta = meta
    master = DTYPE[cfg.train.master_dtype]
    by_ours = {ours: hf for hf, ours, _ in layout.tensor_plan(cfg.model)}
    params = dict(trainer.model.named_parameters())
    bar = Progress(len(params), "import", unit="tensors", quiet=trainer.rank != 0)
    with torch.no_grad(), bar:
        for ours, p in params.items():
            path, start, entry, name = files[by_ours[ours]]
            full = stfile.read_tensor(path, start, entry, name).to(dtype=master, device=p.device)
            if isinstance(p, DTensor):
                local = distribute_tensor(full, p.device_mesh, p.placements).to_local()
                p.to_local().copy_(local)
            else:
                p.copy_(full)
            del full
            bar.update()
    trainer.state()  # materialises AdamW's state (zero moments) the way every save does
    for st in trainer.optim.state.values():
        if isinstance(st.get("step"), torch.Tensor):
            st["step"].zero_()  # a fresh optimizer: the first update is step 1, as in a new run
    trainer.step = step
    trainer.consumed = step * cfg.train.global_batch
    trainer.save(block=True)
    trainer.ckpt.wait()
    path = ckptdir.step_dir(rd / CKPT, step)
    if trainer.rank == 0:
        print(f"agpt: imported {src} as {path} (step {step}); `agpt train` continues from it", flush=True)
    return path
