"""The README and docs/ show real commands and real places: every `agpt` command they show answers --help and
knows the flags shown, every `make` target and path they name exists, every relative link and anchor resolves,
the README links every page, and CI runs the README's quick start (`make demo`, `make test`)."""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, ROOT, agpt_env

README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
TEXT = {p: p.read_text() for p in PAGES}
README_MAX_LINES = 250  # a guide; detail goes to one page under docs/


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _shell_lines(text: str) -> list[str]:
    """Command lines of ```sh blocks, and the `$ ` lines of ```console transcripts."""
    lines: list[str] = []
    for kind, block in re.findall(r"^```(sh|console)\n(.*?)^```", text, flags=re.S | re.M):
        for raw in block.splitlines():
            if kind == "console":
                if not raw.startswith("$ "):
                    continue
                raw = raw[2:]
            line = raw.split("  #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def _commands(prog: str, text: str) -> list[list[str]]:
    out: list[list[str]] = []
    for line in _shell_lines(text):
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


AGPT = [(_rel(p), c) for p in PAGES for c in _commands("agpt", TEXT[p])]

# Where a newcomer finds each main command: the README or the one page of its subsystem.
HOMES = {
    "check": "README.md",
    "jobgen": "README.md",
    "chain": "README.md",
    "failover": "README.md",
    "site": "README.md",
    "monitor": "README.md",
    "watch": "docs/recovery.md",
    "sim": "docs/goodput.md",
    "tokenizer": "docs/data.md",
    "tokenize": "docs/data.md",
    "blend": "docs/data.md",
    "data": "docs/data.md",
    "yeet": "docs/staging.md",
    "train": "docs/training.md",
    "smoke": "docs/training.md",
    "lr-find": "docs/training.md",
    "plot": "docs/training.md",
    "ckpt": "docs/checkpoints.md",
}


def test_each_main_command_is_shown_on_its_page() -> None:
    shown = {(page, c[1]) for page, c in AGPT if len(c) > 1}
    for name, page in HOMES.items():
        assert (page, name) in shown, f"{page} shows no `agpt {name}` command"


@functools.cache
def _help(sub: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """`agpt SUB --help`, once per subcommand however many pages show it."""
    return subprocess.run(
        [str(BIN / "agpt"), *sub, "--help"], env=agpt_env(), capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("page,words", AGPT, ids=[f"{p}: {' '.join(c[:3])}" for p, c in AGPT])
def test_every_agpt_command_shown_answers_help(page: str, words: list[str]) -> None:
    sub = [w for w in words[1:3] if not w.startswith("-") and "/" not in w and "." not in w]
    if len(sub) == 2 and sub[0] not in ("failover", "chain", "site", "data", "tokenizer", "sim", "ckpt"):
        sub = sub[:1]
    r = _help(tuple(sub))
    assert r.returncode == 0, f"{page}: agpt {' '.join(sub)} --help: {r.stderr}"
    # Every long flag the page shows is one the command knows.
    for flag in (w.split("=")[0] for w in words if w.startswith("--")):
        if flag == "--help":
            continue
        assert flag in r.stdout, (
            f"{page} shows {flag} for `agpt {' '.join(sub)}`, its --help does not know it"
        )


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_make_targets_and_paths_named_exist(page: Path) -> None:
    text = TEXT[page]
    makefile = (ROOT / "Makefile").read_text()
    for words in _commands("make", text):
        target = next(w for w in words[1:] if "=" not in w)
        assert re.search(rf"^{re.escape(target)}:", makefile, flags=re.M), (
            f"{_rel(page)}: make {target}: no such target"
        )
    for m in re.finditer(r"(?<![\w./])\b((?:jobs|lib|site|tests|bin|python|docs)/[\w./-]+\w)([*{<]?)", text):
        path = m.group(1)
        if m.group(2) or "NAME" in path or "PHASE" in path or "mymachine" in path:
            continue  # a pattern (`test_fuzz_*.py`, `{tiny,2b}.yaml`, `step-<N>`) or a placeholder
        assert (ROOT / path).exists(), f"{_rel(page)} names {path}, which does not exist"


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but `-` and `_` dropped, spaces to `-`, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fence or not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(text: str) -> list[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)  # links in code blocks are not links
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    for link in _links(TEXT[page]):
        if re.match(r"[a-z]+:", link):
            continue  # https:, mailto:
        target, _, anchor = link.partition("#")
        dest = (page.parent / target).resolve() if target else page
        assert dest.exists(), f"{_rel(page)}: link {link}: {target} does not exist"
        if anchor:
            assert dest.suffix == ".md", (
                f"{_rel(page)}: link {link}: an anchor into a file that is not Markdown"
            )
            assert anchor in _anchors(dest.read_text()), (
                f"{_rel(page)}: link {link}: no heading #{anchor} in {target or 'this page'}"
            )


def test_the_readme_is_a_guide_that_links_every_page() -> None:
    linked = {
        (ROOT / link.partition("#")[0]).resolve() for link in _links(README) if link.startswith("docs/")
    }
    for doc in DOCS:
        if doc.parent == ROOT / "docs":
            assert doc.resolve() in linked, f"README.md does not link {_rel(doc)}"
    lines = README.count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines: it is the guide (what, two commands, submitting, a site, the layers, "
        f"headline figures, links); move detail to its page under docs/"
    )


def test_ci_runs_the_readme_quick_start() -> None:
    ci = (ROOT / ".ci/run").read_text()
    quick = re.search(r"## Two commands\n\n```sh\n(.*?)```", README, flags=re.S)
    assert quick, "README has no quick start"
    for line in quick.group(1).splitlines():
        cmd = line.split("#")[0].strip()
        if cmd:
            assert cmd in ci, f".ci/run does not run the README's `{cmd}`"
