"""`agpt preflight HOST`: can HOST train?  Start its ranks with the site's launcher, bring up each rank's
device and collective backend, run a small allreduce; seconds per host, before the first attempt.

A node that is up for the scheduler can still be unable to train: a GPU missing or stuck, a driver or
fabric library that fails to initialise, a broken network interface.  Found at the first attempt, such a
node costs an attempt (a startup timeout, a relaunch); found here, it costs seconds.  The failover loop
runs `FAILOVER_PREFLIGHT='agpt preflight {host}'` on every host, spares included, and evicts the hosts
where it fails into hosts/bad with the failing line as evidence (`agpt failover hosts preflight`).

Two modes:
- `agpt preflight HOST`: the host check (standard library only: it runs in the recovery path).  Writes a
  one-host host file, runs `agpt launch PROGRAM` on it (ranks per node, launcher and flags from the site
  profile and LAUNCH_*), and ends with one summary line: `preflight: HOST ok (N ranks)` or
  `preflight: HOST FAILED (rc R): <the first failing rank's line>`.
- `python -m agpt.preflight --rank`: what each rank runs (torch imported here only).
- `python -m agpt.preflight --node`: what the host needs before its ranks start, from the site profile and the job
  (standard library only; launched on the host itself, one rank, never in the image): the container image readable
  (a path, with SITE_CONTAINER and AGPT_CONTAINER_IMAGE set), Copper's FUSE view mounted (SITE_STAGE=copper once
  env_stage started it), the checkpoint directory's layout there (SITE_CKPT_LAYOUT: `lfs getstripe -d` /
  `daos fs get-attr`).  Host mode runs it first when any applies; a failure is the host's verdict.

Settings: AGPT_PREFLIGHT_PROGRAM (the per-rank program, shell words; default
`$AGPT_PYTHON -m agpt.preflight --rank`: a site can put its own burn-in test here), AGPT_PREFLIGHT_DEVICE
(auto | cpu | cuda | xpu ...; default: the config's train.device rule, auto), AGPT_PREFLIGHT_INIT_TIMEOUT_S
(backend initialisation and allreduce timeout, default 60).
"""

from __future__ import annotations

import argparse
import getpass
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from agpt import numeric, proc, rundir
from agpt.errors import BadInput

ROOT = Path(__file__).resolve().parents[2]
ELEMENTS = 1 << 16  # 256 KiB of fp32: small, but past the inline/eager thresholds of most collectives


def rank_check() -> int:
    """One rank: device, process group, allreduce of (rank + 1) checked against the closed form."""
    host = socket.gethostname()
    rank = "?"
    try:
        from agpt.train import dist as tdist

        info = tdist.detect()
        rank = f"{info.rank}/{info.world_size}"
        device, backend = tdist.pick_device(os.environ.get("AGPT_PREFLIGHT_DEVICE", "auto"), info.local_rank)
        t0 = time.monotonic()
        init_s = numeric.env_number(
            os.environ, "AGPT_PREFLIGHT_INIT_TIMEOUT_S", 60, lo=1, hi=86400, integer=True
        )
        tdist.init(info, backend, device, init_s)
        import torch
        import torch.distributed as dist

        x = torch.full((ELEMENTS,), float(info.rank + 1), device=device)
        dist.all_reduce(x)
        want = info.world_size * (info.world_size + 1) / 2
        got = float(x[0].item())
        ms = (time.monotonic() - t0) * 1000
        if got != want or float(x[-1].item()) != want:
            print(
                f"preflight: rank {rank} on {host} FAILED: allreduce gave {got}, expected {want}", flush=True
            )
            tdist.finish()
            os._exit(1)
        print(f"preflight: rank {rank} on {host} ok: {device} {backend}, allreduce {ms:.0f} ms", flush=True)
        tdist.finish()
    except Exception as exc:  # any failure here is the evidence: one line, then a non-zero exit
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"preflight: rank {rank} on {host} FAILED: {type(exc).__name__}: {first}"[:400], flush=True)
        os._exit(1)
    os._exit(0)


