"""What the agent, a parked process and a claim agree on: the socket's name, the venv digest, the messages.

The socket is an abstract Unix socket (Linux: no file, no path-length limit, gone with its process) named after
the user, the run directory, the node and the slot; abstract sockets have no file permissions, so the parked
process accepts only a peer of its own uid (SO_PEERCRED).  Messages are one JSON object per line; the claim's
first one carries its stdin, stdout and stderr (SCM_RIGHTS).  Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import sys
from pathlib import Path

from agpt import nodelocal, rundir

MAX_MSG = 1 << 20  # an assignment (the rank's environment) fits in far less
PROTOCOL = 1


def address(run_dir: str, host: str, slot: int) -> str:
    """The abstract socket of SLOT on HOST for the run directory (a leading NUL: Linux's abstract namespace)."""
    return f"\0agpt-warm.{os.getuid()}.{nodelocal.run_tag(run_dir)}.{host}.{slot}"


def slot_of(env: dict[str, str]) -> int | None:
    """This rank's slot: its local rank as the launcher says it (srun, PALS, hydra, Open MPI, torchrun)."""
    for var in rundir.LOCAL_RANK_VARS:
        v = env.get(var, "")
        if v.isdigit():
            return int(v)
    return None


def venv_digest() -> str:
    """The environment a parked process was started in: the interpreter, its prefix and pyvenv.cfg, and where the
    agpt package is.  A claim from another venv (a restaged one, another toolkit) is refused: its parked process
    imported other code."""
    h = hashlib.sha256()
    h.update(os.path.realpath(sys.executable).encode())
    h.update(os.path.realpath(sys.prefix).encode())
    try:
        h.update((Path(sys.prefix) / "pyvenv.cfg").read_bytes())
    except OSError:
        pass
    h.update(str(Path(__file__).resolve().parents[1]).encode())
    return h.hexdigest()[:16]


def send(sock: socket.socket, msg: dict[str, object], fds: list[int] | None = None) -> None:
    data = (json.dumps(msg) + "\n").encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


def recv(
    sock: socket.socket, buf: bytearray, *, maxfds: int = 0
) -> tuple[dict[str, object] | None, list[int]]:
    """One message (None at end of file) and the descriptors that came with it."""
    fds: list[int] = []
    while b"\n" not in buf:
        if maxfds:
            data, got, _flags, _addr = socket.recv_fds(sock, 65536, maxfds)
            fds.extend(got)
        else:
            data = sock.recv(65536)
        if not data:
            return None, fds
        buf += data
        if len(buf) > MAX_MSG:
            raise ValueError("message too long")
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    msg = json.loads(line)
    if not isinstance(msg, dict):
        raise ValueError("not a JSON object")
    return msg, fds


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])
