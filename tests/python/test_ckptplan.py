"""The checkpoint plan a job makes at its start (agpt.ckptplan): the local tier on where it fits, the intervals
from Young/Daly, a config's own keys obeyed; `agpt check` prints it, `--run-dir` records it, and the simulator's
"as shipped" is the same decision over the same defaults."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agpt import ckptplan, goodput
from agpt.failover.policy import Settings
from agpt.heartbeat.straggler import DEFAULT_MODE
from agpt.sim import model
from agpt.train.config import CheckpointConfig, HeartbeatConfig, TrainConfig, load_config
from conftest import BIN, ROOT, agpt_env

GB = 1e9


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "agpt"), "check", *args], env=agpt_env(), capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def rows(out: str, name: str) -> list[str]:
    """The table row NAME and the lines that continue it (no name of their own)."""
    lines = out.splitlines()
    i = next(k for k, x in enumerate(lines) if x[7:].startswith(name))
    out_rows = [lines[i]]
    for x in lines[i + 1 :]:
        if not x.startswith(" " * 19):
            break
        out_rows.append(x.strip())
    return out_rows


def profile(tmp_path: Path, site: str, **changes: str | None) -> Path:
    """A copy of site/SITE/profile.sh with keys changed (None: the line removed)."""
    src = (ROOT / "site" / site / "profile.sh").read_text().splitlines(keepends=True)
    out = []
    for line in src:
        key = line.split("=", 1)[0]
        if key in changes:
            if changes[key] is not None:
                out.append(f"{key}={changes[key]}\n")
            continue
        out.append(line)
    d = tmp_path / site
    d.mkdir(parents=True, exist_ok=True)
    (d / "profile.sh").write_text("".join(out))
    return d / "profile.sh"


def test_the_20b_job_on_aurora_gets_the_local_tier_and_an_interval_chosen_for_it() -> None:
    r = check("--site", "aurora", "jobs/configs/20b.yaml", "--no-data")
    assert r.returncode == 0, r.stderr
    local = rows(r.stdout, "local tier")[0]
    assert "on, a save every 7.0 min (Daly for a 90.7 ms stall, job MTBF 273.75 h), 48.6 GiB per node of 1024 GiB" \
        in local  # fmt: skip
    interval = rows(r.stdout, "interval")
    assert "every 1.00 h (the upper bound: the local tier covers the failures inside a job)" in interval[0]
    assert any("global tier: Daly 54.3 min for a 5.4 s stall" in x for x in interval)


def test_too_little_host_memory_turns_the_tier_off_and_says_why(tmp_path: Path) -> None:
    small = profile(tmp_path, "aurora", SITE_HOST_MEM_GIB="64")
    r = check("--site", str(small), "jobs/configs/20b.yaml", "--no-data")
    assert r.returncode == 0, r.stderr
    assert ("local tier  off: needs 48.6 GiB per node, more than 50% of 64 GiB (SITE_HOST_MEM_GIB) that a tmpfs "
            "holds") in r.stdout  # fmt: skip
    # without the tier, the global interval is Daly's for the job's own MTBF
    assert "interval    every 54.3 min (Daly 54.3 min for a 5.4 s stall" in r.stdout


def test_a_profile_without_host_memory_or_a_positive_mtbf_gets_the_documented_fallback(
    tmp_path: Path,
) -> None:
    bare = profile(tmp_path, "aurora", SITE_HOST_MEM_GIB=None, SITE_NODE_MTBF_H="0")
    r = check("--site", str(bare), "jobs/configs/20b.yaml", "--no-data")
    assert r.returncode == 0, r.stderr
    assert "sets no host memory (SITE_HOST_MEM_GIB): the tier needs 48.6 GiB per node" in r.stdout
    assert "sets no positive SITE_NODE_MTBF_H: a node MTBF of 8760 h assumed" in r.stdout
    neg = profile(tmp_path, "perlmutter", SITE_NODE_MTBF_H="-5")
    r = check("--site", str(neg), "jobs/configs/20b.yaml", "--no-data")
    assert r.returncode == 0, r.stderr
    assert "sets no positive SITE_NODE_MTBF_H" in r.stdout
    word = profile(tmp_path / "w", "perlmutter", SITE_NODE_MTBF_H="often")
    r = check("--site", str(word), "jobs/configs/20b.yaml", "--no-data")
    assert r.returncode == 2 and "SITE_NODE_MTBF_H" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_config_that_pins_an_interval_is_obeyed_and_told_it_differs(tmp_path: Path) -> None:
    cfg = (ROOT / "jobs/configs/20b.yaml").read_text().replace("checkpoint:\n", "checkpoint:\n  interval: 500\n"
                                                                   "  local_interval_s: 0\n", 1)  # fmt: skip
    path = tmp_path / "20b.yaml"
    path.write_text(cfg)
    r = check("--site", "aurora", str(path), "--no-data")
    assert r.returncode == 0, r.stderr
    assert "local tier  off (the config sets checkpoint.local_interval_s: 0)" in r.stdout
    assert "checkpoint.local_interval*: differs from the recommended (a save every 7.0 min)" in r.stdout
    assert "interval    the config sets checkpoint.interval: 500" in r.stdout
    assert "checkpoint.interval*: differs from the recommended every" in r.stdout


def test_the_job_start_check_records_the_plan_and_uses_the_previous_jobs_stall(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = check(
        "--site", "perlmutter", "--nodes", "32", "--no-data", "--run-dir", str(run), "jobs/configs/20b.yaml"
    )
    assert r.returncode == 0, r.stderr
    rec = json.loads((run / ckptplan.FILE).read_text())
    assert rec["format"] == 1 and rec["local"] is True and rec["stall_s"] == 5.4
    assert rec["values"] == {"interval": 0, "interval_s": 3600.0, "local_interval": 0,
                             "local_interval_s": rec["local_interval_s"]}  # fmt: skip
    # a job that ran logs its stalls; the next job's plan reads them
    (run / "attempts").mkdir()
    (run / "attempts" / "1.1.log").write_text(
        "step=10 loss=2.0 stall_ms=0.0\nstep=20 loss=1.9 stall_ms=12500.0\n"
    )
    r = check(
        "--site", "perlmutter", "--nodes", "32", "--no-data", "--run-dir", str(run), "jobs/configs/20b.yaml"
    )
    assert r.returncode == 0, r.stderr
    assert "a 12.5 s stall, measured by the previous job" in r.stdout
    assert json.loads((run / ckptplan.FILE).read_text())["stall_s"] == 12.5


def test_decide_follows_daly_within_the_bounds() -> None:
    f = ckptplan.Facts(nodes=4096, ranks_per_node=12, state_bytes=232 * GB, host_mem_gib=0, node_mtbf_h=8760)
    p = ckptplan.decide(f)
    assert not p.local and p.values["local_interval_s"] == 0
    daly = goodput.daly(5.4, 8760 * 3600 / 4096)
    assert (
        p.interval_s == round(min(max(daly, 300), 3600), 1) == 300.0
    )  # Daly is 4.8 min here: the lower bound
    on = ckptplan.decide(ckptplan.Facts(nodes=4096, ranks_per_node=12, state_bytes=232 * GB, host_mem_gib=1024,
                                        node_mtbf_h=8760))  # fmt: skip
    assert on.local and on.interval_s == 3600.0
    assert on.local_interval_s == round(max(goodput.daly(ckptplan.local_stall_s(232 * GB / 4096 / 12),
                                                         8760 * 3600 / 4096), 10), 1)  # fmt: skip


def test_the_trainer_applies_the_plan_only_to_the_keys_its_config_leaves(tmp_path: Path) -> None:
    f = ckptplan.Facts(nodes=2, ranks_per_node=1, state_bytes=1e6, host_mem_gib=8, node_mtbf_h=1)
    ckptplan.write(tmp_path, ckptplan.decide(f))
    free = tmp_path / "free.yaml"
    free.write_text("train: {steps: 4}\n")
    cfg = load_config(free, environ={})
    lines = ckptplan.apply(cfg.checkpoint, cfg.pinned, tmp_path)
    assert cfg.checkpoint.local and cfg.checkpoint.interval == 0 and cfg.checkpoint.interval_s == 3600.0
    assert lines[0].startswith("checkpoint plan: local tier on, a save every")
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text("checkpoint: {interval: 20}\n")
    cfg = load_config(pinned, environ={})
    lines = ckptplan.apply(cfg.checkpoint, cfg.pinned, tmp_path)
    assert (cfg.checkpoint.interval, cfg.checkpoint.interval_s) == (
        20,
        0.0,
    )  # the pair kept as the config has it
    assert cfg.checkpoint.local
    assert lines[-1] == "checkpoint plan: the config's checkpoint.interval kept"
    (tmp_path / ckptplan.FILE).write_text("[1, 2")
    cfg = load_config(free, environ={})
    assert "unreadable" in ckptplan.apply(cfg.checkpoint, cfg.pinned, tmp_path)[0]
    assert (cfg.checkpoint.interval, cfg.checkpoint.local) == (CheckpointConfig().interval, False)


def test_the_simulators_as_shipped_reads_the_real_defaults() -> None:
    """aurora-20b as the goodput table's "as shipped" runs it: every default from its home, the intervals and the
    local tier from the same plan `agpt check` makes on site/aurora.  A default changed in one place moves it."""
    m = model.load("aurora-20b")
    shipped = model.planned(m)
    loop = Settings()
    assert m.heartbeats is HeartbeatConfig().enabled
    assert m.failover.straggler == DEFAULT_MODE == "swap"
    for key in ("max_attempts", "max_repeat", "max_blind", "min_attempt_s", "shrink", "min_nodes"):
        assert getattr(m.failover, key) == getattr(loop, key), key
    assert tuple(m.failover.backoff) == loop.backoff
    ck, tr = CheckpointConfig(), TrainConfig()
    assert (m.train.checkpoint_keep, m.train.async_save, m.train.local_keep, m.train.deadline_margin_s) == (
        ck.keep, ck.async_save, ck.local_keep, tr.deadline_margin_s)  # fmt: skip
    assert not m.pinned  # the shipped model sets no interval: the plan does
    p = model.plan(m)
    assert shipped.train.local and shipped.train.local_interval_s == p.local_interval_s > 0
    assert shipped.train.checkpoint_interval_s == p.interval_s and shipped.train.checkpoint_interval == 0
    assert shipped.costs.ranks_per_node == 12  # site/aurora/profile.sh SITE_RANKS_PER_NODE
    assert (shipped.costs.local_fixed_s, shipped.costs.local_stage_gb_s) == (ckptplan.LOCAL_FIXED_S,
                                                                           ckptplan.LOCAL_STAGE_GB_S)  # fmt: skip


@pytest.mark.parametrize("name", ["aurora-20b", "aurora-80b"])
def test_the_shipped_fault_models_repeat_no_default(name: str) -> None:
    """A key a shipped model sets is a fact of that machine or an assumption with its source, never a copy of a
    default that lives in code (which would go stale when the code's changes)."""
    import yaml

    data = yaml.safe_load((model.MODELS_DIR / f"{name}.yaml").read_text())
    assert "heartbeats" not in data and "failover" not in data and "chain" not in data
    train = data.get("train") or {}
    assert not set(train) & {"checkpoint_interval", "checkpoint_interval_s", "checkpoint_keep", "async_save",
                             "deadline_margin_s", "local_interval", "local_interval_s"}  # fmt: skip
    costs = data.get("costs") or {}
    assert not set(costs) & {"watchdog_timeout_s", "startup_timeout_s", "teardown_s", "grace_s", "ranks_per_node",
                             "local_fixed_s", "local_stage_gb_s"}  # fmt: skip
