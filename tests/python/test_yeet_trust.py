"""What `agpt yeet` trusts: no cache file beside SRC switches the member checks off, and no DEST holding
someone's data (or SRC itself) is ever replaced."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest
import zstandard

from agpt.digest import file_sha256
from agpt.yeet.pack import META_FORMAT, cache_paths, fingerprint
from yeet_util import entry, evil_tar, make_data, yeet

EVIL = [
    entry("ok.txt"),
    entry("lnk", tarfile.SYMTYPE, "../../.."),
    entry("lnk/escaped.txt"),
    entry("pipe", tarfile.FIFOTYPE),
    entry("null", tarfile.CHRTYPE),
]
# What GNU tar itself extracts without a murmur: a fifo and a link out of DEST.
QUIET = [entry("ok.txt"), entry("pipe", tarfile.FIFOTYPE), entry("etc", tarfile.SYMTYPE, "/etc")]
REFUSED = ("points outside DEST", "device, fifo or special file")


def forge_tar_sidecar(tar: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> None:
    """The sidecar an earlier run would have written had it validated TAR (fingerprint, digest, verdict)."""
    st = tar.stat()
    meta = {
        "format": META_FORMAT,
        "fingerprint": f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}",
        "sha256": file_sha256(tar),
        "members": len(members),
        "validated": True,
    }
    tar.with_name(tar.name + ".yeet.json").write_text(json.dumps(meta))


def assert_nothing_escaped(tmp_path: Path, dest: Path) -> None:
    assert not os.path.lexists(dest), sorted(os.listdir(dest))
    assert not list(tmp_path.rglob("escaped.txt"))
    leftovers = [p for p in tmp_path.rglob("*") if p.is_fifo() or p.is_char_device()]
    assert leftovers == []


@pytest.mark.parametrize("members", [EVIL, QUIET], ids=["escape", "quiet"])
def test_a_forged_sidecar_beside_a_tarball_does_not_skip_the_member_checks(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]]
) -> None:
    bad = evil_tar(tmp_path / "evil.tar", members)
    forge_tar_sidecar(bad, members)
    dest = tmp_path / "out" / "dest"
    r = yeet(str(bad), "--dest", str(dest))
    assert r.returncode != 0, r.stdout
    assert any(why in r.stdout + r.stderr for why in REFUSED), r.stdout
    assert "Traceback" not in r.stderr
    assert_nothing_escaped(tmp_path, dest)


@pytest.mark.parametrize("members", [EVIL, QUIET], ids=["escape", "quiet"])
def test_a_forged_cache_beside_a_directory_does_not_skip_the_member_checks(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]]
) -> None:
    src = make_data(tmp_path / "data", big=10)
    tar_path, meta_path = cache_paths(src)
    raw = evil_tar(tmp_path / "raw.tar", members).read_bytes()
    tar_path.write_bytes(zstandard.ZstdCompressor().compress(raw))
    meta = {
        "format": META_FORMAT,
        "fingerprint": fingerprint(src),
        "sha256": file_sha256(tar_path),
        "size": tar_path.stat().st_size,
        "members": len(members),
        "src": str(src.resolve()),
    }
    meta_path.write_text(json.dumps(meta))
    dest = tmp_path / "out" / "dest"
    r = yeet(str(src), "--dest", str(dest))
    assert r.returncode != 0, r.stdout
    assert any(why in r.stdout + r.stderr for why in REFUSED), r.stdout
    assert_nothing_escaped(tmp_path, dest)


@pytest.mark.parametrize("where", ["equal", "parent", "grandparent"])
def test_a_dest_that_holds_src_is_refused_and_src_survives(tmp_path: Path, where: str) -> None:
    src = make_data(tmp_path / "top" / "mid" / "data", big=10)
    dest = {"equal": src, "parent": src.parent, "grandparent": src.parent.parent}[where]
    (dest / ".yeet-dest").write_text("")  # even a tree yeet made once may not swallow SRC
    before = sorted(p.name for p in src.rglob("*"))
    r = yeet(str(src), "--dest", str(dest))
    assert r.returncode == 2, r.stdout
    assert r.stderr.startswith(f"agpt: error: --dest {dest}: holds SRC") and len(r.stderr.splitlines()) == 1
    assert sorted(p.name for p in src.rglob("*")) == before


def test_dest_root_is_refused(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data", big=10)
    r = yeet(str(src), "--dest", "/")
    assert r.returncode == 2
    assert "--dest /: refusing to replace the root directory" in r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_a_non_empty_dest_yeet_did_not_make_is_refused_and_kept(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data", big=10)
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "thesis.tex").write_text("years of work\n")
    r = yeet(str(src), "--dest", str(dest))
    assert r.returncode == 2
    assert "exists, is not empty and was not made by agpt yeet" in r.stderr
    assert (dest / "thesis.tex").read_text() == "years of work\n"


def test_an_empty_dest_and_a_tree_yeet_made_are_replaced(tmp_path: Path) -> None:
    src = make_data(tmp_path / "data", big=10)
    dest = tmp_path / "stage"
    dest.mkdir()
    r = yeet(str(src), "--dest", str(dest))
    assert r.returncode == 0, r.stderr
    assert (dest / ".yeet-dest").is_file()
    (src / "new.txt").write_text("second\n")
    r = yeet(str(src), "--dest", str(dest))
    assert r.returncode == 0, r.stderr
    assert (dest / "new.txt").read_text() == "second\n"


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1e3", "99999"])
def test_a_bad_chunk_size_is_one_line(tmp_path: Path, value: str) -> None:
    src = make_data(tmp_path / "data", big=10)
    r = yeet(str(src), "--dest", str(tmp_path / "d"), env={"AGPT_YEET_CHUNK_MB": value})
    assert r.returncode == 2
    assert r.stderr.startswith("agpt: error: AGPT_YEET_CHUNK_MB") and len(r.stderr.splitlines()) == 1
