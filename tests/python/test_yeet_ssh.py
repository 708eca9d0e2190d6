"""`--transport ssh`: the greedy fan-out tree, run through a fake ssh (other hosts cannot exist here).

The fake runs each remote command locally in a per-host folder and records HOST<TAB>COMMAND, so the tests
check the shape of the tree from what ssh was asked to do.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from yeet_util import fake_ssh, make_data, make_venv, tree, yeet


def _calls(tmp: Path) -> list[tuple[str, str]]:
    lines = (tmp / "ssh.log").read_text().splitlines()
    return [(h, c) for h, _, c in (line.partition("\t") for line in lines)]


def test_fan_out_tree_sources_drive_their_children(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data", big=50_000)
    hosts = [f"h{i}" for i in range(1, 7)]
    (tmp_path / "hostfile").write_text("\n".join(hosts) + "\n")
    env = fake_ssh(tmp_path) | {"AGPT_YEET_FANOUT": "2"}
    dest = f"{tmp_path}/hosts/{{host}}/data"
    r = yeet(str(src), "--hostfile", str(tmp_path / "hostfile"), "--dest", dest, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    for h in hosts:
        assert tree(tmp_path / "hosts" / h / "data") == tree(src)
    calls = _calls(tmp_path)
    # copies: the head sends to at most 2 at once; later hosts are fed by hosts that already have it
    relayed = [(h, c) for h, c in calls if c.startswith("ssh ")]
    assert relayed, calls
    for source, cmd in relayed:
        assert source in hosts and "sha256sum -c" in cmd and "< " in cmd
    receipts = sorted(h for h, c in calls if c.startswith("mkdir -p"))
    assert receipts == sorted(hosts)  # each host received exactly once
    assert len(receipts) - len(relayed) >= 2  # the head fed the first wave itself
    extracts = [h for h, c in calls if "agpt.yeet.remote" in c]
    assert sorted(extracts) == sorted(hosts)
    for h in hosts:  # the relayed tarballs are removed once every copy is done
        assert sorted(os.listdir(tmp_path / "hosts" / h)) == ["data"]


def test_unreachable_host_is_retried_then_reported_under_min_success(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "venv")
    hosts = ["a1.hsn", "a2.hsn", "a3.hsn"]
    (tmp_path / "hostfile").write_text("\n".join(hosts) + "\n")
    env = fake_ssh(tmp_path) | {"FAKE_SSH_DOWN": "a2.hsn", "AGPT_YEET_HOST": "a1"}  # the head is a1
    dest = f"{tmp_path}/hosts/{{host}}/venv"
    args = [str(venv), "--hostfile", str(tmp_path / "hostfile"), "--dest", dest]
    r = yeet(*args, "--min-success", "2", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "failed=a2.hsn" in r.stdout
    assert sum(1 for h, _ in _calls(tmp_path) if h == "a2.hsn") == 3  # one try + two retries
    # the head is one of the hosts (a1, spelled a1.hsn in the hostfile): it records the failed host
    assert (tmp_path / "hosts" / "a1.hsn" / "venv" / ".yeet-failed-hosts").read_text() == "a2.hsn\n"
    run = subprocess.run([f"{tmp_path}/hosts/a3.hsn/venv/bin/hello"], capture_output=True, text=True)
    assert run.stdout.strip() == f"hello from {tmp_path}/hosts/a3.hsn/venv"
    r = yeet(*args, env=env)  # without --min-success every host must succeed
    assert r.returncode == 1
    assert "FAILED" in r.stdout


def test_a_hanging_host_times_out_and_does_not_hold_up_the_others(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data", big=100)
    (tmp_path / "hostfile").write_text("b1\nb2\nb3\n")
    env = fake_ssh(tmp_path) | {"FAKE_SSH_HANG": "b2", "AGPT_YEET_TIMEOUT_S": "10", "AGPT_YEET_RETRIES": "0"}
    dest = f"{tmp_path}/hosts/{{host}}/data"
    r = yeet(
        str(src), "--hostfile", str(tmp_path / "hostfile"), "--dest", dest, "--min-success", "2", env=env
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "timed out after 10s" in r.stdout
    assert "failed=b2" in r.stdout
    assert tree(tmp_path / "hosts" / "b3" / "data") == tree(src)


def test_ssh_without_hostfile_is_a_usage_error(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data", big=100)
    r = yeet(str(src), "--transport", "ssh", "--dest", str(tmp_path / "d"), env={"FAILOVER_HOSTFILE": ""})
    assert r.returncode == 2
    assert "--hostfile" in r.stderr
