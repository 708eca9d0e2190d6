"""`agpt failover score`'s consequence columns: what the loop's real decisions do with a reading, right or wrong."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from agpt.failover import consequence as cq
from conftest import ROOT, agpt_env

HOSTS = ["n1", "n2", "n3", "n4"]
LINE = "Traceback: ValueError: bad value 3"


def _got(
    cls: str, bad: list[str] | None = None, *, rc: int = 1, step: int | None = 1200
) -> dict[str, object]:
    return {"class": cls, "bad_hosts": bad or [], "rc": rc, "evidence": ["Traceback: ValueError: bad value 3"],
            "first_step": 1100 if step else None, "last_step": step, "suspect_hosts": []}  # fmt: skip


def test_a_node_read_with_its_host_is_the_right_action() -> None:
    r = cq.replay({"class": "node", "bad_hosts": ["n2"]}, _got("node", ["n2"]), HOSTS, label_right=True)
    assert (r.kind, r.attempts) == ("right", 1)


def test_a_node_read_on_the_wrong_host_evicts_a_healthy_one() -> None:
    r = cq.replay({"class": "node", "bad_hosts": ["n2"]}, _got("node", ["n3"]), HOSTS, label_right=False)
    assert r.kind == "evicted" and "n3" in r.detail


def test_a_node_read_as_a_crash_naming_nobody_is_recovered_by_the_sweep() -> None:
    r = cq.replay({"class": "node", "bad_hosts": ["n2"]}, _got("crash"), HOSTS, label_right=False)
    assert r.kind == "recoverable" and "sweep" in r.detail


def test_an_application_fault_read_as_app_reaches_its_stop_after_one_reproduction() -> None:
    r = cq.replay({"class": "app", "bad_hosts": []}, _got("app"), HOSTS, label_right=True, line=LINE)
    assert (r.kind, r.attempts) == ("right", 2) and "stops" in r.detail


def test_a_failure_with_no_line_never_stops_for_a_person() -> None:
    r = cq.replay({"class": "app", "bad_hosts": []}, _got("app"), HOSTS, label_right=True, line=None)
    assert r.kind == "unresolved"


def test_a_site_outage_read_as_an_application_error_would_page_a_person() -> None:
    r = cq.replay({"class": "system", "bad_hosts": []}, _got("app"), HOSTS, label_right=False, line=LINE)
    assert r.kind == "stopped"


def test_a_site_fault_relaunched_on_the_same_hosts_recovers_once_it_is_over() -> None:
    r = cq.replay({"class": "system", "bad_hosts": []}, _got("system"), HOSTS, label_right=True, line=LINE)
    assert (r.kind, r.attempts) == ("right", cq.SITE_FAULT_RELAUNCHES + 1)


def _case(folder: Path, name: str, log: str, doc: dict[str, object]) -> None:
    (folder / "generic").mkdir(parents=True, exist_ok=True)
    (folder / "generic" / f"{name}.log").write_text(log)
    (folder / "generic" / f"{name}.json").write_text(json.dumps(doc))


def test_the_command_prints_the_consequence_columns(tmp_path: Path) -> None:
    _case(tmp_path, "xid_one_host", "step=10 loss=3.1\n[n2] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n",
          {"rc": 1, "hosts": HOSTS, "expect": {"class": "node", "bad_hosts": ["n2"]}})  # fmt: skip
    out = subprocess.run([str(ROOT / "bin" / "agpt"), "failover", "score", str(tmp_path)], env=agpt_env(),
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    last = out.splitlines()[-1]
    assert last.startswith("consequences: right action ")
    for words in ("recoverable", "unresolved", "healthy host evicted", "needless stop for a person"):
        assert words in last
    doc = json.loads(subprocess.run([str(ROOT / "bin" / "agpt"), "failover", "score", "--json", str(tmp_path)],
                                    env=agpt_env(), capture_output=True, text=True, check=True).stdout)  # fmt: skip
    assert set(doc["summary"]["consequences"]) == set(cq.CONSEQUENCES)
    assert doc["cases"][0]["consequence"] in cq.CONSEQUENCES
