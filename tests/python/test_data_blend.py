"""`agpt blend`, `agpt data verify|inspect` and `BlendedDataset`: per-batch mixture, packing, epochs,
byte-identical builds (also across MPI rank counts), pinned manifest, and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from agpt.data import BlendedDataset, sample_indices
from agpt.data.blend import BlendSettings, build
from agpt.data.greedy import deficit_sequence
from agpt.data.mmidx import Shard
from agpt.data.tokenize import TokenizeSettings, run
from agpt.errors import DataError
from data_util import STDLIB, blend_cli, run_agpt, tree_bytes

L = 32

CORPORA = {  # name: (weight, sources, shard tokens)
    "web": (0.6, ["argparse.py", "configparser.py", "difflib.py"], 20000),
    "code": (0.3, ["json/decoder.py", "json/encoder.py", "textwrap.py"], 3000),
    "books": (0.1, ["bisect.py"], 100000),  # small: asked for more than it holds -> epochs
}


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory, sp_model: Path) -> Path:
    """Three corpora tokenized into shards, and `list.txt` weighting them 0.6 / 0.3 / 0.1."""
    d = tmp_path_factory.mktemp("shards")
    lines = []
    for name, (weight, sources, shard_tokens) in CORPORA.items():
        src = d / f"{name}.txt"
        src.write_text("\n\n".join((STDLIB / s).read_text() for s in sources))
        out = d / name
        run(
            TokenizeSettings(
                model=str(sp_model),
                inputs=[str(src)],
                output=str(out),
                shard_tokens=shard_tokens,
                workers=1,
                quiet=True,
                corpus=name,
            )
        )
        for line in (out / "filelist.txt").read_text().splitlines():
            w, prefix, corpus = line.split()
            lines.append(f"{float(w) * weight:.10g} {prefix} {corpus}\n")
    (d / "list.txt").write_text("# weight prefix corpus\n" + "".join(lines))
    return d


def _blend(
    shards: Path, out: Path, n: int = 4000, seed: int = 7, file_list: Path | None = None, **kw: object
) -> dict:  # type: ignore[type-arg]
    return build(
        BlendSettings(
            file_list=str(file_list or shards / "list.txt"),
            seq_len=L,
            num_samples=n,
            seed=seed,
            output=str(out),
            **kw,
        )
    )  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def blended(shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("blend") / "b"
    _blend(shards, out)
    return out


@pytest.mark.parametrize("window", [64, 256, 1024])
def test_every_window_within_two_of_target(blended: Path, window: int) -> None:
    ds = BlendedDataset(blended)
    corpus = np.array([ds.corpora.index(ds.corpus_of(i)) for i in range(len(ds))])
    for k, name in enumerate(ds.corpora):
        c = np.concatenate([[0], np.cumsum(corpus == k)])
        counts = c[window:] - c[:-window]
        target = CORPORA[name][0] * window
        assert np.abs(counts - target).max() <= 2, (name, counts.min(), counts.max(), target)


def test_flat_blending_drifts_but_corpus_first_does_not() -> None:
    """Why two levels: 1,000 equal files of a 10% corpus, blended flat with 2 big files."""
    weights = np.array([0.45, 0.45] + [0.1 / 1000] * 1000)
    flat = deficit_sequence(weights / weights.sum(), 20000)
    small = np.concatenate([[0], np.cumsum(flat >= 2)])
    drift = np.abs((small[1024:] - small[:-1024]) - 102.4).max()
    corpus_first = deficit_sequence(np.array([0.45, 0.45, 0.1]), 20000)
    c = np.concatenate([[0], np.cumsum(corpus_first == 2)])
    assert np.abs((c[1024:] - c[:-1024]) - 102.4).max() <= 2 < drift


def test_c_kernel_and_python_loop_agree() -> None:
    w = np.array([0.5, 0.25, 0.125, 0.0625, 0.0625]) * 0.999 + 0.0002
    assert np.array_equal(
        deficit_sequence(w / w.sum(), 5000), deficit_sequence(w / w.sum(), 5000, use_c=False)
    )


def test_samples_are_packed_shuffled_documents(blended: Path) -> None:
    ds = BlendedDataset(blended)
    m = ds.manifest
    doc_order = np.load(blended / "doc_order.npy")
    sample_idx = np.load(blended / "sample_idx.npy")
    rng = np.random.default_rng(0)
    for i in rng.choice(len(ds), 200, replace=False):
        f, s = ds.locate(int(i))
        info = m["files"][f]
        shard = Shard(info["prefix"])
        order = doc_order[info["doc_order_offset"] : info["doc_order_offset"] + info["doc_order_count"]]
        assert info["samples"] <= info["sample_idx_count"] - 1
        # Every epoch lists each document exactly once.
        for e in range(info["epochs"]):
            assert sorted(order[e * len(shard) : (e + 1) * len(shard)].tolist()) == list(range(len(shard)))
        # Sample s is tokens [s*L, s*L + L] of the epoch-ordered document stream.
        p0 = int(sample_idx[info["sample_idx_offset"] + s][0])
        stream = np.concatenate([np.asarray(shard[int(d)]) for d in order[p0 : p0 + 80]])
        start = s * L - sum(int(shard.index.sizes[int(d)]) for d in order[:p0])
        item = ds[int(i)]
        assert item["tokens"].shape == (L + 1,) and item["tokens"].dtype == np.int64
        assert item["tokens"].tolist() == stream[start : start + L + 1].tolist()
        assert item["corpus"] == info["corpus"]


def test_epochs_reported_for_a_corpus_asked_for_more_than_it_holds(shards: Path, tmp_path: Path) -> None:
    r = blend_cli(shards / "list.txt", tmp_path / "b", "--seq-len", str(L), "--num-samples", "4000")
    assert r.returncode == 0, r.stderr
    assert "books asked for more tokens than held: repeated in epochs" in r.stdout
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    books = next(c for c in m["corpora"] if c["name"] == "books")
    assert books["epochs"] > 1 and books["max_file_epochs"] >= 2
    web = next(c for c in m["corpora"] if c["name"] == "web")
    assert web["epochs"] < 1
    r = run_agpt("data", "inspect", str(tmp_path / "b"), "--json", "--show", "2")
    info = json.loads(r.stdout)
    assert [c["name"] for c in info["corpora"]] == ["web", "code", "books"]
    assert abs(info["corpora"][0]["weight_effective"] - 0.6) < 1e-3
    assert len(info["samples"]) == 2 and info["samples"][0]["text"]
    r = run_agpt("data", "inspect", str(tmp_path / "b"))
    assert r.returncode == 0 and "effective" in r.stdout and "repeated" in r.stdout


def test_builds_byte_identical_across_runs_and_rank_counts(
    shards: Path, blended: Path, tmp_path: Path
) -> None:
    _blend(shards, tmp_path / "again")
    r = blend_cli(
        shards / "list.txt",
        tmp_path / "mpi",
        "--seq-len",
        str(L),
        "--num-samples",
        "4000",
        "--seed",
        "7",
        mpi=3,
    )
    assert r.returncode == 0, r.stderr
    want = tree_bytes(blended, ("*.npy", "manifest.json"))
    assert len(want) == 5
    assert tree_bytes(tmp_path / "again", ("*.npy", "manifest.json")) == want
    assert tree_bytes(tmp_path / "mpi", ("*.npy", "manifest.json")) == want
    # A different seed changes the order but not the mixture.
    other = _blend(shards, tmp_path / "seed", seed=8)
    assert other["cache_key"] != json.loads((blended / "manifest.json").read_text())["cache_key"]
    assert np.array_equal(np.load(tmp_path / "seed" / "blend_file.npy"), np.load(blended / "blend_file.npy"))
    assert not np.array_equal(
        np.load(tmp_path / "seed" / "blend_sample.npy"), np.load(blended / "blend_sample.npy")
    )


def _copy_shards(shards: Path, d: Path) -> Path:
    """A private copy of the shards and list (so tests can damage them)."""
    for name in CORPORA:
        shutil.copytree(shards / name, d / name)
    text = (shards / "list.txt").read_text().replace(str(shards), str(d))
    (d / "list.txt").write_text(text)
    return d / "list.txt"


def _key(out: Path) -> str:
    return str(json.loads((out / "manifest.json").read_text())["cache_key"])


def test_changes_change_the_key_and_verify_names_them(shards: Path, sp_model: Path, tmp_path: Path) -> None:
    lst = _copy_shards(shards, tmp_path)
    for name in CORPORA:  # shards without a tokenize record: --tokenizer is the only word on it
        (tmp_path / name / "tokenize.json").unlink()
    model = tmp_path / "tok.model"
    shutil.copy(sp_model, model)
    base = tmp_path / "base"
    _blend(shards, base, n=500, file_list=lst, tokenizer=str(model))
    r = run_agpt("data", "verify", str(base))
    assert r.returncode == 0 and "ok" in r.stdout

    # A weight.
    lines = lst.read_text().splitlines()
    lines[1] = "0.5 " + lines[1].split(" ", 1)[1]
    lst.write_text("\n".join(lines) + "\n")
    r = run_agpt("data", "verify", str(base))
    assert r.returncode == 2 and f"file list {lst}" in r.stderr
    _blend(shards, tmp_path / "w", n=500, file_list=lst, tokenizer=str(model))
    assert _key(tmp_path / "w") != _key(base)

    # A shard: re-tokenized with one document less.
    prefix = lines[2].split()[1]
    shard = Shard(prefix)
    from agpt.data.mmidx import ShardWriter

    w = ShardWriter(prefix, shard.dtype)
    w.add_documents(
        np.asarray(shard.tokens[int(shard.index.pointers[1]) // 2 :]), np.asarray(shard.index.sizes[1:])
    )
    del shard
    w.close()
    r = run_agpt("data", "verify", str(tmp_path / "w"))
    assert r.returncode == 2 and f"shard {prefix}.bin" in r.stderr
    with pytest.raises(DataError, match=f"shard {prefix}") as exc:
        BlendedDataset(tmp_path / "w")
    assert exc.value.exit_code == 2
    _blend(shards, tmp_path / "s", n=500, file_list=lst, tokenizer=str(model))
    assert _key(tmp_path / "s") != _key(tmp_path / "w")

    # The tokenizer.
    r = run_agpt(
        "tokenizer",
        "train",
        "--input",
        str(STDLIB / "bisect.py"),
        "--vocab-size",
        "400",
        "--output",
        str(model),
    )
    assert r.returncode == 0, r.stderr
    r = run_agpt("data", "verify", str(tmp_path / "s"))
    assert r.returncode == 2 and f"tokenizer {model}" in r.stderr
    _blend(shards, tmp_path / "t", n=500, file_list=lst, tokenizer=str(model))
    assert _key(tmp_path / "t") != _key(tmp_path / "s")
    # The trainer can insist on its own tokenizer.
    with pytest.raises(DataError, match="tokenizer"):
        BlendedDataset(tmp_path / "s", tokenizer=str(model))
    # Shards that recorded their tokenizer refuse another one.
    r = blend_cli(shards / "list.txt", tmp_path / "x", "--seq-len", "8", "--num-samples", "10", "--tokenizer", str(model))  # fmt: skip
    assert r.returncode == 2 and "made with another tokenizer" in r.stderr


def _corrupt(kind: str, lst: Path) -> str:
    """Damage the copied data one way; returns the text the error line must contain."""
    lines = lst.read_text().splitlines()
    prefix = lines[2].split()[1]
    if kind.startswith("weight="):
        lines[2] = kind.split("=", 1)[1] + " " + lines[2].split(" ", 1)[1]
        lst.write_text("\n".join(lines) + "\n")
        return f"{lst}:3: weight"
    if kind == "fields":
        lines[2] = lines[2].rsplit(" ", 1)[0]
        lst.write_text("\n".join(lines) + "\n")
        return f"{lst}:3: expected 'WEIGHT PREFIX CORPUS'"
    if kind == "no-bin":
        Path(f"{prefix}.bin").unlink()
        return f"{prefix}.bin: missing"
    if kind == "no-idx":
        Path(f"{prefix}.idx").unlink()
        return f"{prefix}.idx: missing"
    idx = Path(f"{prefix}.idx")
    data = idx.read_bytes()
    if kind == "truncated-idx":
        idx.write_bytes(data[: len(data) - 12])
        return f"{prefix}.idx: truncated or corrupt"
    if kind == "magic":
        idx.write_bytes(b"NOTANIDX\x00" + data[9:])
        return f"{prefix}.idx: not an MMIDIDX"
    if kind == "pointers":
        arr = bytearray(data)
        count = int.from_bytes(data[18:26], "little")
        at = 34 + 4 * count + 8  # pointer of document 1
        arr[at : at + 8] = (int.from_bytes(data[at : at + 8], "little") + 2).to_bytes(8, "little")
        idx.write_bytes(bytes(arr))
        return f"{prefix}.idx: pointer of document 1"
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "weight=0",
        "weight=-1",
        "weight=nan",
        "weight=abc",
        "weight=inf",
        "fields",
        "no-bin",
        "no-idx",
        "truncated-idx",
        "magic",
        "pointers",
    ],
)
def test_bad_input_exit_2_naming_it_and_nothing_damaged(shards: Path, tmp_path: Path, kind: str) -> None:
    lst = _copy_shards(shards, tmp_path)
    out = tmp_path / "b"
    _blend(shards, out, n=300, file_list=lst)
    before = tree_bytes(out, ("*.npy", "manifest.json"))
    needle = _corrupt(kind, lst)
    for target in (out, tmp_path / "new"):
        r = blend_cli(lst, target, "--seq-len", str(L), "--num-samples", "300", "--overwrite")
        assert r.returncode == 2, r.stderr
        lines = [x for x in r.stderr.splitlines() if x.startswith("agpt: error:")]
        assert len(lines) == 1 and needle in lines[0], r.stderr
    assert tree_bytes(out, ("*.npy", "manifest.json")) == before
    assert not (tmp_path / "new" / "manifest.json").exists()


def test_refuses_to_overwrite_another_blend(shards: Path, blended: Path) -> None:
    r = blend_cli(shards / "list.txt", blended, "--seq-len", str(L), "--num-samples", "4000", "--seed", "7")
    assert r.returncode == 0 and "up to date" in r.stdout
    r = blend_cli(shards / "list.txt", blended, "--seq-len", str(L), "--num-samples", "600")
    assert r.returncode == 2 and "holds another blend" in r.stderr


def test_sample_indices_partition_each_global_batch_and_resume() -> None:
    world, micro, gbs = 4, 2, 16
    seen: list[int] = []
    for rank in range(world):
        table = sample_indices(32, rank, world, micro, gbs)
        assert table.shape == (gbs // (world * micro), micro)
        seen += table.ravel().tolist()
    assert sorted(seen) == list(range(32, 48))
    # Stateless resume: step k of a restarted run reads what step k of an uninterrupted run read.
    assert np.array_equal(
        sample_indices(3 * gbs, 1, world, micro, gbs), sample_indices(0, 1, world, micro, gbs) + 3 * gbs
    )
    with pytest.raises(Exception, match="multiple"):
        sample_indices(0, 0, 3, 2, 16)


def test_dataset_pickles_by_path(blended: Path) -> None:
    import pickle

    ds = BlendedDataset(blended)
    blob = pickle.dumps(ds)
    assert len(blob) < 2000
    again = pickle.loads(blob)
    assert len(again) == len(ds) and again[17]["tokens"].tolist() == ds[17]["tokens"].tolist()


def test_micro_batches_resume_where_they_stopped(blended: Path) -> None:
    from agpt.data import micro_batches

    ds = BlendedDataset(blended)
    world, micro, gbs = 2, 2, 8
    full = micro_batches(ds, 0, 1, world, micro, gbs)
    first = [next(full) for _ in range(6)]  # 3 global batches (2 accumulation steps each)
    resumed = micro_batches(ds, 2 * gbs, 1, world, micro, gbs)
    assert np.array_equal(next(resumed), first[4]) and np.array_equal(next(resumed), first[5])
    assert first[0].shape == (micro, L + 1)
    assert np.array_equal(first[0][0], ds[gbs // world]["tokens"])  # rank 1 starts half way


def test_shuffle_stream_is_pinned() -> None:
    """SplitMix64's published first outputs for seed 0, and one permutation, fixed forever (a numpy
    upgrade must not reshuffle a blend)."""
    from agpt.data.rng import permutation, random_u64, stream_key

    assert [int(x) for x in random_u64(0, 3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    assert permutation(stream_key(1, "docs", 0, 0), 12).tolist() == [11, 4, 6, 0, 8, 7, 1, 9, 3, 5, 2, 10]


def test_blend_and_shards_moved_together_still_open(shards: Path, sp_model: Path, tmp_path: Path) -> None:
    """Staged to node-local disk (blend and shards copied together): the copy is read, and verified."""
    root = tmp_path / "root"
    lst = _copy_shards(shards, root)
    shutil.copy(sp_model, root / "tok.model")
    _blend(shards, root / "blend", n=200, file_list=lst, tokenizer=str(root / "tok.model"))
    want = [BlendedDataset(root / "blend")[i]["tokens"].tolist() for i in range(20)]
    shutil.copytree(root, tmp_path / "local")
    shutil.rmtree(root)
    ds = BlendedDataset(tmp_path / "local" / "blend", verify="full")
    assert [ds[i]["tokens"].tolist() for i in range(20)] == want
    r = run_agpt("data", "verify", str(tmp_path / "local" / "blend"))
    assert r.returncode == 0, r.stderr
