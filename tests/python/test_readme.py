"""The README's commands are real: every `agpt` command it shows answers --help, every `make` target and
path it names exists, the flags it shows are accepted, and CI runs its quick start (`make demo`, `make test`)."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest

from conftest import BIN, ROOT, agpt_env

README = (ROOT / "README.md").read_text()


def _shell_lines() -> list[str]:
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", README, flags=re.S):
        for raw in block.splitlines():
            line = raw.split("  #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def _commands(prog: str) -> list[list[str]]:
    out: list[list[str]] = []
    for line in _shell_lines():
        for part in re.split(r"&&|\|\||;|\|", line):
            words = shlex.split(part.strip())
            while words and "=" in words[0] and not words[0].startswith("-"):
                words = words[1:]  # VAR=value prefixes
            if words and words[0].endswith(prog) and (prog != "agpt" or "mpiexec" not in words[0]):
                out.append(words)
            elif len(words) > 3 and words[0].endswith("mpiexec") and prog == "agpt":
                rest = words[words.index(next(w for w in words if w.endswith("agpt"))) :]
                out.append(rest)
    return out


AGPT = _commands("agpt")


def test_readme_shows_the_main_commands() -> None:
    names = {c[1] for c in AGPT if len(c) > 1}
    for must in ("jobgen", "chain", "failover", "tokenize", "blend", "data", "yeet", "train", "site"):
        assert must in names, f"README shows no `agpt {must}` command"


@pytest.mark.parametrize("words", AGPT, ids=[" ".join(c[:3]) for c in AGPT])
def test_every_agpt_command_in_the_readme_answers_help(words: list[str]) -> None:
    sub = [w for w in words[1:3] if not w.startswith("-") and "/" not in w and "." not in w]
    if len(sub) == 2 and sub[0] not in ("failover", "chain", "site", "data", "tokenizer", "sim", "ckpt"):
        sub = sub[:1]
    r = subprocess.run(
        [str(BIN / "agpt"), *sub, "--help"], env=agpt_env(), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, f"agpt {' '.join(sub)} --help: {r.stderr}"
    # Every long flag the README shows is one the command knows.
    for flag in (w.split("=")[0] for w in words if w.startswith("--")):
        if flag == "--help":
            continue
        assert flag in r.stdout, (
            f"README shows {flag} for `agpt {' '.join(sub)}`, its --help does not know it"
        )


def test_make_targets_and_paths_in_the_readme_exist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for words in _commands("make"):
        target = next(w for w in words[1:] if "=" not in w)
        assert re.search(rf"^{re.escape(target)}:", makefile, flags=re.M), f"make {target}: no such target"
    for path in set(re.findall(r"(?<![\w./])\b((?:jobs|lib|site|tests|bin|python)/[\w./-]+\w)", README)):
        if "*" in path or "{" in path or "NAME" in path or "PHASE" in path or "mymachine" in path:
            continue
        assert (ROOT / path).exists(), f"README names {path}, which does not exist"


def test_ci_runs_the_readme_quick_start() -> None:
    ci = (ROOT / ".ci/run").read_text()
    quick = re.search(r"## Two commands\n\n```sh\n(.*?)```", README, flags=re.S)
    assert quick, "README has no quick start"
    for line in quick.group(1).splitlines():
        cmd = line.split("#")[0].strip()
        if cmd:
            assert cmd in ci, f".ci/run does not run the README's `{cmd}`"
