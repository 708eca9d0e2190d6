"""Multiple-choice task files: four JSONL formats read into one (context, choices, answer) item.

Every format becomes the strings lm-evaluation-harness scores for the same file, so the in-loop scorer
and `agpt eval` (lm-eval on an export) see the same text; the preparation of each format follows the
harness's own task definitions (lm_eval/tasks/{hellaswag/utils.py, arc/arc_easy.yaml, piqa/piqa.yaml},
https://github.com/EleutherAI/lm-evaluation-harness/tree/main/lm_eval/tasks):

| format    | fields of one line                                    | context                         | choices        |
|-----------|-------------------------------------------------------|---------------------------------|----------------|
| plain     | context, choices [str], answer (index)                | context                         | choices        |
| hellaswag | activity_label, ctx_a, ctx_b, endings [str], label    | preprocess(label: ctx_a Ctx_b)  | preprocess(e)  |
| arc       | question, choices {text [str], label [str]}, answerKey | "Question: {question}\\nAnswer:" | choices.text   |
| piqa      | goal, sol1, sol2, label (0 or 1)                      | "Question: {goal}\\nAnswer:"     | [sol1, sol2]   |

A choice is scored as the continuation TARGET_DELIMITER + choice (the harness's default
`target_delimiter`), tokenized as the harness does for causal models (`_encode_pair` in
lm_eval/api/model.py): trailing spaces of the context move to the continuation, the context and the
whole text are encoded, and the continuation is the whole encoding past the context's length.

Every problem in a file is a BadInput (exit 2) naming `FILE:LINE: FIELD`, found before training starts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agpt import rundir
from agpt.errors import BadInput, ConfigError

FORMATS = ("plain", "hellaswag", "arc", "piqa")
TARGET_DELIMITER = " "  # lm-eval's default target_delimiter (lm_eval/api/task.py, TaskConfig)
# The fields that tell a format from the first line of a file (`format` left out of the spec).
SIGNATURES = {
    "hellaswag": ("ctx_a", "endings"),
    "arc": ("question", "answerKey"),
    "piqa": ("goal", "sol1"),
    "plain": ("context", "choices"),
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

Encode = Callable[[str], Sequence[int]]


@dataclass(frozen=True, slots=True)
class Item:
    context: str
    choices: tuple[str, ...]
    answer: int
    line: int  # 1-based line of the file it came from


@dataclass(frozen=True, slots=True)
class TaskSpec:
    name: str
    path: str
    format: str  # "" until detected from the file


@dataclass(frozen=True, slots=True)
class Row:
    """One (item, choice) pair, tokenized: the tokens the model reads and how many of the last are scored."""

    task: int
    item: int
    choice: int
    tokens: tuple[int, ...]  # at most seq_len + 1 tokens: input tokens[:-1], targets tokens[1:]
    n_cont: int  # the last n_cont targets are the continuation


@dataclass(frozen=True, slots=True)
class Prepared:
    """The fixed subset of every task, tokenized: what each evaluation scores, step after step."""

    specs: tuple[TaskSpec, ...]
    items: tuple[tuple[Item, ...], ...]
    rows: tuple[Row, ...]


def parse_specs(value: Any, key: str = "eval.tasks") -> list[TaskSpec]:
    """`eval.tasks`: a list of paths, or of {path, name, format} mappings (name: the file's stem)."""
    if value in (None, ""):
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{key}: expected a list of task files or {{path, name, format}} mappings")
    specs: list[TaskSpec] = []
    for i, entry in enumerate(value):
        where = f"{key}[{i}]"
        if isinstance(entry, str):
            entry = {"path": entry}
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a path or a mapping with 'path', got {entry!r}")
        unknown = sorted(set(entry) - {"path", "name", "format"})
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}: unknown key (keys: path, name, format)")
        path = entry.get("path")
        if not isinstance(path, str) or not path:
            raise ConfigError(f"{where}.path: required, the task's JSONL file")
        name = entry.get("name", Path(path).name.removesuffix(".jsonl"))
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"{where}.name: {name!r} must be letters, digits, '_', '.', '-'")
        fmt = entry.get("format", "")
        if fmt and fmt not in FORMATS:
            raise ConfigError(f"{where}.format: {fmt!r} is not one of {', '.join(FORMATS)}")
        if any(s.name == name for s in specs):
            raise ConfigError(f"{where}.name: {name!r} is used twice; give each task its own name")
        specs.append(TaskSpec(name=name, path=path, format=str(fmt)))
    return specs


