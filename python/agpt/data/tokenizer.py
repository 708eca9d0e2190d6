"""SentencePiece tokenizers: train one from local text, load one, and pin it by its sha256.

Training is a thin wrapper so tests and demos can make a tokenizer from text already on the machine;
nothing is ever downloaded. Ids are fixed (unk 0, bos 1, eos 2, no pad) so EOD is always `eos_id`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agpt.digest import file_sha256
from agpt.errors import BadInput, DataError


def load(path: str | Path) -> Any:
    """A SentencePieceProcessor, or a DataError naming the file."""
    import sentencepiece as spm

    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: tokenizer model not found")
    sp = spm.SentencePieceProcessor()
    try:
        sp.Load(str(p))
    except (OSError, RuntimeError) as exc:
        raise DataError(f"{p}: not a SentencePiece model ({exc})") from None
    return sp


@dataclass(kw_only=True, slots=True)
class TrainSettings:
    """What `agpt tokenizer train` passes to SentencePiece; validated before any work starts."""

    inputs: list[str]
    output: str
    vocab_size: int = 8000
    model_type: str = "bpe"
    character_coverage: float = 0.9995
    max_sentences: int = 2_000_000
    max_sentence_length: int = 16384
    threads: int = 0
    text_key: str = "text"

    def __post_init__(self) -> None:
        if self.vocab_size < 16:
            raise BadInput(f"--vocab-size {self.vocab_size}: must be at least 16")
        if self.model_type not in {"bpe", "unigram", "char", "word"}:
            raise BadInput(f"--model-type {self.model_type}: use bpe, unigram, char or word")
        if not self.output.endswith(".model"):
            raise BadInput(f"--output {self.output}: must end with .model")
        if not 0 < self.character_coverage <= 1:
            raise BadInput(f"--character-coverage {self.character_coverage}: must be in (0, 1]")


def _sentences(settings: TrainSettings) -> Iterator[str]:
    """Lines of every document of every input (SentencePiece learns from sentences, not documents).
    Files of unknown type (source code, READMEs) are read as plain text."""
    from agpt.data.readers import expand_inputs, iter_documents, plan_chunks

    count = 0
    for chunk in plan_chunks(expand_inputs(settings.inputs), 1 << 26, any_text=True):
        for text, _ in iter_documents(chunk, settings.text_key):
            for line in text.split("\n"):
                line = line.strip()
                if line:
                    yield line[: settings.max_sentence_length]
                    count += 1
                    if count >= settings.max_sentences:
                        return


def train(settings: TrainSettings) -> dict[str, Any]:
    """Train, write `output` (and its `.vocab`) atomically, and return what was made."""
    import sentencepiece as spm

    out = Path(settings.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    sentences = list(_sentences(settings))
    if not sentences:
        raise BadInput("--input: no text found to train on")
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".sp-train-") as tmp:
        prefix = os.path.join(tmp, "m")
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_prefix=prefix,
                vocab_size=settings.vocab_size,
                model_type=settings.model_type,
                character_coverage=settings.character_coverage,
                unk_id=0,
                bos_id=1,
                eos_id=2,
                pad_id=-1,
                num_threads=settings.threads or min(os.cpu_count() or 1, 16),
                max_sentence_length=settings.max_sentence_length,
                input_sentence_size=settings.max_sentences,
                shuffle_input_sentence=False,
                byte_fallback=True,
                minloglevel=2,
            )
        except RuntimeError as exc:
            raise BadInput(f"sentencepiece: {str(exc).strip().splitlines()[-1]}") from None
        os.replace(prefix + ".vocab", out.with_suffix(".vocab"))
        os.replace(prefix + ".model", out)
    sp = load(out)
    return {
        "model": str(out),
        "sha256": file_sha256(out),
        "vocab_size": sp.GetPieceSize(),
        "sentences": len(sentences),
    }
