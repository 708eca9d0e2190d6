"""Property-based: the data files the tools read back: a shard's `.idx`, JSONL input lines, a file list's
weights, and a checkpoint's `.complete`.  Each is the documented result or one line and exit 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from agpt import ckptdir
from agpt.data import mmidx
from agpt.data.blend import parse_file_list
from agpt.data.readers import iter_documents, plan_chunks
from agpt.rundir import COMPLETE
from agpt.train import checkpoint as ck
from fuzz_util import EXTREME_NUMBERS, FUZZ, is_error, one_line_exit_2, truncations


def _valid_shard(d: Path) -> str:
    prefix = str(d / "s")
    w = mmidx.ShardWriter(prefix, np.dtype(np.uint16))
    w.add_documents(np.arange(30, dtype=np.uint16), np.array([10, 5, 15]))
    w.close()
    return prefix


@FUZZ
@given(mutate=st.data())
def test_idx(tmp_path_factory, mutate: st.DataObject) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("idx")
    prefix = _valid_shard(d)
    idx = mmidx.idx_path(prefix)
    data = mutate.draw(st.one_of(truncations(idx.read_bytes()), st.binary(max_size=200)))
    idx.write_bytes(data)
    got = one_line_exit_2(lambda: mmidx.Shard(prefix))
    if not is_error(got):
        shard = got
        total = sum(len(shard[i]) for i in range(len(shard)))  # type: ignore[arg-type]
        assert total * 2 <= mmidx.bin_path(prefix).stat().st_size


JSON_LINES = st.lists(
    st.one_of(
        st.binary(max_size=40),
        st.text(max_size=20).map(lambda t: json.dumps({"text": t}).encode()),
        st.sampled_from(
            [
                b'{"text": "\\ud800"}',
                b'{"text": "a\\udfffb"}',
                b'{"text": 1e400}',
                b"[" * 5000,
                b'{"text": null}',
                b'{"text": "ok"}',
                b"\xff\xfe",
                b'{"text": "\\u0000"}',
            ]
        ),
    ),
    max_size=6,
)


@FUZZ
@given(lines=JSON_LINES)
def test_jsonl_lines(tmp_path_factory, lines: list[bytes]) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path_factory.mktemp("j") / "in.jsonl"
    p.write_bytes(b"\n".join(lines) + b"\n")

    def read() -> list[str]:
        out: list[str] = []
        for chunk in plan_chunks([p], 1 << 20):
            out += [text for text, _loc in iter_documents(chunk)]
        return out

    got = one_line_exit_2(read)
    if not is_error(got):
        for text in got:  # type: ignore[union-attr]
            text.encode("utf-8")  # what the tokenizer is given is always encodable text


@FUZZ
@given(weights=st.lists(st.one_of(EXTREME_NUMBERS, st.text(max_size=6)), min_size=1, max_size=4))
def test_file_list_weights(tmp_path_factory, weights: list[object]) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("w")
    lines = [f"{w} p{i} c\n" for i, w in enumerate(weights)]
    (d / "list.txt").write_text("".join(lines), encoding="utf-8", errors="surrogateescape")
    got = one_line_exit_2(lambda: parse_file_list(d / "list.txt"))
    if not is_error(got):
        ws = [e.weight for e in got]  # type: ignore[union-attr]
        total = math.fsum(ws)
        assert math.isfinite(total) and all(w > 0 and w / total > 0 for w in ws)


@FUZZ
@given(
    marker=st.one_of(
        st.binary(max_size=100),
        st.fixed_dictionaries(
            {"step": st.one_of(EXTREME_NUMBERS, st.text(max_size=3))},
            optional={
                "sha256": st.one_of(
                    st.text(max_size=5), st.dictionaries(st.text(max_size=8), st.text(max_size=8))
                ),
                "world_size": EXTREME_NUMBERS,
            },
        ).map(lambda m: json.dumps(m, allow_nan=True).encode()),
    )
)
def test_checkpoint_marker(tmp_path_factory, marker: bytes) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("ck") / "ckpt"
    d = root / "step-7"
    d.mkdir(parents=True)
    (d / "__0_0.distcp").write_bytes(b"data")
    (d / COMPLETE).write_bytes(marker)
    rec = ckptdir.read_marker(d)
    assert rec is None or type(rec["step"]) is int
    steps = ck.complete_steps(root, warn_unreadable=False)
    assert steps == [(7, d)] or (rec is not None and rec["step"] != 7 and steps == [])
    got = one_line_exit_2(lambda: ck.verify_digests(d))
    assert got is None or "\n" not in str(got)
    assert (d / "__0_0.distcp").read_bytes() == b"data"  # reading never changes a checkpoint
