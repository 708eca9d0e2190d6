"""Site profiles are data: nothing in one runs, whether `agpt site check`, `show` or a job script reads it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agpt import site as s
from conftest import ROOT, agpt_env

# Each value would run `touch MARK` when Bash sources the profile; {mark} is filled in per test.
ATTACKS = {
    "dollar-paren": 'SITE_QUEUE="$(touch {mark})"',
    "unquoted-dollar-paren": "SITE_QUEUE=$(touch {mark})",
    "backticks": "SITE_QUEUE=`touch {mark}`",
    "backticks-in-double-quotes": 'SITE_QUEUE="a`touch {mark}`b"',
    "in-default": 'SITE_QUEUE="${{UNSET_X:-$(touch {mark})}}"',
    "in-unquoted-default": "SITE_QUEUE=${{UNSET_X:-`touch {mark}`}}",
    "in-array": 'SITE_MODULES=(a "$(touch {mark})")',
    "in-array-unquoted": "SITE_MODULES=(a $(touch {mark}))",
    "array-next-line": 'SITE_MODULES=(\n  a\n  "$(touch {mark})"\n)',
    "process-substitution": "SITE_QUEUE=<(touch {mark})",
    "arithmetic-subscript": "SITE_QUEUE=$((a[$(touch {mark})]))",
    "prompt-expansion": 'SITE_QUEUE="${{SITE_DESCRIPTION@P}}"',
    "command-after-semicolon": "SITE_QUEUE=prod; touch {mark}",
    "command-after-ampersand": "SITE_QUEUE=prod && touch {mark}",
    "env-prefix-command": "SITE_QUEUE=prod touch {mark}",
    "bare-command": "SITE_QUEUE=prod\ntouch {mark}",
    "ansi-c-quote": "SITE_QUEUE=$'\\x24(touch {mark})'",
    "line-continuation": "SITE_QUEUE=prod\\\n;touch {mark}",
}


def evil_site(tmp_path: Path, assignment: str) -> Path:
    """site/evil/profile.sh: aurora's profile with one assignment replaced by ASSIGNMENT."""
    d = tmp_path / "site" / "evil"
    d.mkdir(parents=True)
    key = assignment.split("=", 1)[0]
    lines = []
    for line in (ROOT / "site/aurora/profile.sh").read_text().splitlines():
        if line.startswith("SITE_NAME="):
            line = "SITE_NAME=evil"
        elif line.startswith(f"{key}="):
            line = assignment
        lines.append(line)
    (d / "profile.sh").write_text("\n".join(lines) + "\n")
    return d / "profile.sh"


def run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = agpt_env({"AGPT_SITE_DIR": str(tmp_path / "site"), "HOME": str(tmp_path)})
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_check_refuses_and_show_never_runs_a_profile_that_would_execute(tmp_path: Path, name: str) -> None:
    mark = tmp_path / "executed"
    prof = evil_site(tmp_path, ATTACKS[name].format(mark=mark))
    # Proof that the profile is a real attack: Bash sourcing it runs the command.
    subprocess.run(["bash", "-c", f"source {prof}"], capture_output=True, cwd=tmp_path, timeout=30)
    if name not in ("prompt-expansion", "ansi-c-quote"):  # refused forms that need a second step to run
        assert mark.exists(), f"{name}: the fixture does not execute under bash"
        mark.unlink()
    agpt = str(ROOT / "bin" / "agpt")
    r = run([agpt, "site", "check", "evil"], tmp_path)
    assert r.returncode == 2, r.stdout
    assert f"{prof}:" in r.stderr and "Traceback" not in r.stderr
    r = run([agpt, "site", "show", "evil"], tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("agpt: error: "), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = run([agpt, "site", "show", "evil", "--json"], tmp_path)
    assert r.returncode == 2
    # The job scripts' path: lib/env.sh refuses to source it.
    script = f'source {ROOT}/lib/env.sh; env_site_load evil; echo "loaded rc=$?"'
    r = run(["bash", "-c", script], tmp_path)
    assert "loaded rc=2" in r.stdout, r.stdout + r.stderr
    assert "not data only" in r.stderr
    assert not mark.exists(), f"{name}: the profile ran"


def test_the_message_names_the_line_and_the_construct(tmp_path: Path) -> None:
    prof = evil_site(tmp_path, 'SITE_MODULES=(a "$(id)")')
    errors = s.check_profile(prof).errors
    lineno = prof.read_text().splitlines().index('SITE_MODULES=(a "$(id)")') + 1
    assert f"{prof}:{lineno}: SITE_MODULES: command substitution $(...) is not allowed" in errors[0]


def test_show_expands_variables_and_defaults_as_bash_would(tmp_path: Path) -> None:
    prof = evil_site(tmp_path, 'SITE_LOCAL_DIR="${AGPT_TEST_UNSET:-/scratch}/${USER_X-nobody}"')
    text = prof.read_text().replace(
        'SITE_VENV_DIR="${HOME}/venvs/aurora"', 'SITE_VENV_DIR=~/"v e"/$SITE_NAME'
    )
    text = text.replace("SITE_QUEUE=prod", "SITE_QUEUE='$(not run)'\\ x  # literal in single quotes")
    prof.write_text(text)
    assert s.check_profile(prof).errors == []
    env = {"HOME": str(tmp_path), "USER_X": ""}
    values = run_resolve(prof, env)
    assert values["SITE_LOCAL_DIR"] == "/scratch/"
    assert values["SITE_VENV_DIR"] == f"{tmp_path}/v e/evil"
    assert values["SITE_QUEUE"] == "$(not run) x"
    # Bash agrees on every value.
    script = f'source {prof}; printf \'%s\\n\' "$SITE_LOCAL_DIR" "$SITE_VENV_DIR" "$SITE_QUEUE"'
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=30)
    assert r.stdout.splitlines() == [values["SITE_LOCAL_DIR"], values["SITE_VENV_DIR"], values["SITE_QUEUE"]]


def test_show_names_an_unset_variable(tmp_path: Path) -> None:
    prof = evil_site(tmp_path, 'SITE_LOCAL_DIR="${AGPT_TEST_UNSET}/x"')
    r = run([str(ROOT / "bin" / "agpt"), "site", "show", "evil"], tmp_path)
    assert r.returncode == 2
    assert "SITE_LOCAL_DIR: AGPT_TEST_UNSET is not set" in r.stderr
    assert str(prof) in r.stderr


def run_resolve(prof: Path, env: dict[str, str]) -> dict[str, s.Value]:
    import os

    old = dict(os.environ)
    try:
        os.environ.update(env)
        return s.resolve_profile(prof)
    finally:
        os.environ.clear()
        os.environ.update(old)
