"""The `job:` section of a run config, checked and flattened to shell assignments for `agpt jobgen`.

`agpt jobgen` is Bash (lib/jobgen.sh): sysadmins read it.  YAML is not something Bash should parse, so this
module reads the config, validates the `job:` keys (each bad one is exit 2 naming `FILE: job.KEY`) and
prints `JOB_*=...` lines that jobgen evals.  It needs PyYAML, which the login node's venv has (jobgen runs
where jobs are submitted, not on the recovery path); without it, it says so and exits 2.

Usage: python -m agpt.jobconf CONFIG.yaml
"""

from __future__ import annotations

import difflib
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agpt import numeric, shellword
from agpt.errors import BadInput, ConfigError
from agpt.rundir import LAUNCH_NAMES

# key -> one-line meaning (shown by `agpt jobgen --keys`).
KEYS: dict[str, str] = {
    "name": "job name (default: the config file's stem)",
    "nodes": "nodes that train (> 0)",
    "spares": "spare nodes on top (>= 0; default: the site's SITE_SPARES_PERCENT / SITE_SPARES_MIN)",
    "walltime": "per job: HH:MM:SS, D-HH:MM:SS, D+HH:MM:SS or whole minutes",
    "queue": "PBS queue / Slurm partition (default: SITE_QUEUE)",
    "account": "allocation (default: SITE_ACCOUNT; empty: an EDIT placeholder)",
    "filesystems": "PBS filesystems / Slurm licenses (default: SITE_FILESYSTEMS)",
    "directives": "extra scheduler directives, a list of argument strings",
    "run_dir": "the run directory, relative to the submit directory or absolute (default: runs/STEM)",
    "command": "what to run (string or list); {config} and {run_dir} are replaced (default: agpt train)",
    "launch": "true: run the command through the site launcher on the active hosts (default true)",
    "launcher": "override SITE_LAUNCHER (pals, hydra, openmpi, srun)",
    "ranks_per_node": "override SITE_RANKS_PER_NODE (> 0)",
    "failover": "true: run under the failover loop (default true); false: the command's exit code is the verdict",
    "chain": "true: resubmit until done (default true)",
    "max_jobs": "CHAIN_MAX_JOBS (default 50)",
    "max_no_progress": "CHAIN_MAX_NO_PROGRESS (default 2)",
    "setup_env": "true: load modules and the venv from the site profile (default true)",
    "env": "extra environment for the job, a mapping KEY: VALUE",
    "container_image": "run every rank in this image with the site's SITE_CONTAINER runtime (default: none)",
}
LAUNCHERS = LAUNCH_NAMES
DEFAULT_COMMAND = ["agpt", "train", "--config", "{config}", "--run-dir", "{run_dir}"]
_WALL = re.compile(r"^(?:(\d+)[-+])?(\d+):(\d{1,2}):(\d{1,2})$")


def walltime_seconds(text: str) -> int:
    """Seconds of a walltime; raises ValueError when it does not parse.  Bare numbers are minutes (Slurm's
    reading; PBS would read seconds, which is why jobgen always writes HH:MM:SS)."""
    text = text.strip()
    if text.isdigit():
        return int(text) * 60
    m = _WALL.match(text)
    if not m:
        raise ValueError(text)
    days, h, mi, s = (int(x) if x else 0 for x in m.groups())
    if mi > 59 or s > 59:
        raise ValueError(text)
    return days * 86400 + h * 3600 + mi * 60 + s


@dataclass(kw_only=True, slots=True)
class JobConf:
    """A validated `job:` section; None means "take the site profile's value"."""

    source: Path
    name: str
    nodes: int = 1
    spares: int | None = None
    walltime_s: int = 3600
    queue: str | None = None
    account: str | None = None
    filesystems: str | None = None
    directives: list[str] = field(default_factory=list)
    run_dir: str = ""
    command: list[str] = field(default_factory=lambda: list(DEFAULT_COMMAND))
    launch: bool = True
    launcher: str | None = None
    ranks_per_node: int | None = None
    failover: bool = True
    chain: bool = True
    max_jobs: int = 50
    max_no_progress: int = 2
    setup_env: bool = True
    env: dict[str, str] = field(default_factory=dict)
    container_image: str = ""


# Upper bounds: agpt.numeric's (a count the job script does arithmetic on must fit in it, and mean a real job).
_MAX = {
    "nodes": numeric.MAX_NODES,
    "spares": numeric.MAX_NODES,
    "ranks_per_node": numeric.MAX_RANKS_PER_NODE,
    "max_jobs": 1_000_000,
    "max_no_progress": 1_000_000,
}


def _int(src: Path, key: str, value: Any, minimum: int) -> int:
    if not isinstance(value, int) and not isinstance(value, float):  # a string is not a count here
        value = repr(value)
    try:
        return int(numeric.number(value, f"{src}: job.{key}", lo=minimum, hi=_MAX[key], integer=True))
    except BadInput as e:
        raise ConfigError(str(e)) from None


