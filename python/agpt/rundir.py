"""The run directory (`AGPT_RUN_DIR`) and the facts every tool reads the same way: one home for each.

Standard library only: the recovery path (watch, failover, chain) imports this module.

What lives here (docs/contract.md describes the same, for users):
- the run directory's paths (`RunDir`);
- JSON lines: one reader and one appender with the torn-line policy: a writer killed mid-line leaves a last line
  without its newline; the next append starts on a fresh line (so it is never glued onto the torn one), and every
  reader skips a line it cannot parse with a note on standard error;
- the checkpoint directory's names (`ckpt/step-N/.complete`; the rule that makes one complete is
  `agpt.ckptdir`'s);
- the hostfile parser and the host-name rule: names enter only as `[A-Za-z0-9._-]` (or an IP address), so a host
  name is never shell text;
- the progress regex, the failure classes, the verdicts and their exit codes, the walltime margin, the spare-host
  formula and its fallback, the launchers' rank variables (one table), the derived rendezvous port;
- the bounds on durations read from flags, settings or records.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import math
import os
import re
import stat
import sys
import zlib
from pathlib import Path

from agpt import numeric, safewrite
from agpt.errors import (
    EXIT_FAILURE,
    EXIT_IDLE,
    EXIT_OK,
    EXIT_REPEAT,
    EXIT_RESUBMIT,
    EXIT_STUCK,
    EXIT_USAGE,
    BadInput,
)
from agpt.shown import terminal

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: `agpt watch` imports this module and starts fast
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping
    from typing import Any, BinaryIO


# ----------------------------------------------------------------------------------------------- paths
HOSTS_ALL = "hosts/all"
HOSTS_ACTIVE = "hosts/active"
HOSTS_SPARE = "hosts/spare"
HOSTS_IP = "hosts/ip"
HOSTS_BAD = "hosts/bad"
HOSTS_LOCK = "hosts/.lock"  # held (flock) around every read-modify-write of hosts/active and hosts/spare
ATTEMPTS = (
    "attempts"  # attempts/JOBID.N.log, .class.json, .times.json (agpt watch --times), JOBID.preflight.log
)
TIMES_SUFFIX = (
    ".times.json"  # beside an attempt's log: when it ended (the recovery clock's detection, teardown)
)
EVENTS = "events.jsonl"
CHAIN = "chain.jsonl"
CHAIN_LOCK = "chain.lock"
CKPT = "ckpt"  # ckpt/step-N/ with .complete written last
COMPLETE = ".complete"
EVAL_HOLD = ".eval-hold"  # in a step directory: an evaluation job still needs it; never pruned (evals.due)
LAYOUT = "layout.json"  # the job's layout and memory per device (`agpt check --run-dir`; failover.shrink)
RUN_FILES = (HOSTS_ALL, HOSTS_ACTIVE, HOSTS_SPARE, HOSTS_IP, HOSTS_BAD, EVENTS, CHAIN, CHAIN_LOCK, LAYOUT)
# Written by the trainer's rank 0 (docs/observability.md): read by `agpt monitor`, `agpt report` and metrics.prom.
METRICS = "metrics.jsonl"  # one JSON object per logged step
PROGRESS = "progress"  # `step=N time=EPOCH`, rewritten at each logged step
HEALTH = "health.jsonl"  # rollbacks, frozen groups, data stages
PROM = "metrics.prom"  # Prometheus text format, rewritten atomically (agpt.observe.prom)
TB = "tb"  # TensorBoard event files (agpt.observe.tb)
# The run directory's own records (docs/contract.md "Run directory"): an output flag naming one of these, or a
# file under one of these folders, is refused (refuse_own_file), so a view never replaces what it is drawn from.
# ("eval.jsonl", "skips.json", "stages.json": homes in agpt.evals.records, agpt.train.health, agpt.train.stages;
# test_safewrite holds them equal.)
OWN_FILES = (*RUN_FILES, METRICS, PROGRESS, HEALTH, PROM, "eval.jsonl", "skips.json", "stages.json")
OWN_DIRS = ("hosts", ATTEMPTS, "heartbeat", CKPT, TB, "eval", "exports", "wandb")


def refuse_own_file(out: Path | str, run_dir: Path | str, flag: str) -> None:
    """BadInput (exit 2, naming FLAG and the file) when OUT is one of RUN_DIR's own records or under one of its
    record folders, by its path or by where it resolves to: `agpt report RUN --html RUN/events.jsonl` and
    `agpt plot RUN -o RUN/metrics.jsonl` would replace the run's records with a view of them."""
    base = Path(run_dir).resolve()
    for cand in (Path(os.path.abspath(out)), Path(out).resolve()):
        try:
            rel = cand.relative_to(base)
        except ValueError:
            continue
        if rel.as_posix() in OWN_FILES or (len(rel.parts) > 1 and rel.parts[0] in OWN_DIRS):
            raise BadInput(
                f"{flag} {out}: is the run directory's own {rel.as_posix()}; refusing to replace it "
                "(write the output outside the run's records)"
            )


