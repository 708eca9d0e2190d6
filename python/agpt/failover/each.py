"""A command on every host, a few at a time: the failover loop's preflight and cleanup hook run through this.

`{host}` in the command becomes each host, passed through agpt.shellword (the one rule for a value in shell
text; host names also pass the host-name rule); a command that fails or outlives its timeout fails that host
only, with a one-line reason, and its whole process group is ended (agpt.proc).  A command without `{host}` runs
once (`run_once`) with `{hosts}`, `{nhosts}` and `{hostfile}` replaced the same way.  Standard library only.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agpt import proc, rundir, safewrite, shellword


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
        cmd = command.replace("{host}", shellword.word(rundir.check_host(host, "{host}"), "{host}"))
        rc, out = proc.run_group(["bash", "-c", cmd], timeout=timeout)
        text = out.decode(errors="replace")
        why = ""
        if rc is None:
            why = f"timed out after {timeout:g} s"
        elif rc != 0:
            last = text.strip().splitlines()[-1] if text.strip() else ""
            why = f"rc={rc}: {last}".rstrip(": ")
        with lock:
            outputs[host] = text
            if why:
                failed[host] = why

    if hosts:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts)))) as pool:
            list(pool.map(one, hosts))
    return outputs, failed


def run_once(hosts: Sequence[str], hostfile: Path, command: str, *, timeout: float = 60.0) -> tuple[int, str]:
    """Run `command` once, `{hosts}` (comma list), `{nhosts}` and `{hostfile}` replaced (agpt.shellword);
    (exit status, or 124 when it timed out; its output)."""
    for h in hosts:
        rundir.check_host(h, str(hostfile))
    cmd = (
        command.replace("{hostfile}", shellword.word(str(hostfile), "{hostfile}"))
        .replace("{hosts}", shellword.word(",".join(hosts), "{hosts}"))
        .replace("{nhosts}", str(len(hosts)))
    )
    rc, out = proc.run_group(["bash", "-c", cmd], timeout=timeout)
    return (124 if rc is None else rc), out.decode(errors="replace")


def run_hook(hosts: Sequence[str], hostfile: Path, command: str, *, timeout: float, workers: int) -> int:
    """`agpt failover hosts each`: COMMAND per host (`{host}`) or once; the output on stdout ([host]-prefixed per
    host), each failure's reason on stderr; 0 when it succeeded everywhere, else 1."""
    if "{host}" not in command:
        rc, text = run_once(hosts, hostfile, command, timeout=timeout)
        sys.stdout.write(text)
        if rc:
            why = f"timed out after {timeout:g} s" if rc == 124 else f"rc={rc}"
            sys.stderr.write(f"failover: hook {why}\n")
        return 1 if rc else 0
    outputs, failed = run_each(hosts, command, timeout=timeout, workers=workers)
    for h in hosts:
        for line in outputs.get(h, "").splitlines():
            print(f"[{h}] {line}")
    for h, why in failed.items():
        sys.stderr.write(f"failover: {h}: {why}\n")
    return 1 if failed else 0


def write_prefixed(log: Path, hosts: Sequence[str], outputs: dict[str, str], failed: dict[str, str]) -> None:
    """Every host's output in one file, each line `[host] ...`, then its failure reason."""
    out: list[str] = []
    for h in hosts:
        out += [f"[{h}] {line}\n" for line in outputs.get(h, "").splitlines()]
        if h in failed:
            out.append(f"[{h}] {failed[h]}\n")
    safewrite.replace(log, "".join(out))
