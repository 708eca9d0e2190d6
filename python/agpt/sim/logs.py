"""Small attempt logs in each launcher's format, for the real classifier to read.

Each log holds what the classifier needs and what a real one around the failure holds: the resume line, the first
and last progress lines, and the failure's lines as the launcher prints them (the formats of the corpus in
tests/fixtures/logs: PALS `HOST: ...` prefixes on Aurora/Polaris, `srun --label` `R: ...` on Slurm machines).
The host names follow each machine's scheme: Aurora's `x4102c5s2b0n0`, a Cray EX Slurm machine's `nid001234`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agpt import rundir


def host_names(n: int, launcher: str) -> list[str]:
    """`n` host names in the launcher's machine scheme (each unique)."""
    if launcher == "srun":
        return [f"nid{i + 1:06d}" for i in range(n)]
    # Aurora: racks x4000.., 8 chassis, 8 slots, 2 blades (the fixtures' x4102c5s2b0n0 shape)
    return [f"x{4000 + i // 128}c{(i // 16) % 8}s{(i // 2) % 8}b{i % 2}n0" for i in range(n)]


def _step_line(step: int, label: str) -> str:
    return f"{label}step={step} loss=2.9134 grad_norm=0.412 lr=2.9e-04 tps=5120.3 stall_ms=0.0"


def write(
    path: Path,
    *,
    launcher: str,
    kind: str,
    hosts: Sequence[str],
    bad: str | None,
    resumed: int | None,
    first: int | None,
    last: int | None,
    local_tier: bool = False,
) -> int:
    """Write one attempt's log; returns the exit status the launcher gives for it.  LOCAL_TIER: the trainer's
    local checkpoint tier is on, and rank 0's line says so before the first step (rundir.LOCAL_TIER_ON).

    kind: node (a crash that names its host), hang (silence, then the watchdog), crash (a rank killed, no host
    named), system (the filesystem fails), app (NaN loss on every rank), deadline (the trainer saved before the
    deadline and asked to be resubmitted), done, unreadable (a failure whose lines the classifier does not know:
    only the launcher's notice that rank 0 exited with an error is legible, so it reads as a crash that names
    nobody, and the watch ends the attempt on that notice: the `ends` patterns), app_error
    (a Python exception every rank raises, as a fault outside the job can make it, a data service that answers
    nothing: it reads as the application's).
    """
    srun = launcher == "srun"
    h0 = hosts[0]
    bad = bad or h0
    lab = "0: " if srun else ""
    out: list[str] = []
    if srun:
        out.append(f"+ srun -N {len(hosts)} --ntasks-per-node=1 --label agpt train --config run.yaml")
    else:
        out.append(f"Connected to tcp://{h0}:7919")
        out.append("Launching application 5f2c3a1e-8c5b-4f0e-9d6d-2f1d0a7c9e11")
    if local_tier:
        out.append(
            f"{lab}{rundir.LOCAL_TIER_ON}/dev/shm/agpt-0/ckpt.run.HOST, every - steps / 17.8 s, keeping 2"
        )
    if resumed:
        out.append(f"{lab}[agpt] resuming from ckpt/step-{resumed} (world_size={len(hosts)})")
    if first is not None and last is not None:
        out.append(_step_line(first, lab))
        if last != first:
            out.append(_step_line(last, lab))
    if kind not in ENDINGS:
        raise ValueError(f"unknown log kind {kind!r}")
    rc, rank = ENDINGS[kind], hosts.index(bad) if bad in hosts else 0
    if kind == "app_error":
        out += _app_error_lines(hosts, srun)
    out += (_srun_ending if srun else _pals_ending)(kind, h0, bad, rank, last)
    path.write_text("\n".join(out) + "\n")
    return rc


# The exit status the launcher gives for each way an attempt ends.
ENDINGS = {"node": 1, "hang": 124, "crash": 137, "system": 1, "app": 1, "unreadable": 1, "app_error": 1,
           "deadline": 75, "done": 0}  # fmt: skip
