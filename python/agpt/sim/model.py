"""The fault model of `agpt sim`: how often nodes fail, how failures look, and what each recovery step costs.

A model is a YAML file (python/agpt/sim/models/*.yaml are the shipped ones, each number with its source) read
over the built-in defaults below; a bad value (negative or non-numeric, a class mix that does not sum to 1, zero
nodes, an unknown key) raises ConfigError naming the key, which the CLI turns into exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from agpt import ckptplan, numeric, rundir
from agpt.chain import Limits
from agpt.errors import BadInput, ConfigError
from agpt.failover.consequence import CONSEQUENCES
from agpt.failover.policy import Settings
from agpt.failover.shrink import min_nodes as shrink_floor
from agpt.failover.sweep import DEFAULT_TIMEOUT_S as SWEEP_TIMEOUT_S
from agpt.heartbeat.straggler import DEFAULT_MODE as STRAGGLER_MODE
from agpt.heartbeat.straggler import DEFAULT_WINDOWS as STRAGGLER_WINDOWS
from agpt.heartbeat.straggler import MODES as STRAGGLER_MODES  # FAILOVER_STRAGGLER: the trainer's values
from agpt.heartbeat.writer import DEFAULT_INTERVAL_S as HEARTBEAT_INTERVAL_S
from agpt.train.config import CheckpointConfig, HeartbeatConfig, TrainConfig
from agpt.watch.settings import DEFAULT_EVIDENCE_GRACE as EVIDENCE_GRACE_S
from agpt.watch.settings import KILL_ON_EVIDENCE

MODELS_DIR = Path(__file__).resolve().parent / "models"
CLASSES = ("node", "hang", "straggler", "system", "app")
LAUNCHERS = ("pals", "srun")
DISTRIBUTIONS = ("exponential", "weibull")
# What a misread costs (agpt.failover.consequence, as `agpt failover score` measures it): every consequence but
# `right`. The old scalar form of a class's misread share is `recoverable` alone.
MISREAD_KINDS = tuple(k for k in CONSEQUENCES if k != "right")
# The failover loop's and the chain's own defaults: a model that does not set them simulates what ships.
_LOOP = Settings()
_CHAIN = Limits()
# ... and the trainer's (agpt.train.config): its checkpoint and heartbeat defaults are what a config that does not
# set them gets.  The checkpoint intervals and the local tier a model does not set are the job-start plan's
# (agpt.ckptplan, as `agpt check --run-dir` decides from the site profile `site`): `Sim` asks it.
_CKPT = CheckpointConfig()
_HEARTBEAT = HeartbeatConfig()
_TRAIN = TrainConfig()
# the train keys the plan decides (agpt.ckptplan.KEYS), as the model names them
PLANNED = {"checkpoint_interval": "interval", "checkpoint_interval_s": "interval_s",
           "local_interval": "local_interval", "local_interval_s": "local_interval_s", "local_daly": "local_interval_s"}  # fmt: skip


@dataclass(kw_only=True, slots=True)
class Failures:
    distribution: str = "exponential"
    node_mtbf_h: float = 8760.0
    weibull_shape: float = 1.0
    repair_h: float = 48.0


@dataclass(kw_only=True, slots=True)
class Behaviour:
    hang_persists: float = 0.5  # a hung host hangs again in the next attempt that includes it
    app_deterministic: float = 0.05  # an application fault recurs at the same step (a bug, not a glitch)
    system_outage_s: float = 900.0
    straggler_slowdown: float = 1.25


# The communicator init's published figures (Costs.comm_init_*'s comments): a model that sets them cites this.
COMM_INIT_PUBLISHED = {"comm_init_fixed_s": 2.0, "comm_init_per_rank_s": 0.009}


@dataclass(kw_only=True, slots=True)
class Costs:
    queue_wait_s: float = 3600.0
    walltime_h: float = 6.0
    launcher_start_s: float = 10.0
    job_start_s: float = 0.0  # a job's start to its first attempt (job script, `agpt check`, preflight)
    inject_latency_s: float = 0.0  # a scripted fault strikes this long after its step (chaos injector)
    model_build_s: float = 0.0
    # Start-up, stage by stage (issue 39; `Costs.start_s`).  Each default keeps the model as it was; the measured
    # or published value is in the comment, to be set by a model that cites it.
    imports_s: float = (
        0.0  # a cold rank's imports (Python, torch, the trainer): measured 9.8-12.6 s on the local
    )
    # Slurm cluster with warm ranks off (tests/python/test_warm_cluster.py, 2 loaded cores; docs/recovery.md)
    warm_ranks: bool = (
        False  # FAILOVER_WARM: a relaunch's ranks are parked processes (agpt.warm); a job's first
    )
    # attempt still starts cold (its nodes are still importing)
    warm_start_s: float = (
        0.7  # what a warm rank pays instead of imports_s + model_build_s: the claim's hand-over
    )
    # 0.5 s and the model build 0.2 s, measured in the same drill with warm ranks (first step back 4.6 s, off 15.4 s)
    comm_init_fixed_s: float = 0.0  # published: 2.0 s, NCCL's init phases at 8 ranks without the kernel load
    # (bootstrap 0.03-0.84, allgathers 0.08, topology 1.10, connections 0.39, alloc 0.4 s: NVIDIA/nccl#1646)
    comm_init_per_rank_s: float = (
        0.0  # published: 0.009 s, NCCL's default init taking 2.5 min "at large scale
    )
    # (e.g. above certain K GPUs)" (NVIDIA/nccl#1156; 16,384 ranks taken, the scale of Meta's 16K-GPU jobs), linear
    # in the ranks as its bootstrap allgather is a ring of N-1 steps (NVIDIA/nccl#1791); COMM_INIT_PUBLISHED
    checkpoint_gb: float = 232.0
    fs_write_gb_s: float = 9.83
    fs_read_gb_s: float = 3.93
    async_stall_s: float = 5.4
    watchdog_timeout_s: float = rundir.IDLE_TIMEOUT_S
    startup_timeout_s: float = rundir.STARTUP_TIMEOUT_S
    heartbeat_timeout_s: float = 120.0
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S  # a node's record per interval: one straggler window
    teardown_s: float = rundir.GRACE_S  # the launcher's SIGTERM-to-SIGKILL
    evidence_grace_s: float = (
        EVIDENCE_GRACE_S  # agpt watch --evidence-grace: SIGTERM to SIGKILL after evidence
    )
    grace_s: float = rundir.GRACE_S
    classify_s: float = 1.0
    person_response_h: float = 8.0
    # The local checkpoint tier (agpt.sim.local): bytes per device and per node over these bandwidths.
    ranks_per_node: int = 0  # 0: the site profile's SITE_RANKS_PER_NODE (FaultModel.site)
    # a save's stall besides the copy (copy launches, a synchronize), and the staging copy of one device's shard
    local_fixed_s: float = ckptplan.LOCAL_FIXED_S
    local_stage_gb_s: float = ckptplan.LOCAL_STAGE_GB_S  # GB/s
    sha256_gb_s: float = 0.33  # one rank hashing its shard, GB/s
    host_mem_gb_s: float = 0.26  # one rank writing or reading its shard in node-local memory, GB/s
    network_gb_s: float = 200.0  # a node's injection bandwidth, for the partner's copy, GB/s

    @property
    def save_stall_s(self) -> float:
        """A synchronous save blocks training for the whole write."""
        return self.checkpoint_gb / self.fs_write_gb_s

    @property
    def load_s(self) -> float:
        return self.checkpoint_gb / self.fs_read_gb_s

    def comm_init_s(self, ranks: int) -> float:
        """The communicator's init for RANKS ranks (a fixed part and a part linear in the ranks)."""
        return self.comm_init_fixed_s + self.comm_init_per_rank_s * ranks

    def start_s(self, *, first: bool, ranks: int) -> float:
        """An attempt's launch to its model built (the state restore and first step follow): the launcher's start,
        then the imports and the model build of a cold rank, or a warm rank's hand-over (a relaunch with warm
        ranks; FIRST: a job's first attempt, always cold), and the communicator's init."""
        build = self.warm_start_s if self.warm_ranks and not first else self.imports_s + self.model_build_s
        return self.launcher_start_s + build + self.comm_init_s(ranks)


