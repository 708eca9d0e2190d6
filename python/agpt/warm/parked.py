"""One parked training process: torch and the trainer imported, the config parsed, waiting for its assignment.

Started by the agent (agpt.warm.agent) as a fresh interpreter, never forked from one that imported torch.  It
touches no device before it is assigned.  On a claim it checks the claimer (same uid), the venv digest, the
command (only `agpt train` runs warm) and that the rank is not already held on this node; a refusal is one JSON
line with the reason and it keeps waiting.  Accepted, it tells the agent (which parks a replacement at once),
takes the claim's stdin/stdout/stderr, environment, working directory and argv, and runs `agpt train` as that
rank; it kills itself when the claim goes away (the launcher's teardown) and sends its exit code back before it
exits.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from agpt import nodelocal, numeric, rundir
from agpt.warm import common

HELD_WAIT_S = 10.0  # how long a claim may take to send its assignment


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agpt warm parked")
    ap.add_argument("--slot", type=numeric.flag("--slot", lo=0, integer=True), required=True)
    ap.add_argument(
        "--notify-fd",
        type=numeric.flag("--notify-fd", lo=-1, integer=True),
        default=-1,
        help="the agent's pipe: 'ready' and 'assigned' lines",
    )
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    t0 = time.time()
    run_dir = os.environ.get("AGPT_RUN_DIR", "")
    host = nodelocal.host_name()
    # The heavy part, before any claim: what a cold rank pays at every launch.
    import torch  # noqa: F401

    import agpt.cli.train
    import agpt.train.run
    import agpt.train.trainer  # noqa: F401

    _preparse(cmd)
    warm = _warmup(cmd)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(common.address(run_dir, host, args.slot))
    except OSError as e:
        print(f"agpt warm: slot {args.slot} on {host}: cannot listen ({e.strerror}): another parked process holds it",
              file=sys.stderr, flush=True)  # fmt: skip
        return 3
    sock.listen(8)
    digest = common.venv_digest()
    _notify(args.notify_fd, "ready")
    print(f"agpt warm: slot {args.slot} on {host} parked (pid {os.getpid()}), torch and the trainer imported and "
          f"{warm} in {time.time() - t0:.1f} s", file=sys.stderr, flush=True)  # fmt: skip
    while True:
        conn, _ = sock.accept()
        assigned = _claim(conn, digest=digest, run_dir=run_dir, host=host, slot=args.slot)
        if assigned is None:
            conn.close()
            continue
        msg, fds = assigned
        sock.close()  # the slot's name is free for the replacement the agent parks now
        _notify(args.notify_fd, "assigned")
        if args.notify_fd >= 0:
            os.close(args.notify_fd)
        _run(conn, msg, fds)  # never returns


def _preparse(cmd: list[str]) -> None:
    """Parse the config the job will train (warms the YAML and config modules); a bad one is the claim's to say."""
    if "--config" in cmd[:-1]:
        try:
            from agpt.train.config import load_config

            load_config(cmd[cmd.index("--config") + 1], [])
        except Exception:  # the real launch reports it, with its own environment
            pass


# The warm-up's model: the job's config with the model and batch made tiny (the same classes, dtypes, FSDP and
# optimizer code paths; a 20B model would not fit a CPU rank), on the CPU in a process group of one.
WARMUP_SETS = ("model.dim=64", "model.n_layers=1", "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_dim=172",
               "model.vocab_size=512", "model.max_seq_len=64", "train.seq_len=64", "train.global_batch=2",
               "train.micro_batch=2", "train.steps=1", "train.device=cpu", "data.synthetic=true", "eval.interval=0")  # fmt: skip


