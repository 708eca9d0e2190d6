"""Host lists of a run directory: split, known-bad hosts, address map, atomic swaps, preflight."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agpt.errors import BadInput
from agpt.failover import hosts as H


def test_clean_hosts_dedups_and_skips_blank_lines() -> None:
    assert H.clean_hosts(["h1", "", "h2 slots=4", "h1", "  ", "# c", "h3\t", "h2"]) == ["h1", "h2", "h3"]


@pytest.mark.parametrize(
    ("n", "spares"), [(1, 0), (3, 1), (6, 1), (8, 1), (16, 4), (100, 4), (512, 11), (1024, 21)]
)
def test_default_spares(n: int, spares: int) -> None:
    assert H.default_spares(n, percent=2, minimum=4) == spares


def test_default_spares_never_negative() -> None:
    assert H.default_spares(0, percent=2, minimum=4) == 0
    assert H.default_spares(10, percent=0, minimum=0) == 0


def test_split_explicit_spares() -> None:
    s = H.split_hosts([f"n{i}" for i in range(1, 7)], spares=2)
    assert (s.active, s.spare) == (["n1", "n2", "n3", "n4"], ["n5", "n6"])


def test_split_known_bad_is_never_active_and_suspects_go_last() -> None:
    bad = [
        H.BadRecord(host="n1", time=0, jobid="1", evidence="ECC error on n1"),
        H.BadRecord(host="n2", time=0, jobid="1", evidence="blind"),
    ]
    s = H.split_hosts([f"n{i}" for i in range(1, 7)], bad=bad, spares=1)
    assert s.active == ["n3", "n4", "n5", "n6"] and s.spare == ["n2"] and s.excluded == ["n1"]


def test_split_too_few_hosts_is_refused_with_the_numbers() -> None:
    with pytest.raises(
        BadInput, match=r"has 3 usable host\(s\) \(4 listed, 1 known bad\), asked for 4 active"
    ):
        H.split_hosts(
            ["a", "b", "c", "d"], bad=[H.BadRecord(host="d", time=0, jobid="", evidence="x")], active=4
        )


def test_split_degrade_runs_on_what_there_is() -> None:
    s = H.split_hosts(["a", "b", "c"], active=4, spares=2, degrade=True)
    assert s.active == ["a", "b", "c"] and s.spare == [] and "degraded" in s.notes[0]


def test_split_active_count_leaves_the_rest_as_spares() -> None:
    s = H.split_hosts(["a", "b", "c", "d", "e"], active=3)
    assert s.active == ["a", "b", "c"] and s.spare == ["d", "e"]


def test_split_spares_that_leave_no_active_host_are_refused() -> None:
    with pytest.raises(BadInput, match="cannot hold 3 spare"):
        H.split_hosts(["a", "b", "c"], spares=3)


def test_resolve_maps_addresses_and_skips_unknown() -> None:
    pairs = H.resolve(["localhost", "no-such-host.invalid"], timeout=5)
    assert ("127.0.0.1", "localhost") in pairs
    assert all(h == "localhost" for _, h in pairs)


def test_init_writes_the_hosts_folder(tmp_path: Path) -> None:
    H.init_run_hosts(tmp_path, ["localhost", "h2", "h3", "h2", ""], spares=1, resolve_timeout=5)
    d = tmp_path / "hosts"
    assert (d / "all").read_text() == "localhost\nh2\nh3\n"
    assert (d / "active").read_text() == "localhost\nh2\n"
    assert (d / "spare").read_text() == "h3\n"
    assert "127.0.0.1 localhost" in (d / "ip").read_text().splitlines()


def setup_run(tmp_path: Path) -> Path:
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts/active").write_text("h1\nh2\nh3\nh4\n")
    (tmp_path / "hosts/spare").write_text("h5\nh6\n")
    return tmp_path


def test_swap_keeps_rank_order_and_records_evidence(tmp_path: Path) -> None:
    run = setup_run(tmp_path)
    r = H.swap(run, ["h3"], jobid="77", evidence="ECC\terror on h3\nsecond line", now=100)
    assert (r.swap_out, r.swap_in) == (["h3"], ["h5"])
    assert H.RunHosts(run_dir=run).active() == ["h1", "h2", "h5", "h4"]
    assert H.RunHosts(run_dir=run).spare() == ["h6"]
    assert (run / "hosts/bad").read_text() == "h3\t100\t77\tECC error on h3 second line\n"


def test_blind_swap_is_recorded_blind_and_returned_hosts_go_back(tmp_path: Path) -> None:
    run = setup_run(tmp_path)
    H.swap(run, ["h1"], blind=True, jobid="1", now=1)
    H.swap(run, ["h2"], returned=["h1"], blind=True, jobid="1", now=2)
    rh = H.RunHosts(run_dir=run)
    assert rh.active() == ["h5", "h6", "h3", "h4"]
    assert rh.spare() == ["h1"]
    assert [(b.host, b.blind) for b in rh.bad()] == [("h1", True), ("h2", True)]
    assert H.proven_bad(rh.bad()) == set()


def test_swap_refuses_without_enough_spares(tmp_path: Path) -> None:
    run = setup_run(tmp_path)
    with pytest.raises(BadInput, match="3 host"):
        H.swap(run, ["h1", "h2", "h3"])
    with pytest.raises(BadInput, match="not active"):
        H.swap(run, ["h9"])
    assert H.RunHosts(run_dir=run).active() == ["h1", "h2", "h3", "h4"]


def test_preflight_evicts_failing_hosts(tmp_path: Path) -> None:
    run = setup_run(tmp_path)
    evicted = H.preflight(
        run,
        'case {host} in h2|h6) echo "GPU 0 missing on {host}"; exit 1;; esac; echo ok',
        jobid="5",
        log=run / "pf.log",
    )
    assert evicted == ["h2", "h6"]
    rh = H.RunHosts(run_dir=run)
    assert rh.active() == ["h1", "h5", "h3", "h4"] and rh.spare() == []
    assert {b.host: b.evidence for b in rh.bad()}["h2"] == "preflight rc=1: GPU 0 missing on h2"
    assert "[h6] GPU 0 missing on h6" in (run / "pf.log").read_text()


def test_preflight_command_must_name_the_host(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"\{host\}"):
        H.preflight(setup_run(tmp_path), "true")


def test_preflight_without_enough_healthy_spares_is_refused(tmp_path: Path) -> None:
    run = setup_run(tmp_path)
    with pytest.raises(BadInput, match=r"3 active host\(s\) failed"):
        H.preflight(run, "case {host} in h[1-3]|h5) exit 1;; esac")


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agpt.failover", "hosts", *args], input=stdin, capture_output=True, text=True
    )


def test_cli_init_from_stdin(tmp_path: Path) -> None:
    r = cli(
        "init",
        "--run-dir",
        str(tmp_path),
        "--hostfile",
        "-",
        "--spares",
        "2",
        "--resolve-timeout",
        "0",
        stdin="n1\nn2\n\nn3\nn1\nn4\nn5\nn6\n",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"active": ["n1", "n2", "n3", "n4"], "spare": ["n5", "n6"], "excluded": []}
    assert "6 host(s): 4 active, 2 spare" in r.stderr


def test_cli_too_few_hosts_exit_2_one_line(tmp_path: Path) -> None:
    r = cli("init", "--run-dir", str(tmp_path), "--hosts", "a,b", "--active", "4", "--resolve-timeout", "0")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "asked for 4 active" in r.stderr


def test_cli_each_runs_per_active_host(tmp_path: Path) -> None:
    run = setup_run(tmp_path)
    r = cli("each", "--run-dir", str(run), "--cmd", "echo cleaned {host}")
    assert r.returncode == 0
    assert sorted(r.stdout.splitlines()) == [f"[h{i}] cleaned h{i}" for i in range(1, 5)]
