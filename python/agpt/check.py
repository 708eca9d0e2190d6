"""`agpt check`: will this config train at this size on this site?  Answered before the queue wait.

Every number comes from the config, the site profile and the model built on torch's meta device (no
memory is allocated, no GPU is needed), so the same check runs on a laptop, in `agpt jobgen` before it
writes a job script, and in the job script itself before the first launch.  Each failed check is one
line naming the file and the field, with a concrete fix.

Memory model per device (FSDP2 full sharding over all ranks, optional tensor parallelism `parallel.tp`):
- sharded state: parameters in `train.master_dtype`, their gradients, and AdamW's two moments, each
  P / world_size elements;
- working set: one block's parameters unsharded in `train.param_dtype` twice (current + prefetched) plus
  its unsharded gradients in `train.reduce_dtype`, divided by tp;
- activations per micro-batch, per token and layer, counted from the tensors the block keeps for backward
  (`_act_per_token_layer`); with activation checkpointing only each block's input is kept, plus one block
  recomputed at a time; the logits and their fp32 loss copy on top;
- 10% of the device held back for the allocator, the collective library's buffers and the runtime.
The estimate is meant to be right within tens of percent: enough to refuse a layout that cannot run and
to name the knob that makes it run.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agpt import ckptdir, ckptplan, localtier, numeric, rundir, safewrite, yamlio
from agpt.errors import BadInput, ConfigError
from agpt.failover import shrink as shrinklib
from agpt.train import config as tconfig

GIB = 1024**3
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
HEADROOM = 0.10  # of device memory, for the allocator, collective buffers and the runtime
TMPFS_SHARE = localtier.TMPFS_SHARE  # the share of a node's memory the local tier's tmpfs may take


@dataclass(kw_only=True, slots=True)
class Row:
    """One line of the table: a check's name, what was found, and whether it passed (None: info)."""

    name: str
    value: str
    ok: bool | None = True
    warn: bool = False


@dataclass(kw_only=True, slots=True)
class Report:
    """The table and the failures (one line each, naming file and field, with a fix)."""

    title: str
    rows: list[Row] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def add(self, name: str, value: str, fail: str = "") -> None:
        self.rows.append(Row(name=name, value=value, ok=not fail))
        if fail:
            self.failures.append(fail)

    def info(self, name: str, value: str) -> None:
        self.rows.append(Row(name=name, value=value, ok=None))

    def warn(self, name: str, value: str) -> None:
        """A row marked WARN and a line on standard error, but not a failure: the exit stays 0."""
        self.rows.append(Row(name=name, value=value, ok=None, warn=True))
        self.warnings.append(value)

    def table(self) -> str:
        lines = [self.title]
        for r in self.rows:
            mark = "WARN" if r.warn else {True: "ok  ", False: "FAIL", None: "    "}[r.ok]
            lines.append(f"  {mark} {r.name:<11} {r.value}")
        return "\n".join(lines)


@dataclass(kw_only=True, slots=True)
class SiteFacts:
    """What the check needs from a site profile."""

    name: str
    ranks_per_node: int
    device_mem_gib: float  # 0: unknown, memory not checked
    fs_bw_gbps: float  # 0: unknown, save time not estimated
    profile: str
    host_mem_gib: float = 0.0  # 0: unknown, the local tier's memory not screened
    node_mtbf_h: float = 0.0  # SITE_NODE_MTBF_H; 0 (unset, or not positive): agpt.ckptplan's fallback
    shrink: str = ""  # SITE_FAILOVER_SHRINK: "0" forbids running on fewer nodes (failover.shrink)
    stage: str = "none"  # SITE_STAGE, SITE_STAGE_OPTS, SITE_LOCAL_DIR: how the venv reaches the nodes
    stage_opts: list[str] = field(default_factory=list)
    local_dir: str = ""
    container: str = (
        "none"  # SITE_CONTAINER, SITE_CONTAINER_OPTS: how a rank's command is wrapped in an image
    )
    container_opts: list[str] = field(default_factory=list)
    ckpt_layout: list[str] = field(default_factory=list)  # SITE_CKPT_LAYOUT
    launcher: str = (
        "hydra"  # SITE_LAUNCHER (lib/launch.sh's default): whether warm ranks can live across attempts
    )


def _num(prof: Mapping[str, Any], key: str, path: str, default: float = 0.0) -> float:
    raw = prof.get(key, "")
    if raw in ("", None):
        return default
    try:
        return float(numeric.number(str(raw), f"{path}: {key}", lo=0))
    except BadInput as e:
        raise ConfigError(str(e)) from None


