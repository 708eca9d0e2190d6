"""Evaluation in the loop: held-out loss and bits per byte per corpus, and multiple-choice tasks.

Held-out loss at intervals: the first `eval.samples` samples of a held-out blend, overall and per corpus,
and in bits per byte with the bytes per token each corpus's manifest pins (agpt.data.bytecount).

The training loss is measured on batches the model is about to learn from; a held-out loss is the
check that "loss is not ground truth" asks for.  The same fixed samples are scored at every interval,
split over the data-parallel ranks in micro batches of `train.micro_batch`; every rank runs the same
number of forwards (FSDP gathers parameters collectively), padding with zero-weight samples.
The tasks of `eval.tasks` (agpt.evals) are read, checked and tokenized when the trainer is built, so
a bad task file stops the run before its first step, and scored on the same fixed items each time.
"""

from __future__ import annotations

import importlib
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from agpt.data import bytecount
from agpt.errors import BadInput, ConfigError, DataError
from agpt.evals import alarm, records, score, tasks
from agpt.train import data as tdata


class Held:
    """The held-out samples: a blend (checked against the training data) or a held-out synthetic stream."""

    def __init__(self, cfg: Any) -> None:
        ec, tc = cfg.eval, cfg.train
        self.n = tc.seq_len + 1
        self.corpora: list[str]
        self.bytes_per_token: dict[str, float] = {}  # corpus -> pinned in the blend's manifest
        if not ec.path:
            if cfg.data.path or cfg.data.stages:
                raise ConfigError("eval.path: required when eval.interval > 0 and training reads a blend")
            # Another seed of the synthetic stream: samples the run never trains on.
            self._syn = tdata.Synthetic(cfg.model.vocab_size, tc.seq_len, cfg.data.seed + 1_000_003)
            self.ds = None
            self.corpora = ["synthetic"]
            return
        data_mod = importlib.import_module("agpt.data")
        try:
            self.ds = data_mod.BlendedDataset(ec.path)
        except DataError as exc:
            raise DataError(f"eval.path: {exc}") from None
        ds = self.ds
        if ds.seq_len != tc.seq_len:
            raise DataError(
                f"eval.path: {ec.path} has samples of {ds.seq_len} tokens, train.seq_len is {tc.seq_len}"
            )
        if ds.vocab_size > cfg.model.vocab_size:
            raise DataError(
                f"eval.path: {ec.path} uses a tokenizer of {ds.vocab_size} tokens, "
                f"model.vocab_size is {cfg.model.vocab_size}"
            )
        train_path = cfg.data.path or (cfg.data.stages[0]["path"] if cfg.data.stages else "")
        if train_path:
            train_tok = data_mod.BlendedDataset(train_path, verify="sizes").manifest["tokenizer"]
            tok = ds.manifest["tokenizer"]
            if tok.get("sha256") != train_tok.get("sha256"):
                raise DataError(
                    f"eval.path: {ec.path} was tokenized with another tokenizer than the training data "
                    f"(sha256 {str(tok.get('sha256'))[:12]}... vs {str(train_tok.get('sha256'))[:12]}...)"
                )
        if len(ds) == 0:
            raise DataError(f"eval.path: {ec.path} holds no samples")
        self.corpora = list(ds.corpora)
        self.bytes_per_token = bytecount.of(ds.manifest)

    def sample(self, i: int) -> tuple[np.ndarray, int]:
        """Tokens of held-out sample i and the index of its corpus."""
        if self.ds is None:
            return self._syn.sample(i), 0
        item = self.ds[i % len(self.ds)]
        return np.asarray(item["tokens"]).astype(np.int64), self.corpora.index(item["corpus"])


