"""Data tools never delete what they did not make, and `agpt data verify` pins every byte of a shard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agpt.data.blend import BlendSettings, build
from agpt.data.tokenize import TokenizeSettings, run
from data_util import STDLIB, run_agpt


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, sp_model: Path) -> tuple[Path, Path]:
    """One tokenized corpus (shards + its file list) and a blend of it."""
    d = tmp_path_factory.mktemp("corpus")
    src = d / "text.txt"
    src.write_text((STDLIB / "argparse.py").read_text())
    run(
        TokenizeSettings(
            model=str(sp_model), inputs=[str(src)], output=str(d / "tok"), shard_tokens=5000, quiet=True
        )
    )
    blend = d / "blend"
    build(
        BlendSettings(
            file_list=str(d / "tok/filelist.txt"), seq_len=32, num_samples=200, seed=1, output=str(blend)
        )
    )
    return d / "tok", blend


def foreign_work(out: Path) -> Path:
    work = out / ".work"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text("mine\n")
    return work


def test_tokenize_refuses_a_work_folder_it_did_not_make(sp_model: Path, tmp_path: Path) -> None:
    src = tmp_path / "text.txt"
    src.write_text((STDLIB / "bisect.py").read_text())
    out = tmp_path / "out"
    work = foreign_work(out)
    r = run_agpt("tokenize", "--input", str(src), "--model", str(sp_model), "--output", str(out))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{work} was not made by agpt tokenize" in r.stderr and len(r.stderr.splitlines()) == 1
    assert (work / "notes.txt").read_text() == "mine\n"


def test_blend_refuses_a_work_folder_it_did_not_make(corpus: tuple[Path, Path], tmp_path: Path) -> None:
    tok, _ = corpus
    out = tmp_path / "b"
    work = foreign_work(out)
    r = run_agpt(
        "blend",
        "--file-list",
        str(tok / "filelist.txt"),
        "--output",
        str(out),
        "--num-samples",
        "100",
        "--seq-len",
        "32",
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{work} was not made by agpt blend" in r.stderr
    assert (work / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize("tool", ["tokenize", "blend"])
def test_an_output_that_is_a_regular_file_is_one_line(
    corpus: tuple[Path, Path], sp_model: Path, tmp_path: Path, tool: str
) -> None:
    tok, _ = corpus
    out = tmp_path / "file"
    out.write_text("keep\n")
    if tool == "tokenize":
        args = [
            "tokenize",
            "--input",
            str(STDLIB / "bisect.py"),
            "--model",
            str(sp_model),
            "--output",
            str(out),
        ]
    else:
        args = ["blend", "--file-list", str(tok / "filelist.txt"), "--output", str(out)]
        args += ["--num-samples", "10", "--seq-len", "32"]
    r = run_agpt(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"--output {out}: exists and is not a directory" in r.stderr and "Traceback" not in r.stderr
    assert out.read_text() == "keep\n"


def test_verify_full_catches_a_same_size_change_in_a_bin(corpus: tuple[Path, Path], tmp_path: Path) -> None:
    _, blend = corpus
    manifest = json.loads((blend / "manifest.json").read_text())
    assert all(len(f["bin_sha256"]) == 64 for f in manifest["files"])
    r = run_agpt("data", "verify", str(blend))
    assert r.returncode == 0 and "note:" not in r.stdout, r.stdout + r.stderr
    bin_path = Path(manifest["files"][0]["prefix"] + ".bin")
    original = bin_path.read_bytes()
    try:
        blob = bytearray(original)
        blob[len(blob) // 2] ^= 0x01  # same size, the index still describes it
        bin_path.write_bytes(bytes(blob))
        r = run_agpt("data", "verify", str(blend))
        assert r.returncode == 2
        assert f"shard {bin_path}: sha256" in r.stderr and "same size" in r.stderr
        assert (
            run_agpt("data", "verify", str(blend), "--level", "idx").returncode == 0
        )  # cheaper levels: sizes
    finally:
        bin_path.write_bytes(original)


def test_an_older_manifest_without_bin_digests_stays_readable_and_says_so(
    corpus: tuple[Path, Path], tmp_path: Path
) -> None:
    _, blend = corpus
    old = tmp_path / "old"
    old.mkdir()
    for p in blend.iterdir():
        (old / p.name).write_bytes(p.read_bytes())
    manifest = json.loads((old / "manifest.json").read_text())
    for f in manifest["files"]:
        del f["bin_sha256"]
        f.pop("prefix_rel", None)
    (old / "manifest.json").write_text(json.dumps(manifest))
    r = run_agpt("data", "verify", str(old))
    assert r.returncode == 0, r.stderr
    n = len(manifest["files"])
    assert f"note: {n} of {n} shard .bin files have no digest pinned" in r.stdout


@pytest.mark.parametrize(
    "content",
    [
        b"[1, 2]",
        b'"x"',
        b"\xff\xfe",
        b"{",
        b'{"format": "agpt-blend-1"}',
        b'{"format": "agpt-blend-1", "files": 3}',
    ],
)
def test_a_malformed_manifest_is_one_line(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "manifest.json").write_bytes(content)
    r = run_agpt("data", "verify", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.startswith(f"agpt: error: {tmp_path}/manifest.json: ") and len(r.stderr.splitlines()) == 1
