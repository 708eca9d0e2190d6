"""Safe streaming extraction into `DEST.tmp.<id>`, and the atomic replace of DEST.

Why so careful: a tarball is input from the filesystem, and it is unpacked on every node of a job, often as a
user whose home and keys sit on the same machine.  So the whole archive is refused (not just the bad member)
when an entry has an absolute path or `..`, is a device or fifo, would be written through a symlink, or is a
link that points outside the tree.  The one exception is the interpreter link a venv's `bin/python*` holds to
its base Python, without which no venv works.

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
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from agpt.errors import AgptError, BadInput

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


def check_dest(dest: Path) -> None:
    """Refuse a DEST we could not safely replace; create its parent when missing."""
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
    """Checks each member before it is written; remembers the real directories it has seen."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dirs: set[str] = {""}

    def _no_symlink_parents(self, rel: str, what: str) -> None:
        parent = posixpath.dirname(rel)
        chain: list[str] = []
        while parent not in self.dirs:
            chain.append(parent)
            parent = posixpath.dirname(parent)
        for d in reversed(chain):
            try:
                st = os.lstat(self.root / d)
            except FileNotFoundError:
                return  # tarfile creates it as a real directory
            if not stat.S_ISDIR(st.st_mode):
                raise UnsafeArchive(f"{what} {rel!r} goes through {d!r}, which is not a directory")
            self.dirs.add(d)

    def make_parent(self, rel: str) -> None:
        parent = posixpath.dirname(rel)
        if parent not in self.dirs:
            os.makedirs(self.root / parent, mode=0o755, exist_ok=True)
            while parent not in self.dirs:
                self.dirs.add(parent)
                parent = posixpath.dirname(parent)

    def check(self, m: tarfile.TarInfo) -> str:
        rel = _normalize(m.name)
        if not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
            raise UnsafeArchive(f"device, fifo or special file {m.name!r}")
        if rel == "":
            if not m.isdir():
                raise UnsafeArchive(f"entry {m.name!r} would replace the destination itself")
            return rel
        self._no_symlink_parents(rel, "entry")
        target = self.root / rel
        if os.path.lexists(target) and not (m.isdir() and target.is_dir() and not target.is_symlink()):
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
        if m.islnk():
            link_rel = _normalize(m.linkname)
            self._no_symlink_parents(link_rel, "hard link target")
        if m.isdir():
            self.dirs.add(rel)
        return rel


def _sanitize(m: tarfile.TarInfo, rel: str) -> tarfile.TarInfo:
    """Owners are dropped (files belong to whoever stages them); setuid/sticky/group-write bits too."""
    mode = m.mode & 0o755
    if m.isdir():
        mode |= 0o700
    elif m.isreg():
        mode |= 0o600
    return m.replace(name=rel, mode=mode, uid=None, gid=None, uname=None, gname=None, deep=False)  # type: ignore[arg-type]


def open_tar_stream(raw: IO[bytes], compression: str) -> tarfile.TarFile:
    """A stream-mode TarFile over RAW (zstd via zstandard; gzip and plain tar via tarfile)."""
    if compression == "zstd":
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_size=COPY_BUF)
        return tarfile.open(fileobj=reader, mode="r|", bufsize=STREAM_BUF)
    if compression == "gzip":
        return tarfile.open(fileobj=raw, mode="r|gz", bufsize=STREAM_BUF)
    return tarfile.open(fileobj=raw, mode="r|", bufsize=STREAM_BUF)


FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
SMALL_FILE = 4 << 20  # files up to this size are read whole and written by the pool
IN_FLIGHT = 64 << 20  # bytes read but not yet written, at most


def _write(path: Path, chunks: Iterable[bytes], mode: int, mtime: float) -> None:
    """Create one regular file exclusively (O_EXCL|O_NOFOLLOW: never through a link, never twice).

    fd-based mode and times, no chown; mtimes are kept because Python checks each `.pyc` against its
    source's mtime, and without them every import on the node would recompile.
    """
    fd = os.open(path, FLAGS, 0o600)
    try:
        for data in chunks:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
        os.utime(fd, (mtime, mtime))
    finally:
        os.close(fd)


def _chunks(src: IO[bytes]) -> Iterator[bytes]:
    while data := src.read(COPY_BUF):
        yield data


class _Writers:
    """Small files go to a few threads: creating a file costs a metadata round trip (the GIL is released
    while the kernel works), so several in flight keep the disk busy while this thread parses headers."""

    def __init__(self, n: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="yeet-write") if n > 1 else None
        self.budget = threading.BoundedSemaphore(IN_FLIGHT // SMALL_FILE)
        self.futures: list[Future[None]] = []

    def submit(self, path: Path, data: bytes, mode: int, mtime: float) -> None:
        if self.pool is None:
            _write(path, [data], mode, mtime)
            return
        self.budget.acquire()
        fut = self.pool.submit(_write, path, [data], mode, mtime)
        fut.add_done_callback(lambda _f: self.budget.release())
        self.futures.append(fut)
        if len(self.futures) > 4096:
            self.flush()

    def flush(self) -> None:
        """Wait for every pending write (before a hard link to one of them, and at the end)."""
        futures, self.futures = self.futures, []
        for fut in futures:
            fut.result()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def safe_extract(raw: IO[bytes], root: Path, compression: str, *, writers: int = 4) -> tuple[int, int]:
    """Extract a tar stream into ROOT refusing unsafe entries; return (members, bytes of file data)."""
    guard = _Guard(root)
    count = nbytes = 0
    try:
        tf = open_tar_stream(raw, compression)
    except tarfile.TarError as exc:
        raise AgptError(f"not a readable tarball: {exc}") from exc
    tf.copybufsize = COPY_BUF  # type: ignore[attr-defined]
    tf.errorlevel = 2  # every extraction error is fatal: a half tree must never look finished
    pool = _Writers(writers)
    try:
        for m in tf:
            rel = guard.check(m)
            count += 1
            if rel == "":
                continue
            clean = _sanitize(m, rel)
            if m.isreg():
                guard.make_parent(rel)
                src = tf.extractfile(m)
                if src is None:
                    raise UnsafeArchive(f"entry {m.name!r} has no data")
                if m.size <= SMALL_FILE:
                    pool.submit(root / rel, src.read(), clean.mode, m.mtime)
                else:
                    _write(root / rel, _chunks(src), clean.mode, m.mtime)
                nbytes += m.size
            else:
                if m.islnk():
                    pool.flush()
                tf.extract(clean, path=str(root), set_attrs=True, filter="fully_trusted")
        pool.flush()
    except (tarfile.TarError, EOFError) as exc:
        raise AgptError(f"corrupt tarball stream: {exc}") from exc
    except FileExistsError as exc:
        raise UnsafeArchive(f"entry {exc.filename!r} appears twice") from exc
    finally:
        pool.close()
        tf.close()
    verify_links(root)
    return count, nbytes


def verify_links(root: Path) -> None:
    """A last pass: every symlink must resolve inside ROOT (links through links can fool a lexical check)."""
    real_root = os.path.realpath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                continue
            rel = os.path.relpath(path, root)
            if INTERPRETER_LINK.match(rel):
                continue  # bin/python -> python3 -> /usr/bin/python3: the venv exemption, a leaf
            real = os.path.realpath(path)
            if real != real_root and not real.startswith(real_root + os.sep):
                raise UnsafeArchive(f"symlink {rel!r} -> {os.readlink(path)!r} resolves outside DEST")
