"""Downstream evaluation in a real training run on the demo's corpora: bits per byte falls and a task built
from the corpora rises above chance; lm-eval and the in-loop scorer agree on the same export and items;
kill -9 and resume leaves each step's evaluation once; the regression alarm warns or rolls back; a bad
task file stops the trainer before its first step, naming file, line and field."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from data_util import run_agpt
from train_util import kill_9_when, run_train

pytestmark = pytest.mark.slow

FIXTURES = ROOT / "tests" / "fixtures"
CORPORA = ("code", "prose", "legal")
WEIGHTS = (60, 30, 10)  # the demo's blend (bin/agpt-demo)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's three corpora (its own text step), every 8th document held out, a tokenizer of 512 pieces
    trained on the rest, a training blend (60/30/10) and a held-out blend, and the word_order task."""
    d = tmp_path_factory.mktemp("demo")
    py = sys.executable
    for cmd in (
        [py, str(FIXTURES / "local_corpus.py"), "--out", str(d / "text"), "--mb", "0.3"],
        [py, str(FIXTURES / "corpus_task.py"), "--text", str(d / "text"), "--out", str(d), "--choice-words", "6",
         "--context-words", "10"],
    ):  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    inputs = [a for c in CORPORA for a in ("--input", str(d / "train" / f"{c}.jsonl"))]
    r = run_agpt("tokenizer", "train", "--vocab-size", "512", "--output", str(d / "tok.model"), *inputs)
    assert r.returncode == 0, r.stderr
    for part, samples in (("train", 2400), ("held", 96)):
        lines = []
        for c, w in zip(CORPORA, WEIGHTS, strict=True):
            out = d / "tok" / f"{part}-{c}"
            r = run_agpt("tokenize", "--model", str(d / "tok.model"), "--input", str(d / part / f"{c}.jsonl"),
                         "--output", str(out), "--corpus", c, "--workers", "1", "--no-progress")  # fmt: skip
            assert r.returncode == 0, r.stderr
            lines.append(f"{w if part == 'train' else 1} {out}/data_00000 {c}\n")
        (d / f"{part}.list").write_text("".join(lines))
        r = run_agpt("blend", "--file-list", str(d / f"{part}.list"), "--seq-len", "64", "--num-samples",
                     str(samples), "--output", str(d / f"blend-{part}"))  # fmt: skip
        assert r.returncode == 0, r.stderr
    return d


def _eval_args(d: Path, *extra: str) -> list[str]:
    return [
        "--set", f"data.path={d / 'blend-train'}", "--set", f"eval.path={d / 'blend-held'}",
        "--set", "eval.samples=48", "--set", f"eval.tasks=[{d / 'word_order.jsonl'}]", *extra,
    ]  # fmt: skip


def _loop(run: Path) -> list[dict]:
    return [
        r for r in map(json.loads, (run / "eval.jsonl").read_text().splitlines()) if r["source"] == "loop"
    ]


