"""Safe streaming extraction into `DEST.tmp.<id>`, and the atomic replace of DEST.

Why so careful: a tarball is input from the filesystem, and it is unpacked on every node of a job, often as a
user whose home and keys sit on the same machine.  So the whole archive is refused (not just the bad member)
when an entry has an absolute path or `..`, is a device or fifo, would be written through a symlink, or is a
link that points outside the tree (also through other links).  The one exception is the interpreter link a
venv's `bin/python*` holds to its base Python, without which no venv works.

Where the checks run: `scan` validates a whole tarball where it is read (rank 0, the ssh head, or while
packing), so a bad SRC is refused before anything is shipped.  And every node checks again as it extracts:
the stream goes through a gate, each header checked here before `tar` is given its bytes.  The second check
is never skipped: a verdict cached in a sidecar file beside SRC is not evidence, anyone who can write there
can forge it.

Why a temporary tree and a janitor: a node must end with either the old DEST or the complete new one.  The tree
is built in `DEST.tmp.<id>`, verified, then swapped in with two renames.  A small `sh` process (the janitor,
in its own session so a launcher's kill of our process group misses it) waits on a pipe; if this process dies
without saying "done" (SIGKILL, a launcher tearing the job down), the janitor puts the old DEST back if it was
moved away and deletes the temporary trees.
"""

from __future__ import annotations

import io
import os
import posixpath
import queue
import re
import shutil
import socket
import stat
import subprocess
import tarfile
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

from agpt import safewrite
from agpt.errors import AgptError, BadInput
from agpt.ours import ours_or_empty
from agpt.yeet import gnutar

INTERPRETER_LINK = re.compile(r"^(bin|Scripts)/(python|pypy)[0-9.]*$")
COPY_BUF = 1 << 20
STREAM_BUF = 64 << 10  # tarfile slices its stream buffer per header: keep it small

JANITOR = r"""
IFS= read -r verdict || verdict=
[ "$verdict" = done ] && exit 0
if [ ! -e "$1" ] && [ ! -L "$1" ] && [ -d "$3" ]; then mv -- "$3" "$1"; fi
rm -rf -- "$2" "$3"
"""


class UnsafeArchive(AgptError):
    """The tarball holds an entry that could write outside DEST or create a device: refused whole."""


MARKER = ".yeet-dest"  # written into every tree yeet swaps in: a non-empty DEST without it is not ours


def check_dest_src(dest: Path, src: Path | None) -> None:
    """Refuse a DEST whose replacement would delete SRC or everything: `/`, SRC itself, or a folder above it."""
    real = Path(os.path.realpath(dest))
    if real.parent == real:
        raise BadInput(f"--dest {dest}: refusing to replace the root directory")
    if src is not None:
        s = Path(os.path.realpath(src))
        if real == s or real in s.parents:
            raise BadInput(
                f"--dest {dest}: holds SRC {src}; replacing it would delete SRC (choose another folder)"
            )


