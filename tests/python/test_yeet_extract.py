"""Safe extraction and the atomic replace of DEST: what a node does with a tarball it received."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from agpt.errors import BadInput
from agpt.yeet.extract import Stage, UnsafeArchive, check_dest, safe_extract, scan
from yeet_util import entry, evil_tar, make_data, tree, yeet

EVIL = {
    "dotdot": [entry("ok.txt"), entry("../escaped.txt")],
    "absolute": [entry("/tmp/yeet-absolute-escape.txt")],
    "symlink_escape": [entry("lnk", tarfile.SYMTYPE, "../../.."), entry("lnk/escaped.txt")],
    "symlink_absolute": [entry("etc", tarfile.SYMTYPE, "/etc")],
    "write_through_link": [entry("d", tarfile.DIRTYPE), entry("d", tarfile.SYMTYPE, "/tmp"), entry("d/x")],
    "duplicate_file": [entry("twice"), entry("twice")],
    "file_over_symlink": [entry("l", tarfile.SYMTYPE, "target"), entry("l")],
    "device": [entry("null", tarfile.CHRTYPE)],
    "fifo": [entry("pipe", tarfile.FIFOTYPE)],
    "hardlink_escape": [entry("h", tarfile.LNKTYPE, "../../etc/passwd")],
    "link_chain": [
        entry("a/b", tarfile.DIRTYPE),
        entry("a/b/up", tarfile.SYMTYPE, "../.."),
        entry("out", tarfile.SYMTYPE, "a/b/up/.."),
    ],
}


@pytest.mark.parametrize("kind", sorted(EVIL))
def test_malicious_tarball_is_refused_and_dest_untouched(tmp_path: Path, kind: str) -> None:
    bad = evil_tar(tmp_path / f"{kind}.tar", EVIL[kind])
    dest = tmp_path / "out" / "dest"
    dest.mkdir(parents=True)
    (dest / "keep").write_text("old\n")
    root = tmp_path / "x"
    root.mkdir()
    with pytest.raises(UnsafeArchive), open(bad, "rb") as f:
        safe_extract(f, root, "tar")
    with pytest.raises(UnsafeArchive), open(bad, "rb") as f:
        scan(f, "tar")  # the up-front check where the tarball is read
    assert not (tmp_path / "escaped.txt").exists()
    assert not Path("/tmp/yeet-absolute-escape.txt").exists()


def test_a_tree_that_cannot_be_staged_safely_is_refused_when_packed(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data", big=10)
    (src / "passwd").symlink_to("/etc/passwd")
    r = yeet(str(src), "--dest", str(tmp_path / "out" / "data"))
    assert r.returncode == 2
    assert "cannot be staged safely" in r.stderr and "passwd" in r.stderr
    assert not (tmp_path / ".data.yeet.tar.zst").exists()


def test_cli_refuses_a_malicious_tarball_loudly(tmp_path: Path) -> None:
    bad = evil_tar(tmp_path / "evil.tar", EVIL["symlink_escape"])
    dest = tmp_path / "out" / "dest"
    dest.mkdir(parents=True)
    (dest / "keep").write_text("old\n")
    (dest / ".yeet-dest").write_text("")  # staged by an earlier yeet
    r = yeet(str(bad), "--dest", str(dest))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "points outside DEST" in lines[0]
    assert sorted(os.listdir(dest.parent)) == ["dest"]  # no dest.tmp.* left
    assert (dest / "keep").read_text() == "old\n"


def test_venv_interpreter_link_is_the_only_absolute_link_allowed(tmp_path: Path) -> None:
    ok = evil_tar(
        tmp_path / "venv.tar",
        [entry("bin", tarfile.DIRTYPE), entry("bin/python3", tarfile.SYMTYPE, sys.executable)],
    )
    root = tmp_path / "x"
    root.mkdir()
    with open(ok, "rb") as f:
        safe_extract(f, root, "tar")
    assert os.readlink(root / "bin" / "python3") == sys.executable


def test_gzip_tarball_and_plain_tarball_are_accepted(tmp_path: Path) -> None:
    src = make_data(tmp_path / "src", big=1000)
    for mode, suffix in (("w:gz", ".tar.gz"), ("w", ".tar")):
        tb = tmp_path / f"data{suffix}"
        with tarfile.open(tb, mode) as tf:
            tf.add(src, arcname=".")
        dest = tmp_path / f"out{suffix}" / "data"
        r = yeet(str(tb), "--dest", str(dest))
        assert r.returncode == 0, r.stdout + r.stderr
        assert tree(dest) == tree(src)


def test_stage_commit_replaces_dest_atomically(tmp_path: Path) -> None:
    dest = tmp_path / "p" / "dest"
    dest.mkdir(parents=True)
    (dest / "old").write_text("old")
    stage = Stage(dest).open()
    (stage.tmp / "new").write_text("new")
    assert (dest / "old").exists()  # nothing visible until commit
    stage.commit()
    assert sorted(os.listdir(dest)) == [".yeet-dest", "new"]
    assert sorted(os.listdir(dest.parent)) == ["dest"]


def test_janitor_cleans_up_after_a_killed_stager(tmp_path: Path) -> None:
    """SIGKILL halfway through a swap (old DEST moved away): the janitor puts the old DEST back."""
    dest = tmp_path / "p" / "dest"
    dest.mkdir(parents=True)
    (dest / "old").write_text("old")
    code = (
        "import os, sys, signal\n"
        "from pathlib import Path\n"
        "from agpt.yeet.extract import Stage\n"
        "s = Stage(Path(sys.argv[1])).open()\n"
        "(s.tmp / 'half').write_text('x')\n"
        "os.rename(s.dest, s.old)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "python"))
    r = subprocess.run([sys.executable, "-c", code, str(dest)], env=env, timeout=60)
    assert r.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 20
    while sorted(os.listdir(dest.parent)) != ["dest"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(os.listdir(dest.parent)) == ["dest"]
    assert (dest / "old").read_text() == "old"


def test_dest_checks(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(BadInput, match="cannot create"):
        check_dest(tmp_path / "file" / "sub" / "dest")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "dest").write_text("")
    with pytest.raises(BadInput, match="not a directory"):
        check_dest(tmp_path / "d" / "dest")
    check_dest(tmp_path / "new" / "parent" / "dest")  # a missing parent is created, owned by us
    assert (tmp_path / "new" / "parent").is_dir()
    if os.geteuid() != 0:
        with pytest.raises(BadInput, match="owned by uid 0"):
            check_dest(Path("/usr/yeet-dest"))