def _mtbf(prof: Mapping[str, Any], path: str) -> float:
    """SITE_NODE_MTBF_H: a number, or 0 when it is unset or not positive (the plan then says it fell back)."""
    raw = str(prof.get("SITE_NODE_MTBF_H") or "").strip()
    if not raw:
        return 0.0
    try:
        return max(0.0, float(numeric.number(raw, f"{path}: SITE_NODE_MTBF_H")))
    except BadInput as e:
        raise ConfigError(str(e)) from None


def site_facts(name: str) -> SiteFacts:
    """Ranks per node, device memory and filesystem bandwidth of a site (by name or profile path)."""
    from agpt import site as site_mod

    path = site_mod.profile_path(name)
    prof = site_mod.resolve_profile(path)
    shown = site_mod.display_path(path)
    rpn = int(_num(prof, "SITE_RANKS_PER_NODE", shown, 1))
    return SiteFacts(
        name=path.parent.name,
        ranks_per_node=max(rpn, 1),
        device_mem_gib=_num(prof, "SITE_DEVICE_MEM_GIB", shown),
        fs_bw_gbps=_num(prof, "SITE_FS_BW_GBPS", shown),
        profile=shown,
        host_mem_gib=_num(prof, "SITE_HOST_MEM_GIB", shown),
        node_mtbf_h=_mtbf(prof, shown),
        shrink=str(prof.get("SITE_FAILOVER_SHRINK", "")),
        stage=str(prof.get("SITE_STAGE") or "none"),
        stage_opts=_words(prof.get("SITE_STAGE_OPTS")),
        local_dir=str(prof.get("SITE_LOCAL_DIR") or "/tmp"),
        container=str(prof.get("SITE_CONTAINER") or "none"),
        container_opts=_words(prof.get("SITE_CONTAINER_OPTS")),
        ckpt_layout=_words(prof.get("SITE_CKPT_LAYOUT")),
        launcher=str(prof.get("SITE_LAUNCHER") or "hydra"),
    )


def _words(value: Any) -> list[str]:
    return [str(w) for w in value] if isinstance(value, list) else []


