"""`agpt warm claim -- agpt train ...`: what the launcher starts for a rank when warm ranks are on.

Hands the rank's assignment (environment, working directory, argv, process start) and its stdin/stdout/stderr to
the parked process of its slot on this node, forwards the signals a launcher sends, and exits with the rank's exit
code.  Any refusal (no parked process, another venv, a rank already held, ...) is printed with its reason and the
command is executed as it would have been without warm ranks.  Standard library only: it starts in milliseconds.
"""

from __future__ import annotations

import os
import signal
import socket
import sys

from agpt import nodelocal
from agpt.warm import common

REPLY_S = 10.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def claim(cmd: list[str]) -> int:
    """Run CMD on a parked process, else exec it; the rank's exit code."""
    if not cmd:
        print("agpt warm claim: error: no command after '--'", file=sys.stderr)
        return 2
    env = dict(os.environ)
    host = nodelocal.host_name(env)
    slot = common.slot_of(env)
    run_dir = env.get("AGPT_RUN_DIR", "")
    if slot is None or not run_dir:
        return _cold(cmd, "no local rank or AGPT_RUN_DIR in the environment")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(common.address(run_dir, host, slot))
    except OSError:
        return _cold(cmd, f"no parked process for slot {slot} on {host}")
    from agpt.train.clock import process_start  # standard library only

    msg = {"protocol": common.PROTOCOL, "digest": common.venv_digest(), "argv": cmd, "env": env,
           "cwd": os.getcwd(), "started": process_start()}  # fmt: skip
    buf = bytearray()
    try:
        common.send(sock, msg, [0, 1, 2])
        sock.settimeout(REPLY_S)
        reply, _ = common.recv(sock, buf)
        sock.settimeout(None)
    except (OSError, ValueError) as e:
        return _cold(cmd, f"slot {slot} on {host} did not answer ({e})")
    if not reply or not reply.get("ok"):
        return _cold(cmd, f"slot {slot} on {host} refused: {(reply or {}).get('reason', 'no answer')}")
    pid = int(str(reply.get("pid") or 0))
    for num in FORWARDED:
        signal.signal(num, lambda s, f: _forward(pid, s))
    try:
        while True:
            out, _ = common.recv(sock, buf)
            if out is None:
                return 128 + signal.SIGKILL  # it died without a word: killed
            if "exit" in out:
                return int(out["exit"])  # type: ignore[call-overload]
    except (OSError, ValueError):
        return 128 + signal.SIGKILL


def _forward(pid: int, num: int) -> None:
    try:
        os.kill(pid, num)
    except OSError:
        pass


def _cold(cmd: list[str], why: str) -> int:
    """The normal launch: say why, then become CMD."""
    print(f"agpt warm: {why}: normal launch", file=sys.stderr, flush=True)
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        print(f"agpt warm claim: error: {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127
    return 127  # not reached
