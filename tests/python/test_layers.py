"""The house's layers: imports point down and never close a circle, and the recovery path needs only the
standard library.

The import graph is read from the source (every `import`, those inside functions and under TYPE_CHECKING
included, and the module names handed to importlib.import_module), so an arrow a reader does not see at the top
of a file still counts.  Each module belongs to one layer of LAYERS; an arrow may stay in its layer or point to a
lower one.  The recovery path (the watchdog, the failover decisions, the chain, the heartbeats and everything they
import) is imported by an interpreter isolated from the venv, as a job runs it when the training environment is
what broke.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from conftest import ROOT

PKG = ROOT / "python" / "agpt"

# Top to bottom: a module may import from its own layer or any layer below it, never from one above.
# A module belongs to the layer of the longest name here that is it or a package holding it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("entry points", ("agpt.__main__", "agpt.failover.__main__", "agpt.watch.__main__", "agpt.warm.__main__")),
    ("commands", ("agpt.cli", "agpt.watch.cli",
              "agpt.warm.parked")),  # a parked rank imports the train command and runs it when claimed
    ("tools over the trainer", ("agpt.sim", "agpt.check", "agpt.preflight", "agpt.probe", "agpt.runplot",
                                "agpt.ckpt", "agpt.views", "agpt.evalexport",
                                "agpt.warm")),  # warm ranks: the agent and the claim
    ("trainer", ("agpt.train",)),
    ("job chain and sites", ("agpt.chain", "agpt.site",
                             "agpt.ckptplan")),  # the checkpoint plan a job's start makes
    ("subsystems", ("agpt.failover", "agpt.watch", "agpt.yeet", "agpt.data", "agpt.observe", "agpt.evals")),
    ("heartbeats", ("agpt.heartbeat",)),
    ("run directory and shared formats", ("agpt.rundir", "agpt.ckptdir", "agpt.digest", "agpt.ours", "agpt.goodput",
                                          "agpt.textfile",  # reads through rundir's one reader
                                          "agpt.hostlist", "agpt.jobconf", "agpt.yamlio", "agpt.progress",
                                          "agpt.nodelocal", "agpt.localtier",
                                          "agpt.evals.records", "agpt.evals.alarm", "agpt.evals.due")),
    ("base", ("agpt.errors", "agpt.numeric", "agpt.shellword", "agpt.proc", "agpt.safewrite", "agpt.shown",
              "agpt.figure", "agpt")),
]  # fmt: skip

# The recovery path: these, and every module they import (standard library only, docs/contract.md).
RECOVERY_ROOTS = (
    "agpt.watch",
    "agpt.failover",
    "agpt.chain",
    "agpt.heartbeat",
    "agpt.rundir",
    "agpt.errors",
    "agpt.goodput",
    "agpt.hostlist",
    "agpt.observe.prom",  # lib/failover.sh rewrites metrics.prom after every attempt
)

# Arrows that point up today and are being moved (each names where its target goes); none may be added.
PENDING: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The package's module that `import name` loads last (a name inside a module is that module)."""
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