def _bool(src: Path, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{src}: job.{key}: must be true or false (got {value!r})")
    return value


def _str(src: Path, key: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list, bool)):
        raise ConfigError(f"{src}: job.{key}: must be a string (got {value!r})")
    return str(value)


def parse(src: Path, data: Any) -> JobConf:
    """Validate a loaded config's `job:` section (other sections belong to the trainer and are ignored)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{src}: the config must be a mapping with a 'job:' section")
    job = data.get("job") or {}
    if not isinstance(job, dict):
        raise ConfigError(f"{src}: job: must be a mapping")
    for key in job:
        if key not in KEYS:
            hint = difflib.get_close_matches(str(key), list(KEYS), n=1)
            why = f" (did you mean {hint[0]}?)" if hint else f" (known: {', '.join(KEYS)})"
            raise ConfigError(f"{src}: job.{key}: unknown key{why}")
    conf = JobConf(source=src, name=_str(src, "name", job.get("name")) or src.stem)
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", conf.name):
        raise ConfigError(f"{src}: job.name: {conf.name!r} must be letters, digits, '_', '.', '-'")
    if "nodes" in job:
        conf.nodes = _int(src, "nodes", job["nodes"], 1)
    if job.get("spares") is not None:
        conf.spares = _int(src, "spares", job["spares"], 0)
    if "walltime" in job:
        try:
            conf.walltime_s = walltime_seconds(str(job["walltime"]))
        except ValueError:
            raise ConfigError(
                f"{src}: job.walltime: {str(job['walltime'])!r} does not parse "
                "(want HH:MM:SS, D-HH:MM:SS, D+HH:MM:SS or whole minutes)"
            ) from None
        if not 0 < conf.walltime_s <= numeric.MAX_SECONDS:
            raise ConfigError(
                f"{src}: job.walltime: must be more than zero and at most {numeric.MAX_SECONDS / 86400:.0f} days"
            )
    for key in ("queue", "account", "filesystems"):
        if job.get(key) is not None:
            setattr(conf, key, _str(src, key, job[key]))
    if "directives" in job:
        d = job["directives"]
        if not isinstance(d, list) or not all(isinstance(x, str) for x in d):
            raise ConfigError(f"{src}: job.directives: must be a list of strings")
        conf.directives = list(d)
    conf.run_dir = _str(src, "run_dir", job.get("run_dir")) or f"runs/{src.stem}"
    if "command" in job:
        c = job["command"]
        if isinstance(c, str):
            try:
                conf.command = shlex.split(c)
            except ValueError as exc:
                raise ConfigError(f"{src}: job.command: {exc}") from None
        elif isinstance(c, list) and all(isinstance(x, (str, int, float)) for x in c):
            conf.command = [str(x) for x in c]
        else:
            raise ConfigError(f"{src}: job.command: must be a string or a list of words")
        if not conf.command:
            raise ConfigError(f"{src}: job.command: is empty")
    for key in ("launch", "failover", "chain", "setup_env"):
        if key in job:
            setattr(conf, key, _bool(src, key, job[key]))
    if job.get("launcher") is not None:
        conf.launcher = _str(src, "launcher", job["launcher"])
        if conf.launcher not in LAUNCHERS:
            raise ConfigError(f"{src}: job.launcher: {conf.launcher!r} is not one of {', '.join(LAUNCHERS)}")
    if job.get("ranks_per_node") is not None:
        conf.ranks_per_node = _int(src, "ranks_per_node", job["ranks_per_node"], 1)
    if "max_jobs" in job:
        conf.max_jobs = _int(src, "max_jobs", job["max_jobs"], 1)
    if "max_no_progress" in job:
        conf.max_no_progress = _int(src, "max_no_progress", job["max_no_progress"], 1)
    conf.container_image = _str(src, "container_image", job.get("container_image"))
    if "env" in job:
        env = job["env"] or {}
        if not isinstance(env, dict):
            raise ConfigError(f"{src}: job.env: must be a mapping KEY: VALUE")
        for k, v in env.items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(k)) or isinstance(v, (dict, list)):
                raise ConfigError(f"{src}: job.env.{shellword.printable(str(k))}: must be NAME: scalar value")
            conf.env[str(k)] = "" if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
    _no_control_characters(conf)
    return conf


def _no_control_characters(conf: JobConf) -> None:
    """Refuse a control character in any job value, naming the key (agpt.shellword: the one rule for a value that
    becomes shell text)."""
    values: list[tuple[str, str]] = [
        ("name", conf.name),
        ("queue", conf.queue or ""),
        ("account", conf.account or ""),
        ("filesystems", conf.filesystems or ""),
        ("run_dir", conf.run_dir),
        ("launcher", conf.launcher or ""),
        ("container_image", conf.container_image),
    ]
    values += [(f"directives[{i}]", d) for i, d in enumerate(conf.directives)]
    values += [(f"command[{i}]", w) for i, w in enumerate(conf.command)]
    for k, v in conf.env.items():
        values += [(f"env.{shellword.printable(k)}", k), (f"env.{shellword.printable(k)}", v)]
    for key, value in values:
        try:
            shellword.line(value, f"{conf.source}: job.{key}")
        except BadInput as e:
            raise ConfigError(str(e)) from None


def load(path: Path) -> JobConf:
    """Read CONFIG.yaml and validate its `job:` section."""
    try:
        import yaml
    except ImportError:
        raise ConfigError(
            f"{path}: reading YAML needs PyYAML; run jobgen with the toolkit's venv (make setup)"
        ) from None
    from agpt import yamlio

    # YAML 1.1 reads an unquoted 06:00:00 as the base-60 integer 21600; a walltime must stay a string.
    class _Loader(yamlio.StrictLoader):
        pass

    int_tag = "tag:yaml.org,2002:int"
    _Loader.yaml_implicit_resolvers = {
        ch: [(tag, rx) for tag, rx in rs if tag != int_tag]
        for ch, rs in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    _Loader.add_implicit_resolver(int_tag, re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$"), list("-+0123456789"))
    return parse(path, yamlio.load_file(path, _Loader))  # a SafeLoader subclass: safe


_LOOP_WORDS = ("{hostfile}", "{hosts}", "{nhosts}")  # the failover loop replaces these in its command's words


def _word(w: str, where: str) -> str:
    """One command word for the job script: {config}/{run_dir} become the script's variables, the
    failover loop's {hostfile}/{hosts}/{nhosts} stay literal, everything else passes agpt.shellword.word."""
    if w == "{config}":
        return '"$AGPT_CONFIG"'
    if w == "{run_dir}":
        return '"$AGPT_RUN_DIR"'
    if "{config}" in w or "{run_dir}" in w:
        shellword.line(w, where)
        inner = w.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
        inner = inner.replace("{config}", "$AGPT_CONFIG").replace("{run_dir}", "$AGPT_RUN_DIR")
        return f'"{inner}"'
    if w in _LOOP_WORDS:
        return w
    return shellword.word(w, where)


