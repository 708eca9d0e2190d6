"""Pack a directory once into a zstd tarball, cached beside it and reused only while it is still current.

Why a tarball: the shared filesystem then sees one sequential read instead of one open/stat per file per
node.  Why a fingerprint: a venv changes (a `pip install`, a new `__pycache__`), and shipping a stale tarball
silently would stage the wrong environment on every node, so the cache records a digest of every entry's path,
type, mode, size, mtime and link target, and is repacked whenever that digest differs.  Writes go to a
temporary name that is renamed into place, so a crash or a concurrent packer never leaves a half tarball
under the cached name.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

from agpt import safewrite
from agpt.digest import file_sha256
from agpt.errors import AgptError, BadInput
from agpt.yeet import gnutar

MAGIC_ZSTD = b"\x28\xb5\x2f\xfd"
MAGIC_GZIP = b"\x1f\x8b"
META_FORMAT = 2  # 2: the tarball was validated (members counted) when it was made or hashed
READ_CHUNK = 1 << 20

Progress = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


@dataclass(kw_only=True, slots=True)
class Tarball:
    """A tarball ready to ship: where it is, how big, its sha256 and how it is compressed."""

    path: Path
    size: int
    sha256: str
    compression: str  # "zstd", "gzip" or "tar"
    packed: bool = False  # True when this run (re)packed it
    members: int = 0  # entries, counted when it was validated


def sniff(head: bytes) -> str:
    """The compression of a tarball from its first bytes (zstd, gzip, or plain tar)."""
    if head.startswith(MAGIC_ZSTD):
        return "zstd"
    if head.startswith(MAGIC_GZIP):
        return "gzip"
    return "tar"


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under root (not root itself), sorted, without following symlinks."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=_raise):
        dirnames.sort()
        base = Path(dirpath)
        rel_base = base.relative_to(root)
        for name in sorted([*dirnames, *filenames]):
            path = base / name
            rel = str(rel_base / name) if str(rel_base) != "." else name
            try:
                yield rel, path.lstat()
            except OSError as exc:
                raise BadInput(f"SRC {root}: cannot read {path}: {exc.strerror}") from exc


def _raise(exc: OSError) -> None:
    raise BadInput(f"SRC: cannot read {exc.filename}: {exc.strerror}") from exc


def fingerprint(root: Path, *, times: bool = True) -> str:
    """A digest of the tree's metadata: cheap (stat only) and it changes whenever a file does.

    Without TIMES it compares a copy with its source (paths, types, modes, sizes, link targets).
    """
    return _fingerprint(root, times=times)[0]


def _fingerprint(root: Path, *, times: bool = True) -> tuple[str, int]:
    """fingerprint() and the bytes of the tree's regular files (the pack's progress total), in one walk."""
    h = hashlib.sha256()
    total = 0
    for rel, st in _walk(root):
        link = os.readlink(root / rel) if stat.S_ISLNK(st.st_mode) else ""
        size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        total += size
        mtime = st.st_mtime_ns if times and not stat.S_ISDIR(st.st_mode) else 0
        h.update(f"{rel}\0{st.st_mode:o}\0{size}\0{mtime}\0{link}\n".encode(errors="surrogateescape"))
    return h.hexdigest(), total


class _HashingWriter:
    """A write-only file that counts and hashes what passes through, so packing reads nothing twice."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        self.raw.write(data)
        return len(data)

    def flush(self) -> None:
        self.raw.flush()


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Owners mean nothing on another node (extraction ignores them); drop them so tarballs compare."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


class _Tee:
    """A read-only file that hands every byte it reads to WRITE as well (parse and compress in one pass)."""

    def __init__(self, src: IO[bytes], write: Callable[[bytes], object]) -> None:
        self.src = src
        self.write = write

    def read(self, n: int = -1) -> bytes:
        data = self.src.read(n)
        if data:
            self.write(data)
        return data


