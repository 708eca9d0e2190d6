"""`python -m agpt.probe`: can this host still train?  The per-host half of the failover loop's health sweep.

When an attempt fails and its log proves no host guilty, the loop (agpt.failover.sweep) launches this once per host,
on every active host at once, and evicts the hosts whose line says FAILED.  Each check is what a dying or broken
node shows first, cheapest first:

  memory      MemAvailable (/proc/meminfo) of at least --min-free-mib
  /dev/shm    free space of at least --min-free-mib, and a small file written and removed (full or read-only tmpfs)
  local dir   the node-local directory (SITE_LOCAL_DIR): the same
  mounts      every --mount (the run directory, the site's required filesystems) is a readable directory, looked at
              in a thread with a deadline (--mount-timeout): a hung mount fails the host at the deadline, and the
              probe prints its line and exits, leaving the stuck look to the kernel (it cannot be cancelled)
  driver      with --gpus N > 0: a device node of some accelerator driver (/dev/nvidia*, /dev/dri/renderD*, /dev/kfd)
  device      in a child process (a driver that crashes it fails this host only): every visible accelerator (or
              the CPU) computes, and a one-rank process group of the collective backend initialises and all-reduces,
              as agpt.preflight does (so it is torch that is imported here, not on the recovery path)
  site check  --check CMD, the site's own per-host health command (SITE_SWEEP_CHECK), run with `bash -c`; exit 126
              or 127 (not executable, not found) is a configuration error of the site, never a failure of the host

It prints `agpt-probe: HOST up` as soon as it starts (a sign of life: the sweep ends early when every host that
showed one has answered and the others stayed silent, agpt.failover.sweep), then one verdict line, and exits 0
whatever it found, so a launcher that kills a step on a non-zero exit never cuts the other hosts' probes short:
  agpt-probe: HOST ok: mem 180 GiB free, /dev/shm 90 GiB, /tmp 3.1 TiB, 2 mounts, cuda x4 nccl
  agpt-probe: HOST FAILED: /dev/shm: 12 MiB free, less than 1024 MiB
  agpt-probe: HOST config: SITE_SWEEP_CHECK: /opt/nhc/nhc: not found (exit 127)
HOST is what agpt.heartbeat.writer.host_name says (SLURMD_NODENAME under srun, else the short host name).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from agpt import numeric
from agpt.errors import BadInput
from agpt.heartbeat.writer import host_name

PREFIX = "agpt-probe:"
MIB = 1 << 20
DRIVER_NODES = ("/dev/nvidia[0-9]*", "/dev/dri/renderD*", "/dev/kfd")
WRITE_TEST_BYTES = 1 << 20


class Failed(Exception):
    """A check that failed: its message is the host's evidence."""


class Config(Exception):
    """A configuration error of the site (a check command that cannot run), not a fault of this host."""


def mem_available_mib(meminfo: str = "/proc/meminfo") -> float | None:
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(min_free_mib: float) -> str:
    free = mem_available_mib()
    if free is None:
        return "mem ?"
    if free < min_free_mib:
        raise Failed(f"memory: {free:.0f} MiB available, less than {min_free_mib:g} MiB")
    return f"mem {free / 1024:.0f} GiB free"


def check_dir(path: str, min_free_mib: float, what: str) -> str:
    """Free space, and a small file written, synced and removed: a full or read-only filesystem fails here."""
    p = Path(path)
    if not p.is_dir():
        raise Failed(f"{what} {path}: not a directory on this host")
    try:
        st = os.statvfs(p)
    except OSError as e:
        raise Failed(f"{what} {path}: {e.strerror or e}") from None
    free = st.f_bavail * st.f_frsize / MIB
    if free < min_free_mib:
        raise Failed(f"{what} {path}: {free:.0f} MiB free, less than {min_free_mib:g} MiB")
    try:
        with tempfile.NamedTemporaryFile(dir=p, prefix=".agpt-probe.", delete=True) as f:
            f.write(b"\0" * min(WRITE_TEST_BYTES, int(free * MIB) or 1))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise Failed(f"{what} {path}: cannot write: {e.strerror or e}") from None
    return f"{path} {free / 1024:.1f} GiB"


