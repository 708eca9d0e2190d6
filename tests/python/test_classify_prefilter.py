"""The keyword prefilter is only a speed-up: on both corpora the classifier answers exactly as it does when
every line goes to every pattern, and with its template memory capped to nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agpt.failover import classify as cl
from agpt.failover import scan
from agpt.failover.hostmatch import parse_hosts

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted((ROOT / "tests" / "fixtures" / "logs").glob("*/*.json")) + sorted(
    (ROOT / "tests" / "fixtures" / "logs_public").glob("*/*.json")
)


def _run(case_path: Path) -> dict:
    case = json.loads(case_path.read_text())
    hosts = parse_hosts((case.get("hostfile_text") or "\n".join(case["hosts"])).splitlines())
    ipmap = [(a, b) for a, b in (line.split()[:2] for line in case.get("ipmap", []))]
    r = cl.classify(
        case_path.with_suffix(".log"), case["rc"], hosts, ipmap, case.get("deadline"), case.get("now")
    )
    return r.to_json()


class _EveryLine(scan.Scanner):
    """The same scanner with the prefilter off: every line reaches every pattern."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.full = True


@pytest.mark.parametrize("case_path", CASES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.stem}")
def test_prefilter_changes_no_answer(case_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _run(case_path)
    monkeypatch.setattr(scan, "Scanner", _EveryLine)
    slow = _run(case_path)
    assert fast == slow


@pytest.mark.parametrize("case_path", CASES[::7], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_template_memory_changes_no_answer(case_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remembered = _run(case_path)
    monkeypatch.setattr(scan, "TEMPLATE_BYTES", 0)
    monkeypatch.setattr(scan, "LABEL_KEY_CAP", -1)
    assert _run(case_path) == remembered


def test_many_distinct_lines_stay_within_the_template_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "TEMPLATE_BYTES", 4096)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    lines = [" ".join(words[(i >> k) % 8] for k in range(0, 15, 3)) for i in range(20000)]
    log = tmp_path / "log"
    log.write_text("\n".join(lines) + "\nsrun: error: Node failure on n3\n")
    r = cl.classify(log, 1, ["n1", "n2", "n3", "n4"])
    assert (r.cls, r.bad_hosts) == ("node", ["n3"])
