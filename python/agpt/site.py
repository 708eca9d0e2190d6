"""Site profiles (`site/NAME/profile.sh`): list, parse, check, resolve and detect them.

A profile is Bash that the job scripts source, so a sysadmin writes it once for both worlds.  But it is
data, never code: here it is parsed, not run (which key is on which line, so `check` can point at a typo
and `show` can say where a value came from), and `show` expands `${HOME}` and friends itself, the way
Bash would.  Anything that could execute when Bash sources the file is refused by `check` and by
`python -m agpt.site PATH`, which lib/env.sh runs before it sources a profile.  Standard library only:
it is used from login nodes and job scripts before any venv exists.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agpt import numeric, rundir, shellword
from agpt.errors import BadInput, ConfigError
from agpt.failover.patterns import DEFAULT_SETS
from agpt.failover.sweep import MODES as SWEEP_MODES
from agpt.rundir import LAUNCH_NAMES

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
    "SITE_HOST_MEM_GIB": (
        False,
        "host memory per node in GiB (0: unknown; agpt check screens the local tier)",
    ),
    "SITE_NODE_MTBF_H": (
        False,
        "a node's mean time between failures in hours (0: 8760; checkpoint intervals)",
    ),
    "SITE_LAUNCHER": (False, "pals | hydra | openmpi | srun"),
    "SITE_LAUNCHER_FLAGS": (True, "extra launcher flags"),
    "SITE_CPU_BIND": (False, "CPU binding for the launcher (empty: its default)"),
    "SITE_MODULES": (True, "environment modules to load, in order"),
    "SITE_ENV": (True, "KEY=VALUE environment for every job"),
    "SITE_LOCAL_DIR": (False, "node-local storage"),
    "SITE_LOCAL_CKPT_DIR": (False, "node-local memory for the local checkpoint tier (empty: /dev/shm)"),
    "SITE_FAILURE_DOMAIN_RE": (
        False,
        "extended regex; its first group names a host's failure domain (empty: none)",
    ),
    "SITE_PYTHON": (False, "interpreter the venv is built from"),
    "SITE_VENV_DIR": (False, "where venvs live (empty: use the current python)"),
    "SITE_STAGE": (False, "yeet | copper | sbcast | none: how the venv reaches every node"),
    "SITE_STAGE_OPTS": (True, "extra words for the staging command (agpt yeet, launch_copper.sh, sbcast)"),
    "SITE_CONTAINER": (
        False,
        "none | apptainer | podman-hpc | shifter | pyxis: how a rank's command is wrapped",
    ),
    "SITE_CONTAINER_OPTS": (True, "extra words for the container runtime (before the image)"),
    "SITE_CONTAINER_MODULES": (True, "modules loaded only when a job runs in an image"),
    "SITE_CKPT_LAYOUT": (
        True,
        "(lustre OPTS...) | (daos OPTS...) | (): layout of a new checkpoint directory",
    ),
    "SITE_SPARES_PERCENT": (False, "spare nodes as a percentage of the job's nodes"),
    "SITE_SPARES_MIN": (False, "at least this many spare nodes"),
    "SITE_FAILOVER_PATTERNS": (True, "failure-pattern sets for the failover classifier"),
    "SITE_SWEEP": (False, "health sweep after an unexplained failure: full | probe | off"),
    "SITE_SWEEP_CHECK": (False, "a per-host health command the sweep's probe runs (empty: none)"),
    "SITE_SWEEP_MOUNTS": (True, "directories every node must have readable (the run dir is always checked)"),
    "SITE_FAILOVER_SHRINK": (
        False,
        "0 | 1: may a job run on fewer nodes when its spares run out (FAILOVER_SHRINK)",
    ),
}
SCHEDULERS = ("pbs", "slurm", "none")
# How the environment reaches the nodes (lib/env.sh env_stage) and how a rank's command is wrapped in an image
# (lib/launch.sh): the values `agpt site check` accepts; tests/python/test_site.py holds lib/ to the same lists.
STAGES = ("yeet", "copper", "sbcast", "none")
CONTAINERS = ("none", "apptainer", "podman-hpc", "shifter", "pyxis")
CKPT_LAYOUTS = ("lustre", "daos")  # the first word of SITE_CKPT_LAYOUT: `lfs setstripe` or `daos fs set-attr`
LAUNCHERS = LAUNCH_NAMES
PATTERN_SETS = DEFAULT_SETS  # the classifier's built-in sets (agpt.failover.patterns)
INT_KEYS = ("SITE_GPUS_PER_NODE", "SITE_RANKS_PER_NODE", "SITE_SPARES_PERCENT", "SITE_SPARES_MIN")

NUM_KEYS = ("SITE_DEVICE_MEM_GIB", "SITE_FS_BW_GBPS", "SITE_HOST_MEM_GIB", "SITE_NODE_MTBF_H")

_ASSIGN_HEAD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
SITE_NAME_RE = re.compile(
    r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
)  # a site name is a folder name and a plain shell word
MAX_NESTING = 16  # ${A:-${B:-...}} levels a value may nest (a deeper one is refused, not recursed into)
# Upper bounds of the whole-number keys (agpt.numeric's): they size launches and spare pools.
INT_MAX = {
    "SITE_GPUS_PER_NODE": numeric.MAX_RANKS_PER_NODE,
    "SITE_RANKS_PER_NODE": numeric.MAX_RANKS_PER_NODE,
    "SITE_SPARES_PERCENT": 100,
    "SITE_SPARES_MIN": numeric.MAX_NODES,
}

Value = str | list[str]


@dataclass(kw_only=True, slots=True)
class Entry:
    """One key as written: its raw (unexpanded) value and the line it starts on."""

    key: str
    value: Value
    line: int
    parts: Any = None  # list[Part] for a single value, list[list[Part]] for an array (see expand)

    @property
    def expands(self) -> bool:
        """Whether the value refers to a variable (then only its shape can be checked statically)."""
        words = self.parts if isinstance(self.value, list) else [self.parts or []]
        return any(p[0] == "var" for w in words or [] for p in w)


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


# -- the profile grammar ------------------------------------------------------------------------
# A profile is read as data, never run: `NAME=WORD` and `NAME=(WORD ...)` with Bash's quoting ('...',
# "...", backslash) and the only expansions a value needs, `$NAME`, `${NAME}` and `${NAME:-WORD}` /
# `${NAME-WORD}` (resolved here from the environment and the keys above them).  Everything that could run
# a command when Bash sources the file is refused with its line: `$(...)`, backticks, `$((...))`, `<(...)`,
# `>(...)`, `$'...'`, other `${...}` forms (`${X@P}` runs `$(...)` held in X), `;`, `&`, `|`, redirections,
# and any line that is not an assignment.  The job scripts source a profile only after this check passed
# (lib/env.sh runs `python -m agpt.site PATH` first), so what `check` calls ok is all Bash will ever see.

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNQUOTED_STOP = set(" \t\n")
_META = set(";&|<>()")
_GLOB = set("*?[{")  # in an array, unquoted: file-name and brace expansion

Part = tuple[
    str, str, "list[Part] | None", bool
]  # ("lit", text, None, False) | ("var", name, default, colon)


class _Refused(Exception):
    """A construct a data profile may not hold: (message, line)."""

    def __init__(self, msg: str, line: int) -> None:
        super().__init__(msg)
        self.line = line


class _Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.depth = 0  # ${NAME:-...} nesting

    @property
    def line(self) -> int:
        return self.s.count("\n", 0, self.i) + 1

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def refuse(self, msg: str) -> _Refused:
        return _Refused(msg, self.line)

    def dollar(self, in_default: bool = False, dq: bool = False) -> Part:
        """At `$`: the expansion, or refuse one that could run something (DQ: inside "...")."""
        nxt = self.peek(1)
        if nxt == "(":
            what = "arithmetic $((...))" if self.peek(2) == "(" else "command substitution $(...)"
            raise self.refuse(f"{what} is not allowed (profiles are data; commands belong in hooks/)")
        if nxt == "'" and not dq:
            raise self.refuse("$'...' quoting is not allowed; use '...' or \"...\"")
        if nxt == '"' and not dq:
            raise self.refuse('$"..." (locale) quoting is not allowed; use "..."')
        if nxt == "{":
            self.i += 2
            m = _NAME.match(self.s, self.i)
            if not m:
                raise self.refuse("only ${NAME}, ${NAME:-default} and ${NAME-default} are allowed")
            name = m.group(0)
            self.i = m.end()
            if self.peek() == "}":
                self.i += 1
                return ("var", name, None, False)
            colon = self.peek() == ":"
            if colon:
                self.i += 1
            if self.peek() != "-":
                raise self.refuse(
                    f"${{{name}...}}: only ${{NAME}}, ${{NAME:-default}} and ${{NAME-default}} are allowed"
                )
            self.i += 1
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise self.refuse(f"${{NAME:-...}} nested more than {MAX_NESTING} deep")
            default = self.word_parts(stop="}", quoted=False, in_default=True, dq=dq)
            self.depth -= 1
            if self.peek() != "}":
                raise self.refuse(f"${{{name}...}} is not closed with '}}'")
            self.i += 1
            return ("var", name, default, colon)
        m = _NAME.match(self.s, self.i + 1)
        if m:
            self.i = m.end()
            return ("var", m.group(0), None, False)
        if nxt and nxt in "0123456789@*#?$!-":
            raise self.refuse(f"${nxt} is not allowed in a profile")
        self.i += 1
        return ("lit", "$", None, False)

    def double_quoted(self, in_default: bool) -> list[Part]:
        """After the opening `"`: parts up to the closing one."""
        parts: list[Part] = []
        buf = ""
        while True:
            ch = self.peek()
            if ch == "":
                raise self.refuse('"..." is not closed')
            if ch == '"':
                self.i += 1
                break
            if ch == "`":
                raise self.refuse("command substitution `...` is not allowed (profiles are data)")
            if ch == "\\":
                nxt = self.peek(1)
                if nxt in '$`"\\':
                    buf += nxt
                    self.i += 2
                elif nxt == "\n":
                    self.i += 2
                else:
                    buf += ch
                    self.i += 1
                continue
            if ch == "$":
                if buf:
                    parts.append(("lit", buf, None, False))
                    buf = ""
                parts.append(self.dollar(in_default, dq=True))
                continue
            if in_default and ch == "}":
                raise self.refuse('"..." inside ${NAME:-...} must close before the }')
            buf += ch
            self.i += 1
        if buf:
            parts.append(("lit", buf, None, False))
        return parts

    def word_parts(
        self, *, stop: str, quoted: bool, in_default: bool = False, array: bool = False, dq: bool = False
    ) -> list[Part]:
        """One word: parts until unquoted whitespace (or STOP).  DQ: a default inside "...", where Bash
        reads quotes and backslashes differently: they are refused there rather than guessed."""
        parts: list[Part] = []
        buf = ""
        start = self.i

        def flush() -> None:
            nonlocal buf
            if buf:
                parts.append(("lit", buf, None, False))
                buf = ""

        while True:
            ch = self.peek()
            if ch == "" or ch in stop or (not in_default and ch in _UNQUOTED_STOP):
                break
            if dq and ch in "'\"\\~":
                raise self.refuse(f'{ch} inside "${{NAME:-...}}" is not allowed; write the default plainly')
            if ch == "'":
                end = self.s.find("'", self.i + 1)
                if end < 0:
                    raise self.refuse("'...' is not closed")
                buf += self.s[self.i + 1 : end]
                self.i = end + 1
            elif ch == '"':
                flush()
                self.i += 1
                parts.extend(self.double_quoted(in_default))
            elif ch == "\\":
                nxt = self.peek(1)
                if nxt == "":
                    raise self.refuse("a lone backslash ends the file")
                if nxt != "\n":
                    buf += nxt
                self.i += 2
            elif ch == "`":
                raise self.refuse("command substitution `...` is not allowed (profiles are data)")
            elif ch == "$":
                if array:
                    raise self.refuse(
                        'quote expansions inside an array ("$NAME"): unquoted ones split into words'
                    )
                flush()
                parts.append(self.dollar(in_default))
            elif ch in _META:
                if ch in "<>" and self.peek(1) == "(":
                    raise self.refuse(f"process substitution {ch}(...) is not allowed (profiles are data)")
                raise self.refuse(
                    f"unquoted '{ch}' is not allowed in a value (quote it; commands belong in hooks/)"
                )
            elif ch == "~":
                nxt = self.peek(1)
                if self.i != start or in_default:
                    raise self.refuse("unquoted '~' here is not allowed; quote it or write ${HOME}")
                if nxt not in ("", "/", " ", "\t", "\n", ")"):
                    raise self.refuse("~user is not allowed; write the path or ${HOME}")
                flush()
                parts.append(("var", "HOME", None, False))
                self.i += 1
            elif array and ch in _GLOB:
                raise self.refuse(f"unquoted '{ch}' in an array would expand (file names, braces); quote it")
            else:
                buf += ch
                self.i += 1
        flush()
        return parts

    def skip_blank(self, newlines: bool) -> None:
        """Spaces (and newlines, comments, line continuations when NEWLINES)."""
        while True:
            ch = self.peek()
            if ch in (" ", "\t"):
                self.i += 1
            elif ch == "\\" and self.peek(1) == "\n":
                self.i += 2
            elif newlines and ch == "\n":
                self.i += 1
            elif ch == "#" and newlines:
                end = self.s.find("\n", self.i)
                self.i = len(self.s) if end < 0 else end
            else:
                return


def _raw(parts: list[Part]) -> str:
    """The value as written, expansions spelled `${NAME}` / `${NAME:-default}` (what `check` reports)."""
    out = ""
    for kind, text, default, colon in parts:
        if kind == "lit":
            out += text
        elif default is None:
            out += "${" + text + "}"
        else:
            out += "${" + text + (":-" if colon else "-") + _raw(default) + "}"
    return out


def expand(parts: list[Part], env: dict[str, str], where: str) -> str:
    """Resolve parts as Bash would under `set -u` (an unset name without a default is an error)."""
    out = ""
    for kind, text, default, colon in parts:
        if kind == "lit":
            out += text
            continue
        val = env.get(text)
        if default is not None and (val is None or (colon and val == "")):
            out += expand(default, env, where)
        elif val is None:
            raise ConfigError(f"{where}: {text} is not set")
        else:
            out += val
    return out


def parse_profile(path: Path) -> Profile:
    """Read a profile as data: every assignment with its line; anything else (or anything that would run
    when sourced) is an error naming its line."""
    prof = Profile(path=path)
    try:
        text = rundir.read_bytes(path, limit=rundir.TEXT_MAX).decode("utf-8")  # never a FIFO, never unbounded
    except (OSError, UnicodeDecodeError) as exc:
        prof.errors.append(f"{path}: cannot read ({exc})")
        return prof
    if "\0" in text:
        prof.errors.append(f"{path}: holds a NUL byte (not a text file)")
        return prof
    lx = _Lexer(text)
    while True:
        lx.skip_blank(newlines=True)
        if lx.i >= len(text):
            break
        lineno = lx.line
        eol = text.find("\n", lx.i)
        eol = len(text) if eol < 0 else eol
        m = _ASSIGN_HEAD.match(text, lx.i)
        if not m:
            prof.errors.append(
                f"{path}:{lineno}: not an assignment (commands belong in hooks/): {text[lx.i : eol].strip()}"
            )
            lx.i = eol
            continue
        key = m.group(1)
        lx.i = m.end()
        value: Value
        parts: Any
        try:
            if lx.peek() == "(":
                lx.i += 1
                words: list[list[Part]] = []
                while True:
                    lx.skip_blank(newlines=True)
                    if lx.peek() == ")":
                        lx.i += 1
                        break
                    if lx.peek() == "":
                        raise _Refused("array is not closed with ')'", lineno)
                    words.append(lx.word_parts(stop=")", quoted=False, array=True))
                value, parts = [_raw(w) for w in words], words
            else:
                parts = lx.word_parts(stop="", quoted=False)
                value = _raw(parts)
            lx.skip_blank(newlines=False)
            if lx.peek() == "#":
                end = text.find("\n", lx.i)
                lx.i = len(text) if end < 0 else end
            elif lx.peek() not in ("", "\n"):
                raise _Refused("several words; quote the value or use (...)", lineno)
        except _Refused as exc:
            prof.errors.append(f"{path}:{exc.line}: {key}: {exc}")
            end = text.find("\n", lx.i)
            lx.i = len(text) if end < 0 else end
            continue
        if key not in KEYS:
            hint = difflib.get_close_matches(key, list(KEYS), n=1)
            why = f" (did you mean {hint[0]}?)" if hint else ""
            prof.errors.append(f"{path}:{lineno}: unknown key {key}{why}")
            continue
        if key in prof.entries:
            prof.errors.append(f"{path}:{lineno}: {key} set twice (first on line {prof.entries[key].line})")
            continue
        prof.entries[key] = Entry(key=key, value=value, line=lineno, parts=parts)
    return prof


def _check_values(prof: Profile) -> None:
    """Type and range checks on the values.  A value that uses `$` is checked as Bash will see it when the job
    sources the profile (expanded here from this environment, as `show` does); every value is one line of
    printable text (agpt.shellword: values reach the job scripts)."""
    p = prof.path
    env = dict(os.environ)
    for key, entry in prof.entries.items():
        is_array = KEYS[key][0]
        where = f"{p}:{entry.line}: {key}"
        if is_array != isinstance(entry.value, list):
            kind = "an array (...)" if is_array else "a single value"
            prof.errors.append(f"{where}: must be {kind}")
            continue
        try:
            if isinstance(entry.value, list):
                v: Value = [expand(w, env, where) for w in entry.parts]
            else:
                v = env[key] = expand(entry.parts, env, where)
            for x in v if isinstance(v, list) else [v]:
                shellword.line(x, where)
        except (ConfigError, BadInput) as exc:
            prof.errors.append(str(exc))
            continue
        problem = _value_problem(key, v, p)
        if problem:
            prof.errors.append(f"{where}: {problem}")


def _value_problem(key: str, v: Value, p: Path) -> str:
    """What is wrong with KEY's (resolved) value V, or ""."""
    if isinstance(v, list):
        if key == "SITE_FAILOVER_PATTERNS":
            bad = [x for x in v if x not in PATTERN_SETS]
            if bad:
                return f"unknown pattern set {bad[0]} (known: {' '.join(PATTERN_SETS)})"
        elif key == "SITE_ENV":
            bad = [x for x in v if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", x)]
            if bad:
                return f"'{bad[0]}' is not KEY=VALUE"
        elif key == "SITE_CKPT_LAYOUT" and v and v[0] not in CKPT_LAYOUTS:
            return f"'{v[0]}' is not one of {' | '.join(CKPT_LAYOUTS)} (the first word says which layout command)"
        return ""
    if key == "SITE_SCHEDULER" and v not in SCHEDULERS:
        return f"'{v}' is not one of {' | '.join(SCHEDULERS)}"
    if key == "SITE_LAUNCHER" and v not in LAUNCHERS:
        return f"'{v}' is not one of {' | '.join(LAUNCHERS)}"
    if key in INT_KEYS:
        if not v.isascii() or not v.isdigit():
            return f"'{v}' is not a whole number >= 0"
        lo = 1 if key == "SITE_RANKS_PER_NODE" else 0
        try:
            numeric.number(v, "value", lo=lo, hi=INT_MAX[key], integer=True)
        except BadInput:
            return f"must be a whole number from {lo} to {INT_MAX[key]}, got '{v}'"
    if key == "SITE_PEAK_TFLOPS" and v and not re.fullmatch(r"[0-9]+(\.[0-9]+)?", v):
        return f"'{v}' is not a number of TFLOPS"
    if key in NUM_KEYS and not re.fullmatch(r"[0-9]+(\.[0-9]+)?", v):
        return f"'{v}' is not a number >= 0"
    if key == "SITE_SWEEP" and v not in SWEEP_MODES:
        return f"'{v}' is not one of {' | '.join(SWEEP_MODES)}"
    if key == "SITE_STAGE" and v not in STAGES:
        return f"'{v}' is not one of {' | '.join(STAGES)}"
    if key == "SITE_CONTAINER" and v not in CONTAINERS:
        return f"'{v}' is not one of {' | '.join(CONTAINERS)}"
    if key == "SITE_FAILOVER_SHRINK" and v not in ("0", "1"):
        return f"'{v}' is not 0 or 1"
    if key in ("SITE_HOSTNAME_RE", "SITE_FAILURE_DOMAIN_RE"):
        try:
            re.compile(v)
        except (re.error, RecursionError) as exc:
            return f"not a regular expression ({exc})"
    if key == "SITE_NAME":
        if not SITE_NAME_RE.fullmatch(v):
            return f"'{v}' is not a site name (letters, digits, '_', '.', '-')"
        if v != p.resolve().parent.name:
            return f"'{v}' differs from the folder name '{p.resolve().parent.name}'"
    return ""


def _check_pairs(prof: Profile) -> None:
    """Keys that only make sense together: sbcast is Slurm's broadcast; pyxis is a plugin of srun."""
    v = resolve_profile(prof.path)
    where = lambda k: f"{prof.path}:{prof.entries[k].line}: {k}"  # noqa: E731
    if v["SITE_STAGE"] == "sbcast" and v["SITE_SCHEDULER"] != "slurm":
        prof.errors.append(
            f"{where('SITE_STAGE')}: sbcast needs SITE_SCHEDULER=slurm (it is Slurm's broadcast)"
        )
    if v["SITE_CONTAINER"] == "pyxis" and v["SITE_LAUNCHER"] != "srun":
        prof.errors.append(
            f"{where('SITE_CONTAINER')}: pyxis needs SITE_LAUNCHER=srun (its flags are srun's)"
        )


def check_profile(path: Path) -> Profile:
    """Parse and check one profile: unknown, missing, duplicate and ill-typed keys, Bash syntax."""
    prof = parse_profile(path)
    if prof.errors and not prof.entries and not path.is_file():
        return prof
    for key in KEYS:
        if key not in prof.entries:
            prof.errors.append(f"{path}: missing key {key} ({KEYS[key][1]})")
    _check_values(prof)
    if not prof.errors:
        _check_pairs(prof)
    syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True)
    if syntax.returncode != 0:
        lines = syntax.stderr.decode("utf-8", "replace").strip().splitlines() or ["(no message)"]
        prof.errors.append(f"{path}: bash syntax: {lines[-1]}")
    return prof


def resolve_profile(path: Path) -> dict[str, Value]:
    """The values a job sees, expanded here as Bash would (under `set -u`), without running anything."""
    prof = parse_profile(path)
    if prof.errors:
        raise ConfigError(prof.errors[0])
    env = dict(os.environ)
    out: dict[str, Value] = {}
    for key, entry in prof.entries.items():
        where = f"{path}:{entry.line}: {key}"
        if isinstance(entry.value, list):
            out[key] = [expand(w, env, where) for w in entry.parts]
        else:
            val = expand(entry.parts, env, where)
            out[key] = env[key] = val
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


def main(argv: list[str] | None = None) -> int:
    """`python -m agpt.site PROFILE`: exit 0 when PROFILE passes `agpt site check` (data only, every key set and
    well typed as this environment resolves it), else one line per problem and exit 2.  lib/env.sh runs this
    before it sources a profile: the gate a job goes through is the check a user runs."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: python -m agpt.site PROFILE\n")
        return 2
    prof = check_profile(Path(args[0]))  # exactly `agpt site check`'s checks
    for err in prof.errors:
        sys.stderr.write(f"agpt site: {err}\n")
    return 2 if prof.errors else 0


if __name__ == "__main__":
    sys.exit(main())