@dataclass(kw_only=True, slots=True)
class Train:
    step_s: float = 1.7
    steps: int = 0  # 0: train until the horizon
    # The intervals: the job-start plan's (agpt.ckptplan) unless the model sets one (FaultModel.pinned).
    checkpoint_interval: int = 0
    checkpoint_interval_s: float = 0.0
    checkpoint_keep: int = _CKPT.keep
    async_save: bool = _CKPT.async_save
    deadline_margin_s: float = _TRAIN.deadline_margin_s
    local_interval: int = 0  # the local checkpoint tier: a local save every N steps ...
    local_interval_s: float = 0.0  # ... or every S seconds (0 and 0: no local tier)
    local_keep: int = _CKPT.local_keep
    local_daly: bool = (
        False  # ... or at Daly's interval for its own stall, which the simulation sets (sim.local)
    )

    @property
    def local(self) -> bool:
        return bool(self.local_interval or self.local_interval_s or self.local_daly)


@dataclass(kw_only=True, slots=True)
class Failover:
    max_attempts: int = _LOOP.max_attempts
    max_repeat: int = _LOOP.max_repeat
    max_blind: int = _LOOP.max_blind
    min_attempt_s: float = _LOOP.min_attempt_s
    min_save_s: float = _LOOP.min_save_s
    backoff: list[float] = field(default_factory=lambda: list(_LOOP.backoff))
    walltime_margin_s: float = rundir.WALLTIME_MARGIN_S
    shrink: bool = _LOOP.shrink
    min_nodes: str = _LOOP.min_nodes
    straggler: str = STRAGGLER_MODE  # FAILOVER_STRAGGLER: swap stops at a checkpoint to swap a straggler
    straggler_windows: int = STRAGGLER_WINDOWS  # FAILOVER_STRAGGLER_WINDOWS: windows in a row
    kill_on_evidence: bool = KILL_ON_EVIDENCE  # FAILOVER_KILL_ON_EVIDENCE: end an attempt at once on evidence


