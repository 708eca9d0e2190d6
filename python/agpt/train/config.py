"""Trainer settings: dataclasses that validate themselves, loaded from YAML, env and `--set` flags.

Precedence is defaults < YAML < `AGPT_<SECTION>_<KEY>` env < flags, so a job script can pin a config
file and still override one value per run.  Every mistake names the dotted key, because a typo in a
20B config found after the queue wait costs a day.  A top-level `job:` section belongs to jobgen and
is accepted and ignored here.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agpt import numeric
from agpt.errors import BadInput, ConfigError

DTYPES = ("fp32", "bf16", "fp16")


def _positive(section: str, cfg: object, *keys: str) -> None:
    """Each KEY of CFG must be > 0 (a NaN is not): ConfigError `SECTION.KEY: must be positive (got V)`."""
    for key in keys:
        v = getattr(cfg, key)
        if not v > 0:
            raise ConfigError(f"{section}.{key}: must be positive (got {v})")


def _at_least(section: str, cfg: object, lo: int, *keys: str) -> None:
    """Each KEY of CFG must be >= LO (a NaN is not): ConfigError `SECTION.KEY: must be >= LO (got V)`."""
    for key in keys:
        v = getattr(cfg, key)
        if not v >= lo:
            raise ConfigError(f"{section}.{key}: must be >= {lo} (got {v})")


@dataclass(kw_only=True, slots=True)
class ModelConfig:
    """A Llama-style decoder: RMSNorm, RoPE, SwiGLU, grouped-query attention."""

    vocab_size: int = 32000
    dim: int = 2048
    n_layers: int = 24
    n_heads: int = 16
    n_kv_heads: int = 8
    ffn_dim: int = 0  # 0: 8/3 * dim rounded up to multiple_of (Llama's rule)
    multiple_of: int = 256
    max_seq_len: int = 4096
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    init_std: float = 0.02

    def validate(self) -> None:
        _positive("model", self, "vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "max_seq_len",
                  "multiple_of")  # fmt: skip
        if self.dim % self.n_heads:
            raise ConfigError(f"model.n_heads: {self.n_heads} heads do not divide model.dim {self.dim}")
        if (self.dim // self.n_heads) % 2:
            raise ConfigError(f"model.n_heads: head size {self.dim // self.n_heads} must be even for RoPE")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(
                f"model.n_kv_heads: {self.n_kv_heads} KV heads do not divide model.n_heads {self.n_heads}"
            )
        _at_least("model", self, 0, "ffn_dim")

    @property
    def hidden_dim(self) -> int:
        """The SwiGLU width: explicit, or Llama's 8/3·dim rounded up to `multiple_of`."""
        if self.ffn_dim:
            return self.ffn_dim
        h = int(8 * self.dim / 3)
        return self.multiple_of * ((h + self.multiple_of - 1) // self.multiple_of)

    def num_params(self) -> int:
        """Parameter count, for sizing the init path and reporting."""
        head = self.dim // self.n_heads
        attn = self.dim * head * (self.n_heads * 2 + self.n_kv_heads * 2)
        mlp = 3 * self.dim * self.hidden_dim
        per_layer = attn + mlp + 2 * self.dim
        return self.n_layers * per_layer + 2 * self.vocab_size * self.dim + self.dim


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    """The loop: how long, how big a batch, which precision."""

    steps: int = 1000
    seq_len: int = 2048
    global_batch: int = 256  # samples per optimizer step over all ranks (fixed when ranks change)
    micro_batch: int = 1  # samples per rank per forward; accumulation makes up the rest
    uneven_batch: bool = (
        False  # true: data ranks that do not divide global_batch split it unevenly (a shrink)
    )
    seed: int = 1234
    log_interval: int = 1
    run_dir: str = ""
    param_dtype: str = "bf16"  # compute dtype of FSDP's unsharded parameters
    reduce_dtype: str = "fp32"  # gradient reduction dtype
    master_dtype: str = "fp32"  # dtype of the sharded parameters the optimizer updates
    device: str = "auto"  # auto, cpu, cuda, xpu, ...
    deterministic: bool = False
    activation_checkpointing: bool = False  # recompute each block in backward: memory for ~30% compute
    dist_timeout_s: int = 900
    deadline_margin_s: int = 300  # save and stop this long before AGPT_DEADLINE_EPOCH
    compile: bool = False  # torch.compile each block (sites turn it on with AGPT_TRAIN_COMPILE=true)
    # Health (agpt.train.health, docs/contract.md): what a NaN or a loss spike does.
    on_nonfinite: str = "stop"  # stop (exit 1) | rollback (reload the newest checkpoint, skip, go on)
    spike: dict[str, Any] = field(default_factory=dict)  # {factor: >1, window: N, grad_factor: >1}; {}: none
    skip: Any = field(default_factory=list)  # [[from_batch, to_batch], ...] or a skips.json path
    rollback_lr_factor: float = 1.0  # learning-rate factor for rollback_lr_steps steps after a skip
    rollback_lr_steps: int = 0
    max_rollbacks: int = 3  # more rollbacks than this within rollback_window steps: stop (exit 4)
    rollback_window: int = 1000
    frozen_threshold: float = 1e-7  # |Δw|/|w| of a group below this for frozen_logs logs: warning; 0: off
    frozen_logs: int = 50
    # Silent data corruption (agpt.train.sdc, docs/recovery.md): wrong numbers attributed to the rank computing them.
    rerun: bool = True  # on a NaN or a spike, recompute the step first: a rank whose numbers change is named
    canary_interval: int = 100  # every K steps a fixed canary forward compared across ranks; 0: off
    canary_rtol: float = 0.0  # 0: the canary must agree to the bit; else within this relative tolerance

    def validate(self) -> None:
        _positive(
            "train", self, "steps", "seq_len", "global_batch", "micro_batch", "log_interval", "dist_timeout_s"
        )
        self._validate_health()
        for key in ("param_dtype", "reduce_dtype", "master_dtype"):
            if getattr(self, key) not in DTYPES:
                raise ConfigError(
                    f"train.{key}: must be one of {', '.join(DTYPES)} (got {getattr(self, key)!r})"
                )
        if self.global_batch % self.micro_batch:
            raise ConfigError(
                f"train.micro_batch: {self.micro_batch} does not divide train.global_batch {self.global_batch}"
            )

    def _validate_health(self) -> None:
        if self.on_nonfinite not in ("stop", "rollback"):
            raise ConfigError(f"train.on_nonfinite: must be stop or rollback (got {self.on_nonfinite!r})")
        if self.spike:
            unknown = sorted(set(self.spike) - {"factor", "window", "grad_factor"})
            if unknown:
                raise ConfigError(
                    f"train.spike.{unknown[0]}: unknown key (keys: factor, window, grad_factor)"
                )
            factor, window = self.spike.get("factor"), self.spike.get("window", 20)
            if isinstance(factor, str):
                try:
                    factor = float(factor)
                except ValueError:
                    pass
            if not isinstance(factor, int | float) or isinstance(factor, bool) or not factor > 1:
                raise ConfigError(f"train.spike.factor: must be a number > 1 (got {factor!r})")
            if not isinstance(window, int) or isinstance(window, bool) or window < 1:
                raise ConfigError(f"train.spike.window: must be a positive integer (got {window!r})")
            grad = self.spike.get("grad_factor", 0)
            if not isinstance(grad, int | float) or isinstance(grad, bool) or not (grad == 0 or grad > 1):
                raise ConfigError(
                    f"train.spike.grad_factor: must be a number > 1, or 0 for none (got {grad!r})"
                )
            self.spike = {
                "factor": float(factor),
                "window": window,
                **({"grad_factor": float(grad)} if grad else {}),
            }
        from agpt.train.health import parse_skip  # here: health imports the trainer entry module

        parse_skip(self.skip)
        if not 0 < self.rollback_lr_factor <= 1:
            raise ConfigError(f"train.rollback_lr_factor: must be in (0, 1] (got {self.rollback_lr_factor})")
        _at_least("train", self, 0, "rollback_lr_steps", "frozen_threshold")
        _at_least("train", self, 1, "max_rollbacks", "rollback_window", "frozen_logs")
        _at_least("train", self, 0, "canary_interval")
        if not (math.isfinite(self.canary_rtol) and 0 <= self.canary_rtol < 1):
            raise ConfigError(f"train.canary_rtol: must be in [0, 1) (got {self.canary_rtol})")


@dataclass(kw_only=True, slots=True)
class OptimConfig:
    """AdamW with linear warmup then cosine decay to `min_lr`."""

    lr: float = 3e-4
    min_lr: float = 3e-5
    warmup_steps: int = 100
    decay_steps: int = 0  # 0: decay over train.steps
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0  # 0 disables clipping (the norm is still reported)
    lr_scale: dict[str, Any] = field(default_factory=dict)  # {group: factor}: embed attn mlp norm output

    def _validate_lr_scale(self) -> None:
        groups = ("embed", "attn", "mlp", "norm", "output")
        for key, value in self.lr_scale.items():
            if key not in groups:
                raise ConfigError(
                    f"optim.lr_scale.{key}: unknown parameter group (groups: {', '.join(groups)})"
                )
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"optim.lr_scale.{key}: must be a number >= 0 (got {value!r})")

    def validate(self) -> None:
        _positive("optim", self, "lr")
        _at_least("optim", self, 0, "min_lr", "warmup_steps", "decay_steps")
        for key in ("beta1", "beta2"):
            if not 0 <= getattr(self, key) < 1:
                raise ConfigError(f"optim.{key}: must be in [0, 1) (got {getattr(self, key)})")
        _at_least("optim", self, 0, "grad_clip")
        _positive("optim", self, "eps")
        _at_least("optim", self, 0, "weight_decay")
        for key in ("lr", "min_lr", "weight_decay", "beta1", "beta2", "eps", "grad_clip"):
            if not math.isfinite(getattr(self, key)):
                raise ConfigError(f"optim.{key}: must be a finite number (got {getattr(self, key)})")
        self._validate_lr_scale()


