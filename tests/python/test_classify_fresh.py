"""The fresh out-of-sample corpus (tests/fixtures/logs_fresh, issue 35): written before the loop and classifier
changed, from sources no other corpus nor pattern uses; the score its SOURCES.md states is the one measured, and
the loop's consequences on it are the issue's promise: no healthy host evicted, no needless stop for a person."""

from __future__ import annotations

import json
import re

from agpt.failover import patterns as pat
from agpt.failover import score
from conftest import ROOT
from failover_util import check_cases_listed, corpus_sources

FRESH = ROOT / "tests" / "fixtures" / "logs_fresh"
OTHERS = [ROOT / "tests" / "fixtures" / c for c in ("logs", "logs_public", "logs_heldout")]
SOURCES = (FRESH / "SOURCES.md").read_text()


def test_at_least_forty_cases_each_with_its_public_source_listed() -> None:
    check_cases_listed(FRESH, SOURCES)


def test_no_fresh_source_wrote_a_pattern_or_another_corpus() -> None:
    used = {p.source for p in pat.load(pat.DEFAULT_SETS)} | set().union(*(corpus_sources(c) for c in OTHERS))
    assert not corpus_sources(FRESH) & used


def test_no_pattern_example_is_a_line_of_a_fresh_log() -> None:
    lines: set[str] = set()
    for p in FRESH.glob("*/*.json"):
        hosts = [h.split(".")[0] for h in json.loads(p.read_text())["hosts"]]
        for ln in p.with_suffix(".log").read_text(errors="replace").splitlines():
            if any(h in ln for h in hosts):
                lines.add(ln.strip())
    for p in pat.load(pat.DEFAULT_SETS):
        for ex in p.positive:
            assert ex.line.strip() not in lines, (p.id, ex.line)


def test_the_stated_score_is_the_measured_one_and_nobody_is_harmed() -> None:
    outcomes = score.score([FRESH])
    s = score.summary(outcomes)
    m = re.search(r"now: (\d+) of (\d+) \((\d+)%\) \| ([\d /]+) \|", SOURCES)
    assert m, "SOURCES.md states no current figure"
    assert (int(m.group(1)), int(m.group(2))) == (s["right"], s["cases"]), [
        o.case for o in outcomes if not o.right
    ]
    stated = [int(x) for x in m.group(4).split("/")]
    assert stated == list(s["consequences"].values())
    harmed = [o.case for o in outcomes if o.consequence and o.consequence.kind in ("evicted", "stopped")]
    assert not harmed  # issue 35: no healthy host evicted, no needless stop for a person
    assert s["right"] >= 0.75 * s["cases"]
