"""Which samples a rank reads at a step: a stateless function of (consumed samples, rank, world, batch).

Keeping no reader state is what makes resume exact and lets a run resume on a different number of
ranks: the global batch of step s is always samples [s·G, (s+1)·G), split among ranks in order.
Without a data path, a synthetic stream stands in: each sample is a pure function of (seed, index)
made of arithmetic runs, so there is something to learn and the loss goes down.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

import numpy as np

from agpt.errors import DataError


class Source(Protocol):
    def sample(self, index: int) -> np.ndarray: ...


class Synthetic:
    """Token runs t, t+d, t+2d, ... (mod vocab) restarting at random points: learnable, deterministic."""

    def __init__(self, vocab_size: int, seq_len: int, seed: int) -> None:
        self.vocab = vocab_size
        self.n = seq_len + 1
        self.seed = seed

    def sample(self, index: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, index])
        restart = rng.random(self.n) < 1 / 16
        restart[0] = True
        seg = np.cumsum(restart) - 1
        nseg = int(seg[-1]) + 1
        start = rng.integers(0, self.vocab, nseg)
        stride = rng.integers(1, 8, nseg)
        first = np.flatnonzero(restart)
        offset = np.arange(self.n) - first[seg]
        return ((start[seg] + offset * stride[seg]) % self.vocab).astype(np.int64)


class Blended:
    """agpt.data.BlendedDataset behind the Source protocol, checked against the configured shapes."""

    def __init__(self, path: str, vocab_size: int, seq_len: int) -> None:
        # Imported only when configured, so the synthetic path needs nothing from the data package.
        data_mod = importlib.import_module("agpt.data")
        self.path = path
        self.ds: Any = data_mod.BlendedDataset(path)
        self.vocab = vocab_size
        self.n = seq_len + 1
        ds_vocab = getattr(self.ds, "vocab_size", None)
        if isinstance(ds_vocab, int) and ds_vocab > vocab_size:
            raise DataError(
                f"model.vocab_size: {vocab_size} is smaller than the data's tokenizer ({ds_vocab})"
            )
        if len(self.ds) == 0:
            raise DataError(f"data.path: {path} holds no samples")
        first = np.asarray(self.ds[0]["tokens"])
        if first.shape[0] != self.n:
            raise DataError(
                f"data.path: {path} has samples of {first.shape[0] - 1} tokens, train.seq_len is {self.n - 1}"
            )

    def sample(self, index: int) -> np.ndarray:
        tokens = np.asarray(self.ds[index % len(self.ds)]["tokens"]).astype(np.int64)
        if tokens.size and int(tokens.max()) >= self.vocab:
            raise DataError(f"data.path: token {int(tokens.max())} >= model.vocab_size {self.vocab}")
        return tokens


def make_source(path: str, vocab_size: int, seq_len: int, seed: int, synthetic: bool = True) -> Source:
    """The blend at `path`; generated tokens only when `synthetic` says so (an empty path is no default)."""
    if path:
        return Blended(path, vocab_size, seq_len)
    if not synthetic:
        raise DataError(
            "data.path: empty; set it to a blend made by `agpt blend` (or data.synthetic: true for a smoke "
            "or test run on generated tokens)"
        )
    return Synthetic(vocab_size, seq_len, seed)


def share(*, rank: int, world: int, global_batch: int) -> tuple[int, int]:
    """(first, count): rank r's contiguous slice of a global batch, in rank order.  Where `world` does not divide
    the batch (train.uneven_batch: a run on fewer nodes), the first G mod world ranks hold one sample more."""
    base, extra = divmod(global_batch, world)
    return rank * base + min(rank, extra), base + (rank < extra)


def micro_steps(*, world: int, global_batch: int, micro_batch: int) -> int:
    """Micro-batches every rank runs per step: as many as the busiest rank's share needs (ranks run in step)."""
    busiest = -(-global_batch // world)
    return -(-busiest // micro_batch)


def sample_indices(
    *, consumed: int, rank: int, world: int, global_batch: int, micro_batch: int, micro_step: int
) -> range:
    """Global sample indices of one micro batch: rank r owns the r-th contiguous slice of the batch (share());
    the last micro batch of a share may be shorter, and empty past its end."""
    first, count = share(rank=rank, world=world, global_batch=global_batch)
    lo = min(count, micro_step * micro_batch)
    start = consumed + first
    return range(start + lo, start + min(count, lo + micro_batch))


def micro_batch(source: Source, indices: range) -> np.ndarray:
    return np.stack([source.sample(i) for i in indices])
