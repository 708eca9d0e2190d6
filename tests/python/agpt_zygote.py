"""A fork server for the trainer tests: torch and the trainer imported once, each rank forked.

Starting a rank of `agpt train` costs about 3 CPU-seconds on the test machine, nearly all of it importing torch
and its distributed packages (FSDP2, DTensor, sympy); the tiny model's ten steps cost under one.  The trainer
tests start a few hundred ranks, on 2 shared cores.  Here a server imports what `agpt train` imports, once per
pytest process, and each rank is a fork of it:

  server  `python agpt_zygote.py serve SOCKET`: imports, then listens on a Unix socket; for each request it
          forks a child that takes the client's argv, environment, working directory and standard streams
          (passed over the socket) and runs `python -m agpt ARGS` in-process; it reports the child's end.
  client  `python -S agpt_zygote.py agpt ARGS`: what mpiexec (or the test) starts as the rank: a small process
          (no torch) that sends its request, forwards the signals it gets to the child (TERM, INT, HUP, USR1,
          USR2) and ends as the child ended (its exit status, or killed by its signal).  A client killed outright
          (kill -9, as the tests kill ranks) takes its child with it: the child holds the read end of a pipe whose
          only writer is the client, and kills itself with SIGKILL when it reads end-of-file; the server, which
          sees the client's connection close, kills it too (a child stopped with SIGSTOP reads nothing).
          `python -S agpt_zygote.py -m MODULE ARGS` runs `python -m MODULE ARGS` the same way (the health probe).
          FOLDER/pids/CLIENT_PID (FOLDER: the socket's) holds the child's pid while it runs.

On the local Slurm cluster the ranks are started by bin/agpt in a job script, under srun: there the tests set
AGPT_PYTHON, the interpreter bin/agpt runs, to `zygote-python` beside this file, which makes a client of
`python -m agpt train ...` and `python -m agpt.probe ...` and runs everything else (the failover loop's own
Python, the recovery path) with the venv's python itself.  A drill that must act on the rank itself (a SIGSTOP,
a kill -9) maps the client that srun started to its rank through FOLDER/pids (tests/cluster/chaoslib.py's
`ranks`, tests/cluster/node's `fail`); a node failure kills the client, and the rank with it.

What differs from a plain start, and why it does not matter to what the tests assert: the training process is
the server's child, not mpiexec's (the tests find and kill ranks through the clients, which mpiexec started);
`os.getppid()` in the child answers the client's parent (the launcher proxy), as it would for a plain rank
(agpt.train.dist derives its default port from it); modules are imported before the test's environment is set
(the trainer reads its settings at run time, not at import).  Tests that stop a rank with SIGSTOP, or that are
about the start itself, launch plainly (train_util's `plain=True`, or AGPT_TEST_ZYGOTE=0 for everything).
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import struct
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_HEADER = struct.Struct("!I")


def _send(conn: socket.socket, data: bytes, fds: list[int] | None = None) -> None:
    msg = _HEADER.pack(len(data)) + data
    if fds:
        conn.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        conn.sendall(msg)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _recv_body(conn: socket.socket) -> bytes:
    (n,) = _HEADER.unpack(_recv_exact(conn, _HEADER.size))
    return _recv_exact(conn, n)


# --- client ----------------------------------------------------------------------------------------------------
def _agpt_env() -> dict[str, str]:
    """This process's environment with what bin/agpt exports before it runs `python -m agpt`."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["AGPT_HOME"] = root
    env["PYTHONPATH"] = os.path.join(root, "python") + (
        ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env.setdefault("AGPT_PYTHON", sys.executable)
    venv_bin = os.path.dirname(sys.executable)
    if venv_bin not in env.get("PATH", "").split(":"):
        env["PATH"] = venv_bin + ":" + env.get("PATH", "")
    return env


def client(args: list[str]) -> int:
    """ARGS: `agpt ARGS...` (`python -m agpt ARGS...`) or `-m MODULE ARGS...` (`python -m MODULE ARGS...`)."""
    module = "agpt"
    if args[:1] == ["-m"] and len(args) > 1:
        module, args = args[1], args[1:]
    path = os.environ.get("AGPT_TEST_ZYGOTE", "")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError as e:
        sys.stderr.write(f"agpt_zygote: cannot reach the fork server at {path!r}: {e}\n")
        return 1
    life_r, _life_w = os.pipe()  # the write end stays open as long as this process lives
    request = {"module": module, "argv": args, "env": _agpt_env(), "cwd": os.getcwd(), "ppid": os.getppid()}
    _send(conn, json.dumps(request).encode(), [0, 1, 2, life_r])
    os.close(life_r)
    try:
        pid = int(_recv_body(conn))
    except (EOFError, ValueError, OSError):
        sys.stderr.write("agpt_zygote: the fork server did not start the rank\n")
        return 1
    # Which process this client stands for, for tools that find ranks by their launcher (tests/cluster's
    # chaoslib and `node fail`): FOLDER/pids/CLIENT_PID holds the rank's pid.
    mark = os.path.join(os.path.dirname(path), "pids", str(os.getpid()))
    try:
        with open(mark, "w") as fh:
            fh.write(f"{pid}\n")
    except OSError:
        mark = ""

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for s in FORWARDED:
        signal.signal(s, forward)
    try:
        how, _, value = _recv_body(conn).decode().partition(" ")
    except (EOFError, OSError):
        sys.stderr.write("agpt_zygote: lost the fork server\n")
        return 1
    finally:
        if mark:
            try:
                os.unlink(mark)
            except OSError:
                pass
    if how == "signal":
        sig = int(value)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two keep their default action (EINVAL to set)
            signal.signal(sig, signal.SIG_DFL)
        # end as the rank ended: srun then says `task N: Killed`, not `Exited with exit code 1`
        os.kill(os.getpid(), sig)
        return 128 + sig
    return int(value)


# --- server ----------------------------------------------------------------------------------------------------
def _preload() -> None:
    """What `agpt train` and `agpt smoke` import, at start and lazily at run time."""
    import torch._dynamo  # noqa: F401  (DTensor's constructor imports it on first use)

    import agpt.cli
    import agpt.train.entry
    import agpt.train.run
    import agpt.train.smoke
    import agpt.train.trainer  # noqa: F401

    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        pass


def _child(req: dict, fds: list[int], closing: list[int]) -> None:
    """In the forked child: become the rank the client asked for, run it, never return."""
    code = 1
    try:
        for fd in set(closing):  # the server's sockets: the client's end-of-file must not wait on this child
            try:
                os.close(fd)
            except OSError:
                pass
        for s in (*FORWARDED, signal.SIGCHLD):
            signal.signal(s, signal.SIG_DFL)
        for target, fd in zip((0, 1, 2), fds[:3], strict=True):
            os.dup2(fd, target)
            os.close(fd)
        life = fds[3]

        def watch_life() -> None:
            while True:
                try:
                    if not os.read(life, 1):
                        break
                except InterruptedError:
                    continue
            os.kill(os.getpid(), signal.SIGKILL)  # the client is gone: so is this rank

        import threading

        threading.Thread(target=watch_life, name="agpt-zygote-life", daemon=True).start()
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        ppid = int(req["ppid"])
        os.getppid = lambda: ppid  # type: ignore[assignment]  # the launcher proxy, as for a plain rank
        import runpy

        module = str(req.get("module", "agpt"))
        sys.argv = [module, *req["argv"][1:]]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, int | None):
                sys.stderr.write(f"{e.code}\n")
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def serve(path: str) -> None:
    import selectors
    import threading

    _preload()
    if threading.active_count() != 1:  # forking a process that has other threads is not safe
        sys.stderr.write(f"agpt_zygote: {threading.active_count()} threads after the imports; not serving\n")
        sys.exit(1)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    os.makedirs(os.path.join(os.path.dirname(path), "pids"), exist_ok=True)
    listener.bind(path)
    listener.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    conns: dict[int, socket.socket] = {}  # fd -> client connection
    waiting: dict[int, socket.socket] = {}  # child pid -> its client's connection
    # A running child's client connection, watched: the client sends nothing after its request, so it turns
    # readable only when the client is gone.  The child is then killed here, as well as by its own end-of-file
    # watch: a child stopped with SIGSTOP (the hang drills) cannot read its end-of-file, and SIGKILL ends it.
    watched: dict[int, int] = {}  # connection fd -> child pid
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in sel.select(timeout=0.05):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if sock is listener:
                conn, _ = listener.accept()
                conns[conn.fileno()] = conn
                sel.register(conn, selectors.EVENT_READ)
                continue
            if sock.fileno() in watched:  # the client of a running child is gone
                sel.unregister(sock)
                try:
                    os.kill(watched.pop(sock.fileno()), signal.SIGKILL)
                except ProcessLookupError:
                    pass
                continue
            pid = _serve_one(sock, [listener.fileno(), *conns, *(c.fileno() for c in waiting.values())])
            sel.unregister(sock)
            conns.pop(sock.fileno(), None)
            if pid is None:
                sock.close()
            else:
                waiting[pid] = sock
                watched[sock.fileno()] = pid
                sel.register(sock, selectors.EVENT_READ)
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is None:
                continue
            if watched.pop(conn.fileno(), None) is not None:
                sel.unregister(conn)
            if os.WIFSIGNALED(status):
                msg = f"signal {os.WTERMSIG(status)}"
            else:
                msg = f"exit {os.waitstatus_to_exitcode(status)}"
            try:
                _send(conn, msg.encode())
            except OSError:
                pass
            conn.close()


def _serve_one(conn: socket.socket, closing: list[int]) -> int | None:
    """Read one request and fork its rank; the child's pid, or None when the request was bad."""
    try:
        fds = array.array("i")
        raw, anc, _flags, _addr = conn.recvmsg(_HEADER.size, socket.CMSG_SPACE(4 * fds.itemsize))
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
        if len(raw) < _HEADER.size:
            raw += _recv_exact(conn, _HEADER.size - len(raw))
        (n,) = _HEADER.unpack(raw)
        req = json.loads(_recv_exact(conn, n))
    except (OSError, EOFError, ValueError):
        return None
    if len(fds) != 4:
        for fd in fds:
            os.close(fd)
        return None
    pid = os.fork()
    if pid == 0:
        _child(req, list(fds), [*closing, conn.fileno()])
    for fd in fds:
        os.close(fd)
    try:
        _send(conn, str(pid).encode())
    except OSError:
        pass
    return pid


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        sys.exit(client(sys.argv[1:]))
