"""A command on every host, a few at a time: the failover loop's preflight and cleanup hook run through this.

`{host}` in the command becomes each host, shell-quoted (host names enter through agpt.rundir's parser and are
never shell text); a command that fails or outlives its timeout fails that host only, with a one-line reason.
Standard library only.
"""

from __future__ import annotations

import shlex
import subprocess
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def run_each(
    hosts: Sequence[str], command: str, *, timeout: float = 120.0, workers: int = 32
) -> tuple[dict[str, str], dict[str, str]]:
    """Run `command` once per host (`{host}` replaced, shell-quoted), `workers` at a time.

    Returns (outputs, failures): each host's combined output, and for the hosts where the command failed or
    timed out, a one-line reason.
    """
    failed: dict[str, str] = {}
    outputs: dict[str, str] = {}
    lock = threading.Lock()

    def one(host: str) -> None:
        cmd = command.replace("{host}", shlex.quote(host))
        why = ""
        try:
            p = subprocess.run(
                ["bash", "-c", cmd],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                start_new_session=True,
            )
            text = p.stdout.decode(errors="replace")
            if p.returncode != 0:
                last = text.strip().splitlines()[-1] if text.strip() else ""
                why = f"rc={p.returncode}: {last}".rstrip(": ")
        except subprocess.TimeoutExpired as e:
            text = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else ""
            why = f"timed out after {timeout:g} s"
        with lock:
            outputs[host] = text
            if why:
                failed[host] = why

    if hosts:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts)))) as pool:
            list(pool.map(one, hosts))
    return outputs, failed


def write_prefixed(log: Path, hosts: Sequence[str], outputs: dict[str, str], failed: dict[str, str]) -> None:
    """Every host's output in one file, each line `[host] ...`, then its failure reason."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        for h in hosts:
            for line in outputs.get(h, "").splitlines():
                f.write(f"[{h}] {line}\n")
            if h in failed:
                f.write(f"[{h}] {failed[h]}\n")