class RunDir:
    """Paths of one run directory."""

    __slots__ = ("root",)

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path(self, name: str) -> Path:
        return self.root / name

    @property
    def events(self) -> Path:
        return self.root / EVENTS

    @property
    def chain(self) -> Path:
        return self.root / CHAIN

    @property
    def bad(self) -> Path:
        return self.root / HOSTS_BAD

    def attempt_log(self, jobid: str, n: int) -> Path:
        return self.root / ATTEMPTS / f"{jobid}.{n}.log"

    def class_json(self, jobid: str, n: int) -> Path:
        return self.root / ATTEMPTS / f"{jobid}.{n}.class.json"


def times_of(log: Path) -> dict[str, float]:
    """The wall-clock marks `agpt watch --times` left beside attempt log LOG (last_progress, detected), as far as
    they are numbers; none when the file is missing or unreadable (an older loop, a killed watch)."""
    try:
        raw = read_record(log.with_name(log.name.removesuffix(".log") + TIMES_SUFFIX))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {k: v for k in ("last_progress", "detected") if (v := num(raw.get(k))) is not None}


# ----------------------------------------------------------------------------------------------- facts
PROGRESS_RE = r"\bstep[=:] ?[0-9]+"  # FAILOVER_PROGRESS_RE's default: any trainer printing step=N or step: N
# The trainer's last line when every rank stops together (agpt.train.trainer, after a blocking save), and the
# reason of its exit-75 stops: the failover plan reads that line when the launcher's 143 hides the 75
# (agpt.failover.plan.asked_resubmit), and the simulator writes it (agpt.sim.logs).
STOP_LINE = "agpt: stopped at step {step} on {reason}, checkpoint saved"
RESUBMIT_REASON = "SIGUSR1 or the deadline"
# The trainer's local checkpoint tier speaks with this prefix (agpt.train.localckpt); rank 0's line saying it is on
# tells the failover plan that node memory may hold progress past the global checkpoint (a save attempt keeps it).
LOCAL_TIER = "agpt: local checkpoint tier: "
LOCAL_TIER_ON = LOCAL_TIER + "on: "
WALLTIME_MARGIN_S = 120.0  # FAILOVER_WALLTIME_MARGIN: a kill this close to the deadline is `walltime`
# The watchdog settings lib/failover.sh hands `agpt watch` (it states them too; test_contract holds them equal).
IDLE_TIMEOUT_S = 900.0  # FAILOVER_IDLE_TIMEOUT: this long without a progress line is a hang
STARTUP_TIMEOUT_S = 1800.0  # FAILOVER_STARTUP_TIMEOUT: ... before the first progress line
GRACE_S = 30.0  # FAILOVER_GRACE: SIGTERM, then this long, then SIGKILL

CLASSES = ("success", "walltime", "node", "hang", "crash", "system", "app")
BLIND_CLASSES = ("hang", "crash")  # no host named: a rotating blind swap

