"""Code never runs from data: every value that reaches a generated job script, a hook's command or Bash
arithmetic passes one quoting/validation rule (env_quote in lib/env.sh, agpt.shellword in Python), and the gate
a job script sources a profile through (`env_site_load`) applies exactly `agpt site check`'s checks.

Each test is one instance found from outside (issue 29), reproduced, then held: the script is generated (or the
library run) and executed under bash with a canary file that a command smuggled in would create."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, agpt_env


def canary_cmd(tmp: Path) -> str:
    return f"touch {tmp / 'PWNED'}"


def jobgen(
    tmp: Path, config: Path, *args: str, site_dir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    extra = {"AGPT_SITE_DIR": str(site_dir)} if site_dir else {}
    return subprocess.run(
        [str(ROOT / "bin" / "agpt"), "jobgen", "--no-check", *args, str(config)],
        capture_output=True,
        text=True,
        env=agpt_env(extra),
        cwd=tmp,
        timeout=120,
    )


def one_line_2(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def hostile_site(tmp: Path, key: str, raw_value: str) -> Path:
    """A copy of site/generic as site `evil` (PBS), KEY's line replaced by `KEY=RAW_VALUE` (as written)."""
    sites = tmp / "sites"
    shutil.copytree(ROOT / "site" / "generic", sites / "evil")
    prof = sites / "evil" / "profile.sh"
    lines = []
    for line in prof.read_text().splitlines():
        if line.startswith("SITE_NAME="):
            line = "SITE_NAME=evil"
        elif line.startswith("SITE_SCHEDULER="):
            line = "SITE_SCHEDULER=pbs"
        if line.startswith(f"{key}="):
            line = f"{key}={raw_value}"
        lines.append(line)
    prof.write_text("\n".join(lines) + "\n")
    return sites


def config(tmp: Path, body: str = "job: {nodes: 2}\n", name: str = "c.yaml") -> Path:
    p = tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(body)
    return p


# --- site values with a newline become a live line of the job script -----------------------------------------
@pytest.mark.parametrize(
    ("key", "raw"),
    [
        ("SITE_QUEUE", "'debug\n{canary}'"),
        ("SITE_ACCOUNT", "'acct\n{canary}'"),
        ("SITE_FILESYSTEMS", "'home\n{canary}'"),
        ("SITE_DIRECTIVES", "('-l place=scatter' '-k doe\n{canary}')"),
    ],
)
def test_a_site_value_with_a_newline_never_becomes_a_line_of_the_job_script(
    tmp_path: Path, key: str, raw: str
) -> None:
    sites = hostile_site(tmp_path, key, raw.format(canary=canary_cmd(tmp_path)))
    r = jobgen(tmp_path, config(tmp_path), "--site", "evil", "-o", "job.pbs", site_dir=sites)
    assert r.returncode == 2, r.stdout + r.stderr
    assert key in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "job.pbs").exists()
    # `agpt site check` refuses the profile too, naming the key: it is one line of printable text or nothing.
    chk = subprocess.run(
        [str(ROOT / "bin" / "agpt"), "site", "check", str(sites / "evil" / "profile.sh")],
        capture_output=True,
        text=True,
        env=agpt_env(),
        timeout=60,
    )
    assert chk.returncode == 2 and key in chk.stderr and "control character" in chk.stderr


def test_a_site_value_pulled_in_from_the_environment_with_a_newline_is_refused_too(tmp_path: Path) -> None:
    sites = hostile_site(tmp_path, "SITE_QUEUE", '"${EVIL_QUEUE}"')
    env_value = f"debug\n{canary_cmd(tmp_path)}"
    r = subprocess.run(
        [str(ROOT / "bin" / "agpt"), "jobgen", "--no-check", "--site", "evil", str(config(tmp_path))],
        capture_output=True,
        text=True,
        env=agpt_env({"AGPT_SITE_DIR": str(sites), "EVIL_QUEUE": env_value}),
        cwd=tmp_path,
        timeout=120,
    )
    assert r.returncode == 2 and "SITE_QUEUE" in r.stderr and r.stdout == "", r.stdout + r.stderr


