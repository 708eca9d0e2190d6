"""The simulator's start-up terms (issue 39): a cold rank's imports and model build, a warm rank's hand-over on
relaunches only, and the communicator's init as a function of the ranks; the defaults keep the model as it was."""

from __future__ import annotations

import pytest

from agpt.errors import ConfigError
from agpt.sim import model


def test_the_defaults_start_as_before() -> None:
    c = model.Costs()
    assert (
        c.start_s(first=True, ranks=49152)
        == c.start_s(first=False, ranks=8)
        == c.launcher_start_s + c.model_build_s
    )


def test_warm_ranks_skip_the_imports_and_build_on_relaunches_not_on_a_jobs_first_attempt() -> None:
    c = model.Costs(
        launcher_start_s=1.0, imports_s=10.0, model_build_s=3.0, warm_ranks=True, warm_start_s=0.7
    )
    assert c.start_s(first=True, ranks=4) == pytest.approx(14.0)
    assert c.start_s(first=False, ranks=4) == pytest.approx(1.7)


def test_the_communicator_init_grows_with_the_ranks_from_the_published_figures() -> None:
    c = model.Costs(**model.COMM_INIT_PUBLISHED)
    assert c.comm_init_s(8) == pytest.approx(2.072)
    assert c.comm_init_s(16384) == pytest.approx(149.5, abs=0.1)  # NVIDIA/nccl#1156's 2.5 minutes


def test_a_model_file_sets_them_and_a_bad_one_is_refused_naming_the_key() -> None:
    m = model.from_dict({"costs": {"warm_ranks": True, "imports_s": 9.8, "comm_init_per_rank_s": 0.009}})
    assert (m.costs.warm_ranks, m.costs.imports_s) == (True, 9.8)
    with pytest.raises(ConfigError, match="warm_ranks"):
        model.from_dict({"costs": {"warm_ranks": "yes"}})
