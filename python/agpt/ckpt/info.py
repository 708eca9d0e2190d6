"""`agpt ckpt info`: what a checkpoint is and whether all of it is there.

Reports the step, tokens consumed (samples × seq_len, read from the checkpoint itself), the world size
that saved it, its config and provenance (meta.json), the data manifest it trained on (and whether
that blend still matches its digest), every file with its size and state, and completeness: `.complete`
present and every data file the DCP metadata names present and long enough.  A run directory shows
its newest complete checkpoint (or its newest one when none is complete).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from agpt import ckptdir
from agpt.digest import file_sha256
from agpt.errors import BadInput
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
    import torch

    from agpt.train import checkpoint as ck

    p = _pick(Path(path))
    if not p.is_dir():
        raise BadInput(f"{p}: not a checkpoint directory")
    problems = marker_problems(ckptdir.read_step_dir(p))
    rec = ckptdir.read_marker(p)
    meta = provenance.read(p)
    files: list[dict[str, Any]] = []
    need: dict[str, int] = {}
    md = None
    try:
        md = ck.read_metadata(p)
    except Exception as exc:
        problems.append(str(exc))
    if md is not None:
        for item in (md.storage_data or {}).values():
            rel = str(item.relative_path)
            need[rel] = max(need.get(rel, 0), int(item.offset) + int(item.length))
    names = sorted({f.name for f in p.iterdir() if f.is_file()} | set(need))
    for name in names:
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
    step = consumed = None
    tensors: dict[str, Any] = {}
    if md is not None:
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        params = 0
        for k, v in md.state_dict_metadata.items():
            if k.startswith("model.") and isinstance(v, TensorStorageMetadata):
                n = 1
                for d in v.size:
                    n *= d
                params += n
                tensors.setdefault("dtype", str(v.properties.dtype).removeprefix("torch."))
        tensors["model_tensors"] = sum(1 for k in md.state_dict_metadata if k.startswith("model."))
        tensors["parameters"] = params
        files_ok = all(f["state"] == "ok" for f in files)
        want = {k: torch.empty((), dtype=torch.int64) for k in ("trainer.step", "trainer.consumed")}
        if files_ok and all(k in md.state_dict_metadata for k in want):
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint import FileSystemReader

            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    dcp.load(want, storage_reader=FileSystemReader(p), no_dist=True)
                step, consumed = int(want["trainer.step"]), int(want["trainer.consumed"])
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # DCP's CheckpointException is a BaseException
                problems.append(f"{p}: cannot read the trainer's step ({ck.one_line(exc)})")
    config = (meta or {}).get("config")
    seq_len = (config or {}).get("train", {}).get("seq_len") if isinstance(config, dict) else None
    data = (meta or {}).get("data")
    if isinstance(data, dict) and data.get("path") and data.get("manifest_sha256"):
        mpath = Path(data["path"]) / "manifest.json"
        data = {**data, "manifest_matches": mpath.is_file() and file_sha256(mpath) == data["manifest_sha256"]}
    return {
        "path": str(p),
        "step": step if step is not None else (rec or {}).get("step"),
        "complete": not problems,
        "problems": problems,
        "saved_by_ranks": (rec or {}).get("world_size"),
        "saved_at": (rec or {}).get("time"),
        "samples_consumed": consumed,
        "tokens_consumed": consumed * seq_len if consumed is not None and isinstance(seq_len, int) else None,
        "bytes": sum(f["bytes"] or 0 for f in files),
        "files": files,
        **tensors,
        "data": data,
        "provenance": {k: v for k, v in (meta or {}).items() if k not in ("config", "data")} or None,
        "config": config,
    }


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