def evaluate(trainer: Any, held: Held) -> dict[str, Any]:
    """{"eval_loss": mean over all held-out tokens, "eval": {corpus: mean}} (same on every rank)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    cfg = trainer.cfg
    samples, micro = cfg.eval.samples, cfg.train.micro_batch
    dp, dp_rank = trainer.layout.dp, trainer.layout.dp_rank
    n_corp = len(held.corpora)
    sums = torch.zeros(2 * n_corp, dtype=torch.float64, device=trainer.device)
    per_round = dp * micro
    rounds = (samples + per_round - 1) // per_round
    model = trainer.model
    with torch.no_grad():
        for r in range(rounds):
            idx = [r * per_round + dp_rank * micro + j for j in range(micro)]
            rows = [held.sample(i % samples) for i in idx]
            batch = torch.from_numpy(np.stack([t for t, _ in rows])).to(trainer.device)
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="none"
            ).reshape(micro, -1)
            if trainer.layout.tp_rank != 0:
                continue  # a tensor-parallel group scores the same samples: count them once
            for j, (i, (_, c)) in enumerate(zip(idx, rows, strict=True)):
                if i < samples:
                    sums[2 * c] += loss[j].double().sum()
                    sums[2 * c + 1] += loss.shape[1]
    if dist.is_initialized():
        dist.all_reduce(sums)
    total_loss, total_tokens = float(sums[0::2].sum()), float(sums[1::2].sum())
    per = {
        name: float(sums[2 * c]) / float(sums[2 * c + 1])
        for c, name in enumerate(held.corpora)
        if float(sums[2 * c + 1]) > 0
    }
    out: dict[str, Any] = {"eval_loss": total_loss / max(total_tokens, 1.0), "eval": per}
    bpt = held.bytes_per_token
    bpb = {name: records.bits_per_byte(loss, bpt[name]) for name, loss in per.items() if name in bpt}
    if bpb:
        out["bpb"] = bpb
    if bpb and len(bpb) == len(per):  # every corpus's bytes known: bits over all held-out bytes
        n_bytes = sum(
            float(sums[2 * c + 1]) * bpt[name] for c, name in enumerate(held.corpora) if name in per
        )
        out["eval_bpb"] = records.bits_per_byte(total_loss / n_bytes, 1.0)
    return out


def task_tokenizer(cfg: Any) -> Any:
    """The SentencePiece model the tasks are tokenized with: eval.tokenizer, else the one the held-out
    blend's (or the training blend's) manifest pins, the model's own tokenizer."""
    from agpt.data import manifest
    from agpt.data.tokenizer import load

    if cfg.eval.tokenizer:
        path = cfg.eval.tokenizer
    else:
        blend = cfg.eval.path or cfg.data.path or (cfg.data.stages[0]["path"] if cfg.data.stages else "")
        if not blend:
            raise ConfigError(
                "eval.tasks: need a tokenizer: set eval.tokenizer (training on synthetic data has none)"
            )
        path = str(manifest.tokenizer_path(blend, manifest.load(blend)["tokenizer"]))
    try:
        return load(path)
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"eval.tokenizer: {path}: not a SentencePiece model ({exc})") from None


class Tasks:
    """The fixed subset of every task of eval.tasks, checked and tokenized at construction (exit 2 before
    the first step on a bad file), scored by `run` on the trainer's model, sharded over its dp ranks."""

    def __init__(self, cfg: Any) -> None:
        sp = task_tokenizer(cfg)
        if sp.GetPieceSize() > cfg.model.vocab_size:
            raise ConfigError(
                f"eval.tokenizer: {sp.GetPieceSize()} pieces, more than model.vocab_size {cfg.model.vocab_size}"
            )
        specs = tasks.parse_specs(cfg.eval.tasks)
        try:
            self.prep = tasks.prepare(specs, sp.encode, cfg.train.seq_len, cfg.eval.task_items)
        except BadInput as exc:  # every rank reads the same file: reported once, by rank 0 (entry.py)
            raise ConfigError(str(exc)) from None
        tp, sp_on = cfg.parallel.tp, cfg.parallel.sequence_parallel
        self.pad_to = 64 * tp // math.gcd(64, tp) if sp_on else 64  # sequence parallelism splits T over tp

    def run(self, trainer: Any) -> dict[str, dict[str, Any]]:
        tc, lay = trainer.cfg.train, trainer.layout
        lls = score.loglikelihoods(
            trainer.model, self.prep.rows, device=trainer.device, budget=tc.micro_batch * tc.seq_len,
            seq_len=tc.seq_len, dp=lay.dp, dp_rank=lay.dp_rank, tp_rank=lay.tp_rank, pad_to=self.pad_to,
        )  # fmt: skip
        return score.results(self.prep, lls)


