"""The cold start: every job's first attempt pays process start, imports, the process group's init, the model build,
the state restore and its first step; `agpt failover report` shows it per job, and splits a recovery's model
build the same way when the trainer marked it (a clock without those marks reads as before)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import BIN, agpt_env

T0 = 1_800_000_000.0


def attempt(
    job: str, n: int, rc: int, cls: str, started: float, ended: float, **kw: float
) -> dict[str, object]:
    return {"event": "attempt", "jobid": job, "attempt": n, "rc": rc, "class": cls, "first_step": 1,
            "last_step": 10 * n, "started": T0 + started, "ended": T0 + ended, "hosts": ["n1", "n2"],
            **{k: T0 + v for k, v in kw.items()}}  # fmt: skip


def clock(job: str, n: int, tier: str | None, **marks: float) -> dict[str, object]:
    return {"event": "clock", "jobid": job, "attempt": n, **{k: T0 + v for k, v in marks.items()}, "step": 0,
            "tier": tier, "from_partner": []}  # fmt: skip


def report(run: Path, *args: str) -> str:
    r = subprocess.run([str(BIN / "agpt"), "failover", "report", str(run), *args], env=agpt_env(),
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_each_jobs_first_attempt_shows_its_cold_start_and_a_recovery_splits_its_model_build(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    (run / "attempts").mkdir(parents=True)
    events = [
        attempt("7", 1, 137, "node", 0, 100, last_progress=95.0, detected=96.0),
        {
            **clock(
                "7", 1, None, started=0.5, imported=3.0, pg_init=4.0, built=9.0, loaded=9.0, first_step=10.0
            ),
            "staging_s": 3.2,
        },  # lib/env.sh env_stage's AGPT_STAGE_S
        clock(
            "7",
            2,
            "local",
            started=103.0,
            imported=105.0,
            pg_init=106.0,
            built=108.0,
            loaded=108.5,
            first_step=109.0,
        ),
        attempt("7", 2, 75, "walltime", 101, 200),
        attempt("8", 1, 0, "success", 300, 400),
        clock(
            "8", 1, "global", started=300.5, built=309.0, loaded=312.0, first_step=313.0
        ),  # an older trainer
    ]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    g = json.loads(report(run, "--json"))["goodput"]
    cold = {r["attempt"]: r for r in g["cold_start"]}
    assert list(cold["7.1"]["stages"].items()) == [
        ("process start", 0.5), ("imports", 2.5), ("process group", 1.0), ("model build", 5.0),
        ("state restore", 0.0), ("first step", 1.0)]  # fmt: skip
    assert cold["7.1"]["total_s"] == 10.0
    assert "imports" not in cold["8.1"]["stages"] and cold["8.1"]["stages"]["model build"] == 8.5
    assert list(g["recovery"][0]["stages"])[3:6] == ["process start", "imports", "process group"]
    text = report(run)
    assert ("cold start of 7.1: staging 3.2 s before the loop, then process start 0.5 s, imports 2.5 s, process group 1.0 s, model build 5.0 s, "
            "state restore 0.0 s, first step 1.0 s; first step 10.0 s after the launch") in text  # fmt: skip
    assert (
        "cold start of 8.1: process start 0.5 s, model build 8.5 s, state restore 3.0 s (global tier)" in text
    )
    assert ("recovery clock after 7.1 (node): detection 1.0 s, teardown 4.0 s, relaunch 1.0 s, process start "
            "2.0 s, imports 2.0 s, process group 1.0 s, model build 2.0 s") in text  # fmt: skip