@pytest.mark.parametrize("where", ["config-path", "-o", "--job-script"])
def test_a_newline_in_a_path_never_becomes_a_line_of_the_job_script(tmp_path: Path, where: str) -> None:
    evil = f"x\n{canary_cmd(tmp_path)}\n"
    cfg = config(tmp_path / evil, name="c.yaml") if where == "config-path" else config(tmp_path)
    args = ["--site", "aurora"]
    if where == "-o":
        args += ["-o", evil]
    elif where == "--job-script":
        args += ["--job-script", evil]
    r = jobgen(tmp_path, cfg, *args)
    one_line_2(r, "control character")
    assert r.stdout == "" and not (tmp_path / evil).is_file()


def test_the_site_name_is_one_plain_word_in_the_job_script(tmp_path: Path) -> None:
    """`--site 'x;touch f'` with such a folder: its profile fails the site-name rule, so the gate refuses it."""
    sites = hostile_site(tmp_path, "SITE_QUEUE", "debug")
    evil = sites / "x;touch PWNED"
    (sites / "evil").rename(evil)
    prof = evil / "profile.sh"
    prof.write_text(prof.read_text().replace("SITE_NAME=evil", f"SITE_NAME='{evil.name}'"))
    r = jobgen(tmp_path, config(tmp_path), "--site", evil.name, "-o", "job.pbs", site_dir=sites)
    assert r.returncode == 2, r.stdout + r.stderr
    assert not (tmp_path / "job.pbs").exists() and not (tmp_path / "PWNED").exists()


