"""What `agpt blend` prints and `agpt data inspect` shows: the mixture a blend really holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agpt.data import manifest as mf


def format_report(manifest: dict[str, Any]) -> str:
    """Per corpus: requested vs effective weight, samples, tokens held, epochs (repeats flagged)."""
    rows = [("corpus", "weight", "effective", "samples", "tokens", "epochs", "")]
    for c in manifest.get("corpora") or []:
        note = "repeated" if c["epochs"] > 1 else ""
        rows.append(
            (
                c["name"],
                f"{c['weight_requested']:.4f}",
                f"{c['weight_effective']:.4f}",
                f"{c['samples']:,}",
                f"{c['tokens']:,}",
                f"{c['epochs']:.3f}",
                note,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    repeated = [c["name"] for c in manifest.get("corpora") or [] if c["epochs"] > 1]
    if repeated:
        lines.append(
            f"note: {', '.join(repeated)} asked for more tokens than held: repeated in epochs "
            "(each epoch reshuffled)"
        )
    n, seq = manifest.get("num_samples"), manifest.get("seq_len")
    lines.append(
        f"{'?' if n is None else format(n, ',')} samples of {'?' if seq is None else seq + 1} tokens, "
        f"seed {'?' if manifest.get('seed') is None else manifest['seed']}, {len(manifest['files'])} shards"
    )
    return "\n".join(lines)


def inspect(directory: str | Path, show: int = 0) -> dict[str, Any]:
    """The manifest's mixture, plus the first `show` samples detokenized (needs the tokenizer)."""
    m = mf.load(directory)
    # mf.load checked every field's type; one a hand-made manifest leaves out is None (unknown) here
    info: dict[str, Any] = {
        k: m.get(k) for k in ("cache_key", "seq_len", "num_samples", "seed", "corpora", "tokenizer", "dtype")
    }
    info["corpora"] = info["corpora"] or []
    info["files"] = [
        {k: f.get(k) for k in ("prefix", "corpus", "weight", "docs", "tokens", "samples", "epochs")}
        for f in m["files"]
    ]
    if show > 0:
        from agpt.data.dataset import BlendedDataset
        from agpt.data.tokenizer import load

        ds = BlendedDataset(directory, verify="sizes")
        sp = load(mf.tokenizer_path(directory, m["tokenizer"]))
        samples = []
        for i in range(min(show, len(ds))):
            item = ds[i]
            ids = [int(t) for t in item["tokens"]]
            samples.append({"index": i, "corpus": item["corpus"], "tokens": ids, "text": sp.decode(ids)})
        info["samples"] = samples
    return info
