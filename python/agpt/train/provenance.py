"""`meta.json` in a checkpoint's step directory: what produced it, written before `.complete`.

Standard library only (torch's version is read from the already imported module), so `agpt ckpt
info` can show it without importing torch.  Fields (format `agpt-ckpt-meta-1`): step, world_size,
agpt_version, agpt_revision (git commit of the checkout, or null), agpt_dirty (uncommitted changes,
or null), torch_version, python_version, config (the resolved trainer config), data (the blend's path,
its manifest's sha256 and cache key, and the pinned tokenizer's path and sha256; null for synthetic
data), and, for an imported checkpoint, source (the Hugging Face folder it came from).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from agpt import rundir, safewrite
from agpt.digest import file_sha256

FORMAT = "agpt-ckpt-meta-1"
META = "meta.json"
_ROOT = Path(__file__).resolve().parents[3]


def git_revision(root: Path = _ROOT) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the agpt checkout, or (None, None) outside git (e.g. an installed copy)."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if rev.returncode != 0:
            return None, None
        st = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = bool(st.stdout.strip()) if st.returncode == 0 else None
        return rev.stdout.strip(), dirty
    except (OSError, subprocess.SubprocessError):
        return None, None


def data_record(data_path: str) -> dict[str, Any] | None:
    """The blend a run reads: manifest digest and pinned tokenizer; None for the synthetic stream."""
    if not data_path:
        return None
    d = Path(data_path)
    manifest_path = d / "manifest.json"
    rec: dict[str, Any] = {
        "path": str(d.resolve()),
        "manifest_sha256": None,
        "cache_key": None,
        "tokenizer": None,
    }
    try:
        manifest = rundir.read_record(manifest_path)
        rec["manifest_sha256"] = file_sha256(manifest_path)
    except (OSError, ValueError):
        return rec
    rec["cache_key"] = manifest.get("cache_key")
    tok = manifest.get("tokenizer") or {}
    path = tok.get("path")
    rel = tok.get("path_rel")
    if rel and (d / rel).is_file():
        path = os.path.normpath(d / rel)
    rec["tokenizer"] = {"path": path, "sha256": tok.get("sha256")}
    return rec


def build(config: dict[str, Any]) -> dict[str, Any]:
    """Everything but step and world size; computed once per run (git is asked once)."""
    from agpt import __version__

    rev, dirty = git_revision()
    torch_mod = sys.modules.get("torch")
    return {
        "format": FORMAT,
        "agpt_version": __version__,
        "agpt_revision": rev,
        "agpt_dirty": dirty,
        "torch_version": str(getattr(torch_mod, "__version__", "")) or None,
        "python_version": platform.python_version(),
        "config": config,
        "data": data_record(str(config.get("data", {}).get("path", ""))),
    }


def write(step_path: Path, meta: dict[str, Any], *, step: int, world_size: int) -> None:
    """Write meta.json durably (fsynced, atomic rename); the caller writes `.complete` after it."""
    record = {**meta, "step": step, "world_size": world_size}
    safewrite.replace(step_path / META, json.dumps(record, indent=1, sort_keys=True) + "\n")


def read(step_path: Path) -> dict[str, Any] | None:
    """meta.json of a step directory, or None when absent (checkpoints older than the record)."""
    try:
        data = rundir.read_record(step_path / META)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
