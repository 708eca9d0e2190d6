"""One validator for numbers (agpt.numeric): every numeric flag, environment variable and config key refuses
NaN, infinities and values out of its stated range with one line naming it, exit 2, before anything runs; the
sizes that drive loops or memory have upper bounds.  Each test is one instance found from outside (issue 29): a
traceback, a hang, a wrong exit code or a misleading message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, agpt_env
from data_util import run_agpt

agpt = run_agpt


def refused(r: subprocess.CompletedProcess[str], name: str) -> str:
    """The one error line (a usage hint may follow it) of a refusal naming NAME, exit 2."""
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = [x for x in r.stderr.strip().splitlines() if not x.startswith("Try '")]
    assert len(lines) == 1 and name in lines[0], r.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["sim", "run", "--days", "inf"], "--days"),
        (["sim", "table", "--days", "inf"], "--days"),
        (["sim", "run", "--interval-s", "nan"], "--interval-s"),
        (["sim", "run", "--interval-s", "1e400"], "--interval-s"),
        (["sim", "table", "--nodes", "100000000000000000000"], "--nodes"),
        (["check", "--nodes", "100000000000000000000", "c.yaml"], "--nodes"),
        (["check", "--ranks-per-node", "99999999999", "c.yaml"], "--ranks-per-node"),
        (["check", "--ranks-per-node", "0", "c.yaml"], "--ranks-per-node"),
        (["blend", "--seq-len", "100000000000000000000", "--num-samples", "4", "--file-list", "x", "--output", "o"],
         "--seq-len"),
        (["blend", "--seq-len", "8", "--num-samples", "inf", "--file-list", "x", "--output", "o"], "--num-samples"),
        (["lr-find", "--config", "c.yaml", "--lr-max", "1e400"], "--lr-max"),
        (["tokenizer", "train", "--vocab-size", "-5", "--output", "t.model", "x.txt"], "--vocab-size"),
        (["tokenizer", "train", "--vocab-size", "100000000000000000000", "--output", "t.model", "x.txt"],
         "--vocab-size"),
        (["tokenizer", "train", "--vocab-size", "64", "--max-sentences", "-1", "--output", "t.model", "x.txt"],
         "--max-sentences"),
        (["ckpt", "interval", "--nodes", "8", "--node-mtbf-h", "1e400", "--save-stall-s", "5"], "--node-mtbf-h"),
        (["ckpt", "interval", "--nodes", "100000000000000000000", "--node-mtbf-h", "9", "--save-stall-s", "5"],
         "--nodes"),
        (["preflight", "--timeout", "nan", "h1"], "--timeout"),
        (["preflight", "--timeout", "1e400", "h1"], "--timeout"),
        (["preflight", "--timeout", "-1", "h1"], "--timeout"),
        (["chain", "end", "RUN", "--job", "1", "--rc", "0", "--started", "nan"], "--started"),
        (["failover", "classify", "--rc", "1", "--hostfile", "hf", "--max-mb", "1e308", "log"], "--max-mb"),
        (["failover", "classify", "--rc", "1", "--hostfile", "hf", "--max-mb", "inf", "log"], "--max-mb"),
        (["failover", "classify", "--rc", "1", "--hostfile", "hf", "--deadline", "-5", "log"], "--deadline"),
        (["failover", "plan", "--run-dir", "RUN", "--before", "--now", ""], "--now"),
        (["watch", "--timeout", "nan", "--", "true"], "--timeout"),
    ],
)  # fmt: skip
def test_a_bad_number_is_one_line_naming_its_flag(tmp_path: Path, args: list[str], name: str) -> None:
    (tmp_path / "hf").write_text("h1\n")
    (tmp_path / "log").write_text("boom\n")
    (tmp_path / "c.yaml").write_text("model: {dim: 64}\n")
    (tmp_path / "RUN").mkdir()
    refused(agpt(*args, cwd=tmp_path), name)


def test_a_bad_number_in_an_environment_variable_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "hf").write_text("h1\n")
    (tmp_path / "log").write_text("boom\n")
    r = agpt("failover", "classify", "--rc", "1", "--hostfile", "hf", "log",
             env={"FAILOVER_CLASSIFY_MAX_MB": "1e308"}, cwd=tmp_path)  # fmt: skip
    refused(r, "FAILOVER_CLASSIFY_MAX_MB")


@pytest.mark.parametrize("value", ["1e400", "nan", "0", "abc"])
def test_straggler_windows_from_the_environment_is_refused_naming_it(
    value: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from agpt.errors import BadInput
    from agpt.heartbeat.straggler import StragglerMonitor

    monkeypatch.setenv("FAILOVER_STRAGGLER_WINDOWS", value)
    with pytest.raises(BadInput, match="FAILOVER_STRAGGLER_WINDOWS"):
        StragglerMonitor.from_env(tmp_path, "j.1")


def test_sim_table_out_an_existing_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    refused(agpt("sim", "table", "--nodes", "8", "--days", "0.01", "--out", "f", cwd=tmp_path), "--out")


def test_ckpt_interval_json_is_valid_json_at_the_bounds() -> None:
    bounds = ["ckpt", "interval", "--nodes", "100000", "--node-mtbf-h", "1000000000", "--save-stall-s", "31536000",
              "--load-s", "31536000", "--restart-s", "31536000"]  # fmt: skip
    r = agpt(*bounds, "--json")
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"{c} in --json"))
    advice = agpt(*bounds).stdout.split("checkpoint.interval_s:")[1].split()[0]
    assert advice.isdigit(), f"advises interval_s: {advice}"


@pytest.mark.parametrize("flag", ["--node-mtbf-h", "--save-stall-s"])
def test_ckpt_interval_with_huge_inputs_is_refused_not_infinity(flag: str) -> None:
    """1e308 gave `"daly_s": Infinity` in --json (not JSON) and advised a 150-digit interval_s."""
    args = {"--nodes": "1", "--node-mtbf-h": "9", "--save-stall-s": "5", flag: "1e308"}
    refused(agpt("ckpt", "interval", *[x for kv in args.items() for x in kv], "--json"), flag)


def job(tmp_path: Path, settings: str) -> Path:
    """A job script running the failover loop on a one-host allocation; SETTINGS come before the loop."""
    run, alloc = tmp_path / "run", tmp_path / "alloc"
    alloc.write_text("h1\n")
    script = tmp_path / "job.sh"
    script.write_text(
        "set -euo pipefail\n"
        f"source '{ROOT}/lib/failover.sh'\n"
        f"export AGPT_RUN_DIR='{run}' FAILOVER_HOSTS_FROM='{alloc}' FAILOVER_SPARES=0 FAILOVER_BACKOFF=0\n"
        "FAILOVER_RESOLVE_TIMEOUT=0 FAILOVER_JOBID=j\n"
        f"{settings}\n"
        'rc=0\nfailover_run true || rc=$?\nexit "$rc"\n'
    )
    return script


@pytest.mark.parametrize(
    "setting",
    [
        "FAILOVER_IDLE_TIMEOUT=nan",
        "FAILOVER_IDLE_TIMEOUT=-1",
        "FAILOVER_GRACE=1e400",
        "FAILOVER_STARTUP_TIMEOUT=inf",
        "export AGPT_DEADLINE_EPOCH=nan",
        "FAILOVER_SHRINK=yes",
        "FAILOVER_MIN_NODES=nan",
        "FAILOVER_MIN_NODES=1e400",
    ],
)
def test_failover_run_refuses_a_bad_setting_before_any_attempt(tmp_path: Path, setting: str) -> None:
    """These ran two attempts and stopped as stuck (3); a bad setting is bad input (2), and nothing runs."""
    r = subprocess.run(["bash", str(job(tmp_path, setting))], capture_output=True, text=True, env=agpt_env(),
                       timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    name = setting.removeprefix("export ").split("=")[0]
    assert name in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not list((tmp_path / "run").glob("attempts/*.log"))


def test_plan_now_empty_is_refused_not_a_traceback(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "agpt.failover", "plan", "--run-dir", str(tmp_path), "--before", "--now", ""],
        capture_output=True,
        text=True,
        env=agpt_env(),
        timeout=60,
    )
    refused(r, "--now")


@pytest.mark.parametrize("value", ["nan", "soon", "-5", "1e400"])
def test_the_trainer_refuses_a_bad_deadline_instead_of_ignoring_it(tmp_path: Path, value: str) -> None:
    """AGPT_DEADLINE_EPOCH=nan was read as no deadline: the job then ran into its walltime unsaved."""
    r = agpt("train", "--config", str(ROOT / "jobs/configs/tiny.yaml"), "--run-dir", str(tmp_path / "run"),
             env={"AGPT_DEADLINE_EPOCH": value})  # fmt: skip
    refused(r, "AGPT_DEADLINE_EPOCH")


@pytest.mark.parametrize(
    ("key", "lines"),
    [
        ("horizon_days", {"horizon_days": "1.0e+9"}),  # YAML 1.1 reads "1.0e9" as a string
        ("nodes", {"nodes": "100000000000000000000", "machine_nodes": "100000000000000000000"}),
    ],
)
def test_a_fault_model_sized_beyond_its_bound_is_refused_not_simulated_forever(
    tmp_path: Path, key: str, lines: dict[str, str]
) -> None:
    src = (ROOT / "python/agpt/sim/models/aurora-20b.yaml").read_text().splitlines()
    model = tmp_path / "m.yaml"
    out = [next((f"{k}: {v}" for k, v in lines.items() if x.startswith(f"{k}:")), x) for x in src]
    model.write_text("\n".join(out) + "\n")
    refused(agpt("sim", "run", "--model", str(model), timeout=60), key)