@dataclass(kw_only=True, slots=True)
class DataConfig:
    """Where samples come from: a blended data set directory, or, only when asked for by name with
    `synthetic: true`, a synthetic stream (smoke and test runs); a `path` set on top (`--set data.path=...`
    on a test config) wins.  The trainer refuses an empty `path` without `synthetic`."""

    path: str = ""
    synthetic: bool = False  # with an empty `path`: generated tokens (loudly announced); a `path` wins
    seed: int = 0  # synthetic stream only
    stages: list[Any] = field(default_factory=list)  # [{path, until_tokens}, ...] instead of path

    def validate(self) -> None:
        if self.stages:
            from agpt.train.stages import validate  # here: stages imports the trainer's data module

            validate(self.stages)
            if self.path:
                raise ConfigError("data.stages: set either data.path or data.stages, not both")


@dataclass(kw_only=True, slots=True)
class EvalConfig:
    """Every `interval` steps: the held-out loss (and bits per byte) on the first `samples` samples of the
    blend at `path`, and the multiple-choice `tasks` on their first `task_items` items (docs/eval.md)."""

    interval: int = 0  # 0: no evaluation
    path: str = ""  # a blend made by `agpt blend` (same tokenizer and seq_len); empty: held-out synthetic
    samples: int = 256
    tasks: list[Any] = field(default_factory=list)  # [PATH | {path, name, format}, ...] (agpt.evals.tasks)
    task_items: int = 500  # the fixed subset: the first N items of every task
    tokenizer: str = ""  # SentencePiece model for the tasks; "": the one the blend's manifest pins
    regression_acc: float = 0.0  # alarm: an accuracy this far (0..1) below its best; 0: off
    regression_bpb: float = 0.0  # alarm: bits per byte this fraction above its best; 0: off
    on_regression: str = "warn"  # warn: a health event; rollback: also roll back as for a loss spike

    def validate(self) -> None:
        _at_least("eval", self, 0, "interval")
        _positive("eval", self, "samples", "task_items")
        if not 0 <= self.regression_acc <= 1:
            raise ConfigError(f"eval.regression_acc: must be in 0..1 (got {self.regression_acc})")
        _at_least("eval", self, 0, "regression_bpb")
        if self.on_regression not in ("warn", "rollback"):
            raise ConfigError(f"eval.on_regression: must be warn or rollback (got {self.on_regression!r})")
        from agpt.evals.tasks import parse_specs  # here: the trainer's config reads no task code at import

        parse_specs(self.tasks)


