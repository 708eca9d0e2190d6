"""Property-based: what `agpt yeet` reads back: a hostfile, the cache sidecar beside SRC, and tarballs
(truncated, bit-flipped, arbitrary).  A hostfile is hosts or one line exit 2; a sidecar never decides what is
safe; a damaged tarball is refused on one line and nothing lands outside the extraction root."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agpt.errors import AgptError
from agpt.yeet.extract import safe_extract, scan
from agpt.yeet.report import read_hostfile
from agpt.yeet.run import yeet
from agpt.yeet.settings import YeetSettings
from fuzz_util import FUZZ, FUZZ_SLOW, JSONISH_SIDECAR, one_line_exit_2, truncations


def _tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in (("a.txt", b"hello\n" * 50), ("d/b.bin", bytes(range(256)) * 4)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("d/link")
        link.type, link.linkname = tarfile.SYMTYPE, "b.bin"
        tf.addfile(link)
    return buf.getvalue()


TAR = _tar()


@FUZZ
@given(
    data=st.one_of(
        st.binary(max_size=300), st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass"))
    )
)
def test_hostfile(tmp_path_factory, data: bytes) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path_factory.mktemp("h") / "hosts"
    p.write_bytes(data)
    got = one_line_exit_2(lambda: read_hostfile(p))
    if isinstance(got, list):
        assert got and all(h and not any(c.isspace() for c in h) for h in got)
        assert len(set(got)) == len(got)


def _outside(root: Path) -> list[str]:
    """Anything in ROOT's parent other than ROOT itself (an escape)."""
    return sorted(n for n in os.listdir(root.parent) if n != root.name)


@FUZZ
@given(data=st.one_of(truncations(TAR), st.binary(max_size=2048)))
def test_damaged_tarball(tmp_path_factory, data: bytes) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("x") / "root"
    root.mkdir()
    for fn in (lambda: scan(io.BytesIO(data), "tar"), lambda: safe_extract(io.BytesIO(data), root, "tar")):
        try:
            fn()
        except AgptError as exc:
            assert "\n" not in str(exc), str(exc)
    assert _outside(root) == []
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            assert p.is_symlink() or p.is_file(), p  # no fifo, no device
            if p.is_symlink():
                assert (root / os.path.relpath(p, root)).resolve().is_relative_to(
                    root.resolve()
                ) or not p.exists()


@FUZZ_SLOW
@given(sidecar=st.one_of(st.binary(max_size=200), JSONISH_SIDECAR.map(lambda m: json.dumps(m).encode())))
def test_sidecar_never_decides_what_is_safe(tmp_path_factory, sidecar: bytes) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("y")
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w", format=tarfile.PAX_FORMAT) as tf:
        link = tarfile.TarInfo("etc")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        tf.addfile(link)
        fifo = tarfile.TarInfo("pipe")
        fifo.type = tarfile.FIFOTYPE
        tf.addfile(fifo)
    src = d / "evil.tar"
    src.write_bytes(evil.getvalue())
    st_ = src.stat()
    text = sidecar.replace(b"FINGERPRINT", f"{st_.st_size}:{st_.st_mtime_ns}:{st_.st_ino}".encode())
    (d / "evil.tar.yeet.json").write_bytes(text)
    dest = d / "out" / "dest"
    try:
        rc = yeet(YeetSettings(src=src, dest=str(dest), transport="local"), lambda _line: None)
    except AgptError as exc:
        assert exc.exit_code == 2 and "\n" not in str(exc)
        rc = 2
    assert rc != 0
    assert not os.path.lexists(dest)
