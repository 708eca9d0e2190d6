"""Fewer ranks, the same global batch (a shrink, FAILOVER_SHRINK): every step consumes the same samples in the same
order and reports the same loss, within the tolerance of another rank count (the reduction order differs).

Real gloo ranks under the real mpiexec, tiny config (global batch 8, micro batch 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from train_util import losses, run_train

pytestmark = pytest.mark.slow

ARGS = (
    "--steps",
    "3",
    "--ckpt-interval",
    "0",
    "--set",
    "optim.decay_steps=40",
    "--set",
    "checkpoint.save_final=false",
)
REL = 1e-4  # test_train_resume.py::test_one_rank_reports_the_same_global_loss: 1 rank against 2


def consumed(log: Path) -> dict[int, list[int]]:
    """Step -> the sample indices of weight 1, in data-rank then micro-batch order (AGPT_TEST_SAMPLE_LOG)."""
    rows: dict[int, list[tuple[int, int, list[int]]]] = {}
    for line in log.read_text().splitlines():
        _attempt, step, dp, micro, first, count, weight = line.split()
        if float(weight):
            rows.setdefault(int(step), []).append(
                (int(dp), int(micro), list(range(int(first), int(first) + int(count))))
            )
    return {s: [i for *_, idx in sorted(r) for i in idx] for s, r in sorted(rows.items())}


def test_three_ranks_split_eight_samples_unevenly_and_match_two(tmp_path: Path) -> None:
    """8 samples on 3 data ranks: 3, 3 and 2 in 2 micro-steps (the last rank's second is a zero-weight
    stand-in), exactly the samples of the 2-rank run, step for step, and its loss."""
    runs = {}
    for ranks, extra in ((2, {}), (3, {"AGPT_TRAIN_UNEVEN_BATCH": "true"})):
        log = tmp_path / f"samples.{ranks}"
        r = run_train(ranks, tmp_path / f"run{ranks}", *ARGS, env={"AGPT_TEST_SAMPLE_LOG": str(log), **extra})
        assert r.returncode == 0, r.stdout + r.stderr
        runs[ranks] = (r.stdout, consumed(log))
    out3 = runs[3][0]
    assert "global batch 8 = 3 dp ranks x 2-3 samples in 2 micro-steps of at most 2 (uneven" in out3
    assert runs[3][1] == runs[2][1] == {s: list(range(8 * (s - 1), 8 * s)) for s in (1, 2, 3)}
    got, want = losses(out3), losses(runs[2][0])
    assert sorted(got) == [1, 2, 3]
    for s in (1, 2, 3):
        assert got[s] == pytest.approx(want[s], rel=REL)


def test_a_batch_the_ranks_do_not_divide_is_refused_unless_uneven(tmp_path: Path) -> None:
    """Without train.uneven_batch the trainer never changes the split on its own: exit 2 with the numbers."""
    r = run_train(3, tmp_path / "run", *ARGS)
    assert r.returncode == 2, r.stdout + r.stderr
    assert (
        "train.micro_batch: global batch 8 is not a multiple of micro_batch 2 × 3 data-parallel ranks"
        in r.stderr
    )