@dataclass(kw_only=True, slots=True)
class CheckpointConfig:
    """Distributed checkpoints under RUN_DIR/ckpt/step-N."""

    interval: int = 1000  # steps between saves; 0: only at the end and on signals/deadline
    interval_s: float = 0.0  # also save once this many seconds passed since the last save (0: off)
    keep: int = 2  # complete checkpoints kept (the newest is never deleted)
    async_save: bool = True  # snapshot to host memory, write in the background
    max_writers: int = 64  # ranks writing to the filesystem at once
    resume: bool = True
    save_final: bool = True
    thread_count: int = 1  # writer threads per rank
    # The local tier (docs/recovery.md): each rank's shard in node memory, a copy on a partner node.  Off at 0/0.
    local_interval: int = 0  # steps between local saves
    local_interval_s: float = 0.0  # also a local save once this many seconds passed since the last one
    local_keep: int = 2  # complete local steps kept (1 or 2)
    local_dir: str = ""  # node-local base folder; "": $SITE_LOCAL_CKPT_DIR, else /dev/shm
    # A stored item several ranks need (replicated state, a reshard's shared chunks) read by one rank and broadcast
    # (train/coopload.py): fewer bytes from the filesystem, a collective instead (tests/bench/bench_coopload.py).
    coop_load: bool = False
    # The failover loop's save before a stop for a person (AGPT_CHECKPOINT_SAVE_AND_STOP=true): restore, save the
    # restored state globally before any step (node memory's, when newer than the newest global one), exit 75.
    save_and_stop: bool = False

    @property
    def local(self) -> bool:
        return bool(self.local_interval or self.local_interval_s)

    def validate(self) -> None:
        if self.local_interval < 0:
            raise ConfigError(f"checkpoint.local_interval: must be >= 0 steps (got {self.local_interval})")
        if not (math.isfinite(self.local_interval_s) and self.local_interval_s >= 0):
            raise ConfigError(
                f"checkpoint.local_interval_s: must be >= 0 seconds (got {self.local_interval_s})"
            )
        if self.local_keep not in (1, 2):
            raise ConfigError(f"checkpoint.local_keep: 1 or 2 (got {self.local_keep})")
        _at_least("checkpoint", self, 0, "interval")
        if not (math.isfinite(self.interval_s) and self.interval_s >= 0):
            raise ConfigError(f"checkpoint.interval_s: must be >= 0 seconds (got {self.interval_s})")
        _at_least("checkpoint", self, 1, "keep", "max_writers", "thread_count")


