"""`agpt ckpt info`: what a checkpoint is and whether all of it is there.

Reports the step, tokens consumed (samples × seq_len, read from the checkpoint itself), the world size
that saved it, its config and provenance (meta.json), the data manifest it trained on (and whether
that blend still matches its digest), every file with its size and state, and completeness: `.complete`
present and every data file the DCP metadata names present and long enough.  A run directory shows
its newest complete checkpoint (or its newest one when none is complete).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

from agpt import ckptdir
from agpt.digest import file_sha256
from agpt.errors import BadInput, CheckpointError
from agpt.rundir import CKPT, COMPLETE
from agpt.train import provenance


def _pick(path: Path) -> Path:
    """A step directory given itself, a run directory or its ckpt/ folder."""
    if (path / ".metadata").exists() or (path / COMPLETE).exists() or path.name.startswith("step-"):
        return path
    root = path / CKPT if (path / CKPT).is_dir() else path
    steps = ckptdir.step_dirs(root)
    done = [d for d in steps if d.complete]
    if done or steps:
        return (done or steps)[-1].path
    raise BadInput(f"{path}: no checkpoint here (expected a step-N directory or a run directory)")


def marker_problems(d: ckptdir.StepDir) -> list[str]:
    """What keeps D's marker from proving a complete, intact checkpoint (agpt.ckptdir's rule)."""
    if not d.marked:
        return [f"{d.marker}: missing"]
    if d.unreadable:
        return [f"{d.marker}: unreadable"]
    if d.names_another_step is not None:
        return [f"{d.marker}: says step {d.names_another_step}, the directory is {d.path.name}"]
    return []


def inspect(path: str | Path) -> dict[str, Any]:
    """Everything known about a checkpoint; `complete` is False with `problems` naming each file."""
    from agpt.train import checkpoint as ck

    p = _pick(Path(path))
    if not p.is_dir():
        raise BadInput(f"{p}: not a checkpoint directory")
    problems = marker_problems(ckptdir.read_step_dir(p))
    rec = ckptdir.read_marker(p) or {}
    meta = provenance.read(p) or {}
    md = None
    try:
        md = ck.read_metadata(p)
    except Exception as exc:
        problems.append(str(exc))
    files = _files(p, md, problems)
    step = consumed = None
    tensors: dict[str, Any] = {}
    if md is not None:
        tensors = _model_tensors(md)
        if all(f["state"] == "ok" for f in files):
            step, consumed = _trainer_position(p, md, problems)
    config = meta.get("config")
    seq_len = (config or {}).get("train", {}).get("seq_len") if isinstance(config, dict) else None
    return {
        "path": str(p),
        "step": step if step is not None else rec.get("step"),
        "complete": not problems,
        "problems": problems,
        "saved_by_ranks": rec.get("world_size"),
        "saved_at": rec.get("time"),
        "samples_consumed": consumed,
        "tokens_consumed": consumed * seq_len if consumed is not None and isinstance(seq_len, int) else None,
        "bytes": sum(f["bytes"] or 0 for f in files),
        "files": files,
        **tensors,
        "data": _data_record(meta.get("data")),
        "provenance": {k: v for k, v in meta.items() if k not in ("config", "data")} or None,
        "config": config,
    }


def _files(p: Path, md: Any, problems: list[str]) -> list[dict[str, Any]]:
    """Every file of the step directory and every one the DCP metadata MD names: its size and state (ok,
    missing, truncated); each problem is added to PROBLEMS."""
    need: dict[str, int] = {}
    for item in (md.storage_data or {}).values() if md is not None else ():
        rel = str(item.relative_path)
        need[rel] = max(need.get(rel, 0), int(item.offset) + int(item.length))
    files: list[dict[str, Any]] = []
    for name in sorted({f.name for f in p.iterdir() if f.is_file()} | set(need)):
        f = p / name
        size = f.stat().st_size if f.exists() else None
        state = "ok"
        if name in need:
            if size is None:
                state = "missing"
            elif size < need[name]:
                state = f"truncated ({size} of {need[name]} bytes)"
        if state != "ok":
            problems.append(f"{f}: {state}")
        files.append({"name": name, "bytes": size, "state": state})
    return files


def _model_tensors(md: Any) -> dict[str, Any]:
    """The model's tensor count, parameter count and dtype, from the DCP metadata alone."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    out: dict[str, Any] = {}
    params = 0
    for k, v in md.state_dict_metadata.items():
        if k.startswith("model.") and isinstance(v, TensorStorageMetadata):
            params += math.prod(v.size)
            out.setdefault("dtype", str(v.properties.dtype).removeprefix("torch."))
    out["model_tensors"] = sum(1 for k in md.state_dict_metadata if k.startswith("model."))
    out["parameters"] = params
    return out