@dataclass(kw_only=True, slots=True)
class Layout:
    """What `agpt check --run-dir` writes to layout.json for a shrink (agpt.failover.shrink): the batch at the
    model's node count is nodes x ranks_per_node / tp x micro_batch x accum (it grows with the nodes, as the
    step time is held fixed)."""

    ranks_per_node: int = 12
    tp: int = 1
    micro_batch: int = 1
    accum: int = 2


@dataclass(kw_only=True, slots=True)
class Probe:
    """The health sweep (agpt.failover.sweep) as the simulator charges it: what it costs and what it can see."""

    # The probe launch on every host, all answering, and one round of the cross-host collective.  None (unset):
    # what the model's own start-up stages charge for the same work (`launch_s`, `round_for`), since both do less
    # than a relaunch's start does (no model, no data); a model that measured them sets them.
    probe_s: float | None = None
    round_s: float | None = None
    timeout_s: float = SWEEP_TIMEOUT_S  # FAILOVER_SWEEP_TIMEOUT: a silent host costs the whole timeout
    # of the failed nodes, the share whose host is gone: no sign of life, which no probe misses (the launch waits
    # for it as long again as the others' signs of life took, agpt.failover.sweep.GoneWatch); the rest start their
    # probe, and their device or backend fails it with `finds_node`, as the others answer
    gone: float = 0.0
    finds_node: float = 0.9
    finds_hung: float = 0.5  # a host that hangs every attempt fails the probe or the collective

    def launch_s(self, costs: Costs) -> float:
        """The probe launch, every host answering: the launcher's start and a cold rank's imports."""
        return self.probe_s if self.probe_s is not None else costs.launcher_start_s + costs.imports_s

    def round_for(self, costs: Costs, hosts: int) -> float:
        """One collective round on HOSTS hosts (one rank each): the launch, the imports, the communicator's init."""
        if self.round_s is not None:
            return self.round_s
        return costs.launcher_start_s + costs.imports_s + costs.comm_init_s(hosts)


@dataclass(kw_only=True, slots=True)
class Chain:
    max_jobs: int = _CHAIN.max_jobs
    max_no_progress: int = _CHAIN.max_no_progress


@dataclass(kw_only=True, slots=True)
class ScriptedFault:
    """A fault at a step (the chaos test's schedule) instead of drawn from the rates."""

    cls: str
    step: int
    during_save: bool = False


