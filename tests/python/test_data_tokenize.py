"""`agpt tokenizer train` and `agpt tokenize`: round trip, determinism across workers and ranks,
restart, and bad input."""

from __future__ import annotations

import gzip
import json
import os
import signal
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from agpt.data import tokenize as tok
from agpt.data.dist import Comm
from agpt.data.mmidx import Shard
from agpt.data.tokenizer import load
from agpt.errors import AgptError, BadInput, DataError
from data_util import independent_read, run_agpt, shard_prefixes, stdlib_documents, tokenize_cli, tree_bytes


def _write_inputs(d: Path, docs: list[str]) -> tuple[list[Path], list[str]]:
    """The same documents spread over every supported format; returns (files, docs in input order)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    parts = [docs[i::7] for i in range(7)]
    files = []
    txt = d / "a.txt"
    txt.write_text("\n\n\n".join(parts[0]) + "\n")  # several blank lines between documents
    files.append(txt)
    jl = d / "b.jsonl"
    jl.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(parts[1])))
    files.append(jl)
    gz = d / "c.jsonl.gz"
    with gzip.open(gz, "wt") as fh:
        fh.writelines(json.dumps({"text": t}) + "\n" for t in parts[2])
    files.append(gz)
    zst = d / "d.jsonl.zst"
    zst.write_bytes(
        zstandard.ZstdCompressor().compress(
            "".join(json.dumps({"text": t}) + "\n" for t in parts[3]).encode()
        )
    )
    files.append(zst)
    pqf = d / "e.parquet"
    pq.write_table(pa.table({"text": parts[4]}), pqf, row_group_size=7)
    files.append(pqf)
    arr = d / "f.json"
    arr.write_text(json.dumps([{"text": t} for t in parts[5]]))
    files.append(arr)
    one = d / "g.txt"
    one.write_text("\n\n".join(parts[6]))
    files.append(one)
    order = [t for p in parts[:6] for t in p] + ["\n\n".join(parts[6])]
    return files, order


def _tokenize(model: Path, files: list[Path], out: Path, *extra: str, mpi: int = 0) -> None:
    r = tokenize_cli(model, files, out, "--shard-tokens", "3000", *extra, mpi=mpi)
    assert r.returncode == 0, r.stdout + r.stderr


def test_round_trip_every_format(tmp_path: Path, sp_model: Path) -> None:
    docs = stdlib_documents(280)
    files, order = _write_inputs(tmp_path, docs)
    out = tmp_path / "out"
    # g.txt is one document per file: tokenize it in a second call with --doc-per-file.
    _tokenize(sp_model, files[:-1], out, "--chunk-bytes", "2048", "--workers", "2")
    _tokenize(sp_model, files[-1:], tmp_path / "one", "--doc-per-file")
    sp = load(sp_model)
    expected = [[*sp.encode(t), sp.eos_id()] for t in order]
    ours, theirs = [], []
    for prefix in shard_prefixes(out) + shard_prefixes(tmp_path / "one"):
        shard = Shard(prefix)
        assert shard.dtype == np.uint16
        ours += [shard[i].tolist() for i in range(len(shard))]
        theirs += [a.tolist() for a in independent_read(prefix)]
        last = shard.index
        assert int(last.pointers[-1]) + int(last.sizes[-1]) * 2 == Path(f"{prefix}.bin").stat().st_size
    assert ours == expected
    assert theirs == expected
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.datasets.indexed_dataset import IndexedDataset
    except Exception:  # megatron-core is optional: the struct reader above is the independent check
        return
    mega = []
    for prefix in shard_prefixes(out):
        ds = IndexedDataset(prefix, multimodal=False, mmap=True)
        mega += [ds[i].tolist() for i in range(len(ds))]
    assert mega == expected[: len(mega)]


def test_shards_fixed_size_and_file_list(tmp_path: Path, sp_model: Path) -> None:
    src = tmp_path / "a.txt"
    src.write_text("\n\n".join(stdlib_documents(200)))
    out = tmp_path / "out"
    r = tokenize_cli(sp_model, [src], out, "--shard-tokens", "2000", "--corpus", "code")
    assert r.returncode == 0, r.stderr
    for word in ("documents", "tokens", "MB/s", "tokens/s"):
        assert word in r.stdout
    meta = json.loads((out / "tokenize.json").read_text())
    tokens = [s["tokens"] for s in meta["shards"]]
    assert all(t >= 2000 for t in tokens[:-1]) and len(tokens) > 3
    lines = (out / "filelist.txt").read_text().splitlines()
    assert len(lines) == len(tokens)
    weights = [float(line.split()[0]) for line in lines]
    assert abs(sum(weights) - 1) < 1e-9
    assert all(line.split()[2] == "code" for line in lines)
    assert not (out / ".work").exists()


def test_identical_for_any_workers_and_ranks(tmp_path: Path, sp_model: Path) -> None:
    docs = stdlib_documents(240)
    files, _ = _write_inputs(tmp_path, docs)
    files = files[:-1]
    _tokenize(sp_model, files, tmp_path / "w1", "--workers", "1")
    _tokenize(sp_model, files, tmp_path / "w3", "--workers", "3", "--chunk-bytes", "1500")
    _tokenize(sp_model, files, tmp_path / "r3", "--workers", "1", "--chunk-bytes", "3000", mpi=3)
    a = tree_bytes(tmp_path / "w1")
    assert len(a) > 4
    assert tree_bytes(tmp_path / "w3") == a
    assert tree_bytes(tmp_path / "r3") == a


def test_rerun_skips_finished_shards(tmp_path: Path, sp_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agpt.data import tokenize as tk

    src = tmp_path / "a.txt"
    src.write_text("\n\n".join(stdlib_documents(150)))
    out = tmp_path / "out"
    _tokenize(sp_model, [src], out)
    before = tree_bytes(out)
    r = tokenize_cli(sp_model, [src], out, "--shard-tokens", "3000")
    assert r.returncode == 0 and "up to date" in r.stdout

    # A crash while writing shard 2: shards 0 and 1 are complete, shard 2 is a half-written temporary file.
    real = tk.write_shard

    def crash(args: tuple) -> int:  # type: ignore[type-arg]
        if args[0].index == 2:
            prefix = Path(args[0].prefix)
            (prefix.parent / f".{prefix.name}.bin.4242.0badcafe.tmp").write_bytes(
                b"half"
            )  # agpt.safewrite's name
            raise RuntimeError("node died")
        return real(args)

    again = tmp_path / "again"
    settings = tk.TokenizeSettings(
        model=str(sp_model), inputs=[str(src)], output=str(again), shard_tokens=3000, workers=1, quiet=True
    )
    monkeypatch.setattr(tk, "write_shard", crash)
    with pytest.raises(RuntimeError):
        tk.run(settings)
    monkeypatch.setattr(tk, "write_shard", real)
    done = {p.name: p.stat().st_mtime_ns for p in again.glob("*.idx")}
    assert sorted(done) == ["data_00000.idx", "data_00001.idx"]
    tk.run(settings)
    assert {n: (again / n).stat().st_mtime_ns for n in done} == done  # finished shards were skipped
    assert tree_bytes(again) == before
    assert not list(again.glob("*.tmp")) and not list(again.glob(".*.tmp"))

    # Shards with no record of how they were made are never trusted nor overwritten silently.
    (out / "tokenize.json").unlink()
    r = tokenize_cli(sp_model, [src], out, "--shard-tokens", "3000")
    assert r.returncode == 2 and "did not record" in r.stderr
    r = tokenize_cli(sp_model, [src], out, "--shard-tokens", "3000", "--overwrite")
    assert r.returncode == 0, r.stderr
    assert tree_bytes(out) == before


@pytest.mark.parametrize(
    ("content", "name", "needle"),
    [
        ('{"text": "ok"}\n{"body": "no text"}\n', "x.jsonl", "x.jsonl:2: no 'text' field"),
        ('{"text": "ok"}\n{"text": ""}\n', "x.jsonl", "x.jsonl:2: empty document"),
        ('{"text": "ok"}\n{"text": \n', "x.jsonl", "x.jsonl:2: invalid JSON"),
        ("hello", "x.csv", "x.csv: unknown input type"),
    ],
)
def test_bad_input_exit_2_and_nothing_damaged(
    tmp_path: Path, sp_model: Path, content: str, name: str, needle: str
) -> None:
    good = tmp_path / "good.txt"
    good.write_text("\n\n".join(stdlib_documents(40)))
    out = tmp_path / "out"
    _tokenize(sp_model, [good], out)
    before = tree_bytes(out) | {"meta": (out / "tokenize.json").read_bytes()}
    bad = tmp_path / name
    bad.write_text(content)
    for target in (out, tmp_path / "new"):
        r = tokenize_cli(sp_model, [good, bad], target, "--overwrite")
        assert r.returncode == 2, r.stderr
        lines = [x for x in r.stderr.splitlines() if x.startswith("agpt: error:")]
        assert len(lines) == 1 and needle in lines[0], r.stderr
    assert not list((tmp_path / "new").glob("*.idx"))
    # The earlier result is untouched (the bad run died before writing any shard).
    assert tree_bytes(out) | {"meta": (out / "tokenize.json").read_bytes()} == before


def _job(job: tuple[str, int]) -> tuple[int, int, int, int, int]:
    """A worker's job for the pool tests: job 0 fails as bad input does (or its worker dies, `die`); the others
    leave a mark and take a little while."""
    folder, n = job
    if n == 0 and Path(folder, "die").exists():
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer ends a worker
    if n == 0:
        raise BadInput("x.jsonl:2: no 'text' field")
    Path(folder, f"ran.{n}").touch()
    time.sleep(0.05)
    return (n, 0, 0, 1, 0)


def test_a_failing_job_cancels_the_rest_and_never_hangs(tmp_path: Path) -> None:
    """The first failure is raised as itself, the jobs not started are never run, and the pool ends: 20 times
    (multiprocessing.Pool's terminate() hung 1 run in 40 on loaded cores, killing workers that held its locks)."""
    for attempt in range(20):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        jobs = [(str(folder), n) for n in range(40)]
        with pytest.raises(BadInput, match="no 'text' field"):
            tok._run_jobs(_job, jobs, 2, Comm(), None, lambda r: 1)
        assert len(list(folder.glob("ran.*"))) < 39


@pytest.mark.timeout(120)
def test_a_worker_killed_outright_is_an_error_not_a_wait(tmp_path: Path) -> None:
    (tmp_path / "die").touch()
    with pytest.raises(
        AgptError, match=r"a worker process died .*out of memory\?.*run the same command again"
    ):
        tok._run_jobs(_job, [(str(tmp_path), n) for n in range(8)], 2, Comm(), None, lambda r: 1)


def test_empty_documents_can_be_skipped(tmp_path: Path, sp_model: Path) -> None:
    src = tmp_path / "x.jsonl"
    src.write_text('{"text": "a b"}\n{"text": "  "}\n{"text": "c"}\n')
    r = tokenize_cli(sp_model, [src], tmp_path / "o", "--skip-empty")
    assert r.returncode == 0, r.stderr
    assert "skipped empty" in r.stdout
    meta = json.loads((tmp_path / "o" / "tokenize.json").read_text())
    assert meta["totals"]["docs"] == 2


def test_missing_model_and_input(tmp_path: Path, sp_model: Path) -> None:
    r = tokenize_cli(tmp_path / "nope.model", ["x"], tmp_path / "o")
    assert r.returncode == 2 and "nope.model" in r.stderr
    r = tokenize_cli(sp_model, [tmp_path / "none.txt"], tmp_path / "o")
    assert r.returncode == 2 and "none.txt" in r.stderr


def test_bad_input_under_mpi_is_one_line(tmp_path: Path, sp_model: Path) -> None:
    good = tmp_path / "good.txt"
    good.write_text("\n\n".join(stdlib_documents(30)))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": "typo"}\n')
    r = tokenize_cli(sp_model, [good, bad], tmp_path / "o", "--workers", "1", "--chunk-bytes", "1024", mpi=3)
    assert r.returncode == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("agpt: error:")]
    assert errors == [f"agpt: error: {bad}:2: no 'text' field (set --text-key)"], r.stderr