def check_dest(dest: Path, src: Path | None = None) -> None:
    """Refuse a DEST we could not safely replace; create its parent when missing.

    Replacing DEST deletes what was in it, so a DEST that exists must be a tree yeet made (it holds MARKER)
    or empty; anything else is someone's data."""
    check_dest_src(dest, src)
    parent = dest.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--dest {dest}: cannot create {parent}: {exc.strerror}") from exc
    euid = os.geteuid()
    lst = os.lstat(parent)
    if stat.S_ISLNK(lst.st_mode) and lst.st_uid != euid:
        raise BadInput(f"--dest {dest}: parent {parent} is a symlink owned by uid {lst.st_uid}, not by you")
    st = os.stat(parent)
    if not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"--dest {dest}: parent {parent} is not a directory")
    if st.st_uid != euid:
        raise BadInput(
            f"--dest {dest}: parent {parent} is owned by uid {st.st_uid}, not by you; use a folder you own"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BadInput(f"--dest {dest}: parent {parent} is not writable")
    if os.path.lexists(dest) and (dest.is_symlink() or not dest.is_dir()):
        raise BadInput(f"--dest {dest}: exists and is not a directory")
    if os.path.lexists(dest):
        try:
            ours = ours_or_empty(dest, MARKER)
        except OSError as exc:
            raise BadInput(f"--dest {dest}: cannot read it ({exc.strerror})") from None
        if not ours:
            raise BadInput(
                f"--dest {dest}: exists, is not empty and was not made by agpt yeet (no {MARKER}); "
                "it would be deleted: remove it yourself or choose another folder"
            )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_stale(dest: Path) -> None:
    """Remove temporary trees that a dead process on this host left beside DEST."""
    host = socket.gethostname()
    pattern = re.compile(rf"^{re.escape(dest.name)}\.(tmp|old)\.{re.escape(host)}\.(\d+)$")
    try:
        names = os.listdir(dest.parent)
    except OSError:
        return
    for name in names:
        m = pattern.match(name)
        if not m or _pid_alive(int(m.group(2))):
            continue
        path = dest.parent / name
        if m.group(1) == "old" and not os.path.lexists(dest):
            os.rename(path, dest)  # a swap died half way: the old tree is the last good one
        else:
            shutil.rmtree(path, ignore_errors=True)


class Stage:
    """One node's `DEST.tmp.<id>`: open, fill, then commit (atomic replace) or abort (no trace)."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.id = f"{socket.gethostname()}.{os.getpid()}"
        self.tmp = dest.with_name(f"{dest.name}.tmp.{self.id}")
        self.old = dest.with_name(f"{dest.name}.old.{self.id}")
        self._janitor: subprocess.Popen[bytes] | None = None
        self.done = False

    def open(self) -> Stage:
        reap_stale(self.dest)
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.mkdir(self.tmp, 0o700)
        self._janitor = subprocess.Popen(
            ["sh", "-c", JANITOR, "yeet-janitor", str(self.dest), str(self.tmp), str(self.old)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return self

    def commit(self) -> None:
        """Swap the finished tree in: rename the old DEST away, rename the new one in, remove the old."""
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.tmp, 0o777 & ~umask)
        note = "made by agpt yeet: replaced as a whole by the next yeet\n"
        safewrite.replace(self.tmp / MARKER, note, sync=False)
        moved = False
        if os.path.lexists(self.dest):
            os.rename(self.dest, self.old)
            moved = True
        try:
            os.rename(self.tmp, self.dest)
        except OSError:
            if moved:
                os.rename(self.old, self.dest)
            raise
        shutil.rmtree(self.old, ignore_errors=True)
        self._release()

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        if not os.path.lexists(self.dest) and os.path.isdir(self.old):
            os.rename(self.old, self.dest)
        self._release()

    def _release(self) -> None:
        self.done = True
        j = self._janitor
        if j is not None and j.stdin is not None:
            try:
                j.stdin.write(b"done\n")
                j.stdin.close()
            except OSError:
                pass
            j.wait()
        self._janitor = None

    def __enter__(self) -> Stage:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.done:
            self.abort()


class QueueReader(io.RawIOBase):
    """A file fed by another thread: items are (memoryview, release) pairs; None ends the stream.

    `release` is called once a chunk is fully consumed, so the producer can reuse its buffer.
    """

    def __init__(self, q: queue.Queue[tuple[memoryview, Callable[[], None]] | None]) -> None:
        super().__init__()
        self.q = q
        self.cur = memoryview(b"")
        self.pos = 0
        self.eof = False
        self._release: Callable[[], None] | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while self.pos >= len(self.cur):
            if self._release is not None:
                self._release()
                self._release = None
            if self.eof:
                return 0
            item = self.q.get()
            if item is None:
                self.eof = True
                self.cur, self.pos = memoryview(b""), 0
                return 0
            self.cur, self._release = item
            self.pos = 0
        n = min(len(b), len(self.cur) - self.pos)
        b[:n] = self.cur[self.pos : self.pos + n]
        self.pos += n
        return n

    def drain(self) -> None:
        """Consume the rest of the stream (after an error), releasing every buffer."""
        buf = bytearray(COPY_BUF)
        while self.readinto(buf):
            pass


def _normalize(name: str) -> str:
    if name.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", name):
        raise UnsafeArchive(f"absolute path {name!r}")
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"path with '..' {name!r}")
    return "/".join(parts)


class _Guard:
    """Checks each member before anything is written, against a model of the tree built so far.

    The staging folder starts empty and only this archive writes into it, so the names already extracted
    say exactly what is on disk: no `lstat` per member, and the same checks hold whichever backend writes.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.kinds: dict[str, str] = {"": "d"}  # rel -> d(ir), f(ile), l(ink)
        self.targets: dict[str, str] = {}  # symlink rel -> its target
        self.count = 0
        self.nbytes = 0

    def _parents_are_dirs(self, rel: str, what: str) -> None:
        parent = posixpath.dirname(rel)
        while parent:
            kind = self.kinds.get(parent)
            if kind == "d":
                return  # its own parents were checked when it was added
            if kind is not None:
                raise UnsafeArchive(f"{what} {rel!r} goes through {parent!r}, which is not a directory")
            parent = posixpath.dirname(parent)

    def check(self, m: tarfile.TarInfo) -> str:
        rel = _normalize(m.name)
        if not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
            raise UnsafeArchive(f"device, fifo or special file {m.name!r}")
        if m.mode & 0o6000 and not m.isdir():
            raise UnsafeArchive(f"setuid/setgid file {m.name!r}")
        if rel == "":
            if not m.isdir():
                raise UnsafeArchive(f"entry {m.name!r} would replace the destination itself")
            return rel
        self._parents_are_dirs(rel, "entry")
        seen = self.kinds.get(rel)
        if seen is not None and not (seen == "d" and m.isdir()):
            raise UnsafeArchive(f"entry {m.name!r} appears twice (a second copy could write through a link)")
        if m.issym():
            link = m.linkname
            if link.startswith("/"):
                if not INTERPRETER_LINK.match(rel):
                    raise UnsafeArchive(f"symlink {m.name!r} -> {link!r} points outside DEST")
            else:
                resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), link))
                if resolved == ".." or resolved.startswith("../") or "\\" in link:
                    raise UnsafeArchive(f"symlink {m.name!r} -> {link!r} points outside DEST")
            self.targets[rel] = link
        if m.islnk():
            link_rel = _normalize(m.linkname)
            if self.kinds.get(link_rel) != "f":
                raise UnsafeArchive(
                    f"hard link {m.name!r} -> {m.linkname!r}: not a file earlier in the archive"
                )
        self.kinds[rel] = "d" if m.isdir() else "l" if m.issym() else "f"
        self.count += 1
        self.nbytes += m.size if m.isreg() else 0
        return rel

    def _escapes(self, link: str) -> bool:
        """Resolve LINK the way the kernel would, through the links of this tree; True if it leaves it."""
        cur = [c for c in posixpath.dirname(link).split("/") if c]
        parts = deque(self.targets[link].split("/"))
        hops = 0
        while parts:
            p = parts.popleft()
            if p in ("", "."):
                continue
            if p == "..":
                if not cur:
                    return True
                cur.pop()
                continue
            here = "/".join([*cur, p])
            target = self.targets.get(here)
            if target is None:
                cur.append(p)
                continue
            hops += 1
            if hops > 40 or target.startswith("/"):
                return True  # a loop, or through an interpreter link to the base Python
            parts.extendleft(reversed(target.split("/")))
        return False

    def finish(self) -> None:
        """After the last member: a link through links can fool the per-member lexical check."""
        for link in self.targets:
            if not INTERPRETER_LINK.match(link) and self._escapes(link):
                raise UnsafeArchive(f"symlink {link!r} -> {self.targets[link]!r} resolves outside DEST")