def _gnu_tar(
    src: Path,
    sink: BinaryIO,
    admit: Callable[[tarfile.TarInfo], object],
    tick: Callable[[int], object],
) -> int:
    """Archive SRC with GNU tar (C reads the files); every header is checked as it streams past."""
    import subprocess

    def failed(rc: int, line: str) -> Exception:
        return BadInput(f"SRC {src}: tar exit {rc}: {line}")

    argv = ["tar", "-C", str(src), "-cf", "-", "--format=gnu", "--sort=name", "--numeric-owner"]
    argv += ["--owner=0", "--group=0", "."]
    n = 0
    with gnutar.running(argv, failed, stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        tee = _Tee(proc.stdout, sink.write)
        with tarfile.open(fileobj=tee, mode="r|", bufsize=READ_CHUNK) as tf:  # type: ignore[call-overload]
            for m in tf:
                admit(m)
                n += 1
                tick(m.size if m.isreg() else 0)
        while tee.read(READ_CHUNK):
            pass
    return n


def pack(
    src: Path, out: Path, *, level: int = 3, progress: Progress = _quiet, total: int | None = None
) -> tuple[int, str, int]:
    """Write SRC's tree as a zstd tarball to OUT (via a temporary name); return (size, sha256, members).

    Every entry passes the same checks a node applies when extracting, so a tree that could not be staged
    safely (an absolute symlink, a device file) is refused here, once, before anything is shipped.  A bar
    (or a line every few seconds) on stderr counts the files' bytes against TOTAL.
    """
    import zstandard

    from agpt.progress import Progress as Bar
    from agpt.yeet.extract import UnsafeArchive, _Guard

    guard = _Guard(Path("/"))

    def admit(info: tarfile.TarInfo) -> tarfile.TarInfo:
        try:
            guard.check(info)
        except UnsafeArchive as exc:
            raise BadInput(f"SRC {src}: cannot be staged safely: {exc}") from exc
        return _anonymous(info)

    t0 = time.monotonic()
    nfiles = 0
    bar = Bar(total, "yeet: pack", unit="B", scale=True)
    hw = _HashingWriter(io.BytesIO())

    def fill(raw: BinaryIO) -> None:  # into a temporary name of its own beside OUT (agpt.safewrite)
        nonlocal hw, nfiles
        with bar:
            hw = _HashingWriter(raw)
            cctx = zstandard.ZstdCompressor(level=level, threads=-1, write_checksum=True)
            with cctx.stream_writer(hw, closefd=False) as zw:  # type: ignore[arg-type]
                if shutil.which("tar") and os.environ.get("AGPT_YEET_PACKER", "tar") == "tar":
                    nfiles = _gnu_tar(src, zw, admit, bar.update)
                else:
                    with tarfile.open(
                        fileobj=zw, mode="w|", format=tarfile.GNU_FORMAT, bufsize=READ_CHUNK
                    ) as tf:
                        for rel, st in _walk(src):
                            try:
                                tf.add(src / rel, arcname=rel, recursive=False, filter=admit)
                            except OSError as exc:
                                raise BadInput(f"SRC {src}: cannot read {src / rel}: {exc.strerror}") from exc
                            nfiles += 1
                            bar.update(st.st_size if stat.S_ISREG(st.st_mode) else 0)
        try:
            guard.finish()
        except UnsafeArchive as exc:
            raise BadInput(f"SRC {src}: cannot be staged safely: {exc}") from exc

    safewrite.replace_with(out, fill)
    progress(f"yeet: packed {src} files={nfiles} bytes={hw.size} seconds={time.monotonic() - t0:.1f}")
    return hw.size, hw.hash.hexdigest(), guard.count


def cache_paths(src: Path) -> tuple[Path, Path]:
    """(tarball, meta) for a directory: beside it, else in AGPT_YEET_CACHE (~/.cache/agpt/yeet)."""
    real = src.resolve()
    parent = real.parent
    if os.environ.get("AGPT_YEET_CACHE") or not os.access(parent, os.W_OK | os.X_OK):
        cache = Path(os.environ.get("AGPT_YEET_CACHE") or Path.home() / ".cache" / "agpt" / "yeet")
        cache.mkdir(parents=True, exist_ok=True)
        key = hashlib.sha256(str(real).encode()).hexdigest()[:16]
        base = cache / f"{real.name}-{key}"
        return base.with_name(base.name + ".tar.zst"), base.with_name(base.name + ".json")
    return parent / f".{real.name}.yeet.tar.zst", parent / f".{real.name}.yeet.json"


def _read_meta(path: Path) -> dict[str, object]:
    """A cache sidecar, or {} when it is missing or malformed (then SRC is hashed again).  It only ever
    saves a re-hash: extraction checks every member whatever it says."""
    try:
        meta = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        return {}
    sha = meta.get("sha256")
    if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
        return {}
    for key in ("members", "size"):
        if key in meta and not (type(meta[key]) is int and meta[key] >= 0):
            return {}
    if not isinstance(meta.get("fingerprint"), str):
        return {}
    return meta


def _write_meta(path: Path, meta: dict[str, object]) -> None:
    try:
        safewrite.replace(path, json.dumps(meta, sort_keys=True) + "\n", sync=False)
    except OSError:
        pass  # a read-only cache only costs a re-hash next time


def resolve_source(src: Path, *, progress: Progress = _quiet) -> Tarball:
    """SRC (a directory or a tarball) as a Tarball, packing or re-hashing only when needed."""
    try:
        st = src.stat()
    except OSError as exc:
        raise BadInput(f"SRC {src}: {exc.strerror}") from exc
    if stat.S_ISDIR(st.st_mode):
        if not os.access(src, os.R_OK | os.X_OK):
            raise BadInput(f"SRC {src}: directory is not readable")
        return _directory(src, progress)
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"SRC {src}: neither a directory nor a tarball")
    try:
        with open(src, "rb") as f:
            head = f.read(512)
    except OSError as exc:
        raise BadInput(f"SRC {src}: {exc.strerror}") from exc
    compression = sniff(head)
    if compression == "tar" and head[257:262] != b"ustar":
        raise BadInput(f"SRC {src}: neither a directory nor a tar/zstd/gzip tarball")
    meta_path = src.with_name(src.name + ".yeet.json")
    key = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
    meta = _read_meta(meta_path)
    if meta.get("fingerprint") == key and isinstance(meta.get("sha256"), str) and meta.get("validated"):
        digest = str(meta["sha256"])
        members = int(str(meta.get("members", 0)))
    else:
        from agpt.yeet.extract import UnsafeArchive, scan

        progress(f"yeet: hashing and validating {src} bytes={st.st_size}")
        digest = file_sha256(src)
        try:
            with open(src, "rb") as f:
                members, _nbytes = scan(f, compression)
        except UnsafeArchive as exc:
            raise BadInput(f"SRC {src}: refused: {exc}") from exc
        except AgptError as exc:
            raise BadInput(f"SRC {src}: {exc}") from exc
        meta = {
            "format": META_FORMAT,
            "fingerprint": key,
            "sha256": digest,
            "members": members,
            "validated": True,
        }
        _write_meta(meta_path, meta)
    return Tarball(path=src, size=st.st_size, sha256=digest, compression=compression, members=members)


