"""Data for pre-training: tokenizers, Megatron MMIDIDX token shards, blends, and the training reader.

Pipeline (each step is a command; see `agpt COMMAND --help`)::

    agpt tokenizer train --input corpus.txt --vocab-size 32000 --output tok.model
    agpt tokenize --model tok.model --input web/ --output shards/web --corpus web      # mpiexec -n R ok
    cat shards/*/filelist.txt > list.txt        # `WEIGHT PREFIX CORPUS` lines; scale weights per corpus
    agpt blend --file-list list.txt --seq-len 4096 --num-samples 1000000 --seed 1 --output blend/
    agpt data verify blend/ && agpt data inspect blend/ --show 2

Training reads the blend with stateless resume::

    from agpt.data import BlendedDataset, sample_indices
    ds = BlendedDataset(cfg.data.path, tokenizer=cfg.data.tokenizer)   # DataError (exit 2) on mismatch
    consumed = step * global_batch_size                               # saved with the checkpoint
    for micro_step, rows in enumerate(sample_indices(consumed, dp_rank, dp_world, micro_bs, global_bs)):
        batch = np.stack([ds[int(i)]["tokens"] for i in rows])        # (micro_bs, seq_len + 1) int64
        inputs, labels = batch[:, :-1], batch[:, 1:]

`micro_batches(ds, consumed, rank, world, micro, global)` yields the same batches as an iterator.
"""

from __future__ import annotations

from agpt.data.dataset import BlendedDataset, global_sample_index, micro_batches, sample_indices

__all__ = ["BlendedDataset", "global_sample_index", "micro_batches", "sample_indices"]
