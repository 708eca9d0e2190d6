"""`agpt failover hosts`: the run directory's host lists (docs/contract.md `hosts/`), and the swaps on them.

Standard library only: this runs on the recovery path, when the training environment may be what broke.

Files under RUN_DIR/hosts/ (one host per line, de-duplicated, scheduler order):
  all     the allocation as the scheduler gave it
  active  the hosts the next attempt runs on
  spare   the hosts waiting to replace a bad one (first line is used first)
  ip      `IP HOST` lines, resolved once at job start, so a log's address maps to a host without DNS
  bad     append-only `host<TAB>time<TAB>jobid<TAB>evidence|blind`

Why these rules:
- A host proven bad (an evidence line) by an earlier job in the chain is never made active, nor kept as a
  spare: a new allocation can land on it again.  A host evicted blind is only a suspect: it stays usable but
  goes to the back of the line, so it becomes a spare before it becomes active.
- Every rewrite of active/spare goes through a temporary file and `os.replace`, so a job killed in the middle
  of a swap leaves either the old or the new lists, never half of one; and every read-modify-write of them holds
  an flock on hosts/.lock, so two swaps at once never lose one.
- Host names enter through one parser (agpt.rundir.parse_hostfile): only [A-Za-z0-9._-] or an IP address, so a
  name is never shell text when a hook or a launcher command is built from it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agpt import numeric, proc, rundir, safewrite
from agpt.errors import BadInput
from agpt.failover.each import run_each, run_hook, write_prefixed

BLIND = "blind"


def _say(msg: str) -> None:
    sys.stderr.write(f"failover: {msg}\n")
    sys.stderr.flush()


def clean_hosts(lines: Iterable[str], *, where: str = "hostfile") -> list[str]:
    """One host per line (agpt.rundir.parse_hostfile): first word, `host:N` and `host slots=N` name host, blank
    lines and comments skipped, duplicates dropped, a name outside [A-Za-z0-9._-] refused (BadInput).

    A PBS nodefile repeats a host once per rank; a Slurm hostfile may have `host slots=N`.
    """
    return rundir.parse_hostfile(lines, where=where)


def read_hosts(path: Path) -> list[str]:
    """The hosts of a one-host-a-line file; a missing file is an empty list."""
    return rundir.read_hostfile(path, missing_ok=True)


def write_hosts(path: Path, hosts: Sequence[str]) -> None:
    """Replace a hosts/* list.  Every host passes the host-name rule and none is listed twice (whatever the caller
    read them from: an allocation, a flag, an event read back), so a list written is a list every reader takes."""
    seen: set[str] = set()
    for h in hosts:
        rundir.check_host(h, str(path))
        if h in seen:
            raise BadInput(f"{path}: {h} would be listed twice")
        seen.add(h)
    safewrite.replace(path, "".join(f"{h}\n" for h in hosts))


@dataclass(kw_only=True, slots=True)
class BadRecord:
    """One line of hosts/bad."""

    host: str
    time: float
    jobid: str
    evidence: str

    @property
    def blind(self) -> bool:
        return self.evidence == BLIND


def read_bad(path: Path) -> list[BadRecord]:
    """hosts/bad records.  Skipped: blank and `#` lines; with a note on stderr, a torn line (fewer than the four
    fields every append writes: a writer killed mid-line) and a line whose host is not a host name."""
    out: list[BadRecord] = []
    skipped = 0
    for line in rundir.read_lines(path):
        parts = line.split("\t", 3)
        if not line.strip() or line.startswith("#"):
            continue
        host = parts[0].strip()
        if len(parts) < 4 or not rundir.valid_host(host):
            skipped += 1
            continue
        out.append(
            BadRecord(
                host=host,
                time=(rundir.num(parts[1]) or 0.0) if len(parts) > 1 else 0.0,
                jobid=parts[2] if len(parts) > 2 else "",
                evidence=parts[3] if len(parts) > 3 else "",
            )
        )
    if skipped:
        rundir.note(f"{path}: {skipped} unreadable line(s) skipped (torn, or not a host name)")
    return out


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.replace("\t", " ").split())
    return flat[:limit] if flat else BLIND


def append_bad(
    path: Path, hosts: Iterable[str], *, jobid: str, evidence: str, now: float | None = None
) -> None:
    """Append `host<TAB>time<TAB>jobid<TAB>evidence|blind` lines (one write, O_APPEND)."""
    rundir.append_line(path, bad_lines(path, hosts, jobid=jobid, evidence=evidence, now=now))


def bad_lines(
    path: Path, hosts: Iterable[str], *, jobid: str, evidence: str, now: float | None = None
) -> str:
    """The hosts/bad lines append_bad writes (every host passes the host-name rule, PATH names the file)."""
    when = time.time() if now is None else now
    hosts = [rundir.check_host(h, str(path)) for h in hosts]
    ev = BLIND if evidence == BLIND else _one_line(evidence)
    jid = "".join(str(jobid).split())  # a field of its own: no tab, no newline
    return "".join(f"{h}\t{when:.0f}\t{jid}\t{ev}\n" for h in hosts)


def proven_bad(records: Iterable[BadRecord]) -> set[str]:
    return {r.host for r in records if not r.blind}


def suspects(records: Iterable[BadRecord]) -> set[str]:
    return {r.host for r in records if r.blind}


def default_spares(usable: int, *, percent: float, minimum: int) -> int:
    """The spares of `usable` hosts (agpt.rundir.split_counts): the inverse of what job generation asks for,
    so A active + spares_for(A) hosts split back into A and spares_for(A).  6 hosts keep 1 spare, 16 keep 4,
    512 keep 11 (2%)."""
    return rundir.split_counts(usable, percent=percent, minimum=minimum)[1]


@dataclass(kw_only=True, slots=True)
class Split:
    """How an allocation was divided; `notes` say what was dropped or degraded and why."""

    all: list[str]
    active: list[str]
    spare: list[str]
    excluded: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def split_hosts(
    hosts: Sequence[str],
    *,
    bad: Sequence[BadRecord] = (),
    active: int | None = None,
    spares: int | None = None,
    percent: float = rundir.SPARES_PERCENT,
    minimum: int = rundir.SPARES_MIN,
    degrade: bool = False,
) -> Split:
    """Divide the allocation into active and spare hosts.

    `active`/`spares` None: computed (all usable hosts minus the default spares).  Too few usable hosts for an
    explicit `active` count: BadInput with the numbers, or (degrade) run on what there is with no spares.
    """
    if active is not None and active < 1:
        raise BadInput(f"failover hosts: --active must be at least 1, got {active}")
    if spares is not None and spares < 0:
        raise BadInput(f"failover hosts: --spares must not be negative, got {spares}")
    if not 0 <= percent <= 100:  # NaN fails too
        raise BadInput(f"SITE_SPARES_PERCENT/--spares-percent: must be 0 to 100, got {percent}")
    if not 0 <= minimum <= 10**7:
        raise BadInput(f"SITE_SPARES_MIN/--spares-min: must be 0 or more, got {minimum}")
    all_hosts = clean_hosts(hosts)
    known_bad = proven_bad(bad)
    suspect = suspects(bad) - known_bad
    excluded = [h for h in all_hosts if h in known_bad]
    usable = [h for h in all_hosts if h not in known_bad]
    # Suspects go last: they become spares before they become active.
    usable = [h for h in usable if h not in suspect] + [h for h in usable if h in suspect]
    notes: list[str] = []
    if excluded:
        notes.append(f"{len(excluded)} host(s) known bad from earlier jobs left out: {','.join(excluded)}")
    n = len(usable)
    if n == 0:
        raise BadInput(
            f"failover hosts: no usable host: {len(all_hosts)} listed, {len(excluded)} known bad in hosts/bad"
        )
    if active is None:
        want_spares = default_spares(n, percent=percent, minimum=minimum) if spares is None else spares
        if want_spares >= n:
            if not degrade:
                raise BadInput(
                    f"failover hosts: {n} usable host(s) ({len(all_hosts)} listed, {len(excluded)} known bad) "
                    f"cannot hold {want_spares} spare(s) ({'--spares' if spares is not None else '--spares-percent'}) "
                    "and at least 1 active host"
                )
            notes.append(f"degraded: {want_spares} spares asked, {n - 1} possible")
            want_spares = n - 1
        n_active = n - want_spares
    else:
        want_spares = (n - active if n > active else 0) if spares is None else spares
        if n < active:
            if not degrade:
                raise BadInput(
                    f"failover hosts: the allocation has {n} usable host(s) ({len(all_hosts)} listed, "
                    f"{len(excluded)} known bad), asked for {active} active + {want_spares} spare(s) = "
                    f"{active + want_spares}"
                )
            notes.append(f"degraded: {active} active host(s) asked, running on {n} with no spare")
            n_active, want_spares = n, 0
        else:
            n_active = active
            if n_active + want_spares > n:
                notes.append(
                    f"{want_spares} spare(s) asked, only {n - n_active} left after {n_active} active"
                )
                want_spares = n - n_active
    act = usable[:n_active]
    spare = usable[n_active : n_active + want_spares]
    return Split(all=all_hosts, active=act, spare=spare, excluded=excluded, notes=notes)


def resolve(hosts: Sequence[str], *, timeout: float = 10.0, workers: int = 32) -> list[tuple[str, str]]:
    """(IP, host) pairs for every address of every host, resolved in parallel within `timeout` seconds.

    getaddrinfo has no timeout of its own, so lookups run on daemon threads and whatever has not answered
    by the deadline is left out (and named on stderr) rather than stalling the job.
    """
    results: dict[str, list[str]] = {}
    lock = threading.Lock()

    def one(host: str) -> None:
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError):
            infos = []
        addrs: list[str] = []
        for info in infos:
            addr = str(info[4][0])
            if addr not in addrs:
                addrs.append(addr)
        with lock:
            results[host] = addrs

    threads: list[threading.Thread] = []
    pending = list(hosts)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        alive = [t for t in threads if t.is_alive()]
        while pending and len(alive) < workers:
            t = threading.Thread(target=one, args=(pending.pop(0),), daemon=True)
            t.start()
            threads.append(t)
            alive.append(t)
        time.sleep(0.005)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with lock:
        late = [h for h in hosts if h not in results]
        pairs = [(ip, h) for h in hosts for ip in results.get(h, [])]
    if late:
        _say(f"address lookup timed out after {timeout:g} s for {len(late)} host(s): {','.join(late[:8])}")
    return pairs


@dataclass(kw_only=True, slots=True)
class RunHosts:
    """The hosts/ folder of a run directory."""

    run_dir: Path

    @property
    def dir(self) -> Path:
        return self.run_dir / "hosts"

    def path(self, name: str) -> Path:
        return self.dir / name

    def active(self) -> list[str]:
        return read_hosts(self.path("active"))

    def spare(self) -> list[str]:
        return read_hosts(self.path("spare"))

    def bad(self) -> list[BadRecord]:
        return read_bad(self.path("bad"))


def init_run_hosts(
    run_dir: Path,
    hosts: Sequence[str],
    *,
    active: int | None = None,
    spares: int | None = None,
    percent: float = rundir.SPARES_PERCENT,
    minimum: int = rundir.SPARES_MIN,
    degrade: bool = False,
    resolve_timeout: float = 10.0,
) -> Split:
    """Write hosts/all, active, spare and ip for a new job; hosts/bad is read, never rewritten."""
    with rundir.locked(run_dir / rundir.HOSTS_LOCK):
        settle(run_dir)  # a change the last job recorded but did not finish: its hosts/bad lines count here
        rh = RunHosts(run_dir=run_dir)
        split = split_hosts(
            hosts,
            bad=rh.bad(),
            active=active,
            spares=spares,
            percent=percent,
            minimum=minimum,
            degrade=degrade,
        )
        write_hosts(rh.path("all"), split.all)
        write_hosts(rh.path("spare"), split.spare)
        write_hosts(rh.path("active"), split.active)
        pairs = resolve(split.active + split.spare, timeout=resolve_timeout) if resolve_timeout > 0 else []
        safewrite.replace(rh.path("ip"), "".join(f"{ip} {h}\n" for ip, h in pairs))
        return split


@dataclass(kw_only=True, slots=True)
class SwapResult:
    swap_out: list[str]
    swap_in: list[str]
    returned: list[str]


@dataclass(kw_only=True, slots=True)
class Change:
    """A change of hosts/ worked out before anything is written (so it can be recorded first): the lists after
    it (None: unchanged) and the hosts/bad lines it appends."""

    active: list[str] | None = None
    spare: list[str] | None = None
    bad: str = ""
    result: SwapResult = field(default_factory=lambda: SwapResult(swap_out=[], swap_in=[], returned=[]))

    def as_record(self) -> dict[str, Any]:
        return {"active": self.active, "spare": self.spare, "bad": self.bad}


def commit(run_dir: Path, change: Change, *, once: bool = False) -> None:
    """Write CHANGE (the lock held): hosts/spare first (a crash between the two writes then leaves a host in both
    lists, never in neither), hosts/active, then the hosts/bad lines; ONCE: only those not there yet (a journal
    completed after a crash that came after some of them)."""
    rh = RunHosts(run_dir=run_dir)
    if change.spare is not None:
        write_hosts(rh.path("spare"), change.spare)
    if change.active is not None:
        write_hosts(rh.path("active"), change.active)
    text = change.bad
    if once and text:
        have = set(rundir.read_lines(rh.path("bad")))
        text = "".join(ln + "\n" for ln in text.splitlines() if ln not in have)
    if text:
        rundir.append_line(rh.path("bad"), text)


# The journal of a change the failover loop records before it makes it (agpt.failover.plan): written before the
# attempt's record, removed once the change is made; `settle` completes it when its record exists, drops it when
# not, so a crash or a full disk at any step leaves the record and the host lists consistent.
PENDING = "hosts/.pending"


def journal(run_dir: Path, change: Change, *, jobid: str, attempt: int) -> None:
    """Write the journal of CHANGE, the change attempt JOBID.ATTEMPT's record says (the lock held)."""
    rec = {"format": "agpt-pending/1", "jobid": jobid, "attempt": attempt, **change.as_record()}
    safewrite.replace(run_dir / PENDING, json.dumps(rec) + "\n")


def unjournal(run_dir: Path) -> None:
    try:
        os.unlink(run_dir / PENDING)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise safewrite.error(run_dir / PENDING, exc) from None


def settle(run_dir: Path) -> str:
    """Complete or drop a journalled change (the lock held): what was done, "" when there was none.  Completed
    when events.jsonl holds the attempt it belongs to (recorded, then cut short), dropped when not (the record
    never came, so neither may the change)."""
    path = run_dir / PENDING
    try:
        rec = rundir.parse_json_line(rundir.read_bytes(path).decode("utf-8", errors="replace"))
    except FileNotFoundError:
        return ""
    except (OSError, ValueError, RecursionError) as exc:
        unjournal(run_dir)
        return f"{path}: unreadable ({exc.__class__.__name__}), dropped"
    ok = isinstance(rec, dict) and isinstance(rec.get("bad"), str)
    ok = ok and all(rec.get(k) is None or isinstance(rec.get(k), list) for k in ("active", "spare"))
    ident = f"{rec.get('jobid')}.{rec.get('attempt')}" if isinstance(rec, dict) else "?"
    recorded = ok and any(
        e.get("event") == "attempt"
        and str(e.get("jobid")) == str(rec.get("jobid"))
        and e.get("attempt") == rec.get("attempt")
        for e in rundir.read_jsonl(run_dir / rundir.EVENTS)
    )
    if not recorded:
        unjournal(run_dir)
        return f"dropped the host change of attempt {ident}: it was never recorded in {rundir.EVENTS}"
    change = Change(active=rec["active"], spare=rec["spare"], bad=rec["bad"])
    try:
        commit(run_dir, change, once=True)
    except BadInput as exc:  # a host name that fails the rule: the journal is data too
        unjournal(run_dir)
        return f"dropped the host change of attempt {ident}: {exc}"
    unjournal(run_dir)
    return f"completed the host change recorded for attempt {ident} (cut short before)"


def settle_locked(run_dir: Path) -> str:
    """settle() under hosts/.lock, and said on stderr when it did something."""
    if not (run_dir / PENDING).exists() and not (run_dir / PENDING).is_symlink():
        return ""
    with rundir.locked(run_dir / rundir.HOSTS_LOCK):
        done = settle(run_dir)
    if done:
        _say(done)
    return done


def swap_change(
    run_dir: Path,
    out: Sequence[str],
    *,
    swap_in: Sequence[str] | None = None,
    returned: Sequence[str] = (),
    blind: bool = False,
    jobid: str = "",
    evidence: str = "",
    now: float | None = None,
) -> Change:
    """swap()'s change, worked out from the lists as they are (the lock held), nothing written."""
    rh = RunHosts(run_dir=run_dir)
    active = rh.active()
    spare = [h for h in rh.spare() if h not in returned]
    outs = [h for h in dict.fromkeys(out)]
    missing = [h for h in outs if h not in active]
    if missing:
        raise BadInput(f"failover hosts swap: not active: {','.join(missing)}")
    if swap_in is None:
        ins = spare[: len(outs)]
    else:
        ins = list(swap_in)
        twice = sorted({h for h in ins if ins.count(h) > 1})
        if twice:
            raise BadInput(f"failover hosts swap: --in names {','.join(twice)} more than once")
        unknown = [h for h in ins if h not in spare and h not in returned]
        if unknown:
            raise BadInput(f"failover hosts swap: not a spare: {','.join(unknown)}")
    if len(ins) < len(outs):
        raise BadInput(f"failover hosts swap: {len(outs)} host(s) out but only {len(ins)} spare(s)")
    ins = ins[: len(outs)]
    repl = dict(zip(outs, ins, strict=True))
    new_active = [repl.get(h, h) for h in active]
    pool = spare + [h for h in returned if h not in active]
    new_spare = [h for h in pool if h not in ins]
    ev = BLIND if blind else (evidence or "named")
    bad = bad_lines(rh.path("bad"), outs, jobid=jobid, evidence=ev, now=now) if outs else ""
    result = SwapResult(swap_out=outs, swap_in=ins, returned=[h for h in returned if h not in active])
    return Change(active=new_active, spare=new_spare, bad=bad, result=result)


def swap(
    run_dir: Path,
    out: Sequence[str],
    *,
    swap_in: Sequence[str] | None = None,
    returned: Sequence[str] = (),
    blind: bool = False,
    jobid: str = "",
    evidence: str = "",
    now: float | None = None,
) -> SwapResult:
    """Replace each host of `out` (in active) by a spare, in place so ranks keep their order.

    `swap_in`: the spares to use (default: the first ones).  `returned`: blind suspects cleared by the last
    attempt, put back at the end of the spare list.  Hosts out are appended to hosts/bad, as `blind` when
    the swap is a guess.  Raises BadInput when a host is not active or there are not enough spares.
    """
    with rundir.locked(run_dir / rundir.HOSTS_LOCK):
        settle(run_dir)
        ch = swap_change(run_dir, out, swap_in=swap_in, returned=returned, blind=blind, jobid=jobid,
                         evidence=evidence, now=now)  # fmt: skip
        commit(run_dir, ch)
        return ch.result


def shrink_change(
    run_dir: Path,
    out: Sequence[str],
    active_after: Sequence[str],
    *,
    jobid: str = "",
    evidence: str = "",
    now: float | None = None,
) -> Change:
    """shrink()'s change, worked out from the lists as they are (the lock held), nothing written."""
    rh = RunHosts(run_dir=run_dir)
    active, spare = rh.active(), rh.spare()
    outs = list(dict.fromkeys(out))
    wrong = [h for h in active_after if h in outs or (h not in active and h not in spare)]
    if wrong or len(set(active_after)) != len(active_after) or any(h not in active for h in outs):
        raise BadInput(f"failover hosts shrink: {','.join(wrong) or ','.join(outs)}: out, twice, or unknown")
    keep = set(active_after)
    to_spare = [h for h in active if h not in keep and h not in outs]
    bad = bad_lines(rh.path("bad"), outs, jobid=jobid, evidence=evidence or "named", now=now) if outs else ""
    result = SwapResult(swap_out=outs, swap_in=[h for h in active_after if h in spare], returned=to_spare)
    return Change(active=list(active_after), spare=[h for h in spare if h not in keep] + to_spare, bad=bad,
                  result=result)  # fmt: skip


def shrink(
    run_dir: Path,
    out: Sequence[str],
    active_after: Sequence[str],
    *,
    jobid: str = "",
    evidence: str = "",
    now: float | None = None,
) -> SwapResult:
    """Run on fewer hosts (agpt.failover.shrink): hosts/active becomes `active_after` (active hosts and spares),
    the hosts of `out` are appended to hosts/bad, and the active hosts neither kept nor out go to the end of
    hosts/spare.  BadInput when a host of `active_after` is neither active nor a spare, or is also out."""
    with rundir.locked(run_dir / rundir.HOSTS_LOCK):
        settle(run_dir)
        ch = shrink_change(run_dir, out, active_after, jobid=jobid, evidence=evidence, now=now)
        commit(run_dir, ch)
        return ch.result


def mark_bad(run_dir: Path, hosts: Sequence[str], *, jobid: str, evidence: str) -> None:
    """Record hosts as bad without swapping them (the job is stopping; the next one must avoid them)."""
    append_bad(RunHosts(run_dir=run_dir).path("bad"), hosts, jobid=jobid, evidence=evidence or "named")


def preflight(
    run_dir: Path,
    command: str,
    *,
    timeout: float = 120.0,
    workers: int = 32,
    jobid: str = "",
    log: Path | None = None,
) -> list[str]:
    """Run `command` once per host (active and spare; `{host}` replaced), evict the hosts where it fails.

    A failing active host is swapped for a healthy spare, a failing spare is dropped; each is recorded in
    hosts/bad with the command's last output line as evidence.  Returns the hosts evicted.
    """
    with rundir.locked(run_dir / rundir.HOSTS_LOCK):
        if "{host}" not in command:
            raise BadInput(
                f"FAILOVER_PREFLIGHT: the command must name the host to test as {{host}}: {command!r}"
            )
        settle(run_dir)
        rh = RunHosts(run_dir=run_dir)
        active, spare_all = rh.active(), rh.spare()
        hosts = active + spare_all
        outputs, failed = run_each(hosts, command, timeout=timeout, workers=workers)
        if log is not None:
            write_prefixed(log, hosts, outputs, failed)
        bad_active = [h for h in active if h in failed]
        spare = [h for h in spare_all if h not in failed]
        if len(spare) < len(bad_active):
            append_bad(rh.path("bad"), list(failed), jobid=jobid, evidence="preflight failed")
            raise BadInput(
                f"failover preflight: {len(bad_active)} active host(s) failed ({','.join(bad_active)}) "
                f"but only {len(spare)} healthy spare(s)"
            )
        repl = dict(zip(bad_active, spare[: len(bad_active)], strict=True))
        write_hosts(rh.path("spare"), spare[len(bad_active) :])
        write_hosts(rh.path("active"), [repl.get(h, h) for h in active])
        for h in hosts:
            if h in failed:
                append_bad(rh.path("bad"), [h], jobid=jobid, evidence=f"preflight {failed[h]}")
        return [h for h in hosts if h in failed]


def _read_allocation(args: argparse.Namespace) -> list[str]:
    if args.hosts is not None:
        return clean_hosts(args.hosts.replace(",", "\n").splitlines(), where="--hosts")
    if args.hostfile == "-":
        text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
        return clean_hosts(text.splitlines(), where="the allocation (standard input)")
    try:
        text = rundir.read_bytes(args.hostfile, limit=rundir.TEXT_MAX).decode("utf-8", errors="replace")
    except OSError as e:
        raise BadInput(f"failover hosts: --hostfile {args.hostfile}: {e.strerror or e}") from e
    return clean_hosts(text.splitlines(), where=args.hostfile)


def _opt_int(v: str | None, flag: str) -> int | None:
    if v is None or v == "":
        return None
    return numeric.whole(v, flag, maximum=numeric.MAX_NODES)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise BadInput(f"failover hosts: {message}")


def _seconds(flag: str) -> Any:
    return numeric.flag(flag, lo=0, hi=numeric.MAX_SECONDS, unit="seconds")


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="agpt failover hosts", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="sub", required=True, parser_class=_Parser)
    p = sub.add_parser("init", help="split the allocation into hosts/{all,active,spare}, resolve hosts/ip")
    p.add_argument("--run-dir", required=True)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hostfile", help="one host per line ('-' for stdin)")
    src.add_argument("--hosts", help="comma-separated hosts")
    p.add_argument("--active", help="active hosts wanted (default: all but the spares)")
    p.add_argument("--spares", help="spare hosts (default: ~PERCENT%% of active, at least MIN when allowed)")
    p.add_argument("--spares-percent", type=lambda v: rundir.spares_percent(v, "--spares-percent (SITE_SPARES_PERCENT)"),
                   default=rundir.SPARES_PERCENT,
                   help=f"SITE_SPARES_PERCENT ('' or absent: {rundir.SPARES_PERCENT:g})")  # fmt: skip
    p.add_argument("--spares-min", type=lambda v: rundir.spares_min(v, "--spares-min (SITE_SPARES_MIN)"),
                   default=rundir.SPARES_MIN,
                   help=f"SITE_SPARES_MIN ('' or absent: {rundir.SPARES_MIN})")  # fmt: skip
    p.add_argument("--degrade", action="store_true", help="run on fewer hosts than asked instead of refusing")
    p.add_argument(
        "--resolve-timeout",
        type=_seconds("--resolve-timeout"),
        default=10.0,
        help="seconds for all lookups (0: none)",
    )
    p = sub.add_parser("swap", help="swap hosts out of hosts/active for spares")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--out", required=True, help="comma-separated active hosts to swap out")
    p.add_argument("--in", dest="swap_in", help="comma-separated spares to use (default: the first ones)")
    p.add_argument("--blind", action="store_true", help="a guess: record the hosts as blind, not as bad")
    p.add_argument("--evidence", default="")
    p.add_argument("--jobid", default="")
    p = sub.add_parser("mark-bad", help="append hosts to hosts/bad without swapping")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--hosts", required=True)
    p.add_argument("--evidence", default="named")
    p.add_argument("--jobid", default="")
    p = _per_host(sub, "preflight", "run a command per host ({host}); evict the hosts where it fails", 120.0)
    p.add_argument("--jobid", default="")
    p.add_argument("--log", help="write every host's output here, [host]-prefixed")
    _per_host(
        sub,
        "each",
        "run a command per active host ({host}), or once ({hosts} {nhosts} {hostfile}), e.g. a cleanup hook",
        60.0,
    )
    return ap


def _per_host(sub: Any, name: str, help_text: str, timeout: float) -> _Parser:
    """A subcommand that runs --cmd on each host (run_each): its common options."""
    p: _Parser = sub.add_parser(name, help=help_text)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--cmd", required=True)
    p.add_argument("--timeout", type=_seconds("--timeout"), default=timeout)
    p.add_argument("--workers", type=numeric.flag("--workers", lo=1, hi=1024, integer=True), default=32)
    return p


def _csv(v: str | None) -> list[str]:
    return [h for h in (v or "").replace(" ", ",").split(",") if h]


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except BadInput as e:
        sys.stderr.write(f"agpt: error: {e}\n")
        return e.exit_code
    run_dir = Path(args.run_dir)
    if args.sub in ("each", "preflight"):
        proc.end_all_on_signals()  # killed while hooks run: their process groups end with it
    try:
        if args.sub == "init":
            split = init_run_hosts(
                run_dir,
                _read_allocation(args),
                active=_opt_int(args.active, "--active"),
                spares=_opt_int(args.spares, "--spares"),
                percent=args.spares_percent,
                minimum=args.spares_min,
                degrade=args.degrade,
                resolve_timeout=args.resolve_timeout,
            )
            for note in split.notes:
                _say(note)
            _say(
                f"{len(split.all)} host(s): {len(split.active)} active, {len(split.spare)} spare"
                f"{f', {len(split.excluded)} known bad' if split.excluded else ''}"
            )
            print(json.dumps({"active": split.active, "spare": split.spare, "excluded": split.excluded}))
        elif args.sub == "swap":
            r = swap(
                run_dir,
                _csv(args.out),
                swap_in=_csv(args.swap_in) if args.swap_in else None,
                blind=args.blind,
                jobid=args.jobid,
                evidence=args.evidence,
            )
            print(json.dumps({"swap_out": r.swap_out, "swap_in": r.swap_in}))
        elif args.sub == "mark-bad":
            mark_bad(run_dir, _csv(args.hosts), jobid=args.jobid, evidence=args.evidence)
        elif args.sub == "preflight":
            evicted = preflight(
                run_dir,
                args.cmd,
                timeout=args.timeout,
                workers=args.workers,
                jobid=args.jobid,
                log=Path(args.log) if args.log else None,
            )
            if evicted:
                _say(f"preflight evicted {len(evicted)} host(s): {','.join(evicted)}")
            print(json.dumps({"evicted": evicted}))
        elif args.sub == "each":
            rh = RunHosts(run_dir=run_dir)
            return run_hook(
                rh.active(), rh.path("active"), args.cmd, timeout=args.timeout, workers=args.workers
            )
    except BadInput as e:
        sys.stderr.write(f"agpt: error: {e}\n")
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
