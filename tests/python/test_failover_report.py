"""`agpt failover report`: a run directory's timeline, as text and JSON, and clear refusals."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from agpt.failover import report
from failover_util import failover_cli

ROOT = Path(__file__).resolve().parents[2]
T0 = 1715076000.0  # 2024-05-07 10:00:00 UTC


def make_run(d: Path, *, partial_tail: bool = False) -> Path:
    """A run of two chained jobs: a node swap, a blind swap, an app error, a walltime resubmit, then done."""
    (d / "hosts").mkdir(parents=True)
    (d / "hosts" / "bad").write_text(
        f"nid001236\t{T0 + 3600:.0f}\t1001\tsrun: error: Node failure on nid001236\n"
        f"nid001235\t{T0 + 5400:.0f}\t1001\tblind\n"
        f"nid001239\t{T0 - 60:.0f}\t1001\tpreflight exit 1\n"
    )
    for step, when in ((1000, T0 + 3000), (1500, T0 + 5000), (2000, T0 + 9000)):
        c = d / "ckpt" / f"step-{step}"
        c.mkdir(parents=True)
        (c / ".complete").write_text(json.dumps({"step": step, "time": when, "world_size": 8}))
    ev = [
        {
            "event": "attempt",
            "jobid": "1001",
            "attempt": 1,
            "rc": 1,
            "class": "node",
            "bad_hosts": ["nid001236"],
            "evidence": ["srun: error: Node failure on nid001236"],
            "swapped": {"out": ["nid001236"], "in": ["nid001240"], "blind": False, "returned": []},
            "first_step": 1,
            "last_step": 1100,
            "ckpt_step": 1000,
            "started": T0,
            "ended": T0 + 3600,
        },
        {
            "event": "attempt",
            "jobid": "1001",
            "attempt": 2,
            "rc": 124,
            "class": "hang",
            "bad_hosts": [],
            "evidence": [],
            "swapped": {"out": ["nid001235"], "in": ["nid001241"], "blind": True, "returned": []},
            "first_step": 1001,
            "last_step": 1600,
            "ckpt_step": 1500,
            "started": T0 + 3630,
            "ended": T0 + 5400,
        },
        {
            "event": "attempt",
            "jobid": "1001",
            "attempt": 3,
            "rc": 143,
            "class": "walltime",
            "bad_hosts": [],
            "evidence": [],
            "swapped": {"out": [], "in": [], "blind": False, "returned": []},
            "first_step": 1501,
            "last_step": 1700,
            "ckpt_step": 1500,
            "started": T0 + 5420,
            "ended": T0 + 7000,
        },
        {
            "event": "stop",
            "jobid": "1001",
            "attempt": 3,
            "verdict": "resubmit",
            "exit": 75,
            "reason": "walltime near",
            "time": T0 + 7000,
        },
        {
            "event": "attempt",
            "jobid": "1002",
            "attempt": 1,
            "rc": 0,
            "class": "success",
            "bad_hosts": [],
            "evidence": [],
            "swapped": {"out": [], "in": [], "blind": False, "returned": []},
            "first_step": 1501,
            "last_step": 2000,
            "ckpt_step": 2000,
            "started": T0 + 7200,
            "ended": T0 + 9100,
        },
        {
            "event": "stop",
            "jobid": "1002",
            "attempt": 1,
            "verdict": "done",
            "exit": 0,
            "reason": "finished",
            "time": T0 + 9100,
        },
    ]
    text = "".join(json.dumps(e) + "\n" for e in ev)
    if partial_tail:
        text += '{"event": "attempt", "jobid": "1003", "rc"'
    (d / "events.jsonl").write_text(text)
    (d / "chain.jsonl").write_text(
        json.dumps(
            {"jobid": "1001", "started": T0, "ended": T0 + 7000, "verdict": "resubmit", "next_jobid": "1002"}
        )
        + "\n"
        + json.dumps({"jobid": "1002", "started": T0 + 7200, "ended": T0 + 9100, "verdict": "done"})
        + "\n"
    )
    return d


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return failover_cli("report", *args, timeout=60)


def test_json_report_counts_swaps_steps_and_lost_time(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    r = run_cli(str(run), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    t = out["totals"]
    assert (t["jobs"], t["attempts"], t["swaps_proven"], t["swaps_blind"]) == (2, 4, 1, 1)
    assert (t["verdict"], t["exit"], t["last_step"]) == ("done", 0, 2000)
    assert t["steps_made"] == 1100 + 600 + 200 + 500
    rows = out["attempts"]
    assert [a["class"] for a in rows] == ["node", "hang", "walltime", "success"]
    assert (
        rows[0]["swap_why"] == "evidence" and rows[1]["swap_why"] == "blind" and rows[2]["swap_why"] is None
    )
    # attempt 1 saved step 1000 at T0+3000 and died at T0+3600: 600 s lost; attempt 2 saved 1500 at T0+5000
    assert [a["lost_s"] for a in rows] == [600.0, 400.0, 1580.0, 0.0]
    assert t["lost_s"] == 2580.0
    assert t["between_attempts_s"] == 30 + 20 + 200
    assert [b["blind"] for b in out["bad_hosts"]] == [False, True, False]
    assert t["preflight_evicted"] == 1
    assert [j["jobid"] for j in out["jobs"]] == ["1001", "1002"]


def test_text_report_is_a_timeline(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    r = run_cli(str(run))
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "JOB" in text and "CLASS" in text and "LOST" in text
    assert "2024-05-07 10:00:00" in text
    assert "nid001236 -> nid001240 [evidence] srun: error: Node failure on nid001236" in text
    assert "nid001235 -> nid001241 [blind]" in text
    assert "stop after 1001.3: resubmit (exit 75): walltime near" in text
    assert "swaps: 1 proven, 1 blind; 1 host(s) evicted by the preflight" in text
    assert "verdict: done (exit 0)" in text
    assert "nid001235" in text and "blind (a suspect, still usable)" in text
    assert "job 1001:" in text and "next 1002" in text


def test_partial_tail_is_skipped_and_noted(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", partial_tail=True)
    rep = report.build(run)
    assert len(rep.attempts) == 4
    assert any("1 unreadable line" in n for n in rep.notes)


def test_running_run_without_stop_and_without_ckpt_times(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    (d / "events.jsonl").write_text(
        json.dumps(
            {
                "attempt": 1,
                "rc": 1,
                "class": "crash",
                "swapped": {"out": ["n2"], "in": ["n5"], "blind": True, "returned": ["n7"]},
                "first_step": 1,
                "last_step": 100,
                "ckpt_step": 50,
                "started": 0,
                "ended": 1000,
            }
        )
        + "\n"
    )
    rep = report.build(d)
    (a,) = rep.attempts
    assert a.steps_made == 100 and a.lost_s == 500.0  # no checkpoint times: estimated from the step rate
    assert rep.totals()["verdict"] is None
    assert any("no stop event" in n for n in rep.notes)
    text = report.render(rep)
    assert "verdict: none yet" in text
    assert "n2 -> n5 [blind] (back to the spares: n7)" in text


def test_missing_or_empty_run_dir_exits_2(tmp_path: Path) -> None:
    r = run_cli(str(tmp_path / "nope"))
    assert r.returncode == 2 and "nope" in r.stderr and len(r.stderr.splitlines()) == 1
    (tmp_path / "empty").mkdir()
    r = run_cli(str(tmp_path / "empty"))
    assert r.returncode == 2 and "events.jsonl" in r.stderr and len(r.stderr.splitlines()) == 1
    (tmp_path / "empty" / "events.jsonl").write_text("garbage\n")
    r = run_cli(str(tmp_path / "empty"), "--json")
    assert r.returncode == 2 and "no attempt" in r.stderr
    r = run_cli()
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1


def test_durations_read_like_a_human_wrote_them() -> None:
    assert report.fmt_duration(None) == "-"
    assert report.fmt_duration(42) == "42s"
    assert report.fmt_duration(605) == "10m05s"
    assert report.fmt_duration(3 * 3600 + 65) == "3h01m"
