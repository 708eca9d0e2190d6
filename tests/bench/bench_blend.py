#!/usr/bin/env python3
"""Benchmark: blend index build (corpus first, then files) vs Megatron's flat `build_blending_indices`.

Both produce, for N samples, which file each sample comes from and its running index in that file,
from the same per-file weights. The baseline is megatron-core's compiled helper (`helpers_cpp`) when
it imports, else a Python transcription of its greedy loop (the output says which). Also prints the
worst per-corpus drift over every window of a global batch, which is why we blend corpora first.

Usage: tests/bench/bench_blend.py [--samples N] [--corpora K] [--files F] [--window G] [--repeat R]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from agpt.data.blend import Entry, plan
from agpt.data.greedy import deficit_with_occurrence


def megatron_helper() -> tuple[Any, str]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.datasets import helpers_cpp
    except Exception as exc:  # not installed or not built
        return (
            None,
            f"python transcription of megatron's greedy (megatron-core unavailable: {type(exc).__name__})",
        )
    return helpers_cpp.build_blending_indices, "megatron-core helpers_cpp.build_blending_indices (C++)"


def python_greedy(weights: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Megatron's build_blending_indices loop, transcribed (the fallback baseline)."""
    k = len(weights)
    w = [float(x) for x in weights]
    cur = [0] * k
    ds = np.zeros(n, dtype=np.int16)
    si = np.zeros(n, dtype=np.int64)
    for i in range(n):
        t = max(float(i), 1.0)
        best, err = 0, w[0] * t - cur[0]
        for j in range(1, k):
            e = w[j] * t - cur[j]
            if e > err:
                best, err = j, e
        ds[i] = best
        si[i] = cur[best]
        cur[best] += 1
    return ds, si


def drift(corpus_of_sample: np.ndarray, weights: np.ndarray, window: int) -> float:
    worst = 0.0
    for k, w in enumerate(weights):
        c = np.concatenate([[0], np.cumsum(corpus_of_sample == k)])
        worst = max(worst, float(np.abs((c[window:] - c[:-window]) - w * window).max()))
    return worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=2_000_000)
    ap.add_argument("--corpora", type=int, default=8)
    ap.add_argument("--files", type=int, default=64, help="files per corpus")
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    cw = rng.dirichlet(np.ones(a.corpora))
    entries = []
    flat = []
    corpus_of_file = []
    for k in range(a.corpora):
        fw = rng.dirichlet(np.ones(a.files) * 5)
        for j in range(a.files):
            entries.append(Entry(weight=float(cw[k] * fw[j]), prefix=f"c{k}f{j}", corpus=f"c{k}", line=0))
            flat.append(cw[k] * fw[j])
            corpus_of_file.append(k)
    flat_w = np.array(flat) / np.sum(flat)
    nfiles = len(entries)
    helper, label = megatron_helper()
    if helper is None and a.samples > 200_000:
        a.samples = 200_000  # the pure-Python baseline is slow
    n = a.samples

    def ours() -> np.ndarray:
        return plan(entries, n)[1]  # file of each sample + its index in that file

    def ours_single() -> np.ndarray:
        return deficit_with_occurrence(cw, n)[0]

    def base_single() -> np.ndarray:
        if helper is None:
            return python_greedy(cw, n)[0]
        ds = np.zeros(n, dtype=np.int16)
        si = np.zeros(n, dtype=np.int64)
        helper(ds, si, cw, a.corpora, n, False)
        return ds

    def base() -> np.ndarray:
        if helper is None:
            return python_greedy(flat_w, n)[0]
        ds = np.zeros(n, dtype=np.int16)
        si = np.zeros(n, dtype=np.int64)
        helper(ds, si, flat_w, nfiles, n, False)
        return ds

    ours()  # compile/load the kernel once
    t_ours = min(_time(ours) for _ in range(a.repeat))
    t_base = min(_time(base) for _ in range(a.repeat))
    t_ours1 = min(_time(ours_single) for _ in range(a.repeat))
    t_base1 = min(_time(base_single) for _ in range(a.repeat))
    cof = np.array(corpus_of_file)
    d_ours = drift(cof[ours()], cw / cw.sum(), a.window)
    d_base = drift(cof[base().astype(np.int64)], cw / cw.sum(), a.window)
    print(f"blend index: {n:,} samples, {a.corpora} corpora x {a.files} files ({nfiles} files)")
    print(f"baseline: {label}")
    print(
        f"  agpt (corpus first, then files): {t_ours:.3f} s   worst corpus drift per {a.window}-window: {d_ours:.2f}"
    )
    print(
        f"  baseline (flat over files):      {t_base:.3f} s   worst corpus drift per {a.window}-window: {d_base:.2f}"
    )
    print(f"ratio (baseline time / agpt time): {t_base / t_ours:.2f}x")
    print(
        f"same rule, one level ({a.corpora} corpora only): agpt {t_ours1:.3f} s, baseline {t_base1:.3f} s, "
        f"ratio {t_base1 / t_ours1:.2f}x"
    )
    return 0


def _time(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
