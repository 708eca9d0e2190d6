"""Reading an attempt's log fast and in bounded memory, and handing the lines that matter to the evidence.

Speed: a log is mostly a few line shapes repeated (progress, NCCL INFO).  Each chunk is lowercased with its digits
blanked into line *templates*; only a template never seen before is searched for the patterns' literal needles,
and only lines whose template holds one reach the regexes (tests/python/test_classify_prefilter.py proves the
answers equal those of running every pattern on every line).  A line holding a needle still holds it, translated,
in its template: the prefilter loses no line.

Bounds: the log is streamed in chunks (gigabytes, any bytes); past `max_bytes` only its head (the launcher's
rank-to-host lines) and its tail (the failure and its cascade) are read; a line is analysed up to LINE_CAP
characters; the templates remembered are capped at TEMPLATE_BYTES.

Besides the lines it hands to `Evidence.line`, the reader keeps what the whole log says: the number of lines, the
first and last progress step, and the labels of the last labelled line (who was heard from last).

Standard library only.
"""

from __future__ import annotations

import bisect
import os
import re
from pathlib import Path
from typing import BinaryIO

from agpt import rundir
from agpt.failover.evidence import MAX_RANKS, Evidence
from agpt.failover.labels import TRAINING_RANK, split_all, split_labels

CHUNK_BYTES = 1 << 20
MIB = 1 << 20
HEAD_BYTES = 32 * MIB
LINE_CAP = 4096  # characters of one line that are analysed; the rest of a longer line is skipped
LAST_HEARD_LOOKBACK = 64
TEMPLATE_CAP = 512  # longer line templates are searched each time, not remembered
TEMPLATE_BYTES = 16 * MIB  # the templates remembered, in all (bounded memory on any log)
LABEL_KEY_CAP = 256  # a label-only line's prefix longer than this is analysed every time
PROGRESS_WINDOW = 16384
MAX_RANK_PROBES = 64  # ranks looked up again in the log (find_ranks), at most
# a line's template: ASCII lowercased, every digit 0 (needles are translated the same way)
_TEMPLATE = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", b"abcdefghijklmnopqrstuvwxyz0000000000")

# A template's place in the prefilter: (candidate pattern indices, label-only needle end or -1); None: no needle.
_Info = tuple[tuple[int, ...], int] | None


def _text(raw: bytes) -> str:
    return raw[: LINE_CAP * 4].decode("utf-8", "replace")[:LINE_CAP]


def _step_of(m: re.Match[bytes]) -> int | None:
    if "step" in m.re.groupindex and m.group("step") is not None:
        text = m.group("step")
    elif m.re.groups and m.group(1) is not None:
        text = m.group(1)
    else:
        text = m.group(0)
    digits = re.findall(rb"\d+", text)
    return int(digits[-1]) if digits else None


