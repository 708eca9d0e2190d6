"""Held-out loss at intervals: the first `eval.samples` samples of a held-out blend, overall and per corpus.

The training loss is measured on batches the model is about to learn from; a held-out loss is the
check that "loss is not ground truth" asks for.  The same fixed samples are scored at every interval,
split over the data-parallel ranks in micro batches of `train.micro_batch`; every rank runs the same
number of forwards (FSDP gathers parameters collectively), padding with zero-weight samples.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from agpt.errors import ConfigError, DataError
from agpt.train import data as tdata


class Held:
    """The held-out samples: a blend (checked against the training data) or a held-out synthetic stream."""

    def __init__(self, cfg: Any) -> None:
        ec, tc = cfg.eval, cfg.train
        self.n = tc.seq_len + 1
        self.corpora: list[str]
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
    return {"eval_loss": total_loss / max(total_tokens, 1.0), "eval": per}
