"""Property-based: the train config, the job config and a blend's manifest.json, fed arbitrary bytes,
truncations and extreme numbers: a Config/JobConf/manifest or one line and exit 2, never a traceback."""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from agpt import jobconf
from agpt.data import manifest as mf
from agpt.train.config import Config, load_config
from conftest import ROOT
from fuzz_util import EXTREME_NUMBERS, FUZZ, YAML_EXTREMES, is_error, one_line_exit_2, truncations

TINY = (ROOT / "jobs/configs/tiny.yaml").read_bytes()
FLOAT_KEYS = [
    "optim.lr",
    "optim.min_lr",
    "optim.eps",
    "optim.beta1",
    "optim.beta2",
    "optim.weight_decay",
    "optim.grad_clip",
    "model.norm_eps",
]
INT_KEYS = [
    "train.steps",
    "train.seq_len",
    "train.global_batch",
    "train.micro_batch",
    "optim.warmup_steps",
    "checkpoint.interval",
    "checkpoint.keep",
    "model.dim",
    "model.n_layers",
]


def write(tmp: Path, name: str, data: bytes) -> Path:
    p = tmp / name
    p.write_bytes(data)
    return p


def _finite_config(cfg: Config) -> None:
    for section in ("optim",):
        for key, value in vars_of(getattr(cfg, section)).items():
            if isinstance(value, float):
                assert math.isfinite(value), f"{section}.{key}={value}"
    assert cfg.optim.lr > 0 and cfg.optim.eps > 0


def vars_of(obj: object) -> dict[str, object]:
    return {k: getattr(obj, k) for k in obj.__slots__}  # type: ignore[attr-defined]


@FUZZ
@given(data=st.one_of(st.binary(max_size=400), truncations(TINY)))
def test_train_config_bytes(tmp_path_factory, data: bytes) -> None:  # type: ignore[no-untyped-def]
    p = write(tmp_path_factory.mktemp("c"), "c.yaml", data)
    got = one_line_exit_2(lambda: load_config(p, environ={}))
    if not is_error(got):
        _finite_config(got)  # type: ignore[arg-type]


@FUZZ
@given(key=st.sampled_from(FLOAT_KEYS + INT_KEYS), value=st.one_of(YAML_EXTREMES, EXTREME_NUMBERS.map(repr)))
def test_train_config_extreme_numbers(tmp_path_factory, key: str, value: str) -> None:  # type: ignore[no-untyped-def]
    section, name = key.split(".")
    data = yaml.safe_load(TINY)
    body_of = data.setdefault(section, {}) or {}
    body_of.pop(name, None)
    data[section] = body_of
    body = yaml.safe_dump(data).replace(f"{section}:\n", f"{section}:\n  {name}: {value}\n", 1)
    if f"{section}: {{}}" in body:
        body = body.replace(f"{section}: {{}}", f"{section}:\n  {name}: {value}")
    p = write(tmp_path_factory.mktemp("c"), "c.yaml", body.encode())
    got = one_line_exit_2(lambda: load_config(p, environ={}))
    if not is_error(got):
        _finite_config(got)  # type: ignore[arg-type]
    # The same value through --set and the environment.
    got = one_line_exit_2(lambda: load_config(None, overrides=[f"{key}={value}"], environ={}))
    if not is_error(got):
        _finite_config(got)  # type: ignore[arg-type]
    env = {f"AGPT_{section.upper()}_{name.upper()}": value}
    got = one_line_exit_2(lambda: load_config(None, environ=env))
    if not is_error(got):
        _finite_config(got)  # type: ignore[arg-type]


JOB_KEYS = list(jobconf.KEYS)
JOB_VALUES = st.one_of(
    st.text(max_size=30),
    EXTREME_NUMBERS,
    st.booleans(),
    st.none(),
    st.lists(st.text(max_size=10), max_size=3),
    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=2),
)


@FUZZ
@given(
    data=st.one_of(st.binary(max_size=300), truncations(b"job:\n  nodes: 4\n  queue: debug\n  env: {A: 1}\n"))
)
def test_job_config_bytes(tmp_path_factory, data: bytes) -> None:  # type: ignore[no-untyped-def]
    p = write(tmp_path_factory.mktemp("j"), "j.yaml", data)
    got = one_line_exit_2(lambda: jobconf.load(p))
    if not is_error(got):
        _one_line_assignments(jobconf.shell(got))  # type: ignore[arg-type]


@FUZZ
@given(job=st.dictionaries(st.sampled_from(JOB_KEYS), JOB_VALUES, max_size=5))
def test_job_config_values(tmp_path_factory, job: dict) -> None:  # type: ignore[no-untyped-def,type-arg]
    p = write(tmp_path_factory.mktemp("j"), "j.yaml", b"")
    try:
        p.write_text(yaml.safe_dump({"job": job}, allow_unicode=True))
    except (yaml.YAMLError, UnicodeEncodeError):
        return
    got = one_line_exit_2(lambda: jobconf.load(p))
    if not is_error(got):
        _one_line_assignments(jobconf.shell(got))  # type: ignore[arg-type]


def _one_line_assignments(text: str) -> None:
    """Every value jobgen evals is one JOB_*= line: no value can start a line of its own."""
    for line in text.splitlines():
        assert line.startswith("JOB_"), repr(line)
    assert not any(c in text for c in "\r\x00\x0b\x0c\x85\u2028\u2029")


MANIFEST_KEYS = ["format", "tokenizer", "files", "index_files", "file_list", "num_samples", "cache_key"]


@FUZZ
@given(data=st.binary(max_size=300))
def test_manifest_bytes(tmp_path_factory, data: bytes) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("m")
    write(d, mf.MANIFEST, data)
    got = one_line_exit_2(lambda: mf.verify(d))
    assert is_error(got)


JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), EXTREME_NUMBERS, st.text(max_size=12)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@FUZZ
@given(
    fields=st.dictionaries(st.sampled_from(MANIFEST_KEYS), JSONISH, max_size=6),
    good_format=st.booleans(),
    level=st.sampled_from(mf.LEVELS),
)
def test_manifest_fields(tmp_path_factory, fields: dict, good_format: bool, level: str) -> None:  # type: ignore[no-untyped-def,type-arg]
    d = tmp_path_factory.mktemp("m")
    if good_format:
        fields["format"] = mf.FORMAT
    write(d, mf.MANIFEST, json.dumps(fields, allow_nan=True).encode())
    got = one_line_exit_2(lambda: mf.verify(d, level))
    assert is_error(got)  # nothing it points at exists


def test_a_nested_manifest_is_one_line(tmp_path: Path) -> None:
    write(tmp_path, mf.MANIFEST, b"[" * 100_000)
    assert is_error(one_line_exit_2(lambda: mf.verify(tmp_path)))
    write(tmp_path, "c.yaml", b"[" * 100_000)
    assert is_error(one_line_exit_2(lambda: load_config(tmp_path / "c.yaml", environ={})))