def program() -> list[str]:
    raw = os.environ.get("AGPT_PREFLIGHT_PROGRAM", "")
    if raw.strip():
        return shlex.split(raw)
    if os.environ.get("AGPT_CONTAINER_IMAGE"):
        # In an image the host's interpreter path means nothing: bin/agpt runs the one lib/launch.sh names there.
        return [str(ROOT / "bin" / "agpt"), "--run-module", "agpt.preflight", "--rank"]
    py = os.environ.get("AGPT_PYTHON") or sys.executable
    return [py, "-m", "agpt.preflight", "--rank"]


def _profile(environ: Mapping[str, str]) -> dict[str, object]:
    """The job's site profile as the job resolves it ({} when no site is named: nothing to check)."""
    from agpt import site

    name = environ.get("AGPT_SITE", "")
    if not name:
        return {}
    return dict(site.resolve_profile(site.profile_path(name)))


def node_needs(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """What this job needs of each host before its ranks start: (what, argument) pairs for `--node`."""
    prof = _profile(environ)
    needs: list[tuple[str, str]] = []
    image = environ.get("AGPT_CONTAINER_IMAGE", "")
    if image and prof.get("SITE_CONTAINER", "none") != "none" and image.startswith(("/", "./", "../")):
        # A path: a registry reference (docker:..., nvcr.io#...) is the runtime's to pull.
        needs.append(("image", image))
    if environ.get("AGPT_STAGED") == "copper":
        user = environ.get("USER") or getpass.getuser()
        needs.append(("fuse", f"{prof.get('SITE_LOCAL_DIR') or '/tmp'}/{user}/copper_mount"))
    layout = prof.get("SITE_CKPT_LAYOUT") or []
    run_dir = environ.get("AGPT_RUN_DIR", "")
    if isinstance(layout, list) and layout and run_dir:
        needs.append((str(layout[0]), str(Path(run_dir) / rundir.CKPT)))
    return needs


def _fuse_mounted(path: str) -> bool:
    want = os.path.realpath(path)
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        parts = line.split()
        if len(parts) > 2 and parts[1].replace("\\040", " ") == want and "fuse" in parts[2]:
            return True
    return False


def node_problems(needs: list[tuple[str, str]], environ: Mapping[str, str]) -> list[str]:
    """What is wrong on this host, one line each ("" checks nothing)."""
    out = []
    for what, arg in needs:
        if what == "image":
            if not os.path.exists(arg):
                out.append(f"container image {arg}: does not exist here (job.container_image)")
            elif not os.access(arg, os.R_OK):
                out.append(f"container image {arg}: not readable here (job.container_image)")
        elif what == "fuse" and not _fuse_mounted(arg):
            out.append(f"Copper's FUSE view {arg} is not mounted (SITE_STAGE=copper: launch_copper.sh)")
        elif what in ("lustre", "daos"):
            cmd = ([environ.get("ENV_LFS") or "lfs", "getstripe", "-d", arg] if what == "lustre" else
                   [environ.get("ENV_DAOS") or "daos", "fs", "get-attr", f"--path={arg}"])  # fmt: skip
            try:
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
                ok, why = (
                    res.returncode == 0 and bool(res.stdout.strip()),
                    (res.stderr.strip() or "no layout"),
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                ok, why = False, str(exc)
            if not ok:
                out.append(f"checkpoint layout of {arg} not found: {' '.join(cmd[:2])}: {why.splitlines()[-1]} "
                           "(SITE_CKPT_LAYOUT)")  # fmt: skip
    return out


def node_check() -> int:
    """`--node`: this host's needs, one line: `preflight: node HOST ok: ...` or `... FAILED: ...`."""
    host = socket.gethostname()
    needs = node_needs(os.environ)
    bad = node_problems(needs, os.environ)
    if bad:
        print(f"preflight: node {host} FAILED: {'; '.join(bad)}"[:500], flush=True)
        return 1
    print(
        f"preflight: node {host} ok: {', '.join(f'{w} {a}' for w, a in needs) or 'nothing to check'}",
        flush=True,
    )
    return 0


def host_check(host: str, *, timeout: float = 0.0) -> int:
    """Launch the per-rank program on HOST alone; print its output and a one-line verdict last."""
    launch = str(ROOT / "bin" / "agpt-launch")
    node_out = ""
    with tempfile.TemporaryDirectory(prefix="agpt-preflight.") as tmp:
        hostfile = Path(tmp) / "host"
        hostfile.write_text(host + "\n")
        env = dict(os.environ, FAILOVER_HOSTFILE=str(hostfile))
        env["PYTHONPATH"] = str(ROOT / "python") + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
        )
        if node_needs(os.environ):  # on the host, one rank, never in the image (LAUNCH_BARE)
            py = os.environ.get("AGPT_PYTHON") or sys.executable
            node_env = dict(env, LAUNCH_BARE="1", LAUNCH_PPN="1")
            status, raw = proc.run_group(
                [launch, py, "-m", "agpt.preflight", "--node"], timeout=timeout, env=node_env
            )
            node_out, rc = raw.decode(errors="replace"), 124 if status is None else status
            if rc != 0 or "FAILED" in node_out:
                return _verdict(host, node_out.splitlines(), rc or 1, timeout)
        # Its own process group, ended whole at the timeout: the launcher's ranks too, not only the launcher.
        status, raw = proc.run_group([launch, *program()], timeout=timeout, env=env)
        out, rc = node_out + raw.decode(errors="replace"), 124 if status is None else status
    return _verdict(host, out.splitlines(), rc, timeout)


def _verdict(host: str, lines: list[str], rc: int, timeout: float) -> int:
    """Print the launches' lines, then the one-line verdict; returns the host's exit status."""
    for line in lines:
        print(line)
    oks = sum(1 for ln in lines if "preflight: rank" in ln and " ok: " in ln)
    failed = [ln for ln in lines if "FAILED" in ln]
    if rc == 0 and not failed:
        print(f"preflight: {host} ok ({oks} rank{'s' * (oks != 1)})", flush=True)
        return 0
    why = failed[0] if failed else (lines[-1] if lines else "no output")
    if rc == 124:
        why = f"timed out after {timeout:g} s; last: {why}"
    print(f"preflight: {host} FAILED (rc {rc}): {why.strip()}"[:500], flush=True)
    return rc or 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line naming the problem, exit 2 (argparse would print the usage block too)."""
        self.exit(2, f"agpt preflight: error: {message} (see agpt preflight --help)\n")


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(
        prog="agpt preflight",
        description="Start HOST's ranks with the site launcher, initialise each rank's device and collective "
        "backend, run a small allreduce. Exit 0 when every rank passed; else non-zero with the failing "
        "line last.",
    )
    ap.add_argument("host", nargs="?", help="the host to check")
    ap.add_argument("--rank", action="store_true", help="run as one rank (what the launcher starts)")
    ap.add_argument("--node", action="store_true", help="check this host's needs (image, FUSE view, layout)")
    ap.add_argument(
        "--timeout",
        type=numeric.flag("--timeout", lo=0, hi=numeric.MAX_SECONDS, unit="seconds"),
        default=0.0,
        help="seconds for the whole host check (0: none)",
    )
    try:
        args = ap.parse_args(argv)
        if args.host is not None:
            rundir.check_host(args.host, "HOST")
    except BadInput as e:
        print(f"agpt preflight: error: {e}", file=sys.stderr)
        return e.exit_code
    if args.rank:
        return rank_check()
    if args.node:
        return node_check()
    if not args.host:
        print("agpt preflight: HOST is required (or --rank)", file=sys.stderr)
        return 2
    proc.end_all_on_signals()  # killed during the check: the launch's group ends too, the temporary host file goes
    return host_check(args.host, timeout=args.timeout)


if __name__ == "__main__":
    sys.exit(main())
