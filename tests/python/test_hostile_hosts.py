"""One host-name rule (agpt.rundir.valid_host) at every entry to hosts/*: init, swap, mark-bad, plan's apply,
preflight's HOST and the events read back.  Addresses pass only in plain numeric form (a scope id may hold
anything), and a list is never written with a host twice.  Each test is one instance found from outside (issue 29)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agpt.failover import hosts
from conftest import ROOT, agpt_env

EVIL_ADDRESSES = ["::1%$(id)", "::1%;reboot", "fe80::1%eth0", "[::1]", "::1%25x"]


def failover(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agpt.failover", *args],
        capture_output=True,
        text=True,
        input=stdin,
        env=agpt_env(),
        timeout=60,
    )


def init(run: Path, names: str, spares: int) -> None:
    r = failover("hosts", "init", "--run-dir", str(run), "--hosts", names, "--spares", str(spares),
                 "--resolve-timeout", "0")  # fmt: skip
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("evil", EVIL_ADDRESSES)
def test_init_refuses_an_address_with_a_scope_id(tmp_path: Path, evil: str) -> None:
    r = failover("hosts", "init", "--run-dir", str(tmp_path), "--hosts", f"n1,n2,{evil}", "--spares", "0")
    assert r.returncode == 2 and "not a host name" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    assert not (tmp_path / "hosts" / "active").exists()


@pytest.mark.parametrize("evil", EVIL_ADDRESSES)
def test_mark_bad_refuses_an_address_with_a_scope_id(tmp_path: Path, evil: str) -> None:
    r = failover("hosts", "mark-bad", "--run-dir", str(tmp_path), "--hosts", evil)
    assert r.returncode == 2 and "not a host name" in r.stderr, r.stderr
    assert not (tmp_path / "hosts" / "bad").exists()


def test_plain_addresses_still_pass(tmp_path: Path) -> None:
    init(tmp_path, "10.0.0.1,::1,fe80::1,n1", 0)
    assert (tmp_path / "hosts" / "active").read_text().split() == ["10.0.0.1", "::1", "fe80::1", "n1"]


def test_a_swap_that_names_a_spare_twice_is_refused_and_loses_no_host(tmp_path: Path) -> None:
    init(tmp_path, "n1,n2,n3,s1,s2", 2)
    r = failover("hosts", "swap", "--run-dir", str(tmp_path), "--out", "n1,n2", "--in", "s1,s1")
    assert r.returncode == 2 and "s1" in r.stderr and "more than once" in r.stderr, r.stderr
    assert (tmp_path / "hosts" / "active").read_text().split() == ["n1", "n2", "n3"]
    assert (tmp_path / "hosts" / "spare").read_text().split() == ["s1", "s2"]


def test_no_host_list_is_ever_written_with_a_host_twice_or_a_bad_name(tmp_path: Path) -> None:
    for bad in (["n1", "n1"], ["n1", "n2;id"], ["::1%x"]):
        with pytest.raises(hosts.BadInput):
            hosts.write_hosts(tmp_path / "active", bad)
    assert not (tmp_path / "active").exists()


def test_plan_apply_never_copies_a_host_from_events_into_hosts_active(tmp_path: Path) -> None:
    """A blind suspect cleared by the next attempt goes back to the pool from events.jsonl's `swapped.out`: a
    record is data, so a name there that is not a host name is dropped, and the next plan still runs."""
    init(tmp_path, "n1,n2", 0)
    evil = f"::1%$(touch {tmp_path}/PWNED)"
    ev = {"event": "attempt", "jobid": "j", "attempt": 1, "rc": 124, "class": "hang",
          "swapped": {"out": [evil], "in": ["n2"], "blind": True}}  # fmt: skip
    (tmp_path / "events.jsonl").write_text(json.dumps(ev) + "\n")
    cls = tmp_path / "c.json"
    cls.write_text(json.dumps({"class": "hang", "bad_hosts": [], "evidence": [], "last_step": None}))
    for attempt in ("2", "3"):
        r = failover("plan", "--run-dir", str(tmp_path), "--jobid", "j", "--attempt", attempt, "--rc", "124",
                     "--classification", str(cls), "--apply", "--shell", "--now", "1000")  # fmt: skip
        assert r.returncode == 0, r.stderr
        active = (tmp_path / "hosts" / "active").read_text().split()
        assert evil not in active and all(hosts.rundir.valid_host(h) for h in active), active
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("host", ["n1;id", "n1\nn2", "::1%$(id)", "-n1", ""])
def test_preflight_refuses_a_host_that_is_not_a_host_name(host: str) -> None:
    r = subprocess.run(
        [str(ROOT / "bin" / "agpt"), "preflight", host],
        capture_output=True,
        text=True,
        env=agpt_env(),
        timeout=60,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
