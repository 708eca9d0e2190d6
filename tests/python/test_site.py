"""Site profiles: `agpt site check|show|list|detect` and the parser behind them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from agpt import site as s
from agpt.errors import BadInput
from conftest import ROOT, agpt_env

SITES = ["aurora", "frontier", "generic", "perlmutter", "polaris", "sunspot"]


def agpt(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "bin" / "agpt"), *args],
        capture_output=True,
        text=True,
        env=agpt_env(env),
        cwd=cwd,
        timeout=60,
    )


def copy_site(tmp_path: Path, name: str = "aurora") -> Path:
    """A private site folder (AGPT_SITE_DIR) holding a copy of NAME, to edit."""
    d = tmp_path / "site" / name
    d.mkdir(parents=True)
    (d / "profile.sh").write_text((ROOT / "site" / name / "profile.sh").read_text())
    return d / "profile.sh"


def line_of(path: Path, key: str) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith(f"{key}="):
            return i
    raise AssertionError(key)


def test_check_passes_for_every_shipped_profile_and_the_template() -> None:
    paths = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "site").glob("*/profile.sh"))
    r = agpt("site", "check", *paths)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == len(SITES) + 1
    assert all(line.endswith(f"ok ({len(s.KEYS)} keys)") for line in r.stdout.splitlines())


def test_check_names_a_typod_key_its_line_and_the_likely_key(tmp_path: Path) -> None:
    prof = copy_site(tmp_path)
    text = prof.read_text().replace("SITE_QUEUE=prod", "SITE_QEUE=prod")
    prof.write_text(text)
    r = agpt("site", "check", str(prof))
    assert r.returncode == 2
    lineno = text.splitlines().index("SITE_QEUE=prod") + 1
    assert f"{prof}:{lineno}: unknown key SITE_QEUE (did you mean SITE_QUEUE?)" in r.stderr
    assert "missing key SITE_QUEUE" in r.stderr


def test_check_rejects_commands_wrong_types_and_bad_enums(tmp_path: Path) -> None:
    prof = copy_site(tmp_path)
    text = prof.read_text()
    text = text.replace("SITE_SCHEDULER=pbs", "SITE_SCHEDULER=lsf")
    text = text.replace("SITE_MODULES=(frameworks copper)", "SITE_MODULES=frameworks")
    text = text.replace("SITE_RANKS_PER_NODE=12", "SITE_RANKS_PER_NODE=twelve")
    text += "module load frameworks\nSITE_QUEUE=debug\n"
    prof.write_text(text)
    errors = s.check_profile(prof).errors
    joined = "\n".join(errors)
    assert (
        f"{line_of(prof, 'SITE_SCHEDULER')}: SITE_SCHEDULER: 'lsf' is not one of pbs | slurm | none" in joined
    )
    assert "SITE_MODULES: must be an array (...)" in joined
    assert "SITE_RANKS_PER_NODE: 'twelve' is not a whole number" in joined
    assert "not an assignment (commands belong in hooks/): module load frameworks" in joined
    assert re.search(r"SITE_QUEUE set twice \(first on line \d+\)", joined)


def test_check_rejects_unknown_pattern_sets_and_a_folder_name_mismatch(tmp_path: Path) -> None:
    prof = copy_site(tmp_path, "polaris")
    prof.write_text(prof.read_text().replace("(pals cuda", "(palz cuda").replace("=polaris\n", "=polar\n"))
    joined = "\n".join(s.check_profile(prof).errors)
    assert "unknown pattern set palz" in joined
    assert "'polar' differs from the folder name 'polaris'" in joined


def test_show_prints_each_resolved_value_with_file_and_line(tmp_path: Path) -> None:
    r = agpt("site", "show", "aurora", env={"HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    prof = ROOT / "site/aurora/profile.sh"
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith("SITE_")}
    assert set(rows) == set(s.KEYS)
    assert re.search(rf"site/aurora/profile.sh:{line_of(prof, 'SITE_QUEUE')}\s+prod$", rows["SITE_QUEUE"])
    # Resolved as a job sees it: ${HOME} expanded.
    assert rows["SITE_VENV_DIR"].endswith(f"{tmp_path}/venvs/aurora")
    assert "(frameworks copper)" in rows["SITE_MODULES"]


def test_show_json_and_resolve_keep_arrays() -> None:
    values = s.resolve_profile(ROOT / "site/polaris/profile.sh")
    assert values["SITE_LAUNCHER_FLAGS"] == ["--depth=8", "--env", "OMP_NUM_THREADS=8"]
    assert "NCCL_NET=AWS Libfabric" in values["SITE_ENV"]
    assert values["SITE_DIRECTIVES"] == ["-l place=scatter", "-k doe", "-j oe"]
    assert s.resolve_profile(ROOT / "site/generic/profile.sh")["SITE_MODULES"] == []


def test_list_names_every_site_but_not_the_template() -> None:
    r = agpt("site", "list")
    assert r.returncode == 0, r.stderr
    assert [line.split()[0] for line in r.stdout.splitlines()] == SITES
    assert "aurora       pbs    pals" in r.stdout


@pytest.mark.parametrize(
    ("host", "site"),
    [
        ("aurora-uan-0009", "aurora"),
        ("x4102c5s2b0n0", "aurora"),
        ("x1921c0s0b0n0", "sunspot"),
        ("polaris-login-02", "polaris"),
        ("x3004c0s7b0n0", "polaris"),
        ("login31.perlmutter.nersc.gov", "perlmutter"),
        ("nid001232", "perlmutter"),
        ("frontier00123", "frontier"),
        ("login05.frontier.olcf.ornl.gov", "frontier"),
        ("my-laptop", "generic"),
    ],
)
def test_detect_by_hostname(host: str, site: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGPT_SITE", raising=False)
    assert s.detect([host]) == site


def test_detect_agpt_site_overrides_and_unknown_lists_known() -> None:
    r = agpt("site", "detect", "--hostname", "x4102c5s2b0n0", env={"AGPT_SITE": "polaris"})
    assert (r.returncode, r.stdout.strip()) == (0, "polaris")
    r = agpt("site", "detect", env={"AGPT_SITE": "nope"})
    assert r.returncode == 2
    assert "unknown site 'nope' (known: aurora, frontier, generic, perlmutter, polaris, sunspot)" in r.stderr


def test_unknown_site_lists_the_known_ones() -> None:
    r = agpt("site", "show", "aurroa")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "agpt: error: unknown site 'aurroa' (known: aurora, frontier, generic, perlmutter, polaris, sunspot)"
    ]
    with pytest.raises(BadInput):
        s.profile_path("nope")


def test_template_documents_every_key_with_a_comment() -> None:
    lines = (ROOT / "site/_template/profile.sh").read_text().splitlines()
    for key in s.KEYS:
        i = next(n for n, line in enumerate(lines) if line.startswith(f"{key}="))
        block = []
        while i > 0 and lines[i - 1].strip():
            i -= 1
            block.append(lines[i])
        assert any(line.startswith("#") for line in block), f"{key} has no comment in the template"


def test_hooks_are_shell_that_profiles_point_to() -> None:
    for hook in (ROOT / "site").glob("*/hooks/*.sh"):
        assert hook.name in ("pre-env.sh", "post-env.sh", "cleanup.sh"), hook
        assert subprocess.run(["bash", "-n", str(hook)]).returncode == 0


def test_show_json_names_file_and_line_of_every_key() -> None:
    import json

    r = agpt("site", "show", "frontier", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) == set(s.KEYS)
    prof = ROOT / "site/frontier/profile.sh"
    assert data["SITE_QUEUE"] == {
        "value": "batch",
        "file": "site/frontier/profile.sh",
        "line": line_of(prof, "SITE_QUEUE"),
    }
    assert data["SITE_LAUNCHER_FLAGS"]["value"] == [
        "--cpus-per-task=7",
        "--gpus-per-task=1",
        "--gpu-bind=closest",
    ]


def test_a_failure_domain_that_is_not_a_regular_expression_or_a_host_memory_that_is_not_a_number_is_refused(
    tmp_path: Path,
) -> None:
    prof = copy_site(tmp_path)
    text = prof.read_text().replace("SITE_HOST_MEM_GIB=1024", "SITE_HOST_MEM_GIB=1TiB")
    prof.write_text(
        text.replace("SITE_FAILURE_DOMAIN_RE='^(x[0-9]+c[0-9]+s[0-9]+)'", "SITE_FAILURE_DOMAIN_RE='^(x'")
    )
    joined = "\n".join(s.check_profile(prof).errors)
    assert "SITE_HOST_MEM_GIB: '1TiB' is not a number >= 0" in joined
    assert "SITE_FAILURE_DOMAIN_RE: not a regular expression" in joined


def test_unknown_stage_container_and_layout_kinds_are_refused_with_the_allowed_list(tmp_path: Path) -> None:
    prof = copy_site(tmp_path)
    text = prof.read_text()
    text = text.replace("SITE_STAGE=copper", "SITE_STAGE=rsync")
    text = text.replace("SITE_CONTAINER=apptainer", "SITE_CONTAINER=docker")
    text = text.replace("SITE_CKPT_LAYOUT=()", "SITE_CKPT_LAYOUT=(gpfs --stripe 8)")
    prof.write_text(text)
    r = agpt("site", "check", str(prof))
    assert r.returncode == 2
    err = r.stderr
    assert (
        f"{prof}:{line_of(prof, 'SITE_STAGE')}: SITE_STAGE: 'rsync' is not one of yeet | copper | sbcast | none"
        in err
    )
    assert (
        f"{prof}:{line_of(prof, 'SITE_CONTAINER')}: SITE_CONTAINER: 'docker' is not one of none | apptainer | "
        "podman-hpc | shifter | pyxis" in err
    )
    assert "SITE_CKPT_LAYOUT: 'gpfs' is not one of lustre | daos" in err


def test_sbcast_needs_slurm_and_pyxis_needs_srun(tmp_path: Path) -> None:
    prof = copy_site(tmp_path)  # Aurora: PBS and PALS
    text = prof.read_text().replace("SITE_STAGE=copper", "SITE_STAGE=sbcast")
    prof.write_text(text.replace("SITE_CONTAINER=apptainer", "SITE_CONTAINER=pyxis"))
    errors = "\n".join(s.check_profile(prof).errors)
    assert f"{line_of(prof, 'SITE_STAGE')}: SITE_STAGE: sbcast needs SITE_SCHEDULER=slurm" in errors
    assert f"{line_of(prof, 'SITE_CONTAINER')}: SITE_CONTAINER: pyxis needs SITE_LAUNCHER=srun" in errors


def test_the_allowed_stages_and_runtimes_are_the_ones_lib_handles() -> None:
    """One list: what `agpt site check` accepts is what lib/env.sh and lib/launch.sh implement."""
    env_sh = (ROOT / "lib" / "env.sh").read_text()
    launch_sh = (ROOT / "lib" / "launch.sh").read_text()
    assert f"is not one of {' | '.join(s.STAGES)}" in env_sh
    assert all(f"_env_stage_{x}()" in env_sh for x in s.STAGES if x != "none")
    assert f"unknown container runtime '$how' ({', '.join(s.CONTAINERS)})" in launch_sh
    assert all(f"    {x})" in launch_sh for x in s.CONTAINERS if x != "none")
    assert all(f"    {x}) set -- " in env_sh for x in s.CKPT_LAYOUTS)
