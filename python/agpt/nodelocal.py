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
- creation: mode 0700, never through a symbolic link: an existing path must be a real directory owned by this
  user (left open, it is closed to group and others), else NodeLocalError says which (a folder another user
  planted in a world-writable /dev/shm must not receive our checkpoints).

Standard library only (the heartbeats run on the recovery path).
"""

from __future__ import annotations

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
    this user's own folder (make_private makes both)."""
    name = ".".join((kind, run_tag(run_dir), *parts))
    return root / f"agpt-{os.getuid()}" / name.replace("/", "_")


def make_private(path: Path) -> Path:
    """Create PATH and its parent, this user's agpt-UID folder (mode 0700; the base must exist), or take each as it
    is when it is our own real directory (tightened to 0700 if it was left open); a link, a file or another user's
    folder raise NodeLocalError."""
    if path.parent.name == f"agpt-{os.getuid()}":
        private_dir(path.parent)
    return private_dir(path)


def private_dir(path: Path) -> Path:
    """PATH made (0700) or taken as it is when it is our own real directory, never entered through a link: a
    folder inside a node-local folder (the local tier's step-N) is checked the same way before anything is
    written into it.  A link, a file or another user's folder raise NodeLocalError."""
    try:
        os.mkdir(path, PRIVATE)
    except FileExistsError:
        pass
    try:  # opened without following a link, so the checks and the chmod are about the same directory
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise NodeLocalError(f"{path}: is a symbolic link; refusing to follow it") from None
        if exc.errno == errno.ENOTDIR:
            raise NodeLocalError(f"{path}: exists and is not a directory") from None
        raise
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            raise NodeLocalError(f"{path}: owned by uid {st.st_uid}, not by this user")
        if st.st_mode & 0o077:
            os.fchmod(fd, PRIVATE)
    finally:
        os.close(fd)
    return path
