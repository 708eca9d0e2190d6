"""The figures in the README and docs/ are what the project computes today, not what it computed once.

Each cheap figure carries the command that produces it (docs/testing.md, "Figures"): a ```console block
(`$ COMMAND` then its output; `...` stands for any lines) or an inline `VALUE<!-- figure: COMMAND ~ REGEX -->`,
where COMMAND may be `@NAME`, defined in a `<!-- figures:` block of the same page (the GFM spec, 0.29-gfm example
649, does not allow `--` inside an inline comment, and a renderer that follows it shows such a comment as text, so
commands with long options are named there). This test runs every
one of those commands and fails, naming the page and line, when the text and the output disagree. Expensive
figures (benchmarks, the simulator's table) name their command in the prose and are not run.
"""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path

import pytest

from conftest import ROOT, agpt_env

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMENT = re.compile(r"<!--\s*figure:\s*(.*?)\s*-->")
NAMED = re.compile(r"^<!-- figures:\n(.*?)^-->", flags=re.M | re.S)
NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")
CONSOLE = re.compile(r"^```console\n(.*?)^```", flags=re.M | re.S)


@dataclass(frozen=True)
class Inline:
    page: str
    line: int
    before: str  # the text between the previous figure on this line (or the line's start) and the comment
    body: str  # what the comment holds after `figure:`
    command: str
    regex: str | None


@dataclass(frozen=True)
class Transcript:
    page: str
    line: int
    command: str
    expected: tuple[str, ...]


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _code_spans(line: str) -> list[tuple[int, int]]:
    """Where the inline code spans of a Markdown line are (a run of N backticks closed by the next run of N)."""
    spans, i = [], 0
    while (m := re.compile(r"`+").search(line, i)) is not None:
        close = re.compile(rf"(?<!`){m.group()}(?!`)").search(line, m.end())
        if close is None:
            i = m.end()
            continue
        spans.append((m.start(), close.end()))
        i = close.end()
    return spans


def _outside_fences(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks: a comment inside one is shown, not hidden."""
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"\s*(`{3,}|~{3,})", line)
        if m and (fence is None or m.group(1).startswith(fence)):
            fence = m.group(1) if fence is None else None
            continue
        if fence is None:
            out.append((n, line))
    return out


def _named_commands(text: str) -> dict[str, str]:
    """`NAME = COMMAND` lines of the page's `<!-- figures:` blocks (an HTML block may hold `--`, an inline one not)."""
    named = {}
    for block in NAMED.finditer(text):
        for line in block.group(1).splitlines():
            name, sep, command = line.partition(" = ")
            if sep:
                named[name.strip()] = command.strip()
    return named


def _inline_figures() -> list[Inline]:
    found = []
    for page in PAGES:
        text = page.read_text()
        named = _named_commands(text)
        for n, line in _outside_fences(text):
            spans = _code_spans(line)
            start = 0
            for m in COMMENT.finditer(line):
                if any(a <= m.start() < b for a, b in spans):
                    continue
                body = m.group(1)
                command, sep, regex = body.rpartition(" ~ ")
                if not sep:
                    command, regex = body, ""
                if command.startswith("@"):
                    command = named.get(command[1:], command)
                found.append(Inline(_rel(page), n, line[start : m.start()], body, command, regex or None))
                start = m.end()
    return found


def _transcripts() -> list[Transcript]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in CONSOLE.finditer(text):
            first = text.count("\n", 0, block.start(1)) + 1
            command: str | None = None
            expected: list[str] = []
            line = first
            for i, raw in enumerate(block.group(1).splitlines()):
                if raw.startswith("$ "):
                    if command is not None:
                        found.append(Transcript(_rel(page), line, command, tuple(expected)))
                    command, expected, line = raw[2:], [], first + i
                elif command is not None:
                    expected.append(raw.rstrip())
            if command is not None:
                found.append(Transcript(_rel(page), line, command, tuple(expected)))
    return found


INLINE = _inline_figures()
TRANSCRIPTS = _transcripts()


@functools.cache
def _run(command: str) -> str:
    """What COMMAND prints (stdout and stderr) when run by Bash in the checkout with bin/ and the venv on PATH."""
    r = subprocess.run(
        ["bash", "-c", command],
        cwd=ROOT,
        env=agpt_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    return r.stdout


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


def _matches(expected: tuple[str, ...], actual: list[str]) -> bool:
    """Line-by-line equality, where an expected `...` matches any run of lines (zero or more)."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(_matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and actual[0] == expected[0] and _matches(expected[1:], actual[1:])


@pytest.mark.parametrize("fig", INLINE, ids=[f"{f.page}:{f.line}" for f in INLINE])
def test_inline_figure_comment_stays_hidden_on_github(fig: Inline) -> None:
    """The GFM spec (0.29-gfm) takes `<!--` ... `-->` inside a line as a comment only when it holds no `--`."""
    assert "--" not in fig.body and not fig.body.startswith((">", "->")), (
        f"{fig.page}:{fig.line}: this figure comment would be shown as text: name its command in a "
        f"`<!-- figures:` block (`NAME = COMMAND` lines) and write `@NAME`"
    )
    assert not fig.command.startswith("@"), (
        f"{fig.page}:{fig.line}: {fig.command} is not defined on this page"
    )


def test_the_pages_carry_figures_the_test_can_check() -> None:
    """A parser that silently found nothing would pass every page; these pages hold checked figures."""
    pages = {f.page for f in INLINE} | {t.page for t in TRANSCRIPTS}
    for page in ("README.md", "docs/recovery.md", "docs/goodput.md", "docs/sites.md", "docs/training.md"):
        assert page in pages, f"{page}: no checked figure found"
    assert len(INLINE) >= 30 and len(TRANSCRIPTS) >= 4


@pytest.mark.parametrize("fig", INLINE, ids=[f"{f.page}:{f.line}" for f in INLINE])
def test_inline_figure_matches_its_command(fig: Inline) -> None:
    out = _run(fig.command)
    if fig.regex is None:
        value = out.strip()
    else:
        m = re.search(fig.regex, out, flags=re.M)
        assert m, f"{fig.page}:{fig.line}: `{fig.command}` printed nothing matching {fig.regex!r}:\n{out}"
        value = m.group(1) if m.groups() else m.group(0)
    got = _decimal(value)
    if got is not None:
        numbers = NUMBER.findall(fig.before)
        assert numbers, f"{fig.page}:{fig.line}: no number before the figure comment: {fig.before!r}"
        shown = _decimal(numbers[-1])
        assert shown is not None
        assert got.quantize(shown, rounding=ROUND_HALF_UP) == shown, (
            f"{fig.page}:{fig.line}: the text says {numbers[-1]}, `{fig.command}` gives {value}"
        )
    else:
        text = fig.before.rstrip().rstrip("`*_)").rstrip()
        assert text.endswith(value), (
            f"{fig.page}:{fig.line}: the text says {text[-40:]!r}, `{fig.command}` gives {value!r}"
        )


@pytest.mark.parametrize("tr", TRANSCRIPTS, ids=[f"{t.page}:{t.line}" for t in TRANSCRIPTS])
def test_console_transcript_matches_its_command(tr: Transcript) -> None:
    actual = [line.rstrip() for line in _run(tr.command).splitlines()]
    expected = "\n".join(tr.expected)
    assert _matches(tr.expected, actual), (
        f"{tr.page}:{tr.line}: `{tr.command}` no longer prints what the page shows.\n"
        f"page:\n{expected}\ncommand:\n" + "\n".join(actual)
    )
