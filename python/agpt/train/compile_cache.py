"""Compiled kernels kept with the run (train.compile): Inductor's and Triton's caches live in RUN_DIR/compile_cache
and are staged node-local, so a relaunch, a spare and the next job of the chain load the kernels instead of
compiling them again.

Every rank points TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR at its node's folder (agpt.nodelocal: SITE_LOCAL_DIR,
else SITE_LOCAL_CKPT_DIR, else /dev/shm), which the node's local rank 0 fills from the run directory's copy before
the model is built (a rank that compiles before the copy ends only compiles, as it would have); after the first
step, whose compiles fill it, rank 0 copies its node's folder back to the run directory in the background.  The
caches are keyed by the kernels' source, torch version and device, so a stale or foreign entry is only a miss.
A copy that fails is said once and training goes on.  A variable the job already sets is kept: the site decides.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from agpt import nodelocal, numeric, rundir

DIR = "compile_cache"  # RUN_DIR/compile_cache/{inductor,triton}
VARS = {"inductor": "TORCHINDUCTOR_CACHE_DIR", "triton": "TRITON_CACHE_DIR"}


class CompileCache:
    def __init__(self, run_dir: Path, local: Path, rank: int) -> None:
        self.shared = run_dir / DIR
        self.local = local
        self.rank = rank
        self.saver: threading.Thread | None = None

    def save_async(self) -> None:
        """Rank 0: its node's caches back to the run directory, behind training (once)."""
        if self.rank != 0 or self.saver is not None:
            return
        self.saver = threading.Thread(target=self._copy, args=(self.local, self.shared), name="agpt-compile-cache",
                                      daemon=True)  # fmt: skip
        self.saver.start()

    @staticmethod
    def _copy(src: Path, dst: Path) -> bool:
        try:
            if src.is_dir():
                shutil.copytree(src, dst, dirs_exist_ok=True, symlinks=True)
            return True
        except (OSError, shutil.Error) as e:
            print(f"agpt: warning: compile cache: cannot copy {src} to {dst} ({e}); kernels are compiled again",
                  flush=True)  # fmt: skip
            return False


def prepare(run_dir: Path | None, rank: int, env: dict[str, str] | None = None) -> CompileCache | None:
    """Point the caches at this node's folder, staged from the run directory by the node's local rank 0; None
    without a run directory."""
    if run_dir is None:
        return None
    env = os.environ if env is None else env  # type: ignore[assignment]
    assert env is not None
    root = nodelocal.base(env.get("SITE_LOCAL_DIR"), env.get("SITE_LOCAL_CKPT_DIR"))
    local = nodelocal.folder(root, "compile", run_dir, nodelocal.host_name(env))
    local_rank = next(
        (numeric.whole(env[v], v) for v in rundir.LOCAL_RANK_VARS if env.get(v, "").isdigit()), 0
    )
    try:
        nodelocal.private_dir(local)
    except OSError as e:
        print(
            f"agpt: warning: compile cache: {local}: {e}; the caches stay where torch puts them", flush=True
        )
        return None
    for sub, var in VARS.items():
        if not env.get(var):
            (local / sub).mkdir(exist_ok=True)
            os.environ[var] = str(local / sub)
    cache = CompileCache(run_dir, local, rank)
    if local_rank == 0 and (run_dir / DIR).is_dir():
        CompileCache._copy(run_dir / DIR, local)
    return cache
