"""Seeded permutations whose stream never changes with the numpy version.

numpy documents that `Generator` streams may change between releases, and a blend must give the same
samples years later. We use a counter-based generator instead: SplitMix64 (Steele, Lea and Flood
2014) of `stream_key + i * golden_gamma`, computed with vectorized uint64 arithmetic (wrap-around is
defined for numpy unsigned integers). A permutation of n items is the stable argsort of n such keys,
so it depends only on (seed, purpose, ids), never on how the work is split across ranks.
"""

from __future__ import annotations

import hashlib

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def stream_key(seed: int, *ids: object) -> int:
    """A 64-bit key for one stream, from the seed and a tuple of ids (purpose, file, epoch...)."""
    text = ":".join([str(int(seed)), *(str(i) for i in ids)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The SplitMix64 finalizer applied elementwise to uint64 counters already offset by the key."""
    with np.errstate(over="ignore"):
        z = x + GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def random_u64(key: int, n: int, start: int = 0) -> np.ndarray:
    """n uint64 values: element i is splitmix64(key + (start + i) * golden)."""
    with np.errstate(over="ignore"):
        counters = np.arange(start, start + n, dtype=np.uint64) * GOLDEN + np.uint64(key)
    return splitmix64(counters)


def permutation(key: int, n: int) -> np.ndarray:
    """A permutation of range(n) (int64) fixed by `key` alone."""
    if n <= 1:
        return np.arange(n, dtype=np.int64)
    return np.argsort(random_u64(key, n), kind="stable").astype(np.int64, copy=False)