@dataclass(kw_only=True, slots=True)
class FaultModel:
    name: str = "custom"
    nodes: int = 512
    spares: int | None = None  # None: the failover loop's split with the fallback SITE_SPARES_* (agpt.rundir)
    machine_nodes: int = 10624
    launcher: str = "pals"
    horizon_days: float = 14.0
    # the site profile the job-start plan reads (SITE_HOST_MEM_GIB, SITE_NODE_MTBF_H, ranks per node)
    site: str = "aurora"
    heartbeats: bool = _HEARTBEAT.enabled  # the trainer's heartbeat.enabled
    sweep: bool = True  # FAILOVER_SWEEP: full (on) or off (the blind rotation)
    failures: Failures = field(default_factory=Failures)
    mix: dict[str, float] = field(
        default_factory=lambda: {"node": 0.704, "hang": 0.1, "straggler": 0.04, "system": 0.016, "app": 0.14}
    )
    # per class, the share of its failures whose reading has each consequence (MISREAD_KINDS; agpt.sim.engine
    # writes the log each kind is read from, and the real loop decides)
    misread: dict[str, dict[str, float]] = field(default_factory=lambda: no_misread())
    behaviour: Behaviour = field(default_factory=Behaviour)
    probe: Probe = field(default_factory=Probe)
    costs: Costs = field(default_factory=Costs)
    train: Train = field(default_factory=Train)
    failover: Failover = field(default_factory=Failover)
    chain: Chain = field(default_factory=Chain)
    layout: Layout = field(default_factory=Layout)
    faults: list[ScriptedFault] = field(default_factory=list)
    pinned: set[str] = field(default_factory=set)  # train keys of PLANNED the model (or a flag) set itself

    @property
    def job_mtbf_h(self) -> float:
        return self.failures.node_mtbf_h / self.nodes


def no_misread() -> dict[str, dict[str, float]]:
    """Every class read right: every misread share 0 (the table's `reads every log`)."""
    return {c: dict.fromkeys(MISREAD_KINDS, 0.0) for c in CLASSES}


_SECTIONS: dict[str, type] = {
    "failures": Failures,
    "behaviour": Behaviour,
    "costs": Costs,
    "train": Train,
    "failover": Failover,
    "chain": Chain,
    "probe": Probe,
    "layout": Layout,
}


# Upper bounds of the keys that size the simulation (agpt.numeric's): a larger one would never end.
_BOUNDS = {
    "nodes": numeric.MAX_NODES,
    "machine_nodes": numeric.MAX_NODES,
    "spares": numeric.MAX_NODES,
    "horizon_days": numeric.MAX_DAYS,
}