@dataclass(kw_only=True, slots=True)
class ParallelConfig:
    """How ranks split the model: `tp` consecutive ranks share each layer, the rest is data parallel (FSDP2)."""

    tp: int = 1  # tensor-parallel degree: divides heads, KV heads, FFN width and the ranks per node
    sequence_parallel: bool = False  # split norms and the residual stream along the sequence over tp

    def validate(self) -> None:
        if self.tp <= 0:
            raise ConfigError(f"parallel.tp: must be positive (got {self.tp})")


@dataclass(kw_only=True, slots=True)
class HeartbeatConfig:
    """Heartbeats (agpt.heartbeat): one record per node per interval under RUN_DIR/heartbeat/."""

    enabled: bool = True
    interval_s: float = 15.0  # one small atomic write per node per interval to the run directory
    tick_s: float = 0.0  # node-local rank record cadence; 0: min(1, interval_s / 3)
    dump_s: float = 0.0  # step stuck this long: dump stacks; 0: half of FAILOVER_IDLE_TIMEOUT, else 600
    host: str = ""  # the node's name in its record; "": SLURMD_NODENAME, else the short hostname
    local_dir: str = ""  # node-local folder for rank records; "": /dev/shm, else TMPDIR

    def validate(self) -> None:
        if not self.interval_s > 0:
            raise ConfigError(f"heartbeat.interval_s: must be > 0 (got {self.interval_s})")
        if self.tick_s < 0 or self.dump_s < 0:
            raise ConfigError("heartbeat.tick_s and heartbeat.dump_s: must be >= 0")


@dataclass(kw_only=True, slots=True)
class ObserveConfig:
    """What rank 0 writes for operators (agpt.observe, docs/observability.md); a writer that cannot work warns once."""

    tensorboard: bool = True  # RUN_DIR/tb/ event files, when tensorboardX is installed (agpt[tensorboard])
    wandb: bool = False  # RUN_DIR/wandb/ offline runs (agpt[wandb]); upload later with `wandb sync`
    wandb_project: str = "agpt"
    prometheus: bool = True  # RUN_DIR/metrics.prom (Prometheus text format)
    prometheus_interval_s: float = 15.0  # rewrite metrics.prom at most this often (and at the end)

    def validate(self) -> None:
        if not (math.isfinite(self.prometheus_interval_s) and self.prometheus_interval_s >= 0):
            raise ConfigError(
                f"observe.prometheus_interval_s: must be >= 0 seconds (got {self.prometheus_interval_s})"
            )