def decompressed(raw: IO[bytes], compression: str) -> IO[bytes]:
    """The tar bytes of RAW (zstd via zstandard, gzip via the gzip module, plain tar as is)."""
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, read_size=COPY_BUF)  # type: ignore[no-any-return]
    if compression == "gzip":
        import gzip

        return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))
    return raw


def open_tar_stream(raw: IO[bytes], compression: str) -> tarfile.TarFile:
    """A stream-mode TarFile over RAW."""
    return tarfile.open(fileobj=decompressed(raw, compression), mode="r|", bufsize=STREAM_BUF)


class _Gate(io.RawIOBase):
    """Feeds tarfile while holding back every byte that has not been validated yet; validated bytes go on
    to SINK (the `tar` process).  So `tar` never sees a header this module has not accepted."""

    def __init__(self, src: IO[bytes], sink: IO[bytes]) -> None:
        super().__init__()
        self.src = src
        self.sink = sink
        self.buf = bytearray()
        self.base = 0  # stream offset of buf[0]
        self.end = 0  # stream offset read so far
        self.ok_until = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self.src.read(n if n and n > 0 else COPY_BUF)
        self.buf += data
        self.end += len(data)
        self._flush()
        return data

    def allow(self, upto: int) -> None:
        self.ok_until = max(self.ok_until, upto)
        self._flush()

    def _flush(self) -> None:
        k = min(self.ok_until, self.end) - self.base
        if k > 0:
            self.sink.write(self.buf[:k])
            del self.buf[:k]
            self.base += k


