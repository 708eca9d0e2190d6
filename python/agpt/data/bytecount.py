"""Bytes per token of each corpus of a blend: what turns a loss in nats per token into bits per byte.

A loss per token depends on the tokenizer; bits per byte of the text does not, so it compares across
tokenizers and with published figures (The Pile, Gao et al. 2020, section 4: "bits per UTF-8 encoded
byte", https://arxiv.org/abs/2101.00027).  `agpt blend` counts, per corpus, the tokens of a spread of
documents (every k-th document of every file, k chosen so that at most BUDGET_TOKENS tokens are read)
and the UTF-8 bytes of their text decoded by the blend's own tokenizer, and pins both in the manifest's
`corpora[].bytes_per_token`.  Token counts include each document's end-of-document token, as the
held-out loss averages over those targets too.
"""

from __future__ import annotations

import math
from typing import Any

from agpt.data import mmidx

BUDGET_TOKENS = 2_000_000  # per corpus: a few seconds of decoding, a ratio good to well under 1%


def count(
    files: list[dict[str, Any]], corpora: list[str], sp: Any, budget: int = BUDGET_TOKENS
) -> dict[str, Any]:
    """corpus -> {"bytes_per_token", "bytes", "tokens", "docs"} over a deterministic spread of documents."""
    return {c: _corpus([f for f in files if f["corpus"] == c], sp, budget) for c in corpora}


def _corpus(members: list[dict[str, Any]], sp: Any, budget: int) -> dict[str, Any]:
    total = sum(int(f["tokens"]) for f in members)
    stride = max(1, math.ceil(total / budget)) if budget > 0 else 1
    pieces = sp.GetPieceSize()
    n_bytes = n_tokens = n_docs = 0
    for f in members:
        shard = mmidx.Shard(f["prefix"], check=False)
        for d in range(0, len(shard), stride):
            ids = shard.get(d)
            if ids.size and int(ids.max()) >= pieces:  # shards of another tokenizer (--tokenizer said so)
                return {"bytes_per_token": None, "note": f"token ids beyond the tokenizer's {pieces} pieces"}
            n_tokens += int(ids.size)
            n_bytes += len(sp.decode(ids.tolist()).encode("utf-8"))
            n_docs += 1
    return {
        "bytes_per_token": n_bytes / n_tokens if n_tokens else None,
        "bytes": n_bytes,
        "tokens": n_tokens,
        "docs": n_docs,
    }


def of(manifest: dict[str, Any]) -> dict[str, float]:
    """corpus -> bytes per token pinned in a blend's manifest (corpora made before it was pinned: absent)."""
    out: dict[str, float] = {}
    for c in manifest.get("corpora") or []:
        rec = c.get("bytes_per_token") if isinstance(c, dict) else None
        value = rec.get("bytes_per_token") if isinstance(rec, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            out[str(c["name"])] = float(value)
    return out
