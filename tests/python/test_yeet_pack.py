"""Packing once (cache, fingerprint) and venv relocation."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from agpt.yeet.pack import fingerprint, resolve_source, sniff
from agpt.yeet.relocate import MAX_SHEBANG, old_prefix, relocate
from yeet_util import make_data, make_venv, tree, yeet


def test_pack_is_cached_beside_src_and_repacked_when_src_changes(tmp_path: Path) -> None:
    src = make_data(tmp_path / "w" / "data", big=5000)
    first = resolve_source(src)
    assert first.packed and first.path == src.parent / ".data.yeet.tar.zst"
    assert sniff(first.path.read_bytes()[:4]) == "zstd"
    assert sorted(os.listdir(src.parent)) == [
        ".data.yeet.json",
        ".data.yeet.tar.zst",
        "data",
    ]  # no temp names
    again = resolve_source(src)
    assert not again.packed and again.sha256 == first.sha256
    time.sleep(0.01)
    (src / "shards" / "b.idx").write_bytes(b"changed")
    changed = resolve_source(src)
    assert changed.packed and changed.sha256 != first.sha256


def test_python_packer_fallback_makes_the_same_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without GNU tar the tarball is written by Python's tarfile, with the same checks."""
    src = make_data(tmp_path / "w" / "data", big=2000)
    monkeypatch.setenv("AGPT_YEET_PACKER", "python")
    tb = resolve_source(src)
    assert tb.packed and tb.members == 7
    r = yeet(str(tb.path), "--dest", str(tmp_path / "out" / "data"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert tree(tmp_path / "out" / "data") == tree(src)


def test_fingerprint_sees_content_metadata_and_links(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data", big=10)
    fp = fingerprint(src)
    (src / "run.sh").chmod(0o644)
    assert fingerprint(src) != fp
    fp = fingerprint(src)
    (src / "latest").unlink()
    (src / "latest").symlink_to("manifest.json")
    assert fingerprint(src) != fp


def test_tarball_src_digest_is_recorded_and_reused(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data", big=100)
    tb = resolve_source(src)
    copy = tmp_path / "shipped.tar.zst"
    copy.write_bytes(tb.path.read_bytes())
    got = resolve_source(copy)
    assert got.sha256 == tb.sha256 and got.compression == "zstd"
    assert (tmp_path / "shipped.tar.zst.yeet.json").is_file()
    r = yeet(str(copy), "--dest", str(tmp_path / "out" / "data"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert tree(tmp_path / "out" / "data") == tree(src)


def test_relocate_rewrites_activate_cfg_and_shebangs(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "v")
    assert old_prefix(venv) == str(venv)
    long_dest = "/tmp/" + "x" * MAX_SHEBANG + "/venv"
    assert relocate(venv, long_dest) >= 3
    assert f'VIRTUAL_ENV="{long_dest}"' in (venv / "bin" / "activate").read_text()
    assert long_dest in (venv / "pyvenv.cfg").read_text().split("command =")[1]
    script = (venv / "bin" / "hello").read_text()
    assert script.startswith("#!/bin/sh\n'''exec' \"" + long_dest + '/bin/python"')
    assert os.access(venv / "bin" / "hello", os.X_OK)
    # the sh trampoline still runs the script (through the interpreter we point it at)
    (venv / "bin" / "hello").write_text(script.replace(long_dest, str(venv)))
    out = subprocess.run([str(venv / "bin" / "hello")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"hello from {venv}"
