"""`agpt ckpt export`: a trained checkpoint becomes a Hugging Face folder that transformers loads and runs
exactly as agpt does, with a tokenizer that encodes as the run's SentencePiece model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckpt_util import STEPS, TINY, files_of
from data_util import run_agpt

pytestmark = pytest.mark.slow

TEXTS = [
    "def encode(self, o):\n    return json.dumps(o)",
    "  two  spaces,\ttabs\tand\n\nblank lines  ",
    "Unicode: héllo wörld, ﬁ ligature, ① circled, 日本語, emoji 🙂",
    "x",
]


def _agpt_model(step: Path):
    """agpt's own Transformer, fp32 on CPU, with the checkpoint's master weights read by DCP directly."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader

    from agpt.train.config import ModelConfig
    from agpt.train.model import Transformer

    meta = json.loads((step / "meta.json").read_text())
    model = Transformer(ModelConfig(**meta["config"]["model"]))
    model.init_weights()
    sd = {f"model.{k}": v.detach().clone() for k, v in model.state_dict().items()}
    dcp.load(sd, storage_reader=FileSystemReader(step), no_dist=True)
    model.load_state_dict({k[len("model.") :]: v for k, v in sd.items()})
    return model.eval()


def test_transformers_llama_matches_agpt_forward(trained: Path, exported: Path) -> None:
    import torch
    from transformers import LlamaForCausalLM

    ours = _agpt_model(trained / "ckpt" / f"step-{STEPS}")
    hf = LlamaForCausalLM.from_pretrained(exported, dtype=torch.float32).eval()
    assert type(hf).__name__ == "LlamaForCausalLM"
    tokens = torch.randint(0, ours.cfg.vocab_size, (2, 64), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a = ours(tokens)
        b = hf(tokens).logits
    assert a.shape == b.shape
    assert float((a - b).abs().max()) <= 1e-4
    assert float(a.std()) > 0.1  # trained weights, not a degenerate all-zero comparison


def test_tokenizer_encodes_as_the_runs_sentencepiece_model(exported: Path, sp_model: Path) -> None:
    import sentencepiece as spm
    from transformers import AutoTokenizer

    sp = spm.SentencePieceProcessor(model_file=str(sp_model))
    tok = AutoTokenizer.from_pretrained(exported)
    for text in TEXTS:
        assert tok(text)["input_ids"] == sp.encode(text), text
        assert tok.decode(sp.encode(text)) == sp.decode(sp.encode(text))
    assert tok.eos_token_id == sp.eos_id()
    assert (exported / "tokenizer.model").read_bytes() == sp_model.read_bytes()


def test_folder_layout_config_and_bf16(trained: Path, exported: Path, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    cfg = json.loads((exported / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["tie_word_embeddings"]) == (
        4,
        2,
        False,
    )
    assert (cfg["rope_theta"], cfg["rms_norm_eps"], cfg["intermediate_size"]) == (10000.0, 1e-5, 172)
    assert json.loads((exported / "generation_config.json").read_text())["eos_token_id"] == 2
    index = json.loads((exported / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {"model-00001-of-00001.safetensors"}
    fp32 = load_file(exported / "model-00001-of-00001.safetensors")
    assert index["metadata"]["total_size"] == sum(t.numel() * 4 for t in fp32.values())
    # bf16 from the fp32 masters, split into several size-limited shards
    out = tmp_path / "bf16"
    r = run_agpt(
        "ckpt", "export", str(trained / "ckpt" / f"step-{STEPS}"), str(out), "--max-shard-size", "100KB"
    )
    assert r.returncode == 0, r.stderr
    shards = sorted(out.glob("model-*.safetensors"))
    assert len(shards) > 3 and shards[0].name == f"model-00001-of-{len(shards):05d}.safetensors"
    assert all(p.stat().st_size < 100_000 + 8_000 or len(load_file(p)) == 1 for p in shards)
    bf16: dict[str, torch.Tensor] = {}
    for p in shards:
        bf16.update(load_file(p))
    assert set(bf16) == set(fp32)
    for name, t in fp32.items():
        assert bf16[name].dtype == torch.bfloat16
        assert torch.equal(bf16[name], t.to(torch.bfloat16)), name
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"


def test_same_files_from_checkpoints_saved_by_2_and_4_ranks(
    trained: Path, exported: Path, tmp_path: Path
) -> None:
    """The same weights saved by 4 ranks (an import under mpiexec -n 4) export to the same bytes."""
    run4 = tmp_path / "run4"
    r = run_agpt("ckpt", "import", str(exported), "--config", str(TINY), "--run-dir", str(run4),
                 "--set", "model.vocab_size=640", mpi=4, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    step0 = run4 / "ckpt" / "step-0"
    assert json.loads((step0 / ".complete").read_text())["world_size"] == 4
    assert len(list(step0.glob("*.distcp"))) == 4
    shutil.copyfile(exported / "tokenizer.model", tmp_path / "tok.model")
    out4 = tmp_path / "from4"
    r = run_agpt(
        "ckpt", "export", str(step0), str(out4), "--dtype", "fp32", "--tokenizer", str(tmp_path / "tok.model")
    )
    assert r.returncode == 0, r.stderr
    assert len(list((trained / "ckpt" / f"step-{STEPS}").glob("*.distcp"))) == 2
    assert files_of(out4) == files_of(exported)


def _copy_step(trained: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run" / "ckpt" / f"step-{STEPS}"
    shutil.copytree(trained / "ckpt" / f"step-{STEPS}", dst)
    return dst


@pytest.mark.parametrize("damage", ["no-complete", "missing-file", "truncated-file", "corrupt-file"])
def test_incomplete_checkpoint_exit_2_naming_the_file(trained: Path, tmp_path: Path, damage: str) -> None:
    step = _copy_step(trained, tmp_path)
    if damage == "no-complete":
        bad = step / ".complete"
        bad.unlink()
    elif damage == "missing-file":
        bad = step / "__1_0.distcp"
        bad.unlink()
    elif damage == "truncated-file":
        bad = step / "__0_0.distcp"
        with open(bad, "r+b") as f:
            f.truncate(bad.stat().st_size // 2)
    else:  # same size, bytes overwritten: only reading it shows the damage
        bad = step / "__1_0.distcp"
        with open(bad, "r+b") as f:
            f.write(b"\0" * bad.stat().st_size)
    out = tmp_path / "out"
    r = run_agpt("ckpt", "export", str(step), str(out))
    assert r.returncode == 2, r.stderr
    assert str(bad) in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists() and not list(tmp_path.glob(".out*"))


def test_out_not_empty_exit_2_and_untouched(trained: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine\n")
    r = run_agpt("ckpt", "export", str(trained / "ckpt" / f"step-{STEPS}"), str(out))
    assert r.returncode == 2 and str(out) in r.stderr and "not empty" in r.stderr, r.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    # an existing empty folder is fine
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run_agpt("ckpt", "export", str(trained / "ckpt" / f"step-{STEPS}"), str(empty))
    assert r.returncode == 0, r.stderr
    assert (empty / "config.json").exists()


def test_config_of_another_model_exit_2_naming_the_tensor(trained: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "wide.yaml"
    cfg.write_text(
        TINY.read_text().replace("ffn_dim: 172", "ffn_dim: 180").replace("vocab_size: 512", "vocab_size: 640")
    )
    r = run_agpt(
        "ckpt", "export", str(trained / "ckpt" / f"step-{STEPS}"), str(tmp_path / "o"), "--config", str(cfg)
    )
    assert r.returncode == 2, r.stderr
    assert "model.layers.0.ffn.w1.weight" in r.stderr and "[180, 64]" in r.stderr, r.stderr


def test_a_folder_or_link_at_the_old_partial_name_is_left_alone_and_a_full_disk_is_one_line(
    trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: the export was built in `.OUT.partial`, a fixed name beside OUT, deleting whatever folder was
    there and following a link planted there; now in a folder made under a new name (mkdtemp).  ENOSPC while a
    shard is written is one line naming the shard, and nothing is left behind."""
    import errno
    import os

    from agpt import safewrite
    from agpt.ckpt import export

    step = trained / "ckpt" / f"step-{STEPS}"
    theirs = tmp_path / ".hf.partial"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("mine\n")
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / ".hf2.partial").symlink_to(victim)
    for name in ("hf", "hf2"):
        r = run_agpt("ckpt", "export", str(step), str(tmp_path / name), "--dtype", "fp32")
        assert r.returncode == 0, r.stderr
        assert (tmp_path / name / "config.json").is_file()
    assert (theirs / "keep.txt").read_text() == "mine\n" and list(victim.iterdir()) == []

    def full(op: str, path: Path) -> None:
        if op == "write" and path.name.startswith("model-"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(safewrite, "fault", full)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(safewrite.WriteError) as err:
        export.export_hf(step, tmp_path / "hf3", dtype="fp32")
    line = str(err.value)
    assert "\n" not in line and "model-00001-of-" in line and "No space left on device" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == before
