"""The reader training uses: `BlendedDataset(DIR)[i] -> {"tokens": int64[L+1], "corpus": str}`.

Everything is memory-mapped and `ds[i]` touches O(1) index entries plus the tokens it returns, so
opening a blend of a billion samples costs no memory and each rank reads only what it trains on.
The manifest is verified on open (default level `idx`: shard `.idx` hashes and all sizes; see
`manifest` for the levels) and mismatching data is refused with a DataError (exit 2) naming the first
mismatch. Pass `tokenizer=PATH` to also require that the trainer's tokenizer is the pinned one.

Resume is stateless: which samples a rank reads depends only on how many samples were consumed, so
no sampler state needs checkpointing. See `sample_indices`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from agpt.data import manifest as mf
from agpt.data import mmidx
from agpt.errors import BadInput


def sample_indices(
    consumed_samples: int, rank: int, world_size: int, micro_batch_size: int, global_batch_size: int
) -> np.ndarray:
    """Global sample indices that data-parallel `rank` reads for the global batch starting at
    `consumed_samples`, shape (accumulation_steps, micro_batch_size).

    The global batch is samples [C, C + G) with C = consumed_samples (after k steps, C = k * G);
    rank r owns the contiguous slice [C + r*G/W, C + (r+1)*G/W) and reads it as G/(W*m) micro-batches
    of m samples, in order: micro-step j is `result[j]`. Index i is `BlendedDataset[i]`, so the
    per-corpus mix of every global batch is what `agpt blend` guaranteed (within two samples).
    To resume, pass the consumed-sample count saved with the checkpoint (or step * G).
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise BadInput(f"rank {rank} / world size {world_size}: rank must be in 0..world_size-1")
    if micro_batch_size < 1 or global_batch_size < 1:
        raise BadInput("micro and global batch sizes must be positive")
    if global_batch_size % (world_size * micro_batch_size):
        raise BadInput(
            f"global batch {global_batch_size} is not a multiple of world size {world_size} "
            f"x micro batch {micro_batch_size}"
        )
    if consumed_samples < 0:
        raise BadInput(f"consumed samples {consumed_samples}: must be >= 0")
    per_rank = global_batch_size // world_size
    start = consumed_samples + rank * per_rank
    return np.arange(start, start + per_rank, dtype=np.int64).reshape(-1, micro_batch_size)


def global_sample_index(
    consumed_samples: int,
    rank: int,
    world_size: int,
    micro_batch_size: int,
    global_batch_size: int,
    micro_step: int = 0,
    position: int = 0,
) -> int:
    """One entry of `sample_indices`: the sample at `position` of micro-batch `micro_step`."""
    table = sample_indices(consumed_samples, rank, world_size, micro_batch_size, global_batch_size)
    return int(table[micro_step, position])


def micro_batches(
    ds: BlendedDataset,
    consumed_samples: int,
    rank: int,
    world_size: int,
    micro_batch_size: int,
    global_batch_size: int,
) -> Iterator[np.ndarray]:
    """This rank's micro-batches from `consumed_samples` on, each int64 (micro_batch_size, L+1):
    accumulation steps of one global batch, then the next global batch. Stops at the blend's end."""
    consumed = consumed_samples
    while consumed + global_batch_size <= len(ds):
        table = sample_indices(consumed, rank, world_size, micro_batch_size, global_batch_size)
        for row in table:
            yield np.stack([ds[int(i)]["tokens"] for i in row])
        consumed += global_batch_size


class BlendedDataset:
    """A blend built by `agpt blend`, read by memory map; verified against its manifest on open."""

    def __init__(self, directory: str | Path, verify: str = "idx", tokenizer: str | None = None) -> None:
        self.directory = Path(directory)
        self.manifest: dict[str, Any] = mf.verify(self.directory, verify, tokenizer)
        m = self.manifest
        self.seq_len: int = int(m["seq_len"])
        self.num_samples: int = int(m["num_samples"])
        self.eod_id: int = int(m["tokenizer"]["eod_id"])
        self.vocab_size: int = int(m["tokenizer"]["vocab_size"])
        self._files = m["files"]
        self.corpora: list[str] = [c["name"] for c in m["corpora"]]
        self._corpus_of = [f["corpus"] for f in self._files]
        self._doc_off = np.array([f["doc_order_offset"] for f in self._files], dtype=np.int64)
        self._smp_off = np.array([f["sample_idx_offset"] for f in self._files], dtype=np.int64)
        d = self.directory
        self._blend_file = np.load(d / "blend_file.npy", mmap_mode="r")
        self._blend_sample = np.load(d / "blend_sample.npy", mmap_mode="r")
        self._doc_order = np.load(d / "doc_order.npy", mmap_mode="r")
        self._sample_idx = np.load(d / "sample_idx.npy", mmap_mode="r")
        self._shards: dict[int, mmidx.Shard] = {}

    def __len__(self) -> int:
        return self.num_samples

    def __getstate__(self) -> dict[str, Any]:
        """Pickle by path (DataLoader workers): memory maps are reopened, never copied."""
        return {"directory": str(self.directory)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["directory"], verify="sizes")  # type: ignore[misc]

    def _shard(self, f: int) -> mmidx.Shard:
        shard = self._shards.get(f)
        if shard is None:
            shard = mmidx.Shard(mf.shard_prefix(self.directory, self._files[f]), check=False)
            self._shards[f] = shard
        return shard

    def locate(self, i: int) -> tuple[int, int]:
        """(file, row of that file's sample index) of global sample i."""
        if not -self.num_samples <= i < self.num_samples:
            raise IndexError(f"sample {i} out of range (the blend holds {self.num_samples})")
        i %= self.num_samples
        return int(self._blend_file[i]), int(self._blend_sample[i])

    def __getitem__(self, i: int) -> dict[str, Any]:
        f, s = self.locate(int(i))
        shard = self._shard(f)
        row = self._smp_off[f] + s
        p0, o0 = (int(x) for x in self._sample_idx[row])
        p1, o1 = (int(x) for x in self._sample_idx[row + 1])
        docs = self._doc_order[self._doc_off[f] + p0 : self._doc_off[f] + p1 + 1]
        if p0 == p1:
            parts = [shard.get(int(docs[0]), o0, o1 - o0 + 1)]
        else:
            parts = [shard.get(int(docs[0]), o0)]
            parts += [shard.get(int(d)) for d in docs[1:-1]]
            parts.append(shard.get(int(docs[-1]), 0, o1 + 1))
        tokens = np.concatenate(parts).astype(np.int64)
        return {"tokens": tokens, "corpus": self._corpus_of[f]}

    def corpus_of(self, i: int) -> str:
        return self._corpus_of[self.locate(i)[0]]
