"""`agpt monitor`, RUN_DIR/metrics.prom and `agpt report --html` on a run directory the real failover loop wrote
(lib/failover.sh around the fake trainer: a node fault on h2, swapped for a spare, then success)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from agpt import rundir
from conftest import BIN, agpt_env
from observe_util import agpt, browse, ink, loop_run, on_a_terminal, prom_families, prom_values


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return loop_run(tmp_path_factory.mktemp("loop"))


def test_the_loop_writes_metrics_prom_that_parses_with_the_reports_counts(run: Path) -> None:
    text = (run / rundir.PROM).read_text()
    fams = prom_families(text)  # prometheus_client's own parser
    assert fams["agpt_attempts"].type == "counter" and fams["agpt_hosts"].type == "gauge"
    rep = json.loads(agpt("failover", "report", str(run), "--json").stdout)
    v = prom_values(text)
    for cls in rundir.CLASSES:
        assert v[("agpt_attempts_total", (("class", cls),))] == rep["totals"]["classes"].get(cls, 0)
    assert v[("agpt_failures_total", ())] == rep["goodput"]["failures"] == 1
    assert v[("agpt_hosts_evicted_total", (("why", "evidence"),))] == 1
    assert v[("agpt_hosts", (("state", "active"),))] == 4 and v[("agpt_hosts", (("state", "spare"),))] == 1
    assert v[("agpt_effective_ratio", ())] == rep["goodput"]["effective_ratio"]
    assert all(s.labels["run"] == "run" for f in fams.values() for s in f.samples)


def test_monitor_once_prints_what_the_report_says(run: Path) -> None:
    mon = agpt("monitor", str(run), "--once")
    assert mon.returncode == 0, mon.stderr
    rep = agpt("failover", "report", str(run))
    text = mon.stdout
    tail = rep.stdout.split("\n\n")[
        -1
    ].splitlines()  # the report's closing lines: totals, goodput, recovery clock
    assert any(line.startswith("recovery clock after j1.1") for line in tail)
    for line in tail:
        if not line.startswith("note:"):
            assert line in text, line
    assert "j1.1 node at step" in text and "h2 -> h5 [evidence]" in text
    assert "active 4, spare 1, bad 1 (proven), blind 0" in text
    assert re.search(r"job j1, attempt 2 ended", text)


def test_monitor_on_a_terminal_redraws_until_ctrl_c(run: Path) -> None:
    out = on_a_terminal(
        [str(BIN / "agpt"), "monitor", str(run), "--interval", "0.5"], agpt_env(), interrupt_after=6
    )
    assert out.count("agpt monitor ") >= 2, out  # more than one frame drawn
    assert "╭─ attempts" in out and "verdict: done (exit 0)" in out and "Traceback" not in out


def test_monitor_on_something_else_exits_2_naming_it(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    for target in (tmp_path, tmp_path / "missing", tmp_path / "notes.txt"):
        r = agpt("monitor", str(target), "--once")
        assert r.returncode == 2, r.stdout + r.stderr
        assert (
            r.stderr.startswith(f"agpt: error: {target}: not a run directory") and "Traceback" not in r.stderr
        )


def test_monitor_and_prom_read_through_torn_files(run: Path, tmp_path: Path) -> None:
    torn = tmp_path / "torn"
    shutil.copytree(run, torn)
    for name in (rundir.EVENTS, rundir.METRICS, rundir.HEALTH, rundir.HOSTS_BAD):
        with open(torn / name, "a") as f:
            f.write('{"event": "attempt", "jobid": "j1", "rc": 1')  # a writer killed mid-line
    for hb in (torn / "heartbeat").glob("*.json"):
        hb.write_text(hb.read_text()[:20])
    r = agpt("monitor", str(torn), "--once")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "attempts: 2" in r.stdout
    r = agpt("--run-module", "agpt.observe.prom", str(torn))
    assert r.returncode == 0, r.stderr
    assert prom_values((torn / rundir.PROM).read_text())[("agpt_failures_total", ())] == 1


def test_report_html_renders_in_headless_chromium(run: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    r = agpt("report", str(run), "--html", str(page))
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    assert "http://" not in html and "https://" not in html  # self-contained: nothing to fetch
    dom, shot = browse(page, tmp_path)
    n_img = html.count("<img ")
    assert n_img >= 3  # timeline, curves, goodput
    m = re.search(r'data-plots-loaded="(\d+)"', dom)
    assert m and int(m.group(1)) == n_img, dom[:500]  # every plot decoded by the browser
    assert "Failures and their evidence" in dom and "ECC error" in dom
    assert ink(shot) > 0.03  # the screenshot is not a blank page


def test_report_html_on_something_else_exits_2(tmp_path: Path) -> None:
    r = agpt("report", str(tmp_path / "nope"), "--html", str(tmp_path / "x.html"))
    assert r.returncode == 2 and "not a run directory" in r.stderr and not (tmp_path / "x.html").exists()


def test_report_html_that_cannot_be_written_exits_2_naming_it(run: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "r.html"  # under a file: no folder can be made there
    r = agpt("report", str(run), "--html", str(out))
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"agpt: error: --html {out}: cannot write") and "Traceback" not in r.stderr
