"""`agpt failover score CORPUS...`: how often the classifier names the right class and the right host, and what
the failover loop would do with each reading (agpt.failover.consequence: right action, recoverable, unresolved, a
healthy host evicted, a needless stop for a person).

A corpus is a folder of cases, `SITE/CASE.log` beside `SITE/CASE.json` (the format of tests/fixtures/logs/README.md:
`rc`, `hosts`, optional `ipmap`, `now`/`deadline`, and `expect`).  A case counts as right when the class is the
expected one, `bad_hosts` is exactly the expected list, and, where the case says so, the first suspect is the
expected host and a named innocent is not suspected: what the failover loop acts on.

Why a command: a score is only worth something on logs the patterns were not written from.  The project keeps two
kinds of corpora (tests/fixtures/logs_heldout/SOURCES.md says which is which): the in-sample ones the patterns were
tuned on, and a held-out one nobody may write a pattern from.  A site can score its own collected logs the same way.

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from agpt import rundir
from agpt.errors import BadInput
from agpt.failover import classify as cl
from agpt.failover import consequence as cq
from agpt.failover import patterns as pat
from agpt.failover import policy
from agpt.failover.hostmatch import read_hostfile, read_ipmap


@dataclass(kw_only=True, slots=True)
class Outcome:
    """One case: what was expected, what the classifier said, what differs, and what the loop would do with it."""

    case: str
    want: dict[str, Any]
    got: dict[str, Any]
    wrong: list[str] = field(default_factory=list)
    consequence: cq.Replay | None = None

    @property
    def right(self) -> bool:
        return not self.wrong


def cases(corpus: Path) -> list[Path]:
    """The `.json` case files of a corpus folder (with their `.log` beside them), in a stable order."""
    if not corpus.is_dir():
        raise BadInput(f"failover score: not a folder: {corpus}")
    found = sorted(p for p in corpus.glob("*/*.json") if p.with_suffix(".log").is_file())
    if not found:
        raise BadInput(f"failover score: {corpus}: no SITE/CASE.json with its SITE/CASE.log")
    return found


def _load(path: Path) -> dict[str, Any]:
    try:
        doc = rundir.read_record(path, limit=rundir.TEXT_MAX)
    except OSError as e:
        raise BadInput(f"failover score: {path}: not a case file ({e.strerror or e})") from None
    except ValueError as e:
        raise BadInput(f"failover score: {path}: not a case file ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("expect"), dict) or "rc" not in doc:
        raise BadInput(f"failover score: {path}: a case needs `rc`, `hosts` and `expect`")
    _check_case(doc, f"failover score: {path}")
    return doc


def _strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _number(v: Any) -> bool:
    return v is None or (not isinstance(v, bool) and isinstance(v, (int, float)) and abs(v) < 1e18)


# A case's schema: field -> (its check, what it must be).  Anything else is one line naming the file and field.
CASE_FIELDS: dict[str, tuple[Any, str]] = {
    "rc": (lambda v: type(v) is int or isinstance(v, str), "an exit status"),
    "hosts": (_strings, "a list of host names"),
    "hostfile_text": (lambda v: isinstance(v, str), "a string"),
    "ipmap": (_strings, "a list of `IP HOST` lines"),
    "deadline": (_number, "an epoch time or null"),
    "now": (_number, "an epoch time or null"),
}
EXPECT_FIELDS: dict[str, tuple[Any, str]] = {
    "class": (lambda v: isinstance(v, str), "a class name"),
    "bad_hosts": (_strings, "a list of host names"),
    "suspect_first": (lambda v: isinstance(v, str), "a host name"),
    "not_suspect": (lambda v: isinstance(v, str), "a host name"),
}


def _check_case(doc: dict[str, Any], where: str) -> None:
    for fields, rec, prefix in ((CASE_FIELDS, doc, ""), (EXPECT_FIELDS, doc["expect"], "expect.")):
        for key, (ok, what) in fields.items():
            if key in rec and not ok(rec[key]):
                raise BadInput(f"{where}: {prefix}{key}: must be {what}, got {json.dumps(rec[key])[:40]}")
    try:
        cl.parse_rc(str(doc["rc"]))
    except BadInput as e:
        raise BadInput(f"{where}: rc: {str(e).removeprefix('--rc: ')}") from None


def judge(want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """What the classification got wrong against the expectation (empty: right)."""
    wrong = []
    if got.get("class") != want.get("class"):
        wrong.append(f"class {got.get('class')} (want {want.get('class')})")
    if list(got.get("bad_hosts") or []) != list(want.get("bad_hosts") or []):
        wrong.append(f"bad_hosts {got.get('bad_hosts')} (want {want.get('bad_hosts')})")
    suspects = list(got.get("suspect_hosts") or [])
    if "suspect_first" in want and suspects[:1] != [want["suspect_first"]]:
        wrong.append(f"first suspect {suspects[:1] or None} (want {want['suspect_first']})")
    if "not_suspect" in want and want["not_suspect"] in suspects:
        wrong.append(f"suspects the innocent {want['not_suspect']}")
    return wrong


def score_case(path: Path, sets: list[str] | None = None) -> Outcome:
    """Classify one case in-process, as `agpt failover classify` would with the case's hostfile and clock."""
    doc = _load(path)
    with tempfile.TemporaryDirectory(prefix="agpt-score.") as tmp:
        hostfile = Path(tmp) / "hosts"
        hostfile.write_text(doc.get("hostfile_text") or "\n".join(doc.get("hosts") or []) + "\n")
        ipmap: list[tuple[str, str]] = []
        if doc.get("ipmap"):
            (Path(tmp) / "ip").write_text("\n".join(doc["ipmap"]) + "\n")
            ipmap = read_ipmap(str(Path(tmp) / "ip"))
        hosts = list(read_hostfile(str(hostfile)))
        result = cl.classify(
            path.with_suffix(".log"),
            cl.parse_rc(str(doc["rc"])),
            hosts,
            ipmap,
            doc.get("deadline"),
            doc.get("now"),
            sets,
        )
    got = result.to_json()
    want = doc["expect"]
    wrong = judge(want, got)
    line = policy.failing_line([str(e) for e in got.get("evidence") or []])
    then = cq.replay(want, got, hosts, label_right=not wrong, line=line)
    return Outcome(case=f"{path.parent.name}/{path.stem}", want=want, got=got, wrong=wrong, consequence=then)