def _num(v: Any, key: str, *, integer: bool = False, positive: bool = False) -> float:
    """A fault model's number through agpt.numeric: finite, >= 0 (> 0 when POSITIVE), within _BOUNDS."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ConfigError(f"{key}: must be a number, got {v!r}")
    try:
        n = numeric.number(v, key, lo=0, hi=_BOUNDS.get(key, numeric.MAX_COUNT), integer=integer)
    except BadInput as e:
        raise ConfigError(str(e)) from None
    if positive and n == 0:
        raise ConfigError(f"{key}: must be greater than 0, got {v!r}")
    return n


# Keys that must be > 0 (a zero would divide, or make no sense).
_POSITIVE = {
    "nodes",
    "machine_nodes",
    "horizon_days",
    "failures.node_mtbf_h",
    "failures.weibull_shape",
    "costs.walltime_h",
    "costs.fs_write_gb_s",
    "costs.fs_read_gb_s",
    "costs.ranks_per_node",
    "costs.local_stage_gb_s",
    "costs.sha256_gb_s",
    "costs.host_mem_gb_s",
    "costs.network_gb_s",
    "train.step_s",
    "behaviour.straggler_slowdown",
    "failover.max_attempts",
    "layout.ranks_per_node",
    "layout.tp",
    "layout.micro_batch",
    "layout.accum",
    "chain.max_jobs",
    "chain.max_no_progress",
}
_FRACTIONS = {
    "behaviour.hang_persists",
    "behaviour.app_deterministic",
    "probe.finds_node",
    "probe.gone",
    "probe.finds_hung",
}


def _section(cls: type, raw: Any, name: str) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise ConfigError(f"{name}: must be a mapping, got {raw!r}")
    known = {f.name: f for f in fields(cls)}
    kw: dict[str, Any] = {}
    defaults = cls()
    for k, v in raw.items():
        key = f"{name}.{k}"
        if k not in known:
            raise ConfigError(f"{key}: unknown key (known: {', '.join(sorted(known))})")
        default = getattr(defaults, k)
        if isinstance(default, bool):
            if not isinstance(v, bool):
                raise ConfigError(f"{key}: must be true or false, got {v!r}")
            kw[k] = v
        elif isinstance(default, str):
            if k == "min_nodes" and isinstance(v, int | float) and not isinstance(v, bool):
                v = str(v)  # FAILOVER_MIN_NODES: a count or a fraction, as the loop reads it
            if not isinstance(v, str):
                raise ConfigError(f"{key}: must be a string, got {v!r}")
            kw[k] = v
        elif isinstance(default, list):
            vals = v if isinstance(v, list) else [v]
            if not vals:
                raise ConfigError(f"{key}: must hold at least one number")
            kw[k] = [float(_num(x, key)) for x in vals]
        else:
            n = _num(v, key, integer=isinstance(default, int), positive=key in _POSITIVE)
            if key in _FRACTIONS and n > 1:
                raise ConfigError(f"{key}: a probability must be between 0 and 1, got {v!r}")
            kw[k] = int(n) if isinstance(default, int) else float(n)
    return cls(**kw)


def from_dict(data: Any, *, source: str = "fault model") -> FaultModel:
    """Build and validate a model; every error names its key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: must be a mapping of keys, got {type(data).__name__}")
    top = {f.name for f in fields(FaultModel)}
    for k in data:
        if k not in top:
            raise ConfigError(f"{k}: unknown key (known: {', '.join(sorted(top))})")
    m = FaultModel()
    if "name" in data:
        m.name = str(data["name"])
    for key in ("nodes", "machine_nodes"):
        if key in data:
            setattr(m, key, int(_num(data[key], key, integer=True, positive=True)))
    if "horizon_days" in data:
        m.horizon_days = float(_num(data["horizon_days"], "horizon_days", positive=True))
    if "spares" in data and data["spares"] not in (None, "auto"):
        m.spares = int(_num(data["spares"], "spares", integer=True))
    if "site" in data:
        if not isinstance(data["site"], str) or not data["site"]:
            raise ConfigError(f"site: a site profile's name (site/NAME), got {data['site']!r}")
        m.site = data["site"]
    if "launcher" in data:
        if data["launcher"] not in LAUNCHERS:
            raise ConfigError(f"launcher: one of {', '.join(LAUNCHERS)}, got {data['launcher']!r}")
        m.launcher = data["launcher"]
    for key in ("heartbeats", "sweep"):
        if key in data:
            if not isinstance(data[key], bool):
                raise ConfigError(f"{key}: must be true or false, got {data[key]!r}")
            setattr(m, key, data[key])
    if "misread" in data:
        m.misread = misread_shares(data["misread"])
    for name, cls in _SECTIONS.items():
        if name in data:
            setattr(m, name, _section(cls, data[name], name))
    if isinstance(data.get("train"), dict):
        m.pinned = {k for k in data["train"] if k in PLANNED}
    if "mix" in data:
        m.mix = _shares(data["mix"], "mix")
    if "faults" in data:
        m.faults = _faults(data["faults"])
    validate(m)
    return m


def _shares(raw: Any, key: str) -> dict[str, float]:
    """A class -> fraction mapping that sums to 1 (`mix`); unknown classes are refused."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{key}: must map classes ({', '.join(CLASSES)}) to fractions, got {raw!r}")
    out: dict[str, float] = {}
    for k, v in raw.items():
        if k not in CLASSES:
            raise ConfigError(f"{key}.{k}: unknown class (known: {', '.join(CLASSES)})")
        out[k] = float(_num(v, f"{key}.{k}"))
    return {c: out.get(c, 0.0) for c in CLASSES}


def misread_shares(raw: Any, key: str = "misread") -> dict[str, dict[str, float]]:
    """`misread`: class -> {kind: share} (MISREAD_KINDS), or class -> share (the old form: `recoverable`); each
    class's shares at most 1 in all.  Unknown classes and kinds are refused, naming the key."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{key}: must map classes ({', '.join(CLASSES)}) to shares per kind, got {raw!r}")
    out = no_misread()
    for cls, v in raw.items():
        ck = f"{key}.{cls}"
        if cls not in CLASSES:
            raise ConfigError(f"{ck}: unknown class (known: {', '.join(CLASSES)})")
        kinds = v if isinstance(v, dict) else {"recoverable": v}
        for kind, share in kinds.items():
            kk = ck if not isinstance(v, dict) else f"{ck}.{kind}"
            if kind not in MISREAD_KINDS:
                raise ConfigError(f"{kk}: unknown kind (known: {', '.join(MISREAD_KINDS)})")
            out[cls][kind] = float(_num(share, kk))
            if out[cls][kind] > 1:
                raise ConfigError(f"{kk}: a probability must be between 0 and 1, got {share!r}")
        total = sum(out[cls].values())
        if total > 1 + 1e-9:
            raise ConfigError(f"{ck}: the shares of its kinds sum to {total:g}, more than 1")
    return out


