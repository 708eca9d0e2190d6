"""Make a staged venv run from where it landed.

A venv hard-codes its own path in three places: the activate scripts (`VIRTUAL_ENV=...`), `pyvenv.cfg`'s
`command` line, and the shebang of every console script in `bin/`.  Python itself finds its prefix from
`pyvenv.cfg` beside `bin/python`, so `DEST/bin/python` works anywhere; the rest must be rewritten or
`DEST/bin/torchrun` would still run the interpreter on the shared filesystem (or fail on a node without it).
The old prefix is read from the venv itself (activate script, else a shebang), so tarballs made by other
tools relocate too.
"""

from __future__ import annotations

import re
from pathlib import Path

from agpt import safewrite

ACTIVATE = ("activate", "activate.csh", "activate.fish", "Activate.ps1", "activate.nu", "activate.bat")
MAX_SHEBANG = 127  # older Linux kernels truncate longer `#!` lines
MAX_SCRIPT = 1 << 20


def is_venv(root: Path) -> bool:
    return (root / "pyvenv.cfg").is_file() and (root / "bin").is_dir()


def old_prefix(root: Path) -> str | None:
    """The path the venv was created at, from its activate script or a console script's shebang."""
    act = root / "bin" / "activate"
    try:
        text = act.read_text(errors="surrogateescape")
    except OSError:
        text = ""
    m = re.search(r"^\s*(?:export\s+)?VIRTUAL_ENV=['\"]?([^'\"\n]+)['\"]?\s*$", text, re.M)
    if m and m.group(1).startswith("/"):
        return m.group(1)
    for script in sorted((root / "bin").iterdir()):
        head = _head(script)
        sm = re.match(rb"#!(/\S+)/bin/python[0-9.]*\s", head)
        if sm:
            return sm.group(1).decode(errors="surrogateescape")
    return None


def _head(path: Path) -> bytes:
    try:
        if path.is_symlink() or not path.is_file():
            return b""
        with open(path, "rb") as f:
            return f.read(512)
    except OSError:
        return b""


def _rewrite(path: Path, old: str, new: str) -> bool:
    data = path.read_bytes()
    pat = re.compile(re.escape(old.encode()) + rb"(?=[/'\"\s:]|$)", re.M)
    new_b = new.encode()
    out = pat.sub(lambda _m: new_b, data)
    if out == data:
        return False
    first, nl, rest = out.partition(b"\n")
    if first.startswith(b"#!") and len(first) > MAX_SHEBANG and b"python" in first:
        interp = first[2:].strip().decode(errors="surrogateescape")
        # pip's trick: sh reads the first two lines and execs the interpreter; Python sees a docstring.
        first = f"#!/bin/sh\n'''exec' \"{interp}\" \"$0\" \"$@\"\n' '''".encode()
        out = first + nl + rest
    with open(path, "r+b") as f:  # in place: keeps the mode bits
        f.write(out)
        f.truncate()
    return True


def relocate(root: Path, new_prefix: str) -> int:
    """Rewrite the venv at ROOT (staged, not yet in place) to live at NEW_PREFIX; return files changed."""
    if not is_venv(root):
        return 0
    old = old_prefix(root)
    if old is None or old == new_prefix:
        return 0
    changed = 0
    bindir = root / "bin"
    for entry in sorted(bindir.iterdir()):
        if entry.is_symlink() or not entry.is_file():
            continue
        if entry.name in ACTIVATE or (
            entry.stat().st_size <= MAX_SCRIPT
            and _head(entry).startswith(b"#!")
            and b"\0" not in _head(entry)
        ):
            changed += _rewrite(entry, old, new_prefix)
    cfg = root / "pyvenv.cfg"
    lines = cfg.read_text().splitlines(keepends=True)
    fixed = [
        line.replace(old, new_prefix) if line.split("=", 1)[0].strip() == "command" else line
        for line in lines
    ]
    if fixed != lines:
        safewrite.replace(cfg, "".join(fixed), sync=False)  # a link at pyvenv.cfg is replaced, not followed
        changed += 1
    return changed