# Verdict -> exit code: of the failover loop (done..resubmit) and of a chained job (all of them).
VERDICT_EXIT: dict[str, int] = {
    "done": EXIT_OK,
    "failed": EXIT_FAILURE,
    "usage": EXIT_USAGE,
    "stuck": EXIT_STUCK,
    "repeat": EXIT_REPEAT,
    "resubmit": EXIT_RESUBMIT,
    "idle": EXIT_IDLE,
}
FAILOVER_VERDICTS = ("done", "failed", "stuck", "repeat", "resubmit")


class Launcher:
    """The variables one launcher exports for this process: rank, world size, rank on the node, ranks on it."""

    __slots__ = ("local_rank", "local_size", "name", "rank", "size")

    def __init__(self, name: str, rank: str, size: str, local_rank: str, local_size: str = "") -> None:
        self.name, self.rank, self.size = name, rank, size
        self.local_rank, self.local_size = local_rank, local_size  # local_size "": the launcher exports none


# The launchers, in order of preference (torchrun first: it may run inside srun).  The one table: the trainer
# (train/dist.py) reads rank and size from the first row present and the local variables in this order; the
# heartbeats (heartbeat.py) and the data tools (data/dist.py) read the same; `agpt yeet` (yeet/mpi.py) takes any
# row but torchrun's as "an MPI launcher or srun started this process".
# fmt: off
LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    Launcher("pals", "PALS_RANKID", "PALS_SIZE", "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE"),  # HPE PALS (PBS) ...
    Launcher("pals", "PALS_RANKID", "PMI_SIZE", "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE"),  # ... size by Cray PMI
    Launcher("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
             "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    Launcher("hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),  # MPICH's hydra
    Launcher("cray-pmi", "PMI_RANK", "PMI_SIZE", "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE"),
    Launcher("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),  # srun: no local size of its own
)
# fmt: on
RANK_SIZE_VARS: tuple[tuple[str, str], ...] = tuple(dict.fromkeys((x.rank, x.size) for x in LAUNCHERS))
RANK_VARS: tuple[str, ...] = tuple(dict.fromkeys(x.rank for x in LAUNCHERS))
LOCAL_RANK_VARS: tuple[str, ...] = tuple(dict.fromkeys(x.local_rank for x in LAUNCHERS))
LOCAL_SIZE_VARS: tuple[str, ...] = tuple(dict.fromkeys(x.local_size for x in LAUNCHERS if x.local_size))
# PMIx (Open MPI 5, `srun --mpi=pmix`) exports a rank and no size: MPI code asks MPI for the size.
PMIX_RANK = "PMIX_RANK"
_MPI = tuple(
    x for x in LAUNCHERS if x.name not in ("torchrun", "srun")
)  # MPI launchers: not torchrun, not srun
MPI_RANK_VARS: tuple[str, ...] = (*dict.fromkeys(x.rank for x in _MPI), PMIX_RANK)
# Any of these says an MPI launcher started this process (so MPI may be initialised).
MPI_VARS: tuple[str, ...] = (
    *dict.fromkeys(v for x in _MPI for v in (x.rank, x.size, x.local_rank)),
    PMIX_RANK,
)
# The job this process runs in: the failover loop's id (it stays the same over the attempts of one allocation),
# else the scheduler's.  The recovery clock and the local checkpoint tier (a new job of the chain is a new
# allocation: its nodes' memory holds nothing of ours) read it.
JOBID_VARS = ("FAILOVER_JOBID", "SLURM_JOB_ID", "PBS_JOBID")


def job_id(env: Mapping[str, str] | None = None) -> str:
    """This job's id ("/" made "_"), "" outside a job."""
    env = os.environ if env is None else env
    return next((env[v] for v in JOBID_VARS if env.get(v)), "").replace("/", "_")