# Looks at a hung mount still blocked in the kernel: `main` does not wait on them.
_STUCK: list[threading.Thread] = []


def check_mounts(paths: Sequence[str], timeout: float) -> str:
    """Every path a readable directory whose listing comes back within TIMEOUT seconds, all of them together.

    The look runs in a daemon thread: a hung filesystem (a Lustre or NFS server that stopped answering) blocks
    stat() and readdir() in the kernel, where no signal cancels them, so the probe does not wait for it: it
    fails the host at the deadline, names the mount, and `main` exits without joining the stuck thread."""
    done: list[str] = []
    bad: list[str] = []

    def look() -> None:
        for m in paths:
            if not os.path.isdir(m) or not os.access(m, os.R_OK | os.X_OK):
                bad.append(m)
                return
            with contextlib.suppress(OSError):
                os.listdir(m)  # a stale or hung mount stops here
            done.append(m)

    t = threading.Thread(target=look, name="agpt-probe-mounts", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        _STUCK.append(t)
        raise Failed(f"mount {paths[len(done)]}: no answer within {timeout:g} s (the filesystem hangs)")
    if bad:
        raise Failed(f"mount {bad[0]}: not a readable directory on this host")
    return f"{len(paths)} mount(s)"


def check_driver(gpus: int) -> str:
    if gpus <= 0:
        return ""
    found = [n for pat in DRIVER_NODES for n in glob.glob(pat)]
    if not found:
        raise Failed(
            f"driver: no accelerator device node ({', '.join(DRIVER_NODES)}) for {gpus} GPU(s): driver not loaded"
        )
    return f"{len(found)} device node(s)"


def _bounded(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """CMD run in a session of its own, its output captured; at TIMEOUT the whole session is killed (what it
    started too: a child left running would hold the pipes open and the probe past its timeout), then
    TimeoutExpired."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:  # a process that left the session may still hold a pipe: not waited on
            proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def check_device(timeout: float, device: str) -> str:
    """Every accelerator computes and the backend initialises, in a child: a crash there fails only this check."""
    cmd = [sys.executable, "-m", "agpt.probe", "--device-init", "--device", device]
    try:
        p = _bounded(cmd, timeout)
    except subprocess.TimeoutExpired:
        raise Failed(f"device: initialisation did not finish within {timeout:g} s") from None
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    if p.returncode != 0:
        why = next(
            (ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else ""
        )
        raise Failed(f"device: exit {p.returncode}: {why.strip()}"[:300])
    return lines[-1].strip() if lines else "device ok"


def check_site(command: str, timeout: float) -> str:
    if not command.strip():
        return ""
    try:
        p = _bounded(["bash", "-c", command], timeout)
    except subprocess.TimeoutExpired:
        raise Failed(f"site check did not finish within {timeout:g} s: {command}") from None
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    last = lines[-1].strip() if lines else ""
    if p.returncode in (126, 127):
        raise Config(f"SITE_SWEEP_CHECK: {last or command} (exit {p.returncode}: cannot run)"[:300])
    if p.returncode != 0:
        raise Failed(f"site check exit {p.returncode}: {last}"[:300])
    return "site check ok"


def probe(args: argparse.Namespace) -> tuple[str, str]:
    """(verdict, line): `ok`, `FAILED` or `config`, and what to print after it."""
    done: list[str] = []
    try:
        done.append(check_memory(args.min_free_mib))
        done.append(check_dir(args.shm_dir, args.min_free_mib, "/dev/shm"))
        if args.local_dir and os.path.realpath(args.local_dir) != os.path.realpath(args.shm_dir):
            done.append(check_dir(args.local_dir, args.min_free_mib, "local dir"))
        done.append(check_mounts(args.mount, args.mount_timeout))
        done.append(check_driver(args.gpus))
        if not args.no_device:
            done.append(check_device(args.device_timeout, args.device))
        done.append(check_site(args.check, args.check_timeout))
    except Failed as e:
        return "FAILED", str(e)
    except Config as e:
        return "config", str(e)
    return "ok", ", ".join(d for d in done if d)


def device_init(kind: str) -> int:
    """The child: compute on every visible device, then a one-rank process group of the backend and an allreduce."""
    import datetime
    import socket

    import torch
    import torch.distributed as dist

    from agpt.train import dist as tdist

    device, backend = tdist.pick_device(kind, 0)
    n = torch.accelerator.device_count() if not device.startswith("cpu") else 1
    for i in range(n):
        d = device if device.startswith("cpu") else f"{device.split(':')[0]}:{i}"
        x = torch.full((256, 256), 1.0, device=d)
        if float((x @ x).sum().item()) != 256.0**3:
            print(f"device {d}: wrong result", flush=True)
            return 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=0,
        world_size=1,
        timeout=datetime.timedelta(seconds=60),
        device_id=None if device.startswith("cpu") else torch.device(device),
    )
    t = torch.ones(1024, device=device)
    dist.all_reduce(t)
    dist.destroy_process_group()
    print(f"{device.split(':')[0]} x{n} {backend}", flush=True)
    return 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m agpt.probe", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--min-free-mib",
        type=numeric.flag("--min-free-mib", lo=0, hi=2**40),
        default=1024.0,
        help="memory, /dev/shm and local dir floor",
    )
    ap.add_argument("--shm-dir", default="/dev/shm")
    ap.add_argument("--local-dir", default=os.environ.get("SITE_LOCAL_DIR", ""), help="node-local directory")
    ap.add_argument("--mount", action="append", default=[], help="a directory that must be readable (repeat)")
    ap.add_argument(
        "--mount-timeout",
        type=numeric.flag("--mount-timeout", lo=0, hi=numeric.MAX_SECONDS),
        default=90.0,
        help="seconds the mounts' look may take, all of them together: past it the filesystem hangs",
    )
    ap.add_argument(
        "--gpus",
        type=numeric.flag("--gpus", lo=0, hi=numeric.MAX_RANKS_PER_NODE, integer=True),
        default=0,
        help="accelerators expected (0: no driver check)",
    )
    ap.add_argument("--device", default=os.environ.get("AGPT_PREFLIGHT_DEVICE", "auto"))
    ap.add_argument(
        "--device-timeout", type=numeric.flag("--device-timeout", lo=0, hi=numeric.MAX_SECONDS), default=90.0
    )
    ap.add_argument("--no-device", action="store_true", help="skip the device and backend initialisation")
    ap.add_argument("--check", default="", help="the site's own per-host health command (bash -c)")
    ap.add_argument(
        "--check-timeout", type=numeric.flag("--check-timeout", lo=0, hi=numeric.MAX_SECONDS), default=60.0
    )
    ap.add_argument("--device-init", action="store_true", help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except BadInput as e:  # a number flag agpt.numeric refused: one line naming it
        print(f"agpt probe: {e}", file=sys.stderr)
        return 2
    if args.device_init:
        try:
            return device_init(args.device)
        except Exception as e:  # the parent reads this line as the evidence
            print(
                f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}", flush=True
            )
            return 1
    t0 = time.monotonic()
    print(f"{PREFIX} {host_name()} up", flush=True)
    verdict, line = probe(args)
    took = time.monotonic() - t0
    print(f"{PREFIX} {host_name()} {verdict}: {line} ({took:.1f} s)"[:600], flush=True)
    if _STUCK:  # a thread blocked on a hung mount would hold the interpreter's exit: the answer is out, go
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
