"""Helpers for the observability tests: a run directory made by the real failover loop, Debian's headless
chromium, and the readers of the formats under test (TensorBoard's own event reader, the Prometheus parser,
W&B's record log)."""

from __future__ import annotations

import fcntl
import os
import pty
import shutil
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path
from typing import Any

from conftest import BIN, ROOT, agpt_env

# Debian's chromium, as the issue asks for: no GPU, no network, a fresh profile per call.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def loop_job(
    tmp: Path, run: Path, command: str, *, hosts: int, spares: int, timeouts: str = "15 30 1"
) -> Path:
    """A job script: lib/failover.sh's loop, job id j1, over hosts h1..hN (`spares` of them spare) running
    `command` (failover_run's words); `timeouts`: idle, start-up and grace seconds of the watchdog."""
    idle, startup, grace = timeouts.split()
    (tmp / "alloc").write_text("".join(f"h{i}\n" for i in range(1, hosts + 1)))
    job = tmp / "job.sh"
    job.write_text(f"""set -euo pipefail
source '{ROOT}/lib/failover.sh'
export AGPT_RUN_DIR='{run}'
FAILOVER_HOSTS_FROM='{tmp / "alloc"}' FAILOVER_SPARES={spares} FAILOVER_BACKOFF=0 FAILOVER_RESOLVE_TIMEOUT=0
FAILOVER_IDLE_TIMEOUT={idle} FAILOVER_STARTUP_TIMEOUT={startup} FAILOVER_GRACE={grace} FAILOVER_JOBID=j1
failover_run '{ROOT}/tests/fixtures/fake_launch.sh' {command}
""")
    return job


def loop_run(tmp: Path, *, faults: str = "die@5:h2", steps: int = 12) -> Path:
    """A run directory written by lib/failover.sh around the fake trainer (tests/fixtures): 6 hosts, 2 spares."""
    run = tmp / "run"
    trainer = (
        f"python3 '{ROOT}/tests/fixtures/fake_trainer.py' --steps {steps} --step-time 0.05 --ckpt-interval 2"
    )
    job = loop_job(tmp, run, trainer, hosts=6, spares=2)
    r = subprocess.run(["bash", str(job)], env=agpt_env({"FAKE_TRAINER_FAULTS": faults}), capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return run


def agpt(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "agpt"), *args], env=agpt_env(env), capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "Debian's chromium is not installed: run `make setup` (bin/agpt-setup installs it)"
    return exe


def browse(page: Path, tmp: Path) -> tuple[str, Path]:
    """The page's DOM after its load event, and a screenshot of it, from headless chromium."""
    shot = tmp / "shot.png"
    base = [chromium(), *CHROMIUM_FLAGS, "--virtual-time-budget=10000"]
    env = {**os.environ, "HOME": str(tmp)}
    dom = subprocess.run([*base, f"--user-data-dir={tmp / 'profile-dom'}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-2000:]
    r = subprocess.run([*base, f"--user-data-dir={tmp / 'profile-shot'}", f"--screenshot={shot}",
                        "--window-size=1280,2400", page.as_uri()], capture_output=True, text=True, timeout=120,
                       env=env)  # fmt: skip
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    return dom.stdout, shot


def ink(png: Path) -> float:
    """The share of a screenshot's pixels that are not the page's white background."""
    from PIL import Image

    img = Image.open(png).convert("L")
    hist = img.histogram()
    return 1 - sum(hist[245:]) / (img.width * img.height)


def tb_events(logdir: Path) -> Any:
    """TensorBoard's own reader (event_accumulator) over a log directory, every record kept."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    return acc


def tb_texts(acc: Any, tag: str = "events") -> list[tuple[int, str]]:
    key = f"{tag}/text_summary"
    if key not in acc.Tags()["tensors"]:
        return []
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(key)]


def prom_families(text: str) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def prom_values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, labels without `run`) -> value."""
    out = {}
    for fam in prom_families(text).values():
        for s in fam.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "run"))
            out[(s.name, labels)] = s.value
    return out


def wandb_records(path: Path) -> list[Any]:
    """The records of a W&B `.wandb` file: a `:W&B` header (4 bytes, magic 0xBEE1, version 0), then LevelDB's
    log format, 32 KiB blocks of CRC, length, type, data (https://github.com/google/leveldb/blob/main/doc/
    log_format.md), each record a `wandb_internal_pb2.Record`."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:8]
    block, pos, parts, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        frag = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0:
            break
        parts = frag if kind in (1, 2) else parts + frag
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(parts)
            out.append(rec)
    return out


def on_a_terminal(argv: list[str], env: dict[str, str], *, interrupt_after: float | None = None) -> str:
    """Run argv with stdout and stderr on a pseudo-terminal of 120 columns (Ctrl-C after `interrupt_after`
    seconds); everything it drew.  It must exit 0."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    # Ctrl-C at its default in the child: a suite started in the background (`tests/run &`, nohup) ignores
    # SIGINT, the child would inherit that, never stop and hang the test.
    p = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, env=env, close_fds=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    os.close(child)
    if interrupt_after is not None:
        time.sleep(interrupt_after)
        p.send_signal(signal.SIGINT)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        out += chunk
    assert p.wait(timeout=120) == 0, out.decode(errors="replace")
    os.close(main)
    return out.decode(errors="replace")
