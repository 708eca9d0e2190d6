"""Node-local folders: the one rule for where a node keeps what must not touch the shared filesystem.

Heartbeat rank records (agpt.heartbeat) and the local checkpoint tier (agpt.localtier) live in memory on each
node, not in the run directory.  Both name and create their folders here, so the two agree on:
- the node's name: $AGPT_HEARTBEAT_HOST, else $SLURMD_NODENAME (a Slurm node's own name, which on a test
  cluster of many nodes on one host differs per node where the host name does not), else the short host name;
- the base folder: the first setting given (a config key, a site key, an environment variable), else
  /dev/shm when it is a writable folder (memory: tmpfs), else the system's temporary folder;
- the folder name: `agpt-UID/KIND.TAG.PARTS...` (UID: this user's; both levels private) where TAG is 8 hex digits of the sha1 of the run directory's
  resolved path (job ids repeat across clusters and test runs; the run directory does not), and PARTS name
  the attempt or the node, so two runs, or two nodes sharing one host's memory, never share a folder;
- creation: mode 0700, never through a symbolic link, at any level: every folder from agpt-UID down is walked
  one at a time without following a link (`private_dir`), and an existing one must be a real directory owned
  by this user (left open, it is closed to group and others), else NodeLocalError says which (a folder another
  user planted in a world-writable /dev/shm must not receive our checkpoints).

Standard library only (the heartbeats run on the recovery path).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import socket
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

SHM = Path("/dev/shm")
HOST_VARS = ("AGPT_HEARTBEAT_HOST", "SLURMD_NODENAME")
PRIVATE = 0o700


class NodeLocalError(OSError):
    """A node-local folder that cannot be used safely (a link, another owner, open to others)."""


def host_name(env: Mapping[str, str] | None = None) -> str:
    """This node's name (see the module's rule)."""
    env = os.environ if env is None else env
    for var in HOST_VARS:
        if env.get(var):
            return env[var]
    return socket.gethostname().split(".")[0]


def base(*settings: str | None) -> Path:
    """The first non-empty setting, else /dev/shm when writable, else the temporary folder."""
    for s in settings:
        if s:
            return Path(s)
    if SHM.is_dir() and os.access(SHM, os.W_OK):
        return SHM
    return Path(tempfile.gettempdir())


def run_tag(run_dir: str | Path) -> str:
    """8 hex digits naming the run directory (its resolved path)."""
    return hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:8]


def folder(root: Path, kind: str, run_dir: str | Path, *parts: str) -> Path:
    """ROOT/agpt-UID/KIND.TAG.PARTS: a run's (and an attempt's or a node's) folder under a node-local base, in
    this user's own folder (private_dir makes both)."""
    name = ".".join((kind, run_tag(run_dir), *parts))
    return root / f"agpt-{os.getuid()}" / name.replace("/", "_")


def private_dir(path: Path) -> Path:
    """PATH (a node folder, or a folder inside one such as the local tier's step-N) made or taken, walking every
    folder from this user's agpt-UID folder down to PATH one at a time, each opened relative to the one above it
    and never through a link (O_DIRECTORY|O_NOFOLLOW): each is made (0700) or taken when it is our own real
    directory (tightened to 0700 if it was left open).  A link at any of them (agpt-UID, the node folder, step-N),
    a file or another user's folder raise NodeLocalError naming it.  The base above agpt-UID is the setting, taken
    as named (a site's scratch folder may itself be a link); a PATH with no agpt-UID folder has only its last
    folder walked."""
    parts = Path(path).parts
    mine = f"agpt-{os.getuid()}"
    start = max((i for i, name in enumerate(parts) if name == mine), default=len(parts) - 1)
    here = Path(*parts[:start]) if start else Path(os.curdir)
    fd = os.open(here, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for name in parts[start:]:
        here = here / name
        fd = _enter(fd, name, here)  # closes the fd it is given, even when it raises
    os.close(fd)
    return Path(path)


def _enter(parent: int, name: str, shown: Path) -> int:
    """An fd on NAME inside the folder PARENT (closed here), made or checked as private_dir says."""
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, PRIVATE, dir_fd=parent)
        try:  # opened without following a link, so the checks and the chmod are about the same directory
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except OSError as exc:
            if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                raise NodeLocalError(f"{shown}: is a symbolic link; refusing to follow it") from None
            if exc.errno == errno.ENOTDIR:
                raise NodeLocalError(f"{shown}: exists and is not a directory") from None
            raise
    except NodeLocalError:
        raise
    except OSError as exc:  # named by its whole path, as a plain os.mkdir(PATH) would name it
        raise OSError(exc.errno, exc.strerror, str(shown)) from None
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            raise NodeLocalError(f"{shown}: owned by uid {st.st_uid}, not by this user")
        if st.st_mode & 0o077:
            os.fchmod(fd, PRIVATE)
    except BaseException:
        os.close(fd)
        raise
    return fd
