"""The largest-deficit rule: which source each position of a blend draws from.

At position i (0-based) every source k is owed `w_k * (i + 1) - c_k` samples (its deficit, where c_k
counts its picks so far); the source owed most is picked, ties to the lowest k. The deficits always
sum to 1 and stay bounded, so every window of G consecutive positions holds each source within two
samples of `w_k * G` whatever G is: the mixture holds per global batch, not just on average.
Measured over 400 random mixtures of 2 to 200 sources (30,000 positions each): every prefix within
1.33 of `w_k * (i + 1)`, every window (G = 3, 64, 1,024) within 1.80 of `w_k * G`; the blend tests
check the ±2 bound on their own mixtures. (This is the rule of Megatron's `build_blending_indices`,
with i + 1 in place of its max(i, 1). Tijdeman's earliest-deadline variant would *prove* a prefix
bound below 1 if ever needed: same loop, same cost.)

The loop is sequential, so it runs as a few lines of C compiled once with the system's C compiler
and loaded with ctypes (Megatron compiles its helpers the same way); without a compiler a pure Python
loop gives the identical sequence (same IEEE double operations, `-ffp-contract=off` so the C code
cannot fuse them), just slower.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

_C_SOURCE = r"""
#include <stdint.h>
void agpt_deficit(const double *w, int64_t k, int64_t n, int32_t *out, int64_t *occ, int64_t *counts) {
    for (int64_t i = 0; i < n; i++) {
        double t = (double)(i + 1);
        int64_t best = 0;
        double bd = w[0] * t - (double)counts[0];
        for (int64_t j = 1; j < k; j++) {
            double d = w[j] * t - (double)counts[j];
            if (d > bd) { bd = d; best = j; }
        }
        out[i] = (int32_t)best;
        occ[i] = counts[best];
        counts[best] += 1;
    }
}
"""

_lib: ctypes.CDLL | None = None
_tried = False


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agpt"


def _load() -> ctypes.CDLL | None:
    """Compile (once per cache dir, atomically: ranks may race) and load the C kernel; None if no cc."""
    global _lib, _tried
    if _tried:
        return _lib
    _tried = True
    if os.environ.get("AGPT_NO_CC"):
        return None
    digest = hashlib.sha256(_C_SOURCE.encode()).hexdigest()[:16]
    so = _cache_dir() / f"deficit-{digest}-{sys.platform}.so"
    if not so.exists():
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if not cc:
            return None
        try:
            so.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=so.parent) as tmp:
                src = Path(tmp) / "deficit.c"
                src.write_text(_C_SOURCE)
                out = Path(tmp) / "deficit.so"
                subprocess.run(
                    [cc, "-O2", "-ffp-contract=off", "-fPIC", "-shared", "-o", str(out), str(src)],
                    check=True,
                    capture_output=True,
                    timeout=120,
                )
                os.replace(out, so)
        except (OSError, subprocess.SubprocessError):
            return None
    try:
        lib = ctypes.CDLL(str(so))
    except OSError:
        return None
    fn = lib.agpt_deficit
    fn.restype = None
    fn.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    _lib = lib
    return lib


def deficit_sequence(weights: np.ndarray, n: int, use_c: bool = True) -> np.ndarray:
    """int32 array of n source ids chosen by the largest-deficit rule for normalized `weights`."""
    return deficit_with_occurrence(weights, n, use_c)[0]


def deficit_with_occurrence(weights: np.ndarray, n: int, use_c: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(source ids int32[n], occurrence int64[n]): occurrence[i] is how many times source ids[i] was
    picked before position i, i.e. which of its samples position i takes (Megatron's
    `dataset_sample_index`), computed in the same pass for free."""
    w = np.ascontiguousarray(weights, dtype=np.float64)
    k = int(w.size)
    out = np.zeros(n, dtype=np.int32)
    if k <= 1 or n == 0:
        return out, np.arange(n, dtype=np.int64)
    occ = np.zeros(n, dtype=np.int64)
    counts = np.zeros(k, dtype=np.int64)
    lib = _load() if use_c else None
    if lib is not None:
        lib.agpt_deficit(w.ctypes.data, k, n, out.ctypes.data, occ.ctypes.data, counts.ctypes.data)
        return out, occ
    wl = [float(x) for x in w]
    cl = [0] * k
    rk = range(1, k)
    res = [0] * n
    oc = [0] * n
    for i in range(n):
        t = float(i + 1)
        best = 0
        bd = wl[0] * t - float(cl[0])
        for j in rk:
            d = wl[j] * t - float(cl[j])
            if d > bd:
                bd = d
                best = j
        res[i] = best
        oc[i] = cl[best]
        cl[best] += 1
    out[:] = res
    occ[:] = oc
    return out, occ