# --- Bash arithmetic never evaluates a profile value ---------------------------------------------------------
def test_launch_never_evaluates_ranks_per_node_from_the_environment(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("h1\n")
    r = subprocess.run(
        [str(ROOT / "bin" / "agpt"), "launch", "--site", "generic", "--dry-run", "true"],
        capture_output=True,
        text=True,
        env=agpt_env(
            {"FAILOVER_HOSTFILE": str(tmp_path / "hosts"), "LAUNCH_PPN": f"PWD[$({canary_cmd(tmp_path)})]"}
        ),
        timeout=60,
    )
    one_line_2(r, "LAUNCH_PPN/SITE_RANKS_PER_NODE", "whole number")
    assert not (tmp_path / "PWNED").exists()


def test_the_gate_refuses_what_site_check_refuses_so_launch_never_evaluates_a_profile_value(
    tmp_path: Path,
) -> None:
    """SITE_RANKS_PER_NODE='PWD[$(cmd)]' is data to the parser but code to $(( )): `agpt site check` refused it,
    the gate the job scripts use (`env_site_load`) let it through.  Now the gate is the check."""
    sites = hostile_site(tmp_path, "SITE_RANKS_PER_NODE", f"'PWD[$({canary_cmd(tmp_path)})]'")
    (tmp_path / "hosts").write_text("h1\n")
    r = subprocess.run(
        [str(ROOT / "bin" / "agpt"), "launch", "--site", "evil", "--dry-run", "true"],
        capture_output=True,
        text=True,
        env=agpt_env({"FAILOVER_HOSTFILE": str(tmp_path / "hosts"), "AGPT_SITE_DIR": str(sites)}),
        timeout=60,
    )
    assert r.returncode == 2 and "SITE_RANKS_PER_NODE" in r.stderr, r.stdout + r.stderr
    assert "refusing to source" in r.stderr
    assert not (tmp_path / "PWNED").exists()


def test_the_gate_and_site_check_are_one_function() -> None:
    """`python -m agpt.site` (what env_site_load runs) calls check_profile, as `agpt site check` does."""
    import inspect

    from agpt import site
    from agpt.cli import site as cli_site

    assert "check_profile(" in inspect.getsource(site.main)
    assert "check_profile(" in inspect.getsource(cli_site.check_cmd.callback)  # type: ignore[arg-type]


def test_a_walltime_from_the_scheduler_never_wraps_negative() -> None:
    r = subprocess.run(
        ["bash", "-c", f"source {ROOT}/lib/sched.sh; sched_walltime_seconds 99999999999999999999:00:00"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and r.stdout == "" and "out of range" in r.stderr


# --- job config values ---------------------------------------------------------------------------------------
def test_job_nodes_beyond_the_bound_is_refused_not_wrapped(tmp_path: Path) -> None:
    r = jobgen(tmp_path, config(tmp_path, "job: {nodes: 100000000000000000000}\n"), "--site", "aurora")
    one_line_2(r, "job.nodes", "from 1 to 100000")


def test_a_huge_walltime_is_refused_not_wrapped(tmp_path: Path) -> None:
    r = jobgen(tmp_path, config(tmp_path, 'job: {walltime: "99999999999:00:00"}\n'), "--site", "aurora")
    one_line_2(r, "job.walltime")


def test_a_command_word_is_never_brace_expanded(tmp_path: Path) -> None:
    cfg = config(tmp_path, 'job: {command: [printf, "<%s>", "{1,2}"], launch: false, failover: false}\n')
    r = jobgen(tmp_path, cfg, "--site", "aurora")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("printf"))
    out = subprocess.run(["bash", "-c", line.removesuffix(" || rc=$?")], capture_output=True, text=True)
    assert out.stdout == "<{1,2}>"


def test_a_run_dir_with_a_space_stays_that_path(tmp_path: Path) -> None:
    r = jobgen(tmp_path, config(tmp_path, 'job: {run_dir: "runs/my run"}\n'), "--site", "aurora")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("export AGPT_RUN_DIR="))
    out = subprocess.run(
        ["bash", "-c", f'{line}; printf %s "$AGPT_RUN_DIR"'], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.stdout == f"{tmp_path}/runs/my run"


def test_the_embedded_toolkit_path_stays_that_path(tmp_path: Path) -> None:
    """The same fault as run_dir in the non-portable AGPT_HOME line: `"${AGPT_HOME:-/a\\ b}"` kept the backslash."""
    home = tmp_path / "my agpt"
    shutil.copytree(ROOT / "bin", home / "bin", symlinks=True)
    for d in ("lib", "site", "python"):
        (home / d).symlink_to(ROOT / d)
    (home / ".venv").symlink_to(ROOT / ".venv")
    cfg = config(tmp_path)
    r = subprocess.run(
        [str(home / "bin" / "agpt"), "jobgen", "--no-check", "--site", "aurora", str(cfg)],
        capture_output=True,
        text=True,
        env=agpt_env({"AGPT_HOME": ""}),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    i = next(i for i, x in enumerate(lines) if "|| AGPT_HOME=" in x)
    out = subprocess.run(
        ["bash", "-c", "unset AGPT_HOME; " + "\n".join(lines[i : i + 2]) + '\nprintf %s "$AGPT_HOME"'],
        capture_output=True,
        text=True,
    )
    assert out.stdout == str(home)


@pytest.mark.parametrize("var", ["AGPT_DEMO_STEPS", "AGPT_DEMO_TIMEOUT"])
def test_the_demo_never_evaluates_its_settings_in_arithmetic(tmp_path: Path, var: str) -> None:
    r = subprocess.run(
        [str(ROOT / "bin" / "agpt"), "demo"],
        capture_output=True,
        text=True,
        env=agpt_env({var: f"PWD[$({canary_cmd(tmp_path)})]"}),
        cwd=tmp_path,
        timeout=60,
    )
    one_line_2(r, var)
    assert not (tmp_path / "PWNED").exists()
