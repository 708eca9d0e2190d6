"""`agpt ckpt interval`: Young's and Daly's optimum checkpoint interval, against the closed-form formulas."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from agpt import goodput as iv
from agpt.errors import BadInput
from conftest import BIN, agpt_env


def test_the_interval_is_the_closed_form_optimum() -> None:
    # The AuroraGPT 20B figures: 512 nodes that fail once a year, a 23.6 s blocking save, a 59 s reload.
    r = iv.interval(nodes=512, node_mtbf_h=8760, save_stall_s=23.6, load_s=59, restart_s=10)
    m = 8760 * 3600 / 512
    assert r.job_mtbf_s == pytest.approx(m)
    assert r.failures_per_day == pytest.approx(86400 / m)
    assert r.young_s == pytest.approx(math.sqrt(2 * 23.6 * m))
    x = 23.6 / (2 * m)
    assert r.daly_s == pytest.approx(math.sqrt(2 * 23.6 * m) * (1 + math.sqrt(x) / 3 + x / 9) - 23.6)
    w = 23.6 / r.daly_s + (r.daly_s / 2 + 69) / m
    assert r.waste_fraction == pytest.approx(w)
    assert r.loss_h_per_day == pytest.approx(24 * w)


def test_the_optimum_minimises_the_expected_loss() -> None:
    r = iv.interval(nodes=4096, node_mtbf_h=8760, save_stall_s=5.4, load_s=59)
    at = iv.waste(r.daly_s, delta=5.4, mtbf=r.job_mtbf_s, restart=59)
    for f in (0.5, 0.8, 1.25, 2.0):
        assert iv.waste(r.daly_s * f, delta=5.4, mtbf=r.job_mtbf_s, restart=59) > at


def test_a_save_slower_than_twice_the_mtbf_checkpoints_every_mtbf() -> None:
    r = iv.interval(nodes=10000, node_mtbf_h=1, save_stall_s=3600)
    assert r.daly_s == pytest.approx(r.job_mtbf_s)


def test_the_command_prints_the_interval_and_the_loss_per_day() -> None:
    args = [
        "ckpt",
        "interval",
        "--nodes",
        "512",
        "--node-mtbf-h",
        "8760",
        "--save-stall-s",
        "23.6",
        "--load-s",
        "59",
    ]
    r = subprocess.run([str(BIN / "agpt"), *args], env=agpt_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Daly interval" in r.stdout and "h per day" in r.stdout
    j = subprocess.run([str(BIN / "agpt"), *args, "--json"], env=agpt_env(), capture_output=True, text=True)
    d = json.loads(j.stdout)
    assert d["young_s"] == pytest.approx(math.sqrt(2 * 23.6 * 8760 * 3600 / 512))


@pytest.mark.parametrize(
    ("kw", "flag"),
    [
        ({"nodes": 0}, "--nodes"),
        ({"node_mtbf_h": -1.0}, "--node-mtbf-h"),
        ({"save_stall_s": 0.0}, "--save-stall-s"),
        ({"load_s": -2.0}, "--load-s"),
        ({"restart_s": float("nan")}, "--restart-s"),
    ],
)
def test_bad_figures_name_their_flag(kw: dict[str, float], flag: str) -> None:
    args: dict[str, float] = {"nodes": 8, "node_mtbf_h": 100.0, "save_stall_s": 10.0, **kw}
    with pytest.raises(BadInput, match=flag):
        iv.interval(**args)  # type: ignore[arg-type]


def test_bad_input_exits_2() -> None:
    r = subprocess.run(
        [
            str(BIN / "agpt"),
            "ckpt",
            "interval",
            "--nodes",
            "16",
            "--node-mtbf-h",
            "-5",
            "--save-stall-s",
            "3",
        ],
        env=agpt_env(),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "--node-mtbf-h" in r.stderr