class InLoop:
    """Everything the loop evaluates every eval.interval steps, its record in eval.jsonl and the alarm.

    Rank 0 writes the records and judges them (every rank computes the same figures: the sums are
    all-reduced); the trainer shares its verdict with the other ranks before rolling back."""

    def __init__(self, cfg: Any, run_dir: Path | None, rank: int) -> None:
        self.cfg = cfg
        self.held = Held(cfg)
        self.tasks = Tasks(cfg) if cfg.eval.tasks else None
        self.run_dir = run_dir if rank == 0 else None  # only rank 0 reads and writes eval.jsonl
        self.rollback = cfg.eval.on_regression == "rollback"
        self.alarm = alarm.Alarm(acc_margin=cfg.eval.regression_acc, bpb_margin=cfg.eval.regression_bpb)

    def restart(self, step: int) -> None:
        """Before training from `step` (a start, a resume, a rollback): the records of later steps go, as
        those steps are about to be trained and evaluated again; the bests are those of what is left."""
        history: list[dict[str, Any]] = []
        if self.run_dir is not None:
            records.drop_after(self.run_dir, step)
            history = records.read(self.run_dir)
        self.alarm = alarm.Alarm(acc_margin=self.cfg.eval.regression_acc, bpb_margin=self.cfg.eval.regression_bpb,
                                 history=history)  # fmt: skip

    def run(self, trainer: Any) -> tuple[dict[str, Any], list[alarm.Regression]]:
        """The figures for metrics.jsonl, and (rank 0) the regressions against the bests so far."""
        t0 = time.perf_counter()
        out = evaluate(trainer, self.held)
        if self.tasks is not None:
            out["tasks"] = self.tasks.run(trainer)
        out["eval_s"] = round(time.perf_counter() - t0, 3)
        out = trainer.faults.evaluation(trainer.step, out)  # the tests' fault hook (rank 0)
        if self.run_dir is None:
            return out, []
        rec = {"step": trainer.step, "source": "loop", "tokens": trainer.consumed * trainer.cfg.train.seq_len}
        rec |= {k: out[k] for k in ("eval_loss", "eval", "bpb", "eval_bpb", "tasks", "eval_s") if k in out}
        regs = self.alarm.observe(rec)
        records.append(self.run_dir, rec)
        return out, regs


def line(step: int, out: dict[str, Any]) -> str:
    """`agpt: eval at step N: held-out X (CORPUS Y, ...)[, bpb B (...)][; TASK acc A acc_norm N ...] (S s)`."""
    per = ", ".join(f"{k} {v:.6g}" for k, v in out["eval"].items())
    text = f"agpt: eval at step {step}: held-out {out['eval_loss']:.9g} ({per})"
    if out.get("bpb"):
        overall = f" {out['eval_bpb']:.6g}" if "eval_bpb" in out else ""
        text += f", bits per byte{overall} (" + ", ".join(f"{k} {v:.6g}" for k, v in out["bpb"].items()) + ")"
    for name, r in (out.get("tasks") or {}).items():
        text += f"; {name} acc {r['acc']:.4f} acc_norm {r['acc_norm']:.4f} (chance {r['chance']:.4f}, {r['n']} items)"
    return text + f" ({out['eval_s']:.2f} s)"
