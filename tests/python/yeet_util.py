"""Helpers for the yeet tests: small sources, a real venv, a fake ssh, and how to run the command."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from conftest import ROOT, VENV_BIN, agpt_env

MPIEXEC = VENV_BIN / "mpiexec"

FAKE_SSH = r"""#!/usr/bin/env bash
# A stand-in for ssh (no other hosts exist here): runs the remote command locally in a per-host
# directory, with AGPT_YEET_HOST set to the host, and records every call as HOST<TAB>COMMAND.
while [[ "${1:-}" == -* ]]; do case "$1" in -o|-p|-i|-l|-F) shift 2 ;; *) shift ;; esac; done
host="$1"
shift
printf '%s\t%s\n' "$host" "$*" >> "${FAKE_SSH_LOG:?}"
if [[ " ${FAKE_SSH_HANG:-} " == *" $host "* ]]; then
  exec sleep 600
fi
if [[ " ${FAKE_SSH_DOWN:-} " == *" $host "* ]]; then
  echo "ssh: connect to host $host port 22: Connection refused" >&2
  exit 255
fi
mkdir -p "${FAKE_SSH_ROOT:?}/$host"
cd "$FAKE_SSH_ROOT/$host" || exit 255
export AGPT_YEET_HOST="$host"
exec bash -c "$*"
"""


def make_data(root: Path, *, big: int = 600_000) -> Path:
    """A small data-set-like tree: a binary blob, text, a nested dir, an internal symlink, an empty dir."""
    root.mkdir(parents=True)
    (root / "shards").mkdir()
    (root / "shards" / "a.bin").write_bytes(os.urandom(big))
    (root / "shards" / "b.idx").write_bytes(bytes(range(256)) * 64)
    (root / "manifest.json").write_text('{"shards": 2}\n')
    (root / "empty").mkdir()
    (root / "latest").symlink_to("shards/a.bin")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    return root


def make_venv(root: Path) -> Path:
    """A real venv (no pip) with a package and a console script whose shebang names the venv's python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    (site / "hello").mkdir()
    (site / "hello" / "__init__.py").write_text(
        "import sys\n\ndef main():\n    print('hello from', sys.prefix)\n    return 0\n"
    )
    script = root / "bin" / "hello"
    script.write_text(f"#!{root}/bin/python\nimport sys\nfrom hello import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return root


def tree(root: Path) -> dict[str, tuple[str, bytes]]:
    """A tree's content for comparison: relative path -> (kind, bytes or link target); yeet's own marker
    (`.yeet-dest`, written into every tree it swaps in) is left out."""
    out: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            if dirpath == str(root) and name == ".yeet-dest":
                continue
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p).encode())
            elif p.is_dir():
                out[rel] = ("dir", b"")
            else:
                out[rel] = (f"file{p.stat().st_mode & 0o777:o}", p.read_bytes())
    return out


def yeet(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`agpt yeet ARGS` on this node (no launcher)."""
    return subprocess.run(
        [str(ROOT / "bin" / "agpt"), "yeet", *args],
        env=agpt_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def mpiyeet(
    n: int,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    hosts: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`mpiexec -n N agpt yeet ARGS` (real MPI, N local ranks); HOSTS names each rank via AGPT_YEET_HOST."""
    cmd = [str(ROOT / "bin" / "agpt"), "yeet", *args]
    argv: list[str] = [str(MPIEXEC)]
    if hosts:
        for i, h in enumerate(hosts):
            if i:
                argv.append(":")
            argv += ["-n", "1", "-env", "AGPT_YEET_HOST", h, *cmd]
    else:
        argv += ["-n", str(n), *cmd]
    return subprocess.run(argv, env=agpt_env(env), capture_output=True, text=True, timeout=timeout)


def fake_ssh(tmp: Path) -> dict[str, str]:
    """Install the fake ssh in TMP/bin; return the environment that puts it first on PATH."""
    bindir = tmp / "fakebin"
    bindir.mkdir()
    (bindir / "ssh").write_text(FAKE_SSH)
    (bindir / "ssh").chmod(0o755)
    env = agpt_env()
    return {
        "PATH": f"{bindir}:{env['PATH']}",
        "FAKE_SSH_LOG": str(tmp / "ssh.log"),
        "FAKE_SSH_ROOT": str(tmp / "hosts"),
    }


def evil_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    """A plain tarball holding exactly MEMBERS (crafted entries that a safe extractor must refuse)."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tf.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def entry(
    name: str, kind: bytes = tarfile.REGTYPE, link: str = "", data: bytes = b"x\n"
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info, data