APP_ERROR = "ValueError: the data loader got an empty batch from shard 42 (0 of 4096 rows)"


def _app_error_lines(hosts: Sequence[str], srun: bool) -> list[str]:
    """The traceback's last lines on every rank (one rank per host here), rank 0's whole traceback first."""
    labels = [f"{i}: " for i in range(len(hosts))] if srun else [f"{h}: " for h in hosts]
    head = [f"{labels[0]}Traceback (most recent call last):",
            f'{labels[0]}  File "agpt/train/data.py", line 212, in next_batch']  # fmt: skip
    return head + [f"{lab}{APP_ERROR}" for lab in labels]


def _app_lines(lab: str, last: int | None) -> list[str]:
    step = (last or 0) + 1
    return [f"{lab}step={step} loss=nan grad_norm=nan lr=2.9e-04 tps=5120.3 stall_ms=0.0",
            f"{lab}agpt: error: non-finite loss at step {step}"]  # fmt: skip


def _deadline_line(lab: str, last: int | None) -> str:
    return lab + rundir.STOP_LINE.format(step=last, reason=rundir.RESUBMIT_REASON)


def _unreadable_line(lab: str, rank: int) -> str:
    return f"{lab}worker {rank}: fatal: unexpected condition 0x1f in the step loop"


def _srun_ending(kind: str, h0: str, bad: str, rank: int, last: int | None) -> list[str]:
    """How an attempt ends in `srun --label` output."""
    if kind == "node":
        return [f"srun: error: Node failure on {bad}",
                f"slurmstepd: error: *** STEP 123456.0 ON {h0} CANCELLED AT 2026-01-01T00:00:00 DUE TO NODE FAILURE ***",
                f"srun: error: {h0}: task 0: Killed"]  # fmt: skip
    if kind == "hang":
        return [f"srun: error: {h0}: task 0: Terminated"]
    if kind == "crash":
        return [f"srun: error: {bad}: task {rank}: Killed"]
    if kind == "system":
        return ["srun: error: Unable to create step for job 123456: Socket timed out on send/recv operation"]
    if kind == "app":
        return [*_app_lines("0: ", last), f"srun: error: {h0}: task 0: Exited with exit code 1"]
    if kind == "unreadable":
        # rank 0 exits with an error (its collective lost a peer), which srun reports: a line naming no culprit
        return [_unreadable_line("0: ", rank), f"srun: error: {h0}: task 0: Exited with exit code 1"]
    if kind == "app_error":
        return [f"srun: error: {h0}: task 0: Exited with exit code 1"]
    return [_deadline_line("0: ", last)] if kind == "deadline" else []


def _pals_ending(kind: str, h0: str, bad: str, rank: int, last: int | None) -> list[str]:
    """How an attempt ends in PALS `mpiexec` output (`HOST: ` prefixes)."""
    if kind == "node":
        return [f"{bad}: RuntimeError: level_zero backend failed with error: 20 (UR_RESULT_ERROR_DEVICE_LOST)",
                f"{bad}: rank {rank} exited with code 1", f"{h0}: rank 0 died from signal 15"]  # fmt: skip
    if kind == "hang":
        return [f"{h0}: rank 0 died from signal 15"]
    if kind == "crash":
        return [f"{bad}: rank {rank} died from signal 9"]
    if kind == "system":
        return [f"{h0}: dfuse: ERROR: daos_obj_fetch() failed: DER_TIMEDOUT(-1011): 'Time out'",
                f"{h0}: OSError: [Errno 5] Input/output error: '/tmp/dfuse/ckpt/step-{last or 0}/__0_0.distcp'",
                f"{h0}: rank 0 exited with code 1"]  # fmt: skip
    if kind == "app":
        return [*_app_lines("", last), f"{h0}: rank 0 exited with code 1"]
    if kind == "unreadable":
        return [_unreadable_line("", rank), f"{h0}: rank 0 exited with code 1"]
    if kind == "app_error":
        return [f"{h0}: rank 0 exited with code 1"]
    return [_deadline_line("", last)] if kind == "deadline" else []
