"""Bad files the tools read back and bad usage: one line (plus a hint for usage), exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, agpt_env


def agpt(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "bin" / "agpt"), *args],
        capture_output=True,
        text=True,
        env=agpt_env(),
        cwd=cwd,
        timeout=120,
    )


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


TINY = (ROOT / "jobs/configs/tiny.yaml").read_text()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("optim:\n  lr: .nan\n", "optim.lr: must be a finite number"),
        ("optim:\n  lr: .inf\n", "optim.lr: must be a finite number"),
        ("optim:\n  eps: -1\n", "optim.eps: must be positive (got -1.0)"),
        ("optim:\n  eps: 0\n", "optim.eps: must be positive"),
        ("train:\n  steps: 1e400\n", "train.steps: expected int"),
        (
            "train:\n  steps: 99999999999999999999999\n",
            "train.steps: must be a whole number <= 9007199254740992, got 99999999999999999999999",
        ),
        ("optim:\n  lr: 1.0e-3\n  lr: 2.0e-3\n", "duplicate key 'lr' on line 3 (first on line 2)"),
    ],
)
def test_bad_train_config_values_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    line = one_error_line(agpt("train", "--config", str(cfg), "--run-dir", str(tmp_path / "run")))
    assert message in line, line  # the file (when it is the culprit) or the field


def test_a_train_config_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(b"optim:\n  lr: 3e-4 # \xe9\n")
    line = one_error_line(agpt("train", "--config", str(cfg), "--run-dir", str(tmp_path / "run")))
    assert line == f"agpt: error: {cfg}: not UTF-8 text (byte 20)"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["yeet"],
        ["yeet", "--bogus", "x"],
        ["data", "verify"],
        ["train", "--steps", "abc"],
        ["site", "show", "--x"],
    ],
)
def test_usage_errors_are_one_line_and_a_hint(args: list[str]) -> None:
    r = agpt(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    cmd = "agpt " + " ".join(a for a in args if not a.startswith("-") and a not in ("x", "abc"))
    assert len(lines) == 2, r.stderr
    assert lines[0].startswith(f"{cmd}: error: ")
    assert lines[1] == f"Try '{cmd} --help' for help."
    assert "Usage:" not in r.stderr


def test_file_list_weights_whose_sum_overflows(tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text("1e308 a c\n1e308 b c\n")
    args = [
        "blend",
        "--file-list",
        str(lst),
        "--output",
        str(tmp_path / "b"),
        "--seq-len",
        "8",
        "--num-samples",
        "4",
    ]
    line = one_error_line(agpt(*args))
    assert "weights sum to more than a float holds" in line
    assert not (tmp_path / "b").exists()


def test_a_lone_surrogate_in_a_jsonl_line_names_the_line(tmp_path: Path, sp_model: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "fine"}\n{"text": "a\\ud800b"}\n')
    out = tmp_path / "o"
    line = one_error_line(
        agpt("tokenize", "--input", str(src), "--model", str(sp_model), "--output", str(out))
    )
    assert f"{src}:2: field 'text' holds a lone surrogate" in line


def test_disk_full_while_training_names_the_file() -> None:
    code = (
        "import errno, os\n"
        "from agpt.train.entry import run_and_exit\n"
        "def f():\n"
        "    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), '/run/x/progress')\n"
        "run_and_exit(f)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=agpt_env(), timeout=60
    )
    assert r.returncode == 1
    assert (
        r.stderr.strip() == "agpt: error: disk full: cannot write /run/x/progress (No space left on device)"
    )
