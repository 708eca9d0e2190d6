"""What every node does with the tarball's bytes: stage, verify, relocate, check; then commit or abort.

Bytes arrive in chunks from a transport (an MPI broadcast, a local file, an ssh copy).  A thread extracts them
while the transport fetches the next chunks, so the network and the disk work at the same time and no node
keeps a full copy of the tarball first.  The digest is checked over exactly the bytes that were extracted, so
a chunk corrupted anywhere on the way fails the node even when the damage happens to decompress.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agpt import safewrite
from agpt.yeet.extract import QueueReader, Stage, safe_extract
from agpt.yeet.relocate import is_venv, relocate

FAILED_HOSTS = ".yeet-failed-hosts"
CHECK_TIMEOUT_S = 600.0


@dataclass(kw_only=True, slots=True)
class NodeResult:
    """One node's outcome, gathered to the reporting rank."""

    rank: int
    host: str
    dest: str
    ok: bool = False
    error: str = ""
    seconds: float = 0.0
    files: int = 0
    bytes: int = 0
    committed: bool = False


def run_check(cmd: str, staged: Path, dest: Path) -> str:
    """Run --check CMD inside the staged tree (before it replaces DEST); '' when it passed.

    The staged tree's `bin/` comes first on PATH, so `python -c "import torch"` tests the staged venv itself.
    `{dest}` in CMD becomes the staged path.  The launcher's variables are dropped, so a check that imports
    mpi4py starts a world of its own instead of trying to join this job's.
    """
    launcher = ("PMI_", "PMIX_", "OMPI_", "HYDRA_", "HYDI_", "PALS_", "MPIR_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launcher)}
    env["AGPT_YEET_DIR"] = str(staged)
    env["AGPT_YEET_DEST"] = str(dest)
    if is_venv(staged):
        env["VIRTUAL_ENV"] = str(staged)
        env["PATH"] = f"{staged / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        env.pop("PYTHONHOME", None)
    try:
        proc = subprocess.run(
            cmd.replace("{dest}", shlex.quote(str(staged))),
            shell=True,
            cwd=staged,
            env=env,
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"--check timed out after {CHECK_TIMEOUT_S:.0f}s: {cmd}"
    if proc.returncode == 0:
        return ""
    tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or [""]
    return f"--check failed (exit {proc.returncode}): {cmd}: {tail[0]}"


class _Staging:
    """What every way of filling DEST shares: the staged tree, its counters, the failed hosts it records."""

    def __init__(self, dest: Path, check: str | None) -> None:
        self.dest = dest
        self.check = check
        self.stage = Stage(dest)
        self.error = ""
        self.files = 0
        self.bytes = 0
        self.t0 = time.monotonic()

    def _open(self) -> None:
        """Open the stage; a failure here is this node's error, not a crash, so the node still takes part in
        the collective (its peers would wait for it otherwise)."""
        self.t0 = time.monotonic()
        try:
            self.stage.open()
        except OSError as exc:
            self.error = f"cannot create {self.stage.tmp}: {exc.strerror}"
            self.stage.done = True

    def write_failed_hosts(self, hosts: list[str]) -> None:
        """Record the hosts that did not get DEST, inside the tree that is about to be committed."""
        if hosts:
            safewrite.replace(self.stage.tmp / FAILED_HOSTS, "".join(f"{h}\n" for h in hosts), sync=False)

    def seconds(self) -> float:
        return time.monotonic() - self.t0


class Receiver(_Staging):
    """One node's side of a transfer: chunks in, a verified tree in `DEST.tmp.<id>` out."""

    def __init__(
        self,
        *,
        dest: Path,
        compression: str,
        sha256: str,
        size: int,
        check: str | None = None,
        depth: int = 4,
        members: int = 0,
    ) -> None:
        super().__init__(dest, check)
        self.members = members  # entries counted where the tarball was read (reports only; never trusted)
        self.compression = compression
        self.sha256 = sha256
        self.size = size
        self.q: queue.Queue[tuple[memoryview, Callable[[], None]] | None] = queue.Queue(maxsize=depth)
        self.reader = QueueReader(self.q)
        self.hash = hashlib.sha256()
        self.received = 0
        self._thread = threading.Thread(target=self._extract, name="yeet-extract", daemon=True)

    def start(self) -> Receiver:
        """Open the stage and start extracting."""
        self._open()
        self._thread.start()
        return self

    def _extract(self) -> None:
        if self.error:
            self.reader.drain()
            return
        try:
            # Every member is checked here, on every node, whatever a cache sidecar says: the sidecar and the
            # digest it holds sit beside SRC where anyone who can write there could forge them.
            self.files, self.bytes = safe_extract(
                self.reader,  # type: ignore[arg-type]
                self.stage.tmp,
                self.compression,
            )
        except Exception as exc:
            self.error = str(exc) or type(exc).__name__
        finally:
            self.reader.drain()

    def feed(self, view: memoryview, release: Callable[[], None]) -> None:
        """Hand over one chunk; RELEASE is called once the extractor no longer needs its buffer."""
        self.hash.update(view)
        self.received += len(view)
        self.q.put((view, release))

    def finish(self) -> str:
        """Wait for the extractor, verify, relocate and check; return '' or why this node failed."""
        self.q.put(None)
        self._thread.join()
        if not self.error and self.received != self.size:
            self.error = f"received {self.received} bytes, expected {self.size}"
        if not self.error and self.hash.hexdigest() != self.sha256:
            self.error = (
                f"tarball digest mismatch: got sha256 {self.hash.hexdigest()[:16]}…, want {self.sha256[:16]}…"
            )
        if not self.error:
            try:
                relocate(self.stage.tmp, str(self.dest))
            except OSError as exc:
                self.error = f"relocating the venv failed: {exc}"
        if not self.error and self.check:
            self.error = run_check(self.check, self.stage.tmp, self.dest)
        return self.error


def stage_file(
    path: Path,
    *,
    dest: Path,
    compression: str,
    sha256: str,
    size: int,
    check: str | None,
    chunk: int,
    members: int = 0,
) -> Receiver:
    """Stage a tarball from a local file (one node, or a node that already received it over ssh)."""
    from agpt.progress import Progress

    rx = Receiver(
        dest=dest, compression=compression, sha256=sha256, size=size, check=check, members=members
    ).start()
    free: queue.Queue[bytearray] = queue.Queue()
    for _ in range(3):
        free.put(bytearray(chunk))
    with Progress(size, "yeet: extract", unit="B", scale=True) as bar:
        try:
            with open(path, "rb", buffering=0) as f:
                while True:
                    buf = free.get()
                    n = f.readinto(buf)
                    if not n:
                        free.put(buf)
                        break
                    rx.feed(memoryview(buf)[:n], lambda b=buf: free.put(b))  # type: ignore[misc]
                    bar.update(n)
        except OSError as exc:
            rx.error = rx.error or f"reading {path}: {exc.strerror}"
    rx.finish()
    return rx


class TreeCopier(_Staging):
    """`--mode copy|rsync`: the per-file baseline (what yeet replaces), with the same staging and checks."""

    def __init__(self, *, src: Path, dest: Path, mode: str, check: str | None) -> None:
        super().__init__(dest, check)
        self.src = src
        self.mode = mode

    def start(self) -> TreeCopier:
        self._open()
        return self

    def finish(self) -> str:
        import shutil

        from agpt.yeet.pack import fingerprint

        tmp = self.stage.tmp
        if self.error:
            return self.error
        try:
            if self.mode == "rsync":
                proc = subprocess.run(
                    ["rsync", "-a", f"{self.src}/", f"{tmp}/"], capture_output=True, text=True, check=False
                )
                if proc.returncode:
                    self.error = f"rsync failed (exit {proc.returncode}): {proc.stderr.strip()[-200:]}"
            else:
                shutil.copytree(self.src, tmp, symlinks=True, dirs_exist_ok=True)
        except (OSError, shutil.Error) as exc:
            self.error = f"copy failed: {exc}"
        if not self.error and fingerprint(tmp, times=False) != fingerprint(self.src, times=False):
            self.error = f"the copy differs from {self.src} (it changed during the copy?)"
        if not self.error:
            for _dirpath, _dirs, files in os.walk(tmp):
                self.files += len(files)
            relocate(tmp, str(self.dest))
            if self.check:
                self.error = run_check(self.check, tmp, self.dest)
        return self.error
