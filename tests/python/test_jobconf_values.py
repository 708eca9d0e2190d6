"""`agpt jobgen` writes job values into a script: a control character in any of them is refused (exit 2,
naming the key) before a line of the script exists; duplicate keys and non-UTF-8 configs are refused too."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, agpt_env

# (YAML for the job: section, the key the message must name).  YAML double quotes spell the characters.
CASES = {
    "queue-newline": ('queue: "debug\\n#PBS -l select=9999"', "job.queue"),
    "queue-cr": ('queue: "debug\\r"', "job.queue"),
    "account-nul": ('account: "acct\\0x"', "job.account"),
    "filesystems-escape": ('filesystems: "home\\e[2J"', "job.filesystems"),
    "directive-newline": ('directives: ["-l place=scatter", "-k doe\\nrm -rf ~"]', "job.directives[1]"),
    "run_dir-newline": ('run_dir: "runs/x\\ntouch /tmp/pwned"', "job.run_dir"),
    "command-newline": ('command: ["agpt", "train\\ntouch /tmp/pwned"]', "job.command[1]"),
    "env-value-newline": ('env: {OMP_NUM_THREADS: "8\\nid"}', "job.env.OMP_NUM_THREADS"),
    "env-key-newline": ('env: {"FOO\\n": "1"}', "job.env.FOO\\n"),
    "name-trailing-newline": ('name: "smoke\\n"', "job.name"),
    "queue-tab": ('queue: "a\\tb"', "job.queue"),
    "queue-del": ('queue: "a\\x7f"', "job.queue"),
    "queue-line-separator": ('queue: "a\\u2028b"', "job.queue"),
}


def jobgen(tmp_path: Path, config: Path) -> subprocess.CompletedProcess[str]:
    out = tmp_path / "job.pbs"
    return subprocess.run(
        [
            str(ROOT / "bin" / "agpt"),
            "jobgen",
            "--site",
            "polaris",
            "--scheduler",
            "pbs",
            "--no-check",  # these configs hold only a job section: the trainer's check is not the point
            "-o",
            str(out),
            str(config),
        ],
        capture_output=True,
        text=True,
        env=agpt_env(),
        cwd=tmp_path,
        timeout=60,
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_control_character_in_any_job_value_is_refused_naming_the_key(tmp_path: Path, name: str) -> None:
    yaml_line, key = CASES[name]
    config = tmp_path / "c.yaml"
    config.write_text(f"job:\n  nodes: 2\n  {yaml_line}\n")
    r = jobgen(tmp_path, config)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{config}: {key}" in lines[0] and "control character" in lines[0]
    assert not (tmp_path / "job.pbs").exists()


def test_clean_values_still_generate(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text('job:\n  nodes: 2\n  queue: debug\n  env: {A: "x y"}\n  directives: ["-k doe"]\n')
    r = jobgen(tmp_path, config)
    assert r.returncode == 0, r.stderr
    assert "#PBS -q debug" in (tmp_path / "job.pbs").read_text()


def test_a_duplicate_key_is_refused_with_both_lines(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("job:\n  queue: debug\n  nodes: 2\n  queue: prod\n")
    r = jobgen(tmp_path, config)
    assert r.returncode == 2
    assert "duplicate key 'queue' on line 4 (first on line 2)" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_config_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_bytes(b"job:\n  queue: d\xe9bug\n")
    r = jobgen(tmp_path, config)
    assert r.returncode == 2
    assert r.stderr.strip() == f"agpt jobgen: {config}: not UTF-8 text (byte 15)"


def test_jobconf_prints_json_safe_assignments_for_clean_values(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"job": {"nodes": 1, "queue": "q"}}))
    r = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-m", "agpt.jobconf", str(config)],
        capture_output=True,
        text=True,
        env=agpt_env(),
        timeout=60,
    )
    assert r.returncode == 0 and "JOB_QUEUE=q" in r.stdout


def test_a_bad_name_is_shown_escaped_on_one_line(tmp_path: Path) -> None:
    """Found by test_fuzz_configs: a name of one newline was echoed raw, and the message took two lines."""
    config = tmp_path / "c.yaml"
    config.write_text('job:\n  nodes: 2\n  name: "\\n"\n')
    r = jobgen(tmp_path, config)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [
        f"agpt jobgen: {config}: job.name: '\\n' must be letters, digits, '_', '.', '-'"
    ], r.stderr