@cache
def graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: line of the first such import}, for every module of the package."""
    mods = modules()
    out: dict[str, dict[str, int]] = {}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        dynamic = any(
            (isinstance(n, ast.Attribute) and n.attr == "import_module")
            or (isinstance(n, ast.Name) and n.id == "import_module")
            for n in ast.walk(tree)
        )
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" for a in node.names]
            elif dynamic and isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value.removeprefix("stdlib:")
                targets = [name] if name in mods else []  # a module named to importlib.import_module
            for t in targets:
                r = _resolve(t) if t.startswith("agpt") else None
                if r is not None and r != mod:
                    edges.setdefault(r, getattr(node, "lineno", 0))
        out[mod] = edges
    return out  # fmt: skip


def layer_of(mod: str) -> int:
    best: tuple[int, int] | None = None  # (name length, layer)
    for i, (_, names) in enumerate(LAYERS):
        for n in names:
            inside = mod == n or (n != "agpt" and mod.startswith(n + "."))
            if inside and (best is None or len(n) > best[0]):
                best = (len(n), i)
    if best is None:
        raise AssertionError(f"{mod}: in no layer of tests/python/test_layers.py LAYERS: add it to one")
    return best[1]


def test_every_module_is_in_a_layer() -> None:
    for mod in modules():
        layer_of(mod)


def test_imports_point_down() -> None:
    up = []
    for mod, edges in graph().items():
        for target, line in edges.items():
            if layer_of(target) < layer_of(mod) and (mod, target) not in PENDING:
                up.append(
                    f"{modules()[mod].relative_to(ROOT)}:{line}: {mod} ({LAYERS[layer_of(mod)][0]}) imports "
                    f"{target} ({LAYERS[layer_of(target)][0]}), a layer above it"
                )
    assert not up, "\n".join(up)
    gone = [f"{a} -> {b}" for a, b in PENDING if b not in graph().get(a, {})]
    assert not gone, f"no longer imported, delete from PENDING: {gone}"


def _circles(g: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in g.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    sys.setrecursionlimit(10_000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return circles


def test_no_circles() -> None:
    g = graph()
    circles = _circles(g)
    described = [
        " ; ".join(f"{a} -> {b} (line {g[a][b]})" for a in c for b in c if b in g[a]) for c in circles
    ]
    assert not circles, "\n".join(described)


def test_no_circles_between_the_packages() -> None:
    """A reader sees `agpt.train`, `agpt.failover`, ... as one room each: two of them that import each other
    (through different modules) are a circle to that reader even when every module's own layer is right.  A
    package whose modules sit on both sides of another package is two packages."""
    top = lambda m: ".".join(m.split(".")[:2])  # noqa: E731
    rooms: dict[str, dict[str, str]] = {}
    for mod, edges in graph().items():
        for target in edges:
            if top(target) != top(mod) and top(target) != "agpt":
                rooms.setdefault(top(mod), {}).setdefault(top(target), f"{mod} -> {target}")
    circles = _circles({a: dict.fromkeys(b, 0) for a, b in rooms.items()})
    described = [" ; ".join(rooms[a][b] for a in c for b in c if b in rooms.get(a, {})) for c in circles]
    assert not circles, "\n".join(described)


def recovery_path() -> list[str]:
    """The roots, everything they import (at any depth, inside functions too) and the packages holding them."""
    g = graph()
    todo = [m for m in modules() if any(m == r or m.startswith(r + ".") for r in RECOVERY_ROOTS)]
    seen: set[str] = set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(g[m])
        todo.extend(".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1))
    return sorted(seen)


def test_the_recovery_path_imports_only_the_standard_library_in_its_source() -> None:
    outside = []
    for mod in recovery_path():
        path = modules()[mod]
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            for name in names:
                top = name.split(".")[0]
                if top and top != "agpt" and top not in sys.stdlib_module_names:
                    outside.append(f"{path.relative_to(ROOT)}:{node.lineno}: {mod} imports {name}")
    assert not outside, "\n".join(outside)


BASE_PYTHON = Path(sys.base_prefix) / "bin" / "python3"
ISOLATED = [str(BASE_PYTHON), "-I", "-S"]  # no venv, no site-packages, no user site, no PYTHONPATH
CHECK = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
std = set(sys.stdlib_module_names) | {"agpt"}
out = {}
for mod in sys.argv[2:]:
    before = set(sys.modules)
    try:
        importlib.import_module(mod)
        err = None
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    new = sorted({m.split(".")[0] for m in set(sys.modules) - before} - std)
    if err or new:
        out[mod] = {"error": err, "outside": new}
print(json.dumps(out))
"""


def test_the_recovery_path_imports_in_an_interpreter_without_the_venv() -> None:
    mods = [m for m in recovery_path() if not m.endswith(".__main__")]  # those run: the next test
    assert (
        "agpt.failover.classify" in mods and "agpt.watch.attempt" in mods and "agpt.heartbeat.reader" in mods
    )
    r = subprocess.run(
        [*ISOLATED, "-c", CHECK, str(ROOT / "python"), *mods],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    bad = json.loads(r.stdout)
    assert not bad, "\n".join(
        f"{m}: " + (v["error"] or f"imports {', '.join(v['outside'])} (not the standard library)")
        for m, v in bad.items()
    )


# `python -m MODULE ARGS` with only python/ on sys.path (-I leaves out the working directory too)
RUN_MODULE = (
    "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"
)


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "agpt.watch", "--timeout", "5", "--", "true"],
        ["-m", "agpt.failover", "classify", "--rc", "1", "--hostfile", "{hosts}", "{log}"],
        ["-m", "agpt.failover", "plan", "--run-dir", "{run}", "--before"],
        ["-m", "agpt.chain", "--help"],
    ],
    ids=["watch", "failover-classify", "failover-plan", "chain"],
)
def test_the_recovery_commands_run_without_the_venv(argv: list[str], tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("n1\nn2\n")
    (tmp_path / "log").write_text("step=2\nsrun: error: Node failure on n1\n")
    (tmp_path / "run" / "hosts").mkdir(parents=True)
    (tmp_path / "run" / "hosts" / "active").write_text("n1\nn2\n")
    args = [a.format(hosts=tmp_path / "hosts", log=tmp_path / "log", run=tmp_path / "run") for a in argv]
    r = subprocess.run(
        [*ISOLATED, "-c", RUN_MODULE, str(ROOT / "python"), *args[1:]],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    if argv[2] == "classify":
        assert json.loads(r.stdout)["bad_hosts"] == ["n1"]


def test_the_installed_entry_point_runs_every_standard_library_command() -> None:
    # `pip install` gives `agpt = agpt.cli:main`, which runs the recovery tools without bin/agpt's Bash
    # dispatch: `agpt failover ...` through it once failed (AttributeError: the package has no main).
    from agpt import cli

    stdlib = sorted(n for n, (m, _) in cli.COMMANDS.items() if m.startswith("stdlib:"))
    assert {"chain", "failover", "preflight", "watch"} <= set(stdlib)
    for argv in [[n, "--help"] for n in stdlib] + [["failover", "classify", "--help"]]:
        r = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from agpt.cli import main; sys.argv[0] = 'agpt'; main()",
                *argv,
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "python")},
            timeout=60,
        )
        assert r.returncode == 0 and "usage" in r.stdout.lower(), (argv, r.stdout[-500:], r.stderr[-1500:])
