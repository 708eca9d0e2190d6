"""The evaluation parts on their own: task files in four formats and their bad lines, the scorer against an
unbatched reference and across data-parallel shards, eval.jsonl (dropped steps, crash copy), the regression
alarm, the chain's checkpoint holds, bytes per token pinned by `agpt blend`, and `agpt eval`'s bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from agpt.errors import BadInput, ConfigError
from agpt.evals import alarm, due, records, score, tasks
from data_util import STDLIB, run_agpt

HELLASWAG = {
    "ind": 4,
    "activity_label": "Removing ice from car",
    "ctx_a": "Then, the man writes over the snow covering the window of a car, and a woman wearing winter clothes smiles.",
    "ctx_b": "then",
    "endings": [
        ", the man adds wax to the windshield and cuts it.",
        ", a person board a ski lift, while two men supporting the head of the person wearing winter clothes snow as the we girls sled.",
        ", the man puts on a christmas coat, knitted with netting.",
        ", the man continues removing the snow on his car.",
    ],
    "label": "3",
    "split": "val",
    "source_id": "activitynet~v_-1IBHYS3L-Y",
}  # fmt: skip  (the first validation item of Rowan/hellaswag, as its JSONL spells it)
ARC = {"id": "Mercury_7175875", "question": "An astronomer observes that a planet rotates faster after a meteorite impact. Which is the most likely effect of this increase in rotation?",
       "choices": {"text": ["Planetary density will decrease.", "Planetary years will become longer.", "Planetary days will become shorter.", "Planetary gravity will become stronger."], "label": ["A", "B", "C", "D"]},
       "answerKey": "C"}  # fmt: skip
PIQA = {"goal": "How do I ready a guinea pig cage for it's new occupants?",
        "sol1": "Provide the guinea pig with a cage full of a few inches of bedding made of ripped paper strips, you will also need to supply it with a water bottle and a food dish.",
        "sol2": "Provide the guinea pig with a cage full of a few inches of bedding made of ripped jeans material, you will also need to supply it with a water bottle and a food dish.",
        "label": 0}  # fmt: skip
PLAIN = {"context": "The capital of France is", "choices": ["Paris", "Rome", "Berlin"], "answer": 0}


def _jsonl(path: Path, *recs: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_each_format_reads_as_lm_eval_words_it(tmp_path: Path) -> None:
    for name, rec in (("hs", HELLASWAG), ("arc", ARC), ("piqa", PIQA), ("plain", PLAIN)):
        spec, items = tasks.read_items(
            tasks.TaskSpec(name=name, path=str(_jsonl(tmp_path / f"{name}.jsonl", rec)), format="")
        )
        assert len(items) == 1 and items[0].line == 1
        it = items[0]
        if name == "hs":
            assert spec.format == "hellaswag" and it.answer == 3
            # lm_eval/tasks/hellaswag/utils.py: label + ": " + ctx_a + " " + ctx_b.capitalize()
            assert it.context.startswith(
                "Removing ice from car: Then, the man writes"
            ) and it.context.endswith("smiles. Then")
            assert it.choices[3] == ", the man continues removing the snow on his car."
        elif name == "arc":
            assert (
                spec.format == "arc" and it.answer == 2 and it.context.startswith("Question: An astronomer")
            )
            assert it.context.endswith("\nAnswer:") and it.choices[2] == "Planetary days will become shorter."
        elif name == "piqa":
            assert spec.format == "piqa" and it.answer == 0 and len(it.choices) == 2
        else:
            assert (spec.format, it.context, it.choices, it.answer) == (
                "plain",
                PLAIN["context"],
                ("Paris", "Rome", "Berlin"),
                0,
            )
    assert (
        tasks.hellaswag_preprocess(" How to cook [title] Eggs [step] Boil  them ")
        == "How to cook. Eggs Boil them"
    )


@pytest.mark.parametrize(
    "rec, want",
    [
        ({**PLAIN, "answer": 3}, "answer: 3 is out of range (3 choices: 0..2)"),
        ({k: v for k, v in PLAIN.items() if k != "answer"}, "answer: missing"),
        ({k: v for k, v in PLAIN.items() if k != "context"}, "context: missing"),
        ({**PLAIN, "choices": ["only one"]}, "choices: must be a list of at least 2 strings"),
        ({**PLAIN, "choices": ["a", ""]}, "choices[1]: empty choice"),
        ({**HELLASWAG, "label": "7"}, "label: 7 is out of range (4 choices: 0..3)"),
        ({k: v for k, v in HELLASWAG.items() if k != "ctx_b"}, "ctx_b: missing"),
        ({**ARC, "answerKey": "E"}, "answerKey: 'E' is out of range (labels A, B, C, D)"),
        ({**PIQA, "label": 2}, "label: 2 is out of range (2 choices: 0..1)"),
    ],
)
def test_a_bad_line_names_file_line_and_field(tmp_path: Path, rec: dict, want: str) -> None:
    good = HELLASWAG if "ctx_a" in rec else ARC if "question" in rec else PIQA if "goal" in rec else PLAIN
    path = _jsonl(tmp_path / "t.jsonl", good, good, rec)
    with pytest.raises(BadInput) as exc:
        tasks.read_items(tasks.TaskSpec(name="t", path=str(path), format=""))
    assert str(exc.value).startswith(f"{path}:3: {want}"), exc.value


def test_bad_specs_and_files_are_refused_naming_them(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^eval.tasks\[1\].format: 'mmlu' is not one of plain"):
        tasks.parse_specs(["a.jsonl", {"path": "b.jsonl", "format": "mmlu"}])
    with pytest.raises(ConfigError, match=r"^eval.tasks\[1\].name: 'a' is used twice"):
        tasks.parse_specs(["x/a.jsonl", "y/a.jsonl"])
    with pytest.raises(ConfigError, match=r"^eval.tasks\[0\].path: required"):
        tasks.parse_specs([{"name": "x"}])
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(BadInput, match=f"^{missing}: task 'nope': no such file$"):
        tasks.read_items(tasks.parse_specs([str(missing)])[0])
    (tmp_path / "bad.jsonl").write_text(
        '{"context": "a", "choices": ["b", "c"], "answer": 0}\n{"context": \n'
    )
    other = _jsonl(tmp_path / "other.jsonl", {"text": "no multiple choice here"})
    with pytest.raises(
        BadInput, match=r"other.jsonl:1: format: cannot tell the format from the fields \(text\)"
    ):
        tasks.read_items(tasks.parse_specs([str(other)])[0])
    with pytest.raises(BadInput, match=r"bad.jsonl:2: line: not one JSON object$"):
        tasks.read_items(tasks.parse_specs([str(tmp_path / "bad.jsonl")])[0])


def test_a_choice_longer_than_the_sequence_is_refused_and_contexts_are_left_truncated(
    tmp_path: Path,
    sp_model: Path,
) -> None:
    from agpt.data.tokenizer import load

    sp = load(sp_model)
    long_choice = " ".join(["return"] * 40)
    path = _jsonl(tmp_path / "t.jsonl", PLAIN, {**PLAIN, "choices": ["Paris", long_choice]})
    specs = tasks.parse_specs([str(path)])
    with pytest.raises(
        BadInput, match=rf"^{path}:2: choices\[1\]: \d+ tokens, longer than the sequence length 16"
    ):
        tasks.prepare(specs, sp.encode, 16, 0)
    prep = tasks.prepare(specs, sp.encode, 48, 0)
    assert len(prep.rows) == 5 and all(len(r.tokens) <= 49 for r in prep.rows)
    # The context is cut from the left, the whole choice is kept (the harness's truncation).
    row = max(prep.rows, key=lambda r: r.n_cont)
    assert (
        40 <= row.n_cont <= 48
        and len(row.tokens) == 49
        and row.tokens[-row.n_cont :] == tuple(sp.encode(PLAIN["context"] + " " + long_choice)[-row.n_cont :])
    )


def test_encode_pair_moves_trailing_spaces_to_the_continuation() -> None:
    enc = lambda s: [ord(c) for c in s]  # noqa: E731 - a character tokenizer
    assert tasks.encode_pair(enc, "Q: x ", "y") == (enc("Q: x"), enc(" y"))
    assert tasks.encode_pair(enc, "Q:", " y") == (enc("Q:"), enc(" y"))


def test_accuracy_is_argmax_and_per_character_argmax_first_on_ties() -> None:
    items = [
        tasks.Item(context="c", choices=("a", "bbbb"), answer=1, line=1),
        tasks.Item(context="c", choices=("x", "y"), answer=0, line=2),
    ]
    res = tasks.accuracy(items, [[-2.0, -4.0], [-1.0, -1.0]])  # item 1: raw picks "a", per char picks "bbbb"
    assert res == {"acc": 0.5, "acc_norm": 1.0, "n": 2}


def test_plan_gives_every_row_once_within_the_token_budget() -> None:
    lengths = [5, 64, 17, 33, 2, 64, 40, 8, 9, 63]
    rounds = score.plan(lengths, budget=128, dp=3, pad_to=16, cap=64)
    seen = sorted(i for r in rounds for b in r for i in b.rows)
    assert seen == list(range(len(lengths)))
    assert all(len(r) == 3 for r in rounds)  # every rank runs a forward every round
    for r in rounds:
        for b in r:
            assert len(b.rows) * b.width <= 128 or len(b.rows) == 1
            assert all(lengths[i] <= b.width for i in b.rows) and b.width % 16 == 0 and b.width <= 64


def _tiny_model():
    import torch

    from agpt.train.config import ModelConfig
    from agpt.train.model import Transformer

    torch.manual_seed(0)
    m = Transformer(ModelConfig(vocab_size=50, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32))
    m.init_weights()
    return m


def test_scorer_equals_scoring_each_row_alone_and_sharding_changes_nothing() -> None:
    import random

    import torch

    model = _tiny_model()
    rng = random.Random(1)
    rows = []
    for i in range(13):
        n = rng.randint(3, 33)
        toks = tuple(rng.randrange(50) for _ in range(n))
        rows.append(tasks.Row(task=0, item=i, choice=0, tokens=toks, n_cont=rng.randint(1, n - 1)))
    ref = []
    with torch.no_grad():
        for r in rows:
            logits = model(torch.tensor([r.tokens[:-1]]))[0]
            lp = torch.log_softmax(logits.float(), -1)
            n = len(r.tokens) - 1
            ref.append(sum(float(lp[k, r.tokens[k + 1]]) for k in range(n - r.n_cont, n)))
    got = score.loglikelihoods(model, rows, device="cpu", budget=64, seq_len=32, pad_to=8)
    assert max(abs(a - b) for a, b in zip(got, ref, strict=True)) < 1e-4
    # Three data-parallel ranks each score their share (without a process group each returns its part).
    parts = [
        score.loglikelihoods(model, rows, device="cpu", budget=64, seq_len=32, pad_to=8, dp=3, dp_rank=k)
        for k in range(3)
    ]
    assert all(sum(1 for v in p if v != 0.0) < len(rows) for p in parts)
    assert max(abs(sum(p[i] for p in parts) - got[i]) for i in range(len(rows))) < 1e-9


def test_eval_jsonl_drops_the_steps_to_be_redone_and_survives_a_crash_mid_rewrite(tmp_path: Path) -> None:
    for step in (10, 20, 30):
        records.append(tmp_path, {"step": step, "source": "loop", "bpb": {"code": 1.0 / step}})
    with open(records.path(tmp_path), "a") as fh:
        fh.write('{"step": 40, "sour')  # a torn last line (killed mid-write)
    assert [r["step"] for r in records.read(tmp_path, notes=[])] == [10, 20, 30]
    assert records.drop_after(tmp_path, 20) == 1
    assert [r["step"] for r in records.read(tmp_path, notes=[])] == [10, 20]
    assert records.drop_after(tmp_path, 20) == 0
    # A crash between the copy and the rewrite: the next call starts from the copy.
    full = records.path(tmp_path).read_bytes()
    (tmp_path / f".{records.FILE}.rewrite").write_bytes(full + b'{"step": 25, "source": "loop"}\n')
    records.path(tmp_path).write_bytes(b"")
    assert records.drop_after(tmp_path, 100) == 0
    assert [r["step"] for r in records.read(tmp_path)] == [10, 20, 25]
    assert not (tmp_path / f".{records.FILE}.rewrite").exists()
    assert math.isclose(records.bits_per_byte(math.log(2) * 3, 1.5), 2.0)


def test_alarm_fires_on_a_drop_past_the_margin_against_the_best_so_far() -> None:
    hist = [
        {"step": 100, "bpb": {"code": 2.0}, "tasks": {"t": {"acc": 0.50, "acc_norm": 0.60}}},
        {"step": 200, "bpb": {"code": 1.5}, "tasks": {"t": {"acc": 0.70, "acc_norm": 0.65}}},
    ]
    a = alarm.Alarm(acc_margin=0.1, bpb_margin=0.2, history=hist)
    assert a.best["t/acc"] == (0.70, 200) and a.best["bpb/code"] == (1.5, 200)
    assert (
        a.observe({"step": 300, "bpb": {"code": 1.7}, "tasks": {"t": {"acc": 0.65, "acc_norm": 0.66}}}) == []
    )
    regs = a.observe({"step": 400, "bpb": {"code": 1.9}, "tasks": {"t": {"acc": 0.55, "acc_norm": 0.66}}})
    assert {r.metric for r in regs} == {"bpb/code", "t/acc"}
    acc = next(r for r in regs if r.metric == "t/acc")
    assert (acc.value, acc.best, acc.best_step, acc.step) == (0.55, 0.70, 200, 400)
    assert (
        acc.line()
        == "event: eval regression: t/acc fell to 0.55 at step 400 (best 0.7 at step 200, margin 0.1)"
    )
    assert a.best["t/acc_norm"] == (0.66, 300)  # the best moves only up
    off = alarm.Alarm(acc_margin=0.0, bpb_margin=0.0, history=hist)
    assert not off.enabled and off.observe({"step": 500, "tasks": {"t": {"acc": 0.0, "acc_norm": 0.0}}}) == []
    # lm-eval's records have their own bests.
    lm = alarm.Alarm(
        acc_margin=0.1,
        bpb_margin=0.0,
        history=[*hist, {"step": 200, "source": "lm-eval", "tasks": {"t": {"acc": 0.3, "acc_norm": 0.3}}}],
        source="lm-eval",
    )
    assert lm.best == {"lm-eval:t/acc": (0.3, 200), "lm-eval:t/acc_norm": (0.3, 200)}


def test_every_nth_checkpoint_is_held_until_released_and_pruning_keeps_it(tmp_path: Path) -> None:
    from agpt import rundir

    def save(step: int) -> None:
        d = tmp_path / "ckpt" / f"step-{step}"
        d.mkdir(parents=True)
        (d / rundir.COMPLETE).write_text(json.dumps({"step": step}))

    for s in (10, 20):
        save(s)
    assert due.mark(tmp_path, 3) == []
    save(30)
    assert due.mark(tmp_path, 3) == [30]
    assert due.mark(tmp_path, 3) == []  # counted once
    for s in (40, 50, 60):
        save(s)
    assert due.mark(tmp_path, 3) == [60] and due.pending(tmp_path) == [30, 60]
    from types import SimpleNamespace

    from agpt.train.checkpoint import Checkpointer
    from agpt.train.config import CheckpointConfig

    # The pruning rule alone (a Checkpointer needs a process group): keep the newest 2, and held ones.
    Checkpointer.prune(
        SimpleNamespace(root=tmp_path / "ckpt", cfg=CheckpointConfig(keep=2), in_flight_step=None)
    )  # type: ignore[arg-type]
    left = sorted(int(p.name[5:]) for p in (tmp_path / "ckpt").iterdir())
    assert left == [30, 50, 60]  # the held one survives pruning
    due.release(tmp_path, 30)
    assert due.pending(tmp_path) == [60]


def test_blend_pins_bytes_per_token_of_each_corpus(tmp_path: Path, sp_model: Path) -> None:
    from agpt.data import bytecount
    from agpt.data.blend import BlendSettings, build
    from agpt.data.tokenizer import load

    sp = load(sp_model)
    from agpt.data.tokenize import TokenizeSettings, run

    lines, texts = [], {}
    for name, files in {"code": ["json/encoder.py", "textwrap.py"], "prose": ["shlex.py"]}.items():
        src = tmp_path / f"{name}.txt"
        texts[name] = "\n\n".join((STDLIB / f).read_text() for f in files)
        src.write_text(texts[name])
        run(
            TokenizeSettings(
                model=str(sp_model),
                inputs=[str(src)],
                output=str(tmp_path / name),
                workers=1,
                quiet=True,
                corpus=name,
            )
        )
        lines += (tmp_path / name / "filelist.txt").read_text().splitlines(keepends=True)
    (tmp_path / "list").write_text("".join(lines))
    m = build(
        BlendSettings(
            file_list=str(tmp_path / "list"), seq_len=64, num_samples=64, seed=1, output=str(tmp_path / "b")
        )
    )
    per = bytecount.of(m)
    assert set(per) == {"code", "prose"}
    for c in m["corpora"]:
        rec = c["bytes_per_token"]
        assert rec["tokens"] == c["tokens"]  # small corpora: every document counted
        assert rec["bytes_per_token"] == rec["bytes"] / rec["tokens"]
        # The bytes of the text the tokens spell: the text as the tokenizer normalised it (this one, as
        # SentencePiece does by default, folds runs of whitespace), not the raw file's bytes.
        spelled = len(sp.decode(sp.encode(texts[c["name"]])).encode())
        assert abs(rec["bytes"] / spelled - 1) < 0.02, (rec, spelled)
        assert rec["bytes"] < len(texts[c["name"]].encode())
    # A blend from before bytes per token were pinned is made again in place with them.
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    for c in manifest["corpora"]:
        del c["bytes_per_token"]
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
    m2 = build(
        BlendSettings(
            file_list=str(tmp_path / "list"), seq_len=64, num_samples=64, seed=1, output=str(tmp_path / "b")
        )
    )
    assert bytecount.of(m2) == per and m2["cache_key"] == m["cache_key"]


def test_agpt_eval_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = _jsonl(tmp_path / "t.jsonl", PLAIN, {**PLAIN, "answer": 9})
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "config.json").write_text("{}")
    (exp / "tokenizer.model").write_bytes(b"")
    r = run_agpt("eval", str(exp), "--task", str(bad), "--scorer", "agpt")
    assert r.returncode == 2, r.stderr
    assert (
        r.stderr == f"agpt: error: {tmp_path}/exp/tokenizer.model: not a SentencePiece model\n"
        or r.stderr.count("\n") == 1
    )
    r = run_agpt("eval", str(tmp_path / "nowhere"), "--task", str(bad), "--scorer", "agpt")
    assert (
        r.returncode == 2
        and r.stderr.startswith("agpt: error:")
        and "nowhere: no such export folder" in r.stderr
    )
    r = run_agpt("eval", "--cost")
    assert r.returncode == 2 and r.stderr == "agpt: error: --cost: needs --config\n"
    # lm-eval missing: a package that fails to import stands in for an environment without the extra.
    fake = tmp_path / "fake"
    (fake / "lm_eval").mkdir(parents=True)
    (fake / "lm_eval" / "__init__.py").write_text(
        "raise ImportError('No module named lm_eval', name='lm_eval')\n"
    )
    import subprocess

    from conftest import ROOT, agpt_env

    env = agpt_env({"PYTHONPATH": f"{fake}:{ROOT / 'python'}"})
    r = subprocess.run(
        [str(ROOT / "bin" / "agpt"), "eval", str(exp), "--task", str(bad)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 2, r.stderr
    assert (
        r.stderr.startswith("agpt: error: lm-evaluation-harness is not installed")
        and "pip install 'agpt[eval]'" in r.stderr
    )
    assert r.stderr.count("\n") == 1