# A rendezvous port every rank derives alone from the same key (the job's identity), with no exchange: in
# 20000-32767, below the Linux kernel's default ephemeral range (net.ipv4.ip_local_port_range, 32768-60999), so
# that no outgoing connection on the master host holds it when rank 0 binds it.  (In that range, an outgoing
# socket, gloo's own among them, took the port now and then: rank 0 failed with EADDRINUSE and the other ranks
# waited out their store timeout.)  The range is fixed, not read from this host's setting: every rank, on hosts
# that may be set differently, must derive the same number.
PORT_RANGE = (20000, 32767)


def derived_port(key: str) -> int:
    """The port KEY hashes to in PORT_RANGE (the trainer's default MASTER_PORT; the sweep's collective groups)."""
    low, high = PORT_RANGE
    return low + zlib.crc32(key.encode()) % (high - low + 1)


# What SITE_LAUNCHER and job.launcher may name: the launchers lib/launch.sh starts (test_rundir holds them equal).
LAUNCH_NAMES = ("pals", "hydra", "openmpi", "srun")
# The tasks per node a Slurm job asked for: an estimate of the ranks on this node where nothing better is set.
SLURM_TASKS_PER_NODE = "SLURM_NTASKS_PER_NODE"

# The bounds on durations, counts and epoch times read from flags, settings or records: agpt.numeric's (one
# validator for every number from outside), named here too because every tool reads them from here.
MAX_SECONDS = numeric.MAX_SECONDS
seconds = numeric.seconds
whole = numeric.whole
epoch = numeric.epoch


