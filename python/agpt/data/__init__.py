"""Data for pre-training: tokenizers, Megatron MMIDIDX token shards, blends, and the training reader.

Training imports `BlendedDataset` (and `sample_indices` for stateless resume) from here; the rest is
used by `agpt tokenizer`, `agpt tokenize`, `agpt blend` and `agpt data`.
"""

from __future__ import annotations

from agpt.data.dataset import BlendedDataset, global_sample_index, micro_batches, sample_indices

__all__ = ["BlendedDataset", "global_sample_index", "micro_batches", "sample_indices"]