def shell(conf: JobConf) -> str:
    """The config as `JOB_*=` assignments (shell-quoted) for lib/jobgen.sh to eval."""

    def q(v: str) -> str:
        return shellword.word(v, str(conf.source))

    def opt(v: str | int | None) -> str:
        return "" if v is None else str(v)

    lines = [
        f"JOB_NAME={q(conf.name)}",
        f"JOB_NODES={conf.nodes}",
        f"JOB_SPARES={opt(conf.spares)}",
        f"JOB_WALLTIME_S={conf.walltime_s}",
        f"JOB_QUEUE_SET={int(conf.queue is not None)}",
        f"JOB_QUEUE={q(opt(conf.queue))}",
        f"JOB_ACCOUNT_SET={int(conf.account is not None)}",
        f"JOB_ACCOUNT={q(opt(conf.account))}",
        f"JOB_FILESYSTEMS_SET={int(conf.filesystems is not None)}",
        f"JOB_FILESYSTEMS={q(opt(conf.filesystems))}",
        "JOB_DIRECTIVES=(" + " ".join(q(d) for d in conf.directives) + ")",
        f"JOB_RUN_DIR={q(conf.run_dir)}",
        f"JOB_COMMAND={q(' '.join(_word(w, f'{conf.source}: job.command[{i}]') for i, w in enumerate(conf.command)))}",
        f"JOB_LAUNCH={int(conf.launch)}",
        f"JOB_LAUNCHER={q(opt(conf.launcher))}",
        f"JOB_RANKS_PER_NODE={opt(conf.ranks_per_node)}",
        f"JOB_FAILOVER={int(conf.failover)}",
        f"JOB_CHAIN={int(conf.chain)}",
        f"JOB_MAX_JOBS={conf.max_jobs}",
        f"JOB_MAX_NO_PROGRESS={conf.max_no_progress}",
        f"JOB_SETUP_ENV={int(conf.setup_env)}",
        "JOB_ENV=(" + " ".join(q(f"{k}={v}") for k, v in conf.env.items()) + ")",
        f"JOB_CONTAINER_IMAGE={q(conf.container_image)}",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--keys":
        for k, v in KEYS.items():
            print(f"{k:<16} {v}")
        return 0
    if len(args) != 1:
        sys.stderr.write("usage: python -m agpt.jobconf CONFIG.yaml | --keys\n")
        return 2
    try:
        sys.stdout.write(shell(load(Path(args[0]))))
    except ConfigError as exc:
        sys.stderr.write(f"agpt jobgen: {exc}\n")
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
