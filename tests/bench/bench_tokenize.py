#!/usr/bin/env python3
"""Benchmark: `agpt tokenize` throughput vs raw `SentencePieceProcessor.encode` on the same text.

The baseline encodes the same documents in one process (batched, one thread: what one worker does),
with the text already in memory and nothing written. agpt then tokenizes the file end to end (read,
split, encode, write chunks, lay out shards) with 1 worker and with 2. Ratios > 0.9 per worker mean
the pipeline costs under 10%; the 2-worker ratio is bounded by the cores actually free.

Usage: tests/bench/bench_tokenize.py [--mb MB] [--vocab N] [--workers 1,2] [--repeat R] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from agpt.data.readers import Chunk, iter_documents
from agpt.data.tokenize import TokenizeSettings, run
from agpt.data.tokenizer import TrainSettings, load, train

SOURCES = ["argparse.py", "difflib.py", "configparser.py", "textwrap.py", "json/decoder.py", "string.py"]


def make_text(path: Path, mb: float) -> None:
    """Blank-line separated documents from Python's own sources, repeated up to `mb` megabytes."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    base = "\n\n".join((stdlib / s).read_text() for s in SOURCES)
    reps = max(1, int(mb * 1e6 / len(base.encode())) + 1)
    with open(path, "w") as fh:
        for i in range(reps):
            fh.write(base.replace("def ", f"def r{i}_"))
            fh.write("\n\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=8.0, help="input size in MB")
    ap.add_argument("--vocab", type=int, default=4000)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--chunk-mb", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--keep", default="", help="work directory to keep (default: a temporary one)")
    a = ap.parse_args()
    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench-tokenize-"))
    tmp.mkdir(parents=True, exist_ok=True)
    src = tmp / "input.txt"
    make_text(src, a.mb)
    size = src.stat().st_size
    model = tmp / "m.model"
    train(TrainSettings(inputs=[str(src)], output=str(model), vocab_size=a.vocab, max_sentences=50_000))
    sp = load(model)

    # Baseline: the same documents, in memory, raw encode in this process.
    chunk = Chunk(path=str(src), kind="txt", start=0, end=size, nbytes=size)
    docs = [t for t, _ in iter_documents(chunk)]

    def raw() -> int:
        n = 0
        for i in range(0, len(docs), 512):
            n += sum(len(x) for x in sp.encode(docs[i : i + 512], add_eos=True, num_threads=1))
        return n

    workers = [int(x) for x in a.workers.split(",")]
    best: dict[str, float] = {}
    tokens = 0
    for _ in range(a.repeat):  # interleaved, best of each: the machine may be shared
        t = time.perf_counter()
        tokens = raw()
        best["raw"] = min(best.get("raw", 1e30), time.perf_counter() - t)
        for w in workers:
            settings = TokenizeSettings(
                model=str(model),
                inputs=[str(src)],
                output=str(tmp / f"out-w{w}"),
                workers=w,
                chunk_bytes=int(a.chunk_mb * 1e6),
                shard_tokens=1 << 22,
                quiet=True,
                overwrite=True,
            )
            shutil.rmtree(settings.output, ignore_errors=True)
            t = time.perf_counter()
            report = run(settings)
            best[f"w{w}"] = min(best.get(f"w{w}", 1e30), time.perf_counter() - t)
            assert report["totals"]["tokens"] == tokens, (report["totals"]["tokens"], tokens)
    base_tps = tokens / best["raw"]
    print(
        f"tokenize: {size / 1e6:.1f} MB, {len(docs):,} documents, {tokens:,} tokens, vocab {a.vocab}, "
        f"cpus {os.cpu_count()}, best of {a.repeat}"
    )
    print(
        f"  raw SentencePieceProcessor.encode (1 process, in memory): {best['raw']:.2f} s  {base_tps:,.0f} tokens/s"
    )
    for w in workers:
        took = best[f"w{w}"]
        tps = tokens / took
        print(
            f"  agpt tokenize --workers {w} (read+encode+write): {took:.2f} s  {tps:,.0f} tokens/s  "
            f"{size / 1e6 / took:.2f} MB/s  ratio vs raw: {tps / base_tps:.2f}x  per worker: {tps / base_tps / w:.2f}x"
        )
    if not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