def _trainer_position(p: Path, md: Any, problems: list[str]) -> tuple[int | None, int | None]:
    """(step, samples consumed) as the checkpoint itself holds them; a read that fails is a problem."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader

    from agpt.train import checkpoint as ck

    want = {k: torch.empty((), dtype=torch.int64) for k in ("trainer.step", "trainer.consumed")}
    if not all(k in md.state_dict_metadata for k in want):
        return None, None
    # The files holding them are checked against .complete before they are read (read_metadata checked
    # .metadata): a rank's shard is a fraction of the checkpoint, so info stays quick.
    holding = sorted({str(v.relative_path) for k, v in (md.storage_data or {}).items() if k.fqn in want})
    try:
        ck.verify_digests(p, names=holding)
    except CheckpointError as exc:
        problems.append(str(exc))
        return None, None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.load(want, storage_reader=FileSystemReader(p), no_dist=True)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # DCP's CheckpointException is a BaseException
        problems.append(f"{p}: cannot read the trainer's step ({ck.one_line(exc)})")
        return None, None
    return int(want["trainer.step"]), int(want["trainer.consumed"])


def _data_record(data: Any) -> Any:
    """meta.json's blend, with whether its manifest still has the digest the run trained on."""
    if isinstance(data, dict) and data.get("path") and data.get("manifest_sha256"):
        mpath = Path(data["path"]) / "manifest.json"
        return {**data, "manifest_matches": mpath.is_file() and file_sha256(mpath) == data["manifest_sha256"]}
    return data


def format_info(info: dict[str, Any]) -> str:
    lines = [
        f"checkpoint   {info['path']}",
        f"complete     {'yes' if info['complete'] else 'NO'}",
    ]
    lines += [f"  problem    {s}" for s in info["problems"]]
    lines.append(f"step         {info['step']}")
    if info.get("tokens_consumed") is not None:
        lines.append(f"tokens       {info['tokens_consumed']:,} ({info['samples_consumed']:,} samples)")
    elif info.get("samples_consumed") is not None:
        lines.append(f"samples      {info['samples_consumed']:,}")
    lines.append(f"saved by     {info['saved_by_ranks']} ranks")
    if "parameters" in info:
        lines.append(
            f"parameters   {info['parameters']:,} ({info.get('dtype')}, {info['model_tensors']} tensors)"
        )
    lines.append(f"size         {info['bytes']:,} bytes in {len(info['files'])} files")
    for f in info["files"]:
        size = "-" if f["bytes"] is None else f"{f['bytes']:,}"
        lines.append(f"  {f['name']:<24} {size:>16}  {f['state']}")
    data = info.get("data")
    if isinstance(data, dict):
        match = data.get("manifest_matches")
        state = "" if match is None else (" (matches)" if match else " (CHANGED since)")
        lines.append(f"data         {data.get('path')}{state}")
        lines.append(f"  manifest   sha256 {data.get('manifest_sha256')}")
        tok = data.get("tokenizer") or {}
        if tok:
            lines.append(f"  tokenizer  {tok.get('path')} sha256 {tok.get('sha256')}")
    elif info.get("config") is not None:
        lines.append("data         synthetic")
    prov = info.get("provenance")
    if prov:
        dirty = " (uncommitted changes)" if prov.get("agpt_dirty") else ""
        lines.append(f"agpt         {prov.get('agpt_version')} at {prov.get('agpt_revision')}{dirty}")
        lines.append(f"torch        {prov.get('torch_version')}")
        if prov.get("source"):
            lines.append(f"imported     from {prov['source'].get('hf_dir')}")
    else:
        lines.append("provenance   none recorded (meta.json missing)")
    cfg = info.get("config")
    if isinstance(cfg, dict):
        m = cfg.get("model", {})
        lines.append("model        " + " ".join(f"{k}={v}" for k, v in m.items()))
    return "\n".join(lines)


def to_json(info: dict[str, Any]) -> str:
    return json.dumps(info, indent=1)