@dataclass(kw_only=True, slots=True)
class Config:
    """The whole trainer configuration (the trainer's sections of a jobs/configs/NAME.yaml)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: DataConfig = field(default_factory=DataConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    observe: ObserveConfig = field(default_factory=ObserveConfig)
    # The dotted keys a source set (YAML, AGPT_* environment, --set, flags), not the defaults: what a job-start
    # decision (agpt.ckptplan) must leave as the user gave it.
    pinned: set[str] = field(default_factory=set, compare=False, repr=False)

    def validate(self) -> None:
        self.model.validate()
        self.train.validate()
        self.optim.validate()
        self.data.validate()
        self.checkpoint.validate()
        self.parallel.validate()
        self.eval.validate()
        self._validate_tp()
        self.heartbeat.validate()
        self.observe.validate()
        if self.train.seq_len > self.model.max_seq_len:
            raise ConfigError(
                f"train.seq_len: {self.train.seq_len} exceeds model.max_seq_len {self.model.max_seq_len}"
            )

    def _validate_tp(self) -> None:
        """Each tensor-parallel rank owns whole heads, whole KV heads and an equal slice of the FFN."""
        tp, m = self.parallel.tp, self.model
        for what, n in (
            ("model.n_heads", m.n_heads),
            ("model.n_kv_heads", m.n_kv_heads),
            ("the FFN width (model.ffn_dim)", m.hidden_dim),
        ):
            if n % tp:
                raise ConfigError(f"parallel.tp: {tp} does not divide {what} {n}")
        if self.parallel.sequence_parallel and self.train.seq_len % tp:
            raise ConfigError(f"parallel.tp: {tp} does not divide train.seq_len {self.train.seq_len}")

    def check_layout(self, world: int, ranks_per_node: int) -> None:
        """The job's shape against parallel.tp (no torch needed: `agpt check` calls it before submitting)."""
        tp = self.parallel.tp
        if world % tp:
            raise ConfigError(f"parallel.tp: {tp} does not divide the world size {world}")
        if tp > 1 and ranks_per_node % tp:
            raise ConfigError(
                f"parallel.tp: {tp} does not divide the {ranks_per_node} ranks per node "
                f"(a tensor-parallel group would span nodes)"
            )
        dp = world // tp
        tc = self.train
        if tc.uneven_batch and dp > tc.global_batch:
            raise ConfigError(
                f"train.global_batch: {tc.global_batch} samples cannot feed {dp} data-parallel ranks"
            )
        if tc.global_batch % (tc.micro_batch * dp) and not tc.uneven_batch:
            raise ConfigError(
                f"train.micro_batch: global batch {tc.global_batch} is not a multiple of "
                f"micro_batch {tc.micro_batch} × {dp} data-parallel ranks"
            )

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("pinned")
        return out


SECTIONS = ("model", "train", "optim", "data", "checkpoint", "parallel", "heartbeat", "eval", "observe")
IGNORED_SECTIONS = ("job",)  # read by jobgen only


def _field_types(section: str) -> dict[str, Any]:
    cls = type(getattr(Config(), section))
    return {f.name: f.type for f in dataclasses.fields(cls)}


# Upper bounds of the sizes that drive loops or memory (agpt.numeric's, one home): a larger value is refused naming
# the key, before a model or a buffer is built from it.  Other whole numbers fit in 64 bits.
SIZE_BOUNDS: dict[str, int] = {
    "model.vocab_size": numeric.MAX_VOCAB,
    "model.n_layers": numeric.MAX_LAYERS,
    "model.max_seq_len": numeric.MAX_SEQ_LEN,
    "model.dim": 1 << 20,
    "model.n_heads": 1 << 16,
    "model.n_kv_heads": 1 << 16,
    "model.ffn_dim": 1 << 24,
    "model.multiple_of": 1 << 16,
    "train.seq_len": numeric.MAX_SEQ_LEN,
    "train.global_batch": 1 << 30,
    "train.micro_batch": 1 << 20,
    "train.steps": numeric.MAX_COUNT,
    "eval.samples": numeric.MAX_SAMPLES,
    "eval.task_items": 1 << 30,
    "checkpoint.max_writers": numeric.MAX_NODES * numeric.MAX_RANKS_PER_NODE,
    "checkpoint.thread_count": 1024,
    "parallel.tp": numeric.MAX_RANKS_PER_NODE,
}


_FLOAT_TEXT = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)", re.I
)