def _faults(raw: Any) -> list[ScriptedFault]:
    if not isinstance(raw, list):
        raise ConfigError(f"faults: must be a list of {{class, step}}, got {raw!r}")
    out = []
    for i, item in enumerate(raw):
        key = f"faults[{i}]"
        if not isinstance(item, dict) or "class" not in item or "step" not in item:
            raise ConfigError(f"{key}: must be a mapping with class and step, got {item!r}")
        if item["class"] not in ("node", "hang", "crash", "system", "app"):
            raise ConfigError(f"{key}.class: one of node, hang, crash, system, app, got {item['class']!r}")
        step = int(_num(item["step"], f"{key}.step", integer=True, positive=True))
        out.append(ScriptedFault(cls=item["class"], step=step, during_save=bool(item.get("during_save"))))
    return out


def validate(m: FaultModel) -> None:
    total = sum(m.mix.values())
    if abs(total - 1.0) > 1e-6:
        parts = ", ".join(f"{k} {v:g}" for k, v in m.mix.items() if v)
        raise ConfigError(f"mix: the class fractions must sum to 1, they sum to {total:g} ({parts})")
    if m.failures.distribution not in DISTRIBUTIONS:
        raise ConfigError(
            f"failures.distribution: one of {', '.join(DISTRIBUTIONS)}, got {m.failures.distribution!r}"
        )
    if m.spares is not None and m.nodes + m.spares > m.machine_nodes:
        raise ConfigError(f"machine_nodes: {m.machine_nodes} cannot hold {m.nodes} nodes + {m.spares} spares")
    if m.nodes > m.machine_nodes:
        raise ConfigError(f"nodes: {m.nodes} is more than machine_nodes {m.machine_nodes}")
    if m.train.checkpoint_keep < 1:
        raise ConfigError("train.checkpoint_keep: must be at least 1")
    if m.train.local_keep not in (1, 2):
        raise ConfigError(f"train.local_keep: 1 or 2, got {m.train.local_keep}")
    if m.failover.max_repeat < 2:
        raise ConfigError("failover.max_repeat: must be at least 2")
    if m.failover.max_blind < 1:
        raise ConfigError("failover.max_blind: must be at least 1")
    if m.failover.straggler not in STRAGGLER_MODES:
        modes = ", ".join(STRAGGLER_MODES)
        raise ConfigError(f"failover.straggler: one of {modes}, got {m.failover.straggler!r}")
    if m.failover.straggler_windows < 1:
        raise ConfigError("failover.straggler_windows: must be at least 1")
    try:
        shrink_floor(m.failover.min_nodes, m.nodes)
    except BadInput as e:
        raise ConfigError(f"failover.min_nodes: {e}") from None


def preset_names() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.yaml"))


def load(spec: str | Path | None) -> FaultModel:
    """A model from a YAML path or a shipped name (`aurora-20b`); None: the built-in defaults."""
    if spec is None:
        return from_dict({})
    path = Path(spec)
    if not path.is_file():
        shipped = MODELS_DIR / f"{spec}.yaml"
        if not shipped.is_file():
            raise ConfigError(
                f"fault model {spec!r}: no such file, and not one of {', '.join(preset_names())}"
            )
        path = shipped
    try:
        data = yaml.safe_load(
            rundir.read_bytes(path, limit=rundir.TEXT_MAX).decode("utf-8", errors="replace")
        )
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read the fault model ({e.__class__.__name__}: {e})") from None
    return from_dict(data, source=str(path))


