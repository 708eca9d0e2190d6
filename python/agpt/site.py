"""Site profiles (`site/NAME/profile.sh`): list, parse, check, resolve and detect them.

A profile is Bash that the job scripts source, so a sysadmin writes it once for both worlds.  Here we
read it two ways: statically (which key is on which line, so `check` can point at a typo and `show` can
say where a value came from) and through Bash itself (so `show` prints the value a job would really
see, `${HOME}` expanded).  Standard library only: it is used from login nodes before any venv exists.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from agpt.errors import BadInput, ConfigError
from agpt.failover.patterns import DEFAULT_SETS

ROOT = Path(__file__).resolve().parents[2]

# Every key a profile must set: name -> (is_array, one-line meaning).  site/_template/profile.sh documents
# each one at length; keep the two in step (tests/python/test_site.py checks).
KEYS: dict[str, tuple[bool, str]] = {
    "SITE_NAME": (False, "short name, equal to the folder name"),
    "SITE_DESCRIPTION": (False, "one line for `agpt site list`"),
    "SITE_HOSTNAME_RE": (False, "extended regex on the short or full host name (detection)"),
    "SITE_SCHEDULER": (False, "pbs | slurm | none"),
    "SITE_QUEUE": (False, "PBS queue or Slurm partition (empty: default)"),
    "SITE_ACCOUNT": (False, "allocation to charge (empty: an # EDIT placeholder in job scripts)"),
    "SITE_FILESYSTEMS": (False, "PBS filesystems= / Slurm licenses (empty: none)"),
    "SITE_DIRECTIVES": (True, "extra scheduler directives, one argument string each"),
    "SITE_GPUS_PER_NODE": (False, "accelerators (or GPU tiles) per node"),
    "SITE_RANKS_PER_NODE": (False, "ranks per node"),
    "SITE_PEAK_TFLOPS": (False, "peak dense bf16 TFLOPS of one rank's device, for MFU (empty: no MFU)"),
    "SITE_DEVICE_MEM_GIB": (False, "memory of one rank's device in GiB (0: unknown; agpt check)"),
    "SITE_FS_BW_GBPS": (False, "write bandwidth of the run directory's filesystem in GB/s (0: unknown)"),
    "SITE_LAUNCHER": (False, "pals | hydra | openmpi | srun"),
    "SITE_LAUNCHER_FLAGS": (True, "extra launcher flags"),
    "SITE_CPU_BIND": (False, "CPU binding for the launcher (empty: its default)"),
    "SITE_MODULES": (True, "environment modules to load, in order"),
    "SITE_ENV": (True, "KEY=VALUE environment for every job"),
    "SITE_LOCAL_DIR": (False, "node-local storage"),
    "SITE_PYTHON": (False, "interpreter the venv is built from"),
    "SITE_VENV_DIR": (False, "where venvs live (empty: use the current python)"),
    "SITE_VENV_STAGE": (False, "0 | 1: stage the venv to SITE_LOCAL_DIR with agpt yeet"),
    "SITE_SPARES_PERCENT": (False, "spare nodes as a percentage of the job's nodes"),
    "SITE_SPARES_MIN": (False, "at least this many spare nodes"),
    "SITE_FAILOVER_PATTERNS": (True, "failure-pattern sets for the failover classifier"),
}
SCHEDULERS = ("pbs", "slurm", "none")
LAUNCHERS = ("pals", "hydra", "openmpi", "srun")
PATTERN_SETS = DEFAULT_SETS  # the classifier's built-in sets (agpt.failover.patterns)
INT_KEYS = ("SITE_GPUS_PER_NODE", "SITE_RANKS_PER_NODE", "SITE_SPARES_PERCENT", "SITE_SPARES_MIN")

NUM_KEYS = ("SITE_DEVICE_MEM_GIB", "SITE_FS_BW_GBPS")

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)

Value = str | list[str]


@dataclass(kw_only=True, slots=True)
class Entry:
    """One key as written: its raw (unexpanded) value and the line it starts on."""

    key: str
    value: Value
    line: int


@dataclass(kw_only=True, slots=True)
class Profile:
    """A parsed profile: entries by key, plus every problem found, each `path:line: message`."""

    path: Path
    entries: dict[str, Entry] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def site_dir() -> Path:
    """The folder of site profiles: $AGPT_SITE_DIR (a site's own collection) or the checkout's site/."""
    return Path(os.environ.get("AGPT_SITE_DIR") or ROOT / "site")


def list_sites() -> list[str]:
    """Names of the sites with a profile, sorted; folders starting with `_` (the template) excluded."""
    return sorted(p.parent.name for p in site_dir().glob("*/profile.sh") if not p.parent.name.startswith("_"))


def profile_path(name_or_path: str) -> Path:
    """A site name or a path to a profile -> the profile's path; unknown names list the known ones."""
    if "/" in name_or_path or name_or_path.endswith(".sh"):
        path = Path(name_or_path)
        if not path.is_file():
            raise BadInput(f"{name_or_path}: no such profile")
        return path
    path = site_dir() / name_or_path / "profile.sh"
    if not path.is_file():
        raise BadInput(f"unknown site '{name_or_path}' (known: {', '.join(list_sites())})")
    return path


def _close_quote_scan(text: str) -> int:
    """Index of the `)` that closes an array whose text starts after its `(`, or -1 (quotes respected)."""
    quote = ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "\\":
            i += 1
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            nl = text.find("\n", i)
            if nl < 0:
                return -1
            i = nl
        elif ch == ")":
            return i
        i += 1
    return -1


def parse_profile(path: Path) -> Profile:
    """Read a profile statically: every assignment with its line; anything else is an error."""
    prof = Profile(path=path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        prof.errors.append(f"{path}: cannot read ({exc})")
        return prof
    i = 0
    while i < len(lines):
        lineno = i + 1
        stripped = lines[i].strip()
        i += 1
        if not stripped or stripped.startswith("#"):
            continue
        m = _ASSIGN.match(stripped)
        if not m:
            prof.errors.append(f"{path}:{lineno}: not an assignment (commands belong in hooks/): {stripped}")
            continue
        key, rest = m.group(1), m.group(2)
        value: Value
        if rest.startswith("("):
            body = rest[1:]
            end = _close_quote_scan(body)
            while end < 0 and i < len(lines):
                body += "\n" + lines[i]
                i += 1
                end = _close_quote_scan(body)
            if end < 0:
                prof.errors.append(f"{path}:{lineno}: {key}: array is not closed with ')'")
                continue
            try:
                value = shlex.split(body[:end], comments=True)
            except ValueError as exc:
                prof.errors.append(f"{path}:{lineno}: {key}: {exc}")
                continue
        else:
            try:
                words = shlex.split(rest, comments=True)
            except ValueError as exc:
                prof.errors.append(f"{path}:{lineno}: {key}: {exc}")
                continue
            if len(words) > 1:
                prof.errors.append(f"{path}:{lineno}: {key}: several words; quote the value or use (...)")
                continue
            value = words[0] if words else ""
        if key not in KEYS:
            hint = difflib.get_close_matches(key, list(KEYS), n=1)
            why = f" (did you mean {hint[0]}?)" if hint else ""
            prof.errors.append(f"{path}:{lineno}: unknown key {key}{why}")
            continue
        if key in prof.entries:
            prof.errors.append(f"{path}:{lineno}: {key} set twice (first on line {prof.entries[key].line})")
            continue
        prof.entries[key] = Entry(key=key, value=value, line=lineno)
    return prof


def _check_values(prof: Profile) -> None:
    """Type and range checks on the literal values (values that use `$` are checked only for shape)."""
    p = prof.path
    for key, entry in prof.entries.items():
        is_array = KEYS[key][0]
        where = f"{p}:{entry.line}: {key}"
        if is_array != isinstance(entry.value, list):
            kind = "an array (...)" if is_array else "a single value"
            prof.errors.append(f"{where}: must be {kind}")
            continue
        v = entry.value
        if isinstance(v, list):
            if key == "SITE_FAILOVER_PATTERNS":
                bad = [x for x in v if x not in PATTERN_SETS]
                if bad:
                    prof.errors.append(
                        f"{where}: unknown pattern set {bad[0]} (known: {' '.join(PATTERN_SETS)})"
                    )
            elif key == "SITE_ENV":
                bad = [x for x in v if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", x)]
                if bad:
                    prof.errors.append(f"{where}: '{bad[0]}' is not KEY=VALUE")
            continue
        if "$" in v:
            continue
        if key == "SITE_SCHEDULER" and v not in SCHEDULERS:
            prof.errors.append(f"{where}: '{v}' is not one of {' | '.join(SCHEDULERS)}")
        elif key == "SITE_LAUNCHER" and v not in LAUNCHERS:
            prof.errors.append(f"{where}: '{v}' is not one of {' | '.join(LAUNCHERS)}")
        elif key in INT_KEYS and not v.isdigit():
            prof.errors.append(f"{where}: '{v}' is not a whole number >= 0")
        elif key == "SITE_PEAK_TFLOPS" and v and not re.fullmatch(r"[0-9]+(\.[0-9]+)?", v):
            prof.errors.append(f"{where}: '{v}' is not a number of TFLOPS")
        elif key in NUM_KEYS and not re.fullmatch(r"[0-9]+(\.[0-9]+)?", v):
            prof.errors.append(f"{where}: '{v}' is not a number >= 0")
        elif key == "SITE_VENV_STAGE" and v not in ("0", "1"):
            prof.errors.append(f"{where}: '{v}' is not 0 or 1")
        elif key == "SITE_RANKS_PER_NODE" and v == "0":
            prof.errors.append(f"{where}: must be at least 1")
        elif key == "SITE_HOSTNAME_RE":
            try:
                re.compile(v)
            except re.error as exc:
                prof.errors.append(f"{where}: not a regular expression ({exc})")
        elif key == "SITE_NAME" and v != p.parent.name:
            prof.errors.append(f"{where}: '{v}' differs from the folder name '{p.parent.name}'")


def check_profile(path: Path) -> Profile:
    """Parse and check one profile: unknown, missing, duplicate and ill-typed keys, Bash syntax."""
    prof = parse_profile(path)
    if prof.errors and not prof.entries and not path.is_file():
        return prof
    for key in KEYS:
        if key not in prof.entries:
            prof.errors.append(f"{path}: missing key {key} ({KEYS[key][1]})")
    _check_values(prof)
    syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    if syntax.returncode != 0:
        prof.errors.append(f"{path}: bash syntax: {syntax.stderr.strip().splitlines()[-1]}")
    return prof


_RESOLVE = r"""
set -u
source "$1" >/dev/null
shift
for k in "$@"; do
  if [[ "$(declare -p "$k" 2>/dev/null)" == "declare -a"* ]]; then
    declare -n _a="$k"
    printf 'A\0%s\0%d\0' "$k" "${#_a[@]}"
    ((${#_a[@]})) && printf '%s\0' "${_a[@]}"
    unset -n _a
  else
    printf 'S\0%s\0%s\0' "$k" "${!k-}"
  fi
done
"""


def resolve_profile(path: Path) -> dict[str, Value]:
    """The values a job sees: source the profile in Bash (under `set -u`) and read every key back."""
    proc = subprocess.run(
        ["bash", "-c", _RESOLVE, "resolve", str(path), *KEYS], capture_output=True, timeout=30
    )
    if proc.returncode != 0:
        raise ConfigError(f"{path}: sourcing failed: {proc.stderr.decode(errors='replace').strip()}")
    parts = proc.stdout.split(b"\0")
    out: dict[str, Value] = {}
    i = 0
    while i + 2 < len(parts):
        kind, key = parts[i].decode(), parts[i + 1].decode()
        if kind == "A":
            n = int(parts[i + 2])
            out[key] = [x.decode() for x in parts[i + 3 : i + 3 + n]]
            i += 3 + n
        else:
            out[key] = parts[i + 2].decode()
            i += 3
    return out


def detect(hostnames: list[str] | None = None) -> str:
    """The site for this host: $AGPT_SITE if set (must be known), else the first profile whose
    SITE_HOSTNAME_RE matches the short or full host name; `generic` (matches anything) is tried last."""
    forced = os.environ.get("AGPT_SITE", "")
    known = list_sites()
    if forced:
        if forced not in known:
            raise BadInput(f"AGPT_SITE: unknown site '{forced}' (known: {', '.join(known)})")
        return forced
    if hostnames is None:
        hostnames = [socket.gethostname(), socket.getfqdn()]
    for name in sorted(known, key=lambda n: (n == "generic", n)):
        entry = parse_profile(site_dir() / name / "profile.sh").entries.get("SITE_HOSTNAME_RE")
        if entry is None or not isinstance(entry.value, str):
            continue
        try:
            rx = re.compile(entry.value)
        except re.error:
            continue
        if any(rx.search(h) for h in hostnames if h):
            return name
    raise BadInput(f"no site matches host {hostnames[0]!r} (known: {', '.join(known)}); set AGPT_SITE")


def format_value(value: Value) -> str:
    """A value as Bash would write it back: arrays as `(a 'b c')`."""
    if isinstance(value, list):
        return "(" + " ".join(shlex.quote(x) for x in value) + ")"
    return value


def display_path(path: Path) -> str:
    """A path relative to the working directory when it is under it (what a user typed), else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
