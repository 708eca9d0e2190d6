"""Helpers for the failover tests: `agpt failover` as the Bash loop runs it, a run directory with the log of an
attempt that just ended, and the inputs of a classifier case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import ROOT, agpt_env


def plan_cli(run: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m agpt.failover plan --run-dir RUN ARGS` (what lib/failover.sh calls)."""
    return subprocess.run(
        [sys.executable, "-m", "agpt.failover", "plan", "--run-dir", str(run), *args],
        capture_output=True,
        text=True,
        env=agpt_env(),
        timeout=120,
    )


def run_with_attempt(tmp_path: Path, active: list[str], spare: list[str], log_text: str) -> tuple[Path, Path]:
    """TMP_PATH/run with hosts/active, hosts/spare and attempts/j.1.log holding LOG_TEXT: (run dir, log)."""
    run = tmp_path / "run"
    (run / "hosts").mkdir(parents=True)
    (run / "hosts/active").write_text("".join(f"{h}\n" for h in active))
    (run / "hosts/spare").write_text("".join(f"{h}\n" for h in spare))
    log = run / "attempts/j.1.log"
    log.parent.mkdir()
    log.write_text(log_text)
    return run, log


def failover_cli(sub: str, *args: str, env: dict[str, str] | None = None,
                 timeout: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """bin/agpt-failover SUB ARGS as the failover loop runs it: a plain python3, isolated from the venv."""
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "AGPT_PYTHON": sys.executable, **(env or {})}
    cmd = [str(ROOT / "bin" / "agpt-failover"), sub, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=base, timeout=timeout)


def case_args(case: dict[str, Any], tmp: Path) -> list[str]:
    """The classifier's flags for a recorded case (its hostfile and ipmap written into TMP)."""
    hostfile = tmp / "hosts"
    hostfile.write_text(case.get("hostfile_text") or "\n".join(case["hosts"]) + "\n")
    args = ["--rc", str(case["rc"]), "--hostfile", str(hostfile)]
    if case.get("ipmap"):
        (tmp / "ip").write_text("\n".join(case["ipmap"]) + "\n")
        args += ["--ipmap", str(tmp / "ip")]
    if case.get("deadline") is not None:
        args += ["--deadline", str(case["deadline"]), "--now", str(case["now"])]
    return args


def site_pattern_set(folder: Path, name: str, pid: str, cls: str, regex: str, positive: str, negative: str,
                     description: str = "x") -> Path:  # fmt: skip
    """FOLDER/NAME.json: a site's pattern set of one pattern (as FAILOVER_PATTERN_PATH finds it); FOLDER."""
    folder.mkdir(parents=True, exist_ok=True)
    pattern = {"id": pid, "class": cls, "regex": regex, "description": description, "positive": [positive],
               "negative": [negative]}  # fmt: skip
    (folder / f"{name}.json").write_text(json.dumps({"set": name, "patterns": [pattern]}))
    return folder


def corpus_sources(corpus: Path) -> set[str]:
    """Every `sources` URL of a classifier corpus's cases."""
    return {s for p in corpus.glob("*/*.json") for s in json.loads(p.read_text()).get("sources", [])}


def check_cases_listed(corpus: Path, listing: str, *, least: int = 40) -> None:
    """An out-of-sample corpus holds at least `least` cases, each with public sources, each case and its URLs
    listed in its SOURCES.md (`listing`)."""
    from agpt.failover import score

    cases = score.cases(corpus)
    assert len(cases) >= least
    for p in cases:
        doc = json.loads(p.read_text())
        assert doc["sources"] and all(s.startswith("https://") for s in doc["sources"]), p
        assert f"`{p.parent.name}/{p.stem}`" in listing, p
        assert all(s in listing for s in doc["sources"]), p