def _tar_extract(raw: IO[bytes], root: Path, compression: str, guard: _Guard) -> None:
    """Validate every header here, let GNU tar (C, another core) do the writing."""

    def failed(rc: int, line: str) -> Exception:
        return AgptError(f"tar failed (exit {rc}): {line}")

    with gnutar.running(
        ["tar", "-x", "-f", "-", "-C", str(root), *TAR_FLAGS], failed, stdin=subprocess.PIPE
    ) as proc:
        assert proc.stdin is not None
        gate = _Gate(decompressed(raw, compression), proc.stdin)
        with tarfile.open(fileobj=gate, mode="r|", bufsize=STREAM_BUF) as tf:
            for m in tf:
                guard.check(m)
                size = -(-m.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE if m.isreg() else 0
                gate.allow(m.offset_data + size)
        gate.allow(1 << 62)
        while gate.read(COPY_BUF):
            pass
        proc.stdin.close()


TAR_FLAGS = ["--no-same-owner", "--no-same-permissions", "--keep-old-files"]


def scan(raw: IO[bytes], compression: str) -> tuple[int, int]:
    """Validate a whole tarball without writing anything; return (members, bytes of file data).

    Run once where the tarball is (rank 0, the ssh head), and remembered by its sha256: every node that
    receives bytes with that digest then extracts them at C speed, checking the digest as they stream.
    """
    guard = _Guard(Path("/"))
    try:
        with tarfile.open(fileobj=decompressed(raw, compression), mode="r|", bufsize=STREAM_BUF) as tf:
            for m in tf:
                guard.check(m)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise AgptError(f"not a readable tarball: {exc}") from exc
    guard.finish()
    return guard.count, guard.nbytes


def safe_extract(raw: IO[bytes], root: Path, compression: str) -> tuple[int, int]:
    """Extract a tar stream into ROOT; return (members, bytes of file data).

    Every header is validated here before `tar` sees it, always: no earlier verdict (a cache sidecar, a
    digest from another node) can switch the checks off, since whoever can write beside SRC can forge those.
    """
    if shutil.which("tar") is None:
        raise AgptError("extraction needs GNU tar on PATH")
    try:
        guard = _Guard(root)
        _tar_extract(raw, root, compression, guard)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise AgptError(f"corrupt tarball stream: {exc}") from exc
    guard.finish()
    return guard.count, guard.nbytes
