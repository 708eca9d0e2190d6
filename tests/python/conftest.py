"""Shared fixtures: the checkout's paths, an isolated HOME/TMPDIR, and the local Slurm cluster; the session
fixtures of data_util (sp_model) and ckpt_util (blend, trained, exported) are registered here, once for all."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[2]
# The property-based tests (hypothesis) draw the same examples every run: a run's result does not depend on its
# luck, which CI must be able to trust.  AGPT_FUZZ_RANDOM=1 draws new ones each run (and keeps hypothesis's
# database of failures), a search that can find what the fixed examples do not: it found the raw newline in
# jobgen's job.name error.  AGPT_FUZZ_EXAMPLES (tests/python/fuzz_util.py) sets how many.
settings.register_profile("fixed", derandomize=True, database=None)
settings.register_profile("random")
settings.load_profile("random" if os.environ.get("AGPT_FUZZ_RANDOM") == "1" else "fixed")
BIN = ROOT / "bin"
VENV_BIN = ROOT / ".venv" / "bin"
# Session fixtures built once for the whole run: a test names them as arguments and imports nothing.  A test module
# that imports the fixture function gets a definition of its own, which pytest builds again for that module (a
# tokenizer trained, a model trained on 2 ranks, an export), so collection refuses it (_no_private_copies).
pytest_plugins = ["data_util", "ckpt_util"]
SHARED_FIXTURES = {"data_util": ["sp_model"], "ckpt_util": ["blend", "trained", "exported"]}


def agpt_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a user has after cloning: bin/ and the venv on PATH, python/ importable."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}:{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    env["PYTHONPATH"] = str(ROOT / "python")
    env.setdefault("AGPT_PYTHON", sys.executable)
    if extra:
        env.update(extra)
    return env


def pytest_configure(config: pytest.Config) -> None:
    """A cluster test that passed on its rerun still prints why its first run failed (the rerun summary's
    traceback, where the installed pytest-rerunfailures has the option): else a flake's cause is lost."""
    if hasattr(config.option, "rerun_show_tracebacks"):
        config.option.rerun_show_tracebacks = True


@pytest.hookimpl(tryfirst=True)  # before `-m` selects: tests/run runs `-m cluster` in a lane of its own
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that asks for the `cluster` fixture is marked `cluster`.  A test on the real local Slurm cluster
    gets one rerun: on 2 loaded cores the scheduler's own timing (I/O forwarding, node pings) varies; a failure
    twice in a row is still a failure."""
    _no_private_copies(items)
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.cluster)
        if item.get_closest_marker("cluster") and not item.get_closest_marker("flaky"):
            item.add_marker(pytest.mark.flaky(reruns=1, reruns_delay=2))


def _no_private_copies(items: list[pytest.Item]) -> None:
    """Refuses a test module that imports a shared session fixture (see pytest_plugins above), naming both."""
    for module in {item.module for item in items if isinstance(item, pytest.Function) and item.module}:
        for owner, names in SHARED_FIXTURES.items():
            shared = sys.modules.get(owner)
            for name in names:
                if shared is not None and getattr(module, name, None) is getattr(shared, name, None):
                    raise pytest.UsageError(
                        f"{module.__file__}: imports the session fixture {name} from {owner}: that builds it again "
                        f"for this module; drop the import (conftest.py registers it for every test)"
                    )


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(autouse=True)
def _isolate_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))


def _parse_env(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("export "):
            key, _, value = line[len("export ") :].partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real local Slurm cluster (tests/cluster/up), shared by the session; its environment as a dict."""
    state = tmp_path_factory.mktemp("cluster")
    up = subprocess.run(
        [str(ROOT / "tests/cluster/up"), "--dir", str(state)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if up.returncode != 0:
        subprocess.run([str(ROOT / "tests/cluster/down"), "--dir", str(state)], capture_output=True)
        pytest.fail(f"tests/cluster/up failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
    env = _parse_env(up.stdout)
    env["AGPT_CLUSTER_DIR"] = str(state)
    try:
        yield env
    finally:
        subprocess.run(
            [str(ROOT / "tests/cluster/down"), "--dir", str(state)], capture_output=True, timeout=120
        )