class Scanner:
    """Streams a log into `ev` (an Evidence holding the patterns and the job's hosts)."""

    def __init__(self, ev: Evidence, progress: re.Pattern[bytes]) -> None:
        self.ev = ev
        self.progress = progress
        patterns = ev.patterns
        self.full = any(p.needles is None for p in patterns)
        needles = sorted(
            {n.encode("utf-8", "replace").translate(_TEMPLATE) for p in patterns for n in (p.needles or ())},
            key=len,
        )
        kept: list[bytes] = []
        for n in needles:  # a needle that contains a kept one adds no line
            if not any(k in n for k in kept):
                kept.append(n)
        self.needles = kept
        # kept needle -> the patterns one of whose needles contains it (a line holding none of them skips them)
        tneedles = [
            [n.encode("utf-8", "replace").translate(_TEMPLATE) for n in (p.needles or ())] for p in patterns
        ]
        self.by_needle: list[tuple[int, ...]] = [
            tuple(i for i, tn in enumerate(tneedles) if any(k in n for n in tn)) for k in kept
        ]
        # patterns whose only effect is the line's launcher labels (info, no named group): a line that only they
        # may match repeats its labels, so it is analysed once per distinct label prefix
        self.label_only = {i for i, p in enumerate(patterns) if p.cls == "info" and not p.groups}
        self.templates: dict[bytes, _Info] = {}
        self.hot: set[bytes] = set()
        self._template_bytes = 0
        self.label_seen: set[bytes] = set()
        self.path: Path | None = None
        self.max_bytes = 0

    def scan_file(self, path: Path, max_bytes: int = 0) -> None:
        """Stream the log; past max_bytes (0: no limit) read only its head and its tail.

        Time must stay bounded too: the failure and its cascade sit at the end of an attempt's log (the launcher
        tears the job down within seconds, the watchdog fires after silence), and the head holds the launcher's
        rank-to-host lines.  What is skipped is said in a note.
        """
        self.path = path
        self.max_bytes = max_bytes
        with rundir.open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if not max_bytes or size <= max_bytes:
                self._scan(f, None, skipping=False)
                return
            head = min(HEAD_BYTES, max_bytes // 8)
            self._scan(f, head, skipping=False)
            f.seek(size - (max_bytes - head))
            self._scan(f, None, skipping=True)  # from the first whole line of the tail
            self.ev.notes.append(
                f"log is {size / MIB:.0f} MiB: read its first {head / MIB:.0f} MiB and last "
                f"{(max_bytes - head) / MIB:.0f} MiB (FAILOVER_CLASSIFY_MAX_MB); line numbers skip the middle"
            )

    def _scan(self, f: BinaryIO, limit: int | None, *, skipping: bool) -> None:
        carry = b""
        left = limit
        while True:
            block = f.read(CHUNK_BYTES if left is None else min(CHUNK_BYTES, left))
            if not block:
                break
            if left is not None:
                left -= len(block)
            if skipping:
                nl = block.find(b"\n")
                if nl == -1:
                    continue
                block = block[nl + 1 :]
                skipping = False
            data = carry + block
            cut = data.rfind(b"\n")
            if cut == -1:
                if len(data) >= CHUNK_BYTES:  # one endless line: analyse its head, skip the rest
                    self.feed(data[:LINE_CAP] + b"\n")
                    carry = b""
                    skipping = True
                else:
                    carry = data
                continue
            self.feed(data[: cut + 1])
            carry = data[cut + 1 :]
        if carry and limit is None:  # the last line of a head is cut: dropped, not misread
            self.feed(carry + b"\n")

    def feed(self, chunk: bytes) -> None:
        """Analyse whole lines (the chunk ends with a newline)."""
        ev = self.ev
        chunk = chunk.replace(b"\r", b"\n")  # progress bars redraw with CR: each redraw is a line
        base = ev.lines
        self._progress(chunk)
        self._last_label(chunk)
        if self.full:
            olines = chunk.split(b"\n")
            ev.lines += len(olines) - 1
            if olines[-1] == b"":
                olines.pop()
            for i, raw in enumerate(olines):
                ev.line(_text(raw), base + i + 1, None)
            return
        tlines = chunk.translate(_TEMPLATE).split(b"\n")  # same lengths as the lines: offsets carry over
        ev.lines += len(tlines) - 1
        last = len(tlines) - 1 if tlines[-1] == b"" else len(tlines)  # the piece after the final newline
        local, hot = self._classify_templates(tlines)
        if not hot:
            return
        pos = 0
        prev = 0
        for i in _where(tlines, hot):
            if i >= last:
                break
            pos += sum(map(len, tlines[prev:i])) + (i - prev)
            prev = i
            t = tlines[i]
            info = local[t] if t in local else self.templates[t]
            if info is None:
                continue
            idx, label_pos = info
            raw = chunk[pos : pos + len(t)]
            if 0 <= label_pos <= LABEL_KEY_CAP:
                key = raw[:label_pos]
                if key in self.label_seen:
                    continue
                if len(self.label_seen) < MAX_RANKS:
                    self.label_seen.add(key)
            ev.line(_text(raw), base + i + 1, [ev.patterns[k] for k in idx])

    def _classify_templates(self, tlines: list[bytes]) -> tuple[dict[bytes, _Info], set[bytes]]:
        """(this chunk's new templates -> their info, the chunk's templates that hold a needle); new templates
        are remembered while the budget lasts."""
        uniq = set(tlines)
        new = [t for t in uniq if t not in self.templates]
        local = self._learn(new) if new else {}
        hot = uniq & self.hot
        for t, info in local.items():
            if info is not None:
                hot.add(t)
            if len(t) <= TEMPLATE_CAP and self._template_bytes < TEMPLATE_BYTES:
                self._template_bytes += len(t) + 64
                self.templates[t] = info
                if info is not None:
                    self.hot.add(t)
        return local, hot

    def _learn(self, new: list[bytes]) -> dict[bytes, _Info]:
        """Which needles each new template holds: (candidate pattern indices, label-only needle position or -1)."""
        joined = b"\n".join(new) + b"\n"
        starts: list[int] = []
        pos = 0
        for t in new:
            starts.append(pos)
            pos += len(t) + 1
        found: dict[int, dict[int, int]] = {}  # template index -> kept needle index -> first position
        for k, n in enumerate(self.needles):
            i = joined.find(n)
            while i != -1:
                j = bisect.bisect_right(starts, i) - 1
                hits = found.setdefault(j, {})
                if k not in hits:
                    hits[k] = i - starts[j]
                e = joined.find(b"\n", i)
                if e == -1:
                    break
                i = joined.find(n, e)
        out: dict[bytes, _Info] = dict.fromkeys(new)
        for j, hits in found.items():
            idx: set[int] = set()
            for k in hits:
                idx.update(self.by_needle[k])
            label_pos = max(hits[k] + len(self.needles[k]) for k in hits) if idx <= self.label_only else -1
            out[new[j]] = (tuple(sorted(idx)), label_pos)
        return out

    def _progress(self, chunk: bytes) -> None:
        ev = self.ev
        if ev.first_step is None:
            for m in self.progress.finditer(chunk):
                ev.first_step = _step_of(m)
                if ev.first_step is not None:
                    break
        # the last match: looked for in a tail window (from a line start) that doubles until one is found
        size = len(chunk)
        window = PROGRESS_WINDOW
        while True:
            start = 0 if window >= size else chunk.rfind(b"\n", 0, size - window) + 1
            last: re.Match[bytes] | None = None
            for m in self.progress.finditer(chunk, start):
                last = m
            if last is not None or start == 0:
                break
            window *= 4
        if last is not None:
            step = _step_of(last)
            if step is not None:
                ev.last_step = step

    def _last_label(self, chunk: bytes) -> None:
        e = len(chunk) - 1 if chunk.endswith(b"\n") else len(chunk)
        for _ in range(LAST_HEARD_LOOKBACK):
            s = chunk.rfind(b"\n", 0, e) + 1
            text = chunk[s:e][:LINE_CAP].decode("utf-8", "replace")
            _, host, rank = split_labels(text, self.ev.matcher)
            if host is not None or rank is not None:
                self.ev.last_label = (host, rank)
                return
            if s == 0:
                return
            e = s - 1

    def find_ranks(self, ranks: list[int]) -> None:
        """Node evidence named a rank that no analysed line placed: look for a labelled line of that rank.

        The prefilter hands only candidate lines to `Evidence.line`, so a rank that printed nothing alarming has
        not been placed yet; this pass reads the log again (bounded: the same bytes limit, a few look-ups per rank
        and chunk) only when such evidence exists.
        """
        if self.path is None:
            return
        want = set(ranks[:MAX_RANK_PROBES])

        def launcher(n: int) -> list[bytes]:
            return [f"{n}: ".encode(), f"[{n}]".encode(), f",{n}]".encode(), f"[{n}@".encode()]

        # A trainer's [rankN]: a line stating it, else an MPI launcher's label of rank N beside its host (the same
        # numbering); an srun label carries no host, so srun's task N never stands in for it.
        probes = {
            r: [f"[rank{r - TRAINING_RANK}]".encode(), *launcher(r - TRAINING_RANK)]
            if r >= TRAINING_RANK
            else launcher(r)
            for r in want
        }
        try:
            with rundir.open_regular(self.path) as f:
                read = 0
                carry = b""
                while want and (not self.max_bytes or read < self.max_bytes):
                    block = f.read(CHUNK_BYTES)
                    if not block:
                        break
                    read += len(block)
                    data = carry + block
                    cut = data.rfind(b"\n") + 1
                    data, carry = data[:cut], data[cut:][-LINE_CAP:]
                    for r in list(want):
                        if self._place_rank(data, r, probes[r]):
                            want.discard(r)
        except OSError as e:
            self.ev.notes.append(f"looking for the hosts of ranks {sorted(want)} failed: {e}")

    def _place_rank(self, data: bytes, r: int, probes: list[bytes]) -> bool:
        """Whether a labelled line of rank r in `data` named its host (then learnt); a few tries per probe."""
        for probe in probes:
            i = data.find(probe)
            tries = 0
            while i != -1 and tries < 32:
                tries += 1
                s0 = data.rfind(b"\n", 0, i) + 1
                e0 = data.find(b"\n", i)
                _, host, rank, train = split_all(
                    _text(data[s0 : e0 if e0 != -1 else len(data)]), self.ev.matcher
                )
                if train is not None and r == TRAINING_RANK + train:
                    self.ev.training_label(train, host, rank)
                    if self.ev.host_of(None, r) is not None:
                        return True
                elif host is not None and rank is not None and rank in (r, r - TRAINING_RANK):
                    self.ev.map_rank(rank, host)
                    return True
                i = data.find(probe, i + 1)
        return False


def _where(tlines: list[bytes], hot: set[bytes]) -> list[int]:
    """The indices of the lines whose template is hot, in order."""
    if len(hot) > 8:
        return [i for i, t in enumerate(tlines) if t in hot]
    where: list[int] = []  # a few hot templates: let list.index walk the lines in C
    for t in hot:
        i = -1
        try:
            while True:
                i = tlines.index(t, i + 1)
                where.append(i)
        except ValueError:
            pass
    where.sort()
    return where