def _coerce(key: str, value: Any, typ: Any) -> Any:
    """Check a YAML value against the field's declared type; int widens to float, nothing else.  Numbers go
    through agpt.numeric (finite, within SIZE_BOUNDS or 64 bits), named by their key."""
    name = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
    dotted = key.rsplit(": ", 1)[-1]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    try:
        if name == "bool" and isinstance(value, bool):
            return value
        if name == "int" and number and isinstance(value, int):
            if dotted in SIZE_BOUNDS:  # a size: its sign is validate()'s to refuse ("must be positive")
                return numeric.number(value, key, hi=SIZE_BOUNDS[dotted], integer=True)
            return numeric.number(value, key, lo=-((1 << 63) - 1), hi=(1 << 63) - 1, integer=True)
        # YAML 1.1 reads "3e-4" as a string: a float key takes one that spells a number
        if name == "float" and (number or (isinstance(value, str) and _FLOAT_TEXT.fullmatch(value.strip()))):
            return float(numeric.number(value, key))
    except BadInput as e:
        raise ConfigError(str(e)) from None
    if name in ("bool", "int", "float"):
        raise ConfigError(f"{key}: expected {name}, got {value!r}")

    if name.startswith("dict"):
        if isinstance(value, Mapping):
            return dict(value)
        if value is None:
            return {}
    elif name.startswith("list"):
        if isinstance(value, list):
            return value
        if value is None:
            return []
    elif name == "Any":
        return value
    elif name == "str":
        if value is None:
            return ""
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    raise ConfigError(f"{key}: expected {name}, got {value!r}")


def _apply(cfg: Config, values: Mapping[str, Any], origin: str) -> None:
    """Apply a nested mapping {section: {key: value}}; unknown keys name their dotted path."""
    for section, body in values.items():
        if section in IGNORED_SECTIONS:
            continue
        if section not in SECTIONS:
            raise ConfigError(f"{origin}: unknown key '{section}' (sections: {', '.join(SECTIONS)})")
        if body is None:
            continue
        if not isinstance(body, Mapping):
            raise ConfigError(f"{origin}: '{section}' must be a mapping")
        types = _field_types(section)
        target = getattr(cfg, section)
        for key, value in body.items():
            dotted = f"{section}.{key}"
            if key not in types:
                raise ConfigError(f"{origin}: unknown key '{dotted}'")
            setattr(target, key, _coerce(f"{origin}: {dotted}", value, types[key]))
            cfg.pinned.add(dotted)


def _dotted(key: str, value: Any) -> dict[str, Any]:
    section, _, rest = key.partition(".")
    if not rest or "." in rest:
        raise ConfigError(f"--set {key}: expected SECTION.KEY=VALUE")
    return {section: {rest: value}}


def parse_set(item: str) -> tuple[str, Any]:
    """`a.b=c` -> ("a.b", yaml-typed c)."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set {item}: expected KEY=VALUE")
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """`AGPT_TRAIN_STEPS=40` -> {"train": {"steps": 40}}; `AGPT_RUN_DIR` -> train.run_dir.

    Only variables whose prefix names a section are read, so AGPT_HOME or AGPT_DEBUG never collide;
    a section-prefixed variable naming no key is an error rather than silently ignored.
    """
    out: dict[str, dict[str, Any]] = {}
    if environ.get("AGPT_RUN_DIR"):
        out.setdefault("train", {})["run_dir"] = environ["AGPT_RUN_DIR"]
    for name, raw in environ.items():
        if not name.startswith("AGPT_"):
            continue
        rest = name[len("AGPT_") :].lower()
        for section in SECTIONS:
            if rest.startswith(section + "_"):
                key = rest[len(section) + 1 :]
                if key not in _field_types(section):
                    raise ConfigError(f"{name}: unknown key '{section}.{key}'")
                try:
                    value = yaml.safe_load(raw) if raw else ""
                except yaml.YAMLError:
                    value = raw
                out.setdefault(section, {})[key] = value
                break
    return out


def load_config(
    path: str | Path | None,
    overrides: list[str] | tuple[str, ...] = (),
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> Config:
    """Build a validated Config: defaults < YAML < AGPT_* env < `--set` < shorthand flags."""
    cfg = Config()
    if path is not None:
        from agpt import yamlio

        _apply(cfg, yamlio.load_sections(Path(path)), str(path))
    _apply(cfg, env_overrides(os.environ if environ is None else environ), "environment")
    for item in overrides:
        key, value = parse_set(item)
        _apply(cfg, _dotted(key, value), "--set")
    for key, value in (flags or {}).items():
        if value is not None:
            _apply(cfg, _dotted(key, value), "flag")
    cfg.validate()
    return cfg
