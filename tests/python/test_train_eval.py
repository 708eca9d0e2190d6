"""Held-out loss at intervals, overall and per corpus, in metrics.jsonl and the plot; eval blends that do
not match the training data are refused naming eval.path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_util import STDLIB, run_agpt
from train_util import run_train

pytestmark = pytest.mark.slow

CORPORA = {"code": ["json/encoder.py", "textwrap.py"], "prose": ["shlex.py", "string.py"]}


def _blend(d: Path, model: Path, out: str, seq_len: int, sources: dict[str, list[str]], skip: int) -> Path:
    """A blend of the corpora in `sources`, from every other block of their files, from block `skip`."""
    from agpt.data.blend import BlendSettings, build
    from agpt.data.tokenize import TokenizeSettings, run

    lines = []
    for name, files in sources.items():
        src = d / f"{out}-{name}.txt"
        blocks = [b for f in files for b in (STDLIB / f).read_text().split("\n\n") if b.strip()]
        src.write_text("\n\n".join(blocks[skip::2]))
        tok = d / f"{out}-{name}"
        run(TokenizeSettings(model=str(model), inputs=[str(src)], output=str(tok), workers=1, quiet=True,
                             corpus=name))  # fmt: skip
        for line in (tok / "filelist.txt").read_text().splitlines():
            w, prefix, corpus = line.split()
            lines.append(f"{float(w) * 0.5:.10g} {prefix} {corpus}\n")
    (d / f"{out}.list").write_text("".join(lines))
    build(BlendSettings(file_list=str(d / f"{out}.list"), seq_len=seq_len, num_samples=64, seed=1,
                        output=str(d / out)))  # fmt: skip
    return d / out


def test_held_out_loss_per_corpus_in_metrics_and_plot(tmp_path: Path, sp_model: Path) -> None:
    train = _blend(tmp_path, sp_model, "train", 64, CORPORA, 0)
    held = _blend(tmp_path, sp_model, "held", 64, CORPORA, 1)
    base = [
        "--set",
        f"data.path={train}",
        "--set",
        "model.vocab_size=640",
        "--set",
        "checkpoint.save_final=false",
    ]
    run = tmp_path / "run"
    r = run_train(2, run, "--steps", "4", *base, "--set", "eval.interval=2", "--set", "eval.samples=12",
                  "--set", f"eval.path={held}")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    evals = [ln for ln in r.stdout.splitlines() if ln.startswith("agpt: eval at step")]
    assert len(evals) == 2 and "code" in evals[0] and "prose" in evals[0], r.stdout
    recs = {rec["step"]: rec for rec in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    assert "eval_loss" not in recs[1] and "eval_loss" in recs[2] and "eval_loss" in recs[4]
    assert set(recs[4]["eval"]) == {"code", "prose"}
    assert recs[4]["eval_loss"] < recs[2]["eval_loss"]  # the model learns
    lo, hi = sorted(recs[4]["eval"].values())
    assert lo <= recs[4]["eval_loss"] <= hi  # the overall figure is the token-weighted mean
    p = run_agpt("plot", str(run), "-o", str(tmp_path / "plot.png"))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "plot.png").stat().st_size > 10_000

    # An eval blend of another sequence length, or from another tokenizer: exit 2 naming eval.path.
    short = _blend(tmp_path, sp_model, "short", 32, {"code": CORPORA["code"]}, 1)
    other_tok = tmp_path / "tok2"
    other_tok.mkdir()
    text = other_tok / "t.txt"
    text.write_text("\n".join((STDLIB / f).read_text() for f in ("bisect.py", "fnmatch.py", "string.py")))
    t = run_agpt(
        "tokenizer",
        "train",
        "--input",
        str(text),
        "--vocab-size",
        "500",
        "--output",
        str(other_tok / "m.model"),
    )
    assert t.returncode == 0, t.stderr
    foreign = _blend(tmp_path, other_tok / "m.model", "foreign", 64, {"code": CORPORA["code"]}, 1)
    for bad, why in ((short, "train.seq_len"), (foreign, "another tokenizer")):
        r = run_train(1, tmp_path / "bad", "--steps", "2", *base, "--set", "eval.interval=2",
                      "--set", f"eval.path={bad}")  # fmt: skip
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.startswith("agpt: error: eval.path:") and why in r.stderr, r.stderr


def test_data_stages_switch_at_until_tokens_and_resume_exactly_after_kill_9(
    tmp_path: Path,
    sp_model: Path,
) -> None:
    from train_util import kill_9_mid_save, same_steps

    code = _blend(tmp_path, sp_model, "code", 64, {"code": CORPORA["code"]}, 0)
    prose = _blend(tmp_path, sp_model, "prose", 64, {"prose": CORPORA["prose"]}, 0)
    # 8 samples of 64 tokens a step: stage 0 ends at sample 44, in the middle of step 6's batch.
    stages = f"data.stages=[{{path: {code}, until_tokens: 2816}}, {{path: {prose}}}]"
    args = ("--steps", "10", "--ckpt-interval", "4", "--set", stages, "--set", "model.vocab_size=640")
    ref = run_train(2, tmp_path / "ref", *args)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    assert "agpt: event: data stage 1 (" in ref.stdout and "from step 6" in ref.stdout, ref.stdout
    pins = json.loads((tmp_path / "ref" / "stages.json").read_text())["stages"]
    assert [p["until_tokens"] for p in pins] == [2816, None] and all(len(p["cache_key"]) == 64 for p in pins)

    run = tmp_path / "run"
    log = tmp_path / "first.log"
    kill_9_mid_save(2, run, log, args, saved=4, at_step=7)  # killed past the stage boundary (step 6)
    r = run_train(2, run, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "step-4 (step 4" in r.stdout
    same_steps(r.stdout, ref.stdout, 5, 10)

    # A stage's blend swapped under the run is refused (pinned), and so are stages out of order.
    swapped = f"data.stages=[{{path: {code}, until_tokens: 2816}}, {{path: {code}}}]"
    r = run_train(1, run, "--steps", "12", "--set", swapped, "--set", "model.vocab_size=640")
    assert r.returncode == 2 and r.stderr.startswith("agpt: error: data.stages[1].path:"), r.stderr
    backwards = f"data.stages=[{{path: {code}, until_tokens: 2816}}, {{path: {prose}, until_tokens: 1000}}]"
    r = run_train(1, tmp_path / "x", "--set", backwards, "--set", "model.vocab_size=640")
    assert r.returncode == 2 and "data.stages[1].until_tokens" in r.stderr and "increasing" in r.stderr