def _need(rec: dict[str, Any], field: str, where: str, kind: type | tuple[type, ...], what: str) -> Any:
    if field not in rec:
        raise BadInput(f"{where}: {field}: missing")
    value = rec[field]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadInput(f"{where}: {field}: must be {what}, got {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


def _strings(value: Any, where: str, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(c, str) for c in value):
        raise BadInput(f"{where}: {field}: must be a list of at least 2 strings, got {_short(value)}")
    for j, c in enumerate(value):
        if not c.strip():
            raise BadInput(f"{where}: {field}[{j}]: empty choice")
    return tuple(value)


def _index(value: Any, n: int, where: str, field: str) -> int:
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,9}", value.strip()):
        value = int(value)  # "2" as a label; "--1", "²" or 400 digits are not an index
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadInput(f"{where}: {field}: must be a choice index, got {_short(value)}")
    if not 0 <= value < n:
        raise BadInput(f"{where}: {field}: {value} is out of range ({n} choices: 0..{n - 1})")
    return value


def hellaswag_preprocess(text: str) -> str:
    """lm_eval/tasks/hellaswag/utils.py `preprocess`: WikiHow's bracketed artifacts removed."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def _plain(rec: dict[str, Any], where: str) -> tuple[str, tuple[str, ...], int]:
    context = _need(rec, "context", where, str, "a string")
    choices = _strings(_need(rec, "choices", where, list, "a list"), where, "choices")
    if "answer" not in rec:
        raise BadInput(f"{where}: answer: missing")
    return context, choices, _index(rec["answer"], len(choices), where, "answer")


def _hellaswag(rec: dict[str, Any], where: str) -> tuple[str, tuple[str, ...], int]:
    label = _need(rec, "activity_label", where, str, "a string")
    ctx = (
        _need(rec, "ctx_a", where, str, "a string")
        + " "
        + _need(rec, "ctx_b", where, str, "a string").capitalize()
    )
    endings = _strings(_need(rec, "endings", where, list, "a list"), where, "endings")
    if "label" not in rec:
        raise BadInput(f"{where}: label: missing")
    gold = _index(rec["label"], len(endings), where, "label")
    return hellaswag_preprocess(label + ": " + ctx), tuple(hellaswag_preprocess(e) for e in endings), gold


def _arc(rec: dict[str, Any], where: str) -> tuple[str, tuple[str, ...], int]:
    question = _need(rec, "question", where, str, "a string")
    choices = _need(rec, "choices", where, dict, "an object {text, label}")
    text = _strings(choices.get("text"), where, "choices.text")
    labels = choices.get("label")
    if not isinstance(labels, list) or len(labels) != len(text):
        raise BadInput(f"{where}: choices.label: must be a list as long as choices.text")
    key = _need(rec, "answerKey", where, str, "a string")
    if key not in labels:
        raise BadInput(f"{where}: answerKey: {key!r} is out of range (labels {', '.join(map(str, labels))})")
    return f"Question: {question}\nAnswer:", text, labels.index(key)


def _piqa(rec: dict[str, Any], where: str) -> tuple[str, tuple[str, ...], int]:
    goal = _need(rec, "goal", where, str, "a string")
    sols = _strings([_need(rec, "sol1", where, str, "a string"), _need(rec, "sol2", where, str, "a string")],
                    where, "sol1/sol2")  # fmt: skip
    if "label" not in rec:
        raise BadInput(f"{where}: label: missing")
    return f"Question: {goal}\nAnswer:", sols, _index(rec["label"], 2, where, "label")


READERS = {"plain": _plain, "hellaswag": _hellaswag, "arc": _arc, "piqa": _piqa}


def detect(rec: dict[str, Any], where: str) -> str:
    for fmt, fields in SIGNATURES.items():
        if all(f in rec for f in fields):
            return fmt
    raise BadInput(
        f"{where}: format: cannot tell the format from the fields ({', '.join(sorted(rec)) or 'none'}); "
        f"set format: to one of {', '.join(FORMATS)}"
    )


def read_items(spec: TaskSpec, limit: int = 0) -> tuple[TaskSpec, list[Item]]:
    """The first `limit` items (0: all) of a task file, every line up to them checked; the spec with its
    format resolved."""
    path = Path(spec.path)
    try:
        fh = rundir.open_regular(path)
    except FileNotFoundError:
        raise BadInput(f"{spec.path}: task {spec.name!r}: no such file") from None
    except OSError as exc:
        raise BadInput(f"{spec.path}: task {spec.name!r}: cannot read ({exc.strerror})") from None
    fmt = spec.format
    items: list[Item] = []
    with fh:
        for n, raw in enumerate(fh, 1):
            if limit and len(items) >= limit:
                break
            if not raw.strip():
                continue
            where = f"{spec.path}:{n}"
            try:
                rec = rundir.parse_json_line(raw.decode("utf-8", errors="replace"))
            except (ValueError, RecursionError):
                raise BadInput(f"{where}: line: not one JSON object") from None
            if not isinstance(rec, dict):
                raise BadInput(f"{where}: line: not one JSON object")
            fmt = fmt or detect(rec, where)
            context, choices, answer = READERS[fmt](rec, where)
            if not context.strip():
                raise BadInput(f"{where}: context: empty (the harness needs a non-empty context)")
            items.append(Item(context=context, choices=choices, answer=answer, line=n))
    if not items:
        raise BadInput(f"{spec.path}: task {spec.name!r}: holds no items")
    return TaskSpec(name=spec.name, path=spec.path, format=fmt), items


def encode_pair(encode: Encode, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's `_encode_pair` for causal models (lm_eval/api/model.py), token for token."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = list(encode(context + continuation))
    ctx = list(encode(context))
    return ctx, whole[len(ctx) :]


def prepare(specs: Sequence[TaskSpec], encode: Encode, seq_len: int, limit: int) -> Prepared:
    """Read the first `limit` items of every task and tokenize every choice; a choice longer than
    seq_len tokens is refused (the harness asserts the same against its max_length)."""
    done: list[TaskSpec] = []
    all_items: list[tuple[Item, ...]] = []
    rows: list[Row] = []
    for t, spec in enumerate(specs):
        spec, items = read_items(spec, limit)
        done.append(spec)
        all_items.append(tuple(items))
        for i, item in enumerate(items):
            for j, choice in enumerate(item.choices):
                ctx, cont = encode_pair(encode, item.context, TARGET_DELIMITER + choice)
                if not cont:
                    raise BadInput(f"{spec.path}:{item.line}: choices[{j}]: encodes to no tokens")
                if len(cont) > seq_len:
                    raise BadInput(
                        f"{spec.path}:{item.line}: choices[{j}]: {len(cont)} tokens, longer than the "
                        f"sequence length {seq_len} (train.seq_len)"
                    )
                tokens = (ctx + cont)[-(seq_len + 1) :]  # left-truncated as the harness does
                rows.append(Row(task=t, item=i, choice=j, tokens=tuple(tokens), n_cont=len(cont)))
    return Prepared(specs=tuple(done), items=tuple(all_items), rows=tuple(rows))


def accuracy(items: Sequence[Item], lls: Sequence[Sequence[float]]) -> dict[str, Any]:
    """`acc` (argmax of the log-likelihoods) and `acc_norm` (argmax of log-likelihood / characters of the
    choice), first index on ties: the harness's multiple_choice `process_results` (lm_eval/api/task.py)."""
    hits = hits_norm = 0
    for item, ll in zip(items, lls, strict=True):
        pred = max(range(len(ll)), key=lambda j: (ll[j], -j))
        norm = [ll[j] / len(c) for j, c in enumerate(item.choices)]
        pred_norm = max(range(len(norm)), key=lambda j: (norm[j], -j))
        hits += pred == item.answer
        hits_norm += pred_norm == item.answer
    n = max(len(items), 1)
    return {"acc": hits / n, "acc_norm": hits_norm / n, "n": len(items)}


def chance(items: Sequence[Item]) -> float:
    """Expected accuracy of a uniform guess over each item's choices."""
    return sum(1 / len(i.choices) for i in items) / max(len(items), 1)
