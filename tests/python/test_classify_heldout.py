"""The held-out corpus (tests/fixtures/logs_heldout): logs no pattern was written from, and the score the docs state.

The split is enforced here, not only described: no held-out source is a pattern's source or an in-sample case's,
no pattern example is a line of a held-out log, and the figure SOURCES.md states is the one the classifier reaches
(`agpt failover score tests/fixtures/logs_heldout`)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from agpt.failover import patterns as pat
from agpt.failover import score
from conftest import ROOT
from failover_util import agpt_env, check_cases_listed, corpus_sources

HELDOUT = ROOT / "tests" / "fixtures" / "logs_heldout"
IN_SAMPLE = [ROOT / "tests" / "fixtures" / "logs", ROOT / "tests" / "fixtures" / "logs_public"]
SOURCES = (HELDOUT / "SOURCES.md").read_text()


def test_at_least_forty_cases_each_with_its_public_source_listed() -> None:
    check_cases_listed(HELDOUT, SOURCES)


def test_no_held_out_source_wrote_a_pattern_or_an_in_sample_case() -> None:
    held = corpus_sources(HELDOUT)
    used = {p.source for p in pat.load(pat.DEFAULT_SETS)} | set().union(
        *(corpus_sources(c) for c in IN_SAMPLE)
    )
    assert not held & used


def _lines(corpora: list[Path]) -> set[str]:
    out: set[str] = set()
    for c in corpora:
        for p in c.glob("*/*.log"):
            out.update(ln.strip() for ln in p.read_text(errors="replace").splitlines() if ln.strip())
    return out


def _host_lines(corpus: Path) -> set[str]:
    """The lines of each case that name one of its own hosts: the specific ones a pattern could be copied from."""
    out: set[str] = set()
    for p in corpus.glob("*/*.json"):
        hosts = [h.split(".")[0] for h in json.loads(p.read_text())["hosts"]]
        for ln in p.with_suffix(".log").read_text(errors="replace").splitlines():
            if any(h in ln for h in hosts):
                out.add(ln.strip())
    return out


def test_no_pattern_example_is_a_line_of_a_held_out_log() -> None:
    # A launcher's boilerplate (srun's "Job step aborted", Open MPI's "Primary job terminated normally") is the same in
    # every log; what a pattern must not have been copied from is a held-out line naming its own case's hosts.
    held = _host_lines(HELDOUT) - _lines(IN_SAMPLE)
    for p in pat.load(pat.DEFAULT_SETS):
        for ex in p.positive:
            assert ex.line.strip() not in held, (p.id, ex.line)


def test_the_stated_score_is_the_measured_one() -> None:
    outcomes = score.score([HELDOUT])
    s = score.summary(outcomes)
    m = re.search(r"now: (\d+) of (\d+) \((\d+)%\)", SOURCES)
    assert m, "SOURCES.md states no current figure"
    assert (int(m.group(1)), int(m.group(2))) == (s["right"], s["cases"]), [
        o.case for o in outcomes if not o.right
    ]
    assert all(o.right for o in score.score(IN_SAMPLE))


def test_score_command_prints_the_figure_and_refuses_a_folder_without_cases(tmp_path: Path) -> None:
    r = subprocess.run([str(ROOT / "bin" / "agpt"), "failover", "score", str(HELDOUT)], env=agpt_env(),
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert re.search(r"^score: \d+/\d+ right \(\d+%\) on .*; by class: ", r.stdout, re.M)
    r = subprocess.run([str(ROOT / "bin" / "agpt"), "failover", "score", str(tmp_path)], env=agpt_env(),
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and "no SITE/CASE.json" in r.stderr and r.stderr.count("\n") == 1