def _warmup(cmd: list[str]) -> str:
    """One tiny training step on the CPU in a process group of one, then the group destroyed: torch's first-call
    paths (FSDP's wrapping, DTensor, the optimizer, autograd) run here, before the claim, not in the rank's model
    build and first step (0.8 s -> 0.02 s and 0.37 s -> 0.05 s for the tiny model on this page's machine).  The
    device is never touched.  What it did, for the agent's log; a failure only skips it."""
    if "--config" not in cmd[:-1]:
        return "no warm-up (no --config)"
    import contextlib
    import io
    import socket as sk

    import torch.distributed as dist

    from agpt.train.config import load_config
    from agpt.train.trainer import Trainer

    saved = dict(os.environ)
    drop = (*rundir.RANK_VARS, *rundir.LOCAL_RANK_VARS, *rundir.LOCAL_SIZE_VARS,
            *(w for _, w in rundir.RANK_SIZE_VARS), rundir.PMIX_RANK, "AGPT_RUN_DIR")  # fmt: skip
    t0 = time.time()
    try:
        for v in drop:
            os.environ.pop(v, None)
        with sk.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), AGPT_HEARTBEAT="0")  # fmt: skip
        cfg = load_config(cmd[cmd.index("--config") + 1], list(WARMUP_SETS))
        with contextlib.redirect_stdout(io.StringIO()):
            Trainer(cfg, None, checkpoints=False).run()
        return f"warmed up (one tiny step on the CPU, {time.time() - t0:.1f} s)"
    except Exception as e:  # the real launch meets the same config and says what is wrong with it
        return f"no warm-up ({type(e).__name__}: {str(e)[:120]})"
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        for num in (signal.SIGTERM, signal.SIGUSR1):  # the warm-up's trainer took them
            signal.signal(num, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(saved)


def _notify(fd: int, what: str) -> None:
    if fd >= 0:
        try:
            os.write(fd, f"{what} {os.getpid()}\n".encode())
        except OSError:
            pass


def _held(run_dir: str, host: str, env: dict[str, str]) -> str | None:
    """Take this rank of this attempt on this node (a file made O_EXCL); the reason when another live process
    holds it."""
    rank = next((env[v] for v in rundir.RANK_VARS if env.get(v, "").isdigit()), None)
    if rank is None:
        return None
    attempt = env.get("AGPT_ATTEMPT_ID", "-")
    d = nodelocal.private_dir(
        nodelocal.folder(nodelocal.base(env.get("SITE_LOCAL_CKPT_DIR")), "warm", run_dir or ".", host)
    )
    path = d / f"held.{attempt}.{rank}".replace("/", "_")
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            try:
                pid = int(path.read_text().strip() or "0")
            except (OSError, ValueError):
                pid = 0
            if pid and Path(f"/proc/{pid}").exists():
                return f"rank {rank} of attempt {attempt} is already held on {host} by pid {pid}"
            path.unlink(missing_ok=True)  # its holder is gone
            continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return None
    return f"rank {rank} of attempt {attempt}: cannot take {path}"


def _claim(conn: socket.socket, *, digest: str, run_dir: str, host: str, slot: int,
           ) -> tuple[dict[str, object], list[int]] | None:  # fmt: skip
    """The claim's assignment when it is accepted; None after a refusal (said to the claim)."""
    fds: list[int] = []

    def refuse(reason: str) -> None:
        for fd in fds:
            os.close(fd)
        try:
            common.send(conn, {"ok": False, "reason": reason})
        except OSError:
            pass

    try:
        if common.peer_uid(conn) != os.getuid():
            refuse("another user's claim")
            return None
        conn.settimeout(HELD_WAIT_S)
        msg, fds = common.recv(conn, bytearray(), maxfds=3)
        conn.settimeout(None)
    except (OSError, ValueError) as e:
        refuse(f"unreadable assignment ({e})")
        return None
    if msg is None or len(fds) != 3:
        refuse("the assignment came without its stdin, stdout and stderr")
        return None
    env, argv = msg.get("env"), msg.get("argv")
    if msg.get("protocol") != common.PROTOCOL or not isinstance(env, dict) or not isinstance(argv, list):
        refuse(f"not an assignment of protocol {common.PROTOCOL}")
        return None
    if msg.get("digest") != digest:
        refuse(f"venv digest {msg.get('digest')} differs from the parked process's {digest} "
               f"({os.path.realpath(sys.executable)})")  # fmt: skip
        return None
    if len(argv) < 2 or os.path.basename(str(argv[0])) != "agpt" or argv[1] != "train":
        refuse(f"only `agpt train` runs warm, not {' '.join(map(str, argv[:2]))!r}")
        return None
    if str(env.get("AGPT_RUN_DIR", "")) != run_dir:
        refuse(f"run directory {env.get('AGPT_RUN_DIR')!r} is not the parked process's {run_dir!r}")
        return None
    why = _held(run_dir, host, {str(k): str(v) for k, v in env.items()})
    if why is not None:
        refuse(why)
        return None
    common.send(conn, {"ok": True, "pid": os.getpid(), "slot": slot})
    return msg, fds


def _run(conn: socket.socket, msg: dict[str, object], fds: list[int]) -> None:
    """Become the rank: its stdio, environment, directory and argv; `agpt train` as the launcher would run it."""
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    env = {str(k): str(v) for k, v in dict(msg["env"]).items()}  # type: ignore[call-overload]
    env["AGPT_WARM_STARTED"] = str(msg.get("started") or time.time())  # the recovery clock's process start
    os.environ.clear()
    os.environ.update(env)
    try:
        os.chdir(str(msg.get("cwd") or "/"))
    except OSError:
        pass
    argv = [str(a) for a in msg["argv"]]  # type: ignore[attr-defined]
    sys.argv = argv
    real_exit = os._exit

    def exit_with(code: int) -> None:  # the claim learns the exit code, then we go
        try:
            common.send(conn, {"exit": int(code)})
        except OSError:
            pass
        real_exit(code)

    os._exit = exit_with  # type: ignore[assignment]

    def watch_claim() -> None:  # the claim gone (the launcher's teardown): nothing is left to train for
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch_claim, name="agpt-warm-claim", daemon=True).start()
    import agpt.cli.train

    try:
        agpt.cli.train.cli.main(args=argv[2:], prog_name="agpt train")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    exit_with(code)


if __name__ == "__main__":
    raise SystemExit(main())