def test_tiny_model_learns_bpb_falls_task_rises_and_lm_eval_agrees(demo: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = _eval_args(demo, "--set", "eval.interval=100", "--set", "eval.task_items=180",
                      "--set", "train.log_interval=50", "--set", "optim.warmup_steps=10")  # fmt: skip
    r = run_train(1, run, "--steps", "300", "--ckpt-interval", "100", *args, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("agpt: eval at step")]
    assert len(lines) == 3 and "bits per byte" in lines[0] and "word_order acc" in lines[0], r.stdout
    recs = _loop(run)
    assert [x["step"] for x in recs] == [100, 200, 300]
    first, last = recs[0], recs[-1]
    # Bits per byte falls, on every corpus and overall.
    assert set(last["bpb"]) == set(CORPORA)
    assert all(last["bpb"][c] < first["bpb"][c] for c in CORPORA), (first["bpb"], last["bpb"])
    assert last["eval_bpb"] < first["eval_bpb"]
    # bpb is the loss in bits over the bytes per token the held-out blend pinned.
    pinned = {c["name"]: c["bytes_per_token"]["bytes_per_token"]
              for c in json.loads((demo / "blend-held" / "manifest.json").read_text())["corpora"]}  # fmt: skip
    for c in CORPORA:
        assert math.isclose(last["bpb"][c], last["eval"][c] / math.log(2) / pinned[c], rel_tol=1e-9)
    # The task: 180 items, chance 1/3; the trained model is well above it (the binomial sd at 1/3 is 0.035).
    task = last["tasks"]["word_order"]
    assert task["n"] == 180 and math.isclose(task["chance"], 1 / 3, rel_tol=1e-5)
    assert task["acc"] > 0.45 and task["acc_norm"] > 0.45, recs
    metrics = {m["step"]: m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    assert metrics[300]["bpb"] == last["bpb"] and metrics[300]["tasks"]["word_order"]["acc"] == task["acc"]

    # The same export, the same items: lm-eval and the in-loop scorer.
    exp = tmp_path / "step-300"
    x = run_agpt("ckpt", "export", str(run / "ckpt" / "step-300"), str(exp), "--dtype", "fp32")
    assert x.returncode == 0, x.stderr
    import torch

    from agpt.evalexport import offline
    from agpt.evals import tasks

    opts = {"specs": tasks.parse_specs([str(demo / "word_order.jsonl")]), "limit": 180, "max_length": 64}
    # One torch thread, as each rank has (OMP_NUM_THREADS=1): a second one on the 2 loaded cores only spins,
    # a third more CPU for these two scorings (measured 14.2 -> 9.2 CPU-s for lm-eval's).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ours = offline.evaluate_export(exp, offline.Options(scorer="agpt", **opts))  # type: ignore[arg-type]
        theirs = offline.evaluate_export(exp, offline.Options(scorer="lm-eval", device="cpu", **opts))  # type: ignore[arg-type]
    finally:
        torch.set_num_threads(threads)
    a, b = ours["tasks"]["word_order"], theirs["tasks"]["word_order"]
    assert (a["acc"], a["acc_norm"], a["n"]) == (b["acc"], b["acc_norm"], b["n"]), (a, b)
    diff = max(abs(u - v) for i, j in zip(ours["per_item"]["word_order"], theirs["per_item"]["word_order"],
                                          strict=True) for u, v in zip(i, j, strict=True))  # fmt: skip
    assert diff < 1e-3, diff  # fp32 both sides; measured about 2e-5 nats (summation order of two kernels)
    print(
        f"\nstep 300: in loop (bf16) {task}; export (fp32) agpt {a}, lm-eval {b}; max |d loglik| {diff:.2e}"
    )
    for x in recs:  # the figures docs/eval.md quotes
        bpb = " / ".join(f"{x['bpb'][c]:.3f}" for c in CORPORA)
        acc = x["tasks"]["word_order"]["acc"]
        print(f"step {x['step']}: bpb {bpb} (all {x['eval_bpb']:.3f}); word_order acc {acc:.3f}; eval {x['eval_s']} s, "
              f"step {metrics[x['step']]['step_s']} s")  # fmt: skip

    # agpt eval appends to eval.jsonl with the step; the plot and the failover report show it all.
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        (ROOT / "jobs/configs/tiny.yaml")
        .read_text()
        .replace("synthetic: true", f"path: {demo / 'blend-train'}")
    )
    e = run_agpt("eval", str(exp), "--config", str(cfg), "--set", f"eval.tasks=[{demo / 'word_order.jsonl'}]",
                 "--set", "eval.task_items=180", "--scorer", "agpt", "--run-dir", str(run))  # fmt: skip
    assert e.returncode == 0, e.stderr
    assert "word_order" in e.stdout
    agpt_rec = [
        r for r in map(json.loads, (run / "eval.jsonl").read_text().splitlines()) if r["source"] == "agpt"
    ]
    assert [r["step"] for r in agpt_rec] == [300] and agpt_rec[0]["tasks"]["word_order"]["acc"] == a["acc"]
    # The chain's evaluation job: every 2nd checkpoint held (300 of the kept 200 and 300), exported, scored, released.
    m = run_agpt("chain", "eval-mark", str(run), "--every", "2")
    assert (m.returncode, m.stdout) == (0, "300\n"), m.stderr
    h = run_agpt("eval", "--held", "--run-dir", str(run), "--config", str(cfg), "--set",
                 f"eval.tasks=[{demo / 'word_order.jsonl'}]", "--scorer", "agpt", "--json")  # fmt: skip
    assert h.returncode == 0, h.stderr
    held = [
        r for r in map(json.loads, (run / "eval.jsonl").read_text().splitlines()) if r["source"] == "agpt"
    ]
    assert [r["step"] for r in held] == [300, 300] and held[1]["export"] == str(run / "exports" / "step-300")
    assert abs(held[1]["tasks"]["word_order"]["acc"] - a["acc"]) <= 0.02  # a bf16 export, scored in fp32
    assert not (run / "exports" / "step-300").exists() and not (run / "ckpt/step-300/.eval-hold").exists()
    p = run_agpt("plot", str(run), "-o", str(tmp_path / "plot.png"))
    assert p.returncode == 0, p.stderr
    (run / "events.jsonl").write_text(json.dumps({"event": "stop", "jobid": "1", "attempt": 1, "verdict": "done",
                                                  "exit": 0, "time": 0}) + "\n")  # fmt: skip
    rep = run_agpt("failover", "report", str(run))
    assert rep.returncode == 0, rep.stderr
    assert "evaluation (eval.jsonl, 5 records):" in rep.stdout
    assert "  step 300 (loop): bits per byte" in rep.stdout and "word_order acc" in rep.stdout


def test_kill_9_and_resume_leaves_each_steps_evaluation_once(demo: Path, tmp_path: Path) -> None:
    """Two ranks (the tasks sharded over both): killed after the evaluation of step 6 was written, resumed
    from the checkpoint of step 4: steps 5-6 are trained and evaluated again, and eval.jsonl holds each
    evaluation once, equal to an uninterrupted run's."""
    args = ["--steps", "9", "--ckpt-interval", "4", *_eval_args(demo, "--set", "eval.interval=3",
            "--set", "eval.task_items=30")]  # fmt: skip
    ref = run_train(2, tmp_path / "ref", *args)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    run = tmp_path / "run"
    kill_9_when(2, run, tmp_path / "first.log", args,
                (lambda: (run / "ckpt/step-4/.complete").exists(), "step-4 complete"),
                (lambda: '"step": 6' in (run / "eval.jsonl").read_text(), "step 6 evaluated"))  # fmt: skip
    assert not (run / "ckpt/step-8/.complete").exists()  # killed before step 8: steps 5-6 are redone
    r = run_train(2, run, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "step-4 (step 4" in r.stdout
    got, want = _loop(run), _loop(tmp_path / "ref")
    assert [x["step"] for x in got] == [3, 6, 9]
    strip = lambda rec: {k: v for k, v in rec.items() if k not in ("time", "eval_s")}  # noqa: E731
    assert [strip(x) for x in got] == [strip(x) for x in want]


def test_regression_alarm_warns_or_rolls_back_like_a_spike(demo: Path, tmp_path: Path) -> None:
    args = ["--steps", "8", "--ckpt-interval", "2", *_eval_args(demo, "--set", "eval.interval=2",
            "--set", "eval.task_items=30", "--set", "eval.regression_acc=0.2", "--set", "eval.regression_bpb=0.5")]  # fmt: skip
    fault = {"AGPT_FAULT_EVAL_AT": "6"}  # the evaluation of step 6 scores 0 and bpb x 10 (train/faults.py)
    warn = tmp_path / "warn"
    r = run_train(1, warn, *args, env=fault)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "agpt: event: eval regression: bpb/code rose to" in r.stdout and "at step 6" in r.stdout
    evs = [json.loads(x) for x in (warn / "health.jsonl").read_text().splitlines()]
    assert {e["event"] for e in evs} == {"eval_regression"} and {e["step"] for e in evs} == {6}
    assert {e["metric"] for e in evs} >= {"bpb/code", "word_order/acc"}

    back = tmp_path / "back"
    r = run_train(1, back, *args, "--set", "eval.on_regression=rollback", env=fault)
    assert r.returncode == 0, r.stdout + r.stderr
    evs = [json.loads(x) for x in (back / "health.jsonl").read_text().splitlines()]
    rb = [e for e in evs if e["event"] == "rollback"]
    assert len(rb) == 1 and (rb[0]["reason"], rb[0]["ckpt_step"], rb[0]["skip"]) == (
        "eval_regression",
        4,
        [5, 6],
    )
    assert json.loads((back / "skips.json").read_text())["skip"] == [[5, 6]]
    # Step 6 was evaluated again after the rollback (on other batches): once in eval.jsonl, not regressed.
    recs = _loop(back)
    assert [x["step"] for x in recs] == [2, 4, 6, 8]
    assert recs[2]["tasks"]["word_order"]["acc"] > 0
    (back / "events.jsonl").write_text(json.dumps({"event": "stop", "jobid": "1", "attempt": 1, "verdict": "done",
                                                   "exit": 0, "time": 0}) + "\n")  # fmt: skip
    rep = run_agpt("failover", "report", str(back))
    assert (
        rep.returncode == 0
        and "eval_regression" in rep.stdout
        and '"reason": "eval_regression"' in rep.stdout
    )


@pytest.mark.parametrize(
    "ranks, line, want",
    [
        (2, {"context": "a b", "choices": ["c", "d"]}, ":2: answer: missing"),
        (1, {"context": "a b", "choices": ["c", "d"], "answer": 2}, r":2: answer: 2 is out of range \(2 choices: 0\.\.1\)"),
        (1, {"context": "a b", "choices": ["c", " ".join(["word"] * 80)], "answer": 0},
         r":2: choices\[1\]: \d+ tokens, longer than the sequence length 64 \(train.seq_len\)"),
        (1, None, r": task 'gone': no such file"),
    ],
)  # fmt: skip
def test_a_bad_task_file_stops_training_before_its_first_step(
    demo: Path, tmp_path: Path, ranks: int, line, want: str
) -> None:
    """Exit 2 before step 1 with one line naming file, line and field.  Every rank checks the file and fails
    alike; rank 0 alone says so (agpt.train.entry): the first file on two ranks shows the line is printed once,
    the others on one (the check is the same on every rank; a plain rank's start is 3 CPU-s of importing torch)."""
    import re

    task = tmp_path / ("gone.jsonl" if line is None else "t.jsonl")
    if line is not None:
        task.write_text(
            json.dumps({"context": "x y", "choices": ["z", "w"], "answer": 1})
            + "\n"
            + json.dumps(line)
            + "\n"
        )
    # plain: the ranks end before their first step, and once (1 of 5 full runs) the fork server's 2 ranks waited
    # here for the test's 300 s instead; not yet understood (tests/python/agpt_zygote.py), so this start is plain
    r = run_train(ranks, tmp_path / "run", "--steps", "2", *_eval_args(demo, "--set", "eval.interval=1",
                  "--set", f"eval.tasks=[{task}]"), plain=True)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert re.fullmatch(rf"agpt: error: {re.escape(str(task))}{want}\n", r.stderr), r.stderr
    assert "step=" not in r.stdout
