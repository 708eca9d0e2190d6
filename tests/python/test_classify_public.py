"""`agpt failover classify` on the corpus built from real public message lines (tests/fixtures/logs_public):
every case's verdict, the corpus's coverage (classes, launchers, vendor stacks, traps) and its provenance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agpt.failover import classify as cl
from agpt.failover.hostmatch import parse_hosts
from failover_util import case_args

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "logs_public"
CASES = sorted(CORPUS.glob("*/*.json"))


def _run(case_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    case = json.loads(case_path.read_text())
    args = case_args(case, tmp_path)
    assert cl.main([*args, str(case_path.with_suffix(".log"))]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("case_path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_public_case(case_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = json.loads(case_path.read_text())
    out = _run(case_path, tmp_path, capsys)
    exp = case["expect"]
    assert out["class"] == exp["class"], (case["description"], out)
    assert out["bad_hosts"] == exp["bad_hosts"], out
    if "suspect_first" in exp:
        assert out["suspect_hosts"][:1] == [exp["suspect_first"]], out
    if "not_suspect" in exp:
        assert exp["not_suspect"] not in out["suspect_hosts"], out
    if "pattern" in exp:
        assert exp["pattern"] in {m["pattern"] for m in out["matches"]}, out["matches"]
    if "note" in exp:
        assert any(exp["note"] in n for n in out["notes"]), out["notes"]
    hosts = set(parse_hosts(case["hosts"]))
    assert set(out["bad_hosts"]) <= hosts and set(out["suspect_hosts"]) <= hosts


def test_public_corpus_covers_classes_launchers_stacks_and_traps() -> None:
    assert len(CASES) >= 60
    docs = [json.loads(p.read_text()) for p in CASES]
    logs = "\n".join(p.with_suffix(".log").read_text() for p in CASES)
    assert {d["expect"]["class"] for d in docs} == {
        "success",
        "walltime",
        "node",
        "hang",
        "crash",
        "system",
        "app",
    }
    launchers = {
        "srun --label": r"(?m)^\d+: ",
        "salloc": r"salloc: error",
        "PALS FQDN RANK label": r"(?m)^x\S+\.gov \d+: ",
        "PALS host label": r"(?m)^x\S+\.gov: ",
        "hydra": r"\[proxy:\d",
        "hydra prepend-pattern": r"(?m)^\[\d+@",
        "Open MPI tag": r"(?m)^\[1,\d+\]<std",
        "PRRTE tag-detailed": r"(?m)^\[prterun-\S+@1,\d+\]\[",
        "Open MPI timestamp": r"(?m)^\[\w{3} \w{3} .+\]<std",
        "torchrun": r"ChildFailedError",
        "pdsh": r"(?m)^node0\d: \[rank",
    }
    stacks = {
        "NCCL": "NCCL WARN",
        "RCCL/ROCm": "HSA_STATUS",
        "Level Zero": "UR_RESULT_ERROR",
        "gloo": "gloo/transport",
        "MPICH": "PMPI_",
        "Slurm": "slurmstepd",
        "DAOS": "DER_",
        "CUDA": "CUDA error",
    }
    for name, rx in launchers.items():
        assert re.search(rx, logs), f"no case for launcher {name}"
    for name, text in stacks.items():
        assert text in logs, f"no case for {name}"
    traps = [d for d in docs if "trap" in d["description"] or d["expect"]["class"] == "success"]
    assert len(traps) >= 5
    assert any("not a host of this job" in d["expect"].get("note", "") for d in docs)


def test_every_public_case_names_its_sources() -> None:
    listed = (CORPUS / "SOURCES.md").read_text()
    for p in CASES:
        doc = json.loads(p.read_text())
        assert doc["sources"] and all(s.startswith("https://") for s in doc["sources"]), p
        assert f"`{p.parent.name}/{p.stem}`" in listed, p
        for s in doc["sources"]:
            assert s in listed