def num(v: Any) -> float | None:
    """A finite number from a record, else None (a record is data: a bad value degrades, never raises)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        f = float(v)
    except (ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def integer(v: Any) -> int | None:
    """A whole number from a record (a float is truncated), else None."""
    f = num(v)
    return None if f is None or abs(f) > 2**53 else int(f)


# ----------------------------------------------------------------------------------------------- JSON lines
def note(msg: str) -> None:
    """A note on standard error (the torn-line policy's "skipped" line)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"agpt: note: {terminal(msg)}\n")
        sys.stderr.flush()


def _finite_float(text: str) -> float:
    f = float(text)
    if not math.isfinite(f):
        raise ValueError(f"number out of range: {text}")
    return f


def _float_or_none(text: str) -> float | None:
    f = float(text)
    return f if math.isfinite(f) else None


def _no_constant(text: str) -> Any:
    raise ValueError(f"not a JSON number: {text}")


# The bounds of every read of a run-directory file (docs/trust.md): past them a file is refused naming it, so a
# link to a huge file or a runaway writer cannot take a reader's memory.  By kind:
# RECORD_MAX: one JSON object: .complete (a digest per file), layout.json, heartbeat/*.json, due.json
RECORD_MAX = 16 << 20
TEXT_MAX = 16 << 20  # hostfiles, chain.lock, a site pattern file, a score case's JSON
JSONL_MAX = 1 << 30  # events.jsonl, chain.jsonl, metrics.jsonl, health.jsonl, eval.jsonl (whole-file reads)
JSON_DEPTH = 64  # nesting: deeper is refused before the parser recurses
INT_DIGITS = 300  # a JSON integer of more digits is refused: every one accepted is a float without overflow


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > INT_DIGITS:
        raise ValueError(f"integer out of range: {text[:24]}...")
    return int(text)


def _check_depth(line: str) -> None:
    """ValueError when LINE nests arrays and objects deeper than JSON_DEPTH (the count of brackets is a cheap
    bound; only a line with more of them is scanned, skipping strings)."""
    if line.count("[") + line.count("{") <= JSON_DEPTH:
        return
    depth, in_str, esc = 0, False, False
    for ch in line:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > JSON_DEPTH:
                raise ValueError(f"nested deeper than {JSON_DEPTH}")
        elif ch in "]}":
            depth -= 1


def _null_constant(text: str) -> None:
    return None


def parse_json_line(line: str, *, nonfinite: bool = False) -> Any:
    """One JSON value with only finite numbers, integers of at most INT_DIGITS digits, nesting at most
    JSON_DEPTH deep and encodable strings; ValueError otherwise.  NONFINITE: NaN and the infinities, which the
    trainer writes for a diverged loss, read as null instead of refusing the line."""
    import json  # here: `agpt watch` imports this module and never reads JSON

    _check_depth(line)
    obj = json.loads(line, parse_float=_finite_float if not nonfinite else _float_or_none, parse_int=_bounded_int,
                     parse_constant=_null_constant if nonfinite else _no_constant)  # fmt: skip
    json.dumps(obj, ensure_ascii=False).encode("utf-8")  # a lone surrogate fails here, not when printed
    return obj


def open_regular(path: Path | str) -> BinaryIO:
    """PATH opened for reading, only when it is a regular file: a reader never opens a FIFO (that blocks until a
    writer comes, forever) or a device (that never ends) as a log or a record.  The open itself does not block
    (O_NONBLOCK, cleared once the file is known to be regular).  Raises IsADirectoryError for a directory and
    OSError "not a regular file" for anything else that is not one."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device)", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path | str, *, limit: int = JSONL_MAX) -> bytes:
    """A regular file's bytes (open_regular), at most LIMIT of them: a longer file raises OSError EFBIG naming
    the bound.  The one way agpt reads a file of the run directory (docs/trust.md)."""
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes, the bound for this file", str(path))
    return data


def read_record(path: Path | str, *, limit: int = RECORD_MAX) -> Any:
    """The one JSON value of a small record file (read_bytes, then parse_json_line): OSError when it cannot be
    read (FileNotFoundError when missing), ValueError when it is not bounded, finite JSON."""
    return parse_json_line(read_bytes(path, limit=limit).decode("utf-8", errors="replace"))


# The schema of a metrics.jsonl record (written by agpt.train.metrics): a whole `step` (not a bool), numbers that
# are finite or null, `update` a string.  Anything else in a field is dropped; a record without a step is skipped.
METRICS_NUMBERS = ("time", "tokens", "target_steps", "target_tokens", "loss", "grad_norm", "lr",
                   "tokens_per_s_per_device", "mfu", "peak_mem_bytes", "devices", "steps", "step_s", "compute_s",
                   "wait_s", "ckpt_stall_s")  # fmt: skip
STEP_MAX = 2**53
METRICS_MAX = 1e18  # past it a figure is no measurement (a count of tokens, bytes or seconds): dropped


def metrics_record(line: str) -> dict[str, Any] | None:
    """One line of metrics.jsonl as its schema allows (METRICS_NUMBERS), or None when it is not a record."""
    try:
        rec = parse_json_line(line, nonfinite=True)
    except (ValueError, RecursionError, UnicodeError):
        return None
    if not isinstance(rec, dict):
        return None
    step = rec.get("step")
    if type(step) is not int or not 0 <= step <= STEP_MAX:
        return None
    out: dict[str, Any] = {"step": step}
    for k in METRICS_NUMBERS:
        v = rec.get(k)
        if k in rec and (
            v is None or (not isinstance(v, bool) and isinstance(v, (int, float)) and abs(v) < METRICS_MAX)
        ):
            out[k] = v
    if isinstance(rec.get("update"), str):
        out["update"] = rec["update"]
    return out


def read_lines(path: Path) -> list[str]:
    """The lines of a text file (decoded leniently); a missing file has none."""
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        return []
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory, expected a file") from None
    except OSError as e:
        raise BadInput(f"{path}: unreadable: {e.strerror or e}") from None
    return data.decode("utf-8", errors="replace").split("\n")


def read_jsonl(path: Path, *, notes: list[str] | None = None) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file, in order.  A line that is not one JSON object (a torn last line, a
    hand edit, a number out of range) is skipped with a note: in `notes` when given, else on standard error."""
    out: list[dict[str, Any]] = []
    skipped: list[int] = []
    for n, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            obj = parse_json_line(line)
        except (ValueError, RecursionError, UnicodeError):
            skipped.append(n)
            continue
        if isinstance(obj, dict):
            out.append(obj)
        else:
            skipped.append(n)
    if skipped:
        where = ",".join(str(n) for n in skipped[:5]) + (",..." if len(skipped) > 5 else "")
        msg = f"{path}: {len(skipped)} unreadable line(s) skipped (line {where}: torn or not a JSON object)"
        if notes is None:
            note(msg)
        else:
            notes.append(msg)
    return out


def _finite(obj: Any) -> Any:
    """obj with every non-finite float replaced by None (JSON has no NaN; a reader would skip the line)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def append_line(path: Path, text: str, *, fsync: bool = True) -> None:
    """Append `text` (one or more whole lines) with one O_APPEND write, starting on a fresh line: when the file
    does not end in a newline (a writer killed mid-line), a newline goes first, so the record is never glued
    onto the torn line.  An exclusive flock makes the check and the write one step between our own writers.
    Never through a link, only to a regular file (agpt.safewrite.append); a failure is WriteError (one line)."""
    if not text:
        return
    if not text.endswith("\n"):
        text += "\n"
    safewrite.append(path, text, sync=fsync)


def jsonl_line(obj: dict[str, Any]) -> str:
    """One record as one line of a JSON-lines file; non-finite numbers are written as null."""
    import json

    return json.dumps(_finite(obj), allow_nan=False) + "\n"


def append_jsonl(path: Path, obj: dict[str, Any]) -> None:
    """One record as one line (see append_line); non-finite numbers are written as null."""
    append_line(path, jsonl_line(obj))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` (created when missing) for a read-modify-write of files beside it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise safewrite.error(path, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------------------------- hosts
_HOST_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")  # no leading "-": it would read as an option
_HOST_SLOTS = re.compile(
    r"^([A-Za-z0-9_][A-Za-z0-9._-]*):[0-9]+$"
)  # `n2:4`: host n2 with 4 slots (hydra, Open MPI)
_PLAIN_ADDRESS = re.compile(r"[0-9A-Fa-f:.]+")  # an address in plain numeric form: no `%scope`, no brackets
HOST_MAX = 255  # a DNS name is at most 253 characters


def is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def valid_host(name: str) -> bool:
    """The host-name rule, at every entry to hosts/* and to a command built from a host: letters, digits, '.',
    '_', '-', not starting with '-' (never shell text, never an option), or an IP address in plain numeric form
    (`::1%eth0` is refused: a scope id may hold anything); at most HOST_MAX characters."""
    if not isinstance(name, str) or not 0 < len(name) <= HOST_MAX:
        return False
    return bool(_HOST_RE.fullmatch(name)) or (
        ":" in name and bool(_PLAIN_ADDRESS.fullmatch(name)) and is_ip(name)
    )


def check_host(name: str, where: str) -> str:
    """NAME when it passes the host-name rule, else BadInput naming WHERE."""
    if not valid_host(name):
        raise BadInput(f"{where}: not a host name: {name[:80]!r} (allowed: letters, digits, '.', '_', '-')")
    return name


def host_of(word: str) -> str:
    """The host of a hostfile's first word: `n2:4` is n2 (slots), an IPv6 address stays whole."""
    m = _HOST_SLOTS.match(word)
    return m.group(1) if m else word


def parse_hostfile(lines: Iterable[str], *, where: str = "hostfile") -> list[str]:
    """The hosts of hostfile lines, in order, de-duplicated: the first word of each line (`host slots=N`,
    `host:N` name host), blank lines and `#` comments skipped.  A name outside [A-Za-z0-9._-] (nor an IP
    address) raises BadInput naming `where` and the line."""
    out: list[str] = []
    seen: set[str] = set()
    for n, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        host = check_host(host_of(line.split()[0]), f"{where}:{n}")
        if host not in seen:
            seen.add(host)
            out.append(host)
    return out


def read_text(path: Path, *, what: str, missing_ok: bool = False, limit: int = TEXT_MAX) -> str:
    """A small text file, decoded leniently; missing or unreadable (a FIFO, a device, past LIMIT bytes): BadInput
    naming `what` (or "" with missing_ok when it is missing)."""
    try:
        return read_bytes(path, limit=limit).decode("utf-8", errors="replace")
    except FileNotFoundError:
        if missing_ok:
            return ""
        raise BadInput(f"{what} not found: {path}") from None
    except OSError as e:
        raise BadInput(f"{what} unreadable: {path}: {e.strerror or e}") from None


def read_hostfile(path: Path, *, missing_ok: bool = False) -> list[str]:
    """parse_hostfile of a file; a missing file is BadInput (or [] with missing_ok)."""
    text = read_text(path, what="hostfile", missing_ok=missing_ok)
    return parse_hostfile(text.splitlines(), where=str(path))


# ----------------------------------------------------------------------------------------------- spares
# The spare formula's inputs when SITE_SPARES_PERCENT / SITE_SPARES_MIN are unset or empty (every checked site
# profile sets both): lib/jobgen.sh and lib/failover.sh pass them as given and Python falls back to these.
SPARES_PERCENT = 2.0
SPARES_MIN = 4


def spares_for(active: int, *, percent: float, minimum: int) -> int:
    """Spare hosts for `active` training hosts: ceil(active * percent / 100), raised to `minimum` when the spares
    then take at most a quarter of the allocation (3 * minimum <= active).  Job generation asks for active + this;
    the failover loop splits what it got with `split_counts`, which inverts it."""
    if active <= 0:
        return 0
    s = math.ceil(active * percent / 100.0) if percent > 0 else 0
    if s < minimum and 3 * minimum <= active:
        s = minimum
    return max(0, s)


def split_counts(usable: int, *, percent: float, minimum: int) -> tuple[int, int]:
    """(active, spares) for `usable` hosts: the spares of the largest active count A with A + spares_for(A) <=
    usable, every other host active.  So an allocation of A + spares_for(A) hosts (what job generation asks for)
    splits back into A active and spares_for(A) spares."""
    if usable <= 0:
        return 0, 0
    if 1 + spares_for(1, percent=percent, minimum=minimum) > usable:
        return usable, 0
    lo, hi = 1, usable  # A + spares_for(A) grows strictly with A: bisect for the largest that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if mid + spares_for(mid, percent=percent, minimum=minimum) <= usable:
            lo = mid
        else:
            hi = mid - 1
    spares = spares_for(lo, percent=percent, minimum=minimum)
    return usable - spares, spares


def spares_percent(text: str, where: str = "SITE_SPARES_PERCENT") -> float:
    """SITE_SPARES_PERCENT as a flag or setting gives it: 0 to 100; '' is SPARES_PERCENT.  WHERE: what a refusal
    names (the flag, when the value came from one)."""
    if not text.strip():
        return SPARES_PERCENT
    return float(numeric.number(text, where, lo=0, hi=100))


def spares_min(text: str, where: str = "SITE_SPARES_MIN") -> int:
    """SITE_SPARES_MIN as a flag or setting gives it: a whole number; '' is SPARES_MIN."""
    return whole(text, where, maximum=10**7) if text.strip() else SPARES_MIN


def _spares_main(argv: list[str]) -> int:
    """`python -m agpt.rundir spares ACTIVE PERCENT MINIMUM`: spares_for, for lib/jobgen.sh."""
    try:
        active = whole(argv[0], "nodes", maximum=10**7)
        percent = spares_percent(argv[1])
        minimum = spares_min(argv[2])
    except (IndexError, ValueError) as e:
        sys.stderr.write(f"usage: python -m agpt.rundir spares ACTIVE PERCENT MINIMUM ({e})\n")
        return EXIT_USAGE
    except BadInput as e:
        sys.stderr.write(f"agpt: error: {e}\n")
        return EXIT_USAGE
    print(spares_for(active, percent=percent, minimum=minimum))
    return EXIT_OK


if __name__ == "__main__":
    if sys.argv[1:2] == ["spares"]:
        sys.exit(_spares_main(sys.argv[2:]))
    sys.stderr.write("usage: python -m agpt.rundir spares ACTIVE PERCENT MINIMUM\n")
    sys.exit(EXIT_USAGE)
