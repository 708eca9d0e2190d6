"""Score multiple-choice rows with a causal model: the log-likelihood of each choice's continuation.

Works on the trainer's FSDP/TP model in the loop and on a plain module (an export loaded by `agpt eval
--scorer agpt`).  Rows are sorted by length and packed into batches of at most `budget` tokens, each padded on the
right to a multiple of `pad_to` tokens (padding after the last real token changes nothing a causal
model computes for the tokens before it); batch b goes to data-parallel rank b mod dp.  Every rank runs the same
number of forwards, a one-row dummy where it has no batch left, since FSDP gathers parameters
collectively; the ranks of a tensor-parallel group score the same batch, and only tp rank 0 counts it.
The log-likelihoods are summed over ranks with one all-reduce, so every rank ends with all of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agpt.evals.tasks import Prepared, Row, accuracy, chance


@dataclass(frozen=True, slots=True)
class Batch:
    rows: tuple[int, ...]  # row indices
    width: int  # padded input length


def padded(n: int, pad_to: int, cap: int) -> int:
    return min(cap, -(-n // pad_to) * pad_to)


def plan(lengths: Sequence[int], *, budget: int, dp: int, pad_to: int, cap: int) -> list[list[Batch]]:
    """rounds[r][rank]: the batch that rank scores in round r (an empty one where it has none left).

    Longest rows first; a batch takes rows while rows x padded width stays within `budget` tokens (the
    training micro batch's micro_batch x seq_len, so eval needs no more activation memory than training),
    so short multiple-choice rows go many to a forward instead of one per padded sequence."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[Batch] = []
    cur: list[int] = []
    width = 0
    for i in order:
        if not cur:
            width = padded(lengths[i], pad_to, cap)
        if cur and (len(cur) + 1) * width > budget:
            batches.append(Batch(rows=tuple(cur), width=width))
            cur, width = [], padded(lengths[i], pad_to, cap)
        cur.append(i)
    if cur:
        batches.append(Batch(rows=tuple(cur), width=width))
    rounds = math.ceil(len(batches) / dp) if batches else 0
    empty = Batch(rows=(), width=min(pad_to, cap))
    return [
        [batches[r * dp + k] if r * dp + k < len(batches) else empty for k in range(dp)]
        for r in range(rounds)
    ]


def loglikelihoods(
    model: Any,
    rows: Sequence[Row],
    *,
    device: Any,
    budget: int,
    seq_len: int,
    dp: int = 1,
    dp_rank: int = 0,
    tp_rank: int = 0,
    pad_to: int = 64,
) -> list[float]:
    """Sum of log p(continuation token) over each row's continuation, in row order (same on every rank)."""
    import torch
    import torch.distributed as dist

    rounds = plan([len(r.tokens) - 1 for r in rows], budget=budget, dp=dp, pad_to=pad_to, cap=seq_len)
    out = torch.zeros(len(rows), dtype=torch.float64, device=device)
    with torch.no_grad():
        for mine in (r[dp_rank] for r in rounds):
            batch = torch.zeros((max(len(mine.rows), 1), mine.width), dtype=torch.long)
            for j, i in enumerate(mine.rows):
                toks = rows[i].tokens[:-1]
                batch[j, : len(toks)] = torch.tensor(toks, dtype=torch.long)
            logits = model(batch.to(device))
            if tp_rank != 0:
                continue
            for j, i in enumerate(mine.rows):
                row = rows[i]
                n = len(row.tokens) - 1  # inputs; target k is tokens[k + 1]
                lp = torch.log_softmax(logits[j, n - row.n_cont : n].float(), dim=-1)
                target = torch.tensor(row.tokens[n - row.n_cont + 1 :], dtype=torch.long, device=lp.device)
                out[i] = lp.gather(-1, target[:, None]).double().sum()
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(out)
    return [float(v) for v in out.tolist()]


def results(prep: Prepared, lls: Sequence[float]) -> dict[str, dict[str, Any]]:
    """task name -> {acc, acc_norm, n, chance} from the rows' log-likelihoods."""
    per = per_item(prep, lls)
    return {
        spec.name: {**accuracy(prep.items[t], per[spec.name]), "chance": round(chance(prep.items[t]), 6)}
        for t, spec in enumerate(prep.specs)
    }


def per_item(prep: Prepared, lls: Sequence[float]) -> dict[str, list[list[float]]]:
    """task name -> per item, the log-likelihood of each choice (for comparing two scorers item by item)."""
    per: dict[str, list[list[float]]] = {
        s.name: [[0.0] * len(it.choices) for it in prep.items[t]] for t, s in enumerate(prep.specs)
    }
    for row, ll in zip(prep.rows, lls, strict=True):
        per[prep.specs[row.task].name][row.item][row.choice] = ll
    return per
