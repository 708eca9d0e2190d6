"""Settings checked at the start (issue 37): every setting the failover loop reads late is checked by failover_run
before the first attempt, by the parsers that read it then (`agpt failover settings`): exit 2 naming it, no
attempt started.  The trainer and the simulator accept the same straggler policies; `agpt sim table --variants`
can choose every variant `--help` lists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, agpt_env

BAD = [
    ("FAILOVER_SWEEP", "bogus"),
    ("FAILOVER_SWEEP_TIMEOUT", "nan"),
    ("FAILOVER_SWEEP_LAUNCH", 'srun "x'),
    ("AGPT_SWEEP_PROGRAM", 'python3 "-m'),
    ("SITE_GPUS_PER_NODE", "-1"),
    ("FAILOVER_WALLTIME_MARGIN", "nan"),
    ("FAILOVER_STRAGGLER", "bogus"),
    ("CHAIN_EVAL_POLL_S", "nan"),
    ("FAILOVER_MIN_NODES", "2.5"),
]


@pytest.mark.parametrize(("name", "value"), BAD, ids=[n for n, _ in BAD])
def test_failover_run_refuses_a_bad_setting_before_the_first_attempt(
    tmp_path: Path, name: str, value: str
) -> None:
    run = tmp_path / "run"
    (tmp_path / "alloc").write_text("h1\nh2\nh3\n")
    job = tmp_path / "job.sh"
    job.write_text(f"""set -euo pipefail
source '{ROOT}/lib/failover.sh'
export AGPT_RUN_DIR='{run}'
FAILOVER_HOSTS_FROM='{tmp_path / "alloc"}' FAILOVER_SPARES=1 FAILOVER_BACKOFF=0 FAILOVER_JOBID=j1
failover_run true
""")
    r = subprocess.run(["bash", str(job)], env=agpt_env({name: value}), capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert name in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not list(run.glob("attempts/*.log")), "an attempt started"


@pytest.mark.parametrize("value", ["swap", "report", " SWAP ", ""])
def test_the_trainer_and_the_simulator_accept_the_same_straggler_policies(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    from agpt.heartbeat import straggler
    from agpt.sim import model

    monkeypatch.setenv("FAILOVER_STRAGGLER", value)
    mon = straggler.StragglerMonitor.from_env("/nonexistent", "j.1")
    assert mon.swap == (straggler.mode(value) == "swap")
    assert model.STRAGGLER_MODES == straggler.MODES


def test_the_trainer_refuses_a_straggler_policy_it_does_not_know(monkeypatch: pytest.MonkeyPatch) -> None:
    from agpt.errors import BadInput
    from agpt.heartbeat import straggler

    monkeypatch.setenv("FAILOVER_STRAGGLER", "bogus")
    with pytest.raises(BadInput, match=re.escape("FAILOVER_STRAGGLER: 'bogus' is not one of report | swap")):
        straggler.StragglerMonitor.from_env("/nonexistent", "j.1")


@pytest.mark.parametrize(
    ("given", "want"),
    [
        (("no spares, no shrink",), ["no spares, no shrink"]),
        (("as shipped;no spares, no shrink",), ["as shipped", "no spares, no shrink"]),
        (("as shipped,blind rotation",), ["as shipped", "blind rotation"]),
        (("no spares", "no spares, no shrink"), ["no spares", "no spares, no shrink"]),
    ],
)
def test_every_variant_can_be_chosen(given: tuple[str, ...], want: list[str]) -> None:
    from agpt.cli.sim import _variants

    assert [n for n, _ in _variants(given)] == want


def test_a_variants_list_that_names_none_is_one_line(tmp_path: Path) -> None:
    r = subprocess.run([str(ROOT / "bin/agpt"), "sim", "table", "--variants", ",", "--out", str(tmp_path)],
                       env=agpt_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "--variants: names no variant" in r.stderr, r.stderr


def test_a_bad_spares_flag_is_named_as_the_flag(tmp_path: Path) -> None:
    (tmp_path / "alloc").write_text("n1\n")
    for flag, value in (("--spares-percent", "nan"), ("--spares-min", "-3")):
        r = subprocess.run([str(ROOT / "bin/agpt-failover"), "hosts", "init", "--run-dir", str(tmp_path / "run"),
                            "--hostfile", str(tmp_path / "alloc"), flag, value],
                           env=agpt_env(), capture_output=True, text=True, timeout=60)  # fmt: skip
        assert r.returncode == 2 and f"agpt: error: {flag} (SITE_SPARES_" in r.stderr, r.stderr


def test_a_missing_shard_names_the_file_list(tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text(f"1.0 {tmp_path / 'nope/shard'} code\n")
    r = subprocess.run([str(ROOT / "bin/agpt"), "blend", "--file-list", str(lst), "--output", str(tmp_path / "out"),
                        "--seq-len", "8", "--num-samples", "10"],
                       env=agpt_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"shard.idx: missing (the shard on line 1 of --file-list {lst})" in r.stderr, r.stderr


@pytest.mark.parametrize("how", ["yaml", "--set"])
def test_a_negative_checkpoint_interval_names_its_key(tmp_path: Path, how: str) -> None:
    """Round two, still listed in issue 37: `train` refused a negative checkpoint.interval naming no key."""
    from agpt.errors import ConfigError
    from agpt.train.config import load_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text("checkpoint:\n  interval: -5\n" if how == "yaml" else "checkpoint:\n  interval: 10\n")
    with pytest.raises(ConfigError, match=re.escape("checkpoint.interval: must be >= 0 (got -5)")):
        load_config(cfg, ["checkpoint.interval=-5"] if how == "--set" else [])