def score(corpora: Sequence[Path], sets: list[str] | None = None) -> list[Outcome]:
    return [score_case(p, sets) for c in corpora for p in cases(c)]


def summary(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The figures: cases right of all and per expected class; and what the loop would do, per consequence
    (agpt.failover.consequence.CONSEQUENCES), of all and per expected class."""
    by: dict[str, list[int]] = {}
    then: dict[str, dict[str, int]] = {}
    for o in outcomes:
        cls = str(o.want.get("class"))
        row = by.setdefault(cls, [0, 0])
        row[0] += o.right
        row[1] += 1
        kinds = then.setdefault(cls, dict.fromkeys(cq.CONSEQUENCES, 0))
        if o.consequence is not None:
            kinds[o.consequence.kind] += 1
    right = sum(o.right for o in outcomes)
    total = {k: sum(v[k] for v in then.values()) for k in cq.CONSEQUENCES}
    return {
        "right": right,
        "cases": len(outcomes),
        "share": round(right / len(outcomes), 3) if outcomes else None,
        "consequences": total,
        "by_class": {
            k: {"right": v[0], "cases": v[1], "consequences": then[k]} for k, v in sorted(by.items())
        },
    }


CONSEQUENCE_WORDS = {
    "right": "right action",
    "recoverable": "recoverable",
    "unresolved": "unresolved",
    "evicted": "healthy host evicted",
    "stopped": "needless stop for a person",
}


def render(outcomes: Sequence[Outcome], corpora: Sequence[Path]) -> str:
    lines = []
    for o in outcomes:
        then = o.consequence
        tail = f" -> {then.kind}: {then.detail}" if then is not None and then.kind != "right" else ""
        if o.right:
            lines.append(
                f"right  {o.case}: {o.got.get('class')} {o.got.get('bad_hosts') or ''}".rstrip() + tail
            )
        else:
            lines.append(f"WRONG  {o.case}: " + "; ".join(o.wrong) + tail)
    s = summary(outcomes)
    per = ", ".join(f"{k} {v['right']}/{v['cases']}" for k, v in s["by_class"].items())
    names = " ".join(str(c) for c in corpora)
    lines.append(
        f"score: {s['right']}/{s['cases']} right ({100 * (s['share'] or 0):.0f}%) on {names}; by class: {per}"
    )
    lines.append(
        "consequences: " + ", ".join(f"{CONSEQUENCE_WORDS[k]} {n}" for k, n in s["consequences"].items())
    )
    return "\n".join(lines) + "\n"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadInput(f"failover score: {message}")


def main(argv: list[str] | None = None) -> int:
    p = _Parser(
        prog="agpt failover score",
        description="Classify every case of one or more corpora (SITE/CASE.log + SITE/CASE.json) and print how many "
        "got the right class and the right host (bad_hosts, and the first suspect where the case names one), then "
        "what the failover loop's own decisions would do with each reading (replayed: a node fault recurs while its "
        "host is active, an application fault recurs anywhere, other faults do not): right action, recoverable "
        "(a sweep or a relaunch), unresolved, a healthy host evicted, a needless stop for a person.",
    )
    p.add_argument("corpus", nargs="+", metavar="CORPUS", help="a folder of SITE/CASE.{log,json} cases")
    p.add_argument("--patterns", help="pattern sets, comma separated (default: every set)")
    p.add_argument("--json", action="store_true", help="print the outcomes and the summary as JSON")
    try:
        args = p.parse_args(argv)
        corpora = [Path(c) for c in args.corpus]
        sets = pat.select_sets(args.patterns)
        outcomes = score(corpora, sets)
    except BadInput as e:
        sys.stderr.write(f"agpt: error: {e}\n")
        return 2
    if args.json:
        doc = {
            "summary": summary(outcomes),
            "cases": [
                {
                    "case": o.case,
                    "right": o.right,
                    "wrong": o.wrong,
                    "consequence": o.consequence.kind if o.consequence else None,
                    "detail": o.consequence.detail if o.consequence else None,
                }
                for o in outcomes
            ],
        }
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        sys.stdout.write(render(outcomes, corpora))
    return 0


if __name__ == "__main__":
    sys.exit(main())