def test_plain_progress_lines_when_not_a_terminal(
    tmp_path: Path, sp_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "a.txt"
    src.write_text("\n\n".join(stdlib_documents(100)))
    monkeypatch.setenv("AGPT_PROGRESS_SECONDS", "0")
    import subprocess

    from conftest import ROOT, agpt_env

    r = subprocess.run(
        [str(ROOT / "bin" / "agpt"), "tokenize", "--model", str(sp_model), "--input", str(src), "--output", str(tmp_path / "o"), "--chunk-bytes", "2048", "--workers", "1"],
        capture_output=True, text=True, env=agpt_env(), timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("tokenize: ")]
    assert len(lines) > 3 and "B/s" in lines[-2] and "done in" in lines[-1] and "\r" not in r.stderr


def test_int32_shards_for_large_vocabularies(tmp_path: Path) -> None:
    from agpt.data.mmidx import ShardWriter, token_dtype

    assert token_dtype(65499) == np.uint16 and token_dtype(65500) == np.int32
    docs = [
        np.array([70000, 5, 2], dtype=np.int32),
        np.array([2], dtype=np.int32),
        np.arange(100, 140, dtype=np.int32),
    ]
    w = ShardWriter(tmp_path / "big", np.dtype(np.int32))
    w.add_documents(np.concatenate(docs), np.array([len(d) for d in docs]))
    w.close()
    assert [d.tolist() for d in independent_read(tmp_path / "big")] == [d.tolist() for d in docs]
    assert [Shard(tmp_path / "big")[i].tolist() for i in range(3)] == [d.tolist() for d in docs]
    assert not list(tmp_path.glob("*.tmp"))


def test_tokenizer_train_bad_input(tmp_path: Path) -> None:
    src = tmp_path / "t.txt"
    src.write_text("hello world\n")
    r = run_agpt(
        "tokenizer", "train", "--input", str(src), "--vocab-size", "8", "--output", str(tmp_path / "m.model")
    )
    assert r.returncode == 2 and "--vocab-size 8" in r.stderr
    r = run_agpt(
        "tokenizer", "train", "--input", str(src), "--vocab-size", "500", "--output", str(tmp_path / "m.bin")
    )
    assert r.returncode == 2 and "--output" in r.stderr
    r = run_agpt(
        "tokenizer",
        "train",
        "--input",
        str(tmp_path / "none"),
        "--vocab-size",
        "500",
        "--output",
        str(tmp_path / "m.model"),
    )
    assert r.returncode == 2 and "none" in r.stderr
    assert not (tmp_path / "m.model").exists()


def test_bos_no_eod_and_directory_input(tmp_path: Path, sp_model: Path) -> None:
    docs = stdlib_documents(30)
    d = tmp_path / "in"
    (d / "sub").mkdir(parents=True)
    (d / ".hidden").mkdir()
    (d / "sub" / "b.txt").write_text("\n\n".join(docs[10:]))
    (d / "a.txt").write_text("\n\n".join(docs[:10]))
    (d / ".hidden" / "junk.bin").write_bytes(b"\xff\xfe")
    out = tmp_path / "o"
    r = tokenize_cli(sp_model, [d], out, "--bos", "--no-append-eod")
    assert r.returncode == 0, r.stderr
    sp = load(sp_model)
    got = [a.tolist() for p in shard_prefixes(out) for a in independent_read(p)]
    assert got == [[sp.bos_id(), *sp.encode(t)] for t in docs]  # a.txt before sub/b.txt; hidden skipped


def test_overwrite_with_less_data_leaves_no_stale_shards(tmp_path: Path, sp_model: Path) -> None:
    src = tmp_path / "a.txt"
    src.write_text("\n\n".join(stdlib_documents(150)))
    out = tmp_path / "o"
    _tokenize(sp_model, [src], out)
    many = len(list(out.glob("*.idx")))
    src.write_text("\n\n".join(stdlib_documents(30)))
    r = tokenize_cli(sp_model, [src], out, "--shard-tokens", "3000")
    assert r.returncode == 2 and "other inputs" in r.stderr
    _tokenize(sp_model, [src], out, "--overwrite")
    assert (
        sorted(p[:-4] for p in map(str, out.glob("*.idx"))) == shard_prefixes(out)
        and len(shard_prefixes(out)) < many
    )
    # A deleted shard of the same inputs is simply made again.
    Path(f"{shard_prefixes(out)[0]}.idx").unlink()
    _tokenize(sp_model, [src], out)
    assert all(Path(f"{p}.idx").exists() for p in shard_prefixes(out))


def test_compressed_inputs_stream_in_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compressed file is read in blocks cut at document boundaries: same documents as one read,
    and error line numbers still count from the file's start."""
    import zstandard

    from agpt.data import readers

    docs = stdlib_documents(60)
    jl = tmp_path / "a.jsonl.gz"
    with gzip.open(jl, "wt") as fh:
        fh.writelines(json.dumps({"text": t}) + "\n" for t in docs)
    txt = tmp_path / "b.txt.zst"
    txt.write_bytes(zstandard.ZstdCompressor().compress(("\n\n \n".join(docs) + "\n").encode()))
    bad = tmp_path / "c.jsonl.zst"
    bad.write_bytes(
        zstandard.ZstdCompressor().compress(
            ("".join(json.dumps({"text": t}) + "\n" for t in docs) + '{"x": 1}\n').encode()
        )
    )
    monkeypatch.setattr(readers, "STREAM_BLOCK", 97)
    for path in (jl, txt):
        (chunk,) = readers.plan_chunks([path], 1 << 20)
        assert [t for t, _ in readers.iter_documents(chunk)] == docs
    (chunk,) = readers.plan_chunks([bad], 1 << 20)
    with pytest.raises(DataError, match=f"{bad}:{len(docs) + 1}: no 'text' field"):
        list(readers.iter_documents(chunk))
    broken = tmp_path / "d.jsonl.gz"
    broken.write_bytes(jl.read_bytes()[:200])
    (chunk,) = readers.plan_chunks([broken], 1 << 20)
    with pytest.raises(DataError, match="cannot decompress"):
        list(readers.iter_documents(chunk))