def override(m: FaultModel, **kw: Any) -> FaultModel:
    """A copy with some settings changed (the table's variants: nodes, spares, heartbeats, the health sweep,
    async saves)."""
    import copy

    out = copy.deepcopy(m)
    for k, v in kw.items():
        if k == "async_save":
            out.train.async_save = bool(v)
        elif k == "checkpoint_interval":  # steps, as a config's checkpoint.interval pins it
            out.train.checkpoint_interval, out.train.checkpoint_interval_s = int(v), 0.0  # type: ignore[call-overload]
            out.pinned |= {"checkpoint_interval", "checkpoint_interval_s"}
        elif k == "checkpoint_interval_s":
            out.train.checkpoint_interval_s = float(v)
            out.pinned |= {"checkpoint_interval", "checkpoint_interval_s"}
        elif (
            k == "local_tier"
        ):  # on at the interval `agpt ckpt interval` recommends for its stall (sim.local)
            out.train.local_interval, out.train.local_interval_s, out.train.local_daly = 0, 0.0, bool(v)
            out.pinned |= {"local_interval", "local_interval_s", "local_daly"}
        elif k in (
            "shrink",
            "min_nodes",
            "straggler",
            "kill_on_evidence",
        ):  # FAILOVER_SHRINK, _MIN_NODES, ...
            setattr(out.failover, k, v)
        elif k == "misread":  # either form, as the YAML takes it
            out.misread = misread_shares(v)
        else:
            setattr(out, k, v)
    validate(out)
    return out


def site_profile(name: str) -> dict[str, float]:
    """What the job-start plan reads of a site profile (as `agpt check` reads it): host memory, node MTBF, ranks
    per node.  A profile that cannot be read is ConfigError naming it."""
    from agpt import check

    try:
        f = check.site_facts(name)
    except BadInput as e:
        raise ConfigError(f"site: {e}") from None
    return {"host_mem_gib": f.host_mem_gib, "node_mtbf_h": f.node_mtbf_h, "ranks_per_node": f.ranks_per_node,
            "profile": f.profile}  # type: ignore[dict-item]  # fmt: skip


def plan(m: FaultModel) -> ckptplan.Plan:
    """The checkpoint plan `agpt check --run-dir` makes at a job's start for this model (its site's profile, its
    nodes and state, the stall a chain's earlier job measured: the model's async or blocking stall), the model's
    own train keys pinned as a config's are (`local_daly`: the tier on at the plan's interval, not pinned)."""
    site = site_profile(m.site)
    c, tr = m.costs, m.train
    pinned: dict[str, float] = {}
    for key in m.pinned:
        if key == "local_daly" or (tr.local_daly and key in ("local_interval", "local_interval_s")):
            continue
        pinned[PLANNED[key]] = float(getattr(tr, key))
    return ckptplan.decide(ckptplan.Facts(
        nodes=m.nodes, ranks_per_node=c.ranks_per_node or int(site["ranks_per_node"]),
        state_bytes=c.checkpoint_gb * 1e9, async_save=tr.async_save, local_keep=tr.local_keep,
        host_mem_gib=float(site["host_mem_gib"]), node_mtbf_h=float(site["node_mtbf_h"]),
        measured_stall_s=c.async_stall_s if tr.async_save else c.save_stall_s, pinned=pinned,
        profile=str(site["profile"])))  # fmt: skip


def planned(m: FaultModel) -> FaultModel:
    """A copy of M as its job would run: its ranks per node from the site when unset, and the plan's values in the
    train keys it does not set (a `local_daly` tier at the plan's interval where the tier fits)."""
    import copy

    out = copy.deepcopy(m)
    if not out.costs.ranks_per_node:
        out.costs.ranks_per_node = int(site_profile(m.site)["ranks_per_node"])
    p = plan(out)
    tr = out.train
    for key, name in PLANNED.items():
        if key == "local_daly" or name not in p.values:
            continue
        if key in out.pinned:
            continue
        setattr(tr, key, type(getattr(tr, key))(p.values[name]))
    if tr.local_daly and p.local_interval_s > 0 and not (tr.local_interval or tr.local_interval_s):
        tr.local_interval_s = p.local_interval_s
    return out
