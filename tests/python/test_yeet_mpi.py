"""`mpiexec -n 4 agpt yeet` on this machine (real MPI): identical trees, a relocated venv, failures."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from yeet_util import make_data, make_venv, mpiyeet, tree, yeet


def _leftovers(parent: Path) -> list[str]:
    return sorted(n for n in os.listdir(parent) if ".tmp." in n or ".old." in n)


def test_four_ranks_get_four_identical_trees(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data")
    out = tmp_path / "out"
    r = mpiyeet(4, str(src), "--dest", f"{out}/{{rank}}/data", env={"AGPT_YEET_CHUNK_MB": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    want = tree(src)
    for rank in range(4):
        assert tree(out / str(rank) / "data") == want
        assert _leftovers(out / str(rank)) == []
    assert "staged (tar) on 4/4 nodes" in r.stdout
    assert r.stdout.count("status=ok") == 4  # per-node seconds are reported
    assert "yeet: packed" in r.stdout
    # a second run reuses the cached tarball; a changed SRC is repacked, never shipped stale
    r = mpiyeet(2, str(src), "--dest", f"{out}/{{rank}}/data")
    assert "reusing" in r.stdout and r.returncode == 0
    (src / "manifest.json").write_text('{"shards": 3}\n')
    r = mpiyeet(2, str(src), "--dest", f"{out}/{{rank}}/data")
    assert "changed since" in r.stdout and r.returncode == 0
    assert (out / "1" / "data" / "manifest.json").read_text() == '{"shards": 3}\n'


def test_relocated_venv_runs_from_dest(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "venv")
    out = tmp_path / "nodes"
    r = mpiyeet(
        2, str(venv), "--dest", f"{out}/{{rank}}/venv", "--check", "python -c 'import hello; hello.main()'"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(2):
        dest = out / str(rank) / "venv"
        run = subprocess.run([str(dest / "bin" / "hello")], capture_output=True, text=True, check=True)
        assert run.stdout.strip() == f"hello from {dest}"
        assert f'VIRTUAL_ENV="{dest}"' in (dest / "bin" / "activate").read_text()
        prog = subprocess.run(
            ["bash", "-c", f"source {dest}/bin/activate && python -c 'import sys, hello; print(sys.prefix)'"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert prog.stdout.strip() == str(dest)
    assert (venv / "bin" / "hello").read_text().startswith(f"#!{venv}/bin/python")  # SRC untouched


def test_failed_check_leaves_dest_unchanged(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "venv")
    out = tmp_path / "nodes"
    r = mpiyeet(2, str(venv), "--dest", f"{out}/{{rank}}/venv", "--check", "python -c 'import torch_missing'")
    assert r.returncode == 1
    assert "--check failed" in r.stdout
    assert sorted(os.listdir(out / "0")) == []


def _seed(out: Path, n: int) -> None:
    """An older tree that yeet staged (it holds yeet's marker), on every rank."""
    for rank in range(n):
        (out / str(rank) / "data").mkdir(parents=True)
        (out / str(rank) / "data" / "old").write_text("old\n")
        (out / str(rank) / "data" / ".yeet-dest").write_text("")


def _unchanged(out: Path, n: int) -> None:
    for rank in range(n):
        assert sorted(os.listdir(out / str(rank) / "data")) == [".yeet-dest", "old"], rank
        assert _leftovers(out / str(rank)) == [], rank


def _broadcast_with_fault(tmp_path: Path, fault: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """2.5 MB broadcast in 1 MB chunks to 4 ranks that hold an older tree, with AGPT_YEET_FAULT=FAULT."""
    src = make_data(tmp_path / "data", big=2_500_000)
    out = tmp_path / "out"
    _seed(out, 4)
    env = {"AGPT_YEET_CHUNK_MB": "1", "AGPT_YEET_FAULT": fault}
    return mpiyeet(4, str(src), "--dest", f"{out}/{{rank}}/data", env=env), out


def test_corrupt_chunk_fails_loudly_and_leaves_every_dest_unchanged(tmp_path: Path) -> None:
    r, out = _broadcast_with_fault(tmp_path, "corrupt:2:1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "rank=2" in r.stdout and "FAILED" in r.stdout
    assert "DEST left unchanged" in r.stdout
    _unchanged(out, 4)


def test_killed_rank_fails_loudly_and_leaves_no_partial_dest(tmp_path: Path) -> None:
    r, out = _broadcast_with_fault(tmp_path, "kill:1:1")
    assert r.returncode != 0
    assert "kill on rank 1" in r.stderr
    import time

    deadline = time.monotonic() + 20  # the janitors run just after the ranks die
    while any(_leftovers(out / str(k)) for k in range(4)) and time.monotonic() < deadline:
        time.sleep(0.1)
    _unchanged(out, 4)


def test_min_success_continues_and_records_failed_hosts(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data", big=2_500_000)
    out = tmp_path / "out"
    hostfile = tmp_path / "hosts"
    hostfile.write_text("n0.cluster\nn1.cluster\nn2.cluster\nn3.cluster\n")
    env = {"AGPT_YEET_CHUNK_MB": "1", "AGPT_YEET_FAULT": "corrupt:2:1"}
    args = [str(src), "--dest", f"{out}/{{rank}}/data", "--min-success", "0.75", "--hostfile", str(hostfile)]
    r = mpiyeet(4, *args, env=env, hosts=["n0", "n1", "n2", "n3"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "failed=n2.cluster" in r.stdout
    for rank in (0, 1, 3):
        assert (out / str(rank) / "data" / ".yeet-failed-hosts").read_text() == "n2.cluster\n"
    assert not (out / "2" / "data").exists()
    assert _leftovers(out / "2") == []


def test_several_ranks_per_node_without_rank_in_dest_is_refused(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data", big=1000)
    r = mpiyeet(2, str(src), "--dest", str(tmp_path / "shared" / "data"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "same node" in lines[0] and "{rank}" in lines[0]


def test_copy_and_rsync_modes_stage_the_same_tree(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data", big=1000)
    for mode in ("copy", "rsync"):
        r = mpiyeet(2, str(src), "--mode", mode, "--dest", f"{tmp_path}/{mode}/{{rank}}/data")
        assert r.returncode == 0, r.stdout + r.stderr
        assert tree(tmp_path / mode / "1" / "data") == tree(src)


def test_bad_inputs_exit_2_with_one_line(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data", big=1000)
    (tmp_path / "file").write_text("")
    unreadable = tmp_path / "secret"
    unreadable.mkdir(mode=0o000)
    cases = [
        ([str(tmp_path / "missing"), "--dest", str(tmp_path / "d")], "SRC"),
        ([str(src), "--dest", str(tmp_path / "file" / "d")], "--dest"),
        ([str(src), "--transport", "ssh", "--dest", str(tmp_path / "d")], "--hostfile"),
        ([str(src), "--min-success", "lots"], "--min-success"),
        ([str(src), "--mode", "scp"], "--mode"),
        ([str(tmp_path / "file"), "--dest", str(tmp_path / "d")], "SRC"),
    ]
    if os.geteuid() != 0:
        cases.append(([str(unreadable), "--dest", str(tmp_path / "d")], "SRC"))
    for args, word in cases:
        r = yeet(*args, env={"FAILOVER_HOSTFILE": ""})
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and word in lines[0], (args, r.stderr)
    unreadable.chmod(0o700)
