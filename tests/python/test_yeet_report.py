"""Small pure pieces: launcher detection, host spelling, --min-success."""

from __future__ import annotations

import pytest

from agpt.errors import BadInput
from agpt.yeet.mpi import under_launcher
from agpt.yeet.report import needed, spell


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({"PMI_RANK": "0", "PMI_SIZE": "4"}, True),
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"}, True),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0"}, True),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, False),  # a batch script, not a job step
        ({"PALS_RANKID": "3"}, True),
        ({}, False),
    ],
)
def test_launcher_detection(env: dict[str, str], want: bool) -> None:
    assert under_launcher(env) is want


def test_hosts_are_spelled_as_in_the_hostfile() -> None:
    hosts = ["x1000c0s0b0n0.hsn.cm.site", "nid001234", "n3"]
    assert spell("x1000c0s0b0n0", hosts) == "x1000c0s0b0n0.hsn.cm.site"
    assert spell("nid001234-hsn0", hosts) == "nid001234"
    assert spell("n3", hosts) == "n3"
    assert spell("elsewhere", hosts) == "elsewhere"


def test_min_success() -> None:
    assert needed(None, 8) == 8
    assert needed("6", 8) == 6
    assert needed("0.9", 100) == 90
    assert needed("75%", 4) == 3
    assert needed("0.01", 8) == 1
    for bad in ("0", "1.5", "many", "9"):
        with pytest.raises(BadInput, match="--min-success"):
            needed(bad, 8)
