"""Data tools and configs under hostile input: one line and exit 2, never a traceback; a second run on one
--output is refused with a clear message (a lock), not a race; every reader of a file agrees on its shape.
Each test is one instance found from outside (issue 29)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import ROOT
from data_util import SOURCES, STDLIB, run_agpt


def one_line_2(r: object, *needles: str) -> str:
    """The one error line of a refusal (exit 2): a usage hint and a tool's progress lines may surround it."""
    rc, err = r.returncode, r.stderr  # type: ignore[attr-defined]
    assert rc == 2 and "Traceback" not in err, err
    lines = [x for x in err.strip().splitlines() if not x.startswith(("Try '", "blend: "))]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    (d / "c.txt").write_text("\n\n".join((STDLIB / s).read_text() for s in SOURCES[:2]))
    return d / "c.txt"


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory, sp_model: Path, corpus: Path) -> Path:
    out = tmp_path_factory.mktemp("shards") / "code"
    r = run_agpt("tokenize", "--model", str(sp_model), "--output", str(out), "--input", str(corpus))
    assert r.returncode == 0, r.stderr
    return out


def held(out: Path) -> int:
    """Hold OUT's lock as a running tool would (the fd: close it to let go)."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / ".agpt-lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_second_tokenize_on_one_output_is_refused_while_the_first_runs(
    tmp_path: Path, sp_model: Path, corpus: Path
) -> None:
    out = tmp_path / "out"
    fd = held(out)
    try:
        r = run_agpt("tokenize", "--model", str(sp_model), "--output", str(out), "--input", str(corpus))
        one_line_2(r, f"--output {out}: another agpt tokenize is writing it")
        assert sorted(p.name for p in out.iterdir()) == [".agpt-lock"]  # nothing of the first run's touched
    finally:
        os.close(fd)
    r = run_agpt("tokenize", "--model", str(sp_model), "--output", str(out), "--input", str(corpus))
    assert r.returncode == 0, r.stderr


def test_a_second_blend_on_one_output_is_refused_while_the_first_runs(tmp_path: Path, shards: Path) -> None:
    out = tmp_path / "blend"
    args = ("blend", "--file-list", str(shards / "filelist.txt"), "--seq-len", "32", "--num-samples", "40",
            "--output", str(out))  # fmt: skip
    fd = held(out)
    try:
        one_line_2(run_agpt(*args), f"--output {out}: another agpt blend is writing it")
    finally:
        os.close(fd)
    r = run_agpt(*args)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("flag", ["--output", "--corpus"])
@pytest.mark.parametrize("bad", ["my data", "a\nb", "a#b"])
def test_tokenize_refuses_a_name_its_file_list_cannot_hold(
    tmp_path: Path, sp_model: Path, corpus: Path, flag: str, bad: str
) -> None:
    """filelist.txt is `WEIGHT PREFIX CORPUS` words: a space, '#' or newline wrote a list blend refused."""
    out = tmp_path / (bad if flag == "--output" else "out")
    extra = ["--corpus", bad] if flag == "--corpus" else []
    r = run_agpt("tokenize", "--model", str(sp_model), "--output", str(out), *extra, "--input", str(corpus))
    one_line_2(r, flag)
    assert not out.exists()


@pytest.mark.parametrize("n", ["100000000000000000000", "1e20", "nan"])
def test_blend_with_a_huge_num_samples_is_one_line(tmp_path: Path, shards: Path, n: str) -> None:
    r = run_agpt("blend", "--file-list", str(shards / "filelist.txt"), "--seq-len", "32", "--num-samples", n,
                 "--output", str(tmp_path / "blend"))  # fmt: skip
    one_line_2(r, "--num-samples")
    assert not (tmp_path / "blend").exists()


def test_blend_on_a_missing_shard_names_the_shard_not_a_tokenize_json(tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text(f"1.0 {tmp_path}/gone/data_00000 web\n")
    line = one_line_2(run_agpt("blend", "--file-list", str(lst), "--seq-len", "8", "--num-samples", "4",
                               "--output", str(tmp_path / "b")))  # fmt: skip
    assert f"{tmp_path}/gone/data_00000.idx: missing" in line and "tokenize.json" not in line


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seed", None),
        ("seed", "x"),
        ("corpora", 5),
        ("cache_key", 3),
        ("files.0.samples", "n"),
        ("dtype", []),
    ],
)
def test_data_inspect_and_data_verify_read_a_manifest_alike(
    tmp_path: Path, shards: Path, field: str, value: object
) -> None:
    """`data inspect` and `data verify` read one shape: a field of the wrong type is one line from both, a field
    a hand-made manifest leaves out is shown as unknown by inspect (verify does not need it)."""
    out = tmp_path / "blend"
    r = run_agpt("blend", "--file-list", str(shards / "filelist.txt"), "--seq-len", "32", "--num-samples", "40",
                 "--output", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    *path, last = field.split(".")
    target = m
    for k in path:
        target = target[int(k)] if k.isdigit() else target[k]
    if value is None:
        del target[last]
    else:
        target[last] = value
    (out / "manifest.json").write_text(json.dumps(m))
    verify = run_agpt("data", "verify", str(out))
    inspect = run_agpt("data", "inspect", str(out))
    assert "Traceback" not in verify.stderr + inspect.stderr
    assert (verify.returncode == 2) == (inspect.returncode == 2), (verify.stderr, inspect.stderr)
    if value is None:
        assert inspect.returncode == 0 and "seed ?" in inspect.stdout, inspect.stderr
    else:
        one_line_2(inspect, last)


# --- configs -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("model.n_layers", str(2**63 - 1)),
        ("model.vocab_size", "100000000"),  # an int64 on its own, but its embedding alone wanted 25.6 GB
        ("model.vocab_size", "100000000000000000000"),
        ("model.vocab_size", "1e400"),
        ("model.max_seq_len", str(2**62)),
        ("train.seq_len", str(2**40)),
    ],
)
def test_a_size_key_beyond_its_bound_is_refused_before_anything_is_built(key: str, value: str) -> None:
    r = run_agpt("train", "--config", str(ROOT / "jobs/configs/tiny.yaml"), "--set", f"{key}={value}")
    one_line_2(r, key)


def test_a_skip_range_beyond_any_step_is_refused(tmp_path: Path) -> None:
    skips = tmp_path / "skips.json"
    skips.write_text(json.dumps({"skip": [[1, 10**23]]}))
    r = run_agpt("train", "--config", str(ROOT / "jobs/configs/tiny.yaml"), "--set", f"train.skip={skips}",
                 "--run-dir", str(tmp_path / "run"))  # fmt: skip
    one_line_2(r, "train.skip")


def test_check_refuses_a_config_that_is_not_utf8_like_train_and_jobgen(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(b"model: {dim: 64} # \xe9\n")
    for args in (["check", str(cfg), "--site", "generic"], ["train", "--config", str(cfg)]):
        one_line_2(run_agpt(*args), f"{cfg}: not UTF-8 text (byte 19)")


def test_check_refuses_yaml_nested_too_deep_like_train_and_jobgen(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("a: " + "[" * 50_000 + "]" * 50_000 + "\n")
    for args in (["check", str(cfg), "--site", "generic"], ["train", "--config", str(cfg)]):
        one_line_2(run_agpt(*args), f"{cfg}: not valid YAML")


def test_smoke_with_a_binary_baseline_is_one_line(tmp_path: Path) -> None:
    base = tmp_path / "base.txt"
    base.write_bytes(bytes(range(256)))
    one_line_2(run_agpt("smoke", "--baseline", str(base), "--steps", "2"), "--baseline", "not UTF-8")


def test_ckpt_import_with_architectures_not_a_list_is_one_line(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"architectures": 5, "model_type": "llama"}))
    r = run_agpt("ckpt", "import", str(hf), "--config", str(ROOT / "jobs/configs/tiny.yaml"),
                 "--run-dir", str(tmp_path / "run"))  # fmt: skip
    one_line_2(r, "architectures")


@pytest.mark.parametrize("size", ["nanGB", "infGB", "1e400GB", "-5GB", "0GB", "99999999999GB"])
def test_ckpt_export_max_shard_size_is_one_line(tmp_path: Path, size: str) -> None:
    r = run_agpt("ckpt", "export", str(tmp_path / "step-1"), str(tmp_path / "out"), "--max-shard-size", size)
    one_line_2(r, "--max-shard-size")


def test_a_bad_failover_attempt_number_is_refused_before_training(tmp_path: Path) -> None:
    from agpt.errors import BadInput
    from agpt.train import clock

    os.environ["FAILOVER_ATTEMPT"] = "abc"
    try:
        with pytest.raises(BadInput, match="FAILOVER_ATTEMPT"):
            clock.attempt()
    finally:
        del os.environ["FAILOVER_ATTEMPT"]


@pytest.mark.parametrize("depth", [17, 3000])
def test_a_profile_value_nested_too_deep_is_one_line_from_check_show_and_the_gate(
    tmp_path: Path, depth: int
) -> None:
    site = tmp_path / "sites" / "deep"
    shutil.copytree(ROOT / "site" / "generic", site)
    prof = site / "profile.sh"
    text = prof.read_text().replace("SITE_NAME=generic", "SITE_NAME=deep")
    value = "${A:-" * depth + "x" + "}" * depth
    text = "\n".join(x for x in text.splitlines() if not x.startswith("SITE_DESCRIPTION="))
    prof.write_text(text + f'\nSITE_DESCRIPTION="{value}"\n')
    one_line_2(run_agpt("site", "show", str(prof)), "nested more than 16 deep")
    check = run_agpt("site", "check", str(prof))  # every problem, one line each
    assert check.returncode == 2 and "Traceback" not in check.stderr
    assert "SITE_DESCRIPTION: ${NAME:-...} nested more than 16 deep" in check.stderr
    import subprocess
    import sys

    gate = subprocess.run([sys.executable, "-m", "agpt.site", str(prof)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "python")}, timeout=60)  # fmt: skip
    assert gate.returncode == 2 and "Traceback" not in gate.stderr, gate.stderr