def _directory(src: Path, progress: Progress) -> Tarball:
    tar_path, meta_path = cache_paths(src)
    fp, nbytes = _fingerprint(src)
    meta = _read_meta(meta_path)
    if meta.get("fingerprint") == fp and tar_path.is_file():
        size = tar_path.stat().st_size
        if size == meta.get("size") and isinstance(meta.get("sha256"), str):
            progress(f"yeet: reusing {tar_path} (fingerprint matches)")
            members = int(str(meta.get("members", 0)))
            return Tarball(
                path=tar_path, size=size, sha256=str(meta["sha256"]), compression="zstd", members=members
            )
    elif meta:
        progress(f"yeet: {src} changed since {tar_path} was packed; repacking")
    size, digest, members = pack(src, tar_path, progress=progress, total=nbytes)
    if fingerprint(src) != fp:
        tar_path.unlink(missing_ok=True)
        raise BadInput(f"SRC {src}: changed while it was being packed; run again when it is quiet")
    _write_meta(
        meta_path,
        {
            "format": META_FORMAT,
            "fingerprint": fp,
            "sha256": digest,
            "size": size,
            "members": members,
            "src": str(src.resolve()),
        },
    )
    return Tarball(path=tar_path, size=size, sha256=digest, compression="zstd", packed=True, members=members)