def _shown(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


# FAILOVER_WARM for each launcher of lib/launch.sh: one task on every host ({hosts}: all the job's, spares too),
# beside the attempts' launches for the whole job.
LAUNCH_WORDS = {
    "srun": "srun --overlap --no-kill --kill-on-bad-exit=0 -N {nhosts} --nodelist {hosts} --ntasks-per-node=1",
    "pals": "mpiexec -n {nhosts} --ppn 1 --hostfile {hostfile}",
    "hydra": "mpiexec -f {hostfile} -n {nhosts} -ppn 1",
    "openmpi": "mpirun -np {nhosts} --hostfile {hostfile} --map-by ppr:1:node",
}


def warm_row(launcher: str, container: str, image: str) -> str:
    """`agpt check`'s warm-ranks line: the FAILOVER_WARM words for the site's launcher, or why it cannot keep
    parked processes across attempts (the loop then runs without warm ranks)."""
    if container not in ("", "none") and image:
        return (f"cannot keep parked processes: ranks run in an image (SITE_CONTAINER={container}), the parked "
                "processes would run on the host; the loop runs without warm ranks")  # fmt: skip
    words = LAUNCH_WORDS.get(launcher)
    if words is None:
        return f"cannot keep parked processes: no launch of one task per host for SITE_LAUNCHER={launcher!r}"
    return f"FAILOVER_WARM='{words}' and {{warm}} before the rank's command (off: FAILOVER_WARM empty)"


def _site_rows(rep: Report, facts: SiteFacts, job: dict[str, Any], cfg_path: Path) -> None:
    """How the environment reaches the nodes, what wraps each rank, how the checkpoint directory is laid out: the
    profile's choices (lib/env.sh env_stage, lib/launch.sh, env_ckpt_layout apply them), one line each."""
    extra = f" {_shown(facts.stage_opts)}" if facts.stage_opts else ""
    stage = {
        "yeet": f"agpt yeet{extra} copies the venv to {facts.local_dir} on every node",
        "copper": f"launch_copper.sh{extra} -v {facts.local_dir}/$USER/copper_mount; the venv read through "
        "Copper's FUSE cache",
        "sbcast": f"sbcast -pf{extra} of a tar of the venv to {facts.local_dir} on every node, unpacked there",
    }.get(facts.stage, "every rank reads the venv from the shared filesystem")
    rep.info("staging", f"{facts.stage} (SITE_STAGE): {stage}")
    image = job.get("container_image") or ""
    if not isinstance(image, str):
        raise ConfigError(f"{cfg_path}: job.container_image: must be a string (got {image!r})")
    opts = f" {_shown(facts.container_opts)}" if facts.container_opts else ""
    if facts.container == "none":
        wrap = "ranks run on the host" + (f" (job.container_image {image} is not used)" if image else "")
    elif not image:
        wrap = "no image (job.container_image): ranks run on the host"
    else:
        wrap = {
            "apptainer": f"apptainer exec --bind RUN_DIR,AGPT_HOME{opts} {image} CMD",
            "podman-hpc": f"podman-hpc run --rm --net host --uts host --ipc host --env-host -v RUN_DIR:RUN_DIR "
            f"-v AGPT_HOME:AGPT_HOME{opts} {image} CMD",
            "shifter": f"shifter --image={image} --volume=RUN_DIR:RUN_DIR --volume=AGPT_HOME:AGPT_HOME{opts} CMD",
            "pyxis": f"srun ... --container-image={image} --container-mounts=RUN_DIR:RUN_DIR,AGPT_HOME:AGPT_HOME"
            f"{opts} CMD",
        }[facts.container]
    rep.info("container", f"{facts.container} (SITE_CONTAINER): {wrap}")
    rep.info("warm ranks", warm_row(facts.launcher, facts.container, image))
    lay = facts.ckpt_layout
    if not lay:
        layout = "the filesystem's default (SITE_CKPT_LAYOUT empty)"
    elif lay[0] == "daos":
        layout = f"daos fs set-attr --path=RUN_DIR/ckpt {_shown(lay[1:])} (SITE_CKPT_LAYOUT)"
    else:
        layout = f"lfs setstripe {_shown(lay[1:])} RUN_DIR/ckpt (SITE_CKPT_LAYOUT)"
    rep.info("ckpt layout", layout)


def load_trainer_config(path: Path, raw: dict[str, Any], environ: Mapping[str, str]) -> tconfig.Config:
    """The trainer's view of the config (YAML < AGPT_* env), validated.  A `parallel:` section is read
    here (tensor parallelism) even by a trainer that does not know it yet."""
    cfg = tconfig.Config()
    body = {k: v for k, v in raw.items() if k != "parallel" or k in tconfig.SECTIONS}
    tconfig._apply(cfg, body, str(path))
    tconfig._apply(cfg, tconfig.env_overrides(environ), "environment")
    try:
        cfg.validate()
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return cfg


def tensor_parallel(raw: dict[str, Any], path: Path) -> int:
    par = raw.get("parallel") or {}
    if not isinstance(par, dict):
        raise ConfigError(f"{path}: 'parallel' must be a mapping")
    tp = par.get("tp", 1)
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise ConfigError(f"{path}: parallel.tp: must be a whole number >= 1 (got {tp!r})")
    return tp


def count_params(mc: tconfig.ModelConfig) -> tuple[int, int]:
    """(total parameters, parameters of one block), from the model built on the meta device."""
    import torch
    from torch import nn

    from agpt.train.model import Transformer

    # Built without the layers' default initialisers: meta tensors hold no values, and nn.init on one loads
    # torch._dynamo (seconds of every `agpt check`, for nothing).
    inits = ("normal_", "uniform_", "kaiming_uniform_", "trunc_normal_", "zeros_", "ones_", "constant_")
    kept = {name: getattr(nn.init, name) for name in inits}
    try:
        for name in inits:
            setattr(nn.init, name, lambda tensor, *_a, **_k: tensor)
        with torch.device("meta"):
            model = Transformer(mc)
    finally:
        for name, fn in kept.items():
            setattr(nn.init, name, fn)
    total = sum(p.numel() for p in model.parameters())
    block = sum(p.numel() for p in model.layers[0].parameters()) if mc.n_layers else 0
    return total, block


def _act_per_token_layer(mc: tconfig.ModelConfig, psize: int, tp: int) -> float:
    """Bytes one block keeps for backward, per token: the tensors its autograd graph saves.

    Attention: the fp32 RMSNorm input, the normed input, q, k, v, rotated q and k, k and v repeated to all
    heads (grouped-query attention), the attention output.  Feed-forward: the fp32 norm input, the normed
    input, w1 and w3 outputs, SiLU's output and the product fed to w2.  Compare Korthikanti et al. 2022,
    "Reducing Activation Recomputation in Large Transformer Models" (https://arxiv.org/abs/2205.05198),
    34·h bytes per token per layer for a GPT block with dropout and an MLP of 4h.
    """
    h, f = mc.dim, mc.hidden_dim
    kv = mc.n_kv_heads * (mc.dim // mc.n_heads)
    rep = 2 * h if mc.n_kv_heads != mc.n_heads else 0
    attn = psize * (h + h + 2 * kv + h + kv + rep + h) / tp + 4 * h
    mlp = psize * (h + 4 * f / tp) + 4 * h
    return attn + mlp


@dataclass(kw_only=True, slots=True)
class Memory:
    states: float  # bytes per device
    working: float
    act_ckpt: float  # activations at the given micro batch, checkpointing on
    act_full: float  # ... off

    def total(self, ckpt: bool) -> float:
        return self.states + self.working + (self.act_ckpt if ckpt else self.act_full)


def memory(cfg: tconfig.Config, total: int, block: int, world: int, tp: int, micro: int) -> Memory:
    tc, mc = cfg.train, cfg.model
    master, param, reduce = (DTYPE_BYTES[tc.master_dtype], DTYPE_BYTES[tc.param_dtype],
                             DTYPE_BYTES[tc.reduce_dtype])  # fmt: skip
    states = total / world * (master + master + 2 * master)
    working = block / tp * (2 * param + reduce)
    tokens = micro * tc.seq_len
    per_layer = _act_per_token_layer(mc, param, tp) * tokens
    logits = tokens * mc.vocab_size * (param + 4 + 4) / tp  # logits, fp32 copy for the loss, its gradient
    embed_out = tokens * mc.dim * param
    act_full = per_layer * mc.n_layers + logits + embed_out
    act_ckpt = tokens * mc.dim * param * mc.n_layers + per_layer + logits + embed_out
    return Memory(states=states, working=working, act_ckpt=act_ckpt, act_full=act_full)


def _gib(x: float) -> str:
    return f"{x / GIB:.1f}"


def _human(n: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n:g}"


def batch_fix(
    gb: int, micro: int, dp: int, rpn: int, tp: int, nodes: int, mc: tconfig.ModelConfig | None = None
) -> str:
    """Concrete ways out when global_batch is not a multiple of micro_batch × data-parallel ranks."""
    unit = micro * dp
    lo, hi = (gb // unit) * unit, (gb // unit + 1) * unit
    opts = [str(x) for x in (lo, hi) if x > 0]
    out = f"use train.global_batch {' or '.join(opts)}"
    micros = [m for m in range(1, micro) if gb % (m * dp) == 0]
    if micros:
        out += f", or train.micro_batch {max(micros)}"
    dp_per_node = rpn // tp if rpn % tp == 0 else 0
    if dp_per_node:
        fits = [n for n in range(1, 4 * nodes + 1) if gb % (micro * n * dp_per_node) == 0]
        below = [n for n in fits if n < nodes]
        above = [n for n in fits if n > nodes]
        near = ([max(below)] if below else []) + ([min(above)] if above else [])
        if near:
            out += f", or run on {' or '.join(map(str, near))} nodes"
        else:
            out += f" (no node count of {rpn} ranks per node divides {gb})"
    if mc is not None:
        world = dp * tp
        tps = [t for t in range(2, rpn + 1) if t != tp and rpn % t == 0 and world % t == 0
               and mc.n_heads % t == 0 and mc.n_kv_heads % t == 0 and mc.hidden_dim % t == 0
               and gb % (micro * (world // t)) == 0]  # fmt: skip
        if tps:
            out += f", or parallel.tp {' or '.join(map(str, tps[:2]))}"
    return out


def _data_checks(rep: Report, cfg: tconfig.Config, cfg_path: Path, raw: dict[str, Any], data: bool) -> None:
    synthetic = cfg.data.synthetic
    path = cfg.data.path
    where = f"{cfg_path}: data.path"
    if synthetic and not path:
        rep.add("data", "SYNTHETIC tokens (data.synthetic: true): no real data is read")
        return
    if not path:
        rep.add("data", "data.path is empty", f"{where}: empty; set it to a blend made by `agpt blend` "
                "(or data.synthetic: true for a smoke or test run)")  # fmt: skip
        return
    if not data:
        rep.info("data", f"{path}: not opened here (--no-data); the job checks it before launching")
        return
    from agpt.data import manifest as mf
    from agpt.errors import DataError

    try:
        m = mf.load(path)
    except DataError as exc:
        rep.add("data", f"{path}: no readable manifest", f"{where}: {exc}")
        return
    mpath = Path(path) / mf.MANIFEST
    vocab = (m.get("tokenizer") or {}).get("vocab_size")
    seq = m.get("seq_len")
    bad = []
    if not isinstance(vocab, int) or vocab > cfg.model.vocab_size or cfg.model.vocab_size - vocab >= 128:
        bad.append(f"{mpath}: tokenizer.vocab_size {vocab} does not match model.vocab_size "
                   f"{cfg.model.vocab_size} of {cfg_path} (a blend made with another tokenizer)")  # fmt: skip
    if seq != cfg.train.seq_len:
        bad.append(f"{mpath}: seq_len {seq} differs from train.seq_len {cfg.train.seq_len} of {cfg_path}; "
                   f"blend again with --seq-len {cfg.train.seq_len}")  # fmt: skip
    value = f"{path}: {m.get('num_samples', '?')} samples, vocab {vocab}, seq {seq}"
    if not bad:
        rep.add("data", value)
    for b in bad:
        rep.add("data", value, b)


def _run_dir_checks(rep: Report, run_dir: Path) -> None:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".agpt-check.{os.getpid()}"
        safewrite.replace(probe, "ok\n", sync=False)  # never through a link planted at the probe's name
        probe.unlink()
    except OSError as exc:
        rep.add(
            "run dir", str(run_dir), f"{run_dir}: not writable ({exc.strerror}); job.run_dir or AGPT_RUN_DIR"
        )
        return
    dirs = ckptdir.step_dirs(run_dir / rundir.CKPT)
    done = [d for d in dirs if d.complete]
    value = f"{run_dir}: writable"
    if done:
        value += f"; resumes from step {done[-1].step} (saved on {done[-1].world_size or '?'} ranks)"
    else:
        value += "; no checkpoint yet (starts at step 0)"
    # Not resumed, and overwritten when the run reaches that step: a person should look (the rule: ckptdir).
    bad = [f"{d.marker}: step {d.names_another_step} in a directory named {d.path.name}; move it aside"
           for d in dirs if d.names_another_step is not None]  # fmt: skip
    if not bad:
        rep.add("run dir", value)
    for b in bad:
        rep.add("run dir", value, b)
    # Exit 0 on purpose: the job script stops the chain on check's failure, and the trainer can still resume from
    # this step (data checked by size) or fall back to an older complete one (docs/trust.md).
    for d in dirs:
        if d.unreadable:
            rep.warn("run dir", f"{d.marker}: unreadable; the trainer tries step {d.step} with its data checked "
                     "by size only (never pruned)")  # fmt: skip


def _size(cfg_path: Path, job: dict[str, Any], facts: SiteFacts, nodes: int | None,
          ranks_per_node: int | None) -> tuple[int, int]:  # fmt: skip
    """(nodes, ranks per node): the flags, else the config's job section, else one node of the site's ranks."""
    for key in ("nodes", "ranks_per_node"):
        v = job.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ConfigError(f"{cfg_path}: job.{key}: must be a whole number > 0 (got {v!r})")
    if nodes is None:
        nodes = int(job.get("nodes") or 1)
    if nodes <= 0:
        raise BadInput(f"--nodes: must be at least 1 (got {nodes})")
    rpn = ranks_per_node or int(job.get("ranks_per_node") or 0) or facts.ranks_per_node
    if rpn <= 0:
        raise BadInput(f"--ranks-per-node: must be at least 1 (got {rpn})")
    return nodes, rpn


def _runs_the_trainer(job: dict[str, Any]) -> list[str]:
    """The words of job.command when it runs something other than `agpt train` (nothing to check), else []."""
    command = job.get("command")
    if command is None:
        return []
    words = shlex.split(command) if isinstance(command, str) else [str(w) for w in command]
    return [] if words[:2] == ["agpt", "train"] else words


def _layout_check(rep: Report, cfg_path: Path, mc: tconfig.ModelConfig, world: int, rpn: int, tp: int) -> int:
    """world = data x tensor: every size tensor parallelism splits must divide by tp.  Returns dp."""
    tp_bad = [f"{k} {v}" for k, v in (("model.n_heads", mc.n_heads), ("model.n_kv_heads", mc.n_kv_heads),
              ("ffn width", mc.hidden_dim), ("ranks per node", rpn)) if v % tp]  # fmt: skip
    if world % tp:
        tp_bad.append(f"world size {world}")
    dp = world // tp if world % tp == 0 else 0
    layout = f"{world} ranks = {dp or '?'} data x {tp} tensor"
    rep.add("layout", layout, f"{cfg_path}: parallel.tp: {tp} does not divide {', '.join(tp_bad)}; use a divisor "
            f"of each" if tp_bad else "")  # fmt: skip
    return max(world // tp, 1) if tp_bad else dp


def _batch_check(
    rep: Report, cfg_path: Path, cfg: tconfig.Config, dp: int, rpn: int, tp: int, nodes: int
) -> None:
    """global_batch is a whole number of micro-batches on every data-parallel rank."""
    tc = cfg.train
    unit = tc.micro_batch * dp
    bval = f"global {tc.global_batch} = {dp} data ranks x micro {tc.micro_batch} x accum {tc.global_batch / unit:.3g}"
    fix = ""
    if tc.global_batch % unit:
        fix = (f"{cfg_path}: train.global_batch: {tc.global_batch} on {dp} data-parallel ranks x micro_batch "
               f"{tc.micro_batch} is not a whole number of steps: "
               f"{batch_fix(tc.global_batch, tc.micro_batch, dp, rpn, tp, nodes, cfg.model)}")  # fmt: skip
    rep.add("batch", bval, fix)


def _python_check(rep: Report) -> bool:
    """This python imports torch (the job's environment is set up); False ends the checks."""
    try:
        import torch

        rep.add("python", f"{sys.executable} (torch {torch.__version__})")
        return True
    except ImportError as exc:
        rep.add("python", sys.executable, f"python env: {sys.executable} cannot import torch ({exc}); load the "
                "site's modules and venv (env_setup) or run `agpt setup`")  # fmt: skip
        return False


def _memory_fix(cfg: tconfig.Config, cfg_path: Path, facts: SiteFacts, total: int, block: int, world: int, tp: int,
                dp: int, rpn: int) -> str:  # fmt: skip
    """What makes the model fit when it does not at this micro batch: the knob, or why none will."""
    tc = cfg.train
    usable = facts.device_mem_gib * GIB * (1 - HEADROOM)
    mem = memory(cfg, total, block, world, tp, tc.micro_batch)
    need = mem.total(tc.activation_checkpointing)
    least = memory(cfg, total, block, world, tp, 1).total(True)
    if least > usable:
        room = usable - (least - mem.states)
        more = (f"; {math.ceil(mem.states * world / room / rpn)} nodes would hold the sharded state" if room > 0
                else "; even one block's working set does not fit: use tensor parallelism")  # fmt: skip
        return (f"{cfg_path}: model: cannot fit in {facts.device_mem_gib:g} GiB ({facts.profile}: "
                f"SITE_DEVICE_MEM_GIB) at any batch: {_gib(least)} GiB per device at micro_batch 1 with "
                f"activation checkpointing, short by {_gib(least - usable)} GiB{more}")  # fmt: skip
    opts = []
    if not tc.activation_checkpointing and mem.total(True) <= usable:
        opts.append("train.activation_checkpointing: true")
    fitting = [m for m in range(1, tc.micro_batch) if tc.global_batch % (m * dp) == 0 and
               memory(cfg, total, block, world, tp, m).total(tc.activation_checkpointing) <= usable]  # fmt: skip
    if fitting:
        opts.append(f"train.micro_batch: {max(fitting)}")
    if not opts:
        opts.append("train.activation_checkpointing: true and train.micro_batch: 1")
    return (f"{cfg_path}: train.micro_batch: {tc.micro_batch} needs {_gib(need)} GiB per device, "
            f"{facts.device_mem_gib:g} GiB minus {HEADROOM:.0%} headroom available: set "
            f"{' or '.join(opts)}")  # fmt: skip


def _memory_check(rep: Report, cfg: tconfig.Config, cfg_path: Path, facts: SiteFacts, total: int, block: int,
                  world: int, tp: int, dp: int, rpn: int) -> None:  # fmt: skip
    """The memory model's figure per device against the site's device memory less the headroom."""
    mem = memory(cfg, total, block, world, tp, cfg.train.micro_batch)
    need = mem.total(cfg.train.activation_checkpointing)
    split = (f"state {_gib(mem.states)} + working {_gib(mem.working)} + act {_gib(mem.act_ckpt)} ckpt on / "
             f"{_gib(mem.act_full)} off")  # fmt: skip
    if facts.device_mem_gib <= 0:
        rep.info("memory", f"{_gib(need)} GiB per device ({split}); {facts.profile} sets no device memory")
        return
    value = f"{_gib(need)} of {facts.device_mem_gib:g} GiB per device ({split})"
    fits = need <= facts.device_mem_gib * GIB * (1 - HEADROOM)
    rep.add(
        "memory", value, "" if fits else _memory_fix(cfg, cfg_path, facts, total, block, world, tp, dp, rpn)
    )


def _plan_facts(cfg: tconfig.Config, facts: SiteFacts, total: int, nodes: int, rpn: int,
                run_dir: Path | None) -> ckptplan.Facts:  # fmt: skip
    """What agpt.ckptplan decides from: this job's shape and state, the profile, the config's own keys, the run."""
    ck = cfg.checkpoint
    pinned = {k: float(getattr(ck, k)) for k in ckptplan.KEYS if f"checkpoint.{k}" in cfg.pinned}
    return ckptplan.Facts(
        nodes=nodes, ranks_per_node=rpn, state_bytes=total * DTYPE_BYTES[cfg.train.master_dtype] * 3,
        async_save=ck.async_save, local_keep=ck.local_keep, host_mem_gib=facts.host_mem_gib,
        node_mtbf_h=facts.node_mtbf_h, pinned=pinned, profile=facts.profile,
        measured_stall_s=ckptplan.measured_stall_s(run_dir) if run_dir is not None else None,
    )  # fmt: skip


def plan_lines(config: str | Path, *, site: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """The checkpoint plan of CONFIG's job on SITE as the job's start would make it before any job measured a stall
    (what `agpt jobgen` writes into the script's header).  No torch: the parameter count is the analytic one
    (agpt.train.config.ModelConfig.num_params, equal to the model's)."""
    cfg_path = Path(config)
    raw = yamlio.load_sections(cfg_path)
    job = raw.get("job") or {}
    if not isinstance(job, dict):
        raise ConfigError(f"{cfg_path}: 'job' must be a mapping")
    if _runs_the_trainer(job):
        return []
    facts = site_facts(site)
    nodes, rpn = _size(cfg_path, job, facts, None, None)
    cfg = load_trainer_config(cfg_path, raw, os.environ if environ is None else environ)
    return ckptplan.decide(_plan_facts(cfg, facts, cfg.model.num_params(), nodes, rpn, None)).lines()


def _plan_check(rep: Report, cfg: tconfig.Config, cfg_path: Path, facts: SiteFacts, total: int, nodes: int,
                rpn: int, run_dir: Path | None) -> ckptplan.Plan:  # fmt: skip
    """The checkpoint plan (agpt.ckptplan): the local tier on or off and why, both intervals.  A local tier the
    config turns on that does not fit the node's memory fails, with what would make it fit."""
    plan = ckptplan.decide(_plan_facts(cfg, facts, total, nodes, rpn, run_dir))
    ck = cfg.checkpoint
    node_state = total * DTYPE_BYTES[cfg.train.master_dtype] * 3 / nodes
    need = localtier.memory_per_node(node_state, ck.local_keep)
    cap = facts.host_mem_gib * GIB * TMPFS_SHARE
    fix = ""
    pinned_on = ck.local and any(
        f"checkpoint.{k}" in cfg.pinned for k in ("local_interval", "local_interval_s")
    )
    if pinned_on and facts.host_mem_gib > 0 and need > cap:
        one = localtier.memory_per_node(node_state, 1)
        more = math.ceil(need / cap * nodes)
        fix = (f"{cfg_path}: checkpoint.local_interval: the local tier needs {_gib(need)} GiB per node, more than "
               f"{TMPFS_SHARE:.0%} of {facts.host_mem_gib:g} GiB ({facts.profile}: SITE_HOST_MEM_GIB) that a tmpfs "
               f"holds by default: " + (f"set checkpoint.local_keep: 1 ({_gib(one)} GiB), " if ck.local_keep > 1
               and one <= cap else "") + f"run on {more} nodes or more, or set checkpoint.local_interval: 0 and "
               "checkpoint.local_interval_s: 0 (the tier off)")  # fmt: skip
    rep.add("local tier", plan.local_why, fix)
    rep.info("interval", plan.interval_why)
    for note in plan.notes:
        rep.info("", note)
    return plan


def _shrink_info(rep: Report, cfg: tconfig.Config, cfg_path: Path, facts: SiteFacts, total: int, block: int,
                 nodes: int, rpn: int, tp: int, environ: Mapping[str, str]) -> shrinklib.Layout:  # fmt: skip
    """The node counts the failover loop can shrink this job to when its spares run out (FAILOVER_SHRINK),
    from the same layout and memory model: the record `--run-dir` leaves for the loop."""
    tc = cfg.train
    world = nodes * rpn
    mem = memory(cfg, total, block, world, tp, tc.micro_batch)
    lay = shrinklib.Layout(
        nodes=nodes, ranks_per_node=rpn, tp=tp, global_batch=tc.global_batch, micro_batch=tc.micro_batch,
        state_bytes=mem.states * world, fixed_bytes=mem.total(tc.activation_checkpointing) - mem.states,
        usable_bytes=facts.device_mem_gib * GIB * (1 - HEADROOM), config=str(cfg_path), site=facts.name,
    )  # fmt: skip
    switch = environ.get("FAILOVER_SHRINK") or facts.shrink or "1"
    if switch == "0":
        where = (
            "FAILOVER_SHRINK=0"
            if environ.get("FAILOVER_SHRINK")
            else f"{facts.profile}: SITE_FAILOVER_SHRINK=0"
        )
        rep.info("shrink", f"off ({where}): a failure with no spare left hands over to the next job")
    else:
        for i, line in enumerate(shrinklib.summary(lay, environ.get("FAILOVER_MIN_NODES", ""))):
            rep.info("" if i else "shrink", line)
    return lay


def _volume_info(rep: Report, cfg: tconfig.Config, facts: SiteFacts, total: int) -> None:
    """What a checkpoint weighs (model + AdamW moments in the master dtype) and the tokens the run reads."""
    tc = cfg.train
    ck_bytes = total * DTYPE_BYTES[tc.master_dtype] * 3
    if facts.fs_bw_gbps > 0:
        secs = ck_bytes / (facts.fs_bw_gbps * 1e9)
        rep.info("checkpoint", f"{ck_bytes / 1e9:.4g} GB; >= {secs:.3g} s to write at the published {facts.fs_bw_gbps:g} GB/s "
                 f"(SITE_FS_BW_GBPS)")  # fmt: skip
    else:
        rep.info("checkpoint", f"{ck_bytes / 1e9:.4g} GB")
    per_step = tc.global_batch * tc.seq_len
    budget = per_step * tc.steps
    rep.info("tokens", f"{_human(per_step)} per step; {_human(budget)} in {tc.steps} steps "
             f"({budget / max(total, 1):.3g} per parameter)")  # fmt: skip


def check(
    config: str | Path,
    *,
    site: str,
    nodes: int | None = None,
    ranks_per_node: int | None = None,
    data: bool = True,
    run_dir: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Report:
    """Run every check; raises BadInput for input that leaves nothing to check (unknown site, no nodes)."""
    cfg_path = Path(config)
    raw = yamlio.load_sections(cfg_path)
    job = raw.get("job") or {}
    if not isinstance(job, dict):
        raise ConfigError(f"{cfg_path}: 'job' must be a mapping")
    facts = site_facts(site)
    nodes, rpn = _size(cfg_path, job, facts, nodes, ranks_per_node)
    world = nodes * rpn
    other = _runs_the_trainer(job)
    if other:
        rep = Report(title=f"agpt check {cfg_path} on {facts.name}: {nodes} node(s) x {rpn} ranks")
        rep.info("command", f"job.command runs {' '.join(other[:2])}, not the trainer: nothing to check")
        return rep
    rep = Report(title=f"agpt check {cfg_path} on {facts.name}: {nodes} node{'s' * (nodes != 1)} x {rpn} "
                 f"ranks = {world} ranks")  # fmt: skip
    cfg = load_trainer_config(cfg_path, raw, os.environ if environ is None else environ)
    sections = ", ".join(s for s in raw if s != "job") or "no trainer section (defaults)"
    rep.add("schema", f"{cfg_path}: {sections} valid")
    tp = tensor_parallel(raw, cfg_path)
    dp = _layout_check(rep, cfg_path, cfg.model, world, rpn, tp)
    _batch_check(rep, cfg_path, cfg, dp, rpn, tp, nodes)
    if not _python_check(rep):
        return rep
    total, block = count_params(cfg.model)
    mc = cfg.model
    rep.add("model", f"{_human(total)} parameters (meta device), {mc.n_layers} layers, dim {mc.dim}, "
            f"GQA {mc.n_heads}/{mc.n_kv_heads}")  # fmt: skip
    _memory_check(rep, cfg, cfg_path, facts, total, block, world, tp, dp, rpn)
    env = os.environ if environ is None else environ
    lay = _shrink_info(rep, cfg, cfg_path, facts, total, block, nodes, rpn, tp, env)
    _volume_info(rep, cfg, facts, total)
    plan = _plan_check(rep, cfg, cfg_path, facts, total, nodes, rpn, Path(run_dir) if run_dir else None)
    _site_rows(rep, facts, job, cfg_path)
    _data_checks(rep, cfg, cfg_path, raw, data)
    if run_dir is not None:
        _run_dir_checks(rep, Path(run_dir))
        if not rep.failures:  # the failover loop's facts for a shrink (failover.shrink), the trainer's plan
            shrinklib.write_layout(Path(run_dir), lay)
            ckptplan.write(Path(run_dir), plan)
    return rep


def main(argv: list[str] | None = None) -> int:
    """`python -m agpt.check SITE CONFIG`: the checkpoint plan's lines for a job script's header (lib/jobgen.sh)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m agpt.check SITE CONFIG", file=sys.stderr)
        return 2
    try:
        lines = plan_lines(args[1], site=args[0])
    except BadInput as e:
        print(f"agpt: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
