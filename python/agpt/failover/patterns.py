"""Failure patterns are data: one JSON file per set, loaded and checked here.

Why data: a site that meets a new failure message adds a pattern (with a line that must match and one that must
not) and a test proves it; no code changes, and no machine's knowledge leaks into the loop.

A set file `NAME.json` holds `{"set": NAME, "description": ..., "patterns": [PATTERN, ...]}`; a pattern is
    id           unique, `SET.name`
    class        node | crash | system | app | hang-hint | preempt | cascade-ignore | info
                 node: this host is faulty (swap it); crash: something died, no proof of which host;
                 system: a site-wide fault no swap fixes; app: a bug every rank hits; hang-hint: a collective
                 timed out; preempt: the scheduler took the allocation back (preemption, requeue): stop and
                 resubmit; cascade-ignore: an innocent rank killed after the first death (never evidence);
                 info: not a failure, only feeds the rank->host map
    source       the URL of a public upstream source file, user guide or issue thread where the message is
                 printed (`agpt failover patterns` lists them and counts the patterns without one)
    regex        Python `re` syntax, searched in the message after launcher labels (`nid001: `, `3: `,
                 `[1,3]<stderr>:`, `[rank3]:`, NCCL's `host:pid:tid [dev] `) are taken off, so `^` anchors at the
                 message; named groups `host` (a host name, address or Slurm hostlist: the culprit) and `rank`
    flags        optional, "i" for case-insensitive
    blame        optional, "reporter" (default for node patterns without a host or rank group: the host that
                 printed the line is the faulty one) or "none"
    weak         optional bool: a launcher's exit notice, evidence only when nothing better explains the failure
    min_reporters optional int (app): distinct ranks/hosts that must print it before it is an app error
    rank_hosts   optional bool: the match's rank lives on its host (feeds the rank->host map)
    peer         optional bool: the host group is the far end of a failed connection (an address, usually) and the
                 host that printed the line is only its reporter: many reporters naming one peer point at the peer
    guess        optional bool (cascade-ignore, default true): the first such line may name the first guess of a
                 blind swap when nothing else names anyone; false for daemons that only report the teardown
    death        optional bool (cascade-ignore): a launcher's notice that a task died of a signal: innocent when
                 it follows another task's end (the launcher's teardown), the first failure when it comes before
                 every exit notice (the other tasks then exit on the lost peer: a crash, not an app error)
    table        optional "host" | "rank" | "root-cause": a row of a multi-line failure table (torchrun's
                 ChildFailedError): a `rank` row maps to the `host` row just above it; the `host` row after a
                 `root-cause` header is the first failure (a launcher's exit notice for that host)
    fallback     optional bool: counts only when no other pattern matches the line (a generic Python exception
                 line loses to the NCCL, CUDA or I/O pattern that explains it)
    ends         optional bool: the launcher reports a node failure or a task's death: the ranks left cannot make
                 progress, so the watch ends the attempt at once (`agpt failover patterns --ends`, `agpt watch
                 --kill-on`); matched on the raw output line, labels included, so never anchored with `^`
    needles      optional lowercase substrings one of which every matching line holds (derived from the regex
                 when absent; they let a gigabyte log be scanned without running every regex on every line)
    description  why this line means what the class says
    positive     example lines that must match: strings, or {"line", "host", "rank"} with the expected captures
    negative     example lines that must not match
Extra set directories come first from FAILOVER_PATTERN_PATH (colon-separated): a site file overrides a built-in
set of the same name.  Standard library only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agpt import rundir
from agpt.errors import BadInput
from agpt.failover.hostmatch import HostMatcher
from agpt.failover.labels import split_labels

BUILTIN_DIR = Path(__file__).resolve().parent / "patterns"
PATTERN_CLASSES = ("node", "crash", "system", "app", "hang-hint", "preempt", "cascade-ignore", "info")
DEFAULT_SETS = (
    "pals",
    "hydra",
    "openmpi",
    "srun",
    "cuda",
    "level_zero",
    "rocm",
    "gloo",
    "system",
    "torch",
    "oneccl",
    "app",
    "cascade",
)


class PatternError(Exception):
    """A pattern file is broken: the classifier degrades to "no evidence" and says so."""


@dataclass(kw_only=True, slots=True)
class Example:
    line: str
    host: str | None = None
    rank: int | None = None


@dataclass(kw_only=True, slots=True)
class Pattern:
    id: str
    set_name: str
    cls: str
    source: str
    regex: re.Pattern[str]
    url: str = (
        ""  # where the message is printed: an upstream source file, a user guide, an issue with a real log
    )
    description: str = ""
    blame: str = "none"
    weak: bool = False
    min_reporters: int = 1
    rank_hosts: bool = False
    fallback: bool = False
    peer: bool = False
    table: str = ""
    guess: bool = True
    death: bool = False
    task: bool = False  # the rank group is the launcher's task id (srun's `task N`), not a trainer's rank
    ends: bool = False  # the launcher says a node failed or a task died: the watch ends the attempt at once
    needles: tuple[str, ...] | None = None
    positive: list[Example] = field(default_factory=list)
    negative: list[str] = field(default_factory=list)

    @property
    def groups(self) -> set[str]:
        return set(self.regex.groupindex)


def search_path() -> list[Path]:
    """Directories searched for `NAME.json`, site ones (FAILOVER_PATTERN_PATH) before the built-in one."""
    extra = [Path(p) for p in os.environ.get("FAILOVER_PATTERN_PATH", "").split(":") if p.strip()]
    return [*extra, BUILTIN_DIR]


def available_sets() -> list[str]:
    """Every set name found on the search path, built-in order first."""
    names = list(DEFAULT_SETS)
    for d in search_path():
        if d.is_dir():
            for f in sorted(d.glob("*.json")):
                if f.stem not in names:
                    names.append(f.stem)
    return names


def select_sets(spec: str | None, *, source: str = "--patterns") -> list[str]:
    """Set names from a `a,b` / `a b` spec (None: FAILOVER_PATTERN_SETS, else all); unknown names are bad input."""
    where = source
    if spec is None:
        spec = os.environ.get("FAILOVER_PATTERN_SETS", "")
        where = "FAILOVER_PATTERN_SETS"
    words = [w.strip().replace("-", "_").lower() for w in re.split(r"[\s,]+", spec) if w.strip()]
    if not words or words == ["all"]:
        return available_sets()
    known = available_sets()
    out: list[str] = []
    for w in words:
        if w == "all":
            out.extend(n for n in known if n not in out)
        elif w not in known:
            raise BadInput(f"{where}: unknown pattern set '{w}' (known: {', '.join(known)})")
        elif w not in out:
            out.append(w)
    return out


def load(names: Iterable[str]) -> list[Pattern]:
    """The patterns of the named sets, in set order then file order.  Raises PatternError on a broken file."""
    patterns: list[Pattern] = []
    ids: set[str] = set()
    for name in names:
        path = _find(name)
        for p in load_file(path, name):
            if p.id in ids:
                raise PatternError(f"{path}: duplicate pattern id '{p.id}'")
            ids.add(p.id)
            patterns.append(p)
    return patterns


def _find(name: str) -> Path:
    for d in search_path():
        f = d / f"{name}.json"
        if f.is_file():
            return f
    raise PatternError(f"pattern set '{name}' not found in {':'.join(map(str, search_path()))}")


def load_file(path: Path, name: str) -> list[Pattern]:
    """Parse and check one set file."""
    try:
        doc = rundir.read_record(path, limit=rundir.TEXT_MAX)
    except OSError as e:
        raise PatternError(f"{path}: cannot read ({e.strerror or e})") from None
    except ValueError as e:
        raise PatternError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("patterns"), list):
        raise PatternError(f"{path}: expected an object with a 'patterns' list")
    return [_pattern(path, name, i, raw) for i, raw in enumerate(doc["patterns"])]


BOOL_FIELDS = ("weak", "rank_hosts", "fallback", "peer", "guess", "death", "task", "ends")


def _pattern(path: Path, set_name: str, i: int, raw: Any) -> Pattern:
    where = f"{path}: patterns[{i}]"
    if not isinstance(raw, dict):
        raise PatternError(f"{where}: not an object")
    pid = raw.get("id")
    cls = raw.get("class")
    src = raw.get("regex")
    if not isinstance(pid, str) or not pid:
        raise PatternError(f"{where}: missing 'id'")
    where = f"{path}: {pid}"
    if cls not in PATTERN_CLASSES:
        raise PatternError(f"{where}: class '{cls}' is not one of {', '.join(PATTERN_CLASSES)}")
    if not isinstance(src, str) or not src:
        raise PatternError(f"{where}: missing 'regex'")
    if re.search(r"\(\?P=|\\[1-9]", src):
        raise PatternError(f"{where}: back-references are not allowed")
    flags = re.IGNORECASE if "i" in str(raw.get("flags", "")) else 0
    try:
        rx = re.compile(src, flags)
    except re.error as e:
        raise PatternError(f"{where}: bad regex: {e}") from None
    if nested_quantifier(src, flags):
        raise PatternError(
            f"{where}: regex {src!r}: a repeat inside a repeat, such as (a+)+, can backtrack for ever on one line "
            "(write the inner part so that each repetition ends in a character it cannot match, as (\\w+\\.)*)"
        )
    unknown = set(rx.groupindex) - {"host", "rank", "code", "signal"}
    if unknown:
        raise PatternError(
            f"{where}: unknown named group(s) {sorted(unknown)} (use host, rank, code, signal)"
        )
    blame = raw.get("blame")
    if blame is None:
        blame = "reporter" if cls == "node" and not ({"host", "rank"} & set(rx.groupindex)) else "none"
    if blame not in ("reporter", "none"):
        raise PatternError(f"{where}: blame must be 'reporter' or 'none'")
    url = raw.get("source", "")
    if not isinstance(url, str):
        raise PatternError(f"{where}: source must be a string (the URL where the message is printed)")
    table = str(raw.get("table", ""))
    if table not in ("", "host", "rank", "root-cause"):
        raise PatternError(f"{where}: table must be 'host', 'rank' or 'root-cause'")
    if raw.get("peer") and "host" not in rx.groupindex:
        raise PatternError(f"{where}: a peer pattern needs a host group (the peer it names)")
    needles_raw = raw.get("needles")
    if needles_raw is not None:
        if not isinstance(needles_raw, list) or not all(isinstance(n, str) and n for n in needles_raw):
            raise PatternError(f"{where}: needles must be a list of strings")
        needles: tuple[str, ...] | None = tuple(n.lower() for n in needles_raw)
    else:
        needles = derive_needles(src, flags)
    positive: list[Example] = []
    for ex in raw.get("positive", []):
        if isinstance(ex, str):
            positive.append(Example(line=ex))
        elif isinstance(ex, dict) and isinstance(ex.get("line"), str):
            rank, host = ex.get("rank"), ex.get("host")
            if rank is not None and (type(rank) is not int or not 0 <= rank < 2**31):
                raise PatternError(f"{where}: positive example rank must be a whole number, got {rank!r:.40}")
            if host is not None and not isinstance(host, str):
                raise PatternError(f"{where}: positive example host must be a string, got {host!r:.40}")
            positive.append(Example(line=ex["line"], host=host, rank=rank))
        else:
            raise PatternError(f"{where}: bad positive example {ex!r}")
    negative = raw.get("negative", [])
    if not isinstance(negative, list) or not all(isinstance(n, str) for n in negative):
        raise PatternError(f"{where}: negative must be a list of strings")
    for key in BOOL_FIELDS:
        if not isinstance(raw.get(key, False), bool):
            raise PatternError(f"{where}: {key} must be true or false, got {raw[key]!r:.40}")
    min_reporters = raw.get("min_reporters", 1)
    if type(min_reporters) is not int or not 1 <= min_reporters <= 10**6:
        raise PatternError(f"{where}: min_reporters must be a whole number from 1, got {min_reporters!r:.40}")
    return Pattern(
        id=pid,
        set_name=set_name,
        cls=cls,
        source=src,
        regex=rx,
        url=url,
        description=str(raw.get("description", "")),
        blame=blame,
        weak=bool(raw.get("weak", False)),
        min_reporters=min_reporters,
        rank_hosts=bool(raw.get("rank_hosts", False)),
        fallback=bool(raw.get("fallback", False)),
        peer=bool(raw.get("peer", False)),
        guess=bool(raw.get("guess", True)),
        death=bool(raw.get("death", False)),
        task=bool(raw.get("task", False)),
        ends=bool(raw.get("ends", False)),
        table=table,
        needles=needles,
        positive=positive,
        negative=list(negative),
    )


# --- bounded matching: no pattern that backtracks without end ------------------------------------------------
def nested_quantifier(src: str, flags: int = 0) -> bool:
    """Whether regex SRC repeats a part that itself holds a repeat, where the repetitions are not separated:
    (a+)+, (a*)*, (\\w+\\s?)*, (x+x+)+ backtrack exponentially on a line that almost matches (one short log line
    stops the classifier, and the plan with it).  A part that ends in a literal character none of its inner
    repeats can match, as (\\w+\\.)*, splits the line one way only and is allowed."""
    import re._parser as sre  # type: ignore[import-not-found,unused-ignore]

    try:
        items = list(sre.parse(src, flags))
    except re.error:
        return False
    return _nested(sre, items)


def _repeat_ops(sre: Any) -> tuple[Any, ...]:
    return tuple(x for x in (sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", None)) if x)


def _children(sre: Any, op: Any, av: Any) -> list[list[Any]]:
    if op in _repeat_ops(sre):
        return [list(av[2])]
    if op is sre.SUBPATTERN:
        return [list(av[-1])]
    if op is sre.BRANCH:
        return [list(b) for b in av[1]]
    if op in (sre.ASSERT, sre.ASSERT_NOT):
        return [list(av[1])]
    return []


def _inner_repeats(sre: Any, items: list[Any]) -> list[Any]:
    """Every repeat of more than one in ITEMS, at any depth."""
    out: list[Any] = []
    for op, av in items:
        if op in _repeat_ops(sre) and av[1] > 1:
            out.append(av)
        for child in _children(sre, op, av):
            out += _inner_repeats(sre, child)
    return out


def _may_match(sre: Any, items: list[Any], ch: str) -> bool:
    """Whether any single-character item in ITEMS may match CH (anything else: yes, to be safe)."""
    for op, av in items:
        if op is sre.LITERAL:
            if chr(av).lower() == ch.lower():
                return True
        elif op is sre.NOT_LITERAL or op is sre.ANY:
            return True
        elif op is sre.IN:
            if any(o is sre.NEGATE for o, _ in av):
                return True
            for o, a in av:
                if o is sre.LITERAL and chr(a).lower() == ch.lower():
                    return True
                if o is sre.RANGE and a[0] <= ord(ch) <= a[1]:
                    return True
                if o is sre.CATEGORY and _category_matches(sre, a, ch):
                    return True
        elif op in _repeat_ops(sre):
            if _may_match(sre, list(av[2]), ch):
                return True
        elif op is sre.SUBPATTERN:
            if _may_match(sre, list(av[-1]), ch):
                return True
        else:
            return True
    return False


def _category_matches(sre: Any, cat: Any, ch: str) -> bool:
    names = {sre.CATEGORY_DIGIT: r"\d", sre.CATEGORY_NOT_DIGIT: r"\D", sre.CATEGORY_SPACE: r"\s",
             sre.CATEGORY_NOT_SPACE: r"\S", sre.CATEGORY_WORD: r"\w", sre.CATEGORY_NOT_WORD: r"\W"}  # fmt: skip
    return cat not in names or re.fullmatch(names[cat], ch) is not None


def _nested(sre: Any, items: list[Any]) -> bool:
    for op, av in items:
        if op in _repeat_ops(sre) and av[1] > 1:
            body = list(av[2])
            while len(body) == 1 and body[0][0] is sre.SUBPATTERN:
                body = list(body[0][1][-1])
            inner = _inner_repeats(sre, body)
            if inner:
                last_op, last_av = body[-1] if body else (None, 0)
                separated = last_op is sre.LITERAL and not any(
                    _may_match(sre, list(r[2]), chr(int(last_av))) for r in inner
                )
                if not separated:
                    return True
        if any(_nested(sre, child) for child in _children(sre, op, av)):
            return True
    return False


# --- needles: literal substrings a match must contain -------------------------------------------------------
MIN_NEEDLE = 3


def derive_needles(src: str, flags: int = 0) -> tuple[str, ...] | None:
    """Lowercase literals one of which any match must contain, or None when the regex has no usable literal.

    Read from the parsed regex (a required run of literal characters, or one per branch of an alternation),
    choosing the candidate whose shortest needle is longest.  A prefilter only: it may let a line through that
    the regex then rejects, never the other way round.
    """
    try:
        try:
            import re._parser as sre_parse  # type: ignore[import-not-found,unused-ignore]
        except ImportError:  # Python < 3.11
            import sre_parse  # type: ignore[import-not-found,no-redef,unused-ignore]
        parsed = sre_parse.parse(src, flags)
        found = _seq_needles(sre_parse, list(parsed))
    except Exception:
        return None
    return tuple(sorted(set(found))) if found else None


def _seq_needles(sp: Any, items: list[Any]) -> list[str] | None:
    candidates: list[list[str]] = []
    run: list[str] = []

    def flush() -> None:
        if len(run) >= MIN_NEEDLE:
            candidates.append(["".join(run).lower()])
        run.clear()

    repeats = {sp.MAX_REPEAT, sp.MIN_REPEAT, getattr(sp, "POSSESSIVE_REPEAT", sp.MAX_REPEAT)}
    for op, av in items:
        if op is sp.LITERAL and av < 128:
            run.append(chr(av))
            continue
        flush()
        sub: list[str] | None = None
        if op is sp.SUBPATTERN:
            sub = _seq_needles(sp, list(av[-1]))
        elif op is sp.BRANCH:
            alts = [_seq_needles(sp, list(a)) for a in av[1]]
            if all(alts):
                sub = [n for a in alts if a for n in a]
        elif op in repeats and av[0] >= 1:
            sub = _seq_needles(sp, list(av[2]))
        if sub:
            candidates.append(sub)
    flush()
    if not candidates:
        return None
    return max(candidates, key=lambda c: (min(len(n) for n in c), -len(c)))


# --- checking a set's examples (a site's own patterns included) ----------------------------------------------
def check(patterns: Iterable[Pattern]) -> list[str]:
    """Problems with patterns' examples: a positive that does not match (or captures the wrong host/rank), a
    negative that does, a missing example, needles that would let a matching line slip past the prefilter."""

    def body(line: str) -> str:
        hosts = [
            n
            for n in re.findall(r"^\s*(?:\d+: )?\[?([A-Za-z][\w.-]*)(?::\d+)*[\]:]? ", line)
            if re.search(r"\d", n)
        ]
        return split_labels(line, HostMatcher(hosts=hosts))[0]

    problems: list[str] = []
    for p in patterns:
        if not p.positive or not p.negative:
            problems.append(f"{p.id}: needs at least one positive and one negative example")
        if p.cls == "node" and not ({"host", "rank"} & p.groups) and p.blame != "reporter":
            problems.append(f"{p.id}: a node pattern needs a host or rank group, or blame 'reporter'")
        for ex in p.positive:
            m = p.regex.search(body(ex.line))
            if m is None:
                problems.append(f"{p.id}: does not match its positive example {ex.line!r}")
                continue
            if p.needles is not None and not any(n in ex.line.lower() for n in p.needles):
                problems.append(f"{p.id}: needles {list(p.needles)} miss {ex.line!r}")
            if ex.host is not None and m.groupdict().get("host") != ex.host:
                problems.append(f"{p.id}: captured host {m.groupdict().get('host')!r}, expected {ex.host!r}")
            if ex.rank is not None and m.groupdict().get("rank") != str(ex.rank):
                problems.append(f"{p.id}: captured rank {m.groupdict().get('rank')!r}, expected {ex.rank}")
            if p.ends and p.regex.search(ex.line) is None:
                problems.append(
                    f"{p.id}: an ends pattern must match the raw line too (the watch reads it) {ex.line!r}"
                )
        for line in p.negative:
            if p.regex.search(body(line)) is not None:
                problems.append(f"{p.id}: matches its negative example {line!r}")
    return problems


def ends(patterns: Iterable[Pattern]) -> list[dict[str, Any]]:
    """The `ends` patterns as `agpt watch --kill-on` reads them (agpt.watch.evidence)."""
    return [
        {"id": p.id, "regex": p.regex.pattern, "flags": "i" if p.regex.flags & re.IGNORECASE else "",
         "needles": list(p.needles) if p.needles else None}
        for p in patterns
        if p.ends
    ]  # fmt: skip


def public_source(p: Pattern) -> bool:
    """Whether the pattern names a public URL where its message is printed."""
    return p.url.startswith(("https://", "http://"))


def main(argv: list[str] | None = None) -> int:
    """`agpt failover patterns [--sets a,b] [--quiet]`: every pattern with its class and source, then a check of
    every pattern's examples; exit 1 on a problem (a missing source is counted, not a problem)."""
    import argparse
    import json
    import sys

    ap = argparse.ArgumentParser(prog="agpt failover patterns", description=main.__doc__)
    ap.add_argument(
        "--sets", help="sets to list and check (default: FAILOVER_PATTERN_SETS, else all on the search path)"
    )
    ap.add_argument("--quiet", action="store_true", help="print only the problems and the summary")
    ap.add_argument(
        "--ends",
        action="store_true",
        help="print the `ends` patterns as JSON for `agpt watch --kill-on` (the failover loop's kill on evidence)",
    )
    args = ap.parse_args(argv)
    try:
        names = select_sets(args.sets, source="--sets")
        found = load(names)
    except (BadInput, PatternError) as e:
        sys.stderr.write(f"patterns: error: {e}\n")
        return 2
    if args.ends:
        sys.stdout.write(json.dumps(ends(found)) + "\n")
        return 0
    if not args.quiet:
        width = max((len(p.id) for p in found), default=0)
        for p in found:
            sys.stdout.write(f"{p.id:<{width}}  {p.cls:<14}  {p.url or '-'}\n")
    problems = check(found)
    for line in problems:
        sys.stdout.write(f"{line}\n")
    missing = [p.id for p in found if not public_source(p)]
    sys.stdout.write(
        f"{len(found)} patterns in {len(names)} sets: {len(missing)} without a public source"
        + (f" ({', '.join(missing)})" if missing else "")
        + f"; {len(problems)} problem(s)\n"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
